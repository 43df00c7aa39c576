/**
 * The pipeline: the threads that wire the parts into one process, and what they share.
 *
 * Owns: shared-memory allocation of a router (memory.ts), the ingest thread (ingest-thread.ts: sources, edge,
 * admission, and the Piscina containment pool it owns; batching in shard-scheduler.ts), the pool worker
 * (containment-thread.ts), the dispatcher thread (dispatcher-thread.ts: trigger rings -> Dispatcher; naming, held-time
 * probe and callback bridge in dispatch-wiring.ts), the held-time histogram (held-time.ts) and the stats snapshot
 * (stats.ts). The main thread's side is src/router.ts.
 */
export { allocatePipelineMemory, CONTROL_TRIGGER_RING_SLOTS, type PipelineMemory, type PipelineMemorySpec } from './memory.js';
export { readRouterStats, type RouterStats, type DownstreamStats, type PerLane, type PerTriggerType, type StatsViews } from './stats.js';
export { heldBucketBoundNs, heldBucketOf, heldQuantileMs, recordHeldTimeFrom, HELD_BUCKET_BOUNDS_S } from './held-time.js';
export type { Trigger } from './trigger.js';
export type { ContainmentTask } from './containment-thread.js';
