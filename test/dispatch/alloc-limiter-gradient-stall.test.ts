// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// The gradient behind a limiter that takes the caller's loop stalls out of one sample in four.
limiterAllocTest(
  'gradient, loop stalls taken out',
  new GradientLimit({ updateIntervalNs: 1e6, rttMinWindowNs: 1e9, appLimitedUtilisation: 0 }),
  { slackBytes: 1 << 20, withStall: true },
);
