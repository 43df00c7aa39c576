/**
 * The held-time histogram (admission -> handed to a downstream), in shared Float64 cells (HELD_* in
 * src/shm/layout.ts): written by the dispatcher thread only, read by the main thread for `stats()` and `/metrics`.
 * Buckets grow geometrically (HELD_BOUND_GROWTH), so a quantile read from them is exact to within that ratio.
 */
import {
  HELD_BOUND_GROWTH,
  HELD_BOUNDED_BUCKETS,
  HELD_BUCKET_COUNT,
  HELD_BUCKETS_F64,
  HELD_COUNT_F64,
  HELD_FIRST_BOUND_NS,
  HELD_MAX_NS_F64,
  HELD_SUM_NS_F64,
} from '../shm/layout.js';

const LOG_GROWTH = Math.log(HELD_BOUND_GROWTH);

/** Upper bound of bounded bucket `i`, ns. */
export function heldBucketBoundNs(i: number): number {
  return HELD_FIRST_BOUND_NS * Math.pow(HELD_BOUND_GROWTH, i);
}

/** Upper bounds of the bounded buckets, seconds (for the Prometheus histogram). */
export const HELD_BUCKET_BOUNDS_S: readonly number[] = Array.from(
  { length: HELD_BOUNDED_BUCKETS },
  (_, i) => heldBucketBoundNs(i) / 1e9,
);

/** Bucket index of a held time (the overflow bucket for anything above the last bound). Allocation-free. */
function heldBucketOf(heldNs: number): number {
  if (!(heldNs > HELD_FIRST_BOUND_NS)) return 0;
  let i = Math.ceil(Math.log(heldNs / HELD_FIRST_BOUND_NS) / LOG_GROWTH);
  // Float rounding at a bound: step back when the lower bucket already holds it.
  if (i > 0 && heldBucketBoundNs(i - 1) >= heldNs) i--;
  return i > HELD_BOUNDED_BUCKETS ? HELD_BOUNDED_BUCKETS : i;
}

/** Records the held time in `held[0]` (ns) into the block at `base` (dispatcher thread). Allocation-free. */
export function recordHeldTimeFrom(cells: Float64Array, base: number, held: Float64Array): void {
  const h = held[0]!;
  const v = h > 0 ? h : 0;
  cells[base + HELD_COUNT_F64]!++;
  cells[base + HELD_SUM_NS_F64]! += v;
  if (v > cells[base + HELD_MAX_NS_F64]!) cells[base + HELD_MAX_NS_F64] = v;
  cells[base + HELD_BUCKETS_F64 + heldBucketOf(v)]!++;
}

/**
 * Quantile `q` in [0, 1] of the held times in the block at `base`, ms: the upper bound of the bucket holding it
 * (the recorded maximum for the overflow bucket, and never above the maximum). NaN when there are no samples.
 */
export function heldQuantileMs(cells: Float64Array, base: number, q: number): number {
  const count = cells[base + HELD_COUNT_F64]!;
  if (!(count > 0)) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * count));
  const maxNs = cells[base + HELD_MAX_NS_F64]!;
  let seen = 0;
  for (let i = 0; i < HELD_BUCKET_COUNT; i++) {
    seen += cells[base + HELD_BUCKETS_F64 + i]!;
    if (seen >= rank) return (i === HELD_BOUNDED_BUCKETS ? maxNs : Math.min(heldBucketBoundNs(i), maxNs)) / 1e6;
  }
  return maxNs / 1e6;
}

/**
 * Quantile `q` in [0, 1] of the held times recorded between two snapshots of the bucket counts (`before` and `after`,
 * HELD_BUCKET_COUNT each, as in RouterStats.heldTimeBucketCounts), ms: the upper bound of the bucket holding it (for
 * the overflow bucket, the bound of the last bounded bucket: a window keeps no maximum). NaN when the window holds no
 * samples.
 */
export function heldQuantileBetweenMs(before: readonly number[], after: readonly number[], q: number): number {
  let count = 0;
  for (let i = 0; i < HELD_BUCKET_COUNT; i++) count += (after[i] ?? 0) - (before[i] ?? 0);
  if (!(count > 0)) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * count));
  let seen = 0;
  for (let i = 0; i < HELD_BUCKET_COUNT; i++) {
    seen += (after[i] ?? 0) - (before[i] ?? 0);
    if (seen >= rank) return heldBucketBoundNs(Math.min(i, HELD_BOUNDED_BUCKETS - 1)) / 1e6;
  }
  return heldBucketBoundNs(HELD_BOUNDED_BUCKETS - 1) / 1e6;
}

/** Held-time bucket counts of the block at `base` (a copy: HELD_BUCKET_COUNT numbers). */
export function heldBucketCounts(cells: Float64Array, base: number): number[] {
  return Array.from(cells.subarray(base + HELD_BUCKETS_F64, base + HELD_BUCKETS_F64 + HELD_BUCKET_COUNT));
}
