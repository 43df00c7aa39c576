/** The simulated fleet lives in src/fences/synthetic-fleet.ts (one copy for the demo and the benchmarks); re-exported here. */
export * from '../../src/fences/synthetic-fleet.js';
