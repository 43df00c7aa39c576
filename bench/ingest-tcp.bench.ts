/**
 * The ingest edge over real TCP from the separate load-generator process: the edge (one thread: framing, decode,
 * validation, registry, classification, a counting sink) against a fleet of 10,000 devices sent at a set rate.
 * Reports what the edge accepted per second while the generator ran, per encoding.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/ingest-tcp.bench.js [rate] [seconds]
 *
 * Writes bench/out/ingest-tcp.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ING_ACCEPTED_F64, ING_FRAMES_F64 } from '../src/shm/layout.js';
import { allocateDeviceIdTable, DeviceRegistry } from '../src/ingest/device-registry.js';
import { IngestEdge, type PingSink } from '../src/ingest/ingest-edge.js';
import { NO_COMPLIANCE } from '../src/ingest/lane-classifier.js';
import { allocatePipelineRegion, PipelineRegion } from '../src/shm/pipeline-region.js';
import { RejectLog } from '../src/ingest/reject-log.js';
import { TcpSource } from '../src/ingest/sources/tcp-source.js';

const rate = Number(process.argv[2] ?? 600_000);
const seconds = Number(process.argv[3] ?? 5);
let sink = 0;
const countingSink: PingSink = { offer: (f) => void (sink += f.lane) };

async function run(encoding: string): Promise<Record<string, unknown>> {
  const pipeline = PipelineRegion.wrap(allocatePipelineRegion(8));
  const registry = new DeviceRegistry(allocateDeviceIdTable(20_000, 32), 8);
  const log = new RejectLog({ intervalMs: 1000, nowMs: () => Date.now() });
  const edge = new IngestEdge(
    { sharedStructures: encoding === 'shared' },
    { pipeline, registry, predicates: NO_COMPLIANCE, sink: countingSink, log },
  );
  const source = new TcpSource({ host: '127.0.0.1', port: 0 });
  await source.start(edge);
  const script = fileURLToPath(new URL('./loadgen/loadgen.js', import.meta.url));
  const child = spawn(
    process.execPath,
    [
      script,
      '--port',
      String(source.port),
      '--rate',
      String(rate),
      '--seconds',
      String(seconds),
      '--encoding',
      encoding,
      '--connections',
      '4',
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  // Sample the accepted counter every 250 ms while the generator runs; the steady rate is the median interval.
  const rates: number[] = [];
  let last = 0;
  let lastT = performance.now();
  const timer = setInterval(() => {
    const a = pipeline.f64[ING_ACCEPTED_F64]!;
    const t = performance.now();
    if (a > 0 && last > 0) rates.push(((a - last) * 1000) / (t - lastT));
    last = a;
    lastT = t;
  }, 250);
  const t0 = performance.now();
  await new Promise<void>((resolve) => child.once('exit', () => resolve()));
  clearInterval(timer);
  // Let the last bytes in flight arrive.
  while (source.connectionCount > 0) await new Promise((r) => setTimeout(r, 5));
  const elapsedS = (performance.now() - t0) / 1000;
  await source.stop();
  const gen = JSON.parse(out.trim()) as { sent: number; achievedPerSec: number; elapsedS: number };
  const accepted = pipeline.f64[ING_ACCEPTED_F64]!;
  return {
    encoding,
    targetPerSec: rate,
    generatorAchievedPerSec: gen.achievedPerSec,
    sent: gen.sent,
    frames: pipeline.f64[ING_FRAMES_F64],
    accepted,
    medianAcceptedPerSec: Math.round(median(rates)),
    wallS: Number(elapsedS.toFixed(2)),
    allAccepted: accepted === gen.sent,
  };
}

function median(xs: number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const rows = [];
for (const encoding of ['maps', 'records', 'shared']) rows.push(await run(encoding));
console.table(rows);
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(
  new URL('../../bench/out/ingest-tcp.json', import.meta.url),
  `${JSON.stringify({ date: new Date().toISOString(), rate, seconds, rows }, null, 2)}\n`,
);
if (sink === -1) console.log('');
