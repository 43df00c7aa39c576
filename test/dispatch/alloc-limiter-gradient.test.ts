// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// A few hundred KB of one-off growth (probe paths, first updates), but no collection. One request in flight at a time
// is under half the limit: the first check runs the hold path, the second (hold off) the gradient and growth paths.
limiterAllocTest('gradient', new GradientLimit({ updateIntervalNs: 1e6, rttMinWindowNs: 1e9 }), {
  slackBytes: 1 << 20,
});
limiterAllocTest(
  'gradient (no hold)',
  new GradientLimit({ updateIntervalNs: 1e6, rttMinWindowNs: 1e9, appLimitedUtilisation: 0 }),
  { slackBytes: 1 << 20 },
);
limiterAllocTest(
  'gradient (growth gate on, no hold)',
  new GradientLimit({
    updateIntervalNs: 1e6,
    rttMinWindowNs: 1e9,
    appLimitedUtilisation: 0,
    growthTolerance: 0.07,
    firstProbeAfterNs: 1e8,
    probeSamples: 16,
  }),
  { slackBytes: 1 << 20 },
);
