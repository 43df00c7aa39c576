/**
 * A simulated downstream: `workers` requests served at once, a FIFO queue of at most `queueLimit` more in front of
 * them (a request beyond that is refused at once, as a 503), and a service time per request drawn from a seeded
 * distribution. Its latency is flat while a worker is free and rises with the queue, which is what a latency-based
 * limit reads. Capacity (the worker count) and injected faults (errors, answers that never come) change at run time.
 *
 * What it measures, on the virtual clock: utilisation of true capacity (the integral of min(busy, workers) over the
 * integral of workers; a request still in service after the worker count drops counts only up to the new count),
 * each request's queue wait, and per-window figures for overload episodes (see `takeWindow`).
 */
import type { Simulation, SimTarget } from '../engine/simulation.js';
import type { ServiceDistribution, SimRandom } from '../random/random.js';
import { DurationHistogram } from '../stats/histogram.js';

/** How a request ended at the downstream. */
export const Answer = {
  /** Served. */
  OK: 0,
  /** Served with an error (injected). */
  ERROR: 1,
  /** Refused at once: the queue was full. */
  REFUSED: 2,
} as const;
/** An Answer value. */
export type Answer = (typeof Answer)[keyof typeof Answer];

/** Whoever sends requests to the downstream; hears every answer (a lost request is never answered). */
export interface DownstreamClient {
  /** The answer to request `token`, at `nowNs`. */
  onAnswer(token: number, answer: Answer, nowNs: number): void;
}

/** Fixed properties of a simulated downstream. */
export interface SimDownstreamSpec {
  /** Mean service time, ns. */
  serviceMeanNs: number;
  /** Shape of the service time. */
  serviceDistribution: ServiceDistribution;
  /** Lognormal sigma or uniform jitter fraction (ignored by exponential). */
  serviceSpread: number;
  /** Requests that may wait for a worker; one more is refused. */
  queueLimit: number;
  /** Time added to every answer (the network both ways), ns. */
  networkNs: number;
  /** An injected error is answered after this fraction of a drawn service time (a failing service answers fast). */
  errorLatencyFraction: number;
}

const EV_SERVICE_END = 0;
const EV_ANSWER = 1;
/** Answers are packed into an event's argument as token * 4 + fate (an Answer, or FATE_LOST). */
const ANSWER_SHIFT = 4;
/** The fate of a request whose answer is lost (injected): it is served, and never answered. */
const FATE_LOST = 3;
const INITIAL_QUEUE = 256;

/** One simulated downstream (see the module comment). */
export class SimulatedDownstream implements SimTarget {
  private readonly sim: Simulation;
  private readonly id: number;
  private readonly spec: SimDownstreamSpec;
  private readonly random: SimRandom;
  private client: DownstreamClient | null = null;
  private workerCount: number;
  private busyCount = 0;
  private errorRate = 0;
  private lostRate = 0;
  // FIFO of waiting requests: token, arrival time and fate (a ring that doubles when full).
  private qToken = new Float64Array(INITIAL_QUEUE);
  private qArrivalNs = new Float64Array(INITIAL_QUEUE);
  private qHead = 0;
  private qCount = 0;
  private lastAdvanceNs = 0;
  /** Integral of min(busy, workers) over time, worker-ns. */
  busyIntegral = 0;
  /** Integral of workers over time, worker-ns. */
  capacityIntegral = 0;
  /** Requests served (answered OK or ERROR). */
  served = 0;
  /** Requests refused (queue full). */
  refused = 0;
  /** Injected errors answered. */
  errors = 0;
  /** Requests whose answer was lost (injected). */
  lost = 0;
  /** Queue waits (arrival to start of service) of every request served. */
  readonly waits = new DurationHistogram();
  // The current window's figures (see takeWindow()).
  private windowWaitSumNs = 0;
  private windowStarts = 0;
  private windowRefused = 0;

  /** Builds a downstream with `workers` workers, drawing service times and faults from `random`. */
  constructor(sim: Simulation, spec: SimDownstreamSpec, workers: number, random: SimRandom) {
    this.sim = sim;
    this.id = sim.register(this);
    this.spec = spec;
    this.random = random;
    this.workerCount = workers;
  }

  /** Sets the client that hears the answers (one client per downstream). */
  connect(client: DownstreamClient): void {
    this.client = client;
  }

  /** Current worker count (the true capacity in concurrent requests). */
  get workers(): number {
    return this.workerCount;
  }

  /** Requests being served now. */
  get busy(): number {
    return this.busyCount;
  }

  /** Requests waiting for a worker now. */
  get queued(): number {
    return this.qCount;
  }

  /** Changes the worker count at `nowNs`; requests in service finish, queued ones start as workers free up. */
  setWorkers(workers: number, nowNs: number): void {
    this.advance(nowNs);
    this.workerCount = workers;
    this.startWaiting(nowNs);
  }

  /** Sets the injected fault rates from now on: answered errors and answers lost (the caller times out). */
  setFaults(errorRate: number, lostRate: number): void {
    this.errorRate = errorRate;
    this.lostRate = lostRate;
  }

  /** A request `token` arrives at `nowNs`: served at once, queued, or refused. */
  submit(token: number, nowNs: number): void {
    if (this.busyCount < this.workerCount && this.qCount === 0) {
      this.start(token, nowNs, nowNs);
      return;
    }
    if (this.qCount >= this.spec.queueLimit) {
      this.refused++;
      this.windowRefused++;
      this.sim.after(this.spec.networkNs, this.id, EV_ANSWER, token * ANSWER_SHIFT + Answer.REFUSED);
      return;
    }
    if (this.qCount === this.qToken.length) this.growQueue();
    const i = (this.qHead + this.qCount) % this.qToken.length;
    this.qToken[i] = token;
    this.qArrivalNs[i] = nowNs;
    this.qCount++;
  }

  /** Brings the utilisation integrals up to `nowNs`. */
  advance(nowNs: number): void {
    const dt = nowNs - this.lastAdvanceNs;
    if (dt <= 0) return;
    const w = this.workerCount;
    this.busyIntegral += (this.busyCount < w ? this.busyCount : w) * dt;
    this.capacityIntegral += w * dt;
    this.lastAdvanceNs = nowNs;
  }

  /**
   * The figures since the last call, and a fresh window: requests that started service, their mean queue wait (ns),
   * and requests refused.
   */
  takeWindow(out: Float64Array): void {
    out[0] = this.windowStarts;
    out[1] = this.windowStarts === 0 ? 0 : this.windowWaitSumNs / this.windowStarts;
    out[2] = this.windowRefused;
    this.windowStarts = 0;
    this.windowWaitSumNs = 0;
    this.windowRefused = 0;
  }

  /** Handles service ends and answers. */
  onEvent(kind: number, arg: number, nowNs: number): void {
    if (kind === EV_SERVICE_END) {
      this.advance(nowNs);
      this.busyCount--;
      this.startWaiting(nowNs);
      // The answer's fate was drawn at the start of service and travels in the argument.
      const answer = arg % ANSWER_SHIFT;
      const token = (arg - answer) / ANSWER_SHIFT;
      if (answer === FATE_LOST) {
        this.lost++;
        return;
      }
      this.served++;
      if (answer === Answer.ERROR) this.errors++;
      if (this.spec.networkNs > 0) this.sim.after(this.spec.networkNs, this.id, EV_ANSWER, arg);
      else this.client!.onAnswer(token, answer as Answer, nowNs);
      return;
    }
    const answer = arg % ANSWER_SHIFT;
    this.client!.onAnswer((arg - answer) / ANSWER_SHIFT, answer as Answer, nowNs);
  }

  /** Starts queued requests while workers are free. */
  private startWaiting(nowNs: number): void {
    while (this.busyCount < this.workerCount && this.qCount > 0) {
      const i = this.qHead;
      this.qHead = (this.qHead + 1) % this.qToken.length;
      this.qCount--;
      this.start(this.qToken[i]!, this.qArrivalNs[i]!, nowNs);
    }
  }

  private start(token: number, arrivalNs: number, nowNs: number): void {
    this.advance(nowNs);
    this.busyCount++;
    const waitNs = nowNs - arrivalNs;
    this.waits.add(waitNs);
    this.windowWaitSumNs += waitNs;
    this.windowStarts++;
    const s = this.spec;
    let serviceNs = this.random.service(s.serviceDistribution, s.serviceMeanNs, s.serviceSpread);
    // Every request draws its fate, faults or not, so the service times of a run do not depend on the fault rates.
    const u = this.random.uniform();
    let answer = Answer.OK as number;
    if (u < this.lostRate) answer = FATE_LOST;
    else if (u < this.lostRate + this.errorRate) {
      answer = Answer.ERROR;
      serviceNs *= s.errorLatencyFraction;
    }
    this.sim.after(serviceNs < 1 ? 1 : serviceNs, this.id, EV_SERVICE_END, token * ANSWER_SHIFT + answer);
  }

  private growQueue(): void {
    const n = this.qToken.length * 2;
    const t = new Float64Array(n);
    const a = new Float64Array(n);
    for (let k = 0; k < this.qCount; k++) {
      const i = (this.qHead + k) % this.qToken.length;
      t[k] = this.qToken[i]!;
      a[k] = this.qArrivalNs[i]!;
    }
    this.qToken = t;
    this.qArrivalNs = a;
    this.qHead = 0;
  }
}
