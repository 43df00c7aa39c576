/**
 * Containment pool worker (a Piscina worker, one of `poolSize`): runs one task = one batch of one shard.
 *
 * A task carries ring positions, never records: (shard, fromSeq, count, generation, fences). At most one task per
 * shard is in flight (the ingest thread guarantees it), so this worker is the shard's telemetry ring consumer and its
 * trigger ring producer for the task's duration; the hand-over between workers goes through the pool's messages.
 * Being the consumer, the worker also takes the records published while the task ran (up to `maxRecords`, in
 * batches of `count` at most), so under load a shard's records do not wait for a round trip through the ingest
 * thread; the task answers with the number of records it consumed.
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
  /** Records the task may consume in all, continuing with what was published after it started (>= count). */
  maxRecords: number;
  /** Fence-store generation to run on. */
  generation: number;
  /** That generation's store (opened once per worker and cached). */
  fences: FenceStoreDescriptor;
}

/** workerData of the pool. */
export interface ContainmentWorkerData {
  /** The router's shared regions. */
  memory: PipelineMemory;
  /** The first fence-store generation, opened when the worker starts (not on its first task). */
  fences: FenceStoreDescriptor;
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
if (state !== null && data !== null && data !== undefined && data.fences !== undefined) {
  // Open the first generation now: the first batch should not pay for it.
  const first = FenceStore.open(data.fences);
  stores.set(first.generation, first);
  engine = new ContainmentEngine(first, state, counters, 0);
}

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

/** Runs one task; returns the number of telemetry records consumed (released). */
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
  const trg = triggers[task.shard]!;
  let from = task.fromSeq;
  let count = task.count;
  let consumed = 0;
  for (;;) {
    const written = engine.processBatch(tel, from, count, trg);
    tel.release(count);
    consumed += count;
    // Ring per batch: the dispatcher can deliver while the next batch runs.
    if (written > 0) pipeline.ringDispatcher();
    const room = task.maxRecords - consumed;
    const available = tel.available();
    if (room <= 0 || available === 0) return consumed;
    from = (from + count) | 0;
    count = Math.min(available, task.count > room ? room : task.count);
  }
}
