/**
 * Batching telemetry into containment tasks (ingest thread, which owns the Piscina pool).
 *
 * Shards are split into `groups` fixed groups (shard s in group s % groups; one group per pool worker by default).
 * A task holds one whole group: at most one task per group is in flight, so at most one consumer per shard
 * (per-device order), and the pool never queues a task behind another. A running task passes over its group's shards
 * round-robin, a batch of at most `batchSize` records per shard per pass, taking what is published while it runs,
 * and returns only when its shards have stayed empty for TASK_LINGER_MS, or when told to through the task's control
 * cell (pause for a reload, drain): under steady traffic a group's task never ends, so a shard never waits for an
 * answer of the pool to cross the ingest thread's event loop (where it would queue behind the read chunks).
 * A shard's ring is published when its claimed-but-unpublished records reach `batchSize`, every
 * PUBLISH_EVERY_RECORDS records within a read chunk, and at the end of every read chunk (`flush`), so a record never waits for more traffic; its group is submitted then if it is idle, or the
 * moment its task answers.
 */
import type { Piscina } from 'piscina';
import type { FenceStoreDescriptor } from '../fences/store.js';
import { PST_BATCHED_PINGS_F64, PST_LOST_PINGS_F64, PST_TASKS_COMPLETED_F64, PST_TASKS_FAILED_F64, PST_TASKS_SUBMITTED_F64 } from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import { CONTROL_RETURN_NOW, CONTROL_RETURN_WHEN_EMPTY, CONTROL_RUN, NEEDS_STORE, type ContainmentTask } from './containment-thread.js';

/** Records claimed (over all shards) after which the ingest thread publishes and submits without waiting for the chunk's end. */
export const PUBLISH_EVERY_RECORDS = 256;

/**
 * Longest a task keeps taking new records before it answers, ms. Pause and drain do not wait for it (they raise the
 * control cell); it only bounds a task's life. Long, because under load an answer waits for the ingest thread's
 * event loop (behind its read chunks) while the group's records pile up: each answer costs the group a stall.
 */
export const TASK_MAX_MS = 60_000;

/**
 * How long a task whose shards are empty waits for more records before it answers, ms. Long enough to ride out a
 * pause of the ingest thread (a GC, a host that deschedules it) without ending the task under load.
 */
export const TASK_LINGER_MS = 100;


/** Per-shard batching and task submission. Ingest thread only. */
export class ShardScheduler {
  /** Records per task at most; also the claimed count that publishes a shard early. */
  readonly batchSize: number;
  private readonly pool: Piscina<ContainmentTask, number>;
  /** The shards' telemetry rings (producer side). */
  readonly rings: readonly SpscRing[];
  private readonly stats: Float64Array;
  /** Shard groups (one task in flight per group at most). */
  readonly groups: number;
  private readonly groupShards: number[][];
  private readonly inFlight: Uint8Array;
  /** Per group: 1 when its next task must carry the store (a worker answered NEEDS_STORE). */
  private readonly sendStore: Uint8Array;
  /** Per shard: records available when its group's task was submitted (what a failed task drops). */
  private readonly submittedCount: Int32Array;
  private readonly submittedFrom: Int32Array;
  private readonly dirty: Uint8Array;
  private readonly dirtyList: Int32Array;
  private dirtyCount = 0;
  private claimedSinceFlush = 0;
  private inFlightCount = 0;
  private paused = false;
  private draining = false;
  private generation: number;
  private fences: FenceStoreDescriptor;
  private idleWaiters: (() => void)[] = [];
  /** Cell 0: CONTROL_* for every running task (shared with the pool workers; read at each pass and linger step). */
  private readonly control = new Int32Array(new SharedArrayBuffer(4));
  private readonly onError: (message: string) => void;

  constructor(
    pool: Piscina<ContainmentTask, number>,
    rings: readonly SpscRing[],
    batchSize: number,
    groups: number,
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
    if (!(Number.isInteger(groups) && groups >= 1)) throw new RangeError(`groups must be an integer >= 1, got ${groups}`);
    this.groups = Math.min(groups, rings.length);
    this.groupShards = Array.from({ length: this.groups }, () => []);
    for (let s = 0; s < rings.length; s++) this.groupShards[s % this.groups]!.push(s);
    this.inFlight = new Uint8Array(this.groups);
    this.sendStore = new Uint8Array(this.groups);
    this.submittedCount = new Int32Array(rings.length);
    this.submittedFrom = new Int32Array(rings.length);
    this.dirty = new Uint8Array(rings.length);
    this.dirtyList = new Int32Array(rings.length);
  }

  /** Tasks in flight. */
  get tasksInFlight(): number {
    return this.inFlightCount;
  }

  /**
   * Notes that `shard` has claimed a record; publishes and submits at once when a full batch is claimed in the shard,
   * and flushes every shard each PUBLISH_EVERY_RECORDS records, so containment starts on the head of a large read chunk
   * while the rest is still being decoded.
   */
  noteClaimed(shard: number, ring: SpscRing): void {
    if (this.dirty[shard] === 0) {
      this.dirty[shard] = 1;
      this.dirtyList[this.dirtyCount++] = shard;
    }
    if (++this.claimedSinceFlush >= PUBLISH_EVERY_RECORDS) {
      this.flush();
    } else if (ring.pendingCount() >= this.batchSize) {
      ring.publish();
      this.trySubmit(shard);
    }
  }

  /** End of a read chunk: publishes every shard with claimed records, then submits the idle groups. */
  flush(): void {
    const n = this.dirtyCount;
    this.claimedSinceFlush = 0;
    if (n === 0) return;
    for (let k = 0; k < n; k++) {
      const shard = this.dirtyList[k]!;
      this.dirty[shard] = 0;
      this.rings[shard]!.publish();
    }
    this.dirtyCount = 0;
    for (let g = 0; g < this.groups; g++) this.trySubmitGroup(g);
  }

  /** Stops submitting; resolves when no task is in flight (the reload pause). */
  pause(): Promise<void> {
    this.paused = true;
    Atomics.store(this.control, 0, CONTROL_RETURN_NOW);
    return this.idle();
  }

  /** Switches to a fence generation and resumes submitting. */
  resume(fences: FenceStoreDescriptor): void {
    this.fences = fences;
    this.generation = fences.generation;
    // The workers have not opened this generation yet: the next task of each group carries it.
    this.sendStore.fill(1);
    this.paused = false;
    Atomics.store(this.control, 0, this.draining ? CONTROL_RETURN_WHEN_EMPTY : CONTROL_RUN);
    for (let g = 0; g < this.groups; g++) this.trySubmitGroup(g);
  }

  /** Tasks answer once their shards are empty instead of lingering (drain: nothing more is coming). */
  setDraining(): void {
    this.draining = true;
    if (!this.paused) Atomics.store(this.control, 0, CONTROL_RETURN_WHEN_EMPTY);
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

  /** Submits a task for `shard`'s group when one of its shards has published records, it is not in flight and submitting is not paused. */
  trySubmit(shard: number): void {
    this.trySubmitGroup(shard % this.groups);
  }

  private trySubmitGroup(group: number): void {
    if (this.paused || this.inFlight[group] !== 0) return;
    const shards = this.groupShards[group]!;
    let available = 0;
    for (const s of shards) available += this.rings[s]!.available();
    if (available === 0) return;
    const fromSeqs = new Array<number>(shards.length);
    for (let i = 0; i < shards.length; i++) {
      const s = shards[i]!;
      const ring = this.rings[s]!;
      fromSeqs[i] = ring.readSeq();
      this.submittedFrom[s] = fromSeqs[i]!;
      this.submittedCount[s] = ring.available();
    }
    const task: ContainmentTask = {
      shards,
      fromSeqs,
      batchRecords: this.batchSize,
      maxTaskMs: TASK_MAX_MS,
      lingerMs: TASK_LINGER_MS,
      generation: this.generation,
      control: this.control.buffer as SharedArrayBuffer,
      fences: this.sendStore[group] !== 0 ? this.fences : null,
    };
    this.sendStore[group] = 0;
    this.inFlight[group] = 1;
    this.inFlightCount++;
    this.stats[PST_TASKS_SUBMITTED_F64]!++;
    this.pool.run(task).then(
      (consumed) => this.complete(group, consumed, false),
      (err: unknown) => {
        this.onError(`containment task for shards ${shards.join(',')} failed: ${err instanceof Error ? err.message : String(err)}`);
        this.complete(group, 0, true);
      },
    );
  }

  private complete(group: number, consumed: number, failed: boolean): void {
    if (consumed === NEEDS_STORE) {
      // The worker has not opened this generation: send it along with the next task.
      this.sendStore[group] = 1;
      consumed = 0;
    }
    if (failed) {
      // The worker may have released part of its work: take the consumer role (the pool's answer orders us after it)
      // and drop what is left, per shard, of the records that were there when the task was submitted.
      let lost = 0;
      for (const s of this.groupShards[group]!) {
        const ring = this.rings[s]!;
        const left = (this.submittedFrom[s]! + this.submittedCount[s]! - ring.readSeq()) | 0;
        if (left > 0) {
          ring.release(left);
          lost += left;
        }
      }
      this.stats[PST_TASKS_FAILED_F64]!++;
      this.stats[PST_LOST_PINGS_F64]! += lost;
    } else {
      this.stats[PST_TASKS_COMPLETED_F64]!++;
      this.stats[PST_BATCHED_PINGS_F64]! += consumed;
    }
    this.inFlight[group] = 0;
    this.inFlightCount--;
    this.trySubmitGroup(group);
    if (this.inFlightCount === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
