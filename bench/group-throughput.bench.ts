/**
 * Pings per second through one and through two router processes reading a JetStream backlog, and the CPU each
 * process spends per ping, against a local nats-server started here.
 *
 * `--processes` router processes (the command line, 10,000 fences; 1: all partitions, 2: 0-7 and 8-15) start on an
 * empty stream; then `--pings` pings (a seeded fleet of 10,000 devices, 50 to a message, 16 partitions, encoded
 * beforehand) are published as fast as the server acknowledges them, 1,000 messages at a time. The rate is taken between 10 % and 90 % of the pings processed (geofence_pings_processed_total of each
 * process's /metrics, summed), with each process's CPU (/proc/<pid>/stat) over the same span.
 *
 *   node dist/bench/group-throughput.bench.js [--pings 1000000] [--processes 1,2]
 *
 * Prints one JSON line per process count; writes bench/out/group-throughput.json.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { startNats } from './support/nats-server.js';
import { PartitionBatches } from './support/partition-batches.js';

const { values } = parseArgs({
  options: {
    pings: { type: 'string', default: '1000000' },
    processes: { type: 'string', default: '1,2' },
  },
});
const PINGS = Number(values.pings);
const PARTITIONS = 16;
const MAIN = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** Ticks per second of /proc stat times. */
const TICKS = 100;

/** CPU seconds of process `pid` so far (user + system). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

const dir = mkdtempSync(join(tmpdir(), 'bench-gthru-'));
const fencesPath = join(dir, 'fences.geojson');
writeFileSync(fencesPath, JSON.stringify(generateSyntheticCity({ seed: 1, fenceCount: 10_000 })));
const children: ChildProcess[] = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
const results: unknown[] = [];
for (const processes of values.processes.split(',').map(Number)) {
  const nats = await startNats();
  const nc = await connect({ servers: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
  // The messages, encoded before the routers start; published once they are up.
  const messages: { subject: string; data: Uint8Array }[] = [];
  const collect = { publish: (subject: string, data: Uint8Array) => messages.push({ subject, data }) };
  const batches = new PartitionBatches(collect as never, PARTITIONS, 50);
  const fleet = new Fleet({ seed: 3, devices: 10_000 });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 5 };
  for (let k = 0; k < PINGS; k++) {
    fleet.next(ping, Date.UTC(2026, 0, 1) + Math.floor(k / 10_000) * 5000);
    batches.add(ping);
  }
  batches.flush();
  const lists = processes === 1 ? ['all'] : ['0-7', '8-15'];
  const logs = lists.map(() => '');
  const procs = lists.map((partitions, i) => {
    const child = spawn(
      process.execPath,
      [
        MAIN,
        ...['--fences', fencesPath, '--state-dir', join(dir, `p${processes}-${i}`), '--no-listen'],
        ...['--admin', '127.0.0.1:0'],
        ...['--source', `jetstream://${nats.url.slice('nats://'.length)}/TEL`, '--partitions', partitions],
        ...['--checkpoint-interval-ms', '1000', '--max-devices', '65536'],
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    children.push(child);
    child.stderr!.setEncoding('utf8').on('data', (s: string) => (logs[i] += s));
    return child;
  });
  const adminPorts = (): (number | null)[] =>
    logs.map((l) => {
      const m = /admin http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(l);
      return m === null ? null : Number(m[1]);
    });
  while (adminPorts().some((p) => p === null)) await sleep(5);
  const ports = adminPorts() as number[];
  const processed = async (): Promise<number> => {
    let n = 0;
    for (const port of ports) {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      n += Number(/^geofence_pings_processed_total (\S+)$/m.exec(text)?.[1] ?? 0);
    }
    return n;
  };
  const js = jetstream(nc);
  const cpuPublisher0 = process.cpuUsage();
  const tPublish = performance.now();
  const publishing = (async () => {
    for (let i = 0; i < messages.length; i += 1000)
      await Promise.all(messages.slice(i, i + 1000).map((m) => js.publish(m.subject, m.data)));
  })();
  // The rate between 10 % and 90 % of the pings processed, and each process's CPU over the same span.
  while ((await processed()) < PINGS * 0.1) await sleep(10);
  const t10 = performance.now();
  const cpu10 = procs.map((c) => cpuSeconds(c.pid!));
  while ((await processed()) < PINGS * 0.9) await sleep(10);
  const spanMs = performance.now() - t10;
  const cpu = procs.map((c, i) => cpuSeconds(c.pid!) - cpu10[i]!);
  const pings = PINGS * 0.8;
  await publishing;
  const publishMs = performance.now() - tPublish;
  const publisherCpu = process.cpuUsage(cpuPublisher0);
  for (const c of procs) c.kill('SIGKILL');
  await nc.close();
  nats.stop();
  const cpuTotal = cpu.reduce((a, b) => a + b, 0);
  const row = {
    processes,
    pings: PINGS,
    pingsPerSec: Math.round(pings / (spanMs / 1000)),
    cpuUsPerPing: round((cpuTotal * 1e6) / pings),
    cpuSecondsPerProcess: cpu.map((c) => round(c)),
    coresBusy: round(cpuTotal / (spanMs / 1000)),
    publishedPerSec: Math.round(PINGS / (publishMs / 1000)),
    publisherCores: round((publisherCpu.user + publisherCpu.system) / 1000 / publishMs),
  };
  console.log(JSON.stringify(row));
  results.push(row);
}
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/group-throughput.json', `${JSON.stringify(results, null, 2)}\n`);
