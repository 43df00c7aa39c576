/**
 * The router's side of one downstream, simulated around the production parts: triggers wait in a FIFO queue, and
 * each is sent only when the real `CircuitBreaker` allows a request and the real `Limiter` (with whatever real
 * `Limit` it was built with) grants a permit. The permit is taken at the send and released at the answer, so the RTT
 * the limit sees is send to answer, never the wait for a permit.
 *
 * One trigger per request. An answer that does not come within `timeoutNs` is a timeout: the permit is released as
 * loss at send + timeout and a late answer is ignored. A failed attempt (error, refusal, timeout) puts the trigger
 * back at the head of the queue until `maxAttempts`; a trigger not sent within `deadlineNs` of its arrival, one out
 * of attempts, and one still queued at the end are deferred (the router would dead-letter them for replay).
 */
import { CircuitBreaker } from '../../dispatch/breaker.js';
import { Limiter, NO_PERMIT } from '../../dispatch/limiter.js';
import type { Simulation, SimTarget } from '../engine/simulation.js';
import { Answer, type DownstreamClient, type SimulatedDownstream } from '../downstream/simulated-downstream.js';
import type { ArrivalSink } from '../traffic/poisson-arrivals.js';
import { DurationHistogram } from '../stats/histogram.js';

/** Fixed properties of a client. */
export interface ClientSpec {
  /** A trigger not sent within this of its arrival is deferred, ns. */
  deadlineNs: number;
  /** An answer later than this after the send is a timeout, ns. */
  timeoutNs: number;
  /** Attempts per trigger before it is deferred. */
  maxAttempts: number;
}

const EV_TIMEOUT = 0;
const EV_WAKE = 1;
const INITIAL_QUEUE = 1024;

/** One downstream's sending side (see the module comment). */
export class LimitedClient implements SimTarget, DownstreamClient, ArrivalSink {
  /** The production limiter in front of the downstream. */
  readonly limiter: Limiter;
  /** The production circuit breaker in front of the downstream. */
  readonly breaker: CircuitBreaker;
  private readonly sim: Simulation;
  private readonly id: number;
  private readonly downstream: SimulatedDownstream;
  private readonly spec: ClientSpec;
  // Waiting triggers: arrival time and attempts so far (a deque that doubles when full; retries go to the front).
  private qArrivalNs = new Float64Array(INITIAL_QUEUE);
  private qAttempts = new Uint8Array(INITIAL_QUEUE);
  private qHead = 0;
  private qCount = 0;
  // Per permit slot: the trigger in flight.
  private readonly sentNs: Float64Array;
  private readonly arrivalNs: Float64Array;
  private readonly attempts: Uint8Array;
  // Permits in send order, for timeouts (which fire in send order); a ring that doubles when full.
  private outPermits = new Float64Array(INITIAL_QUEUE);
  private outHead = 0;
  private outCount = 0;
  private timerArmed = false;
  private wakeArmed = false;
  private lastAdvanceNs = 0;
  /** Integral of requests in flight over time, request-ns. */
  inflightIntegral = 0;
  /** Triggers offered. */
  offered = 0;
  /** Triggers delivered (answered OK). */
  delivered = 0;
  /** Triggers deferred (see the module comment). */
  deferred = 0;
  /** Attempts answered with an error. */
  errors = 0;
  /** Attempts refused by the downstream. */
  refusals = 0;
  /** Attempts timed out. */
  timeouts = 0;
  // The current window's figures (see takeWindow()).
  private windowTimeouts = 0;
  private windowRttSumNs = 0;
  private windowRttCount = 0;
  /** RTT (send to answer, or to the timeout) of every attempt. */
  readonly rtts = new DurationHistogram();

  /** A client of `downstream` whose sends go through `limiter` and `breaker`. */
  constructor(
    sim: Simulation,
    downstream: SimulatedDownstream,
    limiter: Limiter,
    breaker: CircuitBreaker,
    spec: ClientSpec,
  ) {
    this.sim = sim;
    this.id = sim.register(this);
    this.downstream = downstream;
    this.limiter = limiter;
    this.breaker = breaker;
    this.spec = spec;
    this.sentNs = new Float64Array(limiter.slotCount);
    this.arrivalNs = new Float64Array(limiter.slotCount);
    this.attempts = new Uint8Array(limiter.slotCount);
    downstream.connect(this);
  }

  /** Triggers waiting to be sent. */
  get queued(): number {
    return this.qCount;
  }

  /** A trigger arrives: queued, then sent if a permit is free. */
  onArrival(nowNs: number): void {
    this.offered++;
    this.pushBack(nowNs, 0);
    this.pump(nowNs);
  }

  /** The downstream's answer to the request holding `permit`. */
  onAnswer(permit: number, answer: Answer, nowNs: number): void {
    // Released already: the answer came after the timeout.
    if (!this.limiter.isLive(permit)) return;
    this.advance(nowNs);
    const slot = this.limiter.slotOf(permit);
    this.noteRtt(nowNs - this.sentNs[slot]!);
    if (answer === Answer.OK) {
      this.limiter.releaseSuccess(permit, nowNs);
      this.breaker.onSuccess(nowNs);
      this.delivered++;
    } else {
      if (answer === Answer.ERROR) this.errors++;
      else this.refusals++;
      this.limiter.releaseDropped(permit, nowNs);
      this.breaker.onFailure(nowNs, false);
      this.retry(slot);
    }
    this.pump(nowNs);
  }

  /** Timeouts and breaker wake-ups. */
  onEvent(kind: number, _arg: number, nowNs: number): void {
    if (kind === EV_WAKE) {
      this.wakeArmed = false;
      this.pump(nowNs);
      return;
    }
    this.timerArmed = false;
    const timeoutNs = this.spec.timeoutNs;
    while (this.outCount > 0) {
      const permit = this.outPermits[this.outHead]!;
      if (this.limiter.isLive(permit)) {
        const slot = this.limiter.slotOf(permit);
        if (this.sentNs[slot]! + timeoutNs > nowNs) break;
        this.advance(nowNs);
        this.timeouts++;
        this.windowTimeouts++;
        this.noteRtt(timeoutNs);
        this.limiter.releaseDropped(permit, nowNs);
        this.breaker.onFailure(nowNs, false);
        this.retry(slot);
      }
      this.outHead = (this.outHead + 1) % this.outPermits.length;
      this.outCount--;
    }
    this.armTimer();
    this.pump(nowNs);
  }

  /** The figures since the last call, and a fresh window: timeouts, and the mean RTT of the answers (ns, 0: none). */
  takeWindow(out: Float64Array): void {
    out[0] = this.windowTimeouts;
    out[1] = this.windowRttCount === 0 ? 0 : this.windowRttSumNs / this.windowRttCount;
    this.windowTimeouts = 0;
    this.windowRttSumNs = 0;
    this.windowRttCount = 0;
  }

  private noteRtt(rttNs: number): void {
    this.rtts.add(rttNs);
    this.windowRttSumNs += rttNs;
    this.windowRttCount++;
  }

  /** Brings the in-flight integral up to `nowNs`. */
  advance(nowNs: number): void {
    const dt = nowNs - this.lastAdvanceNs;
    if (dt <= 0) return;
    this.inflightIntegral += this.limiter.inflight * dt;
    this.lastAdvanceNs = nowNs;
  }

  /** Ends the run: triggers still queued are deferred. */
  finish(nowNs: number): void {
    this.advance(nowNs);
    this.deferred += this.qCount;
    this.qCount = 0;
  }

  /** Sends queued triggers while the breaker allows and the limiter grants permits; defers the expired. */
  private pump(nowNs: number): void {
    const deadlineNs = this.spec.deadlineNs;
    const limiter = this.limiter;
    while (this.qCount > 0) {
      const arrivalNs = this.qArrivalNs[this.qHead]!;
      if (nowNs - arrivalNs > deadlineNs) {
        this.popFront();
        this.deferred++;
        continue;
      }
      if (!limiter.hasPermit()) return;
      if (!this.breaker.allowRequest(nowNs)) {
        // Open: try again when the open period ends (half-open: the probe's answer pumps).
        if (this.breaker.isBlocking(nowNs) && !this.wakeArmed) {
          this.wakeArmed = true;
          this.sim.at(this.breaker.openUntil, this.id, EV_WAKE);
        }
        return;
      }
      const permit = limiter.tryAcquire(nowNs);
      if (permit === NO_PERMIT) {
        this.breaker.onIgnored();
        return;
      }
      this.advance(nowNs);
      const attempts = this.qAttempts[this.qHead]!;
      this.popFront();
      const slot = limiter.slotOf(permit);
      this.sentNs[slot] = nowNs;
      this.arrivalNs[slot] = arrivalNs;
      this.attempts[slot] = attempts + 1;
      this.pushOutstanding(permit);
      this.downstream.submit(permit, nowNs);
    }
  }

  /** A failed attempt: back to the head of the queue, or deferred when out of attempts. */
  private retry(slot: number): void {
    if (this.attempts[slot]! >= this.spec.maxAttempts) {
      this.deferred++;
      return;
    }
    this.pushFront(this.arrivalNs[slot]!, this.attempts[slot]!);
  }

  private pushOutstanding(permit: number): void {
    if (this.outCount === this.outPermits.length) {
      const n = this.outPermits.length * 2;
      const next = new Float64Array(n);
      for (let k = 0; k < this.outCount; k++) next[k] = this.outPermits[(this.outHead + k) % this.outPermits.length]!;
      this.outPermits = next;
      this.outHead = 0;
    }
    this.outPermits[(this.outHead + this.outCount) % this.outPermits.length] = permit;
    this.outCount++;
    if (!this.timerArmed) this.armTimer();
  }

  /** Arms the timeout timer for the oldest outstanding permit (one timer pending at most). */
  private armTimer(): void {
    while (this.outCount > 0 && !this.limiter.isLive(this.outPermits[this.outHead]!)) {
      this.outHead = (this.outHead + 1) % this.outPermits.length;
      this.outCount--;
    }
    if (this.outCount === 0) return;
    const slot = this.limiter.slotOf(this.outPermits[this.outHead]!);
    this.timerArmed = true;
    this.sim.at(this.sentNs[slot]! + this.spec.timeoutNs, this.id, EV_TIMEOUT);
  }

  private pushBack(arrivalNs: number, attempts: number): void {
    if (this.qCount === this.qArrivalNs.length) this.growQueue();
    const i = (this.qHead + this.qCount) % this.qArrivalNs.length;
    this.qArrivalNs[i] = arrivalNs;
    this.qAttempts[i] = attempts;
    this.qCount++;
  }

  private pushFront(arrivalNs: number, attempts: number): void {
    if (this.qCount === this.qArrivalNs.length) this.growQueue();
    this.qHead = (this.qHead - 1 + this.qArrivalNs.length) % this.qArrivalNs.length;
    this.qArrivalNs[this.qHead] = arrivalNs;
    this.qAttempts[this.qHead] = attempts;
    this.qCount++;
  }

  private popFront(): void {
    this.qHead = (this.qHead + 1) % this.qArrivalNs.length;
    this.qCount--;
  }

  private growQueue(): void {
    const n = this.qArrivalNs.length * 2;
    const a = new Float64Array(n);
    const t = new Uint8Array(n);
    for (let k = 0; k < this.qCount; k++) {
      const i = (this.qHead + k) % this.qArrivalNs.length;
      a[k] = this.qArrivalNs[i]!;
      t[k] = this.qAttempts[i]!;
    }
    this.qArrivalNs = a;
    this.qAttempts = t;
    this.qHead = 0;
  }
}
