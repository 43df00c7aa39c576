/**
 * Lane admission: the one place where the router decides to lose telemetry, by priority, and counts it.
 *
 * Runs on the ingest thread, in front of each shard's telemetry ring (that thread is the ring's only producer).
 * For each ping, in order:
 * 1. while draining, every ping is shed as DRAINING;
 * 2. IDLE and TRANSITION pings may fill at most `capacitySlots - reservedSlots` slots, COMPLIANCE pings every slot:
 *    the ring's last `reservedSlots` (allocated from `reservedFraction`) are unreachable to the lower lanes; a ping
 *    with no reachable slot is shed as RING_FULL;
 * 3. at and above the watermark (depth >= watermarkFraction * capacity) an IDLE ping must also take a token from the
 *    idle token bucket, or it is shed as RATE_LIMITED.
 * Depth counts published-but-unreleased records and records claimed but not yet published. The producer's cached
 * view of the consumer only overstates the depth, so the consumer's position is re-read only when the cached depth
 * would shed or rate-limit.
 *
 * Counters (layout ADM_* cells of a shared Float64Array block): offered and admitted per lane, shed per lane and
 * reason; `offered = admitted + shed` holds per lane after every call. They are written only by this thread and read
 * by the metrics collectors at scrape time.
 *
 * Time is a parameter (ns); nothing here reads a clock, sets a timer or allocates per call. No double crosses a call
 * inside: `admit(lane, nowNs)` only stores the time in a typed-array cell and is small enough that V8 always inlines it
 * at a monomorphic call site (a double passed to a call that is not inlined is boxed, 16 bytes per call);
 * `admitAt(lane, cells, index)` takes the time from a cell and needs no inlining at all. Behind them, a fast path (one
 * depth comparison against a per-lane limit, which is 0 while draining) in front of `admitSlow()`.
 */
import {
  ADM_ADMITTED_F64,
  ADM_BLOCK_USED_F64,
  ADM_OFFERED_F64,
  ADM_SHED_F64,
  Lane,
  LANE_COUNT,
  SHED_REASON_COUNT,
  ShedReason,
} from '../shm/layout.js';
import { reservedSlotsFor } from '../shm/regions.js';
import type { SpscRing } from '../shm/ring.js';
import { validateAdmissionOptions, type AdmissionOptions } from './admission-options.js';
import { TokenBucket } from './token-bucket.js';

// Plain module constants: the hot path loads no properties of the layout objects.
const LANE_IDLE = Lane.IDLE;
const LANE_COMPLIANCE = Lane.COMPLIANCE;
const SHED_RING_FULL = ShedReason.RING_FULL;
const SHED_RATE_LIMITED = ShedReason.RATE_LIMITED;
const SHED_DRAINING = ShedReason.DRAINING;

export {
  DEFAULT_ADMISSION_OPTIONS,
  MAX_RESERVED_FRACTION,
  validateAdmissionOptions,
  type AdmissionOptions,
} from './admission-options.js';
export { allocateAdmissionCounters, allocateTelemetryRing, reservedSlotsFor } from '../shm/regions.js';

/** The shed reason encoded in a negative `LaneAdmission.admit` result (`-1 - reason`). */
export function shedReasonOf(result: number): ShedReason {
  return (-1 - result) as ShedReason;
}

/** Index of the shed counter of (lane, reason) relative to a counter block's base. */
export function shedCounterIndex(lane: Lane, reason: ShedReason): number {
  return ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason;
}

/** Admission for one shard's telemetry ring; owned by the ring's producer thread. */
export class LaneAdmission {
  /** The ring this admission fronts (this object's thread is its producer). */
  readonly ring: SpscRing;
  /** Validated options in force. */
  readonly options: AdmissionOptions;
  /** Slots IDLE and TRANSITION pings may fill: capacity minus the ring's reserved slice. */
  readonly sharedSlots: number;
  /** Depth at and above which IDLE pings must pass the token bucket: ceil(watermarkFraction * capacity). */
  readonly watermarkSlots: number;
  /** The IDLE lane's token bucket, consulted only at and above the watermark. */
  readonly idleBucket: TokenBucket;

  private readonly counters: Float64Array;
  private readonly base: number;
  private readonly capacitySlots: number;
  private draining = false;
  /** nowNs of the admit() in progress, handed on through a cell so it is never boxed (see admit()). */
  private readonly nowCell = new Float64Array(1);
  /** Per lane, the cached depth below which admit() takes its fast path (see updateFastPath()). */
  private readonly fastPathDepthLimit = new Int32Array(LANE_COUNT);

  /**
   * @param ring the shard's telemetry ring; its reserved slice must match `options.reservedFraction`
   *   (allocate it with `allocateTelemetryRing(capacitySlots, options.reservedFraction)`)
   * @param counters shared admission counters (see `allocateAdmissionCounters`)
   * @param counterBaseF64 first cell of this shard's block (`shard * ADM_BLOCK_F64`)
   * @param options admission options (validated again here)
   * @param nowNs current time; the idle bucket starts full at this instant
   */
  constructor(ring: SpscRing, counters: Float64Array, counterBaseF64: number, options: AdmissionOptions, nowNs: number) {
    const valid = validateAdmissionOptions(options);
    if (!Number.isInteger(counterBaseF64) || counterBaseF64 < 0 || counterBaseF64 + ADM_BLOCK_USED_F64 > counters.length) {
      throw new RangeError(
        `counterBaseF64 must be an integer in [0, ${counters.length - ADM_BLOCK_USED_F64}], got ${String(counterBaseF64)}`,
      );
    }
    const expectedReserved = reservedSlotsFor(ring.capacitySlots, valid.reservedFraction);
    if (ring.reservedSlots !== expectedReserved) {
      throw new RangeError(
        `ring reserves ${ring.reservedSlots} slots but options.reservedFraction ${valid.reservedFraction} of ` +
          `${ring.capacitySlots} slots needs ${expectedReserved}: allocate it with allocateTelemetryRing()`,
      );
    }
    this.ring = ring;
    this.options = valid;
    this.counters = counters;
    this.base = counterBaseF64;
    this.capacitySlots = ring.capacitySlots;
    this.sharedSlots = ring.capacitySlots - ring.reservedSlots;
    this.watermarkSlots = Math.ceil(valid.watermarkFraction * ring.capacitySlots);
    this.idleBucket = new TokenBucket(valid.idleBucketCapacity, valid.idleBucketRatePerSecond, nowNs);
    this.updateFastPath();
  }

  /**
   * Admits or sheds one ping of `lane` at time nowNs. Returns the claimed slot index (>= 0) when admitted — the caller
   * writes the record there and later calls ring.publish() — or a negative value -1 - ShedReason when shed.
   * Updates offered/admitted/shed counters (layout ADM_* cells at counterBaseF64). Allocates nothing.
   */
  admit(lane: Lane, nowNs: number): number {
    // Two statements, so that V8 always inlines it (a function this small is inlined whatever is left of the
    // caller's inlining budget): a double argument to a call that is not inlined gets boxed, an allocation per call.
    // From here on the time travels in a typed-array cell, never as an argument.
    this.nowCell[0] = nowNs;
    return this.admitTimed(lane);
  }

  /**
   * admit() for a time held in `timeCells[cellIndex]` (e.g. `PingFields.values[PF_ADMIT_TIME_NS_F64]`): no double
   * crosses the call, so it allocates nothing whatever V8 inlines. The form for per-ping code.
   */
  admitAt(lane: Lane, timeCells: Float64Array, cellIndex: number): number {
    this.nowCell[0] = timeCells[cellIndex]!;
    return this.admitTimed(lane);
  }

  /**
   * admitAt() for a ping of a pausable source (file, stdin, in-process, a TCP connection that waits): the same lane
   * limits and draining, but never the IDLE token bucket, which protects the ring from a live source that cannot be
   * slowed; a pausable source is slowed instead (see src/ingest/backpressure.ts, which feeds it only what fits, so
   * this sheds nothing unless draining). Counted like admitAt(). Allocates nothing.
   */
  admitPausableAt(lane: Lane, timeCells: Float64Array, cellIndex: number): number {
    this.nowCell[0] = timeCells[cellIndex]!;
    const counters = this.counters;
    const base = this.base;
    const ring = this.ring;
    counters[base + ADM_OFFERED_F64 + lane]++;
    let reason: ShedReason = SHED_DRAINING;
    if (!this.draining) {
      const limitSlots = lane === LANE_COMPLIANCE ? this.capacitySlots : this.sharedSlots;
      // The cached depth only overstates: re-read the consumer's position before shedding.
      if (ring.producerDepth() < limitSlots || ring.refreshDepth() < limitSlots) {
        counters[base + ADM_ADMITTED_F64 + lane]++;
        return ring.claim();
      }
      reason = SHED_RING_FULL;
    }
    counters[base + ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason]++;
    return -1 - reason;
  }

  /**
   * Claims a slot for a control record (a device expiry), not a ping: only while the ring is below both the IDLE
   * watermark and the lower lanes' limit, so control records never take room pings under pressure need; -1 otherwise
   * (and while draining). Counted nowhere; allocates nothing.
   */
  claimControl(): number {
    if (this.draining) return -1;
    const limitSlots = this.watermarkSlots < this.sharedSlots ? this.watermarkSlots : this.sharedSlots;
    const ring = this.ring;
    if (ring.producerDepth() < limitSlots || ring.refreshDepth() < limitSlots) return ring.claim();
    return -1;
  }

  /** Starts (true) or stops (false) draining: while draining every offered ping is shed as DRAINING. */
  setDraining(draining: boolean): void {
    this.draining = draining;
    this.updateFastPath();
  }

  /** Whether admission is draining. */
  isDraining(): boolean {
    return this.draining;
  }

  /** Offered pings of `lane` so far (reads this shard's counter block). */
  offered(lane: Lane): number {
    return this.counters[this.base + ADM_OFFERED_F64 + lane]!;
  }

  /** Admitted pings of `lane` so far. */
  admitted(lane: Lane): number {
    return this.counters[this.base + ADM_ADMITTED_F64 + lane]!;
  }

  /** admit() with the time already in nowCell: counts the offer, then the fast path or admitSlow(). Takes no double. */
  private admitTimed(lane: Lane): number {
    const counters = this.counters;
    const base = this.base;
    const ring = this.ring;
    counters[base + ADM_OFFERED_F64 + lane]++;
    // Fast path: the cached depth (it only overstates) is below everything that could stop this lane.
    if (ring.producerDepth() < this.fastPathDepthLimit[lane]!) {
      counters[base + ADM_ADMITTED_F64 + lane]++;
      return ring.claim();
    }
    return this.admitSlow(lane);
  }

  /**
   * The rest of admit(), for a ping the fast path could not admit: draining, a lane near its limit, or IDLE at or
   * above the watermark. Takes no double (the time is in nowCell); returns admit()'s result.
   */
  private admitSlow(lane: Lane): number {
    const counters = this.counters;
    const base = this.base;
    const ring = this.ring;
    const watermarkSlots = this.watermarkSlots;
    // Every field is read on every call, whatever the branch: optimised code compiled before a rare path (a drain, a
    // full ring) was first taken then never meets a property load it has no feedback for, which would deoptimise it
    // and run the path unoptimised, allocating, until V8 recompiles it.
    const capacitySlots = this.capacitySlots;
    const sharedSlots = this.sharedSlots;
    const idleBucket = this.idleBucket;
    const nowCell = this.nowCell;
    const limitSlots = lane === LANE_COMPLIANCE ? capacitySlots : sharedSlots;
    let reason: ShedReason = SHED_DRAINING;
    if (!this.draining) {
      // The cached depth only overstates: re-read the consumer's position before shedding or rate-limiting.
      const depthSlots = ring.refreshDepth();
      if (depthSlots >= limitSlots) {
        reason = SHED_RING_FULL;
      } else if (lane !== LANE_IDLE || depthSlots < watermarkSlots || idleBucket.tryTakeOneAt(nowCell, 0)) {
        counters[base + ADM_ADMITTED_F64 + lane]++;
        return ring.claim();
      } else {
        reason = SHED_RATE_LIMITED;
      }
    }
    counters[base + ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason]++;
    return -1 - reason;
  }

  /** Depth limits of the fast path per lane: 0 while draining (everything goes the slow way). */
  private updateFastPath(): void {
    const limits = this.fastPathDepthLimit;
    const draining = this.draining;
    limits[LANE_IDLE] = draining ? 0 : Math.min(this.sharedSlots, this.watermarkSlots);
    limits[Lane.TRANSITION] = draining ? 0 : this.sharedSlots;
    limits[LANE_COMPLIANCE] = draining ? 0 : this.capacitySlots;
  }

  /** Pings of `lane` shed for `reason` so far. */
  shedCount(lane: Lane, reason: ShedReason): number {
    return this.counters[this.base + shedCounterIndex(lane, reason)]!;
  }
}
