/**
 * One ingest thread's whole path on this thread, as the router wires it (src/pipeline/ingest-path.ts): frame walk and
 * read, validation, device registry, lane classification against 10,000 fences, admission (watermarks, reserved
 * slice, token bucket) and the record write into the shard's telemetry ring; the shard scheduler paused (no
 * containment task), the rings emptied after each chunk as a consumer would. Pre-encoded frames of a seeded fleet of
 * 10,000 devices with string ids, replayed in 64 KiB chunks through one stream; every device is known before the
 * clock starts.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/ingest-path.bench.js [--pings 3000000] [--runs 3] [--forwarded]
 *
 * `--forwarded`: each chunk goes through a forwarded-input ring first (input-forwarding.ts: the copy ingest thread 0
 * makes for a connection it spreads to another ingest thread, and that thread's read), both ends on this thread, so
 * the difference to a plain run is what forwarding costs per ping in all.
 *
 * Prints pings/s per encoding and run (and the median), writes bench/out/ingest-path.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Piscina } from 'piscina';
import { resolveRouterOptions } from '../src/config/options.js';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { parseFences } from '../src/fences/parse.js';
import { buildFenceStore } from '../src/fences/store.js';
import { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from '../src/ingest/ping-encoder.js';
import type { ContainmentTask } from '../src/pipeline/containment-task.js';
import { buildIngestPath } from '../src/pipeline/ingest-path.js';
import { allocatePipelineMemory, pipelineMemorySpecOf } from '../src/pipeline/memory.js';
import { ingestThreadData } from '../src/router/thread-data.js';
import { ING_ACCEPTED_F64, INP_RING_SLOTS, INP_STRIDE_BYTES, RingKind } from '../src/shm/layout.js';
import { allocateRingRegion } from '../src/shm/regions.js';
import { InputForwarder, InputReader } from '../src/pipeline/input-forwarding.js';

const { values } = parseArgs({
  options: {
    pings: { type: 'string', default: '3000000' },
    runs: { type: 'string', default: '3' },
    forwarded: { type: 'boolean', default: false },
  },
});
const PINGS = Number(values.pings);
const RUNS = Number(values.runs);
const DEVICES = 10_000;
/** Pre-encoded pings per device (replayed over and over). */
const ROUNDS = 8;
const CHUNK_BYTES = 64 * 1024;

const city = generateSyntheticCity({ seed: 42, fenceCount: 10_000 });
const descriptor = buildFenceStore(parseFences(city), 1);

/** The frames of ROUNDS pings per device in `encoding`, cut into chunks of whole frames. */
function chunksOf(encoding: LoadEncoding): { chunks: Buffer[]; perChunk: number[] } {
  const fleet = new Fleet({ devices: DEVICES, seed: 42, radiusM: 15_000 });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  const chunks: Buffer[] = [];
  const perChunk: number[] = [];
  let buf = Buffer.allocUnsafe(CHUNK_BYTES + MAX_PING_BYTES);
  let len = 0;
  let n = 0;
  const t0 = Date.UTC(2026, 0, 1);
  for (let k = 0; k < DEVICES * ROUNDS; k++) {
    fleet.next(ping, t0 + k);
    len = encodePingInto(buf, len, ping, encoding);
    n++;
    if (len >= CHUNK_BYTES) {
      chunks.push(buf.subarray(0, len));
      perChunk.push(n);
      buf = Buffer.allocUnsafe(CHUNK_BYTES + MAX_PING_BYTES);
      len = 0;
      n = 0;
    }
  }
  if (n > 0) {
    chunks.push(buf.subarray(0, len));
    perChunk.push(n);
  }
  return { chunks, perChunk };
}

/** Pings/s of each run through a freshly wired path for `encoding`. */
async function measure(encoding: LoadEncoding): Promise<number[]> {
  const o = resolveRouterOptions({
    shards: 8,
    poolSize: 1,
    ringCapacitySlots: 65_536,
    maxDevices: 50_000,
    stateDir: null,
    ingest: { sharedStructures: encoding === 'shared' },
  });
  const m = allocatePipelineMemory({ ...pipelineMemorySpecOf(o), ingestThreads: 1 });
  const d = ingestThreadData(o, m, descriptor);
  // The scheduler is paused: the pool is started as the router's is but never given a task.
  const pool = new Piscina<ContainmentTask, number>({
    filename: new URL('../src/pipeline/containment-thread.js', import.meta.url).href,
    minThreads: 1,
    maxThreads: 1,
    workerData: {
      memory: m,
      fences: descriptor,
      engine: { exitOnExpiry: false, crossMaxSpeedMps: 0, crossMaxGapMs: 0, crossMaxPerDevicePerSec: 0 },
    },
  });
  const quiet = (): void => undefined;
  const path = buildIngestPath(m, d, pool, { error: quiet, warn: quiet }, false);
  void path.scheduler.pause();
  // The shard rings and the COMPLIANCE ring, consumed here as containment would.
  const rings = path.paths === null ? path.scheduler.rings : [...path.scheduler.rings, path.paths.ring];
  const { chunks, perChunk } = chunksOf(encoding);
  const direct = path.edge.openStream(`bench-${encoding}`);
  let stream = direct;
  let afterWrite = (): void => undefined;
  if (values.forwarded === true) {
    const input = allocateRingRegion({
      capacitySlots: INP_RING_SLOTS,
      strideBytes: INP_STRIDE_BYTES,
      kind: RingKind.INPUT,
    });
    const reader = new InputReader(input);
    const handlers = {
      open: (): void => undefined,
      data: (_c: number, b: Buffer): void => direct.write(b),
      end: (): void => undefined,
    };
    stream = new InputForwarder(input, new SharedArrayBuffer(16), m.ingestControl, 1).open(`bench-${encoding}`);
    afterWrite = () => void reader.drain(handlers, CHUNK_BYTES);
  }
  const counters = new Float64Array(m.pipeline);
  const feed = (pings: number): number => {
    let sent = 0;
    for (let c = 0; sent < pings; c = (c + 1) % chunks.length) {
      stream.write(chunks[c]!);
      afterWrite();
      sent += perChunk[c]!;
      for (const r of rings) r.release(r.available());
    }
    return sent;
  };
  // Every device registered, every function warm.
  feed(DEVICES * ROUNDS * 2);
  const accepted0 = counters[ING_ACCEPTED_F64]!;
  const out: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const t0 = performance.now();
    const sent = feed(PINGS);
    out.push(Math.round(sent / ((performance.now() - t0) / 1000)));
  }
  const accepted = counters[ING_ACCEPTED_F64]! - accepted0;
  if (path.registry.size !== DEVICES) throw new Error(`${encoding}: ${path.registry.size} devices registered`);
  if (accepted < PINGS * RUNS) throw new Error(`${encoding}: only ${accepted} pings admitted`);
  stream.end();
  await pool.destroy();
  return out;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: Record<string, unknown>[] = [];
for (const encoding of ['maps', 'records', 'shared'] as const) {
  const runs = await measure(encoding);
  rows.push({ encoding, pingsPerSec: runs.join(' / '), median: median(runs) });
}
console.table(rows);
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(
  new URL('../../bench/out/ingest-path.json', import.meta.url),
  `${JSON.stringify({ date: new Date().toISOString(), pings: PINGS, runs: RUNS, forwarded: values.forwarded, rows }, null, 2)}\n`,
);
