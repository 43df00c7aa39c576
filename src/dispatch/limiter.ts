/**
 * Admission in front of one downstream: permits bounded by the current `Limit` and a static safety cap.
 *
 * Usage: `tryAcquire(nowNs)` immediately before calling the downstream (so the permit's start time is the call's
 * start and the RTT never includes the wait for a permit), then exactly one of `releaseSuccess`, `releaseIgnore`,
 * `releaseDropped`. A permit is a number that encodes its slot and a generation: releasing a permit twice, or a stale
 * one, does nothing and returns false. Nothing here allocates after construction.
 *
 * With a loop-stall state (`LoopStallMeter.cells`), the part of a round trip during which the caller's own event loop
 * was unavailable is taken out of the sample the algorithm sees: `rtt - stall`, but never below the algorithm's
 * reference RTT (a stall that overlapped the downstream's own work must not make the downstream look faster than its
 * baseline). A sample that met no stall passes unchanged. The RTT histogram and sums keep the measured round trip.
 */
import type { Limit } from './limits/limit.js';
import { DS_RTT_BUCKET_BOUNDS_MS, DS_RTT_BUCKET_COUNT } from '../shm/layout.js';
import { checkNumber } from './validate.js';
import { STALL_ALLOWANCE_NS, STALL_LAST_TICK_NS, STALL_TOTAL_NS } from './loop-stall.js';

/** Returned by `tryAcquire` when no permit is available. */
export const NO_PERMIT = -1;

/** `releaseNow` outcome: success (a sample). */
export const RELEASE_SUCCESS = 0;
/** `releaseNow` outcome: loss (a sample with didDrop). */
export const RELEASE_DROPPED = 1;
/** `releaseNow` outcome: ignore (no sample). */
export const RELEASE_IGNORE = 2;

/** RTT histogram bucket bounds in ns, from the shared layout's ms bounds. */
const RTT_BOUNDS_NS = Float64Array.from(DS_RTT_BUCKET_BOUNDS_MS, (ms) => ms * 1e6);

/** Admission for one downstream. */
export class Limiter {
  /** The algorithm. */
  readonly algorithm: Limit;
  /** Static safety cap: at most this many permits whatever the algorithm says. */
  readonly safetyCap: number;
  /** Permit slots (safetyCap rounded up to a power of two). */
  readonly slotCount: number;
  private readonly slotMask: number;
  private readonly startNs: Float64Array;
  private readonly inflightAtStart: Int32Array;
  /** Cell 0: the RTT the algorithm is given (the measured one less any local stall), ns. */
  private readonly seenCell = new Float64Array(1);
  /** The stall clock when each permit's request started, ns. */
  private readonly stallAtStartNs: Float64Array;
  /** The caller's loop-stall state (null: samples are taken as measured). */
  private readonly stall: Float64Array | null;
  private readonly generation: Float64Array;
  private readonly active: Uint8Array;
  private readonly freeSlots: Int32Array;
  private freeTop: number;
  private inflightCount = 0;
  /** The time (ns) of the acquire or release being applied; callers may write it and use the `...Now` methods. */
  readonly timeCell = new Float64Array(1);

  /** Acquire attempts refused. */
  rejected = 0;
  /** Permits released as success. */
  succeeded = 0;
  /** Permits released as dropped (loss). */
  dropped = 0;
  /** Permits released as ignored. */
  ignored = 0;
  /** Limit increases seen after samples. */
  limitIncreases = 0;
  /** Limit decreases seen after samples. */
  limitDecreases = 0;
  /** Sum of RTT samples, ns. */
  rttSumNs = 0;
  /** Count of RTT samples. */
  rttCount = 0;
  /** Smallest RTT sample seen, ns (Infinity before any). */
  rttMinSeenNs = Infinity;
  /** Local stall taken out of samples, ns (see the class comment). */
  localStallNs = 0;
  /** Samples a local stall was taken out of. */
  stallCorrectedSamples = 0;
  /** RTT histogram counts (bucket i: RTT <= DS_RTT_BUCKET_BOUNDS_MS[i]; last bucket: above all bounds). */
  readonly rttBuckets = new Float64Array(DS_RTT_BUCKET_COUNT);

  /** `safetyCap` must be an integer in [1, 65536]; `stall` is the caller's `LoopStallMeter.cells` (optional). */
  constructor(algorithm: Limit, safetyCap: number, stall: Float64Array | null = null) {
    checkNumber('safetyCap', safetyCap, 1, 65536, true);
    this.algorithm = algorithm;
    this.stall = stall;
    this.safetyCap = safetyCap;
    let slots = 1;
    while (slots < safetyCap) slots <<= 1;
    this.slotCount = slots;
    this.slotMask = slots - 1;
    this.startNs = new Float64Array(slots);
    this.inflightAtStart = new Int32Array(slots);
    this.stallAtStartNs = new Float64Array(slots);
    this.generation = new Float64Array(slots);
    this.active = new Uint8Array(slots);
    this.freeSlots = new Int32Array(slots);
    for (let i = 0; i < slots; i++) this.freeSlots[i] = slots - 1 - i;
    this.freeTop = slots;
  }

  /** The effective limit: the algorithm's limit under the safety cap. */
  get limit(): number {
    const l = this.algorithm.limit;
    return l < this.safetyCap ? l : this.safetyCap;
  }

  /** Permits in flight. */
  get inflight(): number {
    return this.inflightCount;
  }

  /** Reference RTT for metrics: the algorithm's, or the smallest sample seen when it keeps none; ns. */
  get rttMinNs(): number {
    const r = this.algorithm.referenceRttNs;
    if (!Number.isNaN(r)) return r;
    return this.rttMinSeenNs === Infinity ? NaN : this.rttMinSeenNs;
  }

  /** True when a permit would be granted now (no side effect). */
  hasPermit(): boolean {
    return this.inflightCount < this.limit;
  }

  /** Grants a permit starting at `nowNs`, or returns NO_PERMIT (counted as rejected). */
  tryAcquire(nowNs: number): number {
    this.timeCell[0] = nowNs;
    return this.tryAcquireNow();
  }

  /**
   * `tryAcquire` at the time in `timeCell[0]`. With `releaseNow`, the strictly allocation-free path: a double passed
   * as an argument to a call the optimiser does not inline is boxed, a typed-array cell is not.
   */
  tryAcquireNow(): number {
    const nowNs = this.timeCell[0]!;
    if (this.inflightCount >= this.limit || this.freeTop === 0) {
      this.rejected++;
      return NO_PERMIT;
    }
    const slot = this.freeSlots[--this.freeTop]!;
    this.active[slot] = 1;
    this.startNs[slot] = nowNs;
    if (this.stall !== null) this.markStallAtStart(slot);
    this.inflightCount++;
    this.inflightAtStart[slot] = this.inflightCount;
    return this.generation[slot]! * this.slotCount + slot;
  }

  /** Slot index of a permit (for per-request buffers indexed by slot). */
  slotOf(permit: number): number {
    return permit & this.slotMask;
  }

  /** Restarts a permit's clock (call just before the I/O if anything happened between acquire and send). */
  restart(permit: number, nowNs: number): void {
    if (!this.isLive(permit)) return;
    const slot = permit & this.slotMask;
    this.startNs[slot] = nowNs;
    this.timeCell[0] = nowNs;
    if (this.stall !== null) this.markStallAtStart(slot);
  }

  /** True while `permit` is held (granted and not yet released). */
  isLive(permit: number): boolean {
    if (!(permit >= 0)) return false;
    const slot = permit & this.slotMask;
    return this.active[slot] === 1 && Math.floor(permit / this.slotCount) === this.generation[slot];
  }

  /**
   * Releases with success: the RTT (`nowNs - start`) is a sample. Returns false for a stale or repeated release.
   * `measuredHere` false: the RTT was measured on another thread (a callback's own duration), so this thread's loop
   * stalls are not in it and are not taken out.
   */
  releaseSuccess(permit: number, nowNs: number, measuredHere = true): boolean {
    this.timeCell[0] = nowNs;
    if (!this.free(permit)) return false;
    this.succeeded++;
    this.sample(permit & this.slotMask, false, measuredHere);
    return true;
  }

  /** Releases as loss (error, timeout, 429/503): a sample with `didDrop`. False for a stale or repeated release. */
  releaseDropped(permit: number, nowNs: number, measuredHere = true): boolean {
    this.timeCell[0] = nowNs;
    if (!this.free(permit)) return false;
    this.dropped++;
    this.sample(permit & this.slotMask, true, measuredHere);
    return true;
  }

  /** Releases at the time in `timeCell[0]` with `outcome` (RELEASE_SUCCESS, RELEASE_DROPPED or RELEASE_IGNORE). */
  releaseNow(permit: number, outcome: number): boolean {
    if (outcome === RELEASE_IGNORE) return this.releaseIgnore(permit);
    if (!this.free(permit)) return false;
    if (outcome === RELEASE_DROPPED) this.dropped++;
    else this.succeeded++;
    this.sample(permit & this.slotMask, outcome === RELEASE_DROPPED, true);
    return true;
  }

  /** Releases without a sample (the outcome says nothing about capacity). False for a stale or repeated release. */
  releaseIgnore(permit: number): boolean {
    if (!this.free(permit)) return false;
    this.ignored++;
    return true;
  }

  private free(permit: number): boolean {
    if (!this.isLive(permit)) return false;
    const slot = permit & this.slotMask;
    this.active[slot] = 0;
    // A new generation makes every copy of this permit stale.
    this.generation[slot] = this.generation[slot]! + 1;
    this.freeSlots[this.freeTop++] = slot;
    this.inflightCount--;
    return true;
  }

  private sample(slot: number, didDrop: boolean, measuredHere: boolean): void {
    const start = this.startNs[slot]!;
    const rtt = this.timeCell[0]! - start;
    // Kept small (the stall correction is a call of its own) so the algorithm's trampoline is inlined here.
    this.seenCell[0] = rtt;
    if (this.stall !== null && measuredHere) this.takeOutStall(slot);
    const before = this.algorithm.limit;
    this.algorithm.onSample(start, this.seenCell[0]!, this.inflightAtStart[slot]!, didDrop);
    const after = this.algorithm.limit;
    if (after > before) this.limitIncreases++;
    else if (after < before) this.limitDecreases++;
    this.rttSumNs += rtt;
    this.rttCount++;
    if (rtt < this.rttMinSeenNs) this.rttMinSeenNs = rtt;
    let b = 0;
    // Twelve bounds: a linear scan is cheaper than a search.
    while (b < RTT_BOUNDS_NS.length && rtt > RTT_BOUNDS_NS[b]!) b++;
    this.rttBuckets[b] = this.rttBuckets[b]! + 1;
  }

  /** The stall clock (as `stallClockNs` in loop-stall.ts) at `timeCell[0]`, into the slot's start cell. */
  private markStallAtStart(slot: number): void {
    const c = this.stall!;
    const pending = this.timeCell[0]! - c[STALL_LAST_TICK_NS]! - c[STALL_ALLOWANCE_NS]!;
    this.stallAtStartNs[slot] = pending > 0 ? c[STALL_TOTAL_NS]! + pending : c[STALL_TOTAL_NS]!;
  }

  /** Takes the local stall since the slot's start out of `seenCell[0]` (see the class comment). */
  private takeOutStall(slot: number): void {
    const c = this.stall!;
    const pending = this.timeCell[0]! - c[STALL_LAST_TICK_NS]! - c[STALL_ALLOWANCE_NS]!;
    const local = (pending > 0 ? c[STALL_TOTAL_NS]! + pending : c[STALL_TOTAL_NS]!) - this.stallAtStartNs[slot]!;
    if (!(local > 0)) return;
    const rtt = this.seenCell[0]!;
    // Only a stalled sample reads the reference (a getter's double may be boxed).
    const ref = this.algorithm.referenceRttNs;
    const floor = ref > 0 ? (ref < rtt ? ref : rtt) : 0;
    const seen = rtt - local > floor ? rtt - local : floor;
    this.seenCell[0] = seen;
    this.localStallNs += rtt - seen;
    this.stallCorrectedSamples++;
  }
}
