// One algorithm per file, so one per process: see limiter-alloc-check.ts.
import { AimdLimit } from '../../src/dispatch/limits/index.js';
import { limiterAllocTest } from './limiter-alloc-check.js';

limiterAllocTest('aimd', new AimdLimit());
