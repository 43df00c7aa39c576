/**
 * Proof that a hot path allocates nothing: run it millions of times and count garbage collections (from `gc`
 * performance entries) and heap growth (new- and old-space used bytes, before and after).
 *
 * Tests run with `--expose-gc` (see package.json), so the heap is collected before measuring, and with
 * `--no-concurrent-recompilation`, so V8 installs optimised code as soon as it decides to optimise instead of after a
 * background compile whose delay depends on how busy the machine is. The optimised code is the same either way; the
 * flag only makes the moment it takes over deterministic, so a GC counted here is an allocation in the code itself.
 * They also run with `--no-memory-reducer`: the memory reducer starts full collections on a timer, after allocation
 * has slowed down, to give memory back; such a collection says nothing about the code being measured, and on a busy
 * machine a long measured run can outlast the timer.
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

/** Warm-up chunks tried before measuring anyway (see measureAllocations). */
export const MAX_WARMUP_CHUNKS = 40;

/**
 * Warms `body` up, collects the heap, then runs it `iterations` times and reports GC events and heap growth.
 * `body(i)` must do the work for iteration `i` and return nothing.
 *
 * Warm-up runs in chunks of `warmupIterations` until one whole chunk causes no GC (or MAX_WARMUP_CHUNKS pass).
 * V8 optimises on a background thread; on a busy machine the optimised code can arrive after a fixed warm-up, and
 * until then double arguments are boxed. A long-running process only ever sees the steady state, so that is what is
 * measured. A body that really allocates never reaches a GC-free chunk, and its measured run fails. A measured run
 * whose old space grew past ALLOCATION_SLACK_BYTES without any collection is run once more and that run reported
 * (see the comment in the loop).
 */
export async function measureAllocations(
  iterations: number,
  body: (i: number) => void,
  warmupIterations = Math.min(iterations, 200_000),
): Promise<AllocationReport> {
  let gcCount = 0;
  const observer = new PerformanceObserver((list) => {
    gcCount += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  try {
    for (let chunk = 0; chunk < MAX_WARMUP_CHUNKS; chunk++) {
      // Collect first so a chunk starts with an empty young generation.
      collect();
      await new Promise((resolve) => setTimeout(resolve, 5));
      gcCount = 0;
      for (let i = 0; i < warmupIterations; i++) body(i);
      // gc entries are delivered asynchronously: give them a turn before reading the count.
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (gcCount === 0) break;
    }
    let report: AllocationReport | null = null;
    for (let run = 0; run < 2; run++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 5));
      gcCount = 0;
      const newBefore = spaceUsed('new_space');
      const oldBefore = spaceUsed('old_space');
      for (let i = 0; i < iterations; i++) body(i);
      const newAfter = spaceUsed('new_space');
      const oldAfter = spaceUsed('old_space');
      await new Promise((resolve) => setTimeout(resolve, 20));
      report = {
        iterations,
        gcCount,
        newSpaceGrowthBytes: newAfter - newBefore,
        oldSpaceGrowthBytes: oldAfter - oldBefore,
      };
      // Old-space growth with no collection at all is not the body's garbage (millions of iterations allocating
      // would have forced scavenges): a late tier-up's code and metadata land there once. A second whole measured
      // run, after it, is the steady state; what the body itself keeps allocating grows it again.
      if (gcCount !== 0 || report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES) break;
    }
    return report!;
  } finally {
    observer.disconnect();
  }
}

/**
 * Heap growth tolerated across a run: V8's own bookkeeping (tiering, feedback vectors, code installation) can add
 * some tens of KiB while a loop is optimised. 256 KiB is still a quarter of a byte per iteration over a million
 * iterations, while one small object per iteration (16 bytes or more) would grow the heap by 16 MiB and force
 * scavenges, which the GC count catches on its own.
 */
export const ALLOCATION_SLACK_BYTES = 256 * 1024;

/**
 * Runs `body` 500,000 times on its own (every function on the path reaches optimised code by itself, not only inlined
 * into a loop), then `iterations` times measured, and fails unless that run saw no GC and neither space grew past
 * ALLOCATION_SLACK_BYTES.
 */
export async function assertAllocationFree(body: (i: number) => void, iterations = 3_000_000): Promise<void> {
  await measureAllocations(500_000, body);
  const report = await measureAllocations(iterations, body);
  if (report.gcCount !== 0) throw new Error(`${report.gcCount} garbage collections in ${iterations} iterations`);
  if (report.newSpaceGrowthBytes >= ALLOCATION_SLACK_BYTES)
    throw new Error(`new space grew ${report.newSpaceGrowthBytes} bytes`);
  if (report.oldSpaceGrowthBytes >= ALLOCATION_SLACK_BYTES)
    throw new Error(`old space grew ${report.oldSpaceGrowthBytes} bytes`);
}
