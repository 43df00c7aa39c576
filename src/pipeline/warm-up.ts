/**
 * Warming the hot paths before the router reports it has started (pool workers; see `warmContainment`), so the
 * first second of real traffic does not run on cold code behind a worker that is still loading.
 *
 * Everything here runs on scratch memory of its own (device state, rings, counters): it produces no trigger the
 * dispatcher could see, touches no device's state and moves no counter of the router's.
 */
import { allocateDeviceState, DeviceState } from '../fences/device-state.js';
import { ContainmentEngine } from '../fences/engine.js';
import type { FenceStore } from '../fences/store.js';
import { nowNs } from '../shm/clock.js';
import {
  CNT_BLOCK_F64,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_STRIDE_F64,
  Lane,
  RingKind,
  TEL_ACCURACY_M_F64,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_HEADING_DEG_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TEL_SPEED_MPS_F64,
  TRIGGER_STRIDE_BYTES,
} from '../shm/layout.js';
import { allocateCounterRegion, allocateRingRegion, allocateTelemetryRing } from '../shm/regions.js';
import { SpscRing } from '../shm/ring.js';

/** How much warming a pool worker does before the router starts. */
export interface WarmUpTask {
  /** Synthetic pings at most. */
  pings: number;
  /** Stop after this long even if pings are left, ms. */
  maxMs: number;
  /** PRNG seed of the synthetic walk. */
  seed: number;
}

/** Scratch devices walking through the fences. */
const WARM_DEVICES = 512;
/** Records per batch (as a task's batches). */
const WARM_BATCH = 256;

/** mulberry32: a small seeded PRNG (values in [0, 1)). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Runs the containment engine (candidates, exact tests, state machine, trigger writes) over synthetic pings of
 * scratch devices that walk in and out of `store`'s fences, on scratch device state, rings and counters, so the
 * engine's code is compiled before the first real batch. Returns the pings processed.
 */
export function warmContainment(store: FenceStore, task: WarmUpTask): number {
  if (store.fenceCount === 0 || task.pings <= 0) return 0;
  const state = DeviceState.open(allocateDeviceState(WARM_DEVICES, 16));
  const telemetry = SpscRing.wrap(allocateTelemetryRing(1024, 0), RingKind.TELEMETRY);
  const triggers = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 4096, strideBytes: TRIGGER_STRIDE_BYTES, kind: RingKind.TRIGGER }),
    RingKind.TRIGGER,
  ).markScratch();
  const engine = new ContainmentEngine(store, state, new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64)), 0);
  const random = prng(task.seed);
  // Each device walks around one fence's box, stepping a quarter of the box: it enters, dwells and leaves.
  const lat = new Float64Array(WARM_DEVICES);
  const lon = new Float64Array(WARM_DEVICES);
  const home = new Int32Array(WARM_DEVICES);
  const f = store.fenceF64;
  for (let d = 0; d < WARM_DEVICES; d++) {
    const i = Math.floor(random() * store.fenceCount);
    home[d] = i;
    lon[d] = (f[i * FENCE_STRIDE_F64 + FENCE_MIN_X_F64]! + f[i * FENCE_STRIDE_F64 + FENCE_MAX_X_F64]!) / 2;
    lat[d] = (f[i * FENCE_STRIDE_F64 + FENCE_MIN_Y_F64]! + f[i * FENCE_STRIDE_F64 + FENCE_MAX_Y_F64]!) / 2;
  }
  const startNs = nowNs();
  const deadlineNs = startNs + task.maxMs * 1e6;
  let eventMs = 1_000_000_000_000;
  let done = 0;
  while (done < task.pings && nowNs() < deadlineNs) {
    for (let k = 0; k < WARM_BATCH; k++) {
      const d = (done + k) % WARM_DEVICES;
      const b = home[d]! * FENCE_STRIDE_F64;
      // Why a step of a quarter box: a few pings cross the boundary, so ENTER, EXIT and DWELL paths all run.
      lon[d] = lon[d]! + (random() - 0.5) * 0.5 * (f[b + FENCE_MAX_X_F64]! - f[b + FENCE_MIN_X_F64]!);
      lat[d] = lat[d]! + (random() - 0.5) * 0.5 * (f[b + FENCE_MAX_Y_F64]! - f[b + FENCE_MIN_Y_F64]!);
      const s = telemetry.claim();
      const bf = s * telemetry.strideF64;
      const bi = s * telemetry.strideI32;
      telemetry.f64[bf + TEL_LAT_F64] = lat[d]!;
      telemetry.f64[bf + TEL_LON_F64] = lon[d]!;
      telemetry.f64[bf + TEL_EVENT_TIME_MS_F64] = eventMs;
      telemetry.f64[bf + TEL_ADMIT_TIME_NS_F64] = startNs;
      telemetry.f64[bf + TEL_SPEED_MPS_F64] = 5;
      telemetry.f64[bf + TEL_HEADING_DEG_F64] = 90;
      telemetry.f64[bf + TEL_ACCURACY_M_F64] = 5;
      telemetry.i32[bi + TEL_DEVICE_SLOT_I32] = d;
      telemetry.i32[bi + TEL_LANE_I32] = k % 16 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION;
      eventMs += 10;
    }
    telemetry.publish();
    engine.processBatch(telemetry, telemetry.readSeq(), WARM_BATCH, triggers);
    telemetry.release(WARM_BATCH);
    // Nobody reads the scratch trigger ring: empty it between batches (and writeTrigger empties it within one).
    triggers.release(triggers.available());
    done += WARM_BATCH;
  }
  return done;
}
