import type { Limit } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/** Options of AimdLimit. */
export interface AimdLimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor, never zero. */
  minLimit: number;
  /** Ceiling. */
  maxLimit: number;
  /** Multiplier applied on loss, in [0.5, 1). */
  backoffRatio: number;
  /** A sample slower than this counts as loss, ns (the Netflix builder's `timeout`). */
  timeoutNs: number;
}

/**
 * Defaults of AimdLimit: the Netflix library's (initial 20, ceiling 200, backoff 0.9, timeout 5 s) except the floor,
 * 1 here and 20 there.
 */
export const AIMD_LIMIT_DEFAULTS: Readonly<AimdLimitOptions> = {
  initialLimit: 20,
  minLimit: 1,
  maxLimit: 200,
  backoffRatio: 0.9,
  timeoutNs: 5e9,
};

/**
 * Additive increase, multiplicative decrease, driven by loss only, as the Netflix concurrency-limits library defines
 * it. The limit is a whole number; on each sample:
 * - loss (`didDrop`, or `rtt > timeoutNs`: a timeout is a drop): `L = max(minLimit, floor(L * backoffRatio))`, always
 *   at least one less since the ratio is below 1 (down to the floor);
 * - else, when the limit is in use (`inflight * 2 >= L`): `L = min(maxLimit, L + 1)`;
 * - else unchanged (a pipeline at under half its limit says nothing about capacity).
 *
 * Differences from the Java class: the floor defaults to 1 (20 there) and may not be 0 (a limit of 0 would admit
 * nothing, and the Limit contract keeps at least 1); `initialLimit` must lie within [minLimit, maxLimit] (there it
 * only logs a warning, and the first sample clamps it).
 */
export class AimdLimit implements Limit {
  private readonly sampleCell = new Float64Array(2);
  private readonly options: AimdLimitOptions;
  private current: number;
  /** AIMD keeps no reference RTT. */
  readonly referenceRttNs = NaN;

  /** Validates every option (see AimdLimitOptions). */
  constructor(options?: Partial<AimdLimitOptions>) {
    refuseUnknownOptions(AIMD_LIMIT_DEFAULTS, options, 'AIMD limit');
    const o = withDefaults(AIMD_LIMIT_DEFAULTS, options);
    checkNumber('options.minLimit', o.minLimit, 1, 1e6, true);
    checkNumber('options.maxLimit', o.maxLimit, o.minLimit, 1e6, true);
    checkNumber('options.initialLimit', o.initialLimit, o.minLimit, o.maxLimit, true);
    if (typeof o.backoffRatio !== 'number' || !(o.backoffRatio >= 0.5 && o.backoffRatio < 1))
      throw new RangeError(`options.backoffRatio must be a number in [0.5, 1), got ${String(o.backoffRatio)}`);
    checkNumber('options.timeoutNs', o.timeoutNs, 1, Number.MAX_SAFE_INTEGER);
    this.options = o;
    this.current = o.initialLimit;
  }

  /** Current limit. */
  get limit(): number {
    return this.current;
  }

  /** See the class comment for the rule. A small trampoline (doubles through a typed cell) so callers inline it. */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void {
    this.sampleCell[0] = startNs;
    this.sampleCell[1] = rttNs;
    this.step(inflight, didDrop);
  }

  private step(inflight: number, didDrop: boolean): void {
    const rttNs = this.sampleCell[1]!;
    const o = this.options;
    const L = this.current;
    if (didDrop || rttNs > o.timeoutNs) {
      this.current = Math.max(o.minLimit, Math.floor(L * o.backoffRatio));
    } else if (inflight * 2 >= L) {
      this.current = Math.min(o.maxLimit, L + 1);
    }
  }
}
