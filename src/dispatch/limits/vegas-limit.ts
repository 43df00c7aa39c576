import { seededRandom, type Limit, type RandomSource } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/** Options of VegasLimit. */
export interface VegasLimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor, never zero. */
  minLimit: number;
  /** Ceiling. */
  maxLimit: number;
  /** Weight of the new estimate, in (0, 1]; 1 replaces the limit outright. */
  smoothing: number;
  /** The no-load RTT is re-probed every `probeMultiplier * L * jitter` samples, jitter uniform in [0.5, 1). */
  probeMultiplier: number;
  /** Seed of the probe jitter when no `random` is given. */
  seed: number;
  /** Injected randomness for the probe jitter (overrides `seed`). */
  random: RandomSource | undefined;
}

/** Defaults of VegasLimit (the Netflix library's, with a floor of 1). */
export const VEGAS_LIMIT_DEFAULTS: Readonly<VegasLimitOptions> = {
  initialLimit: 20,
  minLimit: 1,
  maxLimit: 1000,
  smoothing: 1,
  probeMultiplier: 30,
  seed: 0x5eed,
  random: undefined,
};

/**
 * TCP Vegas applied to concurrency, as the Netflix concurrency-limits library defines it.
 *
 * `rttNoLoad` is the smallest RTT seen since the last probe; every `probeMultiplier * L * jitter` samples it is reset
 * to the current sample. With `q = ceil(L * (1 - rttNoLoad / rtt))` (the estimated queue) and `lg = log10(L)`
 * (at least 1): alpha = 3 lg, beta = 6 lg, threshold = lg.
 * - loss: `L' = L - lg`
 * - `inflight * 2 < L`: unchanged (app-limited)
 * - `q <= threshold`: `L' = L + beta`; `q < alpha`: `L' = L + lg`; `q > beta`: `L' = L - lg`; otherwise unchanged.
 * Then `L = (1 - smoothing) L + smoothing * clamp(L', minLimit, maxLimit)`.
 */
export class VegasLimit implements Limit {
  private readonly sampleCell = new Float64Array(2);
  private readonly options: VegasLimitOptions;
  private readonly random: RandomSource;
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
    const lg = Math.max(1, Math.floor(Math.log10(L)));
    let next: number;
    if (didDrop) {
      next = L - lg;
    } else if (inflight * 2 < L) {
      return;
    } else {
      const queue = Math.ceil(L * (1 - this.rttNoLoadNs / rttNs));
      if (queue <= lg) next = L + 6 * lg;
      else if (queue < 3 * lg) next = L + lg;
      else if (queue > 6 * lg) next = L - lg;
      else return;
    }
    next = Math.max(o.minLimit, Math.min(o.maxLimit, next));
    this.estimate = (1 - o.smoothing) * L + o.smoothing * next;
  }
}
