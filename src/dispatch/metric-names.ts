/**
 * Prometheus metric names, types, units and help texts of the dispatcher, in one place. The wiring registers them
 * (prom-client) and fills them at scrape time from the dispatcher's metric cells (DS_* / DISP_* in
 * src/shm/layout.ts); every per-downstream metric carries the label `downstream`. Times are exported in seconds
 * (cells hold ns: divide by 1e9), following Prometheus conventions.
 */
import {
  DISP_BAD_RECORDS_F64,
  DISP_DEAD_LETTER_FLUSHED_F64,
  DISP_DEAD_LETTER_FLUSHES_F64,
  DISP_DEAD_LETTER_RING_DEPTH_F64,
  DISP_DURABLE_FAILING_F64,
  DISP_FLUSH_MAX_NS_F64,
  DISP_FLUSH_SUM_NS_F64,
  DISP_TRIGGERS_OFFERED_F64,
  DISP_TRIGGERS_UNROUTED_F64,
  DS_BACKLOG_BYTES_F64,
  DS_BACKOFFS_F64,
  DS_BACKLOG_RECORDS_F64,
  DS_BACKPRESSURE_WAITS_F64,
  DS_LOAD_WAITING_F64,
  DS_SET_ASIDE_F64,
  DS_SET_ASIDE_MOVED_F64,
  DS_BREAKER_OPENS_F64,
  DS_CARRIED_OVER_F64,
  DS_CREDITS_F64,
  DS_DEAD_LETTER_DEPTH_F64,
  DS_DEVICE_HOLDS_F64,
  DS_DELIVERED_F64,
  DS_DROPPED_F64,
  DS_FINAL_F64,
  DS_IGNORED_F64,
  DS_IN_FLIGHT_TRIGGERS_F64,
  DS_INFLIGHT_F64,
  DS_LIMIT_DECREASES_F64,
  DS_LIMIT_F64,
  DS_LIMIT_INCREASES_F64,
  DS_MEMORY_ONLY_F64,
  DS_LOCAL_STALL_NS_F64,
  DS_STALL_CORRECTED_F64,
  DS_OFFERED_F64,
  DS_CURSOR_DAMAGED_COPIES_F64,
  DS_CURSOR_FALLBACKS_F64,
  DS_DAMAGED_RECORDS_F64,
  DS_DEAD_LETTER_BYTES_F64,
  DS_DURABLE_FAILING_F64,
  DS_DURABLE_WRITE_ERRORS_F64,
  DS_PAUSES_F64,
  DS_QUEUE_DEPTH_F64,
  DS_RECOVERED_F64,
  DS_REJECTED_F64,
  DS_RTT_MIN_NS_F64,
  DS_SENDING_F64,
  DS_SPILLED_F64,
  DS_SUCCEEDED_F64,
} from '../shm/layout.js';

/** Label carrying the downstream's name. */
export const DOWNSTREAM_LABEL = 'downstream';

/** The three limiter signals, exported together. */
const METRIC_LIMIT = 'geofence_dispatch_concurrency_limit';
/** Requests in flight. */
const METRIC_INFLIGHT = 'geofence_dispatch_in_flight_requests';
/** Reference (minimum) RTT. */
const METRIC_RTT_MIN_SECONDS = 'geofence_dispatch_rtt_min_seconds';
/** RTT histogram (buckets DS_RTT_BUCKET_BOUNDS_MS / 1000; cells are per bucket, make them cumulative). */
export const METRIC_RTT_SECONDS = 'geofence_dispatch_request_duration_seconds';
/** Held time by downstream and lane (histogram over HELD_BUCKET_BOUNDS_S, from the DS_LANE_HELD_* cells). */
export const METRIC_HELD_TIME_SECONDS = 'geofence_dispatch_held_time_seconds';
/** Dead letters by downstream and reason (registered by the wiring from the by-reason cells). */
export const METRIC_DEAD_LETTERED = 'geofence_dispatch_dead_lettered_total';
/**
 * Dead letters re-delivered by the replay lane, by downstream and the reason they were dead-lettered with (registered
 * by the wiring from the DS_REPLAYED_BY_REASON_F64 cells).
 */
export const METRIC_REPLAYED = 'geofence_dispatch_replayed_total';
/**
 * Dead letters the replay lane found refused for good, by downstream and the reason they were dead-lettered with
 * (registered by the wiring from the DS_REPLAY_REJECTED_BY_REASON_F64 cells).
 */
export const METRIC_REPLAY_REJECTED = 'geofence_dispatch_replay_rejected_total';
/** Dead-letter records dropped by downstream and reason (registered by the wiring from the by-reason cells). */
export const METRIC_DEAD_LETTER_DROPPED = 'geofence_dispatch_dead_letter_dropped_total';
/** Circuit breaker state, one series per state (1 for the state in force). */
export const METRIC_BREAKER_STATE = 'geofence_dispatch_breaker_state';
/** Breaker states by the value of their cell (DS_BREAKER_STATE_F64). */
export const BREAKER_STATE_NAMES = ['closed', 'open', 'half_open'] as const;
/** Longest flush. */
const METRIC_FLUSH_MAX_SECONDS = 'geofence_dispatch_dead_letter_flush_max_seconds';

/** A metric read straight from one cell. */
export interface CellMetric {
  /** Prometheus name. */
  readonly name: string;
  /** Prometheus type. */
  readonly type: 'gauge' | 'counter';
  /** Help text. */
  readonly help: string;
  /** Cell index within the block. */
  readonly cell: number;
  /** Multiply the cell by this (ns to seconds: 1e-9). */
  readonly scale: number;
}

/** Per-downstream metrics read from single cells (block of downstream d starts at d * DS_BLOCK_F64). */
export const DOWNSTREAM_CELL_METRICS: readonly CellMetric[] = [
  {
    name: METRIC_LIMIT,
    type: 'gauge',
    help: 'Current concurrency limit (after the static safety cap).',
    cell: DS_LIMIT_F64,
    scale: 1,
  },
  {
    name: METRIC_INFLIGHT,
    type: 'gauge',
    help: 'Requests in flight to the downstream.',
    cell: DS_INFLIGHT_F64,
    scale: 1,
  },
  {
    name: METRIC_RTT_MIN_SECONDS,
    type: 'gauge',
    help: "The limit's reference (minimum) round-trip time.",
    cell: DS_RTT_MIN_NS_F64,
    scale: 1e-9,
  },
  {
    name: 'geofence_dispatch_offered_total',
    type: 'counter',
    help: 'Triggers routed to the downstream.',
    cell: DS_OFFERED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_recovered_total',
    type: 'counter',
    help: 'Triggers of earlier runs taken over at start (pending file, replay lane, backlog log).',
    cell: DS_RECOVERED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_delivered_total',
    type: 'counter',
    help: 'Triggers delivered that were never dead-lettered.',
    cell: DS_DELIVERED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_final_total',
    type: 'counter',
    help: 'Triggers settled without delivery (final dead letters).',
    cell: DS_FINAL_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_pending_triggers',
    type: 'gauge',
    help: 'Triggers not settled: in memory (queued, parked, being sent) or in the backlog log.',
    cell: DS_IN_FLIGHT_TRIGGERS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_queue_depth',
    type: 'gauge',
    help: 'Triggers held in memory and not being sent.',
    cell: DS_QUEUE_DEPTH_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_memory_only_triggers',
    type: 'gauge',
    help: 'Triggers in memory that no durable file holds: what a crash would lose.',
    cell: DS_MEMORY_ONLY_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_sending_triggers',
    type: 'gauge',
    help: 'Triggers inside calls to the downstream.',
    cell: DS_SENDING_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_spilled_total',
    type: 'counter',
    help: 'Triggers written to the backlog log (in per-device order) because memory could not take them.',
    cell: DS_SPILLED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backlog_records',
    type: 'gauge',
    help: 'Records of the backlog log not yet delivered (those set aside behind a parked trigger included).',
    cell: DS_BACKLOG_RECORDS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_set_aside_triggers',
    type: 'gauge',
    help: 'Triggers of parked devices set aside in the backlog log until their device goes on.',
    cell: DS_SET_ASIDE_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backlog_load_waiting',
    type: 'gauge',
    help: '1 while the backlog log loads nothing because it holds as many set-aside triggers as it can.',
    cell: DS_LOAD_WAITING_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_set_aside_moved_total',
    type: 'counter',
    help: "Set-aside triggers moved into set-aside files, so the backlog log's older segments they alone kept could go.",
    cell: DS_SET_ASIDE_MOVED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backlog_bytes',
    type: 'gauge',
    help: 'Bytes of the backlog log (its set-aside files included).',
    cell: DS_BACKLOG_BYTES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_carried_over_triggers',
    type: 'gauge',
    help: 'Triggers left in the state directory for the next start when the router closed.',
    cell: DS_CARRIED_OVER_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backpressure_waits_total',
    type: 'counter',
    help: 'Times a trigger record was held in its ring because memory and backlog log were full.',
    cell: DS_BACKPRESSURE_WAITS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_rejected_total',
    type: 'counter',
    help: 'Permit acquisitions refused by the limiter.',
    cell: DS_REJECTED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dropped_total',
    type: 'counter',
    help: 'Requests released as loss (error, timeout, 429/503).',
    cell: DS_DROPPED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_ignored_total',
    type: 'counter',
    help: 'Requests released without a sample.',
    cell: DS_IGNORED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_succeeded_total',
    type: 'counter',
    help: 'Requests released as success.',
    cell: DS_SUCCEEDED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_limit_increases_total',
    type: 'counter',
    help: 'Times the concurrency limit went up.',
    cell: DS_LIMIT_INCREASES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_limit_decreases_total',
    type: 'counter',
    help: 'Times the concurrency limit went down.',
    cell: DS_LIMIT_DECREASES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_local_stall_seconds_total',
    type: 'counter',
    help: "Time the dispatcher's own event loop stalled during requests, taken out of the limiter's RTT samples.",
    cell: DS_LOCAL_STALL_NS_F64,
    scale: 1e-9,
  },
  {
    name: 'geofence_dispatch_stall_corrected_samples_total',
    type: 'counter',
    help: "Limiter samples a stall of the dispatcher's own event loop was taken out of.",
    cell: DS_STALL_CORRECTED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_credits_remaining',
    type: 'gauge',
    help: 'Credits left in the credit window (no series for a downstream without one).',
    cell: DS_CREDITS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_breaker_opens_total',
    type: 'counter',
    help: 'Times the circuit breaker opened.',
    cell: DS_BREAKER_OPENS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_retry_backoffs_total',
    type: 'counter',
    help: 'Times the downstream as a whole was backed off (10 ms doubling to 1 s) after a failed batch not answered in part.',
    cell: DS_BACKOFFS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_device_holds_total',
    type: 'counter',
    help: 'Times a device alone was held back: the downstream refused its trigger for the moment and took or refused the rest of the batch.',
    cell: DS_DEVICE_HOLDS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_replay_lane_triggers',
    type: 'gauge',
    help: 'Dead letters waiting in the replay lane (their devices wait behind them).',
    cell: DS_DEAD_LETTER_DEPTH_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_retry_after_pauses_total',
    type: 'counter',
    help: 'Retry-After pauses honoured.',
    cell: DS_PAUSES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dead_letter_bytes',
    type: 'gauge',
    help: 'Bytes of the dead-letter files on disk (within deadLetter.maxBytesPerDownstream).',
    cell: DS_DEAD_LETTER_BYTES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_durable_write_errors_total',
    type: 'counter',
    help: 'Failed writes of the durable files (dead letters, backlog log, pending file): disk full, I/O error.',
    cell: DS_DURABLE_WRITE_ERRORS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_durable_write_failing',
    type: 'gauge',
    help: '1 while the last durable write failed (its dead letters wait in the ring), else 0.',
    cell: DS_DURABLE_FAILING_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_damaged_records_total',
    type: 'counter',
    help: 'Damaged records skipped in the durable files (the records after them are kept).',
    cell: DS_DAMAGED_RECORDS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backlog_cursor_damaged_copies_total',
    type: 'counter',
    help: 'Backlog cursor copies found damaged at start (the other copy served).',
    cell: DS_CURSOR_DAMAGED_COPIES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_backlog_cursor_fallbacks_total',
    type: 'counter',
    help: 'Starts with no valid backlog cursor copy: the log was read again from its start (re-delivery).',
    cell: DS_CURSOR_FALLBACKS_F64,
    scale: 1,
  },
];

/** Dispatcher-wide metrics read from single cells (block starts at downstreams * DS_BLOCK_F64). */
export const DISPATCHER_CELL_METRICS: readonly CellMetric[] = [
  {
    name: 'geofence_dispatch_triggers_offered_total',
    type: 'counter',
    help: 'Trigger records offered to the dispatcher.',
    cell: DISP_TRIGGERS_OFFERED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_triggers_unrouted_total',
    type: 'counter',
    help: 'Trigger records no downstream subscribed to.',
    cell: DISP_TRIGGERS_UNROUTED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_bad_records_total',
    type: 'counter',
    help: 'Malformed trigger records refused.',
    cell: DISP_BAD_RECORDS_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dead_letter_ring_depth',
    type: 'gauge',
    help: 'Records waiting in the dead-letter ring for a flush.',
    cell: DISP_DEAD_LETTER_RING_DEPTH_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dead_letter_flushes_total',
    type: 'counter',
    help: 'Dead-letter flushes (write + fsync).',
    cell: DISP_DEAD_LETTER_FLUSHES_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dead_letter_flushed_total',
    type: 'counter',
    help: 'Records written by dead-letter flushes.',
    cell: DISP_DEAD_LETTER_FLUSHED_F64,
    scale: 1,
  },
  {
    name: 'geofence_dispatch_dead_letter_flush_seconds_total',
    type: 'counter',
    help: 'Total time spent flushing the dead-letter ring.',
    cell: DISP_FLUSH_SUM_NS_F64,
    scale: 1e-9,
  },
  {
    name: METRIC_FLUSH_MAX_SECONDS,
    type: 'gauge',
    help: 'Longest dead-letter flush.',
    cell: DISP_FLUSH_MAX_NS_F64,
    scale: 1e-9,
  },
  {
    name: 'geofence_dispatch_durable_write_failing_downstreams',
    type: 'gauge',
    help: 'Downstreams whose last durable write failed.',
    cell: DISP_DURABLE_FAILING_F64,
    scale: 1,
  },
];
