/**
 * PipelineRouter (main thread): the lifecycle of one router over its shared memory. It starts the threads (dispatcher
 * first, then the ingest thread with its containment pool) and the admin server, forwards in-process and stdin input,
 * runs the checkpoint and progress timers, queues fence reloads (fence-swap.ts does the swap), and drains and closes.
 *
 *   main thread: options, fence loading and reload, admin HTTP server, the embedding's callbacks (bridge), stats
 *   ingest thread (owns the containment pool) -> telemetry rings -> pool workers -> trigger rings -> dispatcher thread
 *
 * Durable state (see src/pipeline/state-keeper.ts): the state directory is locked and restored before any thread
 * starts; the dispatcher thread starts next (it takes over what the downstreams' files hold), then the restore's EXITs
 * for removed fences are written and read, then the ingest thread starts. Checkpoints run in the same one-at-a-time
 * chain as reloads; the last one, at a clean close, is marked clean and then the directory's lock is released.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isMainThread } from 'node:worker_threads';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN_REFUSAL_REASONS, type AdminHandlers, type AdminServer } from '../admin/admin-server.js';
import { isLoopbackHost } from '../auth/secrets.js';
import type { CallbackDownstreamOptions, RouterOptions } from '../config/options.js';
import { DeviceState } from '../fences/device-state.js';
import { loadFenceStoreOffThread, type FenceFileLimits } from '../fences/fence-file.js';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import type { TelemetryPoint } from '../ingest/ping-fields.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { RouterMetrics } from '../metrics/router-metrics.js';
import type { DispatcherThreadData } from '../pipeline/dispatcher-thread.js';
import { allocatePipelineMemory, pipelineMemorySpecOf, type PipelineMemory } from '../pipeline/memory.js';
import type { LogFn, RouterLog } from '../log/router-log.js';
import type { DispatcherRequest, IngestRequest } from '../pipeline/messages.js';
import { InputBacklog, MAX_INPUT_BACKLOG_BYTES } from '../pipeline/input-backlog.js';
import { readRouterStats, type RouterStats } from '../pipeline/stats.js';
import {
  PROGRESS_INTERVAL_MS,
  StateKeeper,
  type PartitionStateAtStart,
  type RecoveryReport,
} from '../pipeline/state-keeper.js';
import type { PartitionCheckpoints } from './partition-checkpoints.js';
import { MetricNames } from '../metrics/metric-names.js';
import { describeUnconfigured, undeliveredOf } from '../durable/unconfigured-downstreams.js';
import { errorText } from '../durable/fs-util.js';
import { downstreamSpecs, ThreadHandle } from '../pipeline/threads.js';
import { StateDirectory } from '../durable/state-dir.js';
import { FENCE_EDIT_JOURNAL_FILE, FenceEditJournal, type JournalContents } from '../durable/fence-edit-journal.js';
import type { StoredFenceEdit } from '../fences/stored-edits.js';
import {
  CNT_BLOCK_F64,
  CNT_FENCE_OVERFLOW_F64,
  IngestState,
  PST_RELOADS_F64,
  PST_RELOADS_FAILED_F64,
  PST_FENCE_EDITS_F64,
  PST_INPUT_ERRORS_F64,
  PST_FENCE_EDITS_FAILED_F64,
  PST_FENCE_EDIT_LAST_NS_F64,
  RingKind,
  RT_REPORTED_AT_MS_F64,
  sourceCheckpointCell,
  LEASE_LOST_F64,
  LEASE_PARTITIONS_RELEASED_F64,
  LEASE_PARTITIONS_TAKEN_F64,
  LEASE_ROUTERS_STARTED_F64,
  LEASE_VALID_UNTIL_MS_F64,
  RT_STRIDE_F64,
  RT_THREAD_DISPATCHER,
  RT_THREAD_INGEST,
  RT_THREAD_MAIN,
  WDG_STALLED_I32,
  WDG_STRIDE_I32,
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import { LOOKUP_ONLY_STORE } from '../pipeline/store-views.js';
import type { StartProgress } from '../pipeline/start-progress.js';
import type { FenceEditResult, ReloadResult, Router, RouterSummary } from './api.js';
import { callbackErrorText, openCallbackBridge, type CallbackBridgeEnd } from './callback-bridge.js';
import { DeviceIdReader } from '../ingest/device-registry.js';
import { TriggerStream } from './trigger-stream.js';
import { StateQueries, type DeviceNow, type FenceOccupant } from './state-queries.js';
import { ingestThreadData } from './thread-data.js';
import { swapFenceGeneration } from './fence-swap.js';
import { FenceEditor } from './fence-edits.js';
import { dependencyAddonsLoaded } from './native-check.js';
import { startThreadRuntimeReporter, type ThreadRuntimeReporter } from '../pipeline/thread-runtime.js';

/** A pipeline thread whose runtime report (its heartbeat, every second) is older than this is unhealthy, ms. */
const HEARTBEAT_STALE_MS = 5000;

/** Least time between two log lines about untracked fences, ms. */
const UNTRACKED_LOG_INTERVAL_MS = 10_000;

/**
 * How long after the drain deadline a trigger stream's loop may still hold a batch before it is let go (see
 * PipelineRouter.drain): a loop handling its batch comes back for the next one well within it.
 */
const STREAM_HELD_GRACE_MS = 1000;

/** The Router implementation. */
export class PipelineRouter implements Router {
  ingestPort: number | null = null;
  adminPort: number | null = null;
  readonly options: Readonly<RouterOptions>;
  private readonly memory: PipelineMemory;
  private readonly pipeline: PipelineRegion;
  private readonly state: DeviceState;
  private readonly controlRing: SpscRing;
  /** Containment's trigger rings: one per shard, and the COMPLIANCE group's when there is one. */
  private readonly shardTriggerRings: SpscRing[];
  /** Every trigger ring in the dispatcher's order (memory.triggerRings). */
  private readonly everyTriggerRing: SpscRing[];
  private readonly containment: Float64Array;
  private readonly statsCells: Float64Array;
  private readonly views: Parameters<typeof readRouterStats>[0];
  private readonly metrics: RouterMetrics;
  private readonly log: LogFn;
  private readonly routerLog: RouterLog;
  /** In-process and stdin input posted to the ingest thread and not yet fed (shared cells). */
  private readonly backlog: InputBacklog;
  /** Resolvers of inputDrained() calls waiting for the in-process backlog. */
  private drainedWaiters: (() => void)[] = [];
  private drainDeadlineMs: number;
  private readonly startedAtMs = Date.now();
  private store: FenceStore;
  private ingestThread: ThreadHandle | null = null;
  private dispatcherThread: ThreadHandle | null = null;
  private admin: AdminServer | null = null;
  private bridge: CallbackBridgeEnd | null = null;
  private readonly queries: StateQueries;
  /** The trigger streams, by downstream index (null for a downstream of another kind). */
  private readonly streams: (TriggerStream | null)[];
  private reloadChain: Promise<unknown> = Promise.resolve();
  /** Live fence edits and fence expiry. */
  private readonly editor: FenceEditor;
  private drainPromise: Promise<void> | null = null;
  private closePromise: Promise<RouterSummary> | null = null;
  private inputsDone: () => void = () => undefined;
  private readonly inputsDonePromise: Promise<void>;
  private stdinListener: ((chunk: Buffer) => void) | null = null;
  private readonly dir: StateDirectory;
  /** True when the state directory is a temporary one, removed at close. */
  private readonly ephemeral: boolean;
  private readonly keeper: StateKeeper;
  /** The live edits since the last reload, kept for the next start (null without a state directory of the caller's). */
  private journal: FenceEditJournal | null = null;
  private checkpointTimer: NodeJS.Timeout | null = null;
  /** The partitions' device state in JetStream (a partitioned source with a state bucket), else null. */
  private readonly partitionCheckpoints: PartitionCheckpoints | null;
  /** The main thread's runtime reports (started with the threads, stopped with the timers). */
  private runtimeReporter: ThreadRuntimeReporter | null = null;
  private progressTimer: NodeJS.Timeout | null = null;
  /** Untracked pings already logged, and when. */
  private untrackedLogged = 0;
  private untrackedLoggedAtMs = -Infinity;
  /** Set once the ingest thread ran: a failed start after it cannot be called clean. */
  private ingestStarted = false;

  /** The state directory in use. */
  get stateDir(): string {
    return this.dir.dir;
  }

  /** See Router.failure. */
  readonly failure: Promise<Error>;
  private failed: (err: Error) => void = () => undefined;

  /** What the start found in the state directory. */
  get recovery(): RecoveryReport {
    return this.keeper.report;
  }

  /** Locks the state directory, allocates the shared memory and restores the durable state into it. */
  constructor(
    options: RouterOptions,
    store: FenceStore,
    routerLog: RouterLog,
    admin: AdminServer | null = null,
    journal: JournalContents | null = null,
    partitionCheckpoints: PartitionCheckpoints | null = null,
    leaseGate: SharedArrayBuffer | null = null,
  ) {
    this.partitionCheckpoints = partitionCheckpoints;
    this.options = options;
    this.store = store;
    this.admin = admin;
    this.adminPort = admin?.port ?? null;
    this.editor = new FenceEditor({
      current: () => this.store,
      queue: (job) => this.queueFenceJob(job),
      swap: (next, oldToNew) => this.swapIn(next, oldToNew),
      limits: () => fenceFileLimits(this.options),
      log: (line, level) => this.log(line, level),
      failed: () => {
        this.statsCells[PST_FENCE_EDITS_FAILED_F64]!++;
      },
      applied: (elapsedMs) => {
        this.statsCells[PST_FENCE_EDITS_F64]!++;
        this.statsCells[PST_FENCE_EDIT_LAST_NS_F64] = elapsedMs * 1e6;
      },
      record: (edit) => this.recordEdit(edit),
    });
    this.ephemeral = options.stateDir === null;
    this.dir = StateDirectory.open(options.stateDir ?? mkdtempSync(join(tmpdir(), 'geofence-router-state-')));
    this.routerLog = routerLog;
    this.log = routerLog.fn;
    this.drainDeadlineMs = options.drainDeadlineMs;
    this.streams = options.downstreams.map((d) => (d.kind === 'stream' ? new TriggerStream(d.name) : null));
    this.memory = allocatePipelineMemory({
      ...pipelineMemorySpecOf(options),
      ...(leaseGate === null ? {} : { leaseGate }),
    });
    const m = this.memory;
    this.pipeline = PipelineRegion.wrap(m.pipeline);
    this.pipeline.setFenceGeneration(store.generation);
    this.backlog = new InputBacklog(this.pipeline, {
      bytes: options.ingest.inputHighWaterBytes,
      points: options.ingest.inputHighWaterPoints,
    });
    this.state = DeviceState.open(m.deviceState);
    this.queries = new StateQueries(this.state, new DeviceIdReader(m.idTable), () => this.store);
    this.everyTriggerRing = m.triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER));
    // Containment's trigger rings: the shards', and the COMPLIANCE group's after the control ring.
    this.shardTriggerRings = this.everyTriggerRing.filter((_, i) => i !== m.shards);
    this.controlRing = this.everyTriggerRing[m.shards]!;
    this.containment = new Float64Array(m.containmentCounters);
    this.statsCells = new Float64Array(m.stats);
    this.views = {
      pipeline: this.pipeline.f64,
      admission: new Float64Array(m.admissionCounters),
      containment: this.containment,
      dispatch: new Float64Array(m.dispatchMetrics),
      stats: this.statsCells,
      shards: m.shards,
      ingestThreads: m.ingestThreads,
      downstreamNames: options.downstreams.map((d) => d.name),
    };
    this.metrics = new RouterMetrics({
      pipeline: m.pipeline,
      admissionCounters: m.admissionCounters,
      telemetryRings: [...m.telemetryRings],
      shards: m.shards,
      triggerRings: [...m.triggerRings],
      complianceRings: [...m.complianceRings],
      containmentCounters: m.containmentCounters,
      dispatchMetrics: m.dispatchMetrics,
      downstreamNames: options.downstreams.map((d) => d.name),
      pipelineStats: m.stats,
      threadRuntime: m.threadRuntime,
    });
    if (admin !== null) {
      this.metrics.addSharedCounter(
        'geofence_admin_requests_refused_total',
        'Admin requests refused, by reason: unauthorized (no or a wrong token), rate_limited, body_too_large.',
        ['reason'],
        ADMIN_REFUSAL_REASONS.map((reason) => ({ labels: { reason }, read: () => admin.refused[reason] })),
      );
    }
    if (m.sourcePartitionCount > 0)
      this.metrics.addSourcePartitions(new Float64Array(m.sourcePartitions), m.sourcePartitionCount);
    if (partitionCheckpoints !== null) {
      const pc = partitionCheckpoints;
      this.metrics.addSharedGauge(
        MetricNames.SOURCE_CHECKPOINT_WRITE_SECONDS,
        "Time the last checkpoint took to encode and store every owned partition's device state in the state bucket.",
        [],
        [{ labels: {}, read: () => pc.lastNs / 1e9 }],
      );
      this.metrics.addSharedGauge(
        MetricNames.SOURCE_CHECKPOINT_BYTES,
        'Bytes of device state the last checkpoint stored in the state bucket, all owned partitions together.',
        [],
        [{ labels: {}, read: () => pc.lastBytes }],
      );
      this.metrics.addSharedCounter(
        MetricNames.SOURCE_CHECKPOINT_DEFERRED,
        'Checkpoints whose partition copies were not stored (the stored ones stayed in force) because triggers of the pings they cover were still held only in memory.',
        [],
        [{ labels: {}, read: () => pc.deferred }],
      );
      this.metrics.addSharedGauge(
        MetricNames.SOURCE_DELIVERED_CHECKPOINT_AGE,
        "Seconds since the oldest owned partition's delivered checkpoint was captured (since the start, for a partition with none to read again from): how far back a start with exact replay reads the stream; keep it well inside the stream's retention.",
        [],
        [{ labels: {}, read: () => pc.oldestDeliveredAgeS(Date.now()) }],
      );
      const byStart = startReadCounts(pc.atStart);
      this.metrics.addSharedGauge(
        MetricNames.SOURCE_START_PARTITIONS,
        "Owned partitions by what this router's start read them again from: `delivered_checkpoint` (exact replay: from it, or from the stream's first message for a partition with none), `newest_state_fallback` (the delivered checkpoint could not be read again from: see the start's warning), `newest_state_gap` (the stream had lost messages the stored state needed; their pings were read by no one: see the start's error line), `newest_state` (no exact replay: other sources, or another partition's gap).",
        ['read_from'],
        Object.entries(byStart).map(([from, n]) => ({ labels: { read_from: from }, read: () => n })),
      );
      this.metrics.addSharedCounter(
        MetricNames.SOURCE_CHECKPOINT_UNDELIVERED,
        "Checkpoints whose partition copies were stored while a trigger of the pings they cover was not yet delivered (or a device's expiry was on its way): the delivered checkpoint a start restores with exact replay stayed the older one.",
        [],
        [{ labels: {}, read: () => pc.storedUndelivered }],
      );
    }
    if (leaseGate !== null) this.addGroupMetrics(new Float64Array(leaseGate));
    this.metrics.addFenceTracking(
      (n) => this.store.mostUntracked(n),
      () => this.state.poolChunksInUse(),
      this.state.poolChunks,
    );
    this.inputsDonePromise = new Promise((r) => (this.inputsDone = r));
    this.failure = new Promise((r) => (this.failed = r));
    try {
      this.keeper = StateKeeper.restore(this.dir, m, store, options, partitionCheckpoints?.atStart ?? null);
      partitionCheckpoints?.seed(new Float64Array(m.sourcePartitions));
      if (journal !== null && !this.ephemeral)
        this.journal = FenceEditJournal.open(this.dir.file(FENCE_EDIT_JOURNAL_FILE), journal);
    } catch (err) {
      this.dir.release();
      throw err;
    }
    for (const line of this.keeper.describe(options.checkpointIntervalMs)) this.log(line);
    const unconfigured = this.keeper.report.unconfiguredDownstreams;
    const unconfiguredLine = describeUnconfigured(this.dir.dir, unconfigured);
    if (unconfiguredLine !== null) this.log(unconfiguredLine, 'error');
    this.metrics.addSharedGauge(
      MetricNames.STATE_UNCONFIGURED_TRIGGERS,
      'Undelivered triggers found at start in the state directory of a downstream the options no longer name (nothing delivers them).',
      ['directory'],
      unconfigured.map((u) => ({ labels: { directory: u.directory }, read: () => undeliveredOf(u) })),
    );
    const fallback = partitionCheckpoints?.atStart.fallback ?? [];
    if (fallback.length > 0)
      this.log(
        `${fallback.length} partition${fallback.length === 1 ? '' : 's'} restored from the newest stored state, not read again exactly from a delivered checkpoint (copies of their triggers up to that state in other routers' files are not delivered): ` +
          fallback.map((f) => `partition ${f.partition}: ${f.reason}`).join('; '),
        'warn',
      );
    const gapped = partitionCheckpoints?.atStart.gapped ?? [];
    if (gapped.length > 0)
      this.log(
        `the stream no longer holds every message the stored partition state needs: the pings removed are read by no one, so this start reads no partition again exactly, seqs continue above ${this.keeper.report.seqFloor} (the floor rose by 2^32, no (deviceId, seq) is reused) and every copy in the state directory's files is delivered: ` +
          gapped.map((f) => `partition ${f.partition}: ${f.reason}`).join('; '),
        'error',
      );
  }

  /** The partition group's counters (the lease gate's cells, kept by the member across its routers). */
  private addGroupMetrics(gate: Float64Array): void {
    const counter = (name: string, help: string, cell: number): void =>
      this.metrics.addSharedCounter(name, help, [], [{ labels: {}, read: () => gate[cell]! }]);
    counter(
      MetricNames.GROUP_ROUTERS_STARTED,
      'Routers this member of a partition group has started (one per change of the partitions it holds).',
      LEASE_ROUTERS_STARTED_F64,
    );
    counter(
      MetricNames.GROUP_PARTITIONS_TAKEN,
      'Partitions this member has taken (free ones: a new group, a member that left or died).',
      LEASE_PARTITIONS_TAKEN_F64,
    );
    counter(
      MetricNames.GROUP_PARTITIONS_RELEASED,
      'Partitions this member has released to other members (its share shrank), each after storing its state.',
      LEASE_PARTITIONS_RELEASED_F64,
    );
    counter(
      MetricNames.GROUP_LEASES_LOST,
      'Leases this member could not renew (expired while it was paused or cut off, or taken by another member).',
      LEASE_LOST_F64,
    );
    this.metrics.addSharedGauge(
      MetricNames.GROUP_LEASE_VALID_SECONDS,
      'How much longer this member counts on its leases without another renewal (negative: past; its threads act on none).',
      [],
      [
        {
          labels: {},
          read: () => (gate[LEASE_VALID_UNTIL_MS_F64]! - performance.timeOrigin - performance.now()) / 1000,
        },
      ],
    );
  }

  /** Counts the checkpoint and the progress mark record. */
  private progressCounts(): { pingsProcessed: number; triggers: number; triggersInMemory: number } {
    const s = this.stats();
    let inMemory = 0;
    for (const d of s.downstreams) inMemory += d.memoryOnly;
    return { pingsProcessed: s.processed, triggers: s.triggersTotal, triggersInMemory: inMemory };
  }

  /**
   * Writes a checkpoint now, one at a time with reloads: the device state is copied while containment runs, and
   * containment is paused for the copy only when that copy does not settle (StateKeeper.checkpoint).
   */
  checkpointNow(clean = false, closeDrained = false): Promise<void> {
    let captureMs = 0;
    const parts = this.partitionCheckpoints;
    const cells = this.memory.sourcePartitionCount > 0 ? new Float64Array(this.memory.sourcePartitions) : null;
    let covers = true;
    // A partitioned source whose device state stays in the state directory: the local checkpoint is the state a
    // restart after a crash restores, and the messages it covers are acknowledged, so none is read again. It is
    // written only once the triggers of the pings it holds are handed on (in a durable file, delivered or
    // dead-lettered); otherwise the previous one stays in force and nothing more is acknowledged.
    // At most for half the source's ackWaitMs since the last checkpoint written, though: past it the stream would
    // deliver the unacknowledged messages again, and the state of everything else would age with it. The checkpoint is
    // then written all the same, and the triggers still held only in memory are what a crash would lose (said here,
    // and counted at the next start).
    const deferLimitMs = (this.options.jetstreamSource?.ackWaitMs ?? 0) / 2;
    const sinceWrittenMs = Date.now() - this.keeper.lastCheckpointMs;
    const handedOn = parts === null && cells !== null && !clean ? () => this.handedOn(false, HAND_OFF_WITHIN_MS) : null;
    const handOff =
      handedOn === null || sinceWrittenMs < deferLimitMs
        ? handedOn
        : () =>
            handedOn().catch((err: unknown) =>
              this.log(
                `checkpoint written ${Math.round(sinceWrittenMs)} ms after the last one (half the source's ackWaitMs is ${Math.round(deferLimitMs)} ms) although not handed on yet: ${(err as Error).message.replace(/^dispatcher thread: /, '')}; a crash now would lose what is held only in memory`,
                'error',
              ),
            );
    const run = this.reloadChain.then(async () => {
      captureMs = Date.now();
      const covered = parts === null ? null : parts.coveredNow(cells!);
      const written = await this.keeper.checkpoint(
        this.store,
        this.progressCounts(),
        this.ingestThread !== null && !clean
          ? () => this.ingestThread!.requests.request<Extract<IngestRequest, { type: 'pause' }>>({ type: 'pause' })
          : null,
        this.ingestThread !== null && !clean
          ? () =>
              this.ingestThread!.requests.request<Extract<IngestRequest, { type: 'resume' }>>({
                type: 'resume',
                fences: this.store.descriptor,
              })
          : null,
        clean,
        handOff,
      );
      if (!written) {
        covers = false;
        this.log(
          'checkpoint deferred: the triggers of the pings it would hold are not handed on yet (a downstream holds them back, or the pipeline is behind); the previous checkpoint stays in force, and the stream messages since are not acknowledged',
          'warn',
        );
        return;
      }
      if (parts === null) return;
      // The copy may hold pings processed after the capture began (those the stored stream position does not cover):
      // the hand-off below waits for the triggers of every ping containment had processed when the copy ended.
      // The partitions' own checkpoints, in JetStream, before anything they cover is acknowledged; and only once the
      // triggers of the pings their state holds are handed on, since a router that restores them without exact replay
      // does not derive those again. A clean stop's dispatcher has delivered them or kept them in its pending file already.
      // Whether every one of those triggers is delivered as well: only such a copy is one the partition's next owner
      // may restore with exact replay (see PartitionCheckpoints.store). A clean stop's is when its close drained every
      // admitted ping and trigger ring and kept or lost no trigger (not after a start given up before its ingest ran:
      // its restored state may be a fallback to a partition's newest).
      let delivered = false;
      if (clean) {
        const s = this.stats();
        delivered =
          closeDrained &&
          s.admittedTotal === s.processed &&
          s.lost === 0 &&
          s.carriedOver === 0 &&
          s.inFlight === 0 &&
          this.everyTriggerRing.every((r) => r.depth() === 0);
      } else if (this.dispatcherThread !== null) {
        try {
          await this.handedOn(false, HAND_OFF_WITHIN_MS);
          // Kept without exact replay too (the wait ends at once when nothing is undelivered): a later start with
          // exact replay (the listener and input files removed) then finds a delivered checkpoint to read again from.
          delivered = await this.handedOn(true, DELIVERED_WITHIN_MS).then(
            () => true,
            () => false,
          );
        } catch (err) {
          covers = false;
          parts.deferred++;
          this.log(
            `partition checkpoints deferred to the next checkpoint (the stored ones stay in force): ${(err as Error).message}`,
            'warn',
          );
          return;
        }
      }
      await parts.store(this.keeper, this.store, covered!, captureMs, cells!, delivered);
    });
    this.reloadChain = run.catch(() => undefined);
    // A partitioned source acknowledges what this checkpoint covers (pings processed before its capture began).
    const count = this.memory.sourcePartitionCount;
    if (count === 0) return run;
    return run.then(() => {
      if (covers) new Float64Array(this.memory.sourcePartitions)[sourceCheckpointCell(count)] = captureMs;
    });
  }

  /**
   * Asks the dispatcher thread whether the triggers of the pings processed so far are handed on (delivered: true,
   * delivered too), waiting at most `withinMs` (and a checkpoint interval); see the 'handed-on' request.
   */
  private handedOn(delivered: boolean, withinMs: number): Promise<void> {
    if (this.dispatcherThread === null) return Promise.resolve();
    return this.dispatcherThread.requests.request<Extract<DispatcherRequest, { type: 'handed-on' }>>({
      type: 'handed-on',
      batchRecords: this.options.batchSize,
      withinMs: Math.min(withinMs, this.options.checkpointIntervalMs),
      delivered,
    });
  }

  private startTimers(): void {
    // One periodic checkpoint at a time: one that waits for its hand-off may outlast the interval, and the next would
    // queue behind it (with the reloads and edits that share its chain) instead of starting afresh.
    let running = false;
    this.checkpointTimer = setInterval(() => {
      if (running) return;
      running = true;
      this.checkpointNow()
        .catch((err: unknown) =>
          this.log(`checkpoint failed (the previous one stays in force): ${(err as Error).message}`, 'error'),
        )
        .finally(() => (running = false));
    }, this.options.checkpointIntervalMs);
    this.progressTimer = setInterval(() => {
      try {
        this.keeper.markProgress(this.progressCounts());
      } catch (err) {
        this.log(`progress mark failed: ${(err as Error).message}`, 'error');
      }
      this.reportUntracked();
    }, PROGRESS_INTERVAL_MS);
    // The embedding's process may end without closing the router; the timers do not keep it alive.
    this.checkpointTimer.unref();
    this.progressTimer.unref();
  }

  /** Untracked fence pings since the start (every block: the shards', the reload block, the COMPLIANCE group's). */
  untrackedPings(): number {
    let n = 0;
    for (let b = 0; b * CNT_BLOCK_F64 < this.containment.length; b++)
      n += this.containment[b * CNT_BLOCK_F64 + CNT_FENCE_OVERFLOW_F64]!;
    return n;
  }

  /** Logs (at most every UNTRACKED_LOG_INTERVAL_MS) when devices were inside fences they could not track. */
  private reportUntracked(): void {
    const n = this.untrackedPings();
    const nowMs = performance.now();
    if (n === this.untrackedLogged || nowMs - this.untrackedLoggedAtMs < UNTRACKED_LOG_INTERVAL_MS) return;
    const top = this.store
      .mostUntracked(5)
      .map((u) => `${u.fenceId} (${u.pings})`)
      .join(', ');
    this.log(
      `${n - this.untrackedLogged} pings found a device inside a fence it could not track (no free entry: ` +
        `maxFencesPerDevice ${this.options.maxFencesPerDevice}, pool ${this.state.poolChunksInUse()}/${this.state.poolChunks} chunks in use); ` +
        `no trigger is written about those stays. Most affected fences: ${top}`,
      'error',
    );
    this.untrackedLogged = n;
    this.untrackedLoggedAtMs = nowMs;
  }

  private stopTimers(): void {
    this.editor.close();
    this.runtimeReporter?.stop();
    this.runtimeReporter = null;
    if (this.checkpointTimer !== null) clearInterval(this.checkpointTimer);
    if (this.progressTimer !== null) clearInterval(this.progressTimer);
    this.checkpointTimer = null;
    this.progressTimer = null;
  }

  /** The fences in force (after a close: those it closed with), as a store descriptor another router can open. */
  fenceDescriptor(): FenceStoreDescriptor {
    return this.store.descriptor;
  }

  /** Starts the threads and the admin server. */
  async start(progress: StartProgress | null = null): Promise<void> {
    this.runtimeReporter = startThreadRuntimeReporter(this.memory.threadRuntime, RT_THREAD_MAIN);
    const o = this.options;
    const m = this.memory;
    const bridge = openCallbackBridge(
      o.downstreams.map((d, i) => {
        if (d.kind === 'callback') {
          const c = d as CallbackDownstreamOptions;
          return { call: c.callback, timeoutMs: c.timeoutMs ?? null, letGoAtDrain: true };
        }
        const stream = this.streams[i];
        return stream == null ? null : { call: stream.deliver, timeoutMs: null, letGoAtDrain: false };
      }),
      (downstream, count, err) =>
        this.log(
          `downstream ${o.downstreams[downstream]!.name}: its callback failed on a batch of ${count} trigger(s) ` +
            `(sent again while attempts last): ${callbackErrorText(err)}`,
          'warn',
        ),
    );
    this.bridge = bridge;
    const bridgePort = bridge?.workerPort ?? null;
    // The restored state (with its seq floor and the restore's EXIT seqs) is durable before any trigger is issued; the
    // checkpoint's number names this run in the durable trigger records (it rises with every start).
    progress?.phase('writing the first checkpoint');
    await this.keeper.checkpoint(this.store, this.progressCounts(), null, null);
    const dispatcherData: DispatcherThreadData = {
      memory: m,
      fences: this.store.descriptor,
      downstreams: downstreamSpecs(o),
      downstreamsDir: this.dir.downstreamsDir,
      maxDevices: o.maxDevices,
      deadLetterCapacityRecords: o.deadLetter.capacityRecords,
      namesOnly: this.keeper.namesOnly,
      replayFloors: this.keeper.replayFloors,
      runId: this.keeper.checkpointNumber | 0,
      bridgePort,
    };
    const noop = (): void => undefined;
    // An NDJSON downstream on stdout writes descriptor 1 from the dispatcher thread (see NdjsonSink). This thread's
    // process.stdout, once made, holds a pipe or socket there in non-blocking mode, so a write to a reader that stopped
    // reading returns EAGAIN (the sink waits, and fails the batch after a while) instead of blocking for good.
    if (isMainThread && o.downstreams.some((d) => d.kind === 'ndjson' && d.path === '-')) void process.stdout.writable;
    this.dispatcherThread = new ThreadHandle(
      new URL('../pipeline/dispatcher-thread.js', import.meta.url),
      dispatcherData,
      bridgePort === null ? [] : [bridgePort],
      'dispatcher thread',
      this.log,
      noop,
    );
    this.dispatcherThread.death.catch((err: Error) => this.failed(err));
    // The ingest thread starts beside the dispatcher (loading, warming its workers, preparing its sources) and takes
    // no input before it is told to begin.
    const stdin = o.inputs.includes('-');
    const ingestData = ingestThreadData(o, m, this.store.descriptor);
    this.ingestThread = new ThreadHandle(
      new URL('../pipeline/ingest-thread.js', import.meta.url),
      ingestData,
      [],
      'ingest thread',
      this.log,
      () => this.inputsDone(),
      (which) => (which === 'input' ? this.onInputDrained() : this.onStdinDrained()),
    );
    this.ingestThread.death.catch((err: Error) => this.failed(err));
    // The pool's workers and, with a COMPLIANCE ring, its own.
    const warmed = o.poolSize + m.complianceRings.length;
    if (o.complianceWorker && m.complianceRings.length === 0) {
      this.log(
        `complianceWorker: off with ${o.ingestThreads} ingest threads (a device's pings may arrive on two of them); COMPLIANCE pings share the shard rings`,
        'debug',
      );
    }
    progress?.phase(
      `starting the dispatcher and ingest threads and warming ${warmed} containment worker${warmed === 1 ? '' : 's'}`,
    );
    await Promise.all([this.dispatcherThread.started, this.ingestThread.ready]);
    // EXITs for fences a restored device was inside and the fences file lost (or retagged), for stays this router
    // cannot hold, and for the stays of devices copied while their expiry was on its way: dispatched before any new
    // trigger.
    const restoreExits = this.keeper.writeRestoreExits(
      this.controlRing,
      this.containment,
      this.memory.shards * CNT_BLOCK_F64,
      this.store.untracked,
    );
    if (restoreExits > 0) {
      this.pipeline.ringDispatcher();
      while (this.controlRing.available() > 0) {
        // A dispatcher that died takes nothing more: the start fails (naming it) instead of waiting for ever.
        if (this.dispatcherThread.died)
          throw new Error('the dispatcher thread exited before it took the restore EXITs');
        await sleep(1);
      }
    }
    progress?.phase('starting the inputs');
    this.ingestThread.worker.postMessage({ type: 'begin' } satisfies IngestRequest);
    const port = await this.ingestThread.started;
    this.ingestStarted = true;
    this.ingestPort = o.listenHost === null ? null : port;
    this.startTimers();
    this.editor.scheduleExpiry();
    if (stdin) this.forwardStdin();
    if (o.allowUnauthenticated) {
      if (
        o.listenHost !== null &&
        !isLoopbackHost(o.listenHost) &&
        o.ingest.tls === null &&
        o.ingest.authToken === null
      ) {
        this.log(
          `the telemetry listener on ${o.listenHost} takes pings from anyone who reaches it (no TLS, no token; allowUnauthenticated)`,
          'warn',
        );
      }
      if (o.adminHost !== null && !isLoopbackHost(o.adminHost) && o.adminToken === null) {
        this.log(
          `the admin server on ${o.adminHost} lets anyone who reaches it reload and edit the fences (no token; allowUnauthenticated)`,
          'warn',
        );
      }
    }
    const addons = dependencyAddonsLoaded();
    if (addons.length > 0) {
      this.log(
        `a compiled add-on of a dependency is loaded, the router is meant to run without: ${addons.join(', ')}`,
        'error',
      );
    }
  }

  /**
   * Forwards stdin to the ingest thread as a pausable source: stdin is paused while its bytes in flight (posted and not
   * yet fed to the edge) are at or above `options.ingest.inputHighWaterBytes`, and resumed at half of it, so a fast
   * pipe waits for the rings instead of being shed.
   */
  private forwardStdin(): void {
    const post = (msg: IngestRequest, transfer: ArrayBuffer[] = []): void =>
      this.ingestThread?.worker.postMessage(msg, transfer);
    this.stdinListener = (chunk: Buffer) => {
      const copy = Uint8Array.prototype.slice.call(chunk);
      // Counted before it is posted, so the ingest thread never takes off bytes not yet counted.
      const below = this.backlog.postStdin(copy.length);
      post({ type: 'stream-data', bytes: copy }, [copy.buffer as ArrayBuffer]);
      if (!below) {
        process.stdin.pause();
        // Already drained between the add and the flag: no wake-up will come, go on at once.
        if (this.backlog.awaitStdin()) process.stdin.resume();
      }
    };
    process.stdin.on('data', this.stdinListener);
    process.stdin.once('end', () => post({ type: 'stream-end' }));
    // A read error ends stdin as an input file's does: what was read is fed, the error is said and counted.
    process.stdin.once('error', (err: Error) => {
      this.statsCells[PST_INPUT_ERRORS_F64]!++;
      this.log(
        `stdin: reading failed (${errorText(err)}): what was read before is processed, the rest is not read`,
        'error',
      );
      this.stopStdin();
      post({ type: 'stream-end' });
    });
  }

  /**
   * Stops reading stdin (a drain, a read error, the shutdown): every chunk read so far is posted already, ahead of a
   * drain request, and fed; what the pipe still holds is left unread, as a stopped file's rest is.
   */
  private stopStdin(): void {
    if (this.stdinListener === null) return;
    process.stdin.off('data', this.stdinListener);
    this.stdinListener = null;
    process.stdin.pause();
  }

  /** The stdin backlog reached its low-water mark while stdin was paused. */
  private onStdinDrained(): void {
    if (this.stdinListener === null) return;
    if (this.backlog.stdinDrained() || this.backlog.awaitStdin()) process.stdin.resume();
  }

  /** The in-process backlog reached its low-water marks while a caller waited. */
  private onInputDrained(): void {
    if (this.drainedWaiters.length === 0) return;
    if (this.backlog.inputDrained() || this.backlog.awaitInput()) this.releaseDrainedWaiters();
  }

  private releaseDrainedWaiters(): void {
    const waiters = this.drainedWaiters;
    this.drainedWaiters = [];
    for (const w of waiters) w();
  }

  /**
   * The admin server's handlers for this router (createRouter starts the server before the router exists, with
   * handlers of its own for the start, and hands over to these).
   */
  adminHandlers(): AdminHandlers {
    return {
      registry: this.metrics,
      readiness: () => this.readiness(),
      health: () => this.health(),
      reloadFences: () => this.reloadFencesFile(),
      fences: { upsert: (f) => this.upsertFence(f), remove: (id) => this.removeFence(id) },
      queries: this.queries,
    };
  }

  private readiness(): { ready: boolean; reason?: string } {
    if (this.drainPromise !== null) return { ready: false, reason: 'draining' };
    if (this.pipeline.ingestState() !== IngestState.RUNNING) return { ready: false, reason: 'ingest is not running' };
    // An unhealthy router is not ready either: traffic for its stalled shards would only fill their rings.
    const h = this.health();
    if (!h.ready) return h;
    // Durable writes failing (a full disk): delivery goes on, but dead letters and backlogs cannot be kept.
    const failing = this.stats().durableFailingDownstreams;
    if (failing > 0)
      return {
        ready: false,
        reason: `durable writes failing for ${failing} downstream${failing === 1 ? '' : 's'} (see the log)`,
      };
    return { ready: true };
  }

  /**
   * Liveness for /healthz: unhealthy when the ingest or the dispatcher thread has died or stopped reporting (its
   * runtime report is its heartbeat, every THREAD_RUNTIME_INTERVAL_MS; stale after HEARTBEAT_STALE_MS: its event loop
   * is blocked), or while the containment watchdog holds a shard group as hung (WDG_STALLED_I32).
   */
  private health(): { ready: boolean; reason?: string } {
    if (this.ingestStarted && this.closePromise === null) {
      const rt = new Float64Array(this.memory.threadRuntime);
      const nowMs = Date.now();
      for (const [name, handle, block] of [
        ['ingest thread', this.ingestThread, RT_THREAD_INGEST],
        ['dispatcher thread', this.dispatcherThread, RT_THREAD_DISPATCHER],
      ] as const) {
        if (handle?.died === true) return { ready: false, reason: `the ${name} has exited` };
        const silentMs = nowMs - rt[block * RT_STRIDE_F64 + RT_REPORTED_AT_MS_F64]!;
        if (silentMs > HEARTBEAT_STALE_MS) {
          return {
            ready: false,
            reason: `the ${name} has not reported for ${(silentMs / 1000).toFixed(1)} s (its event loop is blocked)`,
          };
        }
      }
    }
    const cells = new Int32Array(this.memory.watchdog);
    let stalled = '';
    for (let s = 0; s < this.memory.shards; s++) {
      if (Atomics.load(cells, s * WDG_STRIDE_I32 + WDG_STALLED_I32) !== 0) stalled += stalled === '' ? `${s}` : `,${s}`;
    }
    // The COMPLIANCE group's block follows the shards'.
    const complianceStalled = Atomics.load(cells, this.memory.shards * WDG_STRIDE_I32 + WDG_STALLED_I32) !== 0;
    if (stalled === '' && !complianceStalled) return { ready: true };
    const where = [stalled === '' ? '' : `shards ${stalled}`, complianceStalled ? 'the COMPLIANCE ring' : '']
      .filter((w) => w !== '')
      .join(' and ');
    return {
      ready: false,
      reason: `containment stalled on ${where} (task aborted by the watchdog, awaiting progress)`,
    };
  }

  private post(msg: IngestRequest, transfer: ArrayBuffer[] = []): void {
    if (this.ingestThread === null || this.closePromise !== null) throw new Error('the router is closed');
    this.ingestThread.worker.postMessage(msg, transfer);
  }

  /**
   * Throws when in-process input cannot be taken any more: the router is closed or draining (the ingest thread would
   * shed it as draining), or its ingest thread has exited (nothing would read it). A caller is told, not shed.
   */
  private checkTakesInput(what: string): void {
    if (this.ingestThread === null || this.closePromise !== null) throw new Error(`${what}: the router is closed`);
    if (this.drainPromise !== null)
      throw new Error(`${what}: the router is draining (drain() or close() was called); it takes no more input`);
    if (this.ingestThread.died) throw new Error(`${what}: the router's ingest thread has exited; it takes no input`);
  }

  ingest(bytes: Uint8Array): boolean {
    if (!(bytes instanceof Uint8Array)) throw new TypeError('ingest(bytes) takes a Uint8Array');
    this.checkTakesInput('ingest()');
    if (this.backlog.inputBytes() + bytes.length > MAX_INPUT_BACKLOG_BYTES) {
      throw new RangeError(
        'ingest(): more than 2 GiB of input would be in flight; await inputDrained() when ingest() returns false',
      );
    }
    // Copy into a buffer of its own and move it: the caller may reuse theirs.
    const copy = Uint8Array.prototype.slice.call(bytes);
    // Counted before it is posted, so the ingest thread never takes off bytes not yet counted.
    const below = this.backlog.postInput(copy.length, 0);
    this.post({ type: 'ingest', bytes: copy }, [copy.buffer as ArrayBuffer]);
    return below;
  }

  push(point: TelemetryPoint): boolean {
    this.checkTakesInput('push()');
    const below = this.backlog.postInput(0, 1);
    try {
      this.post({ type: 'push', point });
    } catch (err) {
      // Not sent (a value the structured clone cannot copy: a function, a symbol, a class instance's own methods): it
      // was never in flight, so it is taken off the count again, and the caller is told what was wrong.
      if (this.backlog.fedInput(0, 1)) this.releaseDrainedWaiters();
      throw new TypeError(
        `push(): the point cannot be handed to the ingest thread (${(err as Error).message}); a point is a plain object of numbers and strings ({ id, lat, lon, ts, ... })`,
        { cause: err },
      );
    }
    return below;
  }

  inputDrained(): Promise<void> {
    if (this.ingestThread === null || this.closePromise !== null || this.backlog.inputDrained())
      return Promise.resolve();
    return new Promise((resolve) => {
      this.drainedWaiters.push(resolve);
      // Only the first waiter raises the flag; a feed may have drained the backlog since the check above.
      if (this.drainedWaiters.length === 1 && this.backlog.awaitInput()) this.releaseDrainedWaiters();
    });
  }

  reloadFences(geojson: unknown): Promise<ReloadResult> {
    // A restart reads the fences file again and applies the edits made since the last reload over it: fences given
    // here, stored nowhere, would be undone by it (the edits made over them applied to other fences).
    if (this.options.fencesFile !== null)
      return Promise.reject(
        new Error(
          `this router reads its fences from options.fencesFile (${this.options.fencesFile}), which a restart reads again: write the fences there and call reloadFencesFile(), or edit them with upsertFence() and removeFence()`,
        ),
      );
    // Validated and indexed on a loader thread as well: only the structured clone of `geojson` runs here.
    return this.reloadFrom({ geojson });
  }

  /**
   * Reloads `options.fencesFile`. The file is read, validated and indexed on a thread of its own (a large file never
   * stalls this thread: `/healthz` and the admin server keep answering); only the swap runs here.
   */
  reloadFencesFile(): Promise<ReloadResult> {
    const path = this.options.fencesFile;
    if (path === null) return Promise.reject(new Error('options.fencesFile is not set: nothing to reload'));
    return this.reloadFrom({ path });
  }

  /**
   * Queues a reload from a file or a GeoJSON value, loaded on the loader thread. One reload at a time: each starts
   * from the generation the previous one left.
   */
  private reloadFrom(source: { path: string } | { geojson: unknown }): Promise<ReloadResult> {
    const limits = fenceFileLimits(this.options);
    const build = async (generation: number): Promise<FenceStore> => {
      const loaded = await loadFenceStoreOffThread({ ...source, limits, generation });
      // Left out of the new generation: the swap ends the stays in them.
      for (const line of loaded.expiredFences) this.log(line);
      return FenceStore.open(loaded.descriptor, LOOKUP_ONLY_STORE);
    };
    return this.queueFenceJob(() => this.reloadNow(build));
  }

  /** Builds the next generation with `build` (given its generation number) and swaps it in. */
  private async reloadNow(build: (generation: number) => Promise<FenceStore>): Promise<ReloadResult> {
    if (this.drainPromise !== null) throw new Error('the router is draining: fences cannot be reloaded');
    let next: FenceStore;
    try {
      next = await build(this.store.generation + 1);
    } catch (err) {
      this.statsCells[PST_RELOADS_FAILED_F64]!++;
      throw err;
    }
    await this.swapIn(next);
    this.statsCells[PST_RELOADS_F64]!++;
    try {
      this.journal?.reset();
    } catch (err) {
      this.log(
        `${(err as Error).message}: the edits made before this reload will be applied again at the next start`,
        'error',
      );
    }
    this.editor.scheduleExpiry();
    return { generation: next.generation, fenceCount: next.liveFenceCount };
  }

  /** Runs a reload or an edit after those queued before it. */
  private queueFenceJob<T>(job: () => Promise<T>): Promise<T> {
    const run = this.reloadChain.then(job, job);
    this.reloadChain = run.catch(() => undefined);
    return run;
  }

  /** Swaps `next` in for the generation in force; resolves with the EXITs written for removed fences. */
  private async swapIn(next: FenceStore, oldToNew?: Int32Array): Promise<number> {
    if (this.drainPromise !== null) throw new Error('the router is draining: fences cannot be changed');
    const exits = await swapFenceGeneration(
      {
        dispatcher: this.dispatcherThread!,
        ingest: this.ingestThread!,
        shardTriggerRings: this.shardTriggerRings,
        controlRing: this.controlRing,
        state: this.state,
        pipeline: this.pipeline,
        containment: this.containment,
        controlCounterBase: this.memory.shards * CNT_BLOCK_F64,
      },
      this.store,
      next,
      oldToNew,
    );
    this.store = next;
    if (exits > 0) void this.checkpointAfterExits(exits);
    return exits;
  }

  /**
   * After a fence change that ended stays with EXITs: a checkpoint as soon as those EXITs are handed on (delivered, or
   * in a downstream's durable file), not at the next interval. Until one is written, a crash restarts from a copy in
   * which the devices are still inside the fences removed, and the restart ends those stays a second time; one written
   * before the EXITs are handed on would lose them instead. When they are not handed on within the hand-off time, the
   * periodic checkpoint stays the one to cover them.
   */
  private async checkpointAfterExits(exits: number): Promise<void> {
    try {
      await this.handedOn(false, HAND_OFF_WITHIN_MS);
      if (this.drainPromise !== null) return;
      await this.checkpointNow();
      this.log(`checkpoint written after a fence change that ended ${exits} stays`, 'debug');
    } catch (err) {
      this.log(
        `no checkpoint after a fence change that ended ${exits} stays (the next periodic one covers it): ${(err as Error).message.replace(/^dispatcher thread: /, '')}`,
        'warn',
      );
    }
  }

  /** Keeps an applied edit for the next start; false when there is no journal or it could not be written. */
  private recordEdit(edit: StoredFenceEdit): boolean {
    if (this.journal === null) return false;
    try {
      this.journal.append(edit);
      return true;
    } catch (err) {
      this.log(`${(err as Error).message}: the edit is in force but will not survive a restart`, 'error');
      return false;
    }
  }

  upsertFence(feature: unknown): Promise<FenceEditResult> {
    return this.editor.upsert(feature);
  }

  removeFence(fenceId: string): Promise<FenceEditResult> {
    return this.editor.remove(fenceId);
  }

  stats(): RouterStats {
    const s = readRouterStats(this.views);
    if (s.fenceOverflows > 0) s.untrackedFences = this.store.mostUntracked(5);
    s.partitionsAfterGap = this.partitionCheckpoints?.atStart.gapped.length ?? 0;
    s.unconfiguredTriggers = this.keeper.report.unconfiguredDownstreams.reduce((n, u) => n + undeliveredOf(u), 0);
    return s;
  }

  metricsText(): Promise<string> {
    return this.metrics.metrics();
  }

  inputsFinished(): Promise<void> {
    return this.inputsDonePromise;
  }

  /**
   * Lowers the drain deadline of this router's close or drain to `ms` (when lower), before either starts: a partition
   * group's balance does not pause its partitions for long on a downstream that is down. Returns the deadline in force.
   */
  limitDrainDeadline(ms: number): number {
    this.drainDeadlineMs = Math.min(this.drainDeadlineMs, ms);
    return this.drainDeadlineMs;
  }

  drain(): Promise<void> {
    if (this.drainPromise === null) {
      const drained = (async () => {
        this.stopStdin();
        await this.reloadChain;
        this.pipeline.setDraining(true);
        await this.ingestThread!.requests.request<Extract<IngestRequest, { type: 'drain' }>>({ type: 'drain' });
        // The dispatcher's drain waits, past its deadline, for the calls in flight; a trigger stream's batch is in
        // flight until its loop takes it and comes back, which a loop that is not reading (or that awaits this close
        // inside its body) never does: at the deadline the streams let go of the batches waiting for their loops, and
        // STREAM_HELD_GRACE_MS later of a batch a loop still holds (TriggerStream.letGo, letGoHeld), and then of the
        // callback calls still running (CallbackBridgeEnd.letGo: a callback that never settles).
        const letGo = setTimeout(() => this.letGoAtDeadline(false), this.drainDeadlineMs);
        const letGoHeld = setTimeout(() => this.letGoAtDeadline(true), this.drainDeadlineMs + STREAM_HELD_GRACE_MS);
        try {
          await this.dispatcherThread!.requests.request<Extract<DispatcherRequest, { type: 'drain' }>>({
            type: 'drain',
            deadlineMs: this.drainDeadlineMs,
          });
        } finally {
          clearTimeout(letGo);
          clearTimeout(letGoHeld);
        }
      })();
      // Why race the threads' deaths: with the dispatcher gone the trigger rings never empty and the ingest thread's
      // drain would wait for good; a pipeline missing a thread stops as after a crash (the next start recovers it).
      const death = Promise.race([this.ingestThread!.death, this.dispatcherThread!.death]).catch((err: unknown) => {
        throw new Error(
          `${(err as Error).message}: the router cannot drain; it stops without its final checkpoint (the next start recovers as after a crash)`,
          { cause: err },
        );
      });
      this.drainPromise = Promise.race([drained, death]);
    }
    return this.drainPromise;
  }

  /**
   * The drain deadline passed: every trigger stream lets go of the batches waiting for its loop (`held` false), or,
   * STREAM_HELD_GRACE_MS later, of the one its loop still holds (see TriggerStream.letGo, letGoHeld) and of the
   * callback calls still running (CallbackBridgeEnd.letGo).
   */
  private letGoAtDeadline(held: boolean): void {
    const calls = held ? (this.bridge?.letGo() ?? 0) : 0;
    if (calls > 0)
      this.log(
        `${calls} callback call(s) still running ${STREAM_HELD_GRACE_MS} ms after the drain deadline ` +
          `(${this.drainDeadlineMs} ms): their batches are kept for the next start (what the calls do later is ignored)`,
        'warn',
      );
    for (const stream of this.streams) {
      if (stream === null) continue;
      const n = held ? stream.letGoHeld() : stream.letGo();
      if (n > 0)
        this.log(
          held
            ? `trigger stream ${stream.name}: its loop still holds a batch ${STREAM_HELD_GRACE_MS} ms after the drain ` +
                `deadline (${this.drainDeadlineMs} ms); it is kept for the next start`
            : `trigger stream ${stream.name}: ${n} batch(es) not taken by its loop within the drain deadline ` +
                `(${this.drainDeadlineMs} ms) are kept for the next start`,
          'warn',
        );
    }
  }

  device(deviceId: string | number): DeviceNow | null {
    return this.queries.device(deviceId);
  }

  fenceOccupants(fenceId: string): FenceOccupant[] | null {
    return this.queries.occupants(fenceId);
  }

  triggers(name?: string): TriggerStream {
    const streams = this.streams.filter((x): x is TriggerStream => x !== null);
    const names = streams.map((x) => x.name).join(', ');
    if (name === undefined) {
      if (streams.length === 1) return streams[0]!;
      throw new Error(
        streams.length === 0
          ? 'triggers(): no downstream is a trigger stream (add { kind: "stream", name } to options.downstreams)'
          : `triggers(): ${streams.length} downstreams are trigger streams (${names}): name one`,
      );
    }
    const found = streams.find((x) => x.name === name);
    if (found === undefined)
      throw new Error(
        `triggers(${JSON.stringify(name)}): no trigger stream of that name (streams: ${names || 'none'})`,
      );
    return found;
  }

  close(): Promise<RouterSummary> {
    if (this.closePromise === null) {
      this.closePromise = (async () => {
        this.stopTimers();
        let drained = false;
        let checkpointed = false;
        try {
          await this.drain();
          await this.dispatcherThread!.requests.request<Extract<DispatcherRequest, { type: 'close' }>>({
            type: 'close',
            deadlineMs: this.drainDeadlineMs,
          });
          await this.ingestThread!.requests.request<Extract<IngestRequest, { type: 'close' }>>({ type: 'close' });
          drained = true;
        } finally {
          await this.shutdown();
          // Only a drained pipeline's state is final: otherwise the directory is given up as after a crash and the next
          // start (in this process too) treats this stop as unclean (it raises the seq floor).
          if (drained) checkpointed = await this.finishState(true);
          else this.dir.abandon();
          this.routerLog.close();
        }
        return {
          ...this.stats(),
          uptimeMs: Date.now() - this.startedAtMs,
          stateDir: this.ephemeral ? null : this.dir.dir,
          checkpointIntervalMs: this.options.checkpointIntervalMs,
          lastCheckpointMs: this.keeper.lastCheckpointMs,
          finalCheckpointFailed: !checkpointed,
        };
      })();
    }
    return this.closePromise;
  }

  /** Stops whatever is running (also after a failed start). */
  async shutdown(): Promise<void> {
    this.stopTimers();
    this.stopStdin();
    // Nothing will be fed any more: a caller waiting for room must not wait forever.
    this.releaseDrainedWaiters();
    await this.admin?.close();
    await this.ingestThread?.stop();
    await this.dispatcherThread?.stop();
    this.bridge?.close();
    // Nothing will be sent any more: each stream's loop ends after the batch it holds.
    for (const stream of this.streams) stream?.end();
  }

  /**
   * With every thread stopped: writes the final checkpoint, marked clean (its partition copies a delivered checkpoint
   * only when `closeDrained`: a close drained the pipeline), and releases the state directory (removing it when it is
   * a temporary one). A failure gives the directory up as after a crash, so the next start (in this
   * process too) treats the stop as unclean. Resolves false when the checkpoint failed.
   */
  async finishState(closeDrained = false): Promise<boolean> {
    try {
      await this.checkpointNow(true, closeDrained);
    } catch (err) {
      this.log(
        `final checkpoint failed (the next start treats this stop as unclean): ${(err as Error).message}`,
        'error',
      );
      this.keeper.close();
      this.journal?.close();
      await this.partitionCheckpoints?.close();
      this.dir.abandon();
      return false;
    }
    this.keeper.close();
    this.journal?.close();
    await this.partitionCheckpoints?.close();
    this.dir.release();
    if (this.ephemeral) rmSync(this.dir.dir, { recursive: true, force: true });
    return true;
  }

  /**
   * After a failed start, or when the router's leases are lost: stops the threads and settles the state directory
   * (clean when no ping was processed yet; otherwise given up as after a crash, so the next start treats the stop as
   * unclean and restores the last checkpoint).
   */
  async abandon(): Promise<void> {
    // No checkpoint starts from here on (one started now would race the shutdown).
    this.stopTimers();
    // A checkpoint under way (encoding in slices, writing off the event loop) finishes before the directory is given up.
    await this.reloadChain.catch(() => undefined);
    await this.shutdown();
    if (!this.ingestStarted) {
      await this.finishState();
      return;
    }
    await this.partitionCheckpoints?.close();
    this.dir.abandon();
  }
}

/** Longest wait for the triggers a partition checkpoint covers to be handed on before it is deferred, ms. */
const HAND_OFF_WITHIN_MS = 2000;
/** Longest further wait, after the hand-off, for those triggers to be delivered as well, ms. */
const DELIVERED_WITHIN_MS = 1000;

/** The fence file limits of `o`. */
export function fenceFileLimits(o: RouterOptions): FenceFileLimits {
  return { maxFileBytes: o.maxFenceFileBytes, maxFences: o.maxFences, maxVerticesPerRing: o.maxVerticesPerRing };
}

/** Owned partitions by what a start read them again from (the `geofence_source_start_partitions` gauge). */
function startReadCounts(atStart: PartitionStateAtStart): Record<string, number> {
  const fallback = atStart.fallback.length;
  const gap = atStart.gapped.length;
  const exact = atStart.exactReplay ? atStart.owned.length - fallback : 0;
  return {
    delivered_checkpoint: exact,
    newest_state_fallback: fallback,
    newest_state_gap: gap,
    newest_state: atStart.owned.length - exact - fallback - gap,
  };
}
