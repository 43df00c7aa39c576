import type { Limit } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/**
 * The growth allowance as a function of the current limit (whole requests), returning requests; library only, not a
 * config value. Return whole numbers (the Java function is an int function) to keep the update allocation-free.
 */
export type QueueSizeFunction = (limit: number) => number;

/** Options of Gradient2Limit. */
export interface Gradient2LimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor, never zero. */
  minLimit: number;
  /** Ceiling (the Netflix builder's `maxConcurrency`). */
  maxLimit: number;
  /** Weight of the new estimate, in (0, 1]; 1 replaces the limit outright. */
  smoothing: number;
  /**
   * Growth allowance added to `L * gradient`: a number of requests, or a function of the current limit (whole
   * requests) returning one (library only: a config file gives a number).
   */
  queueSize: number | QueueSizeFunction;
  /**
   * How much slower than the long-term RTT a sample may be before the limit shrinks, >= 1: 2 accepts twice the
   * long-term RTT as no queue.
   */
  rttTolerance: number;
  /** Samples in the long RTT's exponential average (factor 2 / (n + 1)). */
  longWindow: number;
  /** Samples averaged plainly before the exponential average starts (10 in the Netflix library, not settable there). */
  warmupWindow: number;
}

/**
 * Defaults of Gradient2Limit: the Netflix library's (initial 20, ceiling 200, smoothing 0.2, queue size 4, tolerance
 * 1.5, long window 600, warm-up 10) except the floor, 1 here and 20 there.
 */
export const GRADIENT2_LIMIT_DEFAULTS: Readonly<Gradient2LimitOptions> = {
  initialLimit: 20,
  minLimit: 1,
  maxLimit: 200,
  smoothing: 0.2,
  queueSize: 4,
  rttTolerance: 1.5,
  longWindow: 600,
  warmupWindow: 10,
};

/** The long RTT is cut when it is more than this many times the sample's RTT (a queue that has drained). */
const LONG_RTT_DECAY_RATIO = 2;
/** What the long RTT is multiplied by then. */
const LONG_RTT_DECAY = 0.95;
/** Lower clamp of the gradient: one sample can at most halve `L * gradient`. */
const MIN_GRADIENT = 0.5;

/**
 * Gradient2 as the Netflix concurrency-limits library defines it today: compares each sample's RTT with a long-term
 * exponential average of RTT instead of a minimum, so a drifting baseline needs no reset. Every sample is one update
 * (run it on windows of samples with WindowedLimit).
 *
 * For each sample with `rtt > 0`, `L` the current estimate and `q = queueSize` (or `queueSize(trunc(L))`):
 * - `long = EMA(rtt, 2 / (longWindow + 1))`, a plain mean for the first `warmupWindow` samples;
 * - when `long / rtt > 2`, the kept long RTT is multiplied by 0.95 (a drained queue leaves the average high for long);
 *   this sample still uses the value before the cut;
 * - when `inflight < L / 2` the estimate is kept (the caller, not the downstream, is the constraint);
 * - otherwise `gradient = max(0.5, min(1, rttTolerance * long / rtt))`, `L' = L * gradient + q`,
 *   `L = clamp((1 - smoothing) * L + smoothing * L', minLimit, maxLimit)`.
 *
 * `limit` is `floor(L)`. Loss is not an input of this algorithm. Differences from the Java class: the floor defaults to
 * 1 (20 there); a sample with `rtt <= 0` is ignored (there it would make the estimate NaN); the warm-up length is an
 * option.
 */
export class Gradient2Limit implements Limit {
  private readonly sampleCell = new Float64Array(2);
  private readonly options: Gradient2LimitOptions;
  /** The constant growth allowance; unused when `queueSizeOf` is set. */
  private readonly queueSizeConstant: number;
  private readonly queueSizeOf: QueueSizeFunction | null;
  private estimate: number;
  private longRttNs = 0;
  private longSumNs = 0;
  private longCount = 0;

  /** Validates every option (see Gradient2LimitOptions). */
  constructor(options?: Partial<Gradient2LimitOptions>) {
    refuseUnknownOptions(GRADIENT2_LIMIT_DEFAULTS, options, 'Gradient2 limit');
    const o = withDefaults(GRADIENT2_LIMIT_DEFAULTS, options);
    checkNumber('options.minLimit', o.minLimit, 1, 1e6, true);
    checkNumber('options.maxLimit', o.maxLimit, o.minLimit, 1e6, true);
    checkNumber('options.initialLimit', o.initialLimit, o.minLimit, o.maxLimit, true);
    checkNumber('options.smoothing', o.smoothing, 1e-6, 1);
    if (typeof o.queueSize === 'function') {
      this.queueSizeOf = o.queueSize;
      this.queueSizeConstant = 0;
    } else {
      this.queueSizeOf = null;
      this.queueSizeConstant = checkNumber('options.queueSize', o.queueSize, 0, 1e6);
    }
    checkNumber('options.rttTolerance', o.rttTolerance, 1, 1e6);
    checkNumber('options.longWindow', o.longWindow, 1, 1e7, true);
    checkNumber('options.warmupWindow', o.warmupWindow, 0, 1e7, true);
    this.options = o;
    this.estimate = o.initialLimit;
  }

  /** Current limit (whole requests). */
  get limit(): number {
    return Math.max(this.options.minLimit, Math.floor(this.estimate));
  }

  /** The long-term RTT average, ns (NaN before the first sample). */
  get referenceRttNs(): number {
    return this.longCount === 0 ? NaN : this.longRttNs;
  }

  /** See the class comment for the rule. A small trampoline (doubles through a typed cell) so callers inline it. */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void {
    this.sampleCell[0] = startNs;
    this.sampleCell[1] = rttNs;
    this.step(inflight, didDrop);
  }

  private step(inflight: number, _didDrop: boolean): void {
    const rttNs = this.sampleCell[1]!;
    if (!(rttNs > 0)) return;
    const o = this.options;
    const L = this.estimate;
    // The allowance is taken from the limit before this sample, as the Java class does.
    const queueSize = this.queueSizeOf === null ? this.queueSizeConstant : this.queueSizeOf(Math.trunc(L));
    // warmupWindow 0 still lets the first sample seed the average (an average starting at 0 would mean nothing).
    if (this.longCount < o.warmupWindow || this.longCount === 0) {
      this.longCount++;
      this.longSumNs += rttNs;
      this.longRttNs = this.longSumNs / this.longCount;
    } else {
      const f = 2 / (o.longWindow + 1);
      this.longRttNs = this.longRttNs * (1 - f) + rttNs * f;
    }
    const longRttNs = this.longRttNs;
    if (longRttNs / rttNs > LONG_RTT_DECAY_RATIO) this.longRttNs = longRttNs * LONG_RTT_DECAY;
    if (inflight < L / 2) return;
    const gradient = Math.max(MIN_GRADIENT, Math.min(1, (o.rttTolerance * longRttNs) / rttNs));
    const target = L * gradient + queueSize;
    this.estimate = Math.max(o.minLimit, Math.min(o.maxLimit, L * (1 - o.smoothing) + target * o.smoothing));
  }
}
