// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { Gradient2Limit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

limiterAllocTest('gradient2', new Gradient2Limit(), { slackBytes: 1 << 20, evidence: 'reference-rtt' });
