import { seededRandom, type Limit, type RandomSource } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/**
 * A Vegas threshold or step as a function of the current limit; library only, not a config value. `alpha`, `beta` and
 * `threshold` are called with the limit in whole requests, `increase` and `decrease` with the estimate (fractional
 * when `smoothing` < 1). Allocation-free as long as numbers in and out are whole (as in the Java library, whose
 * thresholds are int functions); a fractional number passed to or returned from a call the optimizer does not inline
 * is boxed, one small allocation per call.
 */
export type VegasLimitFunction = (limit: number) => number;

/** Options of VegasLimit. */
export interface VegasLimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor, never zero (the Java class has no floor option: it clamps at 1). */
  minLimit: number;
  /** Ceiling (the Netflix builder's `maxConcurrency`). */
  maxLimit: number;
  /** Weight of the new estimate, in (0, 1]; 1 replaces the limit outright. */
  smoothing: number;
  /** The no-load RTT is re-probed every `probeMultiplier * L * jitter` samples, jitter uniform in [0.5, 1). */
  probeMultiplier: number;
  /** Seed of the probe jitter when no `random` is given. */
  seed: number;
  /** Injected randomness for the probe jitter (overrides `seed`). */
  random: RandomSource | undefined;
  /** Below this estimated queue the limit grows to `increase(L)`: requests, or a function of L (absent: `3 lg(L)`). */
  alpha: number | VegasLimitFunction | undefined;
  /** Above this estimated queue the limit shrinks to `decrease(L)`: requests, or a function of L (absent: 6 lg(L)). */
  beta: number | VegasLimitFunction | undefined;
  /** At or below this estimated queue the limit grows by `beta`: requests, or a function of L (absent: `lg(L)`). */
  threshold: number | VegasLimitFunction | undefined;
  /** The next estimate when growing by a step, a function of L (absent: `L + lg(L)`); library only. */
  increase: VegasLimitFunction | undefined;
  /** The next estimate on loss or a long queue, a function of L (absent: `L - lg(L)`); library only. */
  decrease: VegasLimitFunction | undefined;
}

/** Defaults of VegasLimit: the Netflix library's (initial 20, ceiling 1000, smoothing 1, probe multiplier 30). */
export const VEGAS_LIMIT_DEFAULTS: Readonly<VegasLimitOptions> = {
  initialLimit: 20,
  minLimit: 1,
  maxLimit: 1000,
  smoothing: 1,
  probeMultiplier: 30,
  seed: 0x5eed,
  random: undefined,
  alpha: undefined,
  beta: undefined,
  threshold: undefined,
  increase: undefined,
  decrease: undefined,
};

/**
 * How alpha, beta or threshold is held: `constant + perLog * lg(L)` unless a function is given. One shape for the
 * default (a multiple of lg) and a constant, so the hot path neither branches on kinds nor allocates.
 */
interface Threshold {
  readonly fn: VegasLimitFunction | null;
  readonly constant: number;
  readonly perLog: number;
}

/** Validates one of alpha / beta / threshold and gives its shape; `perLog` is the default's multiple of lg(L). */
function thresholdOf(name: string, value: number | VegasLimitFunction | undefined, perLog: number): Threshold {
  if (value === undefined) return { fn: null, constant: 0, perLog };
  if (typeof value === 'function') return { fn: value, constant: 0, perLog: 0 };
  return { fn: null, constant: checkNumber(name, value, 0, 1e6), perLog: 0 };
}

/** The threshold's value at the limit `whole` (whole requests), `lg` being lg of it. */
function valueOf(t: Threshold, whole: number, lg: number): number {
  return t.fn === null ? t.constant + t.perLog * lg : t.fn(whole);
}

/** Throws unless `value` is a function or absent. */
function stepOf(name: string, value: unknown): VegasLimitFunction | null {
  if (value === undefined) return null;
  if (typeof value !== 'function')
    throw new RangeError(`${name} must be a function of the limit (library only), got ${String(value)}`);
  return value as VegasLimitFunction;
}

/**
 * TCP Vegas applied to concurrency, as the Netflix concurrency-limits library defines it. Every sample is one update
 * (run it on windows of samples with WindowedLimit).
 *
 * `rttNoLoad` is the smallest RTT seen since the last probe; every `probeMultiplier * L * jitter` samples it is reset
 * to the current sample (jitter uniform in [0.5, 1), drawn again at each probe). A sample that probes or sets a new
 * smallest RTT changes nothing else. Otherwise, with `L` the estimate, `lg(L) = max(1, floor(log10(L)))` and
 * `queue = ceil(L * (1 - rttNoLoad / rtt))`:
 * - loss: `L' = decrease(L)`
 * - `inflight * 2 < L`: unchanged (the caller, not the downstream, is the constraint)
 * - `queue <= threshold`: `L' = L + beta`; `queue < alpha`: `L' = increase(L)`; `queue > beta`: `L' = decrease(L)`;
 *   otherwise unchanged.
 * Then `L = (1 - smoothing) L + smoothing * clamp(L', minLimit, maxLimit)`; `limit` is `floor(L)`.
 *
 * By default alpha = `3 lg(L)`, beta = `6 lg(L)`, threshold = `lg(L)`, increase = `L + lg(L)`, decrease =
 * `L - lg(L)`; each may be a constant (alpha, beta, threshold) or a function. alpha, beta and threshold are called with
 * `floor(L)` and used as returned (the Java functions return whole numbers); a function that returns NaN leaves the
 * estimate as it was. Differences from the Java class: a floor option (`minLimit`, 1 by default, as the Java clamp); a
 * sample with `rtt <= 0` is ignored (Java throws); the probe jitter comes from an injected or seeded source.
 */
export class VegasLimit implements Limit {
  private readonly sampleCell = new Float64Array(2);
  private readonly options: VegasLimitOptions;
  private readonly random: RandomSource;
  private readonly alpha: Threshold;
  private readonly beta: Threshold;
  private readonly threshold: Threshold;
  private readonly increase: VegasLimitFunction | null;
  private readonly decrease: VegasLimitFunction | null;
  private estimate: number;
  private rttNoLoadNs = 0;
  private probeCount = 0;
  private probeJitter: number;

  /** Validates every option (see VegasLimitOptions). */
  constructor(options?: Partial<VegasLimitOptions>) {
    refuseUnknownOptions(VEGAS_LIMIT_DEFAULTS, options, 'Vegas limit');
    const o = withDefaults(VEGAS_LIMIT_DEFAULTS, options);
    checkNumber('options.minLimit', o.minLimit, 1, 1e6, true);
    checkNumber('options.maxLimit', o.maxLimit, o.minLimit, 1e6, true);
    checkNumber('options.initialLimit', o.initialLimit, o.minLimit, o.maxLimit, true);
    checkNumber('options.smoothing', o.smoothing, 1e-6, 1);
    checkNumber('options.probeMultiplier', o.probeMultiplier, 1, 1e6, true);
    this.alpha = thresholdOf('options.alpha', o.alpha, 3);
    this.beta = thresholdOf('options.beta', o.beta, 6);
    this.threshold = thresholdOf('options.threshold', o.threshold, 1);
    this.increase = stepOf('options.increase', o.increase);
    this.decrease = stepOf('options.decrease', o.decrease);
    this.options = o;
    this.random = o.random ?? seededRandom(o.seed);
    this.estimate = o.initialLimit;
    this.probeJitter = 0.5;
    this.nextJitter();
  }

  /** Draws the next probe jitter (uniform in [0.5, 1)) into its field. */
  private nextJitter(): void {
    this.probeJitter = 0.5 + this.random() * 0.5;
  }

  /** Current limit (whole requests). */
  get limit(): number {
    return Math.max(this.options.minLimit, Math.floor(this.estimate));
  }

  /** The no-load RTT, ns (NaN before the first sample). */
  get referenceRttNs(): number {
    return this.rttNoLoadNs === 0 ? NaN : this.rttNoLoadNs;
  }

  /** See the class comment for the rule. A small trampoline (doubles through a typed cell) so callers inline it. */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void {
    this.sampleCell[0] = startNs;
    this.sampleCell[1] = rttNs;
    this.step(inflight, didDrop);
  }

  private step(inflight: number, didDrop: boolean): void {
    const rttNs = this.sampleCell[1]!;
    if (!(rttNs > 0)) return;
    const o = this.options;
    this.probeCount++;
    if (this.probeJitter * o.probeMultiplier * this.estimate <= this.probeCount) {
      // Forced re-probe: the next baseline is whatever the downstream does now.
      this.nextJitter();
      this.probeCount = 0;
      this.rttNoLoadNs = rttNs;
      return;
    }
    if (this.rttNoLoadNs === 0 || rttNs < this.rttNoLoadNs) {
      this.rttNoLoadNs = rttNs;
      return;
    }
    const L = this.estimate;
    const whole = Math.floor(L);
    const lg = Math.max(1, Math.floor(Math.log10(whole)));
    let next: number;
    if (didDrop) {
      next = this.decrease === null ? L - lg : this.decrease(L);
    } else if (inflight * 2 < L) {
      return;
    } else {
      const queue = Math.ceil(L * (1 - this.rttNoLoadNs / rttNs));
      const alpha = valueOf(this.alpha, whole, lg);
      const beta = valueOf(this.beta, whole, lg);
      const threshold = valueOf(this.threshold, whole, lg);
      if (queue <= threshold) next = L + beta;
      else if (queue < alpha) next = this.increase === null ? L + lg : this.increase(L);
      else if (queue > beta) next = this.decrease === null ? L - lg : this.decrease(L);
      else return;
    }
    // A function that returned NaN leaves the estimate as it was.
    if (Number.isNaN(next)) return;
    next = Math.max(o.minLimit, Math.min(o.maxLimit, next));
    this.estimate = (1 - o.smoothing) * L + o.smoothing * next;
  }
}
