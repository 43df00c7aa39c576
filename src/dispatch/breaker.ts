/**
 * Circuit breaker for one downstream: decides whether to send at all (the limiter decides how much).
 *
 * CLOSED: requests pass; outcomes fill a window of the last `windowSize` results. It opens when at least
 * `minimumRequests` outcomes are in the window and the failure fraction reaches `failureRateThreshold`, or after
 * `refusalsToOpen` consecutive refused connections. OPEN: nothing passes until `openDurationNs` has elapsed; then
 * HALF_OPEN grants exactly one probe. The probe's success closes the breaker (window cleared); its failure reopens
 * it with the open duration doubled (up to `maxOpenDurationNs`). Time is passed in; nothing here allocates.
 */
import { checkNumber, withDefaults } from './validate.js';

/** Breaker states (also the metric value). */
export const BreakerState = {
  CLOSED: 0,
  OPEN: 1,
  HALF_OPEN: 2,
} as const;
/** A BreakerState value. */
export type BreakerState = (typeof BreakerState)[keyof typeof BreakerState];
/** Breaker state names indexed by value. */
export const BREAKER_STATE_NAMES = ['closed', 'open', 'half_open'] as const;

/** Options of CircuitBreaker. */
export interface BreakerOptions {
  /** Failure fraction of the window that opens the breaker, in (0, 1]. */
  failureRateThreshold: number;
  /** Outcomes needed in the window before the rate is trusted. */
  minimumRequests: number;
  /** Outcomes remembered. */
  windowSize: number;
  /** Consecutive refused connections that open the breaker at once. */
  refusalsToOpen: number;
  /** First open period, ns. */
  openDurationNs: number;
  /** Longest open period after repeated failed probes, ns. */
  maxOpenDurationNs: number;
}

/** Defaults of CircuitBreaker. */
export const BREAKER_DEFAULTS: Readonly<BreakerOptions> = {
  failureRateThreshold: 0.5,
  minimumRequests: 10,
  windowSize: 50,
  refusalsToOpen: 2,
  openDurationNs: 1e9,
  maxOpenDurationNs: 30e9,
};

/** A circuit breaker (see the module comment). */
export class CircuitBreaker {
  private readonly o: BreakerOptions;
  private readonly outcomes: Uint8Array;
  private outcomeCount = 0;
  private outcomeHead = 0;
  private failures = 0;
  private consecutiveRefusals = 0;
  private currentState: BreakerState = BreakerState.CLOSED;
  private openUntilNs = 0;
  private currentOpenNs: number;
  private probeInFlight = false;
  /** Times the breaker opened. */
  opens = 0;

  /** Validates every option (see BreakerOptions). */
  constructor(options?: Partial<BreakerOptions>) {
    const o = withDefaults(BREAKER_DEFAULTS, options);
    checkNumber('breaker.failureRateThreshold', o.failureRateThreshold, 0.01, 1);
    checkNumber('breaker.windowSize', o.windowSize, 1, 1e5, true);
    checkNumber('breaker.minimumRequests', o.minimumRequests, 1, o.windowSize, true);
    checkNumber('breaker.refusalsToOpen', o.refusalsToOpen, 1, 1e6, true);
    checkNumber('breaker.openDurationNs', o.openDurationNs, 1, Number.MAX_SAFE_INTEGER);
    checkNumber('breaker.maxOpenDurationNs', o.maxOpenDurationNs, o.openDurationNs, Number.MAX_SAFE_INTEGER);
    this.o = o;
    this.outcomes = new Uint8Array(o.windowSize);
    this.currentOpenNs = o.openDurationNs;
  }

  /** Current state (OPEN stays OPEN until `allowRequest` is asked after the open period). */
  get state(): BreakerState {
    return this.currentState;
  }

  /** True when the breaker is open and its open period has not yet elapsed at `nowNs`. */
  isBlocking(nowNs: number): boolean {
    return this.currentState === BreakerState.OPEN && nowNs < this.openUntilNs;
  }

  /** When the current open period ends, ns (meaningful while OPEN). */
  get openUntil(): number {
    return this.openUntilNs;
  }

  /**
   * May a request be sent now? CLOSED: yes. OPEN: no, until the open period ends; then the state becomes HALF_OPEN
   * and this call takes the single probe (true). HALF_OPEN: only while no probe is in flight.
   */
  allowRequest(nowNs: number): boolean {
    if (this.currentState === BreakerState.CLOSED) return true;
    if (this.currentState === BreakerState.OPEN) {
      if (nowNs < this.openUntilNs) return false;
      this.currentState = BreakerState.HALF_OPEN;
      this.probeInFlight = false;
    }
    if (this.probeInFlight) return false;
    this.probeInFlight = true;
    return true;
  }

  /** True when the next allowed request is the half-open probe (one request, one trigger batch). */
  get isProbe(): boolean {
    return this.currentState === BreakerState.HALF_OPEN;
  }

  /** Records a success. */
  onSuccess(_nowNs: number): void {
    this.consecutiveRefusals = 0;
    if (this.currentState === BreakerState.HALF_OPEN) {
      this.close();
      return;
    }
    if (this.currentState === BreakerState.CLOSED) this.push(0);
  }

  /** Failures in the window over the window's size (outcomes not yet seen count as successes). */
  get failureFraction(): number {
    return this.failures / this.o.windowSize;
  }

  /** Records a failure; `refused` when the connection itself was refused. */
  onFailure(nowNs: number, refused: boolean): void {
    if (this.currentState === BreakerState.HALF_OPEN) {
      this.currentOpenNs = Math.min(this.o.maxOpenDurationNs, this.currentOpenNs * 2);
      this.open(nowNs);
      return;
    }
    if (this.currentState !== BreakerState.CLOSED) return;
    this.consecutiveRefusals = refused ? this.consecutiveRefusals + 1 : 0;
    this.push(1);
    if (
      this.consecutiveRefusals >= this.o.refusalsToOpen ||
      (this.outcomeCount >= this.o.minimumRequests && this.failures >= this.o.failureRateThreshold * this.outcomeCount)
    ) {
      this.currentOpenNs = this.o.openDurationNs;
      this.open(nowNs);
    }
  }

  /** A request ended without a verdict (e.g. released unsent): a half-open probe may be retried. */
  onIgnored(): void {
    if (this.currentState === BreakerState.HALF_OPEN) this.probeInFlight = false;
  }

  private push(failed: number): void {
    const n = this.o.windowSize;
    if (this.outcomeCount === n) this.failures -= this.outcomes[this.outcomeHead]!;
    else this.outcomeCount++;
    this.outcomes[this.outcomeHead] = failed;
    this.failures += failed;
    this.outcomeHead = (this.outcomeHead + 1) % n;
  }

  private open(nowNs: number): void {
    this.currentState = BreakerState.OPEN;
    this.openUntilNs = nowNs + this.currentOpenNs;
    this.probeInFlight = false;
    this.opens++;
  }

  private close(): void {
    this.currentState = BreakerState.CLOSED;
    this.probeInFlight = false;
    this.currentOpenNs = this.o.openDurationNs;
    this.outcomeCount = 0;
    this.outcomeHead = 0;
    this.failures = 0;
    this.consecutiveRefusals = 0;
  }
}
