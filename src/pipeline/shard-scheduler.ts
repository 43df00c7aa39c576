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
 * A task that fails (its worker threw or exited) or that the watchdog aborts as hung (`checkStalls`) costs the group
 * only the batch it held: that batch is dropped and counted lost with its reason, and the group is resubmitted.
 * With a COMPLIANCE ring (compliance-path.ts) there is one group more, `complianceGroup`, on a pool worker of its own:
 * its task consumes the COMPLIANCE rings, lingers on them for as long as a task may live (it is idle most of the time,
 * and a publish wakes it), and is submitted the moment a record is claimed there. A device's records are in the
 * shard rings or the COMPLIANCE ring, never both at once (the path rule), so per-device order still needs one
 * consumer per ring only.
 */
import type { Piscina } from 'piscina';
import type { FenceStoreDescriptor } from '../fences/store.js';
import {
  PST_BATCHED_PINGS_F64,
  PST_LOST_PINGS_F64,
  PST_LOST_PINGS_HUNG_F64,
  PST_STALLED_GROUPS_F64,
  PST_TASKS_ABORTED_F64,
  PST_TASKS_COMPLETED_F64,
  PST_TASKS_FAILED_F64,
  PST_TASKS_SUBMITTED_F64,
  WDG_HELD_RING_I32,
  WDG_PROGRESS_I32,
  WDG_STALLED_I32,
  WDG_STRIDE_I32,
  WDG_THREAD_ID_I32,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { HeldBatches, HeldBatchOutcome } from './held-batch.js';
import {
  CONTROL_RETURN_NOW,
  CONTROL_RETURN_WHEN_EMPTY,
  CONTROL_RUN,
  NEEDS_STORE,
  type ContainmentTask,
} from './containment-task.js';

/** Records claimed (over all shards) after which the ingest thread publishes and submits without waiting for the chunk's end. */
const PUBLISH_EVERY_RECORDS = 256;

/**
 * Longest a task keeps taking new records before it answers, ms. Pause and drain do not wait for it (they raise the
 * control cell); it only bounds a task's life. Long, because under load an answer waits for the ingest thread's
 * event loop (behind its read chunks) while the group's records pile up: each answer costs the group a stall.
 */
const TASK_MAX_MS = 60_000;

/**
 * How long a task whose shards are empty waits for more records before it answers, ms. Long enough to ride out a
 * pause of the ingest thread (a GC, a host that deschedules it) without ending the task under load.
 */
export const TASK_LINGER_MS = 100;

/** How often the ingest thread runs the containment watchdog (`ShardScheduler.checkStalls`), ms. */
export const WATCHDOG_INTERVAL_MS = 250;

/**
 * Trigger-ring fill at or above which a group without progress counts as held back by the dispatcher, not hung: a
 * full trigger ring pauses containment by design (trigger-writer.ts), and a slow downstream must not get workers killed.
 */
const WATCHDOG_BACKPRESSURE_FILL = 0.9;

/** A watchdog check this long after the previous one finds the clock untrustworthy (see `checkStalls`), ms. */
const WATCHDOG_LATE_MS = 4 * WATCHDOG_INTERVAL_MS;

/** The containment watchdog's settings and surroundings (ShardScheduler). */
export interface WatchdogSettings {
  /** The WDG_* cells (memory.watchdog). */
  cells: Int32Array;
  /** A group without progress for this long, with records waiting and room in its trigger rings, is hung, ms. */
  stallMs: number;
  /** The shards' trigger rings (read only: their fill tells backpressure from a hang). */
  triggerRings: readonly SpscRing[];
  /** The COMPLIANCE group's trigger ring (read only), or null (no COMPLIANCE path). */
  complianceTriggerRing: SpscRing | null;
  /** Settles the batch a failed task held (which records are done, which one is lost, what to put back). */
  heldBatches: HeldBatches;
}

/** How long the COMPLIANCE group's task waits for records before it answers, ms: it is idle most of the time. */
const COMPLIANCE_LINGER_MS = TASK_MAX_MS;
/** Each wait of the COMPLIANCE group's lingering task, ms (a publish, a pause and a drain wake it at once). */
const COMPLIANCE_PARK_STEP_MS = 20;
/** Each wait of a shard group's lingering task on one of its rings, ms (the producer's publish wakes it sooner). */
const SHARD_PARK_STEP_MS = 0.25;

/** How containment batches are sized: a count that caps them and a time they are sized to. */
export interface BatchSettings {
  /** Records per shard per pass at most (also the claimed count at which a shard is published). */
  batchSize: number;
  /** Time one batch is sized to from the worker's measured cost per ping, µs. */
  batchBudgetUs: number;
}

/** Per-shard batching and task submission. Ingest thread only. */
export class ShardScheduler {
  /** Records per task at most; also the claimed count that publishes a shard early. */
  readonly batchSize: number;
  /** Time a containment batch is sized to, µs (see ContainmentTask.batchBudgetNs). */
  readonly batchBudgetUs: number;
  private readonly pool: Piscina<ContainmentTask, number>;
  /** This thread's telemetry rings, one per shard (producer side: ingest thread 0's, `telemetryRingIndex(0, s)`). */
  readonly rings: readonly SpscRing[];
  /** Every telemetry ring, one per (ingest thread, shard), in `telemetryRingIndex` order (consumer side). */
  readonly allRings: readonly SpscRing[];
  /** Every ring a task may name: `allRings`, then the COMPLIANCE rings (`complianceRingIndex` order). */
  private readonly taskRings: readonly SpscRing[];
  /** The COMPLIANCE group (index `groups`, its task on a pool worker of its own), or -1 without a COMPLIANCE path. */
  readonly complianceGroup: number;
  /** Shard groups and the COMPLIANCE group. */
  private readonly groupCount: number;
  /** Per group: its first WDG_* cell (group g's block is g; the COMPLIANCE group's is `shards`). */
  private readonly wdBase: Int32Array;
  private readonly stats: Float64Array;
  /** Shard groups (one task in flight per group at most). */
  readonly groups: number;
  private readonly groupShards: number[][];
  /** Per group: its rings (every ingest thread's ring of each of its shards), ascending; ring g comes first. */
  private readonly groupRings: number[][];
  private readonly inFlight: Uint8Array;
  /** Per group: 1 when its next task must carry the store (a worker answered NEEDS_STORE). */
  private readonly sendStore: Uint8Array;
  /** Per ring: records available when its group's task was submitted (what a failed task drops). */
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
  private readonly wd: WatchdogSettings | null;
  /** Per group: abort controller of the task in flight (the watchdog's handle on it). */
  private readonly controllers: (AbortController | null)[];
  /** Per group: the heartbeat seen last, and when it last moved (or the group last had nothing to do), ms. */
  private readonly seenProgress: Int32Array;
  private readonly movedAtMs: Float64Array;
  /** Per group: 1 from the watchdog's abort until the aborted task's worker has exited and the group is handed back. */
  private readonly aborting: Uint8Array;
  /** Per group: 1 while declared hung; the heartbeat at detection (any later batch clears it). */
  private readonly stalled: Uint8Array;
  private readonly stalledProgress: Int32Array;
  /** Per group: resolves when the aborted task's worker has exited (only then is the ingest thread the consumer). */
  private readonly exited: (Promise<void> | null)[];
  /** When `checkStalls` last ran, ms (0: never). */
  private lastCheckMs = 0;

  /**
   * @param rings every telemetry ring (`ingestThreads * shards`, in `telemetryRingIndex` order); this thread produces
   *   into the first `shards` of them
   * @param shards the router's shards
   * @param complianceRings every ingest thread's COMPLIANCE ring (this thread produces into the first), or none
   */
  constructor(
    pool: Piscina<ContainmentTask, number>,
    rings: readonly SpscRing[],
    shards: number,
    batching: BatchSettings,
    groups: number,
    stats: Float64Array,
    fences: FenceStoreDescriptor,
    onError: (message: string) => void,
    watchdog: WatchdogSettings | null = null,
    complianceRings: readonly SpscRing[] = [],
  ) {
    this.pool = pool;
    if (!(Number.isInteger(shards) && shards >= 1 && rings.length >= shards && rings.length % shards === 0)) {
      throw new RangeError(`rings (${rings.length}) must be a whole number of sets of ${shards} shards`);
    }
    this.allRings = rings;
    this.rings = rings.slice(0, shards);
    this.batchSize = batching.batchSize;
    this.batchBudgetUs = batching.batchBudgetUs;
    this.stats = stats;
    this.fences = fences;
    this.generation = fences.generation;
    this.onError = onError;
    if (!(Number.isInteger(groups) && groups >= 1))
      throw new RangeError(`groups must be an integer >= 1, got ${groups}`);
    this.groups = Math.min(groups, shards);
    this.complianceGroup = complianceRings.length > 0 ? this.groups : -1;
    this.groupCount = this.groups + (complianceRings.length > 0 ? 1 : 0);
    this.taskRings = complianceRings.length > 0 ? [...rings, ...complianceRings] : rings;
    this.groupShards = Array.from({ length: this.groupCount }, () => []);
    for (let s = 0; s < shards; s++) this.groupShards[s % this.groups]!.push(s);
    this.groupRings = Array.from({ length: this.groupCount }, () => []);
    for (let r = 0; r < rings.length; r++) this.groupRings[(r % shards) % this.groups]!.push(r);
    for (let k = 0; k < complianceRings.length; k++) this.groupRings[this.complianceGroup]!.push(rings.length + k);
    this.wdBase = new Int32Array(this.groupCount);
    for (let g = 0; g < this.groupCount; g++) this.wdBase[g] = (g < this.groups ? g : shards) * WDG_STRIDE_I32;
    this.inFlight = new Uint8Array(this.groupCount);
    this.sendStore = new Uint8Array(this.groupCount);
    this.submittedCount = new Int32Array(this.taskRings.length);
    this.submittedFrom = new Int32Array(this.taskRings.length);
    this.dirty = new Uint8Array(shards);
    this.dirtyList = new Int32Array(shards);
    this.wd = watchdog;
    this.controllers = new Array<AbortController | null>(this.groupCount).fill(null);
    this.seenProgress = new Int32Array(this.groupCount);
    this.movedAtMs = new Float64Array(this.groupCount);
    this.aborting = new Uint8Array(this.groupCount);
    this.stalled = new Uint8Array(this.groupCount);
    this.stalledProgress = new Int32Array(this.groupCount);
    this.exited = new Array<Promise<void> | null>(this.groupCount).fill(null);
  }

  /** How a log line names a group: its shards, or the COMPLIANCE ring. */
  private groupLabel(group: number): string {
    return group === this.complianceGroup ? 'the COMPLIANCE ring' : `shards ${this.groupShards[group]!.join(',')}`;
  }

  /**
   * The containment watchdog (ingest thread, every WATCHDOG_INTERVAL_MS). A group is declared hung when its task is
   * in flight, its shards have records waiting, its trigger rings are below WATCHDOG_BACKPRESSURE_FILL, and its
   * heartbeat (WDG_PROGRESS_I32, one store per batch begun) has not moved for `stallMs`. Then: an error is logged
   * naming the shards and the time without progress, PST_TASKS_ABORTED_F64 counts it, the group's shards are flagged
   * stalled (/healthz answers 503), and the task is aborted: Piscina rejects it at once and terminates its worker
   * (starting a replacement). The group is handed back only once that worker has exited, so two consumers never
   * touch a ring; then the ping the task was in is dropped (see `complete`) and the group is resubmitted. The stalled
   * flag clears when the group's heartbeat moves again (its replacement began a batch) or it has nothing left to do.
   */
  checkStalls(nowMs: number): void {
    const wd = this.wd;
    if (wd === null) return;
    const cells = wd.cells;
    // A check that comes late means this thread (or the whole host) was not running: the workers were likely held
    // too, so time without progress before now proves nothing. Start every group's clock again.
    const late = this.lastCheckMs > 0 && nowMs - this.lastCheckMs > WATCHDOG_LATE_MS;
    this.lastCheckMs = nowMs;
    for (let g = 0; g < this.groupCount; g++) {
      const progress = Atomics.load(cells, this.wdBase[g]! + WDG_PROGRESS_I32);
      const waiting = this.waitingIn(g);
      if (
        this.stalled[g] !== 0 &&
        this.aborting[g] === 0 &&
        (progress !== this.stalledProgress[g] || (waiting === 0 && this.inFlight[g] === 0))
      ) {
        this.setStalled(g, 0);
      }
      if (
        late ||
        progress !== this.seenProgress[g] ||
        this.inFlight[g] === 0 ||
        this.aborting[g] !== 0 ||
        waiting === 0 ||
        this.backpressured(g)
      ) {
        this.seenProgress[g] = progress;
        this.movedAtMs[g] = nowMs;
        continue;
      }
      const stuckMs = nowMs - this.movedAtMs[g]!;
      if (stuckMs >= wd.stallMs) this.abortHung(g, progress, stuckMs, nowMs);
    }
  }

  private waitingIn(group: number): number {
    let n = 0;
    for (const r of this.groupRings[group]!) n += this.taskRings[r]!.available();
    return n;
  }

  private backpressured(group: number): boolean {
    if (group === this.complianceGroup) {
      const ring = this.wd!.complianceTriggerRing;
      return ring !== null && ring.fill() >= WATCHDOG_BACKPRESSURE_FILL;
    }
    const trig = this.wd!.triggerRings;
    for (const s of this.groupShards[group]!) if (trig[s]!.fill() >= WATCHDOG_BACKPRESSURE_FILL) return true;
    return false;
  }

  private setStalled(group: number, on: 0 | 1): void {
    if (this.stalled[group] === on) return;
    this.stalled[group] = on;
    this.stats[PST_STALLED_GROUPS_F64]! += on === 1 ? 1 : -1;
    const cells = this.wd!.cells;
    if (group === this.complianceGroup) Atomics.store(cells, this.wdBase[group]! + WDG_STALLED_I32, on);
    for (const s of this.groupShards[group]!) Atomics.store(cells, s * WDG_STRIDE_I32 + WDG_STALLED_I32, on);
  }

  private abortHung(group: number, progress: number, stuckMs: number, nowMs: number): void {
    const controller = this.controllers[group];
    if (controller === null || controller === undefined) return;
    const cells = this.wd!.cells;
    const tid = Atomics.load(cells, this.wdBase[group]! + WDG_THREAD_ID_I32);
    if (tid === 0) {
      // The task has not started on a worker yet (a replacement worker still loading): not a containment hang.
      this.movedAtMs[group] = nowMs;
      return;
    }
    const worker = this.pool.threads.find((w) => w.threadId === tid);
    // Why wait for 'exit': Piscina rejects the task before its worker is gone; until then it could still write.
    this.exited[group] =
      worker === undefined ? Promise.resolve() : new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    this.aborting[group] = 1;
    this.stalledProgress[group] = progress;
    this.setStalled(group, 1);
    this.stats[PST_TASKS_ABORTED_F64]!++;
    this.onError(
      `containment watchdog: the task for ${this.groupLabel(group)} made no progress for ${Math.round(stuckMs)} ms ` +
        `with ${this.waitingIn(group)} records waiting; aborting it (its worker is replaced, the batch it held is dropped)`,
    );
    controller.abort(new Error(`containment task made no progress for ${Math.round(stuckMs)} ms`));
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

  /** A record claimed in this thread's COMPLIANCE ring: published and its group submitted at once (its task waits). */
  noteComplianceClaimed(ring: SpscRing): void {
    ring.publish();
    this.trySubmitGroup(this.complianceGroup);
  }

  /** Start of a read chunk: nothing to note (the expiry sweep runs on this thread, between chunks). */
  begin(): void {
    // Ingest thread 0 sweeps between its own chunks: everything it confirmed is published by then.
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
    this.wakeComplianceTask();
    return this.idle();
  }

  /** Wakes the COMPLIANCE group's task if it is parked (it parks for long), so it reads the control cell now. */
  private wakeComplianceTask(): void {
    for (let r = this.allRings.length; r < this.taskRings.length; r++) this.taskRings[r]!.wakeConsumer();
  }

  /** Switches to a fence generation and resumes submitting. */
  resume(fences: FenceStoreDescriptor): void {
    this.fences = fences;
    this.generation = fences.generation;
    // The workers have not opened this generation yet: the next task of each group carries it.
    this.sendStore.fill(1);
    this.paused = false;
    Atomics.store(this.control, 0, this.draining ? CONTROL_RETURN_WHEN_EMPTY : CONTROL_RUN);
    for (let g = 0; g < this.groupCount; g++) this.trySubmitGroup(g);
  }

  /** Tasks answer once their shards are empty instead of lingering (drain: nothing more is coming). */
  setDraining(): void {
    this.draining = true;
    if (!this.paused) Atomics.store(this.control, 0, CONTROL_RETURN_WHEN_EMPTY);
    this.wakeComplianceTask();
  }

  /** Resolves when no task is in flight. */
  idle(): Promise<void> {
    if (this.inFlightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** True when every ring is empty (every ingest thread's) and nothing is claimed here or in flight. */
  isEmpty(): boolean {
    if (this.inFlightCount > 0 || this.dirtyCount > 0) return false;
    for (const r of this.rings) if (r.pendingCount() > 0) return false;
    for (const r of this.taskRings) if (r.available() > 0) return false;
    return true;
  }

  /** Submits every idle group that has published records in any of its rings (another ingest thread wrote them). */
  submitWaiting(): void {
    for (let g = 0; g < this.groupCount; g++) this.trySubmitGroup(g);
  }

  /** Submits a task for `shard`'s group when one of its shards has published records, it is not in flight and submitting is not paused. */
  trySubmit(shard: number): void {
    this.trySubmitGroup(shard % this.groups);
  }

  private trySubmitGroup(group: number): void {
    if (this.paused || this.inFlight[group] !== 0) return;
    const rings = this.groupRings[group]!;
    if (this.waitingIn(group) === 0) return;
    const fromSeqs = new Array<number>(rings.length);
    for (let i = 0; i < rings.length; i++) {
      const r = rings[i]!;
      const ring = this.taskRings[r]!;
      fromSeqs[i] = ring.readSeq();
      this.submittedFrom[r] = fromSeqs[i]!;
      this.submittedCount[r] = ring.available();
    }
    const compliance = group === this.complianceGroup;
    const task: ContainmentTask = {
      rings,
      fromSeqs,
      compliance,
      batchRecords: this.batchSize,
      batchBudgetNs: this.batchBudgetUs * 1e3,
      maxTaskMs: TASK_MAX_MS,
      lingerMs: compliance ? COMPLIANCE_LINGER_MS : TASK_LINGER_MS,
      parkStepMs: compliance ? COMPLIANCE_PARK_STEP_MS : SHARD_PARK_STEP_MS,
      generation: this.generation,
      control: this.control.buffer as SharedArrayBuffer,
      fences: this.sendStore[group] !== 0 ? this.fences : null,
    };
    this.sendStore[group] = 0;
    this.inFlight[group] = 1;
    this.inFlightCount++;
    this.stats[PST_TASKS_SUBMITTED_F64]!++;
    if (this.wd !== null) {
      // The task stores its worker's threadId when it starts; 0 until then (see abortHung).
      this.wd.cells[this.wdBase[group]! + WDG_HELD_RING_I32] = -1;
      Atomics.store(this.wd.cells, this.wdBase[group]! + WDG_THREAD_ID_I32, 0);
    }
    const controller = this.wd !== null ? new AbortController() : null;
    this.controllers[group] = controller;
    this.pool.run(task, controller !== null ? { signal: controller.signal } : {}).then(
      (consumed) => this.complete(group, consumed, false),
      (err: unknown) => {
        const exited = this.exited[group];
        if (this.aborting[group] !== 0 && exited !== null && exited !== undefined) {
          // Aborted by the watchdog (already logged): take the group back once the worker is gone.
          void exited.then(() => {
            this.exited[group] = null;
            this.complete(group, 0, true);
            this.aborting[group] = 0;
          });
          return;
        }
        this.onError(
          `containment task for ${this.groupLabel(group)} failed: ${err instanceof Error ? err.message : String(err)}`,
        );
        this.complete(group, 0, true);
      },
    );
  }

  /** Logs what settling a failed task's batch did to a device (see HeldBatches.settle). */
  private reportSettled(group: number, outcome: HeldBatchOutcome): void {
    const label = `containment task for ${this.groupLabel(group)}`;
    if (outcome.restoredSlot >= 0) {
      this.onError(
        `${label}: device slot ${outcome.restoredSlot} put back as it was before the record it failed in` +
          (outcome.untrackedStays > 0
            ? ` (${outcome.untrackedStays} of its fence stays found no room in the overflow pool: untracked)`
            : ''),
      );
    }
    if (outcome.tornSlot >= 0) {
      this.onError(
        `${label}: device slot ${outcome.tornSlot} left half updated by the failed record (some of its triggers had filled the trigger ring and gone out): its next triggers may skip a seq or repeat an EXIT or ENTER`,
      );
    }
    if (outcome.droppedExpirySlot >= 0) {
      this.onError(
        `${label}: the expiry record of device slot ${outcome.droppedExpirySlot} failed twice and was dropped (${outcome.expiryUndone ? 'the device is active again, for a later sweep to expire' : 'the device stays as it was'})`,
      );
    }
  }

  private complete(group: number, consumed: number, failed: boolean): void {
    if (consumed === NEEDS_STORE) {
      // The worker has not opened this generation: send it along with the next task.
      this.sendStore[group] = 1;
      consumed = 0;
    }
    this.controllers[group] = null;
    if (failed) {
      // The worker is gone or done (the pool's answer, or its exit, orders us after it): take the consumer role.
      let lost = 0;
      const cells = this.wd !== null ? this.wd.cells : null;
      const wb = this.wdBase[group]!;
      const heldRing = cells !== null ? cells[wb + WDG_HELD_RING_I32]! : -1;
      if (cells !== null && heldRing >= 0) {
        // The task died inside a batch: the records it finished stand, the one it was in is dropped (it may be the
        // ping that hangs or throws) and its device put back as before it, and the rest stay for the resubmitted task.
        const ring = this.taskRings[heldRing]!;
        const outcome = this.wd!.heldBatches.settle(wb / WDG_STRIDE_I32, ring, heldRing);
        lost = outcome.lost;
        ring.release(outcome.done + outcome.lost + outcome.dropped);
        cells[wb + WDG_HELD_RING_I32] = -1;
        this.reportSettled(group, outcome);
      } else {
        // Failed outside a batch (at its start, or between batches): drop, per shard, what is left of the records that
        // were there when it was submitted, so a task that fails at its start cannot fail for ever.
        for (const r of this.groupRings[group]!) {
          const ring = this.taskRings[r]!;
          const left = (this.submittedFrom[r]! + this.submittedCount[r]! - ring.readSeq()) | 0;
          if (left > 0) {
            ring.release(left);
            lost += left;
          }
        }
      }
      if (this.aborting[group] !== 0) this.stats[PST_LOST_PINGS_HUNG_F64]! += lost;
      else this.stats[PST_TASKS_FAILED_F64]!++;
      this.stats[PST_LOST_PINGS_F64]! += lost;
      if (lost > 0) {
        this.onError(
          `containment task for ${this.groupLabel(group)}: ${lost} pings dropped unprocessed (reason: ${this.aborting[group] !== 0 ? 'hung' : 'failed'})`,
        );
      }
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
