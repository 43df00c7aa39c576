/**
 * The dispatcher: routes trigger records to subscribed downstreams and runs each downstream's control loop; owns
 * the dead-letter ring and its batched durable flush. Runs on the dispatcher thread (the thread entry wires a
 * `Dispatcher` to the trigger rings: for each record `offer`, then `pump(nowNs)`).
 *
 * Accounting, per downstream and summed: `offered = delivered + deadLettered + inFlight`, where `deadLettered`
 * counts records durably flushed and `inFlight` counts triggers queued, inside sink calls, or in the dead-letter ring
 * awaiting the flush (`accountingInto` / `totals`). Re-deliveries by the replay lane are counted apart (`replayed`).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  DeadLetterReason,
  DISP_BAD_RECORDS_F64,
  DISP_BLOCK_F64,
  DISP_DEAD_LETTER_FLUSHED_F64,
  DISP_DEAD_LETTER_FLUSHES_F64,
  DISP_DEAD_LETTER_RING_DEPTH_F64,
  DISP_FLUSH_MAX_NS_F64,
  DISP_FLUSH_SUM_NS_F64,
  DISP_TRIGGERS_OFFERED_F64,
  DISP_TRIGGERS_UNROUTED_F64,
  DREC_CHECKSUM_I32,
  DREC_DOWNSTREAM_I32,
  DREC_ORDINAL_F64,
  DREC_STRIDE_BYTES,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DS_BLOCK_F64,
  DS_BREAKER_OPENS_F64,
  DS_BREAKER_STATE_F64,
  DS_CREDITS_F64,
  DS_DEAD_LETTER_DEPTH_F64,
  DS_DEAD_LETTERED_F64,
  DS_DELIVERED_F64,
  DS_DROPPED_F64,
  DS_IGNORED_F64,
  DS_IN_FLIGHT_TRIGGERS_F64,
  DS_INFLIGHT_F64,
  DS_LIMIT_DECREASES_F64,
  DS_LIMIT_F64,
  DS_LIMIT_INCREASES_F64,
  DS_OFFERED_F64,
  DS_PAUSES_F64,
  DS_QUEUE_DEPTH_F64,
  DS_REJECTED_F64,
  DS_REPLAYED_F64,
  DS_RTT_BUCKET_COUNT,
  DS_RTT_BUCKETS_F64,
  DS_RTT_COUNT_F64,
  DS_RTT_MIN_NS_F64,
  DS_RTT_SUM_NS_F64,
  DS_SUCCEEDED_F64,
  LANE_COUNT,
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
import { DeadLetterFile } from './dead-letter/file.js';
import { ReplayLane } from './dead-letter/replay-lane.js';
import { DeadLetterRing } from './dead-letter/ring.js';
import { Downstream, type DeadLetterTarget, type DeliveredHook, type DownstreamOptions } from './downstream.js';
import { checksumI32 } from './record.js';
import { TriggerRouter } from './router.js';
import type { TriggerNamer } from './sinks/format.js';
import { checkNumber } from './validate.js';

/** Options of Dispatcher. */
export interface DispatcherOptions {
  /** Downstreams, at most 31, unique names. */
  downstreams: readonly DownstreamOptions[];
  /** Directory of the dead-letter files (created if absent). */
  deadLetterDir: string;
  /** Names devices and fences for subscriptions and JSON. */
  namer: TriggerNamer;
  /** Dead-letter ring capacity, records. Default 4096. */
  deadLetterCapacityRecords?: number;
  /** Flush once this many records wait. Default 256. */
  flushBatchRecords?: number;
  /** Flush once the oldest waiting record is this old, ms. Default 50. */
  flushIntervalMs?: number;
  /** Monotonic clock (ns). Default the router's cross-thread clock. */
  clock?: ClockNs;
  /** Called after every delivered batch. */
  onDelivered?: DeliveredHook;
  /** Where metric cells live (e.g. a SharedArrayBuffer read at scrape time); default a private buffer. */
  metricsBuffer?: ArrayBufferLike;
}

/** Sums of the accounting counters over every downstream. */
export interface DispatchTotals {
  /** Trigger records offered. */
  triggersOffered: number;
  /** Of those, routed to no downstream. */
  triggersUnrouted: number;
  /** Of those, malformed and refused. */
  badRecords: number;
  /** Trigger deliveries offered to downstreams (one per routed downstream). */
  offered: number;
  /** Delivered live. */
  delivered: number;
  /** Dead-lettered and durably flushed. */
  deadLettered: number;
  /** Queued, being sent, or awaiting the flush. */
  inFlight: number;
  /** Re-delivered by replay lanes. */
  replayed: number;
}

/** Float64 cells needed for the metrics of `downstreams` downstreams. */
export function metricsCells(downstreams: number): number {
  return downstreams * DS_BLOCK_F64 + DISP_BLOCK_F64;
}

/** The dispatcher (see the module comment). */
export class Dispatcher implements DeadLetterTarget {
  /** Downstreams by index. */
  readonly downstreams: readonly Downstream[];
  /** Metric cells: downstream d at [d * DS_BLOCK_F64 ..], dispatcher-wide at [downstreams * DS_BLOCK_F64 ..]. */
  readonly metrics: Float64Array;
  /** Dead-letter ring. */
  readonly deadLetterRing: DeadLetterRing;
  private readonly router: TriggerRouter;
  private readonly files: DeadLetterFile[];
  private readonly clock: ClockNs;
  private readonly flushBatchRecords: number;
  private readonly flushIntervalNs: number;
  private readonly scratchBytes: Uint8Array;
  private readonly scratchF64: Float64Array;
  private readonly scratchI32: Int32Array;
  private readonly dispBase: number;
  private closed = false;

  /** Trigger records offered. */
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

  /** Validates options, opens (and recovers) every downstream's dead-letter file. */
  constructor(options: DispatcherOptions) {
    const n = options.downstreams.length;
    checkNumber('options.downstreams.length', n, 1, 31, true);
    const names = new Set<string>();
    for (const d of options.downstreams) {
      if (names.has(d.name)) throw new RangeError(`options.downstreams: duplicate name ${d.name}`);
      names.add(d.name);
    }
    if (typeof options.deadLetterDir !== 'string' || options.deadLetterDir.length === 0) {
      throw new RangeError('options.deadLetterDir must be a directory path');
    }
    this.clock = options.clock ?? defaultClock;
    const cap = checkNumber('options.deadLetterCapacityRecords', options.deadLetterCapacityRecords ?? 4096, 1, 1 << 20, true);
    this.flushBatchRecords = checkNumber('options.flushBatchRecords', options.flushBatchRecords ?? 256, 1, cap, true);
    this.flushIntervalNs = checkNumber('options.flushIntervalMs', options.flushIntervalMs ?? 50, 0, 3.6e6) * 1e6;
    this.deadLetterRing = new DeadLetterRing(cap);
    const scratch = new ArrayBuffer(cap * DREC_STRIDE_BYTES);
    this.scratchBytes = new Uint8Array(scratch);
    this.scratchF64 = new Float64Array(scratch);
    this.scratchI32 = new Int32Array(scratch);
    const cells = metricsCells(n);
    const mb = options.metricsBuffer ?? new ArrayBuffer(cells * 8);
    if (mb.byteLength < cells * 8) throw new RangeError(`options.metricsBuffer must hold ${cells * 8} bytes, got ${mb.byteLength}`);
    this.metrics = new Float64Array(mb, 0, cells);
    this.dispBase = n * DS_BLOCK_F64;
    fs.mkdirSync(path.resolve(options.deadLetterDir), { recursive: true });
    this.files = [];
    const list: Downstream[] = [];
    options.downstreams.forEach((o, i) => {
      const file = new DeadLetterFile(options.deadLetterDir, o.name);
      this.files.push(file);
      const lane = o.replay === false ? null : new ReplayLane(file, o.replayWindowRecords ?? 256);
      list.push(new Downstream(i, o, this.clock, this, lane, options.onDelivered));
    });
    this.downstreams = list;
    this.router = new TriggerRouter(
      options.downstreams.map((d) => d.subscription),
      options.namer,
    );
    this.publishMetrics();
  }

  /**
   * Offers one trigger record (TRG_* layout at the given bases of the two views, e.g. a trigger ring's slot).
   * Returns the number of downstreams it was routed to, or -1 when the record is malformed (counted in
   * `badRecords`). Allocation-free (except the first time a fence of a new generation is seen by the router).
   */
  offer(f64: Float64Array, i32: Int32Array, baseF64: number, baseI32: number): number {
    this.triggersOffered++;
    const type = i32[baseI32 + TRG_TYPE_I32]!;
    const fenceCell = i32[baseI32 + TRG_FENCE_INDEX_I32]!;
    const lane = (fenceCell >>> TRG_LANE_SHIFT) & 3;
    const lat = f64[baseF64 + TRG_LAT_F64]!;
    const lon = f64[baseF64 + TRG_LON_F64]!;
    if (
      type < 0 ||
      type >= TRIGGER_TYPE_COUNT ||
      lane >= LANE_COUNT ||
      fenceCell < 0 ||
      !(lat >= -90 && lat <= 90) ||
      !(lon >= -180 && lon <= 180)
    ) {
      this.badRecords++;
      return -1;
    }
    const mask = this.router.route(type, lane, i32[baseI32 + TRG_GENERATION_I32]!, fenceCell & TRG_FENCE_INDEX_MASK);
    if (mask === 0) {
      this.triggersUnrouted++;
      return 0;
    }
    const now = this.clock();
    let routed = 0;
    for (let d = 0; d < this.downstreams.length; d++) {
      // One bit per subscribed downstream.
      if ((mask & (1 << d)) === 0) continue;
      this.downstreams[d]!.accept(f64, i32, baseF64, baseI32, now);
      routed++;
    }
    return routed;
  }

  /** Runs every downstream's control loop, flushes the dead-letter ring when due, publishes metrics. */
  pump(nowNs: number = this.clock()): void {
    for (let d = 0; d < this.downstreams.length; d++) this.downstreams[d]!.pump(nowNs);
    const ring = this.deadLetterRing;
    if (ring.depth > 0 && (ring.depth >= this.flushBatchRecords || nowNs - ring.oldestPutNs >= this.flushIntervalNs)) {
      this.flush();
    }
    this.publishMetrics();
  }

  /** DeadLetterTarget: puts a record in the ring, flushing first when the ring is full. Allocation-free. */
  deadLetter(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    downstreamIndex: number,
    reason: number,
    attempts: number,
    nowNs: number,
  ): void {
    const ring = this.deadLetterRing;
    if (ring.put(srcF64, srcI32, baseF64, baseI32, downstreamIndex, reason, attempts, nowNs)) return;
    this.flush();
    ring.put(srcF64, srcI32, baseF64, baseI32, downstreamIndex, reason, attempts, nowNs);
  }

  /**
   * Writes every record of the dead-letter ring to its downstream's file: one write and one fsync per file touched,
   * then empties the ring. Records count as dead-lettered only once this returns.
   */
  flush(): void {
    const ring = this.deadLetterRing;
    const total = ring.depth;
    if (total === 0) return;
    const t0 = this.clock();
    for (let d = 0; d < this.downstreams.length; d++) {
      const ds = this.downstreams[d]!;
      if (ds.pendingFlush === 0) continue;
      const file = this.files[d]!;
      let k = 0;
      for (let r = 0; r < total; r++) {
        // Gather this downstream's records, in ring order, into the scratch buffer.
        if (ring.i32[r * DREC_STRIDE_I32 + DREC_DOWNSTREAM_I32] !== d) continue;
        for (let c = 0; c < DREC_STRIDE_I32; c++) this.scratchI32[k * DREC_STRIDE_I32 + c] = ring.i32[r * DREC_STRIDE_I32 + c]!;
        this.scratchF64[k * DREC_STRIDE_F64 + DREC_ORDINAL_F64] = file.recordCount + k;
        const bi = k * DREC_STRIDE_I32;
        this.scratchI32[bi + DREC_CHECKSUM_I32] = checksumI32(this.scratchI32, bi, DREC_CHECKSUM_I32);
        k++;
      }
      file.append(this.scratchBytes, k);
      ds.deadLettered += k;
      ds.pendingFlush -= k;
    }
    ring.clear();
    const took = this.clock() - t0;
    this.flushes++;
    this.flushedRecords += total;
    this.flushSumNs += took;
    if (took > this.flushMaxNs) this.flushMaxNs = took;
  }

  /** Sums of the accounting counters (allocates the result object). */
  totals(): DispatchTotals {
    let offered = 0;
    let delivered = 0;
    let deadLettered = 0;
    let inFlight = 0;
    let replayed = 0;
    for (const ds of this.downstreams) {
      offered += ds.offered;
      delivered += ds.delivered;
      deadLettered += ds.deadLettered;
      inFlight += ds.inFlightTriggers;
      replayed += ds.replayed;
    }
    return {
      triggersOffered: this.triggersOffered,
      triggersUnrouted: this.triggersUnrouted,
      badRecords: this.badRecords,
      offered,
      delivered,
      deadLettered,
      inFlight,
      replayed,
    };
  }

  /** Index of the downstream named `name` (-1 when none). */
  indexOf(name: string): number {
    return this.downstreams.findIndex((d) => d.name === name);
  }

  /** True when no downstream has live work queued or in flight and the dead-letter ring is empty. */
  get isIdle(): boolean {
    for (const ds of this.downstreams) if (!ds.isIdle) return false;
    return this.deadLetterRing.depth === 0;
  }

  /** True when, beyond `isIdle`, no replay lane has records left to re-deliver. */
  get isReplayDone(): boolean {
    for (const ds of this.downstreams) if (ds.replay !== null && (ds.replay.depth > 0 || ds.replaySending > 0)) return false;
    return true;
  }

  /**
   * Drains: pumps until every live trigger is delivered or dead-lettered and flushed. After `deadlineMs`, queued
   * triggers are dead-lettered (reason DRAINING) and in-flight calls are awaited. Replay progress is committed.
   */
  async drain(deadlineMs = 30_000, pollMs = 1): Promise<void> {
    const end = this.clock() + deadlineMs * 1e6;
    let evacuated = false;
    for (;;) {
      const now = this.clock();
      if (!evacuated && now >= end) {
        for (const ds of this.downstreams) ds.evacuate(DeadLetterReason.DRAINING, now);
        evacuated = true;
      }
      this.pump(now);
      let busy = false;
      for (const ds of this.downstreams) if (ds.queue.size > 0 || ds.sendingTriggers > 0 || ds.limiter.inflight > 0) busy = true;
      if (!busy) break;
      await new Promise((r) => setTimeout(r, pollMs));
    }
    this.flush();
    for (const ds of this.downstreams) ds.replay?.commit(true);
    this.publishMetrics();
  }

  /** Drains, then closes the dead-letter files and every sink. */
  async close(deadlineMs = 30_000): Promise<void> {
    if (this.closed) return;
    await this.drain(deadlineMs);
    this.closed = true;
    for (const f of this.files) f.close();
    for (const ds of this.downstreams) await ds.sink.close();
  }

  /** Writes every metric cell (allocation-free). */
  publishMetrics(): void {
    const m = this.metrics;
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
      m[b + DS_IN_FLIGHT_TRIGGERS_F64] = ds.inFlightTriggers;
      m[b + DS_QUEUE_DEPTH_F64] = ds.queue.size;
      m[b + DS_REJECTED_F64] = l.rejected;
      m[b + DS_DROPPED_F64] = l.dropped;
      m[b + DS_IGNORED_F64] = l.ignored;
      m[b + DS_SUCCEEDED_F64] = l.succeeded;
      m[b + DS_LIMIT_INCREASES_F64] = l.limitIncreases;
      m[b + DS_LIMIT_DECREASES_F64] = l.limitDecreases;
      m[b + DS_CREDITS_F64] = ds.credits.enabled ? ds.credits.remaining : NaN;
      m[b + DS_BREAKER_STATE_F64] = ds.breaker.state;
      m[b + DS_BREAKER_OPENS_F64] = ds.breaker.opens;
      m[b + DS_DEAD_LETTER_DEPTH_F64] = ds.deadLetterDepth;
      m[b + DS_REPLAYED_F64] = ds.replayed;
      m[b + DS_PAUSES_F64] = ds.pauses;
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
  }
}
