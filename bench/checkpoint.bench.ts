/**
 * The cost of a device-state checkpoint at 100,000 devices (seeded: each device inside 0 to 3 of 10,000 fences, a
 * third with DWELL fired, 16 fence entries per device): the copy made while containment is paused and the one made
 * while it runs (DeviceStateCopy.captureLive, here meeting no update) (tinybench), the encoding by id, and the durable write (temporary file, fsync, rename, directory fsync), each as a median over
 * repeats; and the file's size in bytes. The restore at start (decode, register the ids, write the state back by fence
 * id) is timed too.
 *
 *   npx tsc -p tsconfig.json && node --expose-gc dist/bench/checkpoint.bench.js [--devices 100000] [--repeats 15]
 *
 * Writes bench/out/checkpoint.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Bench } from 'tinybench';
import { resolveRouterOptions } from '../src/config/options.js';
import {
  DeviceStateCopy,
  encodeCheckpoint,
  readLatestCheckpoint,
  writeCheckpointFile,
} from '../src/durable/checkpoint.js';
import { StateDirectory } from '../src/durable/state-dir.js';
import { DeviceState } from '../src/fences/device-state.js';
import { buildFenceStore, FenceStore, parseFences } from '../src/fences/index.js';
import { generateSyntheticCity, mulberry32 } from '../src/fences/synthetic-city.js';
import { DeviceIdReader, preregisterDevices } from '../src/ingest/device-registry.js';
import { allocatePipelineMemory } from '../src/pipeline/memory.js';
import { StateKeeper } from '../src/pipeline/state-keeper.js';
import { nowNs } from '../src/shm/clock.js';
import {
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_HAS_LAST_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  ENTRY_FENCE_I32,
  ENTRY_PENDING_MS_F64,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
} from '../src/shm/layout.js';

const { values } = parseArgs({
  options: { devices: { type: 'string', default: '100000' }, repeats: { type: 'string', default: '15' } },
});
const DEVICES = Number(values.devices);
const REPEATS = Number(values.repeats);

const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity({ seed: 3, fenceCount: 10_000 })), 1));
const memory = allocatePipelineMemory({
  shards: 8,
  ringCapacitySlots: 1024,
  reservedFraction: 0.05,
  maxDevices: DEVICES,
  idBytesPerSlot: 64,
  maxFencesPerDevice: 64,
  downstreams: 1,
});
preregisterDevices(
  memory.idTable,
  Array.from({ length: DEVICES }, (_, i) => (i % 4 === 0 ? 350_000_000_000_000 + i : `veh-${i.toString(36)}-${i}`)),
);
const state = DeviceState.open(memory.deviceState);
const rnd = mulberry32(9);
let entries = 0;
for (let d = 0; d < DEVICES; d++) {
  const df = d * DEV_STRIDE_F64;
  const di = d * DEV_STRIDE_I32;
  state.devF64[df + DEV_LAST_EVENT_MS_F64] = 1.76e12 + d;
  state.devF64[df + DEV_LAST_LAT_F64] = 52.5 + rnd() * 0.1;
  state.devF64[df + DEV_LAST_LON_F64] = 13.4 + rnd() * 0.1;
  state.devF64[df + DEV_TRIGGER_SEQ_F64] = Math.floor(rnd() * 10_000);
  state.devI32[di + DEV_HAS_LAST_I32] = 1;
  state.devI32[di + DEV_GENERATION_I32] = store.generation;
  const n = Math.floor(rnd() * 4);
  state.devI32[di + DEV_ENTRY_COUNT_I32] = n;
  for (let k = 0; k < n; k++) {
    const e = state.entryIndex(d, k);
    state.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = Math.floor(rnd() * store.fenceCount);
    state.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_STATE_I32] =
      EntryState.INSIDE | (rnd() < 1 / 3 ? EntryState.DWELL_FIRED : 0);
    state.entryF64[e * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64] = 1.76e12 - 60_000;
    state.entryF64[e * ENTRY_STRIDE_F64 + ENTRY_PENDING_MS_F64] = 1.76e12 - 60_000;
  }
  entries += n;
}

const ids = new DeviceIdReader(memory.idTable);
const copy = new DeviceStateCopy(DEVICES);
const meta = { seqFloor: 0, number: 1, pingsProcessed: 0, triggersProduced: 0, clean: false };
let sink = 0;
const bench = new Bench({ name: `checkpoint at ${DEVICES} devices`, time: 2000, warmupTime: 300 });
bench.add('copy (containment paused)', () => {
  copy.capture(state, DEVICES, store.generation);
  sink += copy.entryStart[DEVICES]!;
});
bench.add('copy while containment runs (captureLive, no update met)', () => {
  if (!copy.captureLive(state, DEVICES, store.generation, null, nowNs() + 10e9))
    throw new Error('live copy did not settle');
  sink += copy.entryStart[DEVICES]!;
});
bench.add('encode by id', () => {
  sink += encodeCheckpoint(copy, ids, store, meta).length;
});
bench.runSync();

// The durable write and the restore are file-system bound: plain medians over repeats.
const dir = mkdtempSync(join(tmpdir(), 'ckpt-bench-'));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const writeMs: number[] = [];
let bytes = 0;
for (let k = 0; k < REPEATS; k++) {
  copy.capture(state, DEVICES, store.generation);
  const encoded = encodeCheckpoint(copy, ids, store, { ...meta, number: k + 1 });
  bytes = encoded.length;
  const t0 = performance.now();
  await writeCheckpointFile(dir, encoded);
  writeMs.push(performance.now() - t0);
}
const restoreMs: number[] = [];
for (let k = 0; k < Math.min(REPEATS, 5); k++) {
  const stateDir = join(dir, `restore-${k}`);
  mkdirSync(stateDir, { recursive: true });
  await writeCheckpointFile(stateDir, encodeCheckpoint(copy, ids, store, meta));
  const fresh = allocatePipelineMemory({
    shards: 8,
    ringCapacitySlots: 1024,
    reservedFraction: 0.05,
    maxDevices: DEVICES,
    idBytesPerSlot: 64,
    maxFencesPerDevice: 64,
    downstreams: 1,
  });
  const sd = StateDirectory.open(stateDir);
  const t0 = performance.now();
  const keeper = StateKeeper.restore(sd, fresh, store, resolveRouterOptions({ stateDir: null }));
  restoreMs.push(performance.now() - t0);
  sink += keeper.report.restoredDevices;
  sd.release();
}
sink += readLatestCheckpoint(dir)?.devices.length ?? 0;
rmSync(dir, { recursive: true, force: true });

const rows = bench.tasks.map((t) => {
  const r = t.result;
  if (r.state !== 'completed') throw new Error(`bench task ${t.name} ended ${r.state}`);
  return {
    task: t.name,
    samples: r.latency.samplesCount,
    medianMs: Number(r.latency.p50.toFixed(2)),
    p75Ms: Number(r.latency.p75.toFixed(2)),
  };
});
const copyMs = rows[0]!.medianMs;
const liveCopyMs = rows[1]!.medianMs;
const encodeMs = rows[2]!.medianMs;
const result = {
  date: new Date().toISOString(),
  devices: DEVICES,
  entries,
  bytes,
  bytesPerDevice: Number((bytes / DEVICES).toFixed(1)),
  copyMedianMs: copyMs,
  liveCopyMedianMs: liveCopyMs,
  encodeMedianMs: encodeMs,
  writeFsyncRenameMedianMs: Number(median(writeMs).toFixed(2)),
  checkpointMedianMs: Number((copyMs + encodeMs + median(writeMs)).toFixed(2)),
  restoreMedianMs: Number(median(restoreMs).toFixed(2)),
  sink,
};
console.table(rows);
console.log(result);
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(new URL('../../bench/out/checkpoint.json', import.meta.url), `${JSON.stringify(result, null, 2)}\n`);
