import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Limiter, RELEASE_DROPPED, RELEASE_IGNORE, RELEASE_SUCCESS } from '../../src/dispatch/limiter.js';
import { Gradient2Limit } from '../../src/dispatch/limits/index.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';

// One algorithm per file (one process each): the limiter's call sites stay monomorphic, as in a dispatcher whose
// downstreams share an algorithm.
const ITERATIONS = 2_000_000;
// Gradient and Vegas show a few hundred KB of one-off growth (probe paths, first updates) but no collection.
const SLACK_BYTES = 1 << 20;
void ALLOCATION_SLACK_BYTES;

test('limiter acquire/release with gradient2 updates: no GC over 2M samples', async () => {
  const limiter = new Limiter(new Gradient2Limit(), 256);
  const cell = limiter.timeCell;
  const report = await measureAllocations(ITERATIONS, (i) => {
    // Time goes through the typed cell: a double argument to a call that is not inlined would be boxed.
    cell[0] = i * 1e5;
    const p = limiter.tryAcquireNow();
    if (p < 0) return;
    cell[0] = cell[0]! + 5e6 + (i & 7) * 1e6;
    // Mixed outcomes so every branch of the update runs.
    limiter.releaseNow(p, (i & 63) === 0 ? RELEASE_DROPPED : (i & 63) === 1 ? RELEASE_IGNORE : RELEASE_SUCCESS);
  }, 1_000_000); // a long warm-up: the optimised code must be in place before counting
  assert.equal(report.gcCount, 0, 'no GC');
  assert.ok(report.newSpaceGrowthBytes < SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes}`);
  assert.ok(report.oldSpaceGrowthBytes < SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes}`);
  assert.ok(limiter.succeeded > ITERATIONS / 2);
  assert.ok(limiter.algorithm.referenceRttNs > 0, 'the algorithm took the samples');
});
