/** The simulated fleet lives in src/demo/fleet.ts (one copy for the demo and the benchmarks); re-exported here. */
export * from '../../src/demo/fleet.js';
