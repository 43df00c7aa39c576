/**
 * What the ingest thread and the containment pool workers exchange: a task, its control cell values, and the pool's
 * workerData. Kept apart from containment-thread.ts, whose module body opens the shared regions of a pool worker, so
 * that the ingest thread can import these without running it.
 */
import type { ContainmentEngineOptions } from '../fences/engine.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { PipelineMemory } from './memory.js';

/**
 * One containment task: the telemetry rings of one shard group (every ingest thread's ring of each of its shards),
 * each consumed from its read sequence at submit time.
 */
export interface ContainmentTask {
  /**
   * Telemetry rings the task consumes (indices as `telemetryRingIndex`; the ring of index r serves shard
   * `r % memory.shards`): every ring of one group's shards, so no other task holds any of them while it runs.
   */
  rings: number[];
  /** Per ring (same order): absolute sequence of its first unread telemetry record when the task was made. */
  fromSeqs: number[];
  /**
   * True for the COMPLIANCE group's task: `rings` are COMPLIANCE rings (indices as `complianceRingIndex`, pings of any
   * shard), its triggers go to the COMPLIANCE trigger ring, its counters and watchdog cells are the group's own.
   */
  compliance: boolean;
  /** Records per batch at most (one processBatch call, then release and doorbell). */
  batchRecords: number;
  /**
   * Time one batch is sized to, ns: the worker measures its cost per ping and takes fewer than `batchRecords` when
   * pings are expensive, so one pass over the group's shards (and every record's wait for it) stays short.
   */
  batchBudgetNs: number;
  /** The task returns after this long even if records keep arriving, ms: bounds a task's life (pause and drain use the control cell). */
  maxTaskMs: number;
  /** When a pass finds every shard empty, the task waits this long for more records before it returns, ms. */
  lingerMs: number;
  /** Each wait of a lingering task on one of its rings, ms (a publish wakes it sooner; the control cell is read after). */
  parkStepMs: number;
  /** Fence-store generation to run on. */
  generation: number;
  /** One Int32 cell: CONTROL_RUN, CONTROL_RETURN_WHEN_EMPTY (drain) or CONTROL_RETURN_NOW (pause); the CONTROL_* values below. */
  control: SharedArrayBuffer;
  /**
   * That generation's store, or null: a worker opens each generation once and caches it, so the store (three
   * SharedArrayBuffers to clone per message) travels only to a worker that answered NEEDS_STORE.
   */
  fences: FenceStoreDescriptor | null;
}

/** Control cell values (ContainmentTask.control): keep running. */
export const CONTROL_RUN = 0;
/** Answer as soon as a pass finds every shard empty (drain). */
export const CONTROL_RETURN_WHEN_EMPTY = 1;
/** Answer at the end of the current pass (pause for a reload). */
export const CONTROL_RETURN_NOW = 2;

/** What a task answers, instead of a record count, when it was sent without a store this worker has not opened. */
export const NEEDS_STORE = -1;

/** workerData of the pool. */
export interface ContainmentWorkerData {
  /** The router's shared regions. */
  memory: PipelineMemory;
  /** The first fence-store generation, opened when the worker starts (not on its first task). */
  fences: FenceStoreDescriptor;
  /** The engine's settings (expiry EXITs, CROSS rules). */
  engine: ContainmentEngineOptions;
}
