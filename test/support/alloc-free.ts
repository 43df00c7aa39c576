/**
 * Proof that a hot path allocates nothing: run it millions of times and count garbage collections (from `gc`
 * performance entries) and heap growth (new- and old-space used bytes, before and after).
 *
 * Tests run with `--expose-gc` (see package.json), so the heap is collected before measuring.
 */
import { PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';

/** What one allocation-free run observed. */
export interface AllocationReport {
  /** Iterations of the measured body. */
  iterations: number;
  /** `gc` performance entries seen while the body ran. */
  gcCount: number;
  /** Growth of new-space used bytes across the run. */
  newSpaceGrowthBytes: number;
  /** Growth of old-space used bytes across the run. */
  oldSpaceGrowthBytes: number;
}

function spaceUsed(name: string): number {
  for (const s of getHeapSpaceStatistics()) if (s.space_name === name) return s.space_used_size;
  return 0;
}

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc !== 'function') throw new Error('allocation tests need node --expose-gc');
  gc();
  gc();
}

/**
 * Warms `body` up (so it is optimised before measuring), collects the heap, then runs it `iterations` times and
 * reports GC events and heap growth. `body(i)` must do the work for iteration `i` and return nothing.
 */
export async function measureAllocations(
  iterations: number,
  body: (i: number) => void,
  warmupIterations = Math.min(iterations, 200_000),
): Promise<AllocationReport> {
  for (let i = 0; i < warmupIterations; i++) body(i);
  collect();
  let gcCount = 0;
  const observer = new PerformanceObserver((list) => {
    gcCount += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  // Let the observer's own setup settle before the baseline.
  await new Promise((resolve) => setImmediate(resolve));
  const newBefore = spaceUsed('new_space');
  const oldBefore = spaceUsed('old_space');
  for (let i = 0; i < iterations; i++) body(i);
  const newAfter = spaceUsed('new_space');
  const oldAfter = spaceUsed('old_space');
  // gc entries are delivered asynchronously: give them a turn before reading the count.
  await new Promise((resolve) => setTimeout(resolve, 20));
  observer.disconnect();
  return {
    iterations,
    gcCount,
    newSpaceGrowthBytes: newAfter - newBefore,
    oldSpaceGrowthBytes: oldAfter - oldBefore,
  };
}

/**
 * Heap growth tolerated across a run: V8's own bookkeeping (tiering, feedback vectors, code installation) can add
 * some tens of KiB while a loop is optimised. 256 KiB is still a quarter of a byte per iteration over a million
 * iterations, while one small object per iteration (16 bytes or more) would grow the heap by 16 MiB and force
 * scavenges, which the GC count catches on its own.
 */
export const ALLOCATION_SLACK_BYTES = 256 * 1024;
