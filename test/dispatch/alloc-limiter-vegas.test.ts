// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { VegasLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

// A few hundred KB of one-off growth (probe paths, first updates), but no collection.
limiterAllocTest('vegas', new VegasLimit(), { slackBytes: 1 << 20 });
// The same class with every rule a function of the limit, each returning whole numbers as the Java functions do. With
// fractional results (e.g. `alpha: (l) => l / 10`, `decrease: (l) => l * 0.9`) the calls, rare under this load, are
// not inlined and each boxes a number: 1.2-1.6 MB of new space over these 2M samples, a collection with all five
// (Node 20).
limiterAllocTest(
  'vegas (custom functions)',
  new VegasLimit({
    alpha: (limit) => Math.max(3, Math.floor(limit / 10)),
    beta: (limit) => Math.max(6, Math.floor(limit / 5)),
    threshold: (limit) => Math.max(1, Math.floor(Math.log10(limit))),
    increase: (limit) => limit + 2,
    decrease: (limit) => Math.floor(limit * 0.9),
  }),
  { slackBytes: 1 << 20 },
);
