import type { Limit } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/** Options of Gradient2Limit. */
export interface Gradient2LimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor, never zero. */
  minLimit: number;
  /** Ceiling. */
  maxLimit: number;
  /** Weight of the new estimate, in (0, 1]. */
  smoothing: number;
  /** Fixed growth allowance added to the estimate while latency stays at the long-term level. */
  queueSize: number;
  /** Samples in the long RTT's exponential average (factor 2 / (n + 1)). */
  longWindow: number;
  /** Samples averaged plainly before the exponential average starts. */
  warmupWindow: number;
}

/** Defaults of Gradient2Limit (the Netflix library's, with a floor of 1 instead of 20). */
export const GRADIENT2_LIMIT_DEFAULTS: Readonly<Gradient2LimitOptions> = {
  initialLimit: 20,
  minLimit: 1,
  maxLimit: 1000,
  smoothing: 0.2,
  queueSize: 4,
  longWindow: 600,
  warmupWindow: 10,
};

/**
 * Gradient2 as the Netflix concurrency-limits library defines it: compares the current RTT with a long-term
 * exponential average of RTT instead of a minimum, so a drifting baseline needs no reset.
 *
 * `short = rtt`, `long = EMA(rtt, 2 / (longWindow + 1))` (plain mean for the first `warmupWindow` samples);
 * when `long / short > 2`, `long *= 0.9` (recovery after a long overload). When `inflight < L / 2` nothing changes.
 * Otherwise `g = clamp(long / short, 0.5, 1)`, `L' = L g + queueSize`,
 * `L = clamp((1 - smoothing) L + smoothing L', minLimit, maxLimit)`. Loss is not an input of this algorithm.
 */
export class Gradient2Limit implements Limit {
  private readonly sampleCell = new Float64Array(2);
  private readonly options: Gradient2LimitOptions;
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
    checkNumber('options.queueSize', o.queueSize, 0, 1e6);
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
    if (this.longCount < o.warmupWindow || this.longCount === 0) {
      this.longCount++;
      this.longSumNs += rttNs;
      this.longRttNs = this.longSumNs / this.longCount;
    } else {
      const f = 2 / (o.longWindow + 1);
      this.longRttNs = this.longRttNs * (1 - f) + rttNs * f;
    }
    if (this.longRttNs / rttNs > 2) this.longRttNs *= 0.9;
    const L = this.estimate;
    if (inflight < L / 2) return;
    const g = Math.max(0.5, Math.min(1, this.longRttNs / rttNs));
    const target = L * g + o.queueSize;
    this.estimate = Math.max(o.minLimit, Math.min(o.maxLimit, L * (1 - o.smoothing) + target * o.smoothing));
  }
}
