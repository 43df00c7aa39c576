/**
 * The dispatcher: routes trigger records to subscribed downstreams and runs each downstream's control loop; owns the
 * fence catalog, the dead-letter ring with its batched durable flush, and each downstream's durable files (one
 * directory per downstream under `stateDir`: backlog log, dead-letter file, pending file). Runs on the dispatcher
 * thread (the thread entry wires a `Dispatcher` to the trigger rings: for each record `offer`, then `pump(nowNs)`).
 *
 * A record a downstream cannot take (its memory is full and its backlog log has reached `backlogMaxBytes`) is not
 * consumed: `offer` answers OFFER_BLOCKED and the caller leaves it in its trigger ring, which pauses containment
 * upstream (internal hops block; only the ingest edge sheds).
 *
 * Accounting, per downstream (`Downstream`): `offered + recovered = delivered + replayed + final + inFlightTriggers`.
 *
 * Durable files never stop the loop: a write that fails (disk full, I/O error) is counted, alarmed (an error-level
 * line at most every ALARM_INTERVAL_MS per downstream, with the counts) and retried after WRITE_RETRY_MS; the dead
 * letters it could not write wait in the ring, and when the ring must make room the oldest of them are dropped
 * (counted as `disk_error`). Every other downstream goes on. Dead-letter storage is kept within its size and age
 * budgets (DeadLetterFile); what they drop is alarmed the same way.
 */
import { LoopStallMeter } from './loop-stall.js';
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  DEAD_LETTER_DROP_REASON_COUNT,
  DEAD_LETTER_DROP_REASON_NAMES,
  DEAD_LETTER_REASON_COUNT,
  DeadLetterDropReason,
  DeadLetterStatus,
  DISP_BAD_RECORDS_F64,
  DISP_BLOCK_F64,
  DISP_DEAD_LETTER_FLUSHED_F64,
  DISP_DEAD_LETTER_FLUSHES_F64,
  DISP_DEAD_LETTER_RING_DEPTH_F64,
  DISP_DURABLE_FAILING_F64,
  DISP_PUBLISH_VERSION_F64,
  DISP_FLUSH_MAX_NS_F64,
  DISP_FLUSH_SUM_NS_F64,
  DISP_TRIGGERS_OFFERED_F64,
  DISP_TRIGGERS_UNROUTED_F64,
  DREC_DL_STATUS_I32,
  DREC_DOWNSTREAM_I32,
  DREC_FLUSH_OFFSET_F64,
  DREC_LOG_ORDINAL_F64,
  DREC_SLOT_REF_I32,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DREC_TIME_NS_F64,
  DS_BACKLOG_BYTES_F64,
  DS_BACKLOG_RECORDS_F64,
  DS_BACKPRESSURE_WAITS_F64,
  DS_BLOCK_F64,
  DS_BACKOFFS_F64,
  DS_BREAKER_OPENS_F64,
  DS_DEVICE_HOLDS_F64,
  DS_BREAKER_STATE_F64,
  DS_CARRIED_OVER_F64,
  DS_CREDITS_F64,
  DS_CURSOR_DAMAGED_COPIES_F64,
  DS_CURSOR_FALLBACKS_F64,
  DS_DAMAGED_LOST_F64,
  DS_LOAD_WAITING_F64,
  DS_SET_ASIDE_F64,
  DS_SET_ASIDE_MOVED_F64,
  DS_DAMAGED_RECORDS_F64,
  DS_DEAD_LETTER_BYTES_F64,
  DS_DEAD_LETTER_DROPPED_F64,
  DS_DEAD_LETTER_DEPTH_F64,
  DS_DEAD_LETTERED_BY_REASON_F64,
  DS_DEAD_LETTERED_F64,
  DS_DELIVERED_F64,
  DS_DROPPED_F64,
  DS_DURABLE_FAILING_F64,
  DS_DURABLE_WRITE_ERRORS_F64,
  DS_FINAL_F64,
  DS_IGNORED_F64,
  DS_IN_FLIGHT_TRIGGERS_F64,
  DS_INFLIGHT_F64,
  DS_LIMIT_DECREASES_F64,
  DS_LOCAL_STALL_NS_F64,
  DS_STALL_CORRECTED_F64,
  DS_LIMIT_F64,
  DS_LIMIT_INCREASES_F64,
  DS_MEMORY_ONLY_F64,
  DS_OFFERED_F64,
  DS_PAUSES_F64,
  DS_QUEUE_DEPTH_F64,
  DS_RECOVERED_F64,
  DS_REJECTED_F64,
  DS_REPLAY_REJECTED_BY_REASON_F64,
  DS_REPLAY_REJECTED_F64,
  DS_REPLAYED_BY_REASON_F64,
  DS_REPLAYED_F64,
  DS_RTT_BUCKET_COUNT,
  DS_RTT_BUCKETS_F64,
  DS_RTT_COUNT_F64,
  DS_RTT_MIN_NS_F64,
  DS_RTT_SUM_NS_F64,
  DS_SENDING_F64,
  DS_SPILLED_F64,
  DS_SUCCEEDED_F64,
  LANE_COUNT,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_FENCE_INDEX_I32,
  TRG_FENCE_INDEX_MASK,
  TRG_GENERATION_I32,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_TYPE_I32,
  TRIGGER_TYPE_COUNT,
} from '../shm/layout.js';
import { nowNs as defaultClock, type ClockNs } from '../shm/clock.js';
import { BacklogLog } from '../durable/backlog-log.js';
import {
  DEFAULT_DEAD_LETTER_MAX_AGE_MS,
  DEFAULT_DEAD_LETTER_MAX_BYTES,
  DeadLetterFile,
  MIN_DEAD_LETTER_MAX_BYTES,
} from '../durable/dead-letter-file.js';
import { encodeDeadLetterStatus, TREC_MAX_BYTES } from '../durable/file-layout.js';
import { errorText, safeFileName } from '../durable/fs-util.js';
import { removePendingFile } from '../durable/pending-file.js';
import { removeSetAsideFiles } from '../durable/set-aside-files.js';
import { readCarriedCeilings, removeCarriedCeilings, writeCarriedCeilings } from '../durable/carried-ceilings.js';
import {
  readTriggerIdentity,
  RecordBuffer,
  TriggerCodec,
  type TriggerIdentitySource,
  type TriggerResolver,
} from '../durable/trigger-codec.js';
import {
  carryOver,
  copyRecord,
  readPendingRecords,
  readSetAsideRecords,
  takeOver,
  type CarriedRecord,
} from './carry-over.js';
import { DeadLetterRing } from './dead-letter/ring.js';
import {
  Downstream,
  replayDerivesAgain,
  type DeadLetterTarget,
  type DeliveredHook,
  type DownstreamOptions,
} from './downstream.js';
import { FenceCatalog } from './fence-catalog.js';
import { TriggerRouter } from './trigger-router.js';
import type { TriggerNamer } from './sinks/format.js';
import type { BatchNames } from './sinks/trigger-batch.js';
import { checkNumber } from './validate.js';

/** A downstream with the sizes of its durable files (defaults: the dispatcher's). */
export type DispatcherDownstreamOptions = DownstreamOptions & {
  /** Cap of its backlog log, bytes, >= 1 MiB. */
  backlogMaxBytes?: number;
  /** Size budget of its dead letters on disk, bytes, >= 1 MiB. */
  deadLetterMaxBytes?: number;
  /** Age budget of its dead letters, ms, >= 1. */
  deadLetterMaxAgeMs?: number;
};

/** Options of Dispatcher. */
export interface DispatcherOptions {
  /** Downstreams, at most 31, unique names (and unique once made file names). */
  downstreams: readonly DispatcherDownstreamOptions[];
  /** Directory holding one directory per downstream (created if absent). */
  stateDir: string;
  /** Names devices (by slot) and fences (by store generation and index). */
  namer: TriggerNamer;
  /** Device slots (the size of the per-device queues). */
  maxDevices: number;
  /** Slot of a device by its id, for records of earlier runs (default: none, and such records are dropped). */
  deviceSlotOf?: (id: string | number) => number;
  /** Dead-letter ring capacity, records. Default 4096. */
  deadLetterCapacityRecords?: number;
  /** Flush the dead-letter ring once this many records wait. Default 256. */
  flushBatchRecords?: number;
  /** Flush the ring and the backlog logs, and commit the backlog cursors, this often, ms. Default 50. */
  flushIntervalMs?: number;
  /**
   * Records each backlog log loads and has not seen settled at most, and records it holds set aside (BacklogLog's
   * windowRecords): a power of two. Default 65536.
   */
  backlogWindowRecords?: number;
  /** Size at which each backlog log starts a new segment (BacklogLog's segmentMaxBytes), bytes. Default 64 MiB. */
  backlogSegmentMaxBytes?: number;
  /** Default size cap of each downstream's backlog log, bytes. Default 1 GiB. */
  backlogMaxBytes?: number;
  /** Default size budget of each downstream's dead letters on disk, bytes (>= 1 MiB). Default 256 MiB. */
  deadLetterMaxBytes?: number;
  /** Default age budget of each downstream's dead letters, ms. Default 7 days. */
  deadLetterMaxAgeMs?: number;
  /** Wall clock, epoch ms (dead-letter ages). Default `Date.now`. */
  wallClockMs?: () => number;
  /**
   * Keep a backlog log per downstream (default true). false: memory only, and a record that finds memory full is
   * refused with OFFER_BLOCKED (benchmarks of the control loop alone).
   */
  spill?: boolean;
  /** Monotonic clock (ns). Default the router's cross-thread clock. */
  clock?: ClockNs;
  /**
   * Take the dispatcher thread's own event-loop stalls out of the limiters' RTT samples (default true): a
   * `LoopStallMeter` runs on this thread (a 1 ms timer) while the dispatcher is open. See `Limiter`.
   */
  localStallCorrection?: boolean;
  /**
   * The router's lease gate (LEASE_GATE_F64 cells, shared): while it is shut no downstream sends anything (default:
   * none, always open).
   */
  leaseGate?: SharedArrayBuffer;
  /**
   * With a partitioned source read again exactly (every ping from its stream, the device state from its stored
   * checkpoints): per device slot of an earlier run, the seq above which its triggers are derived again by the
   * partition's reader (this router or another one): -Infinity for a partition read again from its delivered
   * checkpoint, the restored seq for one that fell back to its newest, NaN for a device of no partition. An earlier
   * run's trigger above it, in the pending file, the dead-letter file or the backlog log, comes again from the replay
   * in its device's order, so the file's copy is passed over (a copy delivered first would put a later seq ahead of
   * triggers the crash lost and the replay derives again). Default: none (every record of an earlier run is taken
   * over).
   */
  replayFloors?: Float64Array;
  /** Called after every delivered batch (and the delivered part of a failed one: see DeliveredHook). */
  onDelivered?: DeliveredHook;
  /** Records each delivered trigger's held time, found in `held[0]` (ns); must not allocate. */
  onHeld?: (held: Float64Array, replayed: boolean, lane: number, downstream: number) => void;
  /**
   * Records, for each trigger `offer` routes to a downstream, the time from its ping's admission to the current pass
   * (`passTime`), found in `taken[0]` (ns), with its lane; must not allocate.
   */
  onTaken?: (taken: Float64Array, lane: number) => void;
  /** Where metric cells live (e.g. a SharedArrayBuffer read at scrape time); default a private buffer. */
  metricsBuffer?: ArrayBufferLike;
  /** This run's id in durable records (default random). */
  runId?: number;
  /** Where start-up recovery lines go (default nowhere). */
  log?: (line: string) => void;
  /**
   * Where error-level lines go: durable writes failing, dead letters dropped for a budget or a disk error, damaged
   * records and cursors found at start (default `log`).
   */
  alarm?: (line: string) => void;
}

/** A downstream whose durable writes fail is tried again after this long, ms. */
const WRITE_RETRY_MS = 500;
/**
 * Longest a dead-letter ring entry the disk refuses keeps its record in the backlog log, ns: a crash within it
 * delivers the trigger again from the log; past it the log passes the record (see Dispatcher.logMustPass).
 */
const LOG_KEEP_MAX_NS = 10e9;
/**
 * Durable flushes a downstream waits, after the disk refused to remove one of its settled files (pending, set-aside,
 * carried ceilings), before those removals are tried again (about a second at the default flush interval): a failing
 * disk is not asked, and its refusals not counted, at every flush.
 */
const REMOVE_RETRY_FLUSHES = 20;
/** At most one alarm line per downstream this often, ms (each with the counts since the previous one). */
const ALARM_INTERVAL_MS = 10_000;

/** `offer` result: a downstream cannot take the record now; leave it where it is and offer it again later. */
export const OFFER_BLOCKED = -2;

/** Counts an alarm keeps per downstream: write errors, then dead letters dropped by reason. */
const ALARM_COUNTS = 1 + DEAD_LETTER_DROP_REASON_COUNT;

/** Default cap of a backlog log, bytes. */
export const DEFAULT_BACKLOG_MAX_BYTES = 1024 * 1024 * 1024;

/** Sums of the accounting counters over every downstream. */
export interface DispatchTotals {
  /** Trigger records consumed. */
  triggersOffered: number;
  /** Of those, routed to no downstream. */
  triggersUnrouted: number;
  /** Of those, malformed and refused. */
  badRecords: number;
  /** Trigger deliveries offered to downstreams (one per routed downstream). */
  offered: number;
  /** Taken over from earlier runs at start. */
  recovered: number;
  /** Delivered without a dead letter. */
  delivered: number;
  /** Dead letters re-delivered. */
  replayed: number;
  /** Settled without delivery (final dead letters). */
  final: number;
  /** Dead-letter events. */
  deadLettered: number;
  /** Not settled: in memory or in a backlog log. */
  inFlight: number;
}

/** Float64 cells needed for the metrics of `downstreams` downstreams. */
export function metricsCells(downstreams: number): number {
  return downstreams * DS_BLOCK_F64 + DISP_BLOCK_F64;
}

/** The dispatcher (see the module comment). */
export class Dispatcher implements DeadLetterTarget {
  /** Downstreams by index. */
  readonly downstreams: readonly Downstream[];
  /** Scratch of memoryOnlyTakenBy and undeliveredTakenBy (grown to the largest downstream memory on first use). */
  private handOffScratch = new Uint8Array(0);
  /** Metric cells: downstream d at [d * DS_BLOCK_F64 ..], dispatcher-wide at [downstreams * DS_BLOCK_F64 ..]. */
  readonly metrics: Float64Array;
  /** Dead-letter ring. */
  readonly deadLetterRing: DeadLetterRing;
  /**
   * Per device slot, 1 while the dead-letter ring held an entry of that device when `noteRingHeldDevices` last looked:
   * an entry is encoded (its device named by the slot's id) only when the ring is flushed, so the slot must not be
   * freed and given to another device before that.
   */
  private readonly ringHeld: Uint8Array;
  /** Per downstream: true while its carried-ceilings file is kept (copies of carried triggers not all passed over). */
  private readonly ceilingsKept: boolean[] = [];
  /** Per downstream: damaged stretches of the pending file skipped at open (each at least one trigger, lost). */
  private readonly pendingDamagedSpans: number[] = [];
  /** Per downstream: the set-aside files found at start, removed with the pending file (see removeSetAsideAtOpen). */
  private readonly setAsideAtOpen: number[][] = [];
  private readonly setAsideRemoveDue: boolean[] = [];
  /** Per downstream: durable flushes left before a refused removal is tried again (see REMOVE_RETRY_FLUSHES). */
  private readonly removeWaitFlushes: number[] = [];
  /** The slots marked in `ringHeld` (the first `ringHeldCount`), to clear them at the next look. */
  private readonly ringHeldSlots: Int32Array;
  private ringHeldCount = 0;
  /** Interned fence identities. */
  readonly catalog: FenceCatalog;
  /** Cell 0: the time of the current pass over the trigger rings, ns (set by the caller; stamped on offered records). */
  readonly passTime = new Float64Array(1);
  /** Cell 0: the time `onTaken` is told (a double handed to a call that is not inlined would be boxed). */
  private readonly takenCell = new Float64Array(1);
  /** See DispatcherOptions.onTaken. */
  private readonly onTaken: ((taken: Float64Array, lane: number) => void) | null;
  /** Directory of each downstream's durable files. */
  readonly directories: readonly string[];
  /** This thread's loop-stall meter (null: `localStallCorrection` off). */
  readonly stallMeter: LoopStallMeter | null;
  private readonly router: TriggerRouter;
  private readonly codec: TriggerCodec;
  private readonly clock: ClockNs;
  private readonly flushBatchRecords: number;
  private readonly flushIntervalNs: number;
  private readonly flushBuf = new RecordBuffer(Math.max(1 << 20, 4 * TREC_MAX_BYTES));
  private readonly dispBase: number;
  /** Int32 view of the metric cells, for the publish version (DISP_PUBLISH_VERSION_F64). */
  private readonly metricsI32: Int32Array;
  private lastDurableFlushNs: number;
  private closed = false;
  private readonly log: (line: string) => void;
  private readonly alarm: (line: string) => void;
  /** Per downstream: no dead-letter write before this time, ns (after a failed one). */
  private readonly retryWriteAtNs: Float64Array;
  /**
   * Per downstream: failed writes outside the files' own counts (pending and set-aside file removal, pending file at
   * close).
   */
  private readonly otherWriteErrors: Float64Array;
  /** Per downstream: when the last alarm line went out, ns, and the counts it reported (errors, then drops by reason). */
  private readonly lastAlarmNs: Float64Array;
  private readonly alarmedCounts: Float64Array;

  /** Trigger records consumed. */
  triggersOffered = 0;
  /** Records routed to no downstream. */
  triggersUnrouted = 0;
  /** Malformed records refused. */
  badRecords = 0;
  /** Dead-letter flushes. */
  flushes = 0;
  /** Records written by flushes. */
  flushedRecords = 0;
  /** Sum of flush durations, ns. */
  flushSumNs = 0;
  /** Longest flush, ns. */
  flushMaxNs = 0;
  /** Triggers left durably for the next start by `close`, per downstream. */
  readonly carriedOver: number[];
  /** Per downstream: every trigger taken over from the pending file is settled; remove it at the next flush. */
  private readonly pendingFileSettled: boolean[] = [];

  /** Validates options, opens every downstream's durable files and takes over what an earlier run left. */
  constructor(options: DispatcherOptions) {
    this.onTaken = options.onTaken ?? null;
    const n = options.downstreams.length;
    checkNumber('options.downstreams.length', n, 1, 31, true);
    const names = new Map<string, string>();
    for (const d of options.downstreams) {
      if (typeof d.name !== 'string' || d.name.length === 0)
        throw new RangeError('options.downstreams: every downstream needs a name');
      const file = safeFileName(d.name);
      const other = names.get(file);
      if (other !== undefined) {
        throw new RangeError(
          other === d.name
            ? `options.downstreams: duplicate name ${d.name}`
            : `options.downstreams: names "${other}" and "${d.name}" map to one directory (${file})`,
        );
      }
      names.set(file, d.name);
    }
    if (typeof options.stateDir !== 'string' || options.stateDir.length === 0)
      throw new RangeError('options.stateDir must be a directory path');
    checkNumber('options.maxDevices', options.maxDevices, 1, 1 << 26, true);
    this.clock = options.clock ?? defaultClock;
    this.stallMeter = options.localStallCorrection === false ? null : new LoopStallMeter(this.clock).start();
    const cap = checkNumber(
      'options.deadLetterCapacityRecords',
      options.deadLetterCapacityRecords ?? 4096,
      1,
      1 << 20,
      true,
    );
    this.flushBatchRecords = checkNumber('options.flushBatchRecords', options.flushBatchRecords ?? 256, 1, cap, true);
    this.flushIntervalNs = checkNumber('options.flushIntervalMs', options.flushIntervalMs ?? 50, 0, 3.6e6) * 1e6;
    const defaultBacklogMax = checkNumber(
      'options.backlogMaxBytes',
      options.backlogMaxBytes ?? DEFAULT_BACKLOG_MAX_BYTES,
      1 << 20,
      Number.MAX_SAFE_INTEGER,
      true,
    );
    this.deadLetterRing = new DeadLetterRing(cap);
    this.ringHeld = new Uint8Array(options.maxDevices);
    this.ringHeldSlots = new Int32Array(cap);
    const defaultDlqMaxBytes = checkNumber(
      'options.deadLetterMaxBytes',
      options.deadLetterMaxBytes ?? DEFAULT_DEAD_LETTER_MAX_BYTES,
      MIN_DEAD_LETTER_MAX_BYTES,
      Number.MAX_SAFE_INTEGER,
      true,
    );
    const defaultDlqMaxAgeMs = checkNumber(
      'options.deadLetterMaxAgeMs',
      options.deadLetterMaxAgeMs ?? DEFAULT_DEAD_LETTER_MAX_AGE_MS,
      1,
      Number.MAX_SAFE_INTEGER,
      true,
    );
    const wallClockMs = options.wallClockMs ?? Date.now;
    this.retryWriteAtNs = new Float64Array(n);
    this.otherWriteErrors = new Float64Array(n);
    this.lastAlarmNs = new Float64Array(n).fill(-Infinity);
    this.alarmedCounts = new Float64Array(n * ALARM_COUNTS);
    const cells = metricsCells(n);
    const mb = options.metricsBuffer ?? new ArrayBuffer(cells * 8);
    if (mb.byteLength < cells * 8)
      throw new RangeError(`options.metricsBuffer must hold ${cells * 8} bytes, got ${mb.byteLength}`);
    this.metrics = new Float64Array(mb, 0, cells);
    this.dispBase = n * DS_BLOCK_F64;
    this.metricsI32 = new Int32Array(mb, 0, cells * 2);
    this.lastDurableFlushNs = this.clock();
    this.passTime[0] = this.lastDurableFlushNs;

    const namer = options.namer;
    const catalog = new FenceCatalog(namer);
    this.catalog = catalog;
    const identity: TriggerIdentitySource = {
      isNumeric: (slot) => namer.isNumeric(slot),
      copyNumericId: (slot, dst, index) => namer.copyNumericId(slot, dst, index),
      copyIdBytes: (slot, dst, at) => namer.copyIdBytes(slot, dst, at),
      fenceIdBytes: (h) => catalog.idBytes(h),
      fenceTagsBytes: (h) => catalog.tagsBytes(h),
    };
    const wallOffsetMs = Date.now() - this.clock() / 1e6;
    this.codec = new TriggerCodec(options.runId ?? (Math.random() * 0x100000000) | 0, identity, wallOffsetMs);
    const deviceSlotOf = options.deviceSlotOf ?? (() => -1);
    const resolver: TriggerResolver = { deviceSlot: deviceSlotOf, fenceHandle: (id, tags) => catalog.intern(id, tags) };
    const batchNames: BatchNames = {
      deviceId: (slot) => namer.deviceId(slot),
      fenceId: (h) => catalog.id(h),
      fenceTags: (h) => catalog.tags(h),
      fenceJson: (h) => catalog.json(h),
    };
    const log = options.log ?? (() => undefined);
    this.log = log;
    this.alarm = options.alarm ?? log;
    fs.mkdirSync(path.resolve(options.stateDir), { recursive: true });
    const list: Downstream[] = [];
    const dirs: string[] = [];
    const now = this.clock();
    options.downstreams.forEach((o, i) => {
      const dir = path.join(options.stateDir, safeFileName(o.name));
      dirs.push(dir);
      // What an earlier run left: the pending file, the PENDING dead letters, and the backlog log past its cursor.
      const pending = readPendingRecords(dir, o.name);
      const carried: CarriedRecord[] = pending.records;
      // Held backlog records a crash left in set-aside files: carried over like the pending file's (the log's copies
      // of them are passed over by seq below).
      const setAside = readSetAsideRecords(dir, o.name);
      for (const r of setAside.records) carried.push(r);
      this.setAsideAtOpen.push(setAside.files);
      this.setAsideRemoveDue.push(false);
      this.removeWaitFlushes.push(0);
      this.pendingDamagedSpans.push(pending.damagedSpans + setAside.damagedSpans);
      const dlq = new DeadLetterFile(
        dir,
        o.name,
        (buf, at, pos, length) => carried.push(copyRecord(buf, at, length, pos, readTriggerIdentity(buf, at).seq)),
        {
          maxBytes: checkNumber(
            `${o.name}.deadLetterMaxBytes`,
            o.deadLetterMaxBytes ?? defaultDlqMaxBytes,
            MIN_DEAD_LETTER_MAX_BYTES,
            Number.MAX_SAFE_INTEGER,
            true,
          ),
          maxAgeMs: checkNumber(
            `${o.name}.deadLetterMaxAgeMs`,
            o.deadLetterMaxAgeMs ?? defaultDlqMaxAgeMs,
            1,
            Number.MAX_SAFE_INTEGER,
            true,
          ),
          wallClockMs,
        },
      );
      const floors = options.replayFloors ?? null;
      const derivedAgain = (buf: RecordBuffer, at: number): boolean => {
        const identity = readTriggerIdentity(buf, at);
        return replayDerivesAgain(floors, deviceSlotOf(identity.deviceId), identity.seq);
      };
      // Earlier runs' records the replay derives again: left out (a PENDING dead letter is settled as RESOLVED; a
      // trigger in both files counts once).
      const supersededKeys = new Set<string>();
      let pendingFilePassedOver = 0;
      if (floors !== null) {
        const kept: CarriedRecord[] = [];
        for (const r of carried) {
          const identity = readTriggerIdentity(r.buf, 0);
          if (!replayDerivesAgain(floors, deviceSlotOf(identity.deviceId), identity.seq)) kept.push(r);
          else {
            supersededKeys.add(`${String(identity.deviceId)}:${identity.seq}`);
            if (r.dlqPosition >= 0) dlq.setStatus(r.dlqPosition, DeadLetterStatus.RESOLVED);
            else pendingFilePassedOver++;
          }
        }
        carried.length = 0;
        carried.push(...kept);
      }
      // Per device, the highest seq carried over: the backlog log's records of an earlier run at or below it are copies
      // of carried triggers (a stop whose pending file was written but whose cursor commit was lost), passed over.
      // An earlier start's ceilings whose copies were not all passed over yet (see carried-ceilings.ts) count too.
      const carriedCeil = new Map<number, number>();
      const idOfSlot = new Map<number, string | number>();
      const raise = (deviceId: string | number, seq: number): void => {
        const slot = deviceSlotOf(deviceId);
        if (slot < 0 || seq <= (carriedCeil.get(slot) ?? -Infinity)) return;
        carriedCeil.set(slot, seq);
        idOfSlot.set(slot, deviceId);
      };
      for (const r of carried) {
        const identity = readTriggerIdentity(r.buf, 0);
        raise(identity.deviceId, identity.seq);
      }
      try {
        for (const [deviceId, seq] of readCarriedCeilings(dir)) raise(deviceId, seq);
      } catch (err) {
        this.alarm(`downstream ${o.name}: carried-ceilings file unreadable (${errorText(err)}): not used`);
      }
      const copiesBySlot = new Map<number, number>();
      const fileOnly = new Map<number, number>();
      const supersededBySlot = new Map<number, number>();
      let unresolvedBacklog = 0;
      let supersededBacklog = 0;
      let copiesBacklog = 0;
      const backlog =
        options.spill === false
          ? null
          : new BacklogLog({
              dir,
              downstreamName: o.name,
              codec: this.codec,
              windowRecords: options.backlogWindowRecords ?? 65536,
              segmentMaxBytes: checkNumber(
                'options.backlogSegmentMaxBytes',
                options.backlogSegmentMaxBytes ?? 64 * 1024 * 1024,
                1024,
                Number.MAX_SAFE_INTEGER,
                true,
              ),
              maxBytes: checkNumber(
                `${o.name}.backlogMaxBytes`,
                o.backlogMaxBytes ?? defaultBacklogMax,
                1 << 20,
                Number.MAX_SAFE_INTEGER,
                true,
              ),
              onPending: (buf, at) => {
                const identity = readTriggerIdentity(buf, at);
                const slot = deviceSlotOf(identity.deviceId);
                if (slot < 0) unresolvedBacklog++;
                else if (derivedAgain(buf, at)) {
                  supersededBacklog++;
                  supersededBySlot.set(slot, (supersededBySlot.get(slot) ?? 0) + 1);
                  return true;
                } else if (identity.seq <= (carriedCeil.get(slot) ?? -Infinity)) {
                  copiesBacklog++;
                  copiesBySlot.set(slot, (copiesBySlot.get(slot) ?? 0) + 1);
                  return true;
                } else fileOnly.set(slot, (fileOnly.get(slot) ?? 0) + 1);
                return false;
              },
            });
      const ds = new Downstream(
        i,
        o,
        {
          clock: this.clock,
          passTime: this.passTime,
          maxDevices: options.maxDevices,
          names: batchNames,
          deadLetters: this,
          backlog,
          deadLetterFile: dlq,
          resolver,
          onDelivered: options.onDelivered,
          onHeld: options.onHeld ?? null,
          stall: this.stallMeter === null ? null : this.stallMeter.cells,
          leaseGate: options.leaseGate === undefined ? null : new Float64Array(options.leaseGate),
          replayFloors: floors,
        },
        carried.length,
      );
      for (const [slot, count] of fileOnly) ds.queues.fileOnly[slot] = count;
      ds.superseded = supersededKeys.size;
      for (const [slot, count] of supersededBySlot) ds.noteSupersededInBacklog(slot, count);
      for (const [slot, count] of copiesBySlot) ds.noteCarriedCopiesInBacklog(slot, count, carriedCeil.get(slot)!);
      // Kept until every copy is passed over (flushBacklogs), for a start before that; none left: no file.
      try {
        if (copiesBacklog > 0)
          writeCarriedCeilings(
            dir,
            [...copiesBySlot.keys()].map((slot) => [idOfSlot.get(slot)!, carriedCeil.get(slot)!]),
          );
        else removeCarriedCeilings(dir);
      } catch {
        this.otherWriteErrors[i]!++;
      }
      this.ceilingsKept.push(copiesBacklog > 0);
      const passedOver = supersededBacklog + copiesBacklog;
      const backlogRecovered = backlog === null ? 0 : backlog.recovered - unresolvedBacklog - passedOver;
      this.pendingFileSettled.push(false);
      // Records naming a device this run does not know stay counted here and settle as lost when loaded; those the
      // replay derives again, and copies of carried-over triggers, are passed over when loaded, never counted.
      ds.recovered += backlog === null ? 0 : backlog.recovered - passedOver;
      const taken = takeOver(ds, carried, this.codec, resolver, now);
      if (taken.taken > 0) ds.onFrontSettled = () => (this.pendingFileSettled[i] = true);
      // Records of the pending file were passed over: it is written again with what was taken over (or removed), since
      // read again at a later start its copies would be measured against a floor that has risen by then. Set-aside
      // files a crash left: what was taken of them goes to the pending file too, and they are removed (read again at a
      // later start, they would give back triggers delivered since).
      if (pendingFilePassedOver > 0 || setAside.files.length > 0) {
        if (this.rewritePendingFile(ds, dir, taken.taken)) this.removeSetAsideAtOpen(i, dir);
      }
      const lost = taken.unresolved + unresolvedBacklog;
      if (taken.taken + backlogRecovered > 0 || lost > 0 || ds.superseded > 0 || copiesBacklog > 0) {
        log(
          `downstream ${o.name}: took over ${taken.taken} triggers from the previous run's pending, set-aside and dead-letter files ` +
            `and ${backlogRecovered} from its backlog log` +
            (lost > 0 ? `; ${lost} named a device this run does not know and were dropped` : '') +
            (copiesBacklog > 0
              ? `; ${copiesBacklog} backlog records are copies of triggers the pending, set-aside or dead-letter files hold (the previous run did not commit the log's cursor past them), or a parked device's earlier triggers it held in memory only, and are passed over`
              : '') +
            (ds.superseded > 0
              ? `; ${ds.superseded} more are derived again, in their devices' order, by the partitions' replay here or by their readers now (their copies in the files are passed over)`
              : ''),
        );
      }
      this.reportOpenDamage(o.name, dlq, backlog, pending.damagedSpans);
      if (setAside.damagedSpans > 0)
        this.alarm(
          `downstream ${o.name}: set-aside files damaged: ${setAside.damagedSpans} damaged stretches skipped, their ` +
            `triggers lost (every valid record kept)`,
        );
      dlq.sync();
      list.push(ds);
    });
    this.downstreams = list;
    this.directories = dirs;
    this.carriedOver = list.map(() => 0);
    this.router = new TriggerRouter(
      options.downstreams.map((d) => d.subscription),
      catalog,
    );
    this.publishMetrics();
  }

  /**
   * Offers one trigger record (TRG_* layout at the given bases of the two views, e.g. a trigger ring's slot).
   * Returns the number of downstreams it was routed to, -1 when the record is malformed (counted in `badRecords`),
   * or OFFER_BLOCKED when a downstream cannot take it now (nothing happened: offer it again later). The time
   * stamped on accepted records is `passTime[0]`, which the caller sets once per pass over its rings (a clock read
   * allocates, and so does a double handed to a call that is not inlined). Allocation-free (except the first time a
   * fence is seen).
   */
  offer(f64: Float64Array, i32: Int32Array, baseF64: number, baseI32: number): number {
    const type = i32[baseI32 + TRG_TYPE_I32]!;
    const fenceCell = i32[baseI32 + TRG_FENCE_INDEX_I32]!;
    const lane = (fenceCell >>> TRG_LANE_SHIFT) & 3;
    const lat = f64[baseF64 + TRG_LAT_F64]!;
    const lon = f64[baseF64 + TRG_LON_F64]!;
    const device = i32[baseI32 + TRG_DEVICE_SLOT_I32]!;
    const handle =
      type < 0 ||
      type >= TRIGGER_TYPE_COUNT ||
      lane >= LANE_COUNT ||
      fenceCell < 0 ||
      !(device >= 0 && device < this.downstreams[0]!.queues.maxDevices)
        ? -1
        : this.catalog.handleOf(i32[baseI32 + TRG_GENERATION_I32]!, fenceCell & TRG_FENCE_INDEX_MASK);
    if (handle < 0 || !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180)) {
      this.triggersOffered++;
      this.badRecords++;
      return -1;
    }
    const mask = this.router.route(type, lane, handle);
    if (mask === 0) {
      this.triggersOffered++;
      this.triggersUnrouted++;
      return 0;
    }
    for (let d = 0; d < this.downstreams.length; d++) {
      const ds = this.downstreams[d]!;
      if ((mask & (1 << d)) !== 0 && ds.wouldBlock(device, lane)) {
        ds.backpressureWaits++;
        return OFFER_BLOCKED;
      }
    }
    this.triggersOffered++;
    const onTaken = this.onTaken;
    if (onTaken !== null) {
      this.takenCell[0] = this.passTime[0]! - f64[baseF64 + TRG_ADMIT_TIME_NS_F64]!;
      onTaken(this.takenCell, lane);
    }
    let routed = 0;
    for (let d = 0; d < this.downstreams.length; d++) {
      // One bit per subscribed downstream.
      if ((mask & (1 << d)) === 0) continue;
      this.downstreams[d]!.accept(f64, i32, baseF64, baseI32, handle);
      routed++;
    }
    return routed;
  }

  /**
   * Notes which devices the dead-letter ring holds entries of now (see `ringHeld`): call it before a run of
   * `deviceSettled` calls in one pass. O(ring depth). Allocation-free.
   */
  noteRingHeldDevices(): void {
    for (let k = 0; k < this.ringHeldCount; k++) this.ringHeld[this.ringHeldSlots[k]!] = 0;
    this.ringHeldCount = 0;
    const ring = this.deadLetterRing;
    for (let k = 0; k < ring.depth; k++) {
      const bi = k * DREC_STRIDE_I32;
      // An entry whose downstream was cleared is done (counted only, or passed on): it names no device any more.
      if (ring.i32[bi + DREC_DOWNSTREAM_I32]! < 0) continue;
      const device = ring.i32[bi + TRG_DEVICE_SLOT_I32]!;
      if (device < 0 || device >= this.ringHeld.length || this.ringHeld[device] === 1) continue;
      this.ringHeld[device] = 1;
      this.ringHeldSlots[this.ringHeldCount++] = device;
    }
  }

  /**
   * True when no downstream holds anything of device `device`: nothing queued or parked in memory, nothing in flight,
   * nothing in its backlog log, and (as of the last `noteRingHeldDevices`) no dead letter of it waits in the ring to
   * be written under its id. An expired device's slot is freed only then. Allocation-free.
   */
  deviceSettled(device: number): boolean {
    if (this.ringHeld[device] === 1) return false;
    for (let d = 0; d < this.downstreams.length; d++) {
      const q = this.downstreams[d]!.queues;
      if (q.queuedOf(device) !== 0 || q.fileOnly[device] !== 0 || q.isBusy(device)) return false;
      const passed = this.downstreams[d]!.supersededUnloaded;
      if (passed !== null && passed[device] !== 0) return false;
    }
    return true;
  }

  /** Runs every downstream's control loop, flushes the dead-letter ring and the backlog logs when due, publishes metrics. */
  pump(nowNs: number = this.clock()): void {
    this.passTime[0] = nowNs;
    for (let d = 0; d < this.downstreams.length; d++) this.downstreams[d]!.pump(nowNs);
    const ring = this.deadLetterRing;
    if (ring.depth > 0 && (ring.depth >= this.flushBatchRecords || nowNs - ring.oldestPutNs >= this.flushIntervalNs))
      this.flush();
    if (nowNs - this.lastDurableFlushNs >= this.flushIntervalNs) {
      this.lastDurableFlushNs = nowNs;
      this.flushBacklogs();
    }
    for (let d = 0; d < this.downstreams.length; d++) {
      // Parked triggers whose dead-letter copies a flush just dropped (budgets) are given up here, at the pass level.
      this.downstreams[d]!.processDrops();
      this.checkAlarm(d, nowNs);
    }
    this.publishMetrics();
  }

  /**
   * Writes what the backlog logs buffer and commits their cursors, after flushing the dead-letter ring: a record whose
   * ownership moved to the dead-letter file (parked, or settled for good) is written there before the cursor passes
   * it. A ring entry the disk has not taken yet keeps its record in the backlog log (the cursor stops before it) and
   * its downstream's pending file, so a crash delivers that trigger again instead of losing it (see DrecFlag.COVERED),
   * for at most LOG_KEEP_MAX_NS, and not once the log must pass them (logMustPass); the parked ones among those passed
   * are then counted as held in memory only. So dead letters the disk refuses never stop the dispatcher taking or
   * loading triggers for long. Pending files whose triggers are all settled are removed after that flush too.
   */
  flushBacklogs(): void {
    this.flush();
    for (let d = 0; d < this.downstreams.length; d++) {
      const ds = this.downstreams[d]!;
      if (ds.backlog !== null && this.ringHolds(d))
        this.releaseLogPlaces(d, this.logMustPass(ds.backlog) ? Infinity : this.clock() - LOG_KEEP_MAX_NS);
      // A failed flush leaves its records buffered: the cursor waits for them (both count their own errors).
      if (ds.backlog !== null && ds.backlog.flush()) ds.backlog.commit();
      ds.deadLetterFile?.maintain();
    }
    for (let d = 0; d < this.downstreams.length; d++) {
      if (this.removeWaitFlushes[d]! > 0) this.removeWaitFlushes[d]!--;
      else this.removeSettledFiles(d);
    }
  }

  /**
   * Removes downstream `d`'s files whose triggers are all settled: its carried-ceilings file once every copy is passed
   * over, the set-aside files found at start, its pending file. A removal the disk refuses is counted and tried again
   * after REMOVE_RETRY_FLUSHES flushes (the next start would only find those triggers settled already: seq).
   */
  private removeSettledFiles(d: number): void {
    const dir = this.directories[d]!;
    if (this.ceilingsKept[d] && this.downstreams[d]!.carriedCopiesLeft === 0) {
      try {
        removeCarriedCeilings(dir);
        this.ceilingsKept[d] = false;
      } catch {
        this.otherWriteErrors[d]!++;
        this.removeWaitFlushes[d] = REMOVE_RETRY_FLUSHES;
      }
    }
    if (this.setAsideRemoveDue[d]) {
      this.setAsideRemoveDue[d] = false;
      this.removeSetAsideAtOpen(d, dir);
    }
    if (!this.pendingFileSettled[d] || this.ringHolds(d)) return;
    try {
      removePendingFile(dir);
      this.pendingFileSettled[d] = false;
      this.removeSetAsideAtOpen(d, dir);
    } catch {
      this.otherWriteErrors[d]!++;
      this.removeWaitFlushes[d] = REMOVE_RETRY_FLUSHES;
    }
  }

  /** Ring entry `k` is written or given up: the backlog log may pass the record it came from, if any. */
  private releaseLogPlace(k: number): void {
    const ring = this.deadLetterRing;
    const f = k * DREC_STRIDE_F64;
    const ord = ring.f64[f + DREC_LOG_ORDINAL_F64]!;
    if (ord < 0) return;
    ring.f64[f + DREC_LOG_ORDINAL_F64] = -1;
    this.downstreams[ring.i32[k * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32]!]!.backlog?.markDone(ord);
  }

  /**
   * True when a backlog log must pass every record the dead-letter ring keeps in it (see flushBacklogs): it can take
   * no more, or half its load window waits on records not done.
   */
  private logMustPass(log: BacklogLog): boolean {
    return !log.canAppend() || log.loadWindowHalfFull;
  }

  /**
   * Downstream `d`'s backlog log passes the records of its ring entries put before `beforeNs` (Infinity: all of them;
   * see flushBacklogs): a disk that stays full frees the log's passed segments.
   */
  private releaseLogPlaces(d: number, beforeNs: number): void {
    const ring = this.deadLetterRing;
    for (let k = 0; k < ring.depth; k++) {
      const bi = k * DREC_STRIDE_I32;
      const f = k * DREC_STRIDE_F64;
      if (
        ring.i32[bi + DREC_DOWNSTREAM_I32] !== d ||
        ring.f64[f + DREC_LOG_ORDINAL_F64]! < 0 ||
        ring.f64[f + DREC_TIME_NS_F64]! >= beforeNs
      )
        continue;
      this.releaseLogPlace(k);
      const slot = ring.i32[bi + DREC_SLOT_REF_I32]!;
      if (slot >= 0 && ring.i32[bi + DREC_DL_STATUS_I32] === DeadLetterStatus.PENDING)
        this.downstreams[d]!.onParkedLogReleased(slot);
    }
  }

  /** True while the dead-letter ring holds a record of downstream `d` (one its disk has not taken yet). */
  private ringHolds(d: number): boolean {
    const ring = this.deadLetterRing;
    for (let k = 0; k < ring.depth; k++) if (ring.i32[k * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] === d) return true;
    return false;
  }

  /**
   * DeadLetterTarget: puts a record in the ring, flushing first when the ring is full. When the flush could not make
   * room (every entry left waits for a downstream whose disk refuses writes), the oldest eighth of the ring is dropped,
   * counted as `disk_error`. Allocation-free.
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
  ): number {
    const ring = this.deadLetterRing;
    const index = ring.put(f64, i32, baseF64, baseI32, downstreamIndex, status, slotRef, nowNs);
    if (index >= 0) return index;
    this.flush();
    const again = ring.put(f64, i32, baseF64, baseI32, downstreamIndex, status, slotRef, nowNs);
    if (again >= 0) return again;
    this.dropOldestRingEntries(Math.max(1, ring.capacityRecords >> 3));
    return ring.put(f64, i32, baseF64, baseI32, downstreamIndex, status, slotRef, nowNs);
  }

  /**
   * Drops the `count` oldest ring entries unwritten (counted as `disk_error` on their downstreams; a parked trigger
   * among them stays parked, in memory only) and moves the rest to the front.
   */
  private dropOldestRingEntries(count: number): void {
    const ring = this.deadLetterRing;
    const depth = ring.depth;
    const n = Math.min(count, depth);
    for (let k = 0; k < n; k++) this.abandonRingEntry(k);
    for (let k = n; k < depth; k++) {
      ring.move(k, k - n);
      const bi = (k - n) * DREC_STRIDE_I32;
      const slot = ring.i32[bi + DREC_SLOT_REF_I32]!;
      if (slot >= 0 && ring.i32[bi + DREC_DL_STATUS_I32] === DeadLetterStatus.PENDING)
        this.downstreams[ring.i32[bi + DREC_DOWNSTREAM_I32]!]!.onParkedRingMoved(slot, k, k - n);
    }
    ring.keep(depth - n);
  }

  /** Gives up ring entry `k` unwritten: counted as dropped (`disk_error`); its parked trigger, if any, stays in memory. */
  private abandonRingEntry(k: number): void {
    const ring = this.deadLetterRing;
    const bi = k * DREC_STRIDE_I32;
    const ds = this.downstreams[ring.i32[bi + DREC_DOWNSTREAM_I32]!]!;
    const file = ds.deadLetterFile;
    if (file !== null) file.droppedRecords[DeadLetterDropReason.DISK_ERROR]!++;
    const slot = ring.i32[bi + DREC_SLOT_REF_I32]!;
    this.releaseLogPlace(k);
    if (slot >= 0 && ring.i32[bi + DREC_DL_STATUS_I32] === DeadLetterStatus.PENDING) ds.onParkedRingDropped(slot, k);
  }

  /** DeadLetterTarget: changes a ring entry's status before its flush. */
  setRingStatus(index: number, status: number): void {
    this.deadLetterRing.setStatus(index, status);
  }

  /**
   * Writes the records of the dead-letter ring to their downstreams' dead-letter files (per file: room made within its
   * budgets, then one write and one fdatasync per buffer-full), tells each downstream where its parked triggers'
   * copies went, and keeps at the front of the ring, in order, the records of downstreams whose files refused the
   * write (tried again after WRITE_RETRY_MS). Never throws for a file error.
   */
  flush(): void {
    const ring = this.deadLetterRing;
    const total = ring.depth;
    if (total === 0) return;
    const t0 = this.clock();
    const buf = this.flushBuf;
    let written = 0;
    for (let d = 0; d < this.downstreams.length; d++) {
      const ds = this.downstreams[d]!;
      const file = ds.deadLetterFile;
      if (file !== null && t0 < this.retryWriteAtNs[d]!) continue;
      let from = 0;
      for (;;) {
        while (from < total && ring.i32[from * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] !== d) from++;
        if (from === total) break;
        if (file === null) {
          // No file: dead letters are only counted.
          for (let k = from; k < total; k++)
            if (ring.i32[k * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] === d) {
              this.releaseLogPlace(k);
              ring.i32[k * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] = -1;
            }
          break;
        }
        if (!file.ensureRoom()) {
          this.retryWriteAtNs[d] = t0 + WRITE_RETRY_MS * 1e6;
          break;
        }
        // Encode what fits in the room the file has (its segment and its budget), write it, then tell where each
        // parked one went.
        const limit = Math.min(buf.byteLength, file.room);
        let length = 0;
        let count = 0;
        let pending = 0;
        let final = 0;
        let r = from;
        for (; r < total; r++) {
          const bi = r * DREC_STRIDE_I32;
          if (ring.i32[bi + DREC_DOWNSTREAM_I32] !== d) continue;
          const status = ring.i32[bi + DREC_DL_STATUS_I32]!;
          const n = this.codec.encode(
            ring.f64,
            ring.i32,
            r * DREC_STRIDE_F64,
            bi,
            buf,
            length,
            limit,
            encodeDeadLetterStatus(status),
          );
          if (n === 0) break;
          // The record's offset in this buffer, kept until the file position is known.
          ring.f64[r * DREC_STRIDE_F64 + DREC_FLUSH_OFFSET_F64] = length;
          length += n;
          count++;
          if (status === DeadLetterStatus.PENDING) pending++;
          else if (status === DeadLetterStatus.FINAL) final++;
        }
        const base = count === 0 ? -1 : file.append(buf, length, count, pending, final);
        if (base < 0) {
          this.retryWriteAtNs[d] = t0 + WRITE_RETRY_MS * 1e6;
          break;
        }
        for (let k = from; k < r; k++) {
          const bi = k * DREC_STRIDE_I32;
          if (ring.i32[bi + DREC_DOWNSTREAM_I32] !== d) continue;
          const slot = ring.i32[bi + DREC_SLOT_REF_I32]!;
          if (slot >= 0 && ring.i32[bi + DREC_DL_STATUS_I32] === DeadLetterStatus.PENDING) {
            // Positions count 8-byte units from the first record's.
            ds.onParkedFlushed(slot, k, base + ring.f64[k * DREC_STRIDE_F64 + DREC_FLUSH_OFFSET_F64]! / 8);
          }
          this.releaseLogPlace(k);
          ring.i32[bi + DREC_DOWNSTREAM_I32] = -1;
        }
        written += count;
        from = r;
      }
    }
    // What was written leaves the ring; what was not moves to the front, in order.
    let kept = 0;
    for (let k = 0; k < total; k++) {
      const bi = k * DREC_STRIDE_I32;
      const d = ring.i32[bi + DREC_DOWNSTREAM_I32]!;
      if (d < 0) continue;
      if (k !== kept) {
        ring.move(k, kept);
        const slot = ring.i32[bi + DREC_SLOT_REF_I32]!;
        if (slot >= 0 && ring.i32[bi + DREC_DL_STATUS_I32] === DeadLetterStatus.PENDING)
          this.downstreams[d]!.onParkedRingMoved(slot, k, kept);
      }
      kept++;
    }
    ring.keep(kept);
    const took = this.clock() - t0;
    this.flushes++;
    this.flushedRecords += written;
    this.flushSumNs += took;
    if (took > this.flushMaxNs) this.flushMaxNs = took;
  }

  /** True while downstream `d`'s last durable write failed (dead-letter file or backlog log). */
  durableFailing(d: number): boolean {
    const ds = this.downstreams[d]!;
    return (ds.deadLetterFile !== null && ds.deadLetterFile.failing) || (ds.backlog !== null && ds.backlog.failing);
  }

  /** Failed durable writes of downstream `d` so far (dead-letter file, backlog log, pending file). */
  durableWriteErrors(d: number): number {
    const ds = this.downstreams[d]!;
    return (ds.deadLetterFile?.writeErrors ?? 0) + (ds.backlog?.writeErrors ?? 0) + this.otherWriteErrors[d]!;
  }

  /** Dead-letter records of downstream `d` dropped for `reason` (a DeadLetterDropReason) so far. */
  deadLettersDropped(d: number, reason: number): number {
    return this.downstreams[d]!.deadLetterFile?.droppedRecords[reason] ?? 0;
  }

  /**
   * Sends an alarm line for downstream `d` when its write errors or dropped dead letters grew since the last one, at
   * most every ALARM_INTERVAL_MS. Allocation-free unless it sends.
   */
  private checkAlarm(d: number, nowNs: number): void {
    const c = this.alarmedCounts;
    const b = d * ALARM_COUNTS;
    let grew = this.durableWriteErrors(d) > c[b]!;
    for (let r = 0; r < DEAD_LETTER_DROP_REASON_COUNT; r++)
      if (this.deadLettersDropped(d, r) > c[b + 1 + r]!) grew = true;
    if (!grew || nowNs - this.lastAlarmNs[d]! < ALARM_INTERVAL_MS * 1e6) return;
    this.lastAlarmNs[d] = nowNs;
    this.alarm(this.alarmLine(d));
  }

  /** The alarm line of downstream `d`: what grew since the last one, with the totals (allocates). */
  private alarmLine(d: number): string {
    const ds = this.downstreams[d]!;
    const c = this.alarmedCounts;
    const b = d * ALARM_COUNTS;
    const parts: string[] = [];
    const errors = this.durableWriteErrors(d);
    if (errors > c[b]!) {
      const last = ds.deadLetterFile?.lastError ?? ds.backlog?.lastError ?? 'error';
      let waiting = 0;
      const ring = this.deadLetterRing;
      for (let k = 0; k < ring.depth; k++) if (ring.i32[k * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] === d) waiting++;
      parts.push(
        `durable writes failing (${last}): ${errors - c[b]!} failed writes (${errors} in all), ${waiting} dead letters waiting in the ring ` +
          `(${ring.depth}/${ring.capacityRecords}), retried every ${WRITE_RETRY_MS} ms; other downstreams are not affected`,
      );
      c[b] = errors;
    }
    const drops: string[] = [];
    for (let r = 0; r < DEAD_LETTER_DROP_REASON_COUNT; r++) {
      const n = this.deadLettersDropped(d, r);
      if (n > c[b + 1 + r]!) drops.push(`${DEAD_LETTER_DROP_REASON_NAMES[r]}=${n - c[b + 1 + r]!} (${n} in all)`);
      c[b + 1 + r] = n;
    }
    if (drops.length > 0) {
      const file = ds.deadLetterFile;
      parts.push(
        `dead letters dropped oldest first: ${drops.join(' ')}` +
          (file === null
            ? ''
            : `; dead-letter storage ${file.byteLength} of ${file.maxBytes} bytes, max age ${file.maxAgeMs} ms`) +
          (file !== null && file.droppedPending > 0
            ? `; ${file.droppedPending} of them waited for replay: those triggers are given up`
            : ''),
      );
    }
    return `downstream ${ds.name}: ${parts.join('; ')}`;
  }

  /** Start-up lines about damage found in downstream `name`'s durable files (error level: something was lost or re-sent). */
  private reportOpenDamage(
    name: string,
    dlq: DeadLetterFile,
    backlog: BacklogLog | null,
    pendingDamagedSpans: number,
  ): void {
    if (pendingDamagedSpans > 0)
      this.alarm(
        `downstream ${name}: pending file damaged: ${pendingDamagedSpans} damaged stretches skipped, their triggers lost ` +
          `(every valid record kept)`,
      );
    if (dlq.damagedAtOpen > 0 || dlq.damagedStatuses > 0) {
      this.alarm(
        `downstream ${name}: dead-letter files damaged: ${dlq.damagedAtOpen} damaged records skipped (every record after them kept)` +
          (dlq.damagedStatuses > 0
            ? `, ${dlq.damagedStatuses} damaged status words read as waiting for replay (re-delivered; receivers de-duplicate by seq)`
            : ''),
      );
    }
    if (backlog === null) return;
    if (backlog.damagedAtOpen > 0)
      this.alarm(
        `downstream ${name}: backlog log damaged: ${backlog.damagedAtOpen} damaged records skipped (every record after them kept)`,
      );
    if (backlog.cursorFallback) {
      this.alarm(
        `downstream ${name}: backlog cursor damaged (no valid copy): the backlog log is read again from its oldest segment; ` +
          `triggers delivered before are re-delivered with their seq (receivers de-duplicate by seq)`,
      );
    } else if (backlog.cursorDamagedCopies > 0) {
      this.log(
        `downstream ${name}: one backlog cursor copy was damaged; the other (one commit older) serves, repaired`,
      );
    }
  }

  /** Sums of the accounting counters (allocates the result object). */
  totals(): DispatchTotals {
    const t: DispatchTotals = {
      triggersOffered: this.triggersOffered,
      triggersUnrouted: this.triggersUnrouted,
      badRecords: this.badRecords,
      offered: 0,
      recovered: 0,
      delivered: 0,
      replayed: 0,
      final: 0,
      deadLettered: 0,
      inFlight: 0,
    };
    for (const ds of this.downstreams) {
      t.offered += ds.offered;
      t.recovered += ds.recovered;
      t.delivered += ds.delivered;
      t.replayed += ds.replayed;
      t.final += ds.final;
      t.deadLettered += ds.deadLettered;
      t.inFlight += ds.inFlightTriggers;
    }
    return t;
  }

  /** Index of the downstream named `name` (-1 when none). */
  indexOf(name: string): number {
    return this.downstreams.findIndex((d) => d.name === name);
  }

  /** True when no downstream holds anything (memory, backlog, sink calls); the dead-letter ring may wait for its flush. */
  get isIdle(): boolean {
    // A downstream gone for this run keeps what it holds for the next start: only its calls in flight count.
    for (const ds of this.downstreams) if (ds.gone ? ds.limiter.inflight > 0 : !ds.isIdle) return false;
    return true;
  }

  /**
   * The router is draining: the backlog logs take what the trigger rings still hold whatever their cap (the rings
   * hold a bounded amount), so no record is left behind when the process ends.
   */
  beginDrain(): void {
    for (const ds of this.downstreams) if (ds.backlog !== null) ds.backlog.ignoreCap = true;
  }

  /**
   * Drains: pumps until every downstream has delivered everything it holds (memory, backlog log, replay lane) or
   * `deadlineMs` passes; then sends nothing new and waits for the calls in flight. Flushes the dead-letter ring and
   * the backlog logs.
   */
  async drain(deadlineMs = 30_000, pollMs = 1): Promise<void> {
    const end = this.clock() + deadlineMs * 1e6;
    for (;;) {
      const now = this.clock();
      this.pump(now);
      if (this.isIdle) break;
      // A second drain after the first's deadline (close after drain) does not wait out another deadline.
      let allStopped = true;
      for (const ds of this.downstreams) if (!ds.stopped) allStopped = false;
      if (now >= end || allStopped) {
        for (const ds of this.downstreams) ds.stopped = true;
        let sending = false;
        for (const ds of this.downstreams) if (ds.limiter.inflight > 0) sending = true;
        if (!sending) break;
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
    this.flush();
    this.flushBacklogs();
    for (const ds of this.downstreams) ds.deadLetterFile?.sync();
    this.publishMetrics();
  }

  /**
   * Drains, then leaves what is still held durably for the next start (pending files; the backlog logs and the
   * dead-letter files keep theirs), and closes the files and every sink.
   */
  async close(deadlineMs = 30_000): Promise<void> {
    if (this.closed) return;
    await this.drain(deadlineMs);
    this.closed = true;
    this.stallMeter?.stop();
    // One last try without waiting out a retry pause; what the disk still will not take is counted as dropped, and
    // its parked triggers go to the pending file.
    this.retryWriteAtNs.fill(0);
    this.flush();
    for (let k = 0; k < this.deadLetterRing.depth; k++) this.abandonRingEntry(k);
    this.deadLetterRing.clear();
    this.downstreams.forEach((ds, d) => {
      ds.processDrops();
      // What the log buffers goes to disk first where it can, so what the pending file fails to keep counts as lost
      // only when no flush put it on disk (see carryOver); the log's cursor is committed after the pending file.
      ds.backlog?.flush();
      // The pending file first (durably), then the log's cursor may pass what it now holds.
      const kept = carryOver(ds, this.directories[d]!, this.codec);
      let lost = 0;
      if (kept.error === null) {
        ds.backlog?.releaseLoaded();
        // The pending file holds what the start took over from an earlier run's set-aside files too.
        this.removeSetAsideAtOpen(d, this.directories[d]!);
      } else {
        // Only those no other file holds: the log's (past its cursor) and the files this start carried over come back.
        this.otherWriteErrors[d]!++;
        lost += kept.lostWithoutFile;
      }
      ds.backlog?.close();
      // Records still buffered after the log's last flush failed are not kept either, but for those loaded from the
      // buffer into memory: counted with the pending file's (kept when it was written, lost with it when not).
      if (ds.backlog !== null) lost += ds.backlog.bufferedUnloaded;
      ds.deadLetterFile?.close();
      if (kept.lostSetAside > 0)
        this.alarm(
          `downstream ${ds.name}: ${kept.lostSetAside} triggers set aside in the backlog log behind a parked trigger could not be read again at close (damaged or unreadable on disk${ds.backlog?.lastError == null ? '' : `: ${ds.backlog.lastError}`}): lost (counted in the summary's damaged_records)`,
        );
      this.carriedOver[d] = ds.inFlightTriggers - lost - kept.lostSetAside;
      if (kept.error !== null)
        this.alarm(
          `downstream ${ds.name}: the pending file could not be written at close (${kept.error}): of the ${kept.written} triggers it was to keep, ${kept.written - kept.lostWithoutFile} stay in the backlog log or the files carried over at start for the next start, ${kept.lostWithoutFile} are lost`,
        );
      if (lost > 0) {
        if (ds.deadLetterFile !== null) ds.deadLetterFile.droppedRecords[DeadLetterDropReason.DISK_ERROR]! += lost;
        this.alarm(
          `downstream ${ds.name}: ${lost} triggers held at close could not be kept in the state directory (${kept.error ?? ds.backlog?.lastError ?? 'write failed'}): lost`,
        );
      }
      this.checkAlarm(d, Infinity);
    });
    this.publishMetrics();
    for (const ds of this.downstreams) await ds.sink.close();
  }

  /**
   * Writes what the backlog logs buffer, then counts, over every downstream, the triggers still in memory only (not
   * delivered, dead-lettered, or in a durable file) that were taken from the trigger rings at or before `cutNs` (this
   * thread's clock): 0 means every one of them is handed on.
   */
  memoryOnlyTakenBy(cutNs: number): number {
    this.flushBacklogs();
    let n = 0;
    for (const ds of this.downstreams) n += ds.memoryOnlyTakenBy(cutNs, this.handOffScratchFor(ds));
    return n;
  }
  /** The hand-off scratch, grown to `ds`'s memory when smaller. */
  private handOffScratchFor(ds: Downstream): Uint8Array {
    if (this.handOffScratch.length < ds.queues.capacitySlots)
      this.handOffScratch = new Uint8Array(ds.queues.capacitySlots);
    return this.handOffScratch;
  }

  /**
   * Counts, over every downstream, the triggers not delivered yet that were taken from the trigger rings at or before
   * `cutNs` (see Downstream.undeliveredTakenBy): 0 means every downstream has taken (or refused for good) every one.
   */
  undeliveredTakenBy(cutNs: number): number {
    let n = 0;
    for (const ds of this.downstreams) n += ds.undeliveredTakenBy(cutNs, this.handOffScratchFor(ds));
    return n;
  }

  /**
   * Removes the set-aside files downstream `d` found at start (the pending file now holds what was taken of them, or
   * it is settled); one that cannot be removed is tried again later (see REMOVE_RETRY_FLUSHES).
   */
  private removeSetAsideAtOpen(d: number, dir: string): void {
    const files = this.setAsideAtOpen[d]!;
    if (files.length === 0) return;
    try {
      removeSetAsideFiles(dir, files);
      this.setAsideAtOpen[d] = [];
    } catch {
      this.otherWriteErrors[d]!++;
      this.setAsideRemoveDue[d] = true;
      this.removeWaitFlushes[d] = REMOVE_RETRY_FLUSHES;
    }
  }

  /**
   * At start, after taking over: replaces `ds`'s pending file with the triggers it took over into memory (the parked
   * dead letters stay in their file), or removes it when it took none. Returns false, with an error line, when the
   * disk refused (the old file stays).
   */
  private rewritePendingFile(ds: Downstream, dir: string, taken: number): boolean {
    if (taken === 0) {
      try {
        removePendingFile(dir);
      } catch (err) {
        this.alarm(`downstream ${ds.name}: removing the pending file failed: ${errorText(err)}`);
        return false;
      }
      return true;
    }
    const { error } = carryOver(ds, dir, this.codec);
    if (error !== null) {
      this.alarm(`downstream ${ds.name}: rewriting the pending file with what the start took over failed: ${error}`);
      return false;
    }
    return true;
  }

  /** Writes every metric cell (allocation-free), inside the publish version's odd phase. */
  publishMetrics(): void {
    const m = this.metrics;
    const versionI32 = (this.dispBase + DISP_PUBLISH_VERSION_F64) * 2;
    Atomics.add(this.metricsI32, versionI32, 1);
    let durableFailing = 0;
    for (let d = 0; d < this.downstreams.length; d++) {
      const ds = this.downstreams[d]!;
      const b = d * DS_BLOCK_F64;
      const l = ds.limiter;
      m[b + DS_LIMIT_F64] = l.limit;
      m[b + DS_INFLIGHT_F64] = l.inflight;
      m[b + DS_RTT_MIN_NS_F64] = l.rttMinNs;
      m[b + DS_OFFERED_F64] = ds.offered;
      m[b + DS_DELIVERED_F64] = ds.delivered;
      m[b + DS_DEAD_LETTERED_F64] = ds.deadLettered;
      for (let r = 0; r < DEAD_LETTER_REASON_COUNT; r++)
        m[b + DS_DEAD_LETTERED_BY_REASON_F64 + r] = ds.deadLetteredByReason[r]!;
      m[b + DS_IN_FLIGHT_TRIGGERS_F64] = ds.inFlightTriggers;
      m[b + DS_QUEUE_DEPTH_F64] = ds.queuedTriggers;
      m[b + DS_REJECTED_F64] = l.rejected;
      m[b + DS_DROPPED_F64] = l.dropped;
      m[b + DS_IGNORED_F64] = l.ignored;
      m[b + DS_SUCCEEDED_F64] = l.succeeded;
      m[b + DS_LIMIT_INCREASES_F64] = l.limitIncreases;
      m[b + DS_LIMIT_DECREASES_F64] = l.limitDecreases;
      m[b + DS_LOCAL_STALL_NS_F64] = l.localStallNs;
      m[b + DS_STALL_CORRECTED_F64] = l.stallCorrectedSamples;
      m[b + DS_CREDITS_F64] = ds.credits.enabled ? ds.credits.remaining : NaN;
      m[b + DS_BREAKER_STATE_F64] = ds.breaker.state;
      m[b + DS_BREAKER_OPENS_F64] = ds.breaker.opens;
      m[b + DS_DEAD_LETTER_DEPTH_F64] = ds.parked;
      m[b + DS_REPLAYED_F64] = ds.replayed;
      m[b + DS_REPLAY_REJECTED_F64] = ds.replayRejected;
      for (let r = 0; r < DEAD_LETTER_REASON_COUNT; r++) {
        m[b + DS_REPLAYED_BY_REASON_F64 + r] = ds.replayedByReason[r]!;
        m[b + DS_REPLAY_REJECTED_BY_REASON_F64 + r] = ds.replayRejectedByReason[r]!;
      }
      m[b + DS_PAUSES_F64] = ds.pauses;
      m[b + DS_BACKOFFS_F64] = ds.backoffs;
      m[b + DS_DEVICE_HOLDS_F64] = ds.deviceHolds;
      m[b + DS_SPILLED_F64] = ds.spilled;
      m[b + DS_BACKLOG_RECORDS_F64] =
        ds.backlog === null ? 0 : ds.backlog.unread + ds.backlog.loadedOutstanding + ds.backlog.held;
      m[b + DS_BACKLOG_BYTES_F64] = ds.backlog === null ? 0 : ds.backlog.liveBytes;
      m[b + DS_RECOVERED_F64] = ds.recovered;
      m[b + DS_CARRIED_OVER_F64] = this.carriedOver[d]!;
      m[b + DS_SENDING_F64] = ds.sendingTriggers;
      m[b + DS_BACKPRESSURE_WAITS_F64] = ds.backpressureWaits;
      m[b + DS_FINAL_F64] = ds.final;
      m[b + DS_MEMORY_ONLY_F64] = ds.memoryOnly + ds.unflushedRecords;
      const file = ds.deadLetterFile;
      for (let r = 0; r < DEAD_LETTER_DROP_REASON_COUNT; r++)
        m[b + DS_DEAD_LETTER_DROPPED_F64 + r] = file === null ? 0 : file.droppedRecords[r]!;
      m[b + DS_DEAD_LETTER_BYTES_F64] = file === null ? 0 : file.byteLength;
      m[b + DS_DURABLE_WRITE_ERRORS_F64] = this.durableWriteErrors(d);
      const damagedLost =
        this.pendingDamagedSpans[d]! +
        (ds.backlog === null ? 0 : ds.backlog.damagedAtOpen + ds.backlog.corrupt + ds.backlog.reloadDamaged);
      m[b + DS_DAMAGED_LOST_F64] = damagedLost;
      m[b + DS_SET_ASIDE_F64] = ds.setAside === null ? 0 : ds.setAside.count;
      m[b + DS_LOAD_WAITING_F64] = ds.stashedSlot >= 0 ? 1 : 0;
      m[b + DS_SET_ASIDE_MOVED_F64] = ds.backlog === null ? 0 : ds.backlog.setAsideFiles.moved;
      m[b + DS_DAMAGED_RECORDS_F64] = damagedLost + (file === null ? 0 : file.damagedAtOpen);
      m[b + DS_CURSOR_DAMAGED_COPIES_F64] = ds.backlog === null ? 0 : ds.backlog.cursorDamagedCopies;
      m[b + DS_CURSOR_FALLBACKS_F64] = ds.backlog !== null && ds.backlog.cursorFallback ? 1 : 0;
      const failing = this.durableFailing(d);
      m[b + DS_DURABLE_FAILING_F64] = failing ? 1 : 0;
      if (failing) durableFailing++;
      m[b + DS_RTT_SUM_NS_F64] = l.rttSumNs;
      m[b + DS_RTT_COUNT_F64] = l.rttCount;
      for (let k = 0; k < DS_RTT_BUCKET_COUNT; k++) m[b + DS_RTT_BUCKETS_F64 + k] = l.rttBuckets[k]!;
    }
    const g = this.dispBase;
    m[g + DISP_TRIGGERS_OFFERED_F64] = this.triggersOffered;
    m[g + DISP_TRIGGERS_UNROUTED_F64] = this.triggersUnrouted;
    m[g + DISP_BAD_RECORDS_F64] = this.badRecords;
    m[g + DISP_DEAD_LETTER_RING_DEPTH_F64] = this.deadLetterRing.depth;
    m[g + DISP_DEAD_LETTER_FLUSHES_F64] = this.flushes;
    m[g + DISP_DEAD_LETTER_FLUSHED_F64] = this.flushedRecords;
    m[g + DISP_FLUSH_SUM_NS_F64] = this.flushSumNs;
    m[g + DISP_FLUSH_MAX_NS_F64] = this.flushMaxNs;
    m[g + DISP_DURABLE_FAILING_F64] = durableFailing;
    Atomics.add(this.metricsI32, versionI32, 1);
  }
}
