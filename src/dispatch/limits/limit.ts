/**
 * The `Limit` contract: an algorithm that turns samples (start time, round-trip time, requests in flight when the
 * request started, whether it was lost) into a concurrency limit. Admission (permits) lives apart, in `Limiter`.
 *
 * Implementations take time only from the samples they are given (no clock reads, no timers, no global state), so
 * a simulator can drive them on a virtual clock; any randomness is injected.
 */

/** A concurrency-limit algorithm. */
export interface Limit {
  /** Current limit: a whole number of requests, at least 1. */
  readonly limit: number;
  /** The reference (no-load) RTT the algorithm compares against, ns; NaN when it keeps none. */
  readonly referenceRttNs: number;
  /**
   * Feeds one sample. `startNs` is when the downstream call began and `rttNs` how long the call itself took (never
   * the wait for a permit); `inflight` counts the requests in flight when it started, itself included; `didDrop` is
   * true for loss (error, timeout, 429/503).
   */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void;
}

/** A deterministic source of uniform numbers in [0, 1). */
export type RandomSource = () => number;

/** A small seeded PRNG (mulberry32) for limits that jitter; allocation-free per call. */
export function seededRandom(seed: number): RandomSource {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
