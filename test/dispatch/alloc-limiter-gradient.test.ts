// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// A few hundred KB of one-off growth (probe paths, first updates), but no collection.
limiterAllocTest('gradient', new GradientLimit({ updateIntervalNs: 1e6, rttMinWindowNs: 1e9 }), {
  slackBytes: 1 << 20,
});
