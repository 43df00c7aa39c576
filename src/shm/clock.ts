/**
 * The router's clock: monotonic within a thread, comparable across threads.
 *
 * `performance.now()` is relative to each thread's own time origin, so it cannot be compared between a worker and
 * the main thread; `performance.timeOrigin + performance.now()` can, to within whatever the wall clock was stepped or
 * slewed between the two threads' starts (each thread's time origin is a wall-clock reading taken when it started),
 * with sub-microsecond resolution.
 *
 * Reading it allocates one heap number on Node 20: `performance.now()` is a native call whose double result is
 * boxed (so is `Date.now()`'s; `process.hrtime()` returns a new array, `process.hrtime.bigint()` a BigInt). So
 * per-event code must read the clock once per batch, not once per event, and hand the time on in a Float64Array cell.
 */
import { performance } from 'node:perf_hooks';

/** A source of monotonic time in nanoseconds; injected wherever a module must stay deterministic in tests. */
export type ClockNs = () => number;

/** The clock's zero, 2025-01-01T00:00:00Z: keeps ns values small enough for a double to hold them to ~16 ns. */
const CLOCK_EPOCH_MS = 1_735_689_600_000;

const originSinceEpochMs = performance.timeOrigin - CLOCK_EPOCH_MS;

/** Current time in ns since CLOCK_EPOCH_MS on the cross-thread clock (a double; one heap number per read, see above). */
export function nowNs(): number {
  return (originSinceEpochMs + performance.now()) * 1e6;
}
