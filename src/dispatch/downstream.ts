/**
 * One downstream, sharing nothing with any other: its limiter (+ static safety cap), its memory of per-device FIFOs
 * (DeviceQueues), its backlog log on disk, optional credit window, circuit breaker, Retry-After pause, sink and replay
 * lane. Dispatcher thread only.
 *
 * Delivery contract, per downstream:
 * - Order: a device's triggers are sent in the order they arrived, and a batch with triggers of a device is never in
 *   flight beside another with triggers of the same device; a failed batch goes back to the front of its devices'
 *   FIFOs. Memory first, then the backlog log: when memory is full (or, past half full, when the device already has a
 *   trigger waiting) a trigger is appended to the log, and so is every later trigger of that device until the log
 *   has given its triggers back, so a device's pending triggers are always "in memory, then in the log".
 * - Who goes next: see DeviceQueues (COMPLIANCE devices as a whole, then devices without a backlog, then backlogged
 *   devices in turn, then the replay lane).
 * - Dead letters: a trigger the downstream refuses for good (4xx, or a broker's refusal of that message alone:
 *   SinkResult.refused) or that outlives `maxQueueAgeMs` is dead-lettered for good (dead-letter file, status FINAL)
 *   and its device goes on. A trigger whose attempts all failed is dead-lettered as undeliverable and parked at the
 *   front of its device's FIFO: the dead-letter file holds it (PENDING) and the replay lane re-sends it behind all
 *   live traffic; the device's later triggers wait behind it, in the backlog log rather than in memory (`spills`;
 *   those the log loads meanwhile are set aside in it: set-aside.ts), so a device parked for long never fills the
 *   memory every device shares. One that keeps failing alone for `replayGiveUpMs` is given up (final; its device goes
 *   on). With `replay: false` it is dead-lettered for good instead.
 * - Nothing else leaves: an open breaker, a pause (Retry-After, or the backoff of 10 ms doubling per consecutive
 *   failed delivery up to 1 s), a device held back alone (its trigger refused for the moment while the downstream
 *   answered the rest of the batch: DeviceQueues.holdBack), an exhausted credit window or a full limiter only hold
 *   triggers back. A failure while the breaker judges the downstream down, or answered with Retry-After, uses up no
 *   attempt, nor does a refusal for the moment of that trigger alone (SinkResult.again, the rest of the batch
 *   answered) for its device's first FREE_HOLDS holds in a row. A downstream that keeps up never sees a dead letter.
 * - The dead-letter storage has a size and an age budget (DeadLetterFile): when it drops a segment that holds the
 *   copies of parked triggers, those triggers are given up (settled for good, counted in `givenUp`) at the next pass,
 *   and their devices go on; one inside a sink call at that moment keeps its chance, and is given up if the call fails.
 *
 * Accounting: `offered + recovered = delivered + replayed + final + inFlightTriggers` at every pump, where
 * `inFlightTriggers` counts triggers in memory (queued, parked, being sent) and in the backlog log (set aside
 * included).
 */
import {
  DEAD_LETTER_REASON_COUNT,
  DeadLetterReason,
  DeadLetterStatus,
  DREC_ATTEMPTS_I32,
  DREC_DLQ_POS_F64,
  DREC_FENCE_HANDLE_I32,
  DREC_FLAGS_I32,
  DREC_LOG_ORDINAL_F64,
  DREC_FIRST_ALONE_FAILURE_NS_F64,
  DREC_REASON_I32,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DREC_TIME_NS_F64,
  DrecFlag,
  Lane,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_SEQ_F64,
  leaseGateOpen,
} from '../shm/layout.js';
import type { ClockNs } from '../shm/clock.js';
import type { BacklogLog } from '../durable/backlog-log.js';
import { LOAD_NONE, LOAD_SKIPPED } from '../durable/backlog-log.js';
import { MAX_DEAD_LETTER_SEGMENTS, positionSlot, type DeadLetterFile } from '../durable/dead-letter-file.js';
import type { TriggerResolver } from '../durable/trigger-codec.js';
import { BreakerState, CircuitBreaker, type BreakerOptions } from './breaker.js';
import { CreditWindow } from './credits.js';
import { DeviceQueues, ReadyList } from './device-queues.js';
import { Limiter, NO_PERMIT } from './limiter.js';
import { SetAsideChains } from './set-aside.js';
import { GradientLimit } from './limits/gradient-limit.js';
import type { Limit } from './limits/limit.js';
import { copyTrigger, laneOf } from './record.js';
import type { Subscription } from './trigger-router.js';
import { classifyResult, Outcome, type Sink, type SinkResult } from './sinks/sink.js';
import { TriggerBatch, type BatchNames } from './sinks/trigger-batch.js';
import { checkNumber } from './validate.js';

/** First backoff after a failed delivery, ns. */
const RETRY_BACKOFF_FIRST_NS = 10e6;
/** Longest backoff after repeated failed deliveries, ns. */
const RETRY_BACKOFF_MAX_NS = 1e9;
/**
 * Holds in a row (DeviceQueues.holdBack: 10 ms, 20 ms ... 640 ms) during which a trigger refused for the moment beside
 * others taken uses up no attempt.
 */
const FREE_HOLDS = 7;
/**
 * Triggers go alone (see Downstream.goesAlone) only while at most this fraction of the breaker's recent outcomes
 * failed: one trigger that always fails leaves it far lower; a receiver failing at random, or an outage, higher.
 */
const ALONE_MAX_FAILURE_FRACTION = 0.125;

/**
 * Answers that say "not now" rather than "not this": a parked trigger failing alone with one of them does not run
 * its give-up clock (see DownstreamOptions.replayGiveUpMs).
 */
const FOR_THE_MOMENT_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);

/** `passesOver`: the record is loaded. */
const PASS_NOT = 0;
/** `passesOver`: the replay of its partition derives it again. */
const PASS_REPLAY = 1;
/** `passesOver`: a copy of a trigger carried over at start. */
const PASS_CARRIED_COPY = 2;

/**
 * The by-reason cell of a parked record's reason (>= 0). A reason this router does not know (a record of another
 * version's file) counts as undeliverable, as the replay lane parks it: the by-reason cells keep summing to the total.
 */
function reasonIndex(reason: number): number {
  return reason < DEAD_LETTER_REASON_COUNT ? reason : DeadLetterReason.UNDELIVERABLE;
}

/** Defaults of a downstream's tuning. */
export const DOWNSTREAM_DEFAULTS = Object.freeze({
  safetyCap: 256,
  queueCapacitySlots: 16384,
  maxBatchTriggers: 128,
  maxAttempts: 3,
  replayGiveUpMs: 3_600_000,
});

/** Configuration of one downstream. */
export interface DownstreamOptions {
  /** Unique name (metric label, directory name of its durable files). */
  name: string;
  /** Transport. */
  sink: Sink;
  /** What it receives (absent: everything). */
  subscription?: Subscription;
  /** Concurrency-limit algorithm (default: a GradientLimit with its defaults). */
  limit?: Limit;
  /** Static safety cap on requests in flight, above the adaptive limit. Default 256. */
  safetyCap?: number;
  /** Triggers held in memory (queued, being sent, parked). Default 16384. */
  queueCapacitySlots?: number;
  /** Memory slots only COMPLIANCE triggers may use. Default 5% of the memory. */
  reservedComplianceSlots?: number;
  /** Triggers per sink call at most (a batch takes what is waiting, up to this). Default 128. */
  maxBatchTriggers?: number;
  /** Attempts per trigger before it is dead-lettered as undeliverable. Default 3. */
  maxAttempts?: number;
  /** A trigger this long after its ping's admission is dead-lettered as expired instead of sent, ms (absent: never). */
  maxQueueAgeMs?: number;
  /** Initial credit window (absent: no credit flow control). */
  credits?: number;
  /** Circuit-breaker options. */
  breaker?: Partial<BreakerOptions>;
  /** Park undeliverable triggers for the replay lane (true, default) or dead-letter them for good (false). */
  replay?: boolean;
  /**
   * A parked trigger that keeps failing alone, definitely (sent alone by the replay lane, answered with a failure that
   * asks for no "later": not 429, 502, 503 or 504, nothing refused for the moment, the breaker closed before and after,
   * the downstream taking most of what it gets), this long from its first such failure in this run is given up:
   * dead-lettered for good, counted in `replayRejected`, and its device goes on. Any other failure of it starts the
   * clock again. ms; 0: never. Default 1 hour.
   */
  replayGiveUpMs?: number;
}

/** Where a downstream puts dead letters (the dispatcher's dead-letter ring, flushed to each downstream's file). */
export interface DeadLetterTarget {
  /**
   * Copies the record into the ring with `status` (a parked one also with its memory slot, so the flush can tell
   * the slot where its copy went); returns the ring index. Flushes first when the ring is full. Allocation-free.
   */
  deadLetter(
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    downstreamIndex: number,
    status: number,
    slotRef: number,
    nowNs: number,
  ): number;
  /** Changes the status of ring entry `index` before its flush (the parked trigger was re-delivered or refused). */
  setRingStatus(index: number, status: number): void;
}

/**
 * Called after every delivered batch, before the batch is reused; also with the part of a failed batch delivered before
 * the failure (SinkResult.delivered: the batch then holds only that part, sent in several requests).
 */
export type DeliveredHook = (downstreamIndex: number, batch: TriggerBatch, nowNs: number) => void;

/** What a downstream gets from its dispatcher. */
export interface DownstreamContext {
  /** Monotonic clock, ns. */
  clock: ClockNs;
  /** Cell 0: the time of the dispatcher's current pass, ns (what `accept` stamps). */
  passTime: Float64Array;
  /** Device slots. */
  maxDevices: number;
  /** Names for the sinks' batches. */
  names: BatchNames;
  /** The dead-letter ring. */
  deadLetters: DeadLetterTarget;
  /** The downstream's backlog log (null: memory only, and a full memory holds the trigger rings back). */
  backlog: BacklogLog | null;
  /** The downstream's dead-letter file (null: dead letters are only counted). */
  deadLetterFile: DeadLetterFile | null;
  /** Resolves records of earlier runs. */
  resolver: TriggerResolver | null;
  /** Called after every delivered batch. */
  onDelivered?: DeliveredHook | undefined;
  /**
   * Records the held time of each delivered trigger (admission to the hand-over of the attempt that succeeded), found
   * in `held[0]` (ns), and whether it was a re-delivered dead letter; null: not recorded. Must not allocate.
   */
  onHeld: ((held: Float64Array, replayed: boolean, lane: number, downstream: number) => void) | null;
  /** The dispatcher thread's loop-stall state (`LoopStallMeter.cells`), taken out of limiter samples; null: none. */
  stall: Float64Array | null;
  /** The router's lease gate (LEASE_GATE_F64 cells): while it is shut nothing is sent; null: always open. */
  leaseGate: Float64Array | null;
  /**
   * Per device slot, the seq above which an earlier run's trigger is derived again by an exact replay of its
   * partition (NaN, or a slot past the end: none is); such records of the backlog log are passed over when loaded.
   * Null: none (see DispatcherOptions.replayFloors).
   */
  replayFloors: Float64Array | null;
}

/** True when an earlier run's trigger `seq` of device `slot` is derived again by the replay (`floors`: replayFloors). */
export function replayDerivesAgain(floors: Float64Array | null, slot: number, seq: number): boolean {
  if (floors === null || slot < 0 || slot >= floors.length) return false;
  return seq > floors[slot]!; // false for NaN
}

/** One downstream (see the module comment). */
export class Downstream {
  /** Position in the dispatcher (bit in routing masks). */
  readonly index: number;
  /** Name. */
  readonly name: string;
  /** Transport. */
  readonly sink: Sink;
  /** Admission. */
  readonly limiter: Limiter;
  /** Breaker. */
  readonly breaker: CircuitBreaker;
  /** Credit window. */
  readonly credits: CreditWindow;
  /** Memory: per-device FIFOs over record slots. */
  readonly queues: DeviceQueues;
  /** Backlog log (null: memory only). */
  readonly backlog: BacklogLog | null;
  /** Dead-letter file (null: dead letters only counted). */
  readonly deadLetterFile: DeadLetterFile | null;
  /** Triggers per sink call. */
  readonly maxBatchTriggers: number;
  /** Most triggers one device contributes to a batch while others wait (see `fill`). */
  readonly quantum: number;
  /** Attempts per trigger. */
  readonly maxAttempts: number;
  /** Max age since admission, ns (Infinity: none). */
  readonly maxAgeNs: number;
  /** Park undeliverable triggers for replay. */
  readonly replayEnabled: boolean;
  /** See DownstreamOptions.replayGiveUpMs, ns. */
  private readonly replayGiveUpNs: number;

  /** Triggers routed here by this run. */
  offered = 0;
  /** Triggers of earlier runs taken over at start. */
  recovered = 0;
  /**
   * Triggers of earlier runs passed over because the replay of their partition derives them again, here or at the
   * partition's reader now (not counted in `recovered`: what this run derives again it offers again).
   */
  superseded = 0;
  /**
   * Earlier runs' backlog records passed over because the pending or dead-letter file holds the same trigger (a stop
   * that wrote its pending file but whose log cursor commit was lost: a second signal, a failed commit, a crash right
   * after), counted at open (not in `recovered`).
   */
  copiesPassedOver = 0;
  /**
   * Per device slot, the earlier run's backlog records found at open that are passed over when loaded and not loaded
   * yet: those the replay derives again (`superseded`) and copies of carried-over triggers (`copiesPassedOver`). Null
   * when there are none of either; they are not in `inFlightTriggers` and hold the device's slot.
   */
  supersededUnloaded: Int32Array | null;
  private supersededUnloadedTotal = 0;
  /** Of `supersededUnloadedTotal`, copies of carried-over triggers (durable in the log: not held in memory only). */
  private copiesUnloadedTotal = 0;
  /**
   * Per device slot, the highest seq carried over at start (pending file, PENDING dead letters): the earlier run's
   * backlog records of that device at or below it are copies of carried triggers (null when none was found at open).
   */
  private carriedSeqCeil: Float64Array | null = null;
  /** Triggers delivered that were never dead-lettered. */
  delivered = 0;
  /** Dead letters re-delivered by the replay lane. */
  replayed = 0;
  /** Triggers settled without delivery: final dead letters (and records no device of this run could take). */
  final = 0;
  /** Dead-letter events by reason (a parked trigger later refused counts under both reasons). */
  readonly deadLetteredByReason = new Float64Array(3);
  /** Parked dead letters later refused for good by the replay lane. */
  replayRejected = 0;
  /** Of `replayRejected`, parked triggers given up after failing alone for replayGiveUpMs (see DownstreamOptions). */
  replayGivenUp = 0;
  /** Re-delivered dead letters by the reason they were dead-lettered with (sums to `replayed`). */
  readonly replayedByReason = new Float64Array(DEAD_LETTER_REASON_COUNT);
  /** Dead letters refused for good by the replay lane, by the reason they were parked with (sums to `replayRejected`). */
  readonly replayRejectedByReason = new Float64Array(DEAD_LETTER_REASON_COUNT);
  /** Parked dead letters given up because the dead-letter storage dropped their copies (budgets). */
  givenUp = 0;
  /** Triggers appended to the backlog log. */
  spilled = 0;
  /** Triggers inside sink calls. */
  sendingTriggers = 0;
  /** Triggers parked in the replay lane. */
  parked = 0;
  /** Parked triggers of each device (a device may carry several over from an earlier run). */
  private readonly parkedOf: Int32Array;
  /**
   * Backlog records loaded while their device was parked, kept in the log until it goes on (null without a log).
   * See set-aside.ts.
   */
  readonly setAside: SetAsideChains | null;
  /**
   * A record loaded from the log when it could not be set aside (the log holds as many as it can): in this memory
   * slot, in no FIFO (its device's set-aside ones go first), and the log's loading waits until it has its place.
   */
  stashedSlot = -1;
  /** The device of `stashedSlot`. */
  stashedDevice = -1;
  /** Memory slots beyond queueCapacitySlots, for triggers carried over from an earlier run. */
  private readonly frontSlots: number;
  /** Retry-After pauses honoured. */
  pauses = 0;
  /** Pump passes that found work waiting and no permit. */
  rejectedPasses = 0;
  /** Trigger records the dispatcher held back because neither memory nor the log could take them. */
  backpressureWaits = 0;
  /** Triggers of the pending file taken over at start and not settled yet (the file goes when this reaches 0). */
  frontOutstanding = 0;
  /** No sends before this time (Retry-After, or the backoff after a failure), ns. */
  pausedUntilNs = 0;
  /** Failed deliveries since the last success (the retry backoff grows with it). */
  consecutiveFailures = 0;
  /** Times the downstream as a whole was backed off after a failed batch (not one answered in part). */
  backoffs = 0;
  /**
   * Times a device alone was held back: the downstream refused its trigger for the moment and answered the rest of the
   * batch (completeFailed).
   */
  deviceHolds = 0;
  /** Set by the dispatcher past its drain deadline, or when the downstream is gone: nothing new is sent. */
  stopped = false;
  /** Gone for this run (markGone): stopped, and a drain does not wait for what it holds. */
  gone = false;
  /** The backlog log's damaged-record count already settled into `final`. */
  private corruptSeen = 0;
  /** The backlog log's `markedLost` as last settled. */
  private markedLostSeen = 0;
  /** Records were found damaged while loading since the backlog log was last empty (see loadBacklog). */
  private damagedSinceEmpty = false;
  /** Cell 0: a held time on its way to the recorder. */
  private readonly heldCell = new Float64Array(1);
  /** Triggers in memory that no durable file holds (a crash would lose them); see also `unflushedRecords`. */
  memoryOnly = 0;

  /** Records appended to the backlog log and not flushed to disk yet (a crash would lose them too). */
  get unflushedRecords(): number {
    return this.backlog === null ? 0 : this.backlog.bufferedRecords;
  }

  private readonly ctx: DownstreamContext;
  private readonly batches: TriggerBatch[];
  private readonly permits: Float64Array;
  /** Per permit slot: 1 while its batch is one trigger sent alone (see `goesAlone`). */
  private readonly aloneBatch: Uint8Array;
  private readonly onResult: ((r: SinkResult) => void)[];
  private readonly onThrow: ((e: unknown) => void)[];
  private readonly scratchF64: Float64Array;
  private readonly scratchI32: Int32Array;
  private pumping = false;
  /** Slots of dropped dead-letter segments whose parked triggers the next pass gives up (`processDrops`). */
  private readonly dropSlots = new Int32Array(MAX_DEAD_LETTER_SEGMENTS);
  private dropCount = 0;
  /** Called when frontOutstanding reaches 0 (the dispatcher removes the pending file). */
  onFrontSettled: (() => void) | null = null;

  /** Validates the options; `frontSlots` extra memory slots hold triggers carried over from an earlier run. */
  constructor(index: number, options: DownstreamOptions, ctx: DownstreamContext, frontSlots = 0) {
    if (typeof options.name !== 'string' || options.name.length === 0)
      throw new RangeError('downstream name must be a non-empty string');
    this.index = index;
    this.name = options.name;
    this.sink = options.sink;
    this.ctx = ctx;
    this.backlog = ctx.backlog;
    this.deadLetterFile = ctx.deadLetterFile;
    const safetyCap = options.safetyCap ?? DOWNSTREAM_DEFAULTS.safetyCap;
    this.limiter = new Limiter(options.limit ?? new GradientLimit(), safetyCap, ctx.stall);
    this.breaker = new CircuitBreaker(options.breaker);
    this.credits = new CreditWindow(options.credits);
    const cap = checkNumber(
      `${this.name}.queueCapacitySlots`,
      options.queueCapacitySlots ?? DOWNSTREAM_DEFAULTS.queueCapacitySlots,
      1,
      1 << 22,
      true,
    );
    const reserved = options.reservedComplianceSlots ?? Math.floor(cap * 0.05);
    this.supersededUnloaded = ctx.replayFloors === null ? null : new Int32Array(ctx.maxDevices);
    this.queues = new DeviceQueues(cap + frontSlots, reserved, ctx.maxDevices, ctx.passTime);
    this.frontSlots = frontSlots;
    this.parkedOf = new Int32Array(ctx.maxDevices);
    this.setAside = this.backlog === null ? null : new SetAsideChains(ctx.maxDevices, this.backlog.windowSize);
    this.maxBatchTriggers = checkNumber(
      `${this.name}.maxBatchTriggers`,
      options.maxBatchTriggers ?? DOWNSTREAM_DEFAULTS.maxBatchTriggers,
      1,
      4096,
      true,
    );
    this.quantum = Math.max(1, Math.floor(this.maxBatchTriggers / 4));
    this.maxAttempts = checkNumber(
      `${this.name}.maxAttempts`,
      options.maxAttempts ?? DOWNSTREAM_DEFAULTS.maxAttempts,
      1,
      100,
      true,
    );
    this.maxAgeNs =
      options.maxQueueAgeMs === undefined
        ? Infinity
        : checkNumber(`${this.name}.maxQueueAgeMs`, options.maxQueueAgeMs, 1, 8.64e7) * 1e6;
    this.replayEnabled = options.replay !== false;
    const giveUpMs = options.replayGiveUpMs ?? DOWNSTREAM_DEFAULTS.replayGiveUpMs;
    checkNumber(`${this.name}.replayGiveUpMs`, giveUpMs, 0, Number.MAX_SAFE_INTEGER, true);
    this.replayGiveUpNs = giveUpMs === 0 ? Infinity : giveUpMs * 1e6;
    const slots = this.limiter.slotCount;
    this.batches = [];
    this.onResult = [];
    this.onThrow = [];
    this.permits = new Float64Array(slots).fill(NO_PERMIT);
    this.aloneBatch = new Uint8Array(slots);
    for (let s = 0; s < slots; s++) {
      const b = new TriggerBatch(this.queues.f64, this.queues.i32, this.maxBatchTriggers, ctx.names);
      b.downstreamIndex = index;
      this.batches.push(b);
      // One completion handler per permit slot, made once: a send allocates no closure of ours.
      this.onResult.push((r: SinkResult) => this.complete(s, r));
      this.onThrow.push(() => this.complete(s, { status: 0, error: 'network' }));
    }
    const scratch = new ArrayBuffer(DREC_STRIDE_F64 * 8);
    this.scratchF64 = new Float64Array(scratch);
    this.scratchI32 = new Int32Array(scratch);
    // Told from inside a flush (which may run inside this downstream's own bookkeeping): only noted here, and acted
    // on at the next pump.
    if (this.deadLetterFile !== null) this.deadLetterFile.onDrop = (slot) => this.noteDroppedSegment(slot);
  }

  /** Triggers not settled: in memory (queued, parked, being sent) or in the backlog log (set aside included). */
  get inFlightTriggers(): number {
    const log = this.backlog === null ? 0 : this.backlog.unread + this.setAside!.count;
    return this.queues.used + log - this.supersededUnloadedTotal;
  }

  /** Notes, at open, `count` backlog records of device `slot` that the replay derives again (see `superseded`). */
  noteSupersededInBacklog(slot: number, count: number): void {
    this.notePassedOver(slot, count);
    this.superseded += count;
  }

  /**
   * Notes, at open, `count` backlog records of device `slot` at or below `seqCeil`, the highest seq of that device
   * carried over (see `copiesPassedOver`): each is passed over when loaded.
   */
  noteCarriedCopiesInBacklog(slot: number, count: number, seqCeil: number): void {
    this.carriedSeqCeil ??= new Float64Array(this.queues.maxDevices).fill(-Infinity);
    this.carriedSeqCeil[slot] = seqCeil;
    this.notePassedOver(slot, count);
    this.copiesPassedOver += count;
    this.copiesUnloadedTotal += count;
  }

  /** Copies of carried-over triggers in the backlog log not passed over yet (see `copiesPassedOver`). */
  get carriedCopiesLeft(): number {
    return this.copiesUnloadedTotal;
  }

  private notePassedOver(slot: number, count: number): void {
    this.supersededUnloaded ??= new Int32Array(this.queues.maxDevices);
    this.supersededUnloaded[slot] = this.supersededUnloaded[slot]! + count;
    this.supersededUnloadedTotal += count;
  }

  /** Triggers held in memory and not being sent. */
  get queuedTriggers(): number {
    return this.queues.used - this.sendingTriggers;
  }

  /** True when nothing of this downstream is pending (memory, log, sink calls). */
  get isIdle(): boolean {
    return this.inFlightTriggers === 0 && this.limiter.inflight === 0;
  }

  /**
   * Gone for this run (a trigger stream whose loop left): nothing more is sent, a failed batch uses up no attempt,
   * and a drain does not wait for what it holds (Dispatcher.isIdle); what it holds is kept for the next start.
   */
  markGone(): void {
    this.gone = true;
    this.stopped = true;
  }

  /** Dead-lettered triggers by reason, summed. */
  get deadLettered(): number {
    return this.deadLetteredByReason[0]! + this.deadLetteredByReason[1]! + this.deadLetteredByReason[2]!;
  }

  /**
   * Memory slots in use by triggers other than those carried over from an earlier run and not settled yet: those have
   * slots of their own (frontSlots), so a start that carries many over (a device parked at the stop, with its
   * set-aside triggers) does not stop the log's loading for every device.
   */
  private get baseUsed(): number {
    return this.queues.used - this.frontOutstanding;
  }

  /** Memory slots for triggers other than those carried over (queueCapacitySlots). */
  private get baseCapacity(): number {
    return this.queues.capacitySlots - this.frontSlots;
  }

  /**
   * Triggers of a parked device, the parked one included, that may wait in memory when the log loads another of it
   * (RELOAD_AHEAD, at most a sixteenth of the memory); the log holds its others (set aside).
   */
  private get parkedInMemory(): number {
    return Math.min(RELOAD_AHEAD, this.baseCapacity >> 4);
  }

  /** True when a trigger of `device` in `lane` goes to the backlog log rather than memory. */
  private spills(device: number, lane: number): boolean {
    const q = this.queues;
    if (q.fileOnly[device]! > 0 || !q.hasRoom(lane)) return true;
    // A parked device may wait for long (replayGiveUpMs): its later triggers wait in the log, not in shared memory.
    if (this.parkedOf[device]! > 0) return true;
    // Past half full, memory is kept for devices with nothing queued: a device that already waits has a backlog, and
    // its next trigger waits in the log, so a backlog of some devices never takes the room of devices without one.
    return this.baseUsed * 2 >= this.baseCapacity && q.queuedOf(device) > 0;
  }

  /**
   * True when a trigger of `device` in `lane` cannot be taken now (it would go to the log and the log is full, or
   * there is no log and memory is full): the dispatcher then leaves it in its trigger ring. Allocation-free.
   */
  wouldBlock(device: number, lane: number): boolean {
    if (!this.spills(device, lane)) return false;
    if (this.backlog !== null && this.backlog.canAppend()) return false;
    // No room in the log: memory may still take it when the device has nothing in the log.
    return !(this.queues.fileOnly[device] === 0 && this.queues.hasRoom(lane));
  }

  /**
   * Accepts a routed trigger record (TRG_* cells at the given bases) named by fence handle `handle`: into memory, or
   * into the backlog log (see `spills`), stamped with the dispatcher's pass time. The caller checked `wouldBlock`.
   * Allocation-free.
   */
  accept(srcF64: Float64Array, srcI32: Int32Array, baseF64: number, baseI32: number, handle: number): void {
    this.offered++;
    const device = srcI32[baseI32 + TRG_DEVICE_SLOT_I32]!;
    const lane = laneOf(srcI32, baseI32);
    const q = this.queues;
    if (this.spills(device, lane) && this.backlog !== null && this.backlog.canAppend()) {
      const f = this.scratchF64;
      const i = this.scratchI32;
      copyTrigger(srcF64, srcI32, baseF64, baseI32, f, i, 0, 0);
      i[DREC_FENCE_HANDLE_I32] = handle;
      i[DREC_REASON_I32] = -1;
      i[DREC_ATTEMPTS_I32] = 0;
      this.backlog.append(f, i, 0, 0);
      q.fileOnly[device] = q.fileOnly[device]! + 1;
      this.spilled++;
      return;
    }
    const slot = q.allocate(lane);
    if (slot < 0) throw new Error(`downstream ${this.name}: accept without room (wouldBlock was not asked)`);
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    copyTrigger(srcF64, srcI32, baseF64, baseI32, q.f64, q.i32, f, i);
    q.i32[i + DREC_FENCE_HANDLE_I32] = handle;
    this.initBookkeeping(slot);
    this.memoryOnly++;
    q.append(device, slot);
  }

  /**
   * Takes a trigger carried over from an earlier run (pending file, or a PENDING dead letter at `dlqPosition`) into
   * memory, in front of everything that arrives later. The record's cells are already in `slot`'s place of the
   * caller's scratch (f64, i32 at 0). Start-up only.
   */
  acceptCarriedOver(f64: Float64Array, i32: Int32Array, device: number, dlqPosition: number, nowNs: number): void {
    const q = this.queues;
    const slot = q.allocate(Lane.COMPLIANCE);
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    for (let k = 0; k < DREC_STRIDE_F64; k++) q.f64[f + k] = f64[k]!;
    for (let k = 0; k < DREC_STRIDE_I32; k++) q.i32[i + k] = i32[k]!;
    q.f64[f + DREC_TIME_NS_F64] = nowNs;
    q.f64[f + DREC_LOG_ORDINAL_F64] = -1;
    q.f64[f + DREC_DLQ_POS_F64] = dlqPosition;
    q.i32[i + DREC_FLAGS_I32] = DrecFlag.FRONT;
    if (dlqPosition >= 0 && q.i32[i + DREC_REASON_I32]! < 0)
      q.i32[i + DREC_REASON_I32] = DeadLetterReason.UNDELIVERABLE;
    // A dead letter still waiting for its replay stays parked: from the dead-letter file, or from the pending file when
    // its copy never reached the disk (the earlier run's close dropped it from the ring).
    if (q.i32[i + DREC_REASON_I32]! >= 0) {
      this.noteParked(device);
      q.f64[f + DREC_FIRST_ALONE_FAILURE_NS_F64] = NaN;
    }
    this.frontOutstanding++;
    this.recovered++;
    q.append(device, slot);
  }

  /**
   * Once the backlog log holds nothing after records were found damaged in it, what the per-device counts still hold
   * are the damaged records', whose devices could not be read: cleared, or a device would spill and keep its slot for
   * good.
   */
  private clearDamagedCounts(): void {
    if (!this.damagedSinceEmpty || this.backlog!.unread !== 0 || this.setAside!.count !== 0) return;
    this.damagedSinceEmpty = false;
    this.queues.fileOnly.fill(0);
    this.supersededUnloaded?.fill(0);
  }

  /**
   * Loads triggers back from the backlog log while memory is less than half full (up to three quarters): first those
   * set aside for devices no longer parked, then the log's next records. A record of a parked device (or of one with
   * records set aside still) is set aside rather than held in memory behind its parked trigger; at most memory's
   * capacity of them per call.
   */
  loadBacklog(): void {
    const log = this.backlog;
    const q = this.queues;
    this.clearDamagedCounts();
    if (log === null || this.baseUsed * 2 >= this.baseCapacity) return;
    if (this.setAside!.count > 0 && !this.reloadSetAside()) return;
    if (this.stashedSlot >= 0 && !this.placeStashed()) return;
    let setAsideNow = 0;
    while (log.unread > 0 && this.baseUsed * 4 < this.baseCapacity * 3 && setAsideNow < this.baseCapacity) {
      const slot = q.allocate(Lane.TRANSITION);
      if (slot < 0) return;
      const device = log.loadNext(q.f64, q.i32, slot * DREC_STRIDE_F64, slot * DREC_STRIDE_I32, this.ctx.resolver);
      if (log.corrupt !== this.corruptSeen) {
        // Records of a damaged segment were skipped: settled as lost (counted), but for copies the replay derives
        // again, which were never counted and are no longer to be passed over.
        const passedOver = log.markedLost - this.markedLostSeen;
        this.final += log.corrupt - this.corruptSeen - passedOver;
        this.supersededUnloadedTotal -= passedOver;
        this.copiesUnloadedTotal = Math.min(this.copiesUnloadedTotal, this.supersededUnloadedTotal);
        this.corruptSeen = log.corrupt;
        this.markedLostSeen = log.markedLost;
        this.damagedSinceEmpty = true;
      }
      if (device === LOAD_NONE) {
        q.release(slot);
        this.clearDamagedCounts();
        return;
      }
      if (device === LOAD_SKIPPED) {
        // A record of an earlier run naming a device this run cannot: settled as lost (counted).
        q.release(slot);
        this.final++;
        continue;
      }
      const passed = this.supersededUnloaded;
      const seq = q.f64[slot * DREC_STRIDE_F64 + TRG_SEQ_F64]!;
      const passing =
        passed !== null && passed[device]! > 0 && log.lastLoadedEarlier ? this.passesOver(device, seq) : PASS_NOT;
      if (passing !== PASS_NOT) {
        // Derived again by the replay, in its device's order, or a copy of a trigger carried over (in front of it):
        // this copy is done (and never counted as recovered).
        log.markedLoaded();
        log.markDone(q.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]!);
        q.release(slot);
        passed![device] = passed![device]! - 1;
        this.supersededUnloadedTotal--;
        if (passing === PASS_CARRIED_COPY) this.copiesUnloadedTotal--;
        continue;
      }
      if (this.parkedOf[device]! > 0 || this.setAside!.has(device)) {
        if (
          !this.setAside!.has(device) &&
          q.queuedOf(device) < this.parkedInMemory &&
          this.baseUsed * 4 < this.baseCapacity
        ) {
          // A few wait in memory behind the parked trigger while three quarters of the memory are free (so parked
          // devices together never take the room the loading needs), no longer holding the log's cursor back (as those
          // behind it at the park do: see park): a parked device with little traffic never pins the log.
          this.takeLoaded(device, slot);
          this.releaseLogPlace(slot);
          continue;
        }
        // Its device waits behind a parked trigger (or behind records set aside): held in the log, not in memory.
        const h = log.hold(q.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]!);
        if (h >= 0) {
          this.setAside!.add(device, h);
          q.release(slot);
          setAsideNow++;
          continue;
        }
        // The log holds as many as it can: this one waits in memory, in no FIFO (those set aside go first), and so
        // does the loading, until a parked device goes on (see placeStashed).
        this.stashedSlot = slot;
        this.stashedDevice = device;
        this.markLoaded(slot);
        return;
      }
      this.takeLoaded(device, slot);
    }
  }

  /**
   * The stashed record takes its place: set aside when its device is parked or has records set aside still, else into
   * its device's FIFO. Returns false when the log still holds as many as it can.
   */
  private placeStashed(): boolean {
    const slot = this.stashedSlot;
    const device = this.stashedDevice;
    if (this.parkedOf[device]! > 0 || this.setAside!.has(device)) {
      const h = this.backlog!.hold(this.queues.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]!);
      if (h < 0) return false;
      this.setAside!.add(device, h);
      this.queues.release(slot);
    } else {
      this.takeLoaded(device, slot);
    }
    this.stashedSlot = -1;
    this.stashedDevice = -1;
    return true;
  }

  /**
   * Loads again the records set aside for devices no longer parked, each device's in order, while memory is less than
   * three quarters full, and at most RELOAD_AHEAD (or a batch) of a device queued at once: a device the downstream
   * keeps refusing is parked again at its first, and the rest of its records stay in the log. Returns false when
   * memory filled first.
   */
  private reloadSetAside(): boolean {
    const log = this.backlog!;
    const aside = this.setAside!;
    const q = this.queues;
    const ahead = Math.max(RELOAD_AHEAD, this.maxBatchTriggers);
    for (let k = aside.devices - 1; k >= 0; k--) {
      const device = aside.deviceAt(k);
      if (this.parkedOf[device]! > 0) continue;
      while (aside.has(device) && q.queuedOf(device) < ahead) {
        if (this.baseUsed * 4 >= this.baseCapacity * 3) return false;
        const slot = q.allocate(Lane.TRANSITION);
        if (slot < 0) return false;
        const got = log.reloadHeld(
          aside.shift(device),
          q.f64,
          q.i32,
          slot * DREC_STRIDE_F64,
          slot * DREC_STRIDE_I32,
          this.ctx.resolver,
        );
        if (got < 0) {
          // Damaged on disk since it was first loaded, unreadable, or its device no longer named: settled as lost
          // (counted in the log's reloadDamaged, the damaged-lost metric).
          q.release(slot);
          q.fileOnly[device] = q.fileOnly[device]! - 1;
          this.final++;
          continue;
        }
        // No longer the log's: memory's, like the triggers behind a parked one (the pending file at close; lost in a
        // crash), so the log's cursor is not held back while it waits its turn.
        this.takeLoaded(device, slot);
        this.memoryOnly++;
      }
    }
    return true;
  }

  /**
   * Reads the record set aside as hold `h` into the dispatch record at 0 of (f64, i32), leaving it held (the close's
   * carry-over); returns its device, or < 0 when it is lost (damaged, unreadable or unnamed: then released, and
   * counted in the log's reloadDamaged).
   */
  readSetAside(h: number, f64: Float64Array, i32: Int32Array): number {
    return this.backlog!.reloadHeld(h, f64, i32, 0, 0, this.ctx.resolver, true);
  }

  /** The trigger of `device` loaded from the backlog log into `slot` joins its device's FIFO, behind the others. */
  private takeLoaded(device: number, slot: number): void {
    const q = this.queues;
    this.markLoaded(slot);
    q.fileOnly[device] = q.fileOnly[device]! - 1;
    q.append(device, slot, false);
  }

  /** Sets the bookkeeping of a trigger loaded from the backlog log into `slot`. */
  private markLoaded(slot: number): void {
    const q = this.queues;
    // Taken from the trigger rings before any hand-off cut that may see it (see undeliveredTakenBy), whenever loaded.
    q.f64[slot * DREC_STRIDE_F64 + DREC_TIME_NS_F64] = -Infinity;
    q.f64[slot * DREC_STRIDE_F64 + DREC_DLQ_POS_F64] = -1;
    q.i32[slot * DREC_STRIDE_I32 + DREC_FLAGS_I32] = 0;
  }

  /** The trigger in `slot`, loaded from the backlog log, no longer holds its place there: it is memory's now. */
  private releaseLogPlace(slot: number): void {
    const q = this.queues;
    const ord = q.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]!;
    if (ord < 0 || this.backlog === null) return;
    this.backlog.markDone(ord);
    q.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64] = -1;
    if (this.isMemoryOnly(slot)) this.memoryOnly++;
  }

  /**
   * Whether an earlier run's backlog record of `device` with `seq` is passed over when loaded (see
   * supersededUnloaded), and why: PASS_REPLAY, PASS_CARRIED_COPY or PASS_NOT.
   */
  private passesOver(device: number, seq: number): number {
    if (replayDerivesAgain(this.ctx.replayFloors, device, seq)) return PASS_REPLAY;
    const ceil = this.carriedSeqCeil;
    return ceil !== null && seq <= ceil[device]! ? PASS_CARRIED_COPY : PASS_NOT;
  }

  /**
   * Gives up the parked triggers of dropped dead-letter segments, loads from the backlog, then sends what the breaker,
   * pause, credits and limiter allow.
   */
  pump(nowNs: number): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      if (this.dropCount > 0) this.processDrops();
      this.loadBacklog();
      this.queues.releaseHeld();
      if (this.stopped || this.breaker.isBlocking(nowNs) || nowNs < this.pausedUntilNs) return;
      // Leases not known to hold (a process resumed after its leases expired): their triggers stay held.
      if (this.ctx.leaseGate !== null && !leaseGateOpen(this.ctx.leaseGate)) return;
      const q = this.queues;
      for (;;) {
        if (!q.anyReady) return;
        if (this.credits.remaining <= 0) return;
        if (!this.limiter.hasPermit()) {
          this.rejectedPasses++;
          this.limiter.tryAcquire(nowNs); // counted refusal
          return;
        }
        if (!this.breaker.allowRequest(nowNs)) return;
        const probe = this.breaker.isProbe;
        const permit = this.limiter.tryAcquire(nowNs);
        if (permit === NO_PERMIT) {
          this.breaker.onIgnored();
          return;
        }
        const slot = this.limiter.slotOf(permit);
        const batch = this.batches[slot]!;
        batch.count = 0;
        this.aloneBatch[slot] = this.fill(
          batch,
          Math.min(probe ? 1 : this.maxBatchTriggers, this.credits.remaining),
          nowNs,
        )
          ? 1
          : 0;
        if (batch.count === 0) {
          // Everything it looked at had expired.
          this.limiter.releaseIgnore(permit);
          this.breaker.onIgnored();
          continue;
        }
        // A dead letter settled while filling (expired) is durable before its device's next triggers leave.
        this.deadLetterFile?.sync();
        this.credits.take(batch.count);
        this.sendingTriggers += batch.count;
        this.permits[slot] = permit;
        // The permit's clock starts here, right before the downstream call.
        batch.sentAtNs = this.ctx.clock();
        this.limiter.restart(permit, batch.sentAtNs);
        let p: Promise<SinkResult>;
        try {
          p = this.sink.deliver(batch);
        } catch {
          p = Promise.resolve({ status: 0, error: 'network' });
        }
        p.then(this.onResult[slot]!, this.onThrow[slot]!);
      }
    } finally {
      this.pumping = false;
    }
  }

  /**
   * Fills `batch` with up to `max` triggers: ready devices in list order, each device then busy until the batch
   * completes. A device takes its share of the room left among the devices ready with it (at least one trigger, at
   * most `quantum`; all it has when it is the last one), so a round over many devices with a backlog is one trigger
   * each and a device that joins the round waits about one trigger per busy device, not their whole backlogs. A
   * device with a COMPLIANCE trigger queued takes as much as fits: its compliance trigger should leave now. A trigger
   * on its last attempt, or a dead letter the replay lane sends again, goes in a batch of its own (see `goesAlone`):
   * returns true for such a batch.
   */
  private fill(batch: TriggerBatch, max: number, nowNs: number): boolean {
    const q = this.queues;
    const i32 = q.i32;
    // A device met here whose first trigger goes alone: it leads the next batch.
    let deferred = -1;
    let lone = false;
    // Asked once a batch: whether the breaker's state lets any trigger go alone.
    const mayIsolate =
      this.breaker.state === BreakerState.CLOSED && this.breaker.failureFraction <= ALONE_MAX_FAILURE_FRACTION;
    while (batch.count < max) {
      const device = q.nextReady();
      if (device < 0) break;
      if (device === deferred) {
        // Round to it again: every other ready device had its turn.
        q.relist(device, false);
        break;
      }
      const room = max - batch.count;
      const others = q.readyDevices;
      const take =
        others === 0 || q.lastTakenList === ReadyList.COMPLIANCE
          ? room
          : Math.min(this.quantum, Math.max(1, Math.floor(room / (others + 1))));
      let n = 0;
      // A trigger that goes alone: 1 taken (the batch is it), -1 met after others (it leads the next batch).
      let alone = 0;
      while (n < take) {
        const slot = q.headOf(device);
        if (slot < 0) break;
        if (nowNs - q.f64[slot * DREC_STRIDE_F64 + TRG_ADMIT_TIME_NS_F64]! > this.maxAgeNs) {
          q.popHead(device);
          this.deadLetterFinal(slot, DeadLetterReason.EXPIRED, nowNs);
          continue;
        }
        if (mayIsolate && this.goesAlone(slot)) alone = batch.count === 0 ? 1 : -1;
        // This device's triggers taken so far stay in this batch; the one that goes alone waits behind them.
        if (alone === -1) break;
        q.popHead(device);
        i32[slot * DREC_STRIDE_I32 + DREC_ATTEMPTS_I32]!++;
        batch.add(slot);
        n++;
        if (alone === 1) break;
      }
      if (n > 0) q.setBusy(device, true);
      else {
        q.relist(device, false);
        if (alone === -1) {
          // A second one ends the batch: it would be handed out again and again until the first came round.
          if (deferred >= 0) break;
          deferred = device;
        }
      }
      if (alone === 1) {
        lone = true;
        break;
      }
    }
    if (deferred >= 0) q.leadNext(deferred);
    return lone;
  }

  /**
   * True when the trigger in `slot` goes in a batch of its own: this is its last attempt and the one before failed
   * with its whole batch (a failure that named no trigger: a 500, a timeout), or it is a dead letter the replay lane
   * sends again after a replay of it, or its last attempt alone, failed. A downstream that fails a batch as a whole for
   * one trigger in it (a webhook answering 500 to a payload it cannot handle) then fails that trigger alone: the other
   * devices' triggers sent with it go on, instead of running out of attempts with it and being parked (or, with
   * `replay: false`, dead-lettered) behind it. A first replay still shares its batch, so a downstream back from an
   * outage takes its parked triggers in full batches. The caller asks only while the breaker is closed and at most
   * ALONE_MAX_FAILURE_FRACTION of its window failed (a downstream failing more is failing for everyone: an outage, a
   * flaky receiver; alone would only add requests). Allocation-free.
   */
  private goesAlone(slot: number): boolean {
    const i32 = this.queues.i32;
    const i = slot * DREC_STRIDE_I32;
    const attempts = i32[i + DREC_ATTEMPTS_I32]!;
    if (i32[i + DREC_REASON_I32]! >= 0)
      return attempts > this.maxAttempts || (i32[i + DREC_FLAGS_I32]! & DrecFlag.FAILED_ALONE) !== 0;
    return (i32[i + DREC_FLAGS_I32]! & DrecFlag.FAILED_WITH_BATCH) !== 0 && attempts + 1 >= this.maxAttempts;
  }

  private complete(permitSlot: number, result: SinkResult): void {
    const nowNs = this.ctx.clock();
    // The latest time known on this thread: what the queues read when a device goes idle.
    this.ctx.passTime[0] = nowNs;
    const permit = this.permits[permitSlot]!;
    this.permits[permitSlot] = NO_PERMIT;
    const batch = this.batches[permitSlot]!;
    const outcome = classifyResult(result);
    // Told with the failure itself, so no later batch is sent to it whatever the order of the thread's messages.
    if (result.gone === true) this.markGone();
    const pause = result.retryAfterMs !== undefined && result.retryAfterMs > 0;
    // A batch that failed after parts of it were delivered (a webhook batch sent in parts, messages a broker stored
    // before a timeout): those are settled.
    const deliveredSlots =
      outcome !== Outcome.OK && outcome !== Outcome.REJECTED && result.delivered !== undefined
        ? result.delivered
            .filter((k) => k < batch.count && result.refused?.includes(k) !== true)
            .map((k) => batch.slots[k]!)
        : null;
    // Answered in part: the downstream answered every message it was handed, taking or refusing for good at least one,
    // and refused some for the moment one by one (SinkResult.again: a subject full for the moment). The target is alive
    // (a success for the breaker), the downstream is not backed off as a whole, and each device refused for the moment
    // is held back alone (completeFailed) while the others go on. The limiter still counts a drop: a refusal for the
    // moment is the downstream pushing back, and fewer batches in flight is the answer to a quota over all messages.
    const again = outcome === Outcome.LOSS && result.again !== undefined ? result.again : null;
    const taken = (result.delivered?.length ?? 0) + (result.refused?.length ?? 0);
    const answeredInPart =
      again !== null &&
      again.length > 0 &&
      taken > 0 &&
      !pause &&
      !this.gone &&
      taken + again.length + (result.unsent?.length ?? 0) === batch.count;
    // One trigger sent alone was answered with a failure: the failure is taken as that trigger's (see `goesAlone`). Its
    // device alone waits (a hold, 10 ms doubling per failure in a row, at most 1 s) instead of the whole downstream
    // backing off; the breaker counts its first such failure (a downstream failing everything still opens it), the
    // limiter takes no sample.
    const aloneFailed =
      this.aloneBatch[permitSlot] === 1 &&
      outcome === Outcome.LOSS &&
      result.status > 0 &&
      (result.unsent === undefined || result.unsent.length === 0) &&
      !pause &&
      !this.gone &&
      !answeredInPart;
    // The limiter's sample ends where the downstream's own work ended, when the sink measured it.
    const measuredElsewhere = result.serviceNs !== undefined && result.serviceNs >= 0;
    const sampleEndNs = measuredElsewhere ? batch.sentAtNs + result.serviceNs! : nowNs;
    if (outcome === Outcome.OK) {
      if (result.unsampled === true) this.limiter.releaseIgnore(permit);
      else this.limiter.releaseSuccess(permit, sampleEndNs, !measuredElsewhere);
      this.breaker.onSuccess(nowNs);
    } else if (answeredInPart) {
      this.limiter.releaseDropped(permit, sampleEndNs, !measuredElsewhere);
      this.breaker.onSuccess(nowNs);
    } else if (aloneFailed) {
      this.limiter.releaseIgnore(permit);
      // Its first failure alone counts for the breaker; one that failed alone before is known to be this trigger's
      // (the rest of the traffic answered meanwhile, or nothing would go alone), and counting it again and again
      // would, at a low rate of other traffic, fill the window with one trigger's failures: the downstream would stop
      // sending anything alone, batch the trigger with healthy devices again, and open.
      const failedAloneBefore =
        (this.queues.i32[batch.slots[0]! * DREC_STRIDE_I32 + DREC_FLAGS_I32]! & DrecFlag.FAILED_ALONE) !== 0;
      if (failedAloneBefore) this.breaker.onIgnored();
      else this.breaker.onFailure(nowNs, false);
    } else if (outcome === Outcome.LOSS) {
      this.limiter.releaseDropped(permit, sampleEndNs, !measuredElsewhere);
      // An overload answer with Retry-After says the target is alive: pause, do not count a failure.
      if (pause) this.breaker.onIgnored();
      else this.breaker.onFailure(nowNs, false);
    } else if (outcome === Outcome.REFUSED) {
      this.limiter.releaseIgnore(permit);
      this.breaker.onFailure(nowNs, true);
    } else {
      this.limiter.releaseIgnore(permit);
      this.breaker.onSuccess(nowNs);
    }
    if (pause && outcome !== Outcome.OK) {
      const until = nowNs + result.retryAfterMs! * 1e6;
      if (until > this.pausedUntilNs) this.pausedUntilNs = until;
      this.pauses++;
    }
    if (outcome === Outcome.OK || answeredInPart) {
      this.consecutiveFailures = 0;
    } else if (outcome !== Outcome.REJECTED && !pause && !aloneFailed) {
      // Back off before sending again: 10 ms, doubling per consecutive failure, at most 1 s. A downstream that just
      // died then sees a few requests, not a burst of retries that uses up every trigger's attempts before the
      // breaker has seen enough to open.
      this.consecutiveFailures++;
      this.backoffs++;
      const until =
        nowNs +
        Math.min(RETRY_BACKOFF_MAX_NS, RETRY_BACKOFF_FIRST_NS * 2 ** Math.min(20, this.consecutiveFailures - 1));
      if (until > this.pausedUntilNs) this.pausedUntilNs = until;
    }
    // The devices to hold back alone (answered in part): those refused for the moment.
    const heldSlots = answeredInPart
      ? new Set(again!.filter((k) => k < batch.count).map((k) => batch.slots[k]!))
      : aloneFailed
        ? new Set([batch.slots[0]!])
        : null;
    if (aloneFailed)
      this.queues.i32[batch.slots[0]! * DREC_STRIDE_I32 + DREC_FLAGS_I32] =
        this.queues.i32[batch.slots[0]! * DREC_STRIDE_I32 + DREC_FLAGS_I32]! | DrecFlag.FAILED_ALONE;
    // Triggers of a failed batch never handed to the downstream (behind one of their device refused for the moment)
    // use up no attempt; nor does one refused for the moment beside others taken, for its device's first
    // FREE_HOLDS holds in a row (about 1.3 s): refused for longer, each refusal uses one, so a trigger the downstream
    // never takes ends in the replay lane (or dead-lettered with `replay: false`) and its device goes on.
    let unsentSlots: Set<number> | null = null;
    if (
      outcome !== Outcome.OK &&
      outcome !== Outcome.REJECTED &&
      result.unsent !== undefined &&
      result.unsent.length > 0
    )
      unsentSlots = new Set(result.unsent.filter((k) => k < batch.count).map((k) => batch.slots[k]!));
    if (answeredInPart)
      for (const slot of heldSlots!)
        if (this.queues.holdStreakOf(deviceOfSlot(this.queues, slot)) < FREE_HOLDS)
          (unsentSlots ??= new Set()).add(slot);
    if (outcome !== Outcome.OK) this.credits.giveBack(batch.count - (deliveredSlots?.length ?? 0));
    if (result.credits !== undefined) this.credits.advertise(result.credits);
    this.sendingTriggers -= batch.count;
    // Refused one by one: settled whatever became of the rest of the batch.
    if (outcome !== Outcome.REJECTED && result.refused !== undefined && result.refused.length > 0)
      this.completeRefused(batch, result.refused, nowNs);
    if (outcome === Outcome.OK) {
      this.completeDelivered(batch);
      if (this.ctx.onDelivered !== undefined) this.ctx.onDelivered(this.index, batch, nowNs);
    } else if (outcome === Outcome.REJECTED) {
      this.completeRejected(batch, nowNs);
    } else {
      if (deliveredSlots !== null && deliveredSlots.length > 0)
        this.completeDeliveredPart(batch, deliveredSlots, nowNs);
      // A failure alone that asks for no "later" (no trigger refused for the moment, not 429, 502, 503 or 504): what
      // runs a parked trigger's give-up clock (see DownstreamOptions.replayGiveUpMs).
      const definite =
        aloneFailed && (again === null || again.length === 0) && !FOR_THE_MOMENT_STATUSES.has(result.status);
      this.completeFailed(batch, nowNs, pause || this.gone, unsentSlots, heldSlots, definite ? batch.slots[0]! : -1);
    }
    // The replay lane's status changes are durable before any later trigger of those devices is sent.
    this.deadLetterFile?.sync();
    batch.count = 0;
    this.pump(nowNs);
  }

  /**
   * The triggers in `deliveredSlots` were delivered before `batch` failed: settled as delivered (a device's trigger
   * behind one of its own that is sent again stays, and goes again with it), their devices released unless a trigger
   * of theirs stays, and the batch left holding the rest, in order, for completeFailed. Allocates (a rare path).
   */
  private completeDeliveredPart(batch: TriggerBatch, deliveredSlots: readonly number[], nowNs: number): void {
    const q = this.queues;
    const took = new Set(deliveredSlots);
    const staying = new Set<number>();
    const slots = batch.slots;
    const rest: number[] = [];
    let done = 0;
    for (let k = 0; k < batch.count; k++) {
      const slot = slots[k]!;
      const device = deviceOfSlot(q, slot);
      if (took.has(slot) && !staying.has(device)) slots[done++] = slot;
      else {
        rest.push(slot);
        staying.add(device);
      }
    }
    batch.count = done;
    this.completeDelivered(batch, false);
    if (this.ctx.onDelivered !== undefined) this.ctx.onDelivered(this.index, batch, nowNs);
    for (let k = 0; k < done; k++) {
      const device = deviceOfSlot(q, slots[k]!);
      if (!staying.has(device) && q.isBusy(device)) q.setBusy(device, false);
    }
    for (let k = 0; k < rest.length; k++) slots[k] = rest[k]!;
    batch.count = rest.length;
  }

  private completeDelivered(batch: TriggerBatch, release = true): void {
    const q = this.queues;
    const onHeld = this.ctx.onHeld;
    for (let k = 0; k < batch.count; k++) {
      const slot = batch.slots[k]!;
      const f = slot * DREC_STRIDE_F64;
      const reason = q.i32[slot * DREC_STRIDE_I32 + DREC_REASON_I32]!;
      const replayed = reason >= 0;
      // Held time runs from admission to the hand-over of the attempt that succeeded (handed over in a cell).
      if (onHeld !== null) {
        this.heldCell[0] = batch.sentAtNs - q.f64[f + TRG_ADMIT_TIME_NS_F64]!;
        onHeld(this.heldCell, replayed, laneOf(q.i32, slot * DREC_STRIDE_I32), this.index);
      }
      if (replayed) {
        this.replayed++;
        this.replayedByReason[reasonIndex(reason)]!++;
        this.noteUnparked(slot);
      } else {
        this.delivered++;
      }
      // Taken: a later refusal for the moment of its device holds it back from the first hold again.
      q.endHoldStreak(deviceOfSlot(q, slot));
      this.settle(slot, DeadLetterStatus.RESOLVED);
    }
    if (release) this.releaseDevices(batch);
  }

  /**
   * The triggers at `refused` (indexes in the batch, increasing) were refused one by one: dead-lettered for good as
   * rejected, their devices no longer busy, and the batch left holding the others, in order (delivered, or failed and
   * sent again).
   */
  private completeRefused(batch: TriggerBatch, refused: readonly number[], nowNs: number): void {
    const q = this.queues;
    const slots = batch.slots;
    const count = batch.count;
    // Marked in place (-1 - slot) while the devices are looked at.
    for (const k of refused) slots[k] = -1 - slots[k]!;
    for (const k of refused) {
      const device = deviceOfSlot(q, -1 - slots[k]!);
      // A device with no other trigger in the batch is done with it; the others are released with the batch.
      let more = false;
      for (let j = 0; j < count && !more; j++) more = slots[j]! >= 0 && deviceOfSlot(q, slots[j]!) === device;
      if (!more && q.isBusy(device)) q.setBusy(device, false);
    }
    let kept = 0;
    for (let k = 0; k < count; k++) {
      const slot = slots[k]!;
      if (slot < 0) this.deadLetterFinal(-1 - slot, DeadLetterReason.REJECTED, nowNs);
      else slots[kept++] = slot;
    }
    batch.count = kept;
  }

  private completeRejected(batch: TriggerBatch, nowNs: number): void {
    for (let k = 0; k < batch.count; k++) this.deadLetterFinal(batch.slots[k]!, DeadLetterReason.REJECTED, nowNs);
    this.releaseDevices(batch);
  }

  /**
   * A failed batch: back to the front of each device's FIFO, in order; a device whose first trigger ran out of
   * attempts is parked. While the breaker judges the downstream down (open, or half-open after a failed probe), and
   * for an answer that asks for a pause (`paused`: 429/503 with Retry-After, a live downstream that says when to come
   * back), a failure is the downstream's, not the trigger's: it uses up no attempt. Nor does a trigger the sink never
   * handed over or that the downstream refused for the moment during its device's first holds (`unsentSlots`). The
   * devices of `heldSlots` (refused for the moment while the downstream answered the rest) are held back alone
   * (DeviceQueues.holdBack: 10 ms doubling per hold in a row, at most 1 s) instead of going back on their lists.
   */
  private completeFailed(
    batch: TriggerBatch,
    nowNs: number,
    paused: boolean,
    unsentSlots: ReadonlySet<number> | null = null,
    heldSlots: ReadonlySet<number> | null = null,
    definiteAloneSlot = -1,
  ): void {
    const q = this.queues;
    const counts = !paused && this.breaker.state === BreakerState.CLOSED;
    for (let k = batch.count - 1; k >= 0; k--) {
      const slot = batch.slots[k]!;
      if ((q.i32[slot * DREC_STRIDE_I32 + DREC_FLAGS_I32]! & DrecFlag.GIVE_UP) !== 0) {
        // Its dead-letter copy was dropped while it was being sent (budgets): no second chance.
        this.giveUp(slot);
        continue;
      }
      const i = slot * DREC_STRIDE_I32;
      // A parked trigger's give-up clock runs from its first definite failure alone while the breaker counts failures;
      // any other failure of it (with a batch, for the moment, the downstream down) starts it again.
      if (q.i32[i + DREC_REASON_I32]! >= 0) {
        const f = slot * DREC_STRIDE_F64 + DREC_FIRST_ALONE_FAILURE_NS_F64;
        if (slot !== definiteAloneSlot || !counts) q.f64[f] = NaN;
        else if (Number.isNaN(q.f64[f]!)) q.f64[f] = nowNs;
      }
      if (!counts || unsentSlots?.has(slot) === true) q.i32[i + DREC_ATTEMPTS_I32]!--;
      else if (heldSlots?.has(slot) === true)
        q.i32[i + DREC_FLAGS_I32] = q.i32[i + DREC_FLAGS_I32]! & ~DrecFlag.FAILED_WITH_BATCH;
      else q.i32[i + DREC_FLAGS_I32] = q.i32[i + DREC_FLAGS_I32]! | DrecFlag.FAILED_WITH_BATCH;
      q.prepend(deviceOfSlot(q, slot), slot);
    }
    for (let k = 0; k < batch.count; k++) {
      const device = deviceOfSlot(q, batch.slots[k]!);
      if (!q.isBusy(device) || q.isHeld(device)) continue;
      for (;;) {
        const head = q.headOf(device);
        const hi = head * DREC_STRIDE_I32;
        if (head < 0 || q.i32[hi + DREC_REASON_I32]! >= 0 || q.i32[hi + DREC_ATTEMPTS_I32]! < this.maxAttempts) break;
        if (this.replayEnabled) {
          this.park(head, nowNs);
          break;
        }
        q.popHead(device);
        this.deadLetterFinal(head, DeadLetterReason.UNDELIVERABLE, nowNs);
      }
      // A parked trigger failing alone, definitely, for replayGiveUpMs or longer: given up, its device goes on.
      const head = q.headOf(device);
      if (
        head === definiteAloneSlot &&
        counts &&
        q.i32[head * DREC_STRIDE_I32 + DREC_REASON_I32]! >= 0 &&
        nowNs - q.f64[head * DREC_STRIDE_F64 + DREC_FIRST_ALONE_FAILURE_NS_F64]! >= this.replayGiveUpNs
      ) {
        q.popHead(device);
        this.giveUpReplay(head, nowNs);
      }
      // Refused for the moment while the downstream took the others: it alone waits (its refused trigger is first).
      if (heldSlots !== null && heldSlots.has(q.headOf(device)) && q.holdBack(device)) {
        this.deviceHolds++;
        continue;
      }
      q.setBusy(device, false);
    }
  }

  private releaseDevices(batch: TriggerBatch): void {
    const q = this.queues;
    for (let k = 0; k < batch.count; k++) {
      const device = deviceOfSlot(q, batch.slots[k]!);
      if (q.isBusy(device)) q.setBusy(device, false);
    }
  }

  /**
   * Dead-letters the trigger in `slot` as undeliverable and leaves it parked at the front of its device's FIFO: its
   * copy goes to the dead-letter file as PENDING (ownership of a record loaded from the log moves to that file).
   */
  private park(slot: number, nowNs: number): void {
    const q = this.queues;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    const wasMemoryOnly = this.isMemoryOnly(slot);
    // Its copy goes to the dead-letter file (with the next flush of the ring); until then the file it came from, if
    // any, still holds it (see DrecFlag.COVERED).
    if (q.f64[f + DREC_LOG_ORDINAL_F64]! >= 0 || (q.i32[i + DREC_FLAGS_I32]! & DrecFlag.FRONT) !== 0)
      q.i32[i + DREC_FLAGS_I32] = q.i32[i + DREC_FLAGS_I32]! | DrecFlag.COVERED;
    q.i32[i + DREC_REASON_I32] = DeadLetterReason.UNDELIVERABLE;
    q.f64[f + DREC_FIRST_ALONE_FAILURE_NS_F64] = NaN;
    this.deadLetteredByReason[DeadLetterReason.UNDELIVERABLE]!++;
    this.noteParked(deviceOfSlot(q, slot));
    if ((q.i32[i + DREC_FLAGS_I32]! & DrecFlag.FRONT) !== 0) this.settleFront(i);
    const ring = this.ctx.deadLetters.deadLetter(q.f64, q.i32, f, i, this.index, DeadLetterStatus.PENDING, slot, nowNs);
    q.f64[f + DREC_DLQ_POS_F64] = -2 - ring;
    // The device may wait here for long: its records loaded from the backlog log (the parked one and those behind it)
    // stop holding the log's cursor back. The dead-letter file owns the parked one (its ring entry holds its place in
    // the log until the copy is written: Dispatcher.flush); the others are memory's now, like any trigger in memory
    // (the pending file at close; lost in a crash).
    if (this.backlog !== null) {
      for (let s = q.nextInFifo(slot); s >= 0; s = q.nextInFifo(s)) this.releaseLogPlace(s);
      q.f64[f + DREC_LOG_ORDINAL_F64] = -1;
    }
    this.memoryOnly += (this.isMemoryOnly(slot) ? 1 : 0) - (wasMemoryOnly ? 1 : 0);
  }

  /**
   * Triggers in memory that no durable file holds, taken from the trigger rings at or before `cutNs` (this thread's
   * clock: DREC_TIME_NS_F64; a scan of the memory slots; `used` is scratch of capacitySlots cells), plus the earlier
   * run's backlog copies the replay derives again and not yet passed over: a partition state stored meanwhile would
   * raise their floor, and a later start that does not read the partition again from its delivered checkpoint (a
   * fallback, a gap) would take them over behind the seqs delivered since.
   */
  memoryOnlyTakenBy(cutNs: number, used: Uint8Array): number {
    const q = this.queues;
    q.markUsed(used);
    // Copies of carried-over triggers are durable (in the log, their originals in the pending or dead-letter file).
    // Records in the log's write buffer are not on disk until its next flush (one loaded back from there counts
    // durable by its slot, so it is counted here): all of them, whatever their time (the answer errs on "not yet").
    let n = this.supersededUnloadedTotal - this.copiesUnloadedTotal + this.unflushedRecords;
    for (let slot = 0; slot < q.capacitySlots; slot++) {
      if (used[slot] === 1 && this.isMemoryOnly(slot) && q.f64[slot * DREC_STRIDE_F64 + DREC_TIME_NS_F64]! <= cutNs)
        n++;
    }
    return n;
  }

  /**
   * Triggers not delivered yet that were taken from the trigger rings at or before `cutNs` (this thread's clock):
   * those in memory taken by then (queued, parked, being sent, carried over), every one loaded from the backlog log
   * (its time is -Infinity), and every one still in the log (counted whole: the answer errs on "not yet").
   * `used` is scratch of at least `capacitySlots`.
   */
  undeliveredTakenBy(cutNs: number, used: Uint8Array): number {
    const q = this.queues;
    q.markUsed(used);
    let n = this.backlog === null ? 0 : this.backlog.unread + this.setAside!.count;
    for (let slot = 0; slot < q.capacitySlots; slot++) {
      if (used[slot] === 1 && q.f64[slot * DREC_STRIDE_F64 + DREC_TIME_NS_F64]! <= cutNs) n++;
    }
    return n;
  }

  /**
   * True when the trigger in `slot` is in no durable file, so a close that cannot write the pending file loses it:
   * held in memory only (see isMemoryOnly), or loaded from the backlog log's write buffer, not flushed since. The
   * others come back at the next start from where they are (the log past its cursor, the files carried over at start).
   */
  lostWithoutPendingFile(slot: number): boolean {
    if (this.isMemoryOnly(slot)) return true;
    const ordinal = this.queues.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]!;
    return ordinal >= 0 && this.backlog!.loadedUnflushed(ordinal);
  }

  /** As `lostWithoutPendingFile`, for the trigger set aside in the backlog log's hold `h`. */
  setAsideLostWithoutPendingFile(h: number): boolean {
    return this.backlog!.heldUnflushed(h);
  }

  /**
   * True when no durable file holds the trigger in `slot`: not loaded from the log, not carried over, and no
   * dead-letter copy on disk (a copy still in the ring counts only where the file it came from covers it meanwhile).
   */
  private isMemoryOnly(slot: number): boolean {
    const q = this.queues;
    const dlq = q.f64[slot * DREC_STRIDE_F64 + DREC_DLQ_POS_F64]!;
    const flags = q.i32[slot * DREC_STRIDE_I32 + DREC_FLAGS_I32]!;
    return (
      q.f64[slot * DREC_STRIDE_F64 + DREC_LOG_ORDINAL_F64]! < 0 &&
      (dlq === -1 || (dlq <= -2 && (flags & DrecFlag.COVERED) === 0)) &&
      (flags & DrecFlag.FRONT) === 0
    );
  }

  /**
   * Gives up the parked trigger in `slot` (popped already), whose replays alone kept failing for replayGiveUpMs: its
   * dead-letter copy becomes final (it was counted as dead-lettered when parked), it counts as refused for good by the
   * replay lane, and its slot is freed.
   */
  private giveUpReplay(slot: number, nowNs: number): void {
    const q = this.queues;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    this.noteUnparked(slot);
    this.final++;
    this.replayRejected++;
    this.replayRejectedByReason[reasonIndex(q.i32[i + DREC_REASON_I32]!)]!++;
    this.replayGivenUp++;
    // Its dead-letter copy was dropped unwritten (the disk refused it): one is written now, final.
    const copied = q.f64[f + DREC_DLQ_POS_F64]! === -1;
    if (copied) this.ctx.deadLetters.deadLetter(q.f64, q.i32, f, i, this.index, DeadLetterStatus.FINAL, -1, nowNs);
    this.settle(slot, DeadLetterStatus.FINAL, copied);
  }

  /** Dead-letters the trigger in `slot` for good with `reason` and frees its slot (it was popped already). */
  private deadLetterFinal(slot: number, reason: number, nowNs: number): void {
    const q = this.queues;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    this.deadLetteredByReason[reason]!++;
    this.final++;
    const parkedReason = q.i32[i + DREC_REASON_I32]!;
    if (parkedReason >= 0) {
      this.noteUnparked(slot);
      if (reason === DeadLetterReason.REJECTED) {
        this.replayRejected++;
        this.replayRejectedByReason[reasonIndex(parkedReason)]!++;
      }
    }
    const copied = q.f64[f + DREC_DLQ_POS_F64]! === -1;
    if (copied) {
      // No copy in the dead-letter file yet: write one, final (its ring entry holds its place in the log until then).
      q.i32[i + DREC_REASON_I32] = reason;
      this.ctx.deadLetters.deadLetter(q.f64, q.i32, f, i, this.index, DeadLetterStatus.FINAL, -1, nowNs);
    }
    this.settle(slot, DeadLetterStatus.FINAL, copied);
  }

  /**
   * A trigger leaves memory for good: its log record is done (unless `ringKeepsLog`: a dead-letter ring entry just
   * took its place in the log over), its dead-letter copy gets `status`, its slot is freed.
   */
  private settle(slot: number, status: number, ringKeepsLog = false): void {
    const q = this.queues;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    if (this.isMemoryOnly(slot)) this.memoryOnly--;
    const ord = q.f64[f + DREC_LOG_ORDINAL_F64]!;
    if (ord >= 0 && this.backlog !== null && !ringKeepsLog) this.backlog.markDone(ord);
    const dlq = q.f64[f + DREC_DLQ_POS_F64]!;
    if (dlq >= 0) this.deadLetterFile?.setStatus(dlq, status);
    else if (dlq <= -2) this.ctx.deadLetters.setRingStatus(-2 - dlq, status);
    if ((q.i32[i + DREC_FLAGS_I32]! & DrecFlag.FRONT) !== 0) this.settleFront(i);
    q.release(slot);
  }

  private settleFront(i: number): void {
    this.queues.i32[i + DREC_FLAGS_I32] = this.queues.i32[i + DREC_FLAGS_I32]! & ~DrecFlag.FRONT;
    if (--this.frontOutstanding === 0 && this.onFrontSettled !== null) this.onFrontSettled();
  }

  /** The dead-letter flush wrote ring entry `ringIndex` (a parked trigger in `slot`) at `position` of the file. */
  onParkedFlushed(slot: number, ringIndex: number, position: number): void {
    const f = slot * DREC_STRIDE_F64;
    if (this.queues.f64[f + DREC_DLQ_POS_F64] !== -2 - ringIndex) return;
    if (this.isMemoryOnly(slot)) this.memoryOnly--;
    this.queues.f64[f + DREC_DLQ_POS_F64] = position;
    this.uncover(slot);
  }

  /**
   * The backlog log no longer keeps the parked trigger in `slot`, whose dead-letter copy still waits in the ring (the
   * log had to pass it: see Dispatcher.flushBacklogs): it is held in memory only until that copy is written.
   */
  onParkedLogReleased(slot: number): void {
    const f = slot * DREC_STRIDE_F64;
    if (this.queues.f64[f + DREC_DLQ_POS_F64]! > -2) return;
    const was = this.isMemoryOnly(slot);
    this.uncover(slot);
    this.memoryOnly += (this.isMemoryOnly(slot) ? 1 : 0) - (was ? 1 : 0);
  }

  /** The trigger in `slot` no longer counts on the file it came from (see DrecFlag.COVERED). */
  private uncover(slot: number): void {
    const i = slot * DREC_STRIDE_I32;
    this.queues.i32[i + DREC_FLAGS_I32] = this.queues.i32[i + DREC_FLAGS_I32]! & ~DrecFlag.COVERED;
  }

  /** A flush that could not write ring entry `from` (a parked trigger in `slot`) kept it, as entry `to`. */
  onParkedRingMoved(slot: number, from: number, to: number): void {
    const f = slot * DREC_STRIDE_F64;
    if (this.queues.f64[f + DREC_DLQ_POS_F64] === -2 - from) this.queues.f64[f + DREC_DLQ_POS_F64] = -2 - to;
  }

  /**
   * The ring dropped entry `ringIndex` (a parked trigger in `slot`) unwritten (the disk refused it and the ring needed
   * the room): the trigger stays parked, held in memory only (the pending file takes it at close).
   */
  onParkedRingDropped(slot: number, ringIndex: number): void {
    const f = slot * DREC_STRIDE_F64;
    if (this.queues.f64[f + DREC_DLQ_POS_F64] !== -2 - ringIndex) return;
    const was = this.isMemoryOnly(slot);
    this.queues.f64[f + DREC_DLQ_POS_F64] = -1;
    // The file it came from may pass it from now on.
    this.uncover(slot);
    this.memoryOnly += (this.isMemoryOnly(slot) ? 1 : 0) - (was ? 1 : 0);
  }

  /** DropListener of the dead-letter file (the file counts the reason): notes a dropped segment for `processDrops`. */
  private noteDroppedSegment(slot: number): void {
    this.dropSlots[this.dropCount++] = slot;
  }

  /** Gives up the parked triggers of every dropped dead-letter segment noted, and lets the file reuse the slots. */
  processDrops(): void {
    for (let k = 0; k < this.dropCount; k++) {
      this.giveUpParkedIn(this.dropSlots[k]!);
      this.deadLetterFile?.releaseSlot(this.dropSlots[k]!);
    }
    this.dropCount = 0;
  }

  /** Settles the parked trigger in `slot` (out of its FIFO already) for good: its dead-letter copy was dropped. */
  private giveUp(slot: number): void {
    const q = this.queues;
    const i = slot * DREC_STRIDE_I32;
    if (this.isMemoryOnly(slot)) this.memoryOnly--;
    if (q.i32[i + DREC_REASON_I32]! >= 0) this.noteUnparked(slot);
    this.final++;
    this.givenUp++;
    if ((q.i32[i + DREC_FLAGS_I32]! & DrecFlag.FRONT) !== 0) this.settleFront(i);
    q.release(slot);
  }

  /**
   * Gives up every parked trigger whose dead-letter copy was in segment slot `fileSlot`: out of its device's FIFO,
   * settled for good (`final`, `givenUp`). One inside a sink call keeps its chance: delivered, it counts as replayed;
   * failed, it is given up then. Walks every device's FIFO: a rare event (a segment dropped for a budget).
   */
  private giveUpParkedIn(fileSlot: number): void {
    const q = this.queues;
    for (let device = 0; device < q.maxDevices; device++) {
      for (let s = q.headOf(device); s >= 0;) {
        const next = q.nextInFifo(s);
        const pos = q.f64[s * DREC_STRIDE_F64 + DREC_DLQ_POS_F64]!;
        if (pos >= 0 && positionSlot(pos) === fileSlot) {
          q.remove(device, s);
          this.giveUp(s);
        }
        s = next;
      }
    }
    for (let p = 0; p < this.batches.length; p++) {
      if (this.permits[p] === NO_PERMIT) continue;
      const b = this.batches[p]!;
      for (let k = 0; k < b.count; k++) {
        const slot = b.slots[k]!;
        const f = slot * DREC_STRIDE_F64;
        const pos = q.f64[f + DREC_DLQ_POS_F64]!;
        if (pos >= 0 && positionSlot(pos) === fileSlot) {
          // Its position must not outlive the segment (the slot may name another one soon): held in memory only, and
          // given up when the call fails.
          q.f64[f + DREC_DLQ_POS_F64] = -1;
          q.i32[slot * DREC_STRIDE_I32 + DREC_FLAGS_I32] =
            q.i32[slot * DREC_STRIDE_I32 + DREC_FLAGS_I32]! | DrecFlag.GIVE_UP;
          if (this.isMemoryOnly(slot)) this.memoryOnly++;
        }
      }
    }
  }

  /** A trigger of `device` is parked (see park): its device's later triggers wait in the backlog log (see spills). */
  private noteParked(device: number): void {
    this.parked++;
    this.parkedOf[device] = this.parkedOf[device]! + 1;
  }

  /** The parked trigger in `slot` leaves the replay lane (replayed, given up, refused for good). */
  private noteUnparked(slot: number): void {
    this.parked--;
    const device = deviceOfSlot(this.queues, slot);
    this.parkedOf[device] = this.parkedOf[device]! - 1;
  }

  private initBookkeeping(slot: number): void {
    const q = this.queues;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    q.f64[f + DREC_TIME_NS_F64] = this.ctx.passTime[0]!;
    q.f64[f + DREC_LOG_ORDINAL_F64] = -1;
    q.f64[f + DREC_DLQ_POS_F64] = -1;
    q.i32[i + DREC_REASON_I32] = -1;
    q.i32[i + DREC_ATTEMPTS_I32] = 0;
    q.i32[i + DREC_FLAGS_I32] = 0;
  }
}

/**
 * Records set aside of a device no longer parked that may wait in memory at once (or a batch's worth when larger), and
 * records of a parked device that may wait in memory behind it (at most a sixteenth of the memory): the rest stay in
 * the log.
 */
const RELOAD_AHEAD = 16;

/** The device of the trigger in memory slot `slot`. */
function deviceOfSlot(q: DeviceQueues, slot: number): number {
  return q.i32[slot * DREC_STRIDE_I32 + TRG_DEVICE_SLOT_I32]!;
}
