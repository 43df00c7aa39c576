/**
 * The burst bench's histogram of intended-send -> delivered times: bucket i holds (bound(i-1), bound(i)] with
 * bound(i) = 0.1 ms x 1.25^i, the last bucket everything above bound(E2E_BUCKET_COUNT - 2) (about 600 s), the same
 * 1.25 growth as the router's held-time histogram so quantiles of both are exact to within 25 %.
 */

/** First upper bound, ms. */
const FIRST_BOUND_MS = 0.1;
const GROWTH = 1.25;
const LOG_GROWTH = Math.log(GROWTH);

/** Buckets, the overflow bucket included. */
export const E2E_BUCKET_COUNT = 72;

/** Upper bound of bucket `i`, seconds (Infinity for the overflow bucket). */
export function e2eBoundS(i: number): number {
  return i >= E2E_BUCKET_COUNT - 1 ? Infinity : (FIRST_BOUND_MS * Math.pow(GROWTH, i)) / 1000;
}

/** Bucket of a time in ms (negative and tiny times in bucket 0). */
export function e2eBucketOf(ms: number): number {
  if (!(ms > FIRST_BOUND_MS)) return 0;
  let i = Math.ceil(Math.log(ms / FIRST_BOUND_MS) / LOG_GROWTH);
  // Float rounding at a bound: step back when the lower bucket already holds it.
  if (i > 0 && FIRST_BOUND_MS * Math.pow(GROWTH, i - 1) >= ms) i--;
  return i >= E2E_BUCKET_COUNT - 1 ? E2E_BUCKET_COUNT - 1 : i;
}

/** Upper bounds of every bucket, seconds, in the form `quantileBetween` (soak/scrape.ts) takes. */
export const E2E_BOUNDS_S: readonly number[] = Array.from({ length: E2E_BUCKET_COUNT }, (_, i) => e2eBoundS(i));
