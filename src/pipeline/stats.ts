/**
 * The router's stats snapshot, read from shared memory on the main thread (a few hundred cell reads, no message).
 */
import {
  ADM_ADMITTED_F64,
  ADM_BLOCK_F64,
  ADM_SHED_F64,
  CNT_BLOCK_F64,
  CNT_CANDIDATE_OVERFLOW_F64,
  CNT_FENCE_OVERFLOW_F64,
  CNT_EXPIRY_EXITS_F64,
  CNT_IMPLAUSIBLE_SEGMENTS_F64,
  CNT_CROSS_OVER_BUDGET_F64,
  CNT_GENERATION_MISMATCH_F64,
  CNT_INVALID_F64,
  CNT_PROCESSED_F64,
  CNT_STALE_F64,
  CNT_TRIGGERS_F64,
  DISP_TRIGGERS_OFFERED_F64,
  DISP_TRIGGERS_UNROUTED_F64,
  DEAD_LETTER_DROP_REASON_COUNT,
  DEAD_LETTER_DROP_REASON_NAMES,
  DEAD_LETTER_REASON_COUNT,
  DEAD_LETTER_REASON_NAMES,
  DISP_DURABLE_FAILING_F64,
  DISP_PUBLISH_VERSION_F64,
  DS_CURSOR_DAMAGED_COPIES_F64,
  DS_CURSOR_FALLBACKS_F64,
  DS_DAMAGED_LOST_F64,
  DS_DAMAGED_RECORDS_F64,
  DS_DEAD_LETTER_BYTES_F64,
  DS_DEAD_LETTER_DROPPED_F64,
  DS_DURABLE_FAILING_F64,
  DS_DURABLE_WRITE_ERRORS_F64,
  DS_BACKLOG_BYTES_F64,
  DS_BACKLOG_RECORDS_F64,
  DS_BACKOFFS_F64,
  DS_BACKPRESSURE_WAITS_F64,
  DS_BLOCK_F64,
  DS_BREAKER_OPENS_F64,
  DS_BREAKER_STATE_F64,
  DS_CARRIED_OVER_F64,
  DS_DEAD_LETTER_DEPTH_F64,
  DS_DEAD_LETTERED_BY_REASON_F64,
  DS_DEAD_LETTERED_F64,
  DS_DELIVERED_F64,
  DS_DEVICE_HOLDS_F64,
  DS_FINAL_F64,
  DS_IN_FLIGHT_TRIGGERS_F64,
  DS_INFLIGHT_F64,
  DS_LIMIT_F64,
  DS_LANE_HELD_BASE_F64,
  DS_MEMORY_ONLY_F64,
  DS_OFFERED_F64,
  DS_QUEUE_DEPTH_F64,
  DS_RECOVERED_F64,
  DS_REPLAYED_F64,
  DS_RTT_MIN_NS_F64,
  DS_SENDING_F64,
  DS_SPILLED_F64,
  ING_ACCEPTED_F64,
  ING_DEVICES_F64,
  ING_DEVICES_EXPIRED_F64,
  ING_DEVICES_REVIVED_F64,
  ING_SLOTS_FREED_F64,
  ING_SLOTS_REUSED_F64,
  ING_FRAMES_F64,
  ING_REJECTED_F64,
  LANE_COUNT,
  LANE_NAMES,
  PST_CHECKPOINT_BYTES_F64,
  PST_CHECKPOINT_DEVICES_F64,
  PST_CHECKPOINT_FAILURES_F64,
  PST_CHECKPOINT_LAST_NS_F64,
  PST_CHECKPOINT_PAUSE_NS_F64,
  PST_CHECKPOINTS_F64,
  PST_HELD_BASE_F64,
  PST_INPUT_ERRORS_F64,
  PST_LOST_PINGS_F64,
  PST_REPLAY_HELD_BASE_F64,
  PST_RELOADS_F64,
  PST_FENCE_EDITS_F64,
  PST_FENCE_EDITS_FAILED_F64,
  PST_FENCE_EDIT_LAST_NS_F64,
  PST_TASKS_COMPLETED_F64,
  REJECT_REASON_COUNT,
  REJECT_REASON_NAMES,
  SHED_REASON_COUNT,
  SHED_REASON_NAMES,
  TRIGGER_TYPE_COUNT,
  TRIGGER_TYPE_NAMES,
  HELD_BLOCK_F64,
  HELD_COUNT_F64,
} from '../shm/layout.js';
import { BREAKER_STATE_NAMES } from '../dispatch/breaker.js';
import { copyPublished } from '../shm/published-copy.js';
import { heldBucketCounts, heldQuantileBetweenMs, heldQuantileMs } from './held-time.js';

/** Counts per lane. */
export type PerLane = Record<(typeof LANE_NAMES)[number], number>;
/** Counts per trigger type. */
export type PerTriggerType = Record<(typeof TRIGGER_TYPE_NAMES)[number], number>;

/** Dead letters by reason. */
export type PerDeadLetterReason = Record<(typeof DEAD_LETTER_REASON_NAMES)[number], number>;

/** Dead-letter records dropped from storage, by reason (over_budget, too_old, disk_error). */
export type PerDeadLetterDropReason = Record<(typeof DEAD_LETTER_DROP_REASON_NAMES)[number], number>;

/** One downstream's control-loop signals and delivery accounting. */
export interface DownstreamStats {
  /** Name. */
  name: string;
  /** Concurrency limit in force. */
  limit: number;
  /** Requests in flight. */
  inflight: number;
  /** The limit's reference (minimum) RTT, ms (NaN until measured). */
  rttMinMs: number;
  /** Breaker state: "closed" / "open" / "half_open". */
  breakerState: string;
  /** Times the breaker opened. */
  breakerOpens: number;
  /** Times the downstream as a whole was backed off after a failed batch (not one answered in part). */
  backoffs: number;
  /**
   * Times a device alone was held back: the downstream refused its trigger for the moment and answered the rest of the
   * batch.
   */
  deviceHolds: number;
  /** Triggers held in memory, not being sent. */
  queueDepth: number;
  /** Triggers inside sink calls. */
  sending: number;
  /** Triggers routed to it by this run. */
  offered: number;
  /** Triggers of earlier runs taken over at start. */
  recovered: number;
  /** Delivered, never dead-lettered. */
  delivered: number;
  /** Dead letters re-delivered by the replay lane. */
  replayed: number;
  /** Dead-letter events (a parked trigger later refused counts under both reasons). */
  deadLettered: number;
  /** Dead-letter events by reason. */
  deadLetteredByReason: PerDeadLetterReason;
  /** Settled without delivery (final dead letters). */
  final: number;
  /** Not settled: in memory (queued, parked, being sent) or in the backlog log. */
  inFlight: number;
  /** Dead letters waiting in the replay lane. */
  parked: number;
  /** Triggers written to the backlog log by this run. */
  spilled: number;
  /** Records in the backlog log not yet delivered. */
  backlogRecords: number;
  /** Bytes of the backlog log. */
  backlogBytes: number;
  /** Left durably for the next start at close. */
  carriedOver: number;
  /** Trigger records held back because memory and backlog were full. */
  backpressureWaits: number;
  /** Triggers in memory that no durable file holds (a crash would lose them). */
  memoryOnly: number;
  /** Dead-letter records dropped from storage, by reason (a dropped one that waited for replay took its trigger). */
  deadLetterDropped: PerDeadLetterDropReason;
  /** Bytes of its dead-letter files on disk. */
  deadLetterBytes: number;
  /** Failed writes of its durable files (dead letters, backlog log, pending file). */
  durableWriteErrors: number;
  /** True while its last durable write failed. */
  durableFailing: boolean;
  /** Damaged records skipped in its durable files. */
  damagedRecords: number;
  /**
   * Of those, the damaged spans whose triggers this run lost (its pending file's and backlog log's; a dead-letter
   * file's damage is found again at every start while its segment lives).
   */
  damagedLost: number;
  /** Backlog cursor copies found damaged at start, and starts with no valid copy (the log read again from its start). */
  cursorDamagedCopies: number;
  cursorFallbacks: number;
  /** Held time of its triggers delivered without a dead letter, P99 by the trigger's lane (its fence's class), ms (NaN: none yet). */
  heldTimeP99MsByLane: PerLane;
  /** Those held-time samples by lane. */
  heldTimeSamplesByLane: PerLane;
}

/** A snapshot of the router's counters. */
export interface RouterStats {
  /** Frames looked at by the ingest edge. */
  frames: number;
  /** Pings that passed validation (offered to admission). */
  accepted: number;
  /** Rejected frames and pings by reason (only reasons seen are listed). */
  rejected: Record<string, number>;
  /** Rejected in all. */
  rejectedTotal: number;
  /** Device slots in use (registered devices not expired and freed). */
  devices: number;
  /** Devices expired for idleness, revived before their slot was freed, slots freed, and slots reused. */
  deviceLifecycle: { expired: number; revived: number; freed: number; reused: number; expiryExits: number };
  /** Pings offered to admission per lane. */
  offered: PerLane;
  /** Pings admitted per lane. */
  admitted: PerLane;
  /** Pings shed per lane, by reason (`shed.idle.rate_limited`). */
  shed: Record<(typeof LANE_NAMES)[number], Record<string, number>>;
  /** Offered / admitted / shed summed over lanes. */
  offeredTotal: number;
  admittedTotal: number;
  shedTotal: number;
  /** Pings admitted per ingest thread (thread k's telemetry rings; one entry with one ingest thread). */
  admittedByIngestThread: number[];
  /** Admitted pings containment consumed (processed by the state machine, plus stale and invalid ones it ignored). */
  processed: number;
  /** Of those, ignored as older than the device's last ping. */
  stale: number;
  /** Pings a containment task that threw, exited or hung was processing, dropped (see the containment watchdog). */
  lost: number;
  /** Triggers produced per type (containment and reload EXITs). */
  triggers: PerTriggerType;
  /** Triggers produced in all. */
  triggersTotal: number;
  /** Trigger records the dispatcher read. */
  triggersDispatched: number;
  /** Of those, routed to no downstream. */
  unrouted: number;
  /** Trigger deliveries offered to downstreams (one per subscribed downstream). */
  deliveriesOffered: number;
  /** Taken over from earlier runs at start, summed over downstreams. */
  recovered: number;
  /** Delivered without a dead letter. */
  delivered: number;
  /** Dead letters re-delivered. */
  replayed: number;
  /** Dead-letter events. */
  deadLettered: number;
  /** Dead-letter events by reason. */
  deadLetteredByReason: PerDeadLetterReason;
  /** Settled without delivery (final dead letters). */
  final: number;
  /** Not settled: in memory or in a backlog log (`deliveriesOffered + recovered = delivered + replayed + final + inFlight`). */
  inFlight: number;
  /** Left durably for the next start at close. */
  carriedOver: number;
  /** Dead-letter records dropped from storage, by reason, summed over downstreams. */
  deadLetterDropped: PerDeadLetterDropReason;
  /** Failed durable writes, summed over downstreams. */
  durableWriteErrors: number;
  /** Downstreams whose last durable write failed. */
  durableFailingDownstreams: number;
  /** Per downstream. */
  downstreams: DownstreamStats[];
  /** Held time (admission -> handed to a downstream) P50 / P99 / max, ms (NaN before the first trigger). */
  heldTimeP50Ms: number;
  heldTimeP99Ms: number;
  heldTimeMaxMs: number;
  /** Held-time samples. */
  heldTimeSamples: number;
  /** Held time of dead letters re-delivered by the replay lane, P99 ms, and their count. */
  replayHeldTimeP99Ms: number;
  replayHeldTimeSamples: number;
  /** Device-state checkpoints written, failed; the last one's duration, containment pause, size and devices. */
  checkpoints: number;
  checkpointFailures: number;
  checkpointLastMs: number;
  checkpointPauseMs: number;
  checkpointBytes: number;
  checkpointDevices: number;
  /**
   * Held-time histogram: samples per bucket (bucket i holds (bound(i-1), bound(i)], bounds growing 1.25x from 10 us;
   * the last bucket is the overflow), so two snapshots give the quantiles of the time between them
   * (`heldTimeWindow`).
   */
  heldTimeBucketCounts: number[];
  /** Containment tasks completed. */
  tasks: number;
  /** Fence reloads completed. */
  reloads: number;
  /** Live fence edits applied (upserts, removals, expiries). */
  fenceEdits: number;
  /** Live fence edits refused (invalid fence) or failed. */
  fenceEditsFailed: number;
  /** Duration of the last live fence edit, ms (0 before the first). */
  fenceEditLastMs: number;
  /** Containment diagnostics: fence-entry overflows, candidate overflows, generation mismatches. */
  fenceOverflows: number;
  candidateOverflows: number;
  /** Moves judged implausible (crossMaxSpeedMps, crossMaxGapMs): no CROSS looked for along them (a rule, not loss). */
  implausibleSegments: number;
  /** CROSS triggers not written: their device had used its crossMaxPerDevicePerSec budget (loss by design). */
  crossOverBudget: number;
  generationMismatches: number;
  /** The fences with the most untracked pings in the current fence generation, most first (at most 5). */
  untrackedFences: { fenceId: string; pings: number }[];
  /**
   * Owned partitions of a partitioned JetStream source that this start read after a gap: the stream had lost messages
   * their stored state needed, so those pings were read by no one (a loss, by the stream's retention).
   */
  partitionsAfterGap: number;
  /**
   * Damaged spans of the pending files and backlog logs this run skipped, summed over downstreams
   * (DownstreamStats.damagedLost): the triggers they held are lost (a loss, exit 3).
   */
  damagedLost: number;
  /** Input files (or stdin) whose reading ended with an error: the rest of each was not read (a loss, exit 3). */
  inputErrors: number;
  /**
   * Undelivered triggers the start found in the state directory's files of downstreams the options no longer name
   * (RecoveryReport.unconfiguredDownstreams): kept there, delivered by a start that names them again.
   */
  unconfiguredTriggers: number;
}

/** Shared views the stats are read from. */
export interface StatsViews {
  pipeline: Float64Array;
  admission: Float64Array;
  containment: Float64Array;
  dispatch: Float64Array;
  stats: Float64Array;
  shards: number;
  /** Ingest threads (default 1): the admission blocks after `ingestThreads * shards` are their COMPLIANCE rings'. */
  ingestThreads?: number;
  downstreamNames: readonly string[];
}

function perLane(read: (lane: number) => number): PerLane {
  return { idle: read(0), transition: read(1), compliance: read(2) };
}

/**
 * Pings admitted into each ingest thread's rings (blocks in telemetryRingIndex order: producer-major, then one per
 * COMPLIANCE ring in producer order).
 */
function admittedByProducer(v: StatsViews): number[] {
  const blocks = Math.floor(v.admission.length / ADM_BLOCK_F64);
  const threads = v.ingestThreads ?? 1;
  const shardBlocks = threads * v.shards;
  const out = new Array<number>(threads).fill(0);
  for (let b = 0; b < blocks; b++) {
    const producer = b < shardBlocks ? Math.floor(b / v.shards) : b - shardBlocks;
    for (let l = 0; l < LANE_COUNT; l++) out[producer]! += v.admission[b * ADM_BLOCK_F64 + ADM_ADMITTED_F64 + l]!;
  }
  return out;
}

/** Reads a snapshot (main thread). */
export function readRouterStats(v: StatsViews): RouterStats {
  const admSum = (cell: number): number => {
    let s = 0;
    // One block per telemetry ring (every ingest thread's ring of every shard).
    const blocks = Math.floor(v.admission.length / ADM_BLOCK_F64);
    for (let b = 0; b < blocks; b++) s += v.admission[b * ADM_BLOCK_F64 + cell]!;
    return s;
  };
  const cntSum = (cell: number): number => {
    let s = 0;
    // Every block: the shards', the control block, the COMPLIANCE group's.
    for (let b = 0; b * CNT_BLOCK_F64 < v.containment.length; b++) s += v.containment[b * CNT_BLOCK_F64 + cell]!;
    return s;
  };
  const rejected: Record<string, number> = {};
  let rejectedTotal = 0;
  for (let r = 0; r < REJECT_REASON_COUNT; r++) {
    const n = v.pipeline[ING_REJECTED_F64 + r]!;
    if (n > 0) rejected[REJECT_REASON_NAMES[r]!] = n;
    rejectedTotal += n;
  }
  const admitted = perLane((l) => admSum(ADM_ADMITTED_F64 + l));
  const shed = { idle: {}, transition: {}, compliance: {} } as RouterStats['shed'];
  const shedByLane = [0, 0, 0];
  let shedTotal = 0;
  for (let l = 0; l < LANE_COUNT; l++) {
    for (let r = 0; r < SHED_REASON_COUNT; r++) {
      const n = admSum(ADM_SHED_F64 + l * SHED_REASON_COUNT + r);
      shed[LANE_NAMES[l]!][SHED_REASON_NAMES[r]!] = n;
      shedByLane[l]! += n;
      shedTotal += n;
    }
  }
  // Every offered ping is admitted or shed in the same call, so offered is their sum (read from the cells, a separate
  // offered counter could be one increment ahead of them).
  const offered = perLane((l) => admitted[LANE_NAMES[l]!] + shedByLane[l]!);
  const triggers = { ENTER: 0, EXIT: 0, DWELL: 0, CROSS: 0 } as PerTriggerType;
  let triggersTotal = 0;
  for (let t = 0; t < TRIGGER_TYPE_COUNT; t++) {
    const n = cntSum(CNT_TRIGGERS_F64 + t);
    triggers[TRIGGER_TYPE_NAMES[t]!] = n;
    triggersTotal += n;
  }
  const downstreams: DownstreamStats[] = [];
  const sum = {
    offered: 0,
    recovered: 0,
    delivered: 0,
    replayed: 0,
    deadLettered: 0,
    final: 0,
    inFlight: 0,
    carriedOver: 0,
  };
  const byReason = {} as PerDeadLetterReason;
  for (const r of DEAD_LETTER_REASON_NAMES) byReason[r] = 0;
  const droppedSum = {} as PerDeadLetterDropReason;
  for (const r of DEAD_LETTER_DROP_REASON_NAMES) droppedSum[r] = 0;
  let durableWriteErrors = 0;
  // One consistent copy of the dispatcher's cells (one publish), so the delivery identity holds within it.
  const dispatch = publishedDispatchCells(v.dispatch, v.downstreamNames.length);
  v.downstreamNames.forEach((name, d) => {
    const b = d * DS_BLOCK_F64;
    const c = dispatch;
    const reasons = {} as PerDeadLetterReason;
    for (let r = 0; r < DEAD_LETTER_REASON_COUNT; r++) {
      const n = c[b + DS_DEAD_LETTERED_BY_REASON_F64 + r]!;
      reasons[DEAD_LETTER_REASON_NAMES[r]!] = n;
      byReason[DEAD_LETTER_REASON_NAMES[r]!] += n;
    }
    const dropped = {} as PerDeadLetterDropReason;
    for (let r = 0; r < DEAD_LETTER_DROP_REASON_COUNT; r++) {
      const n = c[b + DS_DEAD_LETTER_DROPPED_F64 + r]!;
      dropped[DEAD_LETTER_DROP_REASON_NAMES[r]!] = n;
      droppedSum[DEAD_LETTER_DROP_REASON_NAMES[r]!] += n;
    }
    const s: DownstreamStats = {
      name,
      limit: c[b + DS_LIMIT_F64]!,
      inflight: c[b + DS_INFLIGHT_F64]!,
      rttMinMs: c[b + DS_RTT_MIN_NS_F64]! / 1e6,
      breakerState:
        (BREAKER_STATE_NAMES as readonly string[])[c[b + DS_BREAKER_STATE_F64]!] ?? String(c[b + DS_BREAKER_STATE_F64]),
      breakerOpens: c[b + DS_BREAKER_OPENS_F64]!,
      backoffs: c[b + DS_BACKOFFS_F64]!,
      deviceHolds: c[b + DS_DEVICE_HOLDS_F64]!,
      queueDepth: c[b + DS_QUEUE_DEPTH_F64]!,
      sending: c[b + DS_SENDING_F64]!,
      offered: c[b + DS_OFFERED_F64]!,
      recovered: c[b + DS_RECOVERED_F64]!,
      delivered: c[b + DS_DELIVERED_F64]!,
      replayed: c[b + DS_REPLAYED_F64]!,
      deadLettered: c[b + DS_DEAD_LETTERED_F64]!,
      deadLetteredByReason: reasons,
      final: c[b + DS_FINAL_F64]!,
      inFlight: c[b + DS_IN_FLIGHT_TRIGGERS_F64]!,
      parked: c[b + DS_DEAD_LETTER_DEPTH_F64]!,
      spilled: c[b + DS_SPILLED_F64]!,
      backlogRecords: c[b + DS_BACKLOG_RECORDS_F64]!,
      backlogBytes: c[b + DS_BACKLOG_BYTES_F64]!,
      carriedOver: c[b + DS_CARRIED_OVER_F64]!,
      backpressureWaits: c[b + DS_BACKPRESSURE_WAITS_F64]!,
      memoryOnly: c[b + DS_MEMORY_ONLY_F64]!,
      deadLetterDropped: dropped,
      deadLetterBytes: c[b + DS_DEAD_LETTER_BYTES_F64]!,
      durableWriteErrors: c[b + DS_DURABLE_WRITE_ERRORS_F64]!,
      durableFailing: c[b + DS_DURABLE_FAILING_F64]! > 0,
      damagedRecords: c[b + DS_DAMAGED_RECORDS_F64]!,
      damagedLost: c[b + DS_DAMAGED_LOST_F64]!,
      cursorDamagedCopies: c[b + DS_CURSOR_DAMAGED_COPIES_F64]!,
      cursorFallbacks: c[b + DS_CURSOR_FALLBACKS_F64]!,
      heldTimeP99MsByLane: perLane((l) => heldQuantileMs(c, b + DS_LANE_HELD_BASE_F64 + l * HELD_BLOCK_F64, 0.99)),
      heldTimeSamplesByLane: perLane((l) => c[b + DS_LANE_HELD_BASE_F64 + l * HELD_BLOCK_F64 + HELD_COUNT_F64]!),
    };
    durableWriteErrors += s.durableWriteErrors;
    sum.offered += s.offered;
    sum.recovered += s.recovered;
    sum.delivered += s.delivered;
    sum.replayed += s.replayed;
    sum.deadLettered += s.deadLettered;
    sum.final += s.final;
    sum.inFlight += s.inFlight;
    sum.carriedOver += s.carriedOver;
    downstreams.push(s);
  });
  const g = v.downstreamNames.length * DS_BLOCK_F64;
  const processed = cntSum(CNT_PROCESSED_F64) + cntSum(CNT_STALE_F64) + cntSum(CNT_INVALID_F64);
  return {
    frames: v.pipeline[ING_FRAMES_F64]!,
    accepted: v.pipeline[ING_ACCEPTED_F64]!,
    rejected,
    rejectedTotal,
    devices: v.pipeline[ING_DEVICES_F64]!,
    deviceLifecycle: {
      expired: v.pipeline[ING_DEVICES_EXPIRED_F64]!,
      revived: v.pipeline[ING_DEVICES_REVIVED_F64]!,
      freed: v.pipeline[ING_SLOTS_FREED_F64]!,
      reused: v.pipeline[ING_SLOTS_REUSED_F64]!,
      expiryExits: cntSum(CNT_EXPIRY_EXITS_F64),
    },
    offered,
    admitted,
    shed,
    offeredTotal: offered.idle + offered.transition + offered.compliance,
    admittedTotal: admitted.idle + admitted.transition + admitted.compliance,
    shedTotal,
    admittedByIngestThread: admittedByProducer(v),
    processed,
    stale: cntSum(CNT_STALE_F64),
    lost: v.stats[PST_LOST_PINGS_F64]!,
    triggers,
    triggersTotal,
    triggersDispatched: dispatch[g + DISP_TRIGGERS_OFFERED_F64]!,
    unrouted: dispatch[g + DISP_TRIGGERS_UNROUTED_F64]!,
    deliveriesOffered: sum.offered,
    recovered: sum.recovered,
    delivered: sum.delivered,
    replayed: sum.replayed,
    deadLettered: sum.deadLettered,
    deadLetteredByReason: byReason,
    final: sum.final,
    inFlight: sum.inFlight,
    carriedOver: sum.carriedOver,
    deadLetterDropped: droppedSum,
    durableWriteErrors,
    durableFailingDownstreams: dispatch[g + DISP_DURABLE_FAILING_F64]!,
    downstreams,
    heldTimeP50Ms: heldQuantileMs(v.stats, PST_HELD_BASE_F64, 0.5),
    heldTimeP99Ms: heldQuantileMs(v.stats, PST_HELD_BASE_F64, 0.99),
    heldTimeMaxMs: heldQuantileMs(v.stats, PST_HELD_BASE_F64, 1),
    heldTimeSamples: v.stats[PST_HELD_BASE_F64 + HELD_COUNT_F64]!,
    heldTimeBucketCounts: heldBucketCounts(v.stats, PST_HELD_BASE_F64),
    replayHeldTimeP99Ms: heldQuantileMs(v.stats, PST_REPLAY_HELD_BASE_F64, 0.99),
    replayHeldTimeSamples: v.stats[PST_REPLAY_HELD_BASE_F64 + HELD_COUNT_F64]!,
    checkpoints: v.stats[PST_CHECKPOINTS_F64]!,
    checkpointFailures: v.stats[PST_CHECKPOINT_FAILURES_F64]!,
    checkpointLastMs: v.stats[PST_CHECKPOINT_LAST_NS_F64]! / 1e6,
    checkpointPauseMs: v.stats[PST_CHECKPOINT_PAUSE_NS_F64]! / 1e6,
    checkpointBytes: v.stats[PST_CHECKPOINT_BYTES_F64]!,
    checkpointDevices: v.stats[PST_CHECKPOINT_DEVICES_F64]!,
    tasks: v.stats[PST_TASKS_COMPLETED_F64]!,
    reloads: v.stats[PST_RELOADS_F64]!,
    fenceEdits: v.stats[PST_FENCE_EDITS_F64]!,
    fenceEditsFailed: v.stats[PST_FENCE_EDITS_FAILED_F64]!,
    fenceEditLastMs: v.stats[PST_FENCE_EDIT_LAST_NS_F64]! / 1e6,
    fenceOverflows: cntSum(CNT_FENCE_OVERFLOW_F64),
    candidateOverflows: cntSum(CNT_CANDIDATE_OVERFLOW_F64),
    implausibleSegments: cntSum(CNT_IMPLAUSIBLE_SEGMENTS_F64),
    crossOverBudget: cntSum(CNT_CROSS_OVER_BUDGET_F64),
    generationMismatches: cntSum(CNT_GENERATION_MISMATCH_F64),
    untrackedFences: [],
    partitionsAfterGap: 0,
    damagedLost: downstreams.reduce((n, d) => n + d.damagedLost, 0),
    inputErrors: v.stats[PST_INPUT_ERRORS_F64]!,
    unconfiguredTriggers: 0,
  };
}

/** Held time of the triggers handed to downstreams between two stats snapshots. */
export interface HeldTimeWindow {
  /** Held-time samples in the window. */
  samples: number;
  /** P50 / P99 / largest, ms (bucket upper bounds; NaN when the window holds no samples). */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * Held time between two `router.stats()` snapshots (from the histogram's deltas): what the last interval looked like,
 * where the cumulative `heldTimeP99Ms` still carries the cold start and every earlier burst.
 */
export function heldTimeWindow(previous: RouterStats, current: RouterStats): HeldTimeWindow {
  const a = previous.heldTimeBucketCounts;
  const b = current.heldTimeBucketCounts;
  return {
    samples: current.heldTimeSamples - previous.heldTimeSamples,
    p50Ms: heldQuantileBetweenMs(a, b, 0.5),
    p99Ms: heldQuantileBetweenMs(a, b, 0.99),
    maxMs: heldQuantileBetweenMs(a, b, 1),
  };
}

/** A consistent copy of the dispatcher's metric cells (`cells`, for `downstreams` downstreams): see copyPublished. */
function publishedDispatchCells(cells: Float64Array, downstreams: number): Float64Array {
  const out = new Float64Array(cells.length);
  const i32 = new Int32Array(cells.buffer, cells.byteOffset, cells.length * 2);
  copyPublished(cells, i32, (downstreams * DS_BLOCK_F64 + DISP_PUBLISH_VERSION_F64) * 2, out);
  return out;
}
