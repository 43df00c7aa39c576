import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import {
  ContainmentEngine,
  DeviceState,
  FenceStore,
  allocateDeviceState,
  buildFenceStore,
  generateSyntheticCity,
  mulberry32,
  parseFences,
  syntheticCityBounds,
  M_PER_DEG,
} from '../../src/fences/index.js';
import { allocateCounterRegion, allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { Q_LIMIT_M, Q_MAX_X, Q_MAX_Y, Q_MIN_X, Q_MIN_Y, Q_X, Q_Y } from '../../src/fences/geometry.js';
import {
  CNT_BLOCK_F64,
  CNT_FENCE_OVERFLOW_F64,
  CNT_PROCESSED_F64,
  CNT_STALE_F64,
  CNT_TRIGGERS_F64,
  RingKind,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TELEMETRY_STRIDE_BYTES,
  TriggerType,
  WDG_STRIDE_I32,
  preImageRegionBytes,
} from '../../src/shm/layout.js';
import { DevicePreImages } from '../../src/fences/pre-image.js';
import { at, collection, square, triggerRing } from './helpers.js';

/**
 * Measured iterations per measureAllocations call. V8's memory reducer runs a full GC on a timer (about 8 s after
 * the last full GC) when the allocation rate is low, which an allocation-free loop is: a single measured run long
 * enough to outlast that timer on a busy host counts a GC for which nothing was allocated. Each run starts with a
 * full GC (measureAllocations collects first), so shorter runs, several in a row, measure the same millions of
 * iterations without that false positive.
 */
const ITERATIONS_PER_RUN = 500_000;
/** Measured runs. */
const RUNS = 4;

const city = { seed: 11, fenceCount: 2000, fencesPerKm2: 200, dwellMs: 3000, exitBufferM: 0 };

test(`query + exact test + state update allocate nothing over ${RUNS} x ${ITERATIONS_PER_RUN} pings`, async () => {
  const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity(city)), 1));
  const state = DeviceState.open(allocateDeviceState(256, 8));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  // Each record accounted for as in a pool worker: the device's pre-image kept, the watchdog cells written.
  engine.keepRecordsIn(
    new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(1, 8)), 1, 8),
    new Int32Array(WDG_STRIDE_I32),
  );
  engine.useHeldBlock(0);
  const triggers = triggerRing(4096);
  // Precomputed random walks of 256 devices, 256 steps each (device d's step s at d * 256 + s): the loop only
  // reads them. Each device starts somewhere in the city; a device replays its walk from the start every 256 pings.
  const b = syntheticCityBounds(city);
  const rng = mulberry32(3);
  const STEPS = 1 << 16;
  const lat = new Float64Array(STEPS);
  const lon = new Float64Array(STEPS);
  for (let d = 0; d < 256; d++) {
    let y = b.minLat + rng() * (b.maxLat - b.minLat);
    let x = b.minLon + rng() * (b.maxLon - b.minLon);
    for (let step = 0; step < 256; step++) {
      y = Math.min(b.maxLat, Math.max(b.minLat, y + ((rng() - 0.5) * 60) / M_PER_DEG));
      x = Math.min(b.maxLon, Math.max(b.minLon, x + ((rng() - 0.5) * 100) / M_PER_DEG));
      lat[d * 256 + step] = y;
      lon[d * 256 + step] = x;
    }
  }
  const out = new Int32Array(store.fenceCount);
  const tel = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 1024, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  const q = store.q;
  let hits = 0;
  // Event times keep rising across warm-up and measurement (both count i from 0): no ping is stale.
  let nowMs = 0;
  // i restarts at 0 in every run: the offset keeps the walks and device times moving on.
  let offset = 0;
  const body = (j: number): void => {
    const i = j + offset;
    // Device i & 255, its step (i >> 8) & 255.
    const k = ((i & 255) << 8) | ((i >> 8) & 255);
    // The ingest thread's part: one record into the telemetry ring.
    const s = tel.claim();
    tel.f64[s * tel.strideF64 + TEL_LAT_F64] = lat[k]!;
    tel.f64[s * tel.strideF64 + TEL_LON_F64] = lon[k]!;
    // Every fourth round of 256 devices replays an old time: the stale path runs too.
    tel.f64[s * tel.strideF64 + TEL_EVENT_TIME_MS_F64] = ((i >> 8) & 3) === 3 ? 1 : (nowMs += 100);
    tel.f64[s * tel.strideF64 + TEL_ADMIT_TIME_NS_F64] = i;
    tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = i & 255;
    tel.i32[s * tel.strideI32 + TEL_LANE_I32] = 1;
    tel.publish();
    // The worker's part: query, exact tests, state machine, trigger writes.
    engine.processBatch(tel, tel.readSeq(), 1, triggers);
    tel.release(1);
    // The dispatcher's part: release what was written so the ring never fills.
    triggers.release(triggers.available());
    // The store's own query + exact test, through the scratch-cell API the engine uses.
    q[Q_X] = lon[k]!;
    q[Q_Y] = lat[k]!;
    q[Q_MIN_X] = q[Q_MAX_X] = lon[k]!;
    q[Q_MIN_Y] = q[Q_MAX_Y] = lat[k]!;
    const n = store.candidatesInQueryBoxInto(out);
    for (let c = 0; c < n; c++) if (store.containsAt(out[c]!)) hits++;
    // The ingest thread's lane checks.
    q[Q_LIMIT_M] = 50;
    if (store.nearComplianceAt()) hits++;
    if (state.insideCompliance(i & 255)) hits++;
  };
  for (let run = 0; run < RUNS; run++) {
    // The first run warms up for 1,000,000 pings; later ones only until a warm-up chunk is GC-free.
    const report = await measureAllocations(ITERATIONS_PER_RUN, body, run === 0 ? 1_000_000 : 50_000);
    offset += ITERATIONS_PER_RUN;
    assert.equal(report.gcCount, 0, `run ${run}: GCs: ${report.gcCount}`);
    assert.ok(
      report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES,
      `run ${run}: new space grew ${report.newSpaceGrowthBytes}`,
    );
    assert.ok(
      report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES,
      `run ${run}: old space grew ${report.oldSpaceGrowthBytes}`,
    );
  }
  assert.ok(counters[CNT_PROCESSED_F64]! >= 1_500_000);
  assert.ok(counters[CNT_STALE_F64]! >= 400_000);
  // The walk must actually exercise the state machine.
  for (let t = 0; t < 4; t++)
    assert.ok(counters[CNT_TRIGGERS_F64 + t]! > 100, `trigger type ${t}: ${counters[CNT_TRIGGERS_F64 + t]}`);
  assert.ok(hits > 0);
});

test(`many overlapping fences: pool chunks taken and given back, untracked stays, allocate nothing over ${RUNS} x ${ITERATIONS_PER_RUN} pings`, async () => {
  // 40 nested squares: at the centre a device is inside all 40 (more than its bound of 32), at 250 m inside 25, at
  // 700 m inside none. The pool holds 64 chunks for 64 devices that each want 3: it runs dry, too.
  const fences = Array.from({ length: 40 }, (_, i) => square(`n${i}`, 0, 0, 100 + 10 * i));
  const store = FenceStore.open(buildFenceStore(parseFences(collection(...fences)), 1));
  const state = DeviceState.open(allocateDeviceState(64, 32, { overflowPoolEntries: 64 * 8 }));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  const triggers = triggerRing(4096);
  const xs = [0, 250, 700];
  const lat = new Float64Array(3);
  const lon = new Float64Array(3);
  for (let k = 0; k < 3; k++) [lat[k], lon[k]] = at(xs[k]!, 0);
  let nowMs = 0;
  let offset = 0;
  const body = (j: number): void => {
    const i = j + offset;
    const k = ((i >> 6) + (i & 63)) % 3;
    engine.processPing(i & 63, lat[k]!, lon[k]!, (nowMs += 10), i, 1, triggers);
    triggers.release(triggers.available());
  };
  for (let run = 0; run < RUNS; run++) {
    const report = await measureAllocations(ITERATIONS_PER_RUN, body, run === 0 ? 1_000_000 : 50_000);
    offset += ITERATIONS_PER_RUN;
    assert.equal(report.gcCount, 0, `run ${run}: GCs: ${report.gcCount}`);
    assert.ok(
      report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES,
      `run ${run}: new space grew ${report.newSpaceGrowthBytes}`,
    );
    assert.ok(
      report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES,
      `run ${run}: old space grew ${report.oldSpaceGrowthBytes}`,
    );
  }
  // Both the pool path and the untracked path ran.
  assert.ok(counters[CNT_FENCE_OVERFLOW_F64]! > 100_000, `untracked ${counters[CNT_FENCE_OVERFLOW_F64]}`);
  assert.ok(counters[CNT_TRIGGERS_F64 + TriggerType.ENTER]! > 1_000_000);
  assert.ok(state.poolChunksInUse() <= state.poolChunks);
});
