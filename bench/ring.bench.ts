/**
 * Single-thread ring benchmarks: write (claim + 9 fields + batch publish) and read (9 fields + batch release) of
 * telemetry records, one thread playing both sides so the figures exclude cross-core traffic.
 * Run: npx tsc -p tsconfig.json && node --expose-gc dist/bench/ring.bench.js
 */
import { Bench } from 'tinybench';
import { allocateTelemetryRing } from '../src/shm/regions.js';
import { SpscRing } from '../src/shm/ring.js';
import {
  TEL_ACCURACY_M_F64,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_HEADING_DEG_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TEL_SPEED_MPS_F64,
} from '../src/shm/layout.js';
import { opsRows, reportOps } from './ring-bench-report.js';

const RECORDS_PER_CALL = 1 << 20;
const BATCH_SLOTS = 64;
const ring = SpscRing.wrap(allocateTelemetryRing(4096, 0));
const { f64, i32, strideF64, strideI32 } = ring;
// Seeded inputs (xorshift32), so every run writes the same values.
const inputs = new Float64Array(4096);
let x = 0x9e3779b9;
for (let k = 0; k < inputs.length; k++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  inputs[k] = (x >>> 0) / 4294967296;
}
const sink = new Float64Array(1);

function writeBatches(): void {
  for (let done = 0; done < RECORDS_PER_CALL; done += BATCH_SLOTS) {
    for (let k = 0; k < BATCH_SLOTS; k++) {
      const slot = ring.claim();
      const b = slot * strideF64;
      const v = inputs[(done + k) & 4095]!;
      f64[b + TEL_LAT_F64] = 52 + v;
      f64[b + TEL_LON_F64] = 13 - v;
      f64[b + TEL_EVENT_TIME_MS_F64] = 1.7e12 + done + k;
      f64[b + TEL_ADMIT_TIME_NS_F64] = 3e16 + done;
      f64[b + TEL_SPEED_MPS_F64] = v * 30;
      f64[b + TEL_HEADING_DEG_F64] = v * 360;
      f64[b + TEL_ACCURACY_M_F64] = 5;
      i32[slot * strideI32 + TEL_DEVICE_SLOT_I32] = done + k;
      i32[slot * strideI32 + TEL_LANE_I32] = k & 1;
    }
    ring.publish();
    // The consumer's part is a single release store per batch here, so the figure is the writing side's.
    ring.release(BATCH_SLOTS);
  }
}

function readBatches(): void {
  let acc = 0;
  for (let done = 0; done < RECORDS_PER_CALL; done += BATCH_SLOTS) {
    // Publish a batch of already-written slots (claim only moves an index), then read it as a consumer would.
    for (let k = 0; k < BATCH_SLOTS; k++) ring.claim();
    ring.publish();
    const n = ring.available();
    for (let k = 0; k < n; k++) {
      const slot = ring.readSlot(k);
      const b = slot * strideF64;
      acc +=
        f64[b + TEL_LAT_F64]! +
        f64[b + TEL_LON_F64]! +
        f64[b + TEL_EVENT_TIME_MS_F64]! +
        f64[b + TEL_ADMIT_TIME_NS_F64]! +
        f64[b + TEL_SPEED_MPS_F64]! +
        f64[b + TEL_HEADING_DEG_F64]! +
        f64[b + TEL_ACCURACY_M_F64]! +
        i32[slot * strideI32 + TEL_DEVICE_SLOT_I32]! +
        i32[slot * strideI32 + TEL_LANE_I32]!;
    }
    ring.release(n);
  }
  sink[0] = acc;
}

function fillReads(): void {
  let acc = 0;
  for (let k = 0; k < RECORDS_PER_CALL; k++) acc += ring.fill();
  sink[0] = acc;
}

const bench = new Bench({ name: 'ring (one thread)', time: 1500, warmupTime: 300, iterations: 10 });
bench.add('write: claim + 9 fields, publish per 64', writeBatches);
bench.add('read: 9 fields, release per 64', readBatches);
bench.add('fill() (two atomic loads)', fillReads);
bench.runSync();
const rows = opsRows(bench, {
  'write: claim + 9 fields, publish per 64': RECORDS_PER_CALL,
  'read: 9 fields, release per 64': RECORDS_PER_CALL,
  'fill() (two atomic loads)': RECORDS_PER_CALL,
});
reportOps('ring', rows, { sink: sink[0], ringSlots: ring.capacitySlots, batchSlots: BATCH_SLOTS });
