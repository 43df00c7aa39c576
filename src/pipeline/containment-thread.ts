/**
 * Containment pool worker (a Piscina worker, one of `poolSize`): runs one task = one batch of one shard.
 *
 * A task carries ring positions, never records: (shard, fromSeq, count, generation, fences). At most one task per
 * shard is in flight (the ingest thread guarantees it), so this worker is the shard's telemetry ring consumer and its
 * trigger ring producer for the task's duration; the hand-over between workers goes through the pool's messages.
 * The worker opens the rings, counters and device state once (from workerData) and each fence-store generation once
 * (cached), runs ContainmentEngine.processBatch, releases the telemetry records and rings the dispatcher's doorbell.
 */
import { workerData } from 'node:worker_threads';
import { ContainmentEngine } from '../fences/engine.js';
import { DeviceState } from '../fences/device-state.js';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import { PipelineRegion } from '../ingest/pipeline-region.js';
import { CNT_BLOCK_F64, RingKind } from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import type { PipelineMemory } from './memory.js';

/** One containment task. */
export interface ContainmentTask {
  /** Shard whose batch this is. */
  shard: number;
  /** Absolute sequence of the first telemetry record (the ring's read sequence when the task was made). */
  fromSeq: number;
  /** Records in the batch. */
  count: number;
  /** Fence-store generation to run on. */
  generation: number;
  /** That generation's store (opened once per worker and cached). */
  fences: FenceStoreDescriptor;
}

/** workerData of the pool. */
export interface ContainmentWorkerData {
  /** The router's shared regions. */
  memory: PipelineMemory;
}

/** Generations kept open per worker (the current one and the one a reload replaced). */
const KEPT_GENERATIONS = 2;

const data = workerData as ContainmentWorkerData | null;
let telemetry: SpscRing[] = [];
let triggers: SpscRing[] = [];
let pipeline: PipelineRegion | null = null;
let counters: Float64Array = new Float64Array(0);
let state: DeviceState | null = null;
if (data !== null && data !== undefined && data.memory !== undefined) {
  const m = data.memory;
  telemetry = m.telemetryRings.map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  triggers = m.triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER));
  pipeline = PipelineRegion.wrap(m.pipeline);
  counters = new Float64Array(m.containmentCounters);
  state = DeviceState.open(m.deviceState);
}
const stores = new Map<number, FenceStore>();
let engine: ContainmentEngine | null = null;

function storeOf(task: ContainmentTask): FenceStore {
  let store = stores.get(task.generation);
  if (store === undefined) {
    store = FenceStore.open(task.fences);
    stores.set(task.generation, store);
    // Drop the oldest generations: a batch never runs on one older than the store a reload replaced.
    while (stores.size > KEPT_GENERATIONS) {
      let oldest = Infinity;
      for (const g of stores.keys()) if (g < oldest) oldest = g;
      stores.delete(oldest);
    }
  }
  return store;
}

/** Runs one task; returns the number of triggers written. */
export default function runContainmentTask(task: ContainmentTask): number {
  if (state === null || pipeline === null) throw new Error('containment worker started without workerData');
  const store = storeOf(task);
  if (engine === null) engine = new ContainmentEngine(store, state, counters, task.shard * CNT_BLOCK_F64);
  else if (engine.currentStore !== store) engine.useStore(store);
  engine.useCounterBlock(task.shard * CNT_BLOCK_F64);
  const tel = telemetry[task.shard]!;
  if (tel.readSeq() !== task.fromSeq) {
    throw new Error(`shard ${task.shard}: task starts at ${task.fromSeq} but the ring's read sequence is ${tel.readSeq()}`);
  }
  const written = engine.processBatch(tel, task.fromSeq, task.count, triggers[task.shard]!);
  tel.release(task.count);
  if (written > 0) pipeline.ringDispatcher();
  return written;
}
