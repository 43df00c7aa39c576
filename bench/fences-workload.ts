/**
 * The seeded containment workload shared by fences.bench.ts (tinybench timings) and fences-count.bench.ts
 * (instruction counts), so both measure the same city, points and fleet: blocks of 4,096 random points for
 * query + exact test, and a fleet of 2,048 devices random-walking ~10 m per 1 s ping for the full engine.
 */
import {
  ContainmentEngine,
  DeviceState,
  FenceStore,
  allocateDeviceState,
  mulberry32,
  syntheticCityBounds,
  type SyntheticCityOptions,
} from '../src/fences/index.js';
import { allocateCounterRegion, allocateRingRegion } from '../src/shm/regions.js';
import { SpscRing } from '../src/shm/ring.js';
import {
  CNT_BLOCK_F64,
  Lane,
  RingKind,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TELEMETRY_STRIDE_BYTES,
  TRIGGER_STRIDE_BYTES,
  WDG_STRIDE_I32,
  preImageRegionBytes,
} from '../src/shm/layout.js';
import { DevicePreImages } from '../src/fences/pre-image.js';
import { M_PER_DEG } from '../src/fences/geometry.js';

/** Points per block (and telemetry records per engine pass). */
export const BATCH = 4096;
/** Devices of the engine workload's fleet. */
export const DEVICES = 2048;

/** The seeded synthetic city of `fenceCount` polygon fences of 32-64 vertices. */
export function cityOptions(fenceCount: number): SyntheticCityOptions {
  return { seed: 42, fenceCount, circleFraction: 0, dwellMs: 60_000 };
}

/** BATCH seeded points spread uniformly over the city, as (lat, lon) pairs. */
export function randomPoints(fenceCount: number, seed: number): Float64Array {
  const b = syntheticCityBounds(cityOptions(fenceCount));
  const rng = mulberry32(seed);
  const pts = new Float64Array(BATCH * 2);
  for (let i = 0; i < BATCH; i++) {
    pts[i * 2] = b.minLat + rng() * (b.maxLat - b.minLat);
    pts[i * 2 + 1] = b.minLon + rng() * (b.maxLon - b.minLon);
  }
  return pts;
}

/** Query + exact test for every point of the block; returns inside hits (the sink). */
export function queryBlock(store: FenceStore, pts: Float64Array, out: Int32Array): number {
  let hits = 0;
  for (let i = 0; i < pts.length; i += 2) {
    const lat = pts[i]!;
    const lon = pts[i + 1]!;
    const n = store.candidatesInto(lat, lon, out);
    for (let k = 0; k < n; k++) if (store.contains(out[k]!, lat, lon)) hits++;
  }
  return hits;
}

/**
 * The engine workload over `store`: the fleet's BATCH pings preloaded in a telemetry ring, replayed by each call of
 * the returned function (one `processBatch`; returns the records processed) with times moved forward. `accounted`:
 * each record accounted for as in a pool worker (the device's pre-image kept, the watchdog cells written).
 */
export function engineRunner(store: FenceStore, fenceCount: number, accounted = false): () => number {
  const b = syntheticCityBounds(cityOptions(fenceCount));
  const walk = mulberry32(7);
  const tel = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: BATCH, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  const trg = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 1 << 16, strideBytes: TRIGGER_STRIDE_BYTES, kind: RingKind.TRIGGER }),
  );
  const state = DeviceState.open(allocateDeviceState(DEVICES, 16));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  if (accounted) {
    engine.keepRecordsIn(
      new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(1, 16)), 1, 16),
      new Int32Array(WDG_STRIDE_I32),
    );
    engine.useHeldBlock(0);
  }
  const lat = new Float64Array(DEVICES);
  const lon = new Float64Array(DEVICES);
  for (let d = 0; d < DEVICES; d++) {
    lat[d] = b.minLat + walk() * (b.maxLat - b.minLat);
    lon[d] = b.minLon + walk() * (b.maxLon - b.minLon);
  }
  const step = 10 / M_PER_DEG;
  for (let k = 0; k < BATCH; k++) {
    const d = k % DEVICES;
    lat[d]! += (walk() - 0.5) * 2 * step;
    lon[d]! += (walk() - 0.5) * 2 * step * 1.6;
    const s = tel.claim();
    tel.f64[s * tel.strideF64 + TEL_LAT_F64] = lat[d]!;
    tel.f64[s * tel.strideF64 + TEL_LON_F64] = lon[d]!;
    tel.f64[s * tel.strideF64 + TEL_EVENT_TIME_MS_F64] = Math.floor(k / DEVICES) * 1000;
    tel.f64[s * tel.strideF64 + TEL_ADMIT_TIME_NS_F64] = 0;
    tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = d;
    tel.i32[s * tel.strideI32 + TEL_LANE_I32] = Lane.TRANSITION;
  }
  tel.publish();
  const shiftMs = (BATCH / DEVICES) * 1000;
  return () => {
    // Times move forward each pass so no ping is stale (positions replay).
    for (let k = 0; k < BATCH; k++) tel.f64[k * tel.strideF64 + TEL_EVENT_TIME_MS_F64]! += shiftMs;
    const n = engine.processBatch(tel, 0, BATCH, trg);
    trg.release(trg.available());
    return n;
  };
}
