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
 *    idle token bucket, or it is shed as RATE_LIMITED;
 * 4. (live sources only) while the queue-delay controller sheds, IDLE and TRANSITION pings are shed as QUEUE_DELAY.
 *    `observeQueueDelay()`, called once per read chunk, looks at how long the oldest record in the ring has waited:
 *    above `queueDelayTargetMs` for `queueDelayIntervalMs` (or again soon after a shedding spell) it sheds until the
 *    wait is back under the target. A FIFO ring's wait is what every ping behind it waits, COMPLIANCE included, so
 *    holding the wait near the target under a sustained overload is what keeps the COMPLIANCE held time short; a
 *    burst shorter than the interval is queued instead (the ring's slots bound it).
 * Pausable sources never meet steps 3 and 4: they wait for room instead (src/ingest/backpressure.ts).
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
  TEL_ADMIT_TIME_NS_F64,
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
const SHED_QUEUE_DELAY = ShedReason.QUEUE_DELAY;

/** Cells of the queue-delay controller's state (LaneAdmission.delayState); -1 where unset. */
/** Start of the current drain-rate window, ns. */
const DQ_WINDOW_START = 0;
/** The ring's read sequence at the window's start. */
const DQ_WINDOW_READ_SEQ = 1;
/** Drain rate of the consumer, records per ns (a running average over windows). */
const DQ_DRAIN_PER_NS = 2;
/** Since when the oldest record's wait has been above the target, ns. */
const DQ_ABOVE_SINCE = 3;
/** When the last spell ended, ns. */
const DQ_SPELL_END = 4;
/** When a ping was last shed for queue delay, ns. */
const DQ_LAST_SHED = 5;
/** 1 when a look in the current window found the ring empty (the consumer waited for records), else 0. */
const DQ_STARVED = 6;
/** Since when the oldest record's wait has been above the target while the consumer kept reading, ns. */
const DQ_WAIT_SINCE = 7;
/** The ring's depth at DQ_WAIT_SINCE, slots. */
const DQ_WAIT_DEPTH = 8;
/** The ring's read sequence at the last look. */
const DQ_LAST_READ_SEQ = 9;
/** When a look last found the read sequence advanced (the consumer reading), ns. */
const DQ_LAST_READ_NS = 10;
/** When a look last found the ring empty, ns. */
const DQ_LAST_EMPTY_NS = 11;
const DQ_CELLS = 12;
/**
 * Intervals a backlog must build below the watermark before it starts a spell (see observeQueueDelay): longer than a
 * consumer's stall on a busy host, which it then catches up, short next to a sustained overload.
 */
const DQ_BACKLOG_INTERVALS = 10;
/** Growth of a spell's depth limit after a window in which the consumer found the ring empty. */
const DQ_STARVED_GROWTH = 1.5;
/** Drain-rate window: longer than a containment task's pass over its shards. */
const DQ_RATE_WINDOW_NS = 20e6;
/** Smallest depth limit of a spell: a few records per shard keep the consumer's batches worth taking. */
const MIN_DELAY_DEPTH_SLOTS = 16;

export { DEFAULT_ADMISSION_OPTIONS, validateAdmissionOptions, type AdmissionOptions } from './admission-options.js';
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
  /** Queue-delay target and interval, ns (target 0: the controller is off). */
  private readonly delayTargetNs: number;
  private readonly delayIntervalNs: number;
  /** Queue-delay controller state, ns and slots (the DQ_* cells below); allocated once. */
  private readonly delayState = new Float64Array(DQ_CELLS).fill(-1);
  /** True during a shedding spell of the queue-delay controller. */
  private delayShedding = false;
  /** During a spell, the depth at and above which live IDLE and TRANSITION pings are shed (QUEUE_DELAY), in [0]. */
  private readonly delayLimitSlots = new Int32Array(1);

  /**
   * @param ring the shard's telemetry ring; its reserved slice must match `options.reservedFraction`
   *   (allocate it with `allocateTelemetryRing(capacitySlots, options.reservedFraction)`)
   * @param counters shared admission counters (see `allocateAdmissionCounters`)
   * @param counterBaseF64 first cell of this shard's block (`shard * ADM_BLOCK_F64`)
   * @param options admission options (validated again here)
   * @param nowNs current time; the idle bucket starts full at this instant
   */
  constructor(
    ring: SpscRing,
    counters: Float64Array,
    counterBaseF64: number,
    options: AdmissionOptions,
    nowNs: number,
  ) {
    const valid = validateAdmissionOptions(options);
    if (
      !Number.isInteger(counterBaseF64) ||
      counterBaseF64 < 0 ||
      counterBaseF64 + ADM_BLOCK_USED_F64 > counters.length
    ) {
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
    this.idleBucket = new TokenBucket(valid.idleBucketCapacity, valid.idleBucketRatePerSec, nowNs);
    this.delayTargetNs = valid.queueDelayTargetMs * 1e6;
    this.delayIntervalNs = valid.queueDelayIntervalMs * 1e6;
    this.updateFastPath();
  }

  /**
   * The queue-delay controller's look at the ring, at the time in `timeCells[cellIndex]` (ns, the clock records are
   * stamped with), told whether the consumer has run out of records (`consumerIdle`: every ring it serves is empty).
   * Call it once per read chunk, not per ping; allocates nothing.
   *
   * It measures how fast the consumer drains this ring (over windows of DQ_RATE_WINDOW_NS) and how long the oldest
   * record has waited. A spell starts when that wait has been above the target for the interval (at once when the
   * last spell ended less than an interval ago) while the ring is at or above the watermark: a sustained overload,
   * not a consumer that stalled for a moment. Below the watermark a spell also starts when a backlog builds while the
   * consumer works flat out: the wait has been above the target for DQ_BACKLOG_INTERVALS intervals, the consumer kept
   * reading (it read within the last half interval; a stall restarts the clock), the ring was never empty meanwhile (a consumer
   * that batches empties it, an overloaded one never does), and the depth is no lower than when the wait went above
   * the target (a consumer catching up after a stall shrinks it). So an overload that grows slowly is shed at the
   * target's depth instead of filling the ring to the watermark first. Within DQ_BACKLOG_INTERVALS intervals of a
   * spell's end one interval of that evidence is enough: an overload that outlasts a spell is shed again before the
   * ring refills. During a spell, live IDLE and TRANSITION pings are admitted only
   * while the depth is under what the consumer drains within the target (at least MIN_DELAY_DEPTH_SLOTS): the limit
   * works on the depth a new ping would wait behind, so the queue never overshoots by what arrives while the oldest
   * record ages. After a window in which the consumer ran out of records the limit grows instead (by
   * DQ_STARVED_GROWTH): the limit held it back, so its drain rate understates what it can do. A spell ends once
   * nothing was shed for an interval and the oldest record's wait is under the target.
   */
  observeQueueDelay(timeCells: Float64Array, cellIndex: number, consumerIdle: boolean): void {
    const target = this.delayTargetNs;
    if (target === 0) return;
    // Straight-line: every field and cell is read, every value computed and every store made on every call (the
    // branches below only select among values already computed). A path first taken late must meet no operation
    // without type feedback, or the function deoptimises and allocates until V8 recompiles it (as in admitSlow).
    const interval = this.delayIntervalNs;
    const ring = this.ring;
    const st = this.delayState;
    const limitCell = this.delayLimitSlots;
    const sharedSlots = this.sharedSlots;
    const watermarkSlots = this.watermarkSlots;
    const wasShedding = this.delayShedding;
    const now = timeCells[cellIndex]!;
    const readSeq = ring.readSeq();
    const writeSeq = ring.writeSeq();
    const empty = writeSeq === readSeq;
    // Published records not yet read, exact (producerDepth may count from a stale read sequence).
    const backlogSlots = (writeSeq - readSeq) | 0;
    const depthSlots = ring.producerDepth();
    // The record at the read sequence is published when the ring is not empty (and only this thread writes records):
    // its admission time is the wait of the oldest record still in the ring.
    const headAdmitNs = ring.f64[(readSeq & ring.mask) * ring.strideF64 + TEL_ADMIT_TIME_NS_F64]!;
    const waited = empty ? 0 : now - headAdmitNs;
    const windowStart = st[DQ_WINDOW_START]!;
    const windowReadSeq = st[DQ_WINDOW_READ_SEQ]!;
    const drainBefore = st[DQ_DRAIN_PER_NS]!;
    const aboveSince = st[DQ_ABOVE_SINCE]!;
    const spellEnd = st[DQ_SPELL_END]!;
    const lastShed = st[DQ_LAST_SHED]!;
    const limitBefore = limitCell[0]!;
    const starvedBefore = st[DQ_STARVED]! > 0;
    const starved = consumerIdle || starvedBefore;
    // The drain rate over the window that ends now (if one does), averaged with the previous windows'.
    const windowElapsed = now - windowStart;
    const rate = (readSeq - windowReadSeq) / windowElapsed;
    const averaged = (drainBefore + rate) / 2;
    const firstWindow = drainBefore < 0;
    const windowOpen = windowStart >= 0;
    const windowFull = windowElapsed >= DQ_RATE_WINDOW_NS;
    const windowEnded = windowOpen && windowFull;
    const windowRate = firstWindow ? rate : averaged;
    const drainPerNs = windowEnded ? windowRate : drainBefore;
    // Candidate limits: what the consumer drains within the target, and the last limit grown (both at least
    // MIN_DELAY_DEPTH_SLOTS, at most the lower lanes' part of the ring).
    const drainedLimit = Math.min(Math.max(drainPerNs * target, MIN_DELAY_DEPTH_SLOTS), sharedSlots);
    const grownLimit = Math.min(Math.max(limitBefore * DQ_STARVED_GROWTH, MIN_DELAY_DEPTH_SLOTS), sharedSlots);
    // A ring under the watermark is not overloaded, however long its oldest record waited: a consumer that stalled
    // (a busy host, a pause) catches up, and its records must not be shed for it.
    // (Each comparison is made on every call: & and | on booleans-as-numbers, no short-circuit.)
    const waitedAbove = waited > target ? 1 : 0;
    const deep = depthSlots >= watermarkSlots ? 1 : 0;
    const above = waitedAbove & deep;
    const wasAbove = aboveSince >= 0 ? 1 : 0;
    const aboveLong = now - aboveSince >= interval ? 1 : 0;
    const hadSpell = spellEnd >= 0 ? 1 : 0;
    const spellRecent = now - spellEnd < interval ? 1 : 0;
    const shedRecent = now - lastShed < interval ? 1 : 0;
    const was = wasShedding ? 1 : 0;
    // The backlog test below the watermark (see the method comment).
    const waitSince = st[DQ_WAIT_SINCE]!;
    const waitDepth = st[DQ_WAIT_DEPTH]!;
    const lastReadSeq = st[DQ_LAST_READ_SEQ]!;
    const lastReadNs = st[DQ_LAST_READ_NS]!;
    const lastEmptyNs = st[DQ_LAST_EMPTY_NS]!;
    const readNow = readSeq !== lastReadSeq ? 1 : 0;
    const lastRead = readNow === 1 ? now : lastReadNs;
    const reading = (lastRead >= 0 ? 1 : 0) & (now - lastRead < interval / 2 ? 1 : 0);
    const lastEmpty = empty ? now : lastEmptyNs;
    const neverEmpty = now - lastEmpty >= interval * DQ_BACKLOG_INTERVALS ? 1 : 0;
    const waiting = waitedAbove & reading;
    const wasWaiting = waitSince >= 0 ? 1 : 0;
    const waitFrom = wasWaiting === 1 ? waitSince : now;
    const waitFromDepth = wasWaiting === 1 ? waitDepth : backlogSlots;
    const waitLong = now - waitFrom >= interval * DQ_BACKLOG_INTERVALS ? 1 : 0;
    const notShrinking = backlogSlots >= waitFromDepth ? 1 : 0;
    const backlog = waiting & waitLong & neverEmpty & notShrinking;
    // Within DQ_BACKLOG_INTERVALS intervals of a spell's end the overload is known: one interval of the same evidence
    // restarts it (the ring does not refill to the watermark first).
    const spellRecentLong = now - spellEnd < interval * DQ_BACKLOG_INTERVALS ? 1 : 0;
    const waitOne = now - waitFrom >= interval ? 1 : 0;
    const neverEmptyOne = now - lastEmpty >= interval ? 1 : 0;
    const again = hadSpell & spellRecentLong & waiting & waitOne & neverEmptyOne & notShrinking;
    const starts =
      (1 - was) & waitedAbove & ((deep & ((wasAbove & aboveLong) | (hadSpell & spellRecent))) | backlog | again);
    // A spell ends once nothing was shed for an interval and the oldest record's wait is under the target.
    const ends = was & (1 - waitedAbove) & (1 - shedRecent);
    const shedding = starts | (was & (1 - ends));
    // In a spell, each window resets the limit: a consumer that ran out of records was held back by it, so its drain
    // rate understates what it can do, and the limit grows instead of following the rate down.
    const windowLimit = starved ? grownLimit : drainedLimit;
    const spellLimit = windowEnded ? windowLimit : limitBefore;
    const limit = starts === 1 ? drainedLimit : shedding === 1 ? spellLimit : limitBefore;
    st[DQ_WINDOW_START] = windowStart < 0 || windowEnded ? now : windowStart;
    st[DQ_WINDOW_READ_SEQ] = windowStart < 0 || windowEnded ? readSeq : windowReadSeq;
    st[DQ_DRAIN_PER_NS] = drainPerNs;
    st[DQ_STARVED] = starved && !windowEnded ? 1 : 0;
    const aboveFrom = wasAbove === 1 ? aboveSince : now;
    st[DQ_ABOVE_SINCE] = (above & (1 - shedding)) === 1 ? aboveFrom : -1;
    st[DQ_LAST_SHED] = starts === 1 ? now : lastShed;
    st[DQ_SPELL_END] = ends === 1 ? now : spellEnd;
    st[DQ_WAIT_SINCE] = (waiting & (1 - shedding)) === 1 ? waitFrom : -1;
    st[DQ_WAIT_DEPTH] = (waiting & (1 - shedding)) === 1 ? waitFromDepth : -1;
    st[DQ_LAST_READ_SEQ] = readSeq;
    st[DQ_LAST_READ_NS] = lastRead;
    st[DQ_LAST_EMPTY_NS] = lastEmpty;
    limitCell[0] = limit;
    this.delayShedding = shedding === 1;
    this.updateFastPath();
  }

  /** True while the queue-delay controller sheds the lower lanes of live sources. */
  isDelayShedding(): boolean {
    return this.delayShedding;
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
    counters[base + ADM_OFFERED_F64 + lane]!++;
    let reason: ShedReason = SHED_DRAINING;
    if (!this.draining) {
      const limitSlots = lane === LANE_COMPLIANCE ? this.capacitySlots : this.sharedSlots;
      // The cached depth only overstates: re-read the consumer's position before shedding.
      if (ring.producerDepth() < limitSlots || ring.refreshDepth() < limitSlots) {
        counters[base + ADM_ADMITTED_F64 + lane]!++;
        return ring.claim();
      }
      reason = SHED_RING_FULL;
    }
    counters[base + ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason]!++;
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
    counters[base + ADM_OFFERED_F64 + lane]!++;
    // Fast path: the cached depth (it only overstates) is below everything that could stop this lane.
    if (ring.producerDepth() < this.fastPathDepthLimit[lane]!) {
      counters[base + ADM_ADMITTED_F64 + lane]!++;
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
    // The spell's limit: the depth at and above which live lower-lane pings are shed (never reached outside a spell).
    const delayLimitSlots = this.delayShedding ? this.delayLimitSlots[0]! : capacitySlots;
    const delayState = this.delayState;
    let reason: ShedReason = SHED_DRAINING;
    if (!this.draining) {
      // The cached depth only overstates: re-read the consumer's position before shedding or rate-limiting.
      const depthSlots = ring.refreshDepth();
      if (lane !== LANE_COMPLIANCE && depthSlots >= delayLimitSlots && depthSlots < limitSlots) {
        reason = SHED_QUEUE_DELAY;
        delayState[DQ_LAST_SHED] = nowCell[0]!;
      } else if (depthSlots >= limitSlots) {
        reason = SHED_RING_FULL;
      } else if (lane !== LANE_IDLE || depthSlots < watermarkSlots || idleBucket.tryTakeOneAt(nowCell, 0)) {
        counters[base + ADM_ADMITTED_F64 + lane]!++;
        return ring.claim();
      } else {
        reason = SHED_RATE_LIMITED;
      }
    }
    counters[base + ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason]!++;
    return -1 - reason;
  }

  /** Depth limits of the fast path per lane: 0 while draining (everything goes the slow way). */
  private updateFastPath(): void {
    const limits = this.fastPathDepthLimit;
    const draining = this.draining;
    // During a queue-delay spell the lower lanes take the slow path from the spell's depth limit on.
    const delayLimit = this.delayShedding ? this.delayLimitSlots[0]! : this.capacitySlots;
    limits[LANE_IDLE] = draining ? 0 : Math.min(this.sharedSlots, this.watermarkSlots, delayLimit);
    limits[Lane.TRANSITION] = draining ? 0 : Math.min(this.sharedSlots, delayLimit);
    limits[LANE_COMPLIANCE] = draining ? 0 : this.capacitySlots;
  }

  /** Pings of `lane` shed for `reason` so far. */
  shedCount(lane: Lane, reason: ShedReason): number {
    return this.counters[this.base + shedCounterIndex(lane, reason)]!;
  }
}
