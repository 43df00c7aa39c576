/**
 * A log-scale histogram of durations (ns) for percentiles over millions of samples without keeping them: buckets
 * 0.5 % wide from 1 us to about 3 hours, so a reported percentile is within 0.25 % of the true sample value (values
 * under 1 us share the first bucket, values above the range the last). Samples may carry a weight (a chunk of
 * pings that waited equally long). Allocation-free after construction.
 */

/** Lower edge of bucket 1, ns. */
const LOW_NS = 1e3;
/** Ratio of a bucket's upper edge to its lower edge. */
const RATIO = 1.005;
const LOG_RATIO = Math.log(RATIO);
/** Buckets: 1 us * 1.005^4600 is about 9.3e12 ns. */
const BUCKETS = 4602;

/** Durations in log-spaced buckets. */
export class DurationHistogram {
  private readonly counts = new Float64Array(BUCKETS);
  /** Total weight added. */
  total = 0;
  /** Largest sample, ns (0 before any). */
  maxNs = 0;
  /** Last value's bucket, cached: samples often repeat (a chunk's pings share their wait). */
  private lastValue = -1;
  private lastBucket = 0;

  /** Adds `weight` samples of `valueNs`. */
  add(valueNs: number, weight = 1): void {
    let b: number;
    if (valueNs === this.lastValue) {
      b = this.lastBucket;
    } else {
      b = valueNs < LOW_NS ? 0 : 1 + Math.floor(Math.log(valueNs / LOW_NS) / LOG_RATIO);
      if (b >= BUCKETS) b = BUCKETS - 1;
      this.lastValue = valueNs;
      this.lastBucket = b;
    }
    this.counts[b] = this.counts[b]! + weight;
    this.total += weight;
    if (valueNs > this.maxNs) this.maxNs = valueNs;
  }

  /** Adds every sample of `other`. */
  merge(other: DurationHistogram): void {
    for (let b = 0; b < BUCKETS; b++) this.counts[b] = this.counts[b]! + other.counts[b]!;
    this.total += other.total;
    if (other.maxNs > this.maxNs) this.maxNs = other.maxNs;
  }

  /**
   * The `q` quantile (0..1), ns: the geometric middle of the bucket holding it (never above the largest sample);
   * NaN when empty.
   */
  quantileNs(q: number): number {
    if (this.total === 0) return NaN;
    const want = q * this.total;
    let acc = 0;
    for (let b = 0; b < BUCKETS; b++) {
      acc += this.counts[b]!;
      if (acc >= want && this.counts[b]! > 0) {
        const mid = b === 0 ? LOW_NS / 2 : LOW_NS * Math.pow(RATIO, b - 0.5);
        return mid < this.maxNs ? mid : this.maxNs;
      }
    }
    return this.maxNs;
  }
}
