/**
 * A fixed, repeatable ingest workload for instruction counting (valgrind --tool=callgrind), beside fences-count.bench.ts
 * for containment: decode + validate + registry lookup + lane classification of pings of a seeded fleet (10,000
 * devices) on one thread, in batches of 1,000 frames, as plain maps or shared-structure records. The frames for the
 * larger run are built in both runs and a warm-up of 20,000 pings runs first, so two runs that differ only in
 * `--pings` differ only in the measured pings: instructions per ping = (Ir(p2) - Ir(p1)) / (p2 - p1).
 *
 * Run: npx tsc -p tsconfig.json && node dist/bench/ingest-count.bench.js --callgrind --encoding maps|shared
 *   [--pings 20000,120000] [--decoder reader|msgpackr]
 * which runs this file twice under `valgrind --tool=callgrind` (node --no-concurrent-recompilation --single-threaded),
 * prints the difference per ping and writes bench/out/ingest-count-<encoding>-<decoder>.json (`--decoder msgpackr`:
 * every frame decoded by msgpackr as an object instead of read in place). Alone (no valgrind):
 *   node dist/bench/ingest-count.bench.js --encoding maps --pings 100000 --build 100000
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Packr } from 'msgpackr';
import { allocateDeviceIdTable, DeviceRegistry } from '../src/ingest/device-registry.js';
import { IngestEdge, type PingSink } from '../src/ingest/ingest-edge.js';
import { NO_COMPLIANCE } from '../src/ingest/lane-classifier.js';
import type { PingFields } from '../src/ingest/ping-fields.js';
import { allocatePipelineRegion, PipelineRegion } from '../src/shm/pipeline-region.js';
import { RejectLog } from '../src/ingest/reject-log.js';
import { TELEMETRY_SHARED_STRUCTURES, telemetrySharedStructures } from '../src/ingest/wire-format.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { callgrindInstructions } from './support/callgrind.js';

const WARM_UP_PINGS = 20_000;
const BATCH = 1000;

const { values } = parseArgs({
  options: {
    callgrind: { type: 'boolean', default: false },
    encoding: { type: 'string', default: 'maps' },
    pings: { type: 'string', default: '20000,120000' },
    build: { type: 'string', default: '0' },
    // reader: values read in place (the default path); msgpackr: every frame decoded as an object.
    decoder: { type: 'string', default: 'reader' },
  },
});
if (!['reader', 'msgpackr'].includes(values.decoder))
  throw new RangeError(`--decoder must be reader or msgpackr, got ${values.decoder}`);

if (values.callgrind) {
  const [p1, p2] = values.pings.split(',').map(Number) as [number, number];
  const counts: number[] = [];
  for (const pings of [p1, p2]) {
    const n = callgrindInstructions(fileURLToPath(import.meta.url), [
      ...['--encoding', values.encoding, '--pings', String(pings), '--build', String(p2), '--decoder', values.decoder],
    ]);
    counts.push(n);
    console.log(`${pings} pings: ${n} instructions`);
  }
  const perPing = (counts[1]! - counts[0]!) / (p2 - p1);
  console.log(`ingest (${values.encoding}, ${values.decoder}): ${perPing.toFixed(0)} instructions per ping`);
  mkdirSync('bench/out', { recursive: true });
  writeFileSync(
    `bench/out/ingest-count-${values.encoding}-${values.decoder}.json`,
    `${JSON.stringify({ decoder: values.decoder, pings: [p1, p2], warmUp: WARM_UP_PINGS, instructions: counts, instructionsPerPing: Math.round(perPing) }, null, 2)}\n`,
  );
  process.exit(0);
}

const pings = Number(values.pings);
const built = Math.max(pings, Number(values.build));
if (!(pings % BATCH === 0 && built % BATCH === 0))
  throw new RangeError(`--pings and --build must be multiples of ${BATCH}`);
const shared = values.encoding === 'shared';
const packr = shared
  ? new Packr({ structures: telemetrySharedStructures(), maxSharedStructures: TELEMETRY_SHARED_STRUCTURES.length })
  : new Packr({ useRecords: false });
const fleet = new Fleet({ devices: 10_000, seed: 7 });
const p: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
const batches: Buffer[] = [];
let t = 1_735_689_600_000;
for (let b = 0; b < (WARM_UP_PINGS + built) / BATCH; b++) {
  const frames: Buffer[] = [];
  for (let i = 0; i < BATCH; i++) {
    fleet.next(p, (t += 1));
    frames.push(packr.pack(p));
  }
  batches.push(Buffer.concat(frames));
}
let seen = 0;
const sink: PingSink = {
  offer(f: PingFields) {
    seen += f.lane >= 0 ? 1 : 0;
  },
};
const edge = new IngestEdge(
  { sharedStructures: shared, frameReader: values.decoder === 'reader' },
  {
    pipeline: PipelineRegion.wrap(allocatePipelineRegion(8)),
    registry: new DeviceRegistry(allocateDeviceIdTable(20_000, 32), 8),
    predicates: NO_COMPLIANCE,
    sink,
    log: new RejectLog({ intervalMs: 1000, nowMs: () => Date.now() }),
  },
);
for (let b = 0; b < WARM_UP_PINGS / BATCH; b++) edge.ingest(batches[b]!);
const t0 = process.hrtime.bigint();
for (let b = WARM_UP_PINGS / BATCH; b < (WARM_UP_PINGS + pings) / BATCH; b++) edge.ingest(batches[b]!);
const ns = Number(process.hrtime.bigint() - t0);
if (seen !== WARM_UP_PINGS + pings) throw new Error(`accepted ${seen} of ${WARM_UP_PINGS + pings}`);
console.log(
  `ingest (${values.encoding}, ${values.decoder}): ${pings} pings after ${WARM_UP_PINGS} warm-up, ${Math.round((pings * 1e9) / Math.max(1, ns))} pings/s`,
);
