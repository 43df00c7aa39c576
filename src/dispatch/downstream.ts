/**
 * One downstream, sharing nothing with any other: its limiter (+ static safety cap), bounded COMPLIANCE-first queue,
 * optional credit window, circuit breaker, Retry-After pause, sink, and replay lane. Dispatcher thread only.
 *
 * Flow: `accept` queues a routed trigger (or dead-letters it when the breaker is open or the queue is full).
 * `pump` expires old triggers, then while the breaker, the pause, the credits and the limiter allow, takes a permit
 * and sends one batch: live triggers first, and replayed ones only when the live queue is empty. The permit is taken
 * immediately before the sink call, so the RTT covers the downstream interaction only. A completion releases the
 * permit with exactly one of success / dropped / ignore, feeds the breaker, and pumps again.
 */
import { DeadLetterReason, DREC_ATTEMPTS_I32, DREC_ORDINAL_F64, DREC_REASON_I32, DREC_STRIDE_BYTES, DREC_STRIDE_F64, DREC_STRIDE_I32, DREC_TIME_NS_F64 } from '../shm/layout.js';
import type { ClockNs } from '../shm/clock.js';
import { BreakerState, CircuitBreaker, type BreakerOptions } from './breaker.js';
import { CreditWindow } from './credits.js';
import type { ReplayLane } from './dead-letter/replay-lane.js';
import { Limiter, NO_PERMIT } from './limiter.js';
import { GradientLimit } from './limits/gradient-limit.js';
import type { Limit } from './limits/limit.js';
import { copyTrigger } from './record.js';
import type { Subscription } from './router.js';
import { classifyResult, Outcome, type Sink, type SinkResult } from './sinks/sink.js';
import { TriggerBatch } from './sinks/trigger-batch.js';
import { TriggerQueue } from './trigger-queue.js';
import { checkNumber } from './validate.js';

/** Configuration of one downstream. */
export interface DownstreamOptions {
  /** Unique name (metric label, dead-letter file name). */
  name: string;
  /** Transport. */
  sink: Sink;
  /** What it receives (absent: everything). */
  subscription?: Subscription;
  /** Concurrency-limit algorithm (default: a GradientLimit with its defaults). */
  limit?: Limit;
  /** Static safety cap on requests in flight, above the adaptive limit. Default 256. */
  safetyCap?: number;
  /** Queue slots. Default 4096. */
  queueCapacitySlots?: number;
  /** Queue slots only COMPLIANCE triggers may use. Default 5% of the queue. */
  reservedComplianceSlots?: number;
  /** Triggers per sink call. Default 32. */
  maxBatchTriggers?: number;
  /** Delivery attempts per trigger before it is dead-lettered. Default 3. */
  maxAttempts?: number;
  /** A trigger queued longer than this is dead-lettered as expired, ms. Default 60000. */
  maxQueueAgeMs?: number;
  /** Initial credit window (absent: no credit flow control). */
  credits?: number;
  /** Circuit-breaker options. */
  breaker?: Partial<BreakerOptions>;
  /** Re-deliver dead-lettered triggers behind live traffic. Default true. */
  replay?: boolean;
  /** Records the replay lane holds in memory. Default 256. */
  replayWindowRecords?: number;
}

/** Where a downstream puts what it cannot deliver (the dispatcher's dead-letter ring). */
export interface DeadLetterTarget {
  /** Puts a trigger record with its reason; must not fail (flushes when its ring is full). Allocation-free. */
  deadLetter(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    downstreamIndex: number,
    reason: number,
    attempts: number,
    nowNs: number,
  ): void;
}

/** Called after every delivered batch (live or replay), before the batch is reused. */
export type DeliveredHook = (downstreamIndex: number, batch: TriggerBatch, nowNs: number) => void;

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
  /** Live queue. */
  readonly queue: TriggerQueue;
  /** Replay lane (null when replay is off). */
  readonly replay: ReplayLane | null;
  /** Triggers per sink call. */
  readonly maxBatchTriggers: number;
  /** Attempts per trigger. */
  readonly maxAttempts: number;
  /** Max queue age, ns. */
  readonly maxQueueAgeNs: number;

  /** Trigger deliveries offered (accepted for accounting). */
  offered = 0;
  /** Triggers delivered live. */
  delivered = 0;
  /** Triggers dead-lettered and durably flushed (the dispatcher counts them at flush). */
  deadLettered = 0;
  /** Triggers in the dead-letter ring awaiting a flush. */
  pendingFlush = 0;
  /** Live triggers inside sink calls. */
  sendingTriggers = 0;
  /** Replayed triggers inside sink calls. */
  replaySending = 0;
  /** Dead-lettered triggers re-delivered. */
  replayed = 0;
  /** Replayed triggers the downstream rejected for good (4xx): not retried. */
  replayRejected = 0;
  /** Retry-After pauses honoured. */
  pauses = 0;
  /** Pump passes that found work waiting and no permit. */
  rejectedPasses = 0;
  /** Dead-lettered by reason. */
  readonly deadLetteredByReason = new Float64Array(8);
  /** No sends before this time (Retry-After), ns. */
  pausedUntilNs = 0;

  private readonly clock: ClockNs;
  private readonly dlq: DeadLetterTarget;
  private readonly onDelivered: DeliveredHook | undefined;
  private readonly batches: TriggerBatch[];
  private readonly permits: Float64Array;
  private readonly onResult: ((r: SinkResult) => void)[];
  private readonly onThrow: ((e: unknown) => void)[];
  private pumping = false;

  /** Validates the options; `replay` is the lane over this downstream's dead-letter file (or null). */
  constructor(
    index: number,
    options: DownstreamOptions,
    clock: ClockNs,
    dlq: DeadLetterTarget,
    replay: ReplayLane | null,
    onDelivered: DeliveredHook | undefined,
  ) {
    if (typeof options.name !== 'string' || options.name.length === 0) throw new RangeError('downstream name must be a non-empty string');
    this.index = index;
    this.name = options.name;
    this.sink = options.sink;
    this.clock = clock;
    this.dlq = dlq;
    this.onDelivered = onDelivered;
    this.replay = replay;
    const safetyCap = options.safetyCap ?? 256;
    this.limiter = new Limiter(options.limit ?? new GradientLimit(), safetyCap);
    this.breaker = new CircuitBreaker(options.breaker);
    this.credits = new CreditWindow(options.credits);
    const cap = options.queueCapacitySlots ?? 4096;
    this.queue = new TriggerQueue(cap, options.reservedComplianceSlots ?? Math.floor(cap * 0.05));
    this.maxBatchTriggers = checkNumber(`${this.name}.maxBatchTriggers`, options.maxBatchTriggers ?? 32, 1, 4096, true);
    this.maxAttempts = checkNumber(`${this.name}.maxAttempts`, options.maxAttempts ?? 3, 1, 100, true);
    this.maxQueueAgeNs = checkNumber(`${this.name}.maxQueueAgeMs`, options.maxQueueAgeMs ?? 60_000, 1, 8.64e7) * 1e6;
    const slots = this.limiter.slotCount;
    const buf = new ArrayBuffer(slots * this.maxBatchTriggers * DREC_STRIDE_BYTES);
    const f64 = new Float64Array(buf);
    const i32 = new Int32Array(buf);
    this.batches = [];
    this.onResult = [];
    this.onThrow = [];
    this.permits = new Float64Array(slots).fill(NO_PERMIT);
    for (let s = 0; s < slots; s++) {
      const b = new TriggerBatch(f64, i32, s * this.maxBatchTriggers, this.maxBatchTriggers);
      b.downstreamIndex = index;
      this.batches.push(b);
      // One completion handler per permit slot, made once: a send allocates no closure of ours.
      this.onResult.push((r: SinkResult) => this.complete(s, r));
      this.onThrow.push(() => this.complete(s, { status: 0, error: 'network' }));
    }
  }

  /** Triggers in flight for accounting: queued, inside sink calls, or awaiting the dead-letter flush. */
  get inFlightTriggers(): number {
    return this.queue.size + this.sendingTriggers + this.pendingFlush;
  }

  /** True when nothing of this downstream is queued or being sent (replay aside). */
  get isIdle(): boolean {
    return this.queue.size === 0 && this.sendingTriggers === 0 && this.limiter.inflight === 0;
  }

  /** Dead-letter depth: awaiting the flush plus on file not yet re-delivered. */
  get deadLetterDepth(): number {
    return this.pendingFlush + (this.replay === null ? 0 : this.replay.depth);
  }

  /** Accepts a routed trigger record: queue it, or dead-letter it (breaker open, queue full). Allocation-free. */
  accept(srcF64: Float64Array, srcI32: Int32Array, baseF64: number, baseI32: number, nowNs: number): void {
    this.offered++;
    if (this.breaker.isBlocking(nowNs)) {
      this.toDeadLetter(srcF64, srcI32, baseF64, baseI32, DeadLetterReason.BREAKER_OPEN, 0, nowNs);
      return;
    }
    if (!this.queue.push(srcF64, srcI32, baseF64, baseI32, nowNs, 0)) {
      this.toDeadLetter(srcF64, srcI32, baseF64, baseI32, DeadLetterReason.QUEUE_FULL, 0, nowNs);
    }
  }

  /** Expires, drains an open breaker's queue to the dead-letter ring, and sends what the controls allow. */
  pump(nowNs: number): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      this.expire(nowNs);
      if (this.breaker.isBlocking(nowNs)) {
        this.evacuate(DeadLetterReason.BREAKER_OPEN, nowNs);
        return;
      }
      if (nowNs < this.pausedUntilNs) return;
      for (;;) {
        const live = this.queue.size > 0;
        if (!live && (this.replay === null || this.replay.nextPending() < 0)) return;
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
        const max = Math.min(probe ? 1 : this.maxBatchTriggers, this.credits.remaining);
        batch.count = 0;
        batch.replay = !live;
        if (live) this.fillLive(batch, max);
        else this.fillReplay(batch, max);
        this.credits.take(batch.count);
        if (live) this.sendingTriggers += batch.count;
        else this.replaySending += batch.count;
        this.permits[slot] = permit;
        // The permit's clock starts here, right before the downstream call.
        batch.sentAtNs = this.clock();
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

  /** Moves every queued trigger to the dead-letter ring with `reason` (breaker open, drain deadline). */
  evacuate(reason: number, nowNs: number): void {
    for (;;) {
      const slot = this.queue.popSlot();
      if (slot < 0) return;
      const q = this.queue;
      this.toDeadLetter(q.f64, q.i32, slot * DREC_STRIDE_F64, slot * DREC_STRIDE_I32, reason, q.i32[slot * DREC_STRIDE_I32 + DREC_ATTEMPTS_I32]!, nowNs);
      q.freeSlot(slot);
    }
  }

  private expire(nowNs: number): void {
    const cutoff = nowNs - this.maxQueueAgeNs;
    if (!(this.queue.oldestTimeNs() <= cutoff)) return;
    const q = this.queue;
    for (let c = 0; c < 2; c++) {
      for (;;) {
        // Each class is FIFO: stop at the first head young enough.
        const slot = q.popExpiredSlot(c, cutoff);
        if (slot < 0) break;
        this.toDeadLetter(q.f64, q.i32, slot * DREC_STRIDE_F64, slot * DREC_STRIDE_I32, DeadLetterReason.EXPIRED, q.i32[slot * DREC_STRIDE_I32 + DREC_ATTEMPTS_I32]!, nowNs);
        q.freeSlot(slot);
      }
    }
  }

  private fillLive(batch: TriggerBatch, max: number): void {
    const q = this.queue;
    while (batch.count < max) {
      const slot = q.popSlot();
      if (slot < 0) return;
      const sf = slot * DREC_STRIDE_F64;
      const si = slot * DREC_STRIDE_I32;
      const df = batch.recordF64(batch.count);
      const di = batch.recordI32(batch.count);
      copyTrigger(q.f64, q.i32, sf, si, batch.f64, batch.i32, df, di);
      batch.f64[df + DREC_TIME_NS_F64] = q.f64[sf + DREC_TIME_NS_F64]!;
      batch.f64[df + DREC_ORDINAL_F64] = -1;
      batch.i32[di + DREC_REASON_I32] = -1;
      batch.i32[di + DREC_ATTEMPTS_I32] = q.i32[si + DREC_ATTEMPTS_I32]! + 1;
      q.freeSlot(slot);
      batch.count++;
    }
  }

  private fillReplay(batch: TriggerBatch, max: number): void {
    const r = this.replay!;
    while (batch.count < max) {
      const idx = r.nextPending();
      if (idx < 0) return;
      const sf = r.baseF64(idx);
      const si = r.baseI32(idx);
      const df = batch.recordF64(batch.count);
      const di = batch.recordI32(batch.count);
      copyTrigger(r.f64, r.i32, sf, si, batch.f64, batch.i32, df, di);
      batch.f64[df + DREC_TIME_NS_F64] = r.f64[sf + DREC_TIME_NS_F64]!;
      batch.f64[df + DREC_ORDINAL_F64] = idx;
      batch.i32[di + DREC_REASON_I32] = r.i32[si + DREC_REASON_I32]!;
      batch.i32[di + DREC_ATTEMPTS_I32] = r.i32[si + DREC_ATTEMPTS_I32]! + 1;
      r.markSending(idx);
      batch.count++;
    }
  }

  private complete(slot: number, result: SinkResult): void {
    const nowNs = this.clock();
    const permit = this.permits[slot]!;
    this.permits[slot] = NO_PERMIT;
    const batch = this.batches[slot]!;
    const outcome = classifyResult(result);
    const pause = result.retryAfterMs !== undefined && result.retryAfterMs > 0;
    // The limiter's sample ends where the downstream's own work ended, when the sink measured it.
    const sampleEndNs = result.serviceNs !== undefined && result.serviceNs >= 0 ? batch.sentAtNs + result.serviceNs : nowNs;
    if (outcome === Outcome.OK) {
      this.limiter.releaseSuccess(permit, sampleEndNs);
      this.breaker.onSuccess(nowNs);
    } else if (outcome === Outcome.LOSS) {
      this.limiter.releaseDropped(permit, sampleEndNs);
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
    if (outcome !== Outcome.OK) this.credits.giveBack(batch.count);
    if (result.credits !== undefined) this.credits.advertise(result.credits);
    if (batch.replay) this.completeReplay(batch, outcome);
    else this.completeLive(batch, outcome, nowNs);
    if (outcome === Outcome.OK && this.onDelivered !== undefined) this.onDelivered(this.index, batch, nowNs);
    batch.count = 0;
    this.pump(nowNs);
  }

  private completeLive(batch: TriggerBatch, outcome: Outcome, nowNs: number): void {
    const n = batch.count;
    this.sendingTriggers -= n;
    if (outcome === Outcome.OK) {
      this.delivered += n;
      return;
    }
    const reason = outcome === Outcome.REJECTED ? DeadLetterReason.REJECTED : DeadLetterReason.UNDELIVERABLE;
    const retry = outcome !== Outcome.REJECTED && this.breaker.state === BreakerState.CLOSED;
    // Back to the front in reverse order, so the batch keeps its order.
    for (let i = n - 1; i >= 0; i--) {
      const f = batch.recordF64(i);
      const k = batch.recordI32(i);
      const attempts = batch.i32[k + DREC_ATTEMPTS_I32]!;
      if (retry && attempts < this.maxAttempts && this.queue.pushFront(batch.f64, batch.i32, f, k, batch.f64[f + DREC_TIME_NS_F64]!, attempts)) continue;
      this.toDeadLetter(batch.f64, batch.i32, f, k, reason, attempts, nowNs);
    }
  }

  private completeReplay(batch: TriggerBatch, outcome: Outcome): void {
    const r = this.replay!;
    const n = batch.count;
    this.replaySending -= n;
    for (let i = 0; i < n; i++) {
      const idx = batch.ordinal(i);
      if (outcome === Outcome.OK) {
        this.replayed++;
        r.markDone(idx);
      } else if (outcome === Outcome.REJECTED) {
        this.replayRejected++;
        r.markDone(idx);
      } else {
        r.markFailed(idx);
      }
    }
  }

  private toDeadLetter(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    reason: number,
    attempts: number,
    nowNs: number,
  ): void {
    this.pendingFlush++;
    this.deadLetteredByReason[reason] = this.deadLetteredByReason[reason]! + 1;
    this.dlq.deadLetter(srcF64, srcI32, baseF64, baseI32, this.index, reason, attempts, nowNs);
  }
}
