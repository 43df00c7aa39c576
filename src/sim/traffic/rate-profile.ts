/**
 * An offered rate that changes over a run: straight lines between points (time ns, rate per second), held flat
 * before the first point and after the last. A constant rate is one point; a burst is a ramp up, a plateau and a
 * ramp down.
 */

/** A piecewise-linear rate over time. */
export class RateProfile {
  private readonly timesNs: Float64Array;
  private readonly rates: Float64Array;
  /** The highest rate anywhere, per second. */
  readonly peakPerSec: number;

  /** `points`: [time ns, rate per second] pairs in increasing time; at least one; rates >= 0. */
  constructor(points: readonly (readonly [number, number])[]) {
    if (points.length === 0) throw new RangeError('a rate profile needs at least one point');
    this.timesNs = Float64Array.from(points, (p) => p[0]);
    this.rates = Float64Array.from(points, (p) => p[1]);
    for (let i = 0; i < points.length; i++) {
      if (!(this.rates[i]! >= 0) || !Number.isFinite(this.rates[i]!))
        throw new RangeError(`rate at point ${i} must be a finite number >= 0, got ${String(points[i]![1])}`);
      if (i > 0 && !(this.timesNs[i]! >= this.timesNs[i - 1]!))
        throw new RangeError(`rate profile times must not decrease (point ${i})`);
    }
    this.peakPerSec = Math.max(...this.rates);
  }

  /** A profile that stays at `perSec`. */
  static constant(perSec: number): RateProfile {
    return new RateProfile([[0, perSec]]);
  }

  /** The rate at `tNs`, per second. */
  rateAt(tNs: number): number {
    const t = this.timesNs;
    const n = t.length;
    if (tNs <= t[0]!) return this.rates[0]!;
    if (tNs >= t[n - 1]!) return this.rates[n - 1]!;
    let i = 1;
    while (t[i]! < tNs) i++;
    const t0 = t[i - 1]!;
    const span = t[i]! - t0;
    if (span === 0) return this.rates[i]!;
    return this.rates[i - 1]! + ((this.rates[i]! - this.rates[i - 1]!) * (tNs - t0)) / span;
  }

  /** The expected number of arrivals in [aNs, bNs] (the rate's integral; exact for straight segments). */
  expectedBetween(aNs: number, bNs: number): number {
    // Trapezoids between the breakpoints that fall inside [a, b].
    let total = 0;
    let from = aNs;
    let rFrom = this.rateAt(aNs);
    for (let i = 0; i < this.timesNs.length; i++) {
      const ti = this.timesNs[i]!;
      if (ti <= from || ti >= bNs) continue;
      const ri = this.rates[i]!;
      total += ((rFrom + ri) / 2) * (ti - from);
      from = ti;
      rFrom = ri;
    }
    total += ((rFrom + this.rateAt(bNs)) / 2) * (bNs - from);
    return total / 1e9;
  }
}
