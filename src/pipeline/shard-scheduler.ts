/**
 * Batching telemetry into containment tasks (ingest thread, which owns the Piscina pool).
 *
 * A shard's ring is published and offered to the pool when its claimed-but-unpublished records reach `batchSize`, and
 * at the end of every read chunk (`flush`), so a record never waits for more traffic: the age of a partial batch is
 * bounded by the chunk's own processing time. At most one task per shard is in flight (per-device order); records
 * that arrive meanwhile are taken by the running task itself (up to TASK_BATCHES batches), or go in the next task,
 * submitted the moment the pool answers. Each batch a task processes holds at most `batchSize` records.
 */
import type { Piscina } from 'piscina';
import type { FenceStoreDescriptor } from '../fences/store.js';
import { PST_BATCHED_PINGS_F64, PST_LOST_PINGS_F64, PST_TASKS_COMPLETED_F64, PST_TASKS_FAILED_F64, PST_TASKS_SUBMITTED_F64 } from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { ContainmentTask } from './containment-thread.js';

/** Batches one task may consume from its shard (the first, then what arrives while it runs). */
export const TASK_BATCHES = 4;

/** Per-shard batching and task submission. Ingest thread only. */
export class ShardScheduler {
  /** Records per task at most; also the claimed count that publishes a shard early. */
  readonly batchSize: number;
  private readonly pool: Piscina<ContainmentTask, number>;
  private readonly rings: readonly SpscRing[];
  private readonly stats: Float64Array;
  private readonly inFlight: Uint8Array;
  private readonly dirty: Uint8Array;
  private readonly dirtyList: Int32Array;
  private dirtyCount = 0;
  private inFlightCount = 0;
  private paused = false;
  private generation: number;
  private fences: FenceStoreDescriptor;
  private idleWaiters: (() => void)[] = [];
  private readonly onError: (message: string) => void;

  constructor(
    pool: Piscina<ContainmentTask, number>,
    rings: readonly SpscRing[],
    batchSize: number,
    stats: Float64Array,
    fences: FenceStoreDescriptor,
    onError: (message: string) => void,
  ) {
    this.pool = pool;
    this.rings = rings;
    this.batchSize = batchSize;
    this.stats = stats;
    this.fences = fences;
    this.generation = fences.generation;
    this.onError = onError;
    this.inFlight = new Uint8Array(rings.length);
    this.dirty = new Uint8Array(rings.length);
    this.dirtyList = new Int32Array(rings.length);
  }

  /** Tasks in flight. */
  get tasksInFlight(): number {
    return this.inFlightCount;
  }

  /** Notes that `shard` has claimed records; publishes and submits at once when a full batch is claimed. */
  noteClaimed(shard: number, ring: SpscRing): void {
    if (this.dirty[shard] === 0) {
      this.dirty[shard] = 1;
      this.dirtyList[this.dirtyCount++] = shard;
    }
    if (ring.pendingCount() >= this.batchSize) {
      ring.publish();
      this.trySubmit(shard);
    }
  }

  /** End of a read chunk: publishes every shard with claimed records and submits the idle ones. */
  flush(): void {
    const n = this.dirtyCount;
    for (let k = 0; k < n; k++) {
      const shard = this.dirtyList[k]!;
      this.dirty[shard] = 0;
      this.rings[shard]!.publish();
      this.trySubmit(shard);
    }
    this.dirtyCount = 0;
  }

  /** Stops submitting; resolves when no task is in flight (the reload pause). */
  pause(): Promise<void> {
    this.paused = true;
    return this.idle();
  }

  /** Switches to a fence generation and resumes submitting. */
  resume(fences: FenceStoreDescriptor): void {
    this.fences = fences;
    this.generation = fences.generation;
    this.paused = false;
    for (let s = 0; s < this.rings.length; s++) this.trySubmit(s);
  }

  /** Resolves when no task is in flight. */
  idle(): Promise<void> {
    if (this.inFlightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** True when every ring is empty and nothing is claimed or in flight. */
  isEmpty(): boolean {
    if (this.inFlightCount > 0 || this.dirtyCount > 0) return false;
    for (const r of this.rings) if (r.available() > 0 || r.pendingCount() > 0) return false;
    return true;
  }

  /** Submits a task for `shard` when it has published records, is not in flight and submitting is not paused. */
  trySubmit(shard: number): void {
    if (this.paused || this.inFlight[shard] !== 0) return;
    const ring = this.rings[shard]!;
    const available = ring.available();
    if (available === 0) return;
    const count = available < this.batchSize ? available : this.batchSize;
    const task: ContainmentTask = {
      shard,
      fromSeq: ring.readSeq(),
      count,
      maxRecords: this.batchSize * TASK_BATCHES,
      generation: this.generation,
      fences: this.fences,
    };
    this.inFlight[shard] = 1;
    this.inFlightCount++;
    this.stats[PST_TASKS_SUBMITTED_F64]!++;
    this.pool.run(task).then(
      (consumed) => this.complete(shard, consumed, false),
      (err: unknown) => {
        this.onError(`containment task for shard ${shard} failed: ${err instanceof Error ? err.message : String(err)}`);
        // The worker may have released part of its work: drop what is left of the first batch.
        const left = (task.fromSeq + count - ring.readSeq()) | 0;
        this.complete(shard, left > 0 ? left : 0, true);
      },
    );
  }

  private complete(shard: number, count: number, failed: boolean): void {
    if (failed) {
      // The worker did not release the batch: take the consumer role (the pool's answer orders us after it) and drop it.
      const ring = this.rings[shard]!;
      ring.release(count);
      this.stats[PST_TASKS_FAILED_F64]!++;
      this.stats[PST_LOST_PINGS_F64]! += count;
    } else {
      this.stats[PST_TASKS_COMPLETED_F64]!++;
      this.stats[PST_BATCHED_PINGS_F64]! += count;
    }
    this.inFlight[shard] = 0;
    this.inFlightCount--;
    this.trySubmit(shard);
    if (this.inFlightCount === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
