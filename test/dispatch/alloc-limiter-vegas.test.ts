// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { VegasLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// A few hundred KB of one-off growth (probe paths, first updates), but no collection.
limiterAllocTest('vegas', new VegasLimit(), { slackBytes: 1 << 20 });
