/**
 * Ingest edge throughput on one thread: decode + validate + registry lookup + lane classification for batches of
 * 1,000 pings from a seeded fleet of 10,000 devices, as plain maps, inline records and shared-structure records, each
 * through the frame reader (values read in place) and through msgpackr (an object per frame).
 * Also msgpackr's own unpackMultiple over the same bytes as a reference floor.
 *
 *   npx tsc -p tsconfig.json && node --expose-gc dist/bench/ingest-decode.bench.js
 *
 * Prints a table and writes bench/out/ingest-decode.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Packr, Unpackr } from 'msgpackr';
import { Bench } from 'tinybench';
import { allocateDeviceIdTable, DeviceRegistry } from '../src/ingest/device-registry.js';
import { IngestEdge, type PingSink } from '../src/ingest/ingest-edge.js';
import { NO_COMPLIANCE } from '../src/ingest/lane-classifier.js';
import type { PingFields } from '../src/ingest/ping-fields.js';
import { allocatePipelineRegion, PipelineRegion } from '../src/shm/pipeline-region.js';
import { RejectLog } from '../src/ingest/reject-log.js';
import { TELEMETRY_SHARED_STRUCTURES, telemetrySharedStructures } from '../src/ingest/wire-format.js';
import { Fleet, type FleetPing } from './loadgen/fleet.js';

const BATCH = 1000;
const BATCHES = 200;

/** Keeps the work observable. */
let sink = 0;
const countingSink: PingSink = {
  offer(f: PingFields) {
    sink += f.slot + f.lane;
  },
};

function batches(packr: Packr): Buffer[] {
  const fleet = new Fleet({ devices: 10_000, seed: 7 });
  const p: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  const out: Buffer[] = [];
  let t = 1_735_689_600_000;
  for (let b = 0; b < BATCHES; b++) {
    const frames: Buffer[] = [];
    for (let i = 0; i < BATCH; i++) {
      fleet.next(p, (t += 1));
      frames.push(packr.pack(p));
    }
    out.push(Buffer.concat(frames));
  }
  return out;
}

function edge(sharedStructures: boolean, frameReader = true): IngestEdge {
  const pipeline = PipelineRegion.wrap(allocatePipelineRegion(8));
  const registry = new DeviceRegistry(allocateDeviceIdTable(20_000, 32), 8);
  const log = new RejectLog({ intervalMs: 1000, nowMs: () => Date.now() });
  return new IngestEdge(
    { sharedStructures, frameReader },
    { pipeline, registry, predicates: NO_COMPLIANCE, sink: countingSink, log },
  );
}

const inputs = {
  maps: batches(new Packr({ useRecords: false })),
  records: batches(new Packr({ useRecords: true })),
  shared: batches(
    new Packr({ structures: telemetrySharedStructures(), maxSharedStructures: TELEMETRY_SHARED_STRUCTURES.length }),
  ),
};
// Each encoding through the frame reader, and (`msgpackr`) with every frame decoded by msgpackr as an object.
const edges = {
  maps: edge(false),
  records: edge(false),
  shared: edge(true),
  'maps msgpackr': edge(false, false),
  'records msgpackr': edge(false, false),
  'shared msgpackr': edge(true, false),
};
const KINDS = ['maps', 'records', 'shared', 'maps msgpackr', 'records msgpackr', 'shared msgpackr'] as const;
const inputOf = (k: (typeof KINDS)[number]): Buffer[] => inputs[k.split(' ')[0] as keyof typeof inputs];
// Register every device first, so the measured runs are lookups of known devices.
for (const k of KINDS) for (const b of inputOf(k)) edges[k].ingest(b);
for (const k of KINDS) {
  const accepted = edges[k].counters;
  if (edges[k].registry.size !== 10_000)
    throw new Error(`${k}: expected 10000 devices, got ${edges[k].registry.size} (counters ${accepted.join(',')})`);
}

const plainUnpackr = new Unpackr({ useRecords: false });
const bench = new Bench({ time: 2000, warmupTime: 500 });
let cursor = 0;
for (const k of KINDS) {
  const input = inputOf(k);
  bench.add(`edge ${k} (1000 pings)`, () => {
    edges[k].ingest(input[cursor++ % BATCHES]!);
  });
}
bench.add('msgpackr unpackMultiple only, maps (1000 pings)', () => {
  sink += (plainUnpackr.unpackMultiple(inputs.maps[cursor++ % BATCHES]!) as unknown[]).length;
});

await bench.run();
console.table(bench.table());
const rows = bench.tasks.map((t) => {
  const r = t.result as { latency?: { p50?: number; mean?: number } } | undefined;
  const p50Ms = r?.latency?.p50 ?? Number.NaN;
  return { name: t.name, p50MsPerBatch: p50Ms, eventsPerSecAtP50: Math.round((BATCH * 1000) / p50Ms) };
});
console.table(rows);
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(
  new URL('../../bench/out/ingest-decode.json', import.meta.url),
  `${JSON.stringify({ date: new Date().toISOString(), rows }, null, 2)}\n`,
);
if (sink === 42) console.log('');
