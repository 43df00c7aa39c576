/**
 * The allocation check of Limiter under one limit algorithm: acquire/release with mixed outcomes over 2M samples,
 * no GC and heap growth under a slack. Each `alloc-limiter-<algorithm>.test.ts` calls `limiterAllocTest` once with
 * its own algorithm: one algorithm per file, so one per process, keeps the limiter's call sites (and this module's
 * loop) monomorphic, as in a dispatcher whose downstreams share an algorithm.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Limiter, RELEASE_DROPPED, RELEASE_IGNORE, RELEASE_SUCCESS } from '../../src/dispatch/limiter.js';
import type { Limit } from '../../src/dispatch/limits/index.js';
import { STALL_ALLOWANCE_NS, STALL_CELLS, STALL_LAST_TICK_NS, STALL_TOTAL_NS } from '../../src/dispatch/loop-stall.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';

/** Measured samples. */
const ITERATIONS = 2_000_000;
/** Warm-up samples per chunk: long, so the optimised code is in place before counting. */
const WARMUP_ITERATIONS = 1_000_000;

/** What one algorithm's check tolerates and what it must show afterwards. */
export interface LimiterAllocCheckOptions {
  /** Heap growth tolerated in each space; ALLOCATION_SLACK_BYTES unless the algorithm has one-off growth. */
  slackBytes?: number;
  /**
   * What proves the algorithm took the samples: `limit-moved` (the limit went up or down at least once) or
   * `reference-rtt` (the algorithm holds a reference RTT; for one whose limit may stay put under this load).
   */
  evidence?: 'limit-moved' | 'reference-rtt';
  /** Give the limiter a loop-stall state and stall one request in four (the correction path runs). */
  withStall?: boolean;
}

/** Registers the test `limiter acquire/release with <name> updates: no GC over 2M samples`. */
export function limiterAllocTest(name: string, algorithm: Limit, options: LimiterAllocCheckOptions = {}): void {
  const slackBytes = options.slackBytes ?? ALLOCATION_SLACK_BYTES;
  const evidence = options.evidence ?? 'limit-moved';
  test(`limiter acquire/release with ${name} updates: no GC over 2M samples`, async () => {
    const stall = options.withStall === true ? new Float64Array(STALL_CELLS) : null;
    if (stall !== null) stall[STALL_ALLOWANCE_NS] = 2e6;
    const limiter = new Limiter(algorithm, 256, stall);
    const cell = limiter.timeCell;
    const report = await measureAllocations(
      ITERATIONS,
      (i) => {
        // Time goes through the typed cell: a double argument to a call that is not inlined would be boxed.
        cell[0] = i * 1e5;
        const p = limiter.tryAcquireNow();
        if (p < 0) return;
        cell[0] = cell[0]! + 5e6 + (i & 7) * 1e6;
        if (stall !== null) {
          // The loop's timer ran just now, after a 3 ms stall for one request in four.
          if ((i & 3) === 0) stall[STALL_TOTAL_NS] = stall[STALL_TOTAL_NS]! + 3e6;
          stall[STALL_LAST_TICK_NS] = cell[0]!;
        }
        // Mixed outcomes so every branch of the update runs.
        limiter.releaseNow(p, (i & 63) === 0 ? RELEASE_DROPPED : (i & 63) === 1 ? RELEASE_IGNORE : RELEASE_SUCCESS);
      },
      WARMUP_ITERATIONS,
    );
    assert.equal(report.gcCount, 0, 'no GC');
    assert.ok(report.newSpaceGrowthBytes < slackBytes, `new space grew ${report.newSpaceGrowthBytes}`);
    assert.ok(report.oldSpaceGrowthBytes < slackBytes, `old space grew ${report.oldSpaceGrowthBytes}`);
    assert.ok(limiter.succeeded > ITERATIONS / 2);
    if (stall !== null) assert.ok(limiter.stallCorrectedSamples > ITERATIONS / 8, 'stalled samples were corrected');
    if (evidence === 'limit-moved') assert.ok(limiter.limitIncreases + limiter.limitDecreases > 0, 'the limit moved');
    else assert.ok(limiter.algorithm.referenceRttNs > 0, 'the algorithm took the samples');
  });
}
