/**
 * Device expiry on the ingest thread: a timer runs the registry's sweep, which expires devices idle for longer than
 * `deviceIdleTimeoutMs` by writing an expiry record into the device's shard ring (in ping order: every ping admitted
 * before it is processed first), takes back the slots the dispatcher has freed, and resets what the ingest path keeps
 * per slot when a freed slot takes a new device. The slot's lifecycle is described at DeviceLife in shm/layout.ts.
 */
import type { DeviceState } from '../fences/device-state.js';
import type { LaneAdmission } from '../ingest/admission.js';
import type { DeviceRegistry, ExpiryPort, ReusePort } from '../ingest/device-registry.js';
import { nowNs } from '../shm/clock.js';
import {
  DEV_CROSS_COUNT_I32,
  DEV_CROSS_WINDOW_MS_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  ING_DEVICES_EXPIRED_F64,
  ING_DEVICES_F64,
  ING_DEVICES_REVIVED_F64,
  ING_FREED_SEQ_HIGH_F64,
  ING_SLOTS_FREED_F64,
  ING_SLOTS_REUSED_F64,
  TEL_ACCURACY_M_F64,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_EXPIRE_EPOCH_F64,
  TEL_HEADING_DEG_F64,
  TEL_LANE_EXPIRE,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  ICTL_BUSY_SINCE_TICK_I32,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { ShardScheduler } from './shard-scheduler.js';
import type { StorePredicates } from './ingest-wiring.js';
import type { CompliancePaths } from './compliance-path.js';

/**
 * What resets a reused slot on any ingest thread (DeviceRegistry's ReusePort): the device state's seq, which no thread
 * touches until the slot's next record is published, and what the thread's lane predicates note per slot.
 */
export function slotReusePort(state: DeviceState, predicates: StorePredicates): ReusePort {
  return {
    finalSeqOf: (slot) => state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!,
    reused: (slot, seqFloor) => {
      startReusedSlot(state, slot, seqFloor);
      predicates.forgetSlot(slot);
    },
  };
}

/**
 * The device state a new device in a freed slot starts from, written by the thread that reused it (no other thread
 * touches the slot until its next record is published): its seq floor, and a CROSS budget of its own (the previous
 * device's window, perhaps far ahead on a clock that ran fast, does not carry over).
 */
function startReusedSlot(state: DeviceState, slot: number, seqFloor: number): void {
  state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = seqFloor;
  state.devF64[slot * DEV_STRIDE_F64 + DEV_CROSS_WINDOW_MS_F64] = -Infinity;
  state.devI32[slot * DEV_STRIDE_I32 + DEV_CROSS_COUNT_I32] = 0;
}

/** Shortest sweep period, ms. */
const MIN_SWEEP_MS = 10;
/** Longest sweep period, ms (expiry happens within one period of the timeout). */
const MAX_SWEEP_MS = 1000;

/** The sweep period for an idle timeout: an eighth of it, within [10 ms, 1 s]. */
function sweepPeriodMs(idleTimeoutMs: number): number {
  return Math.min(MAX_SWEEP_MS, Math.max(MIN_SWEEP_MS, Math.floor(idleTimeoutMs / 8)));
}

/** What DeviceExpiry works on. */
export interface DeviceExpiryDeps {
  registry: DeviceRegistry;
  admissions: readonly LaneAdmission[];
  scheduler: ShardScheduler;
  state: DeviceState;
  predicates: StorePredicates;
  /** The devices' paths (an expiry record goes to the shard ring, so the device must be settled on it), or null. */
  paths?: CompliancePaths | null;
  /** The pipeline region's Float64 cells (ING_* counters). */
  counters: Float64Array;
  /** Every telemetry ring (every ingest thread's, `telemetryRingIndex` order) and the shards they serve. */
  allRings: readonly SpscRing[];
  shards: number;
  /** memory.ingestControl: the other ingest threads' busy ticks (ICTL_BUSY_SINCE_TICK_I32). */
  ingestControl: SharedArrayBuffer;
}

/** Sweeps whose ring positions are kept (a slot freed longer ago is checked against the oldest kept: stricter). */
const KEPT_SWEEPS = 64;

/** Expires idle devices and recycles their slots (ingest thread). See the module comment. */
export class DeviceExpiry implements ExpiryPort {
  /** Sweep period, ms. */
  readonly periodMs: number;
  /** Sweeps a device must stay idle through to expire. */
  readonly idleTicks: number;
  private readonly d: DeviceExpiryDeps;
  /** Ingest threads writing telemetry rings. */
  private readonly producers: number;
  /** Per kept sweep (tick % KEPT_SWEEPS): every ring's write sequence when it began, and its tick. */
  private readonly marks: Int32Array;
  private readonly markTicks: Int32Array;
  /**
   * Per kept sweep: a tick such that every ping any ingest thread confirmed before it was published when the sweep
   * began (the oldest busy tick of the other ingest threads, or the sweep's own tick).
   */
  private readonly heldSince: Int32Array;
  private readonly control: Int32Array;
  private lastTick = 0;
  private timer: ReturnType<typeof setInterval> | null = null;

  /** Expiry after `idleTimeoutMs` (> 0) without a ping. */
  constructor(deps: DeviceExpiryDeps, idleTimeoutMs: number) {
    if (!(Number.isFinite(idleTimeoutMs) && idleTimeoutMs > 0)) {
      throw new RangeError(`deviceIdleTimeoutMs must be a finite number > 0, got ${String(idleTimeoutMs)}`);
    }
    this.d = deps;
    this.producers = deps.allRings.length / deps.shards;
    this.marks = new Int32Array(this.producers > 1 ? KEPT_SWEEPS * deps.allRings.length : 0);
    this.markTicks = new Int32Array(KEPT_SWEEPS);
    this.heldSince = new Int32Array(KEPT_SWEEPS);
    this.control = new Int32Array(deps.ingestControl);
    this.periodMs = sweepPeriodMs(idleTimeoutMs);
    // With several ingest threads a device stamped in the previous tick may still be read as idle for one more
    // (its stamp and the sweep's decision cross): two ticks at least.
    this.idleTicks = Math.max(this.producers > 1 ? 2 : 1, Math.ceil(idleTimeoutMs / this.periodMs));
    deps.registry.setExpiryPort(this);
  }

  /** Starts the sweep timer. */
  start(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => this.sweep(), this.periodMs);
    this.timer.unref();
  }

  /**
   * Stops the sweep timer (a drain: no device expires while the pipeline empties); devices marked expired whose record
   * is not written yet (several ingest threads) are put back, so none is left neither live nor expired.
   */
  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.d.registry.cancelPendingExpiries();
    this.publishCounts();
  }

  /** One sweep: expiries written are published and their shards submitted at once. */
  sweep(): void {
    const expired = this.d.registry.sweep(this.idleTicks);
    if (expired > 0) this.d.scheduler.flush();
    this.publishCounts();
  }

  /** See ExpiryPort.expire: the record goes into the ring only below its watermark (pings come first). */
  expire(slot: number, shard: number, epoch: number): boolean {
    // A device whose last ping or trigger is still on the COMPLIANCE path waits for a later sweep.
    const paths = this.d.paths;
    if (paths !== undefined && paths !== null && !paths.toShardRing(slot)) return false;
    const admission = this.d.admissions[shard]!;
    const at = admission.claimControl();
    if (at < 0) return false;
    const ring = admission.ring;
    const f = at * ring.strideF64;
    const f64 = ring.f64;
    f64[f + TEL_LAT_F64] = Number.NaN;
    f64[f + TEL_LON_F64] = Number.NaN;
    f64[f + TEL_EVENT_TIME_MS_F64] = Number.NaN;
    f64[f + TEL_ADMIT_TIME_NS_F64] = nowNs();
    f64[f + TEL_EXPIRE_EPOCH_F64] = epoch;
    f64[f + TEL_HEADING_DEG_F64] = Number.NaN;
    f64[f + TEL_ACCURACY_M_F64] = Number.NaN;
    const i = at * ring.strideI32;
    ring.i32[i + TEL_DEVICE_SLOT_I32] = slot;
    ring.i32[i + TEL_LANE_I32] = TEL_LANE_EXPIRE;
    // The record holds the device on its shard ring until containment has released it.
    this.d.paths?.noteClaimed(slot, ring);
    this.d.scheduler.noteClaimed(shard, ring);
    return true;
  }

  /** See ExpiryPort.markSweep: notes every ring's write position (several ingest threads only). */
  markSweep(tick: number): void {
    this.lastTick = tick;
    if (this.producers === 1) return;
    const rings = this.d.allRings;
    const k = tick & (KEPT_SWEEPS - 1);
    this.markTicks[k] = tick;
    // Busy ticks before write positions: a ping held when its thread's cell was read is published later, so it is not
    // under this sweep's marks; heldSince says so.
    let held = tick;
    for (let p = 1; p < this.producers; p++) {
      const since = Atomics.load(this.control, ICTL_BUSY_SINCE_TICK_I32 + p - 1);
      if (since !== 0 && ((since - held) | 0) < 0) held = since;
    }
    this.heldSince[k] = held;
    for (let r = 0; r < rings.length; r++) this.marks[k * rings.length + r] = rings[r]!.writeSeq();
  }

  /**
   * See ExpiryPort.consumedSince: every ingest thread's ring of `shard` read past where it was written when the sweep
   * of `tick` began. One ingest thread: always (the device's pings were all ahead of its expiry record in one ring).
   */
  consumedSince(tick: number, shard: number): boolean {
    if (this.producers === 1) return true;
    // A sweep no longer kept: the oldest kept one began later, so what it asks covers more.
    let t = ((this.lastTick - tick) | 0) >= KEPT_SWEEPS ? (this.lastTick - KEPT_SWEEPS + 1) | 0 : tick;
    let k = t & (KEPT_SWEEPS - 1);
    // The first kept sweep from `tick` on that began with nothing held from before `tick` (pings an ingest thread
    // confirmed before `tick` but had not published yet are under no earlier sweep's marks).
    for (;;) {
      if (this.markTicks[k] !== t) return false;
      if (((this.heldSince[k]! - tick) | 0) >= 0) break;
      if (t === this.lastTick) return false;
      t = (t + 1) | 0 || 1;
      k = t & (KEPT_SWEEPS - 1);
    }
    const rings = this.d.allRings;
    const shards = this.d.shards;
    for (let p = 0; p < this.producers; p++) {
      const r = p * shards + shard;
      if (((rings[r]!.readSeq() - this.marks[k * rings.length + r]!) | 0) < 0) return false;
    }
    return true;
  }

  /** See ExpiryPort.finalSeqOf. */
  finalSeqOf(slot: number): number {
    return this.d.state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!;
  }

  /**
   * See ExpiryPort.reused: no thread touches a freed slot's device state until its next record is published, so this
   * thread may set the seq the new device continues from.
   */
  reused(slot: number, seqFloor: number): void {
    startReusedSlot(this.d.state, slot, seqFloor);
    this.d.predicates.forgetSlot(slot);
    this.d.paths?.forgetSlot(slot);
  }

  /** Copies the registry's lifecycle counts into the ingest counters. */
  publishCounts(): void {
    const c = this.d.counters;
    const life = this.d.registry.life;
    c[ING_DEVICES_F64] = life.occupied;
    c[ING_DEVICES_EXPIRED_F64] = life.expired;
    c[ING_DEVICES_REVIVED_F64] = life.revived;
    c[ING_SLOTS_FREED_F64] = life.freed;
    c[ING_SLOTS_REUSED_F64] = life.reused;
    if (life.freedSeqHigh > -Infinity) c[ING_FREED_SEQ_HIGH_F64] = life.freedSeqHigh;
  }
}
