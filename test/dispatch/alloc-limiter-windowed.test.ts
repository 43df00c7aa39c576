// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { VegasLimit, WindowedLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// Vegas run on windows of samples, as the router runs it with a downstream's `window` option.
limiterAllocTest(
  'windowed vegas',
  new WindowedLimit(new VegasLimit(), { minWindowNs: 1e6, maxWindowNs: 1e7, windowSamples: 10, minRttNs: 0 }),
  { slackBytes: 1 << 20, evidence: 'reference-rtt' },
);
