/**
 * Metrics (main thread): a prom-client Registry whose collectors read shared-memory counter cells at scrape time.
 * No thread sends a message per event; each scrape reads the cells the owning threads write.
 *
 * Built in: the ingest counters and control cells of the pipeline region, the admission counter blocks (one per
 * shard), and ring depths. Other parts register their cells with `addSharedCounter` / `addSharedGauge`.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import {
  ADM_ADMITTED_F64,
  ADM_BLOCK_F64,
  ADM_SHED_F64,
  CTL_DRAINING_I32,
  CTL_FENCE_GENERATION_I32,
  ING_ACCEPTED_F64,
  ING_BYTES_F64,
  ING_CONNECTIONS_CLOSED_F64,
  ING_CONNECTIONS_OPENED_F64,
  ING_CONNECTIONS_REFUSED_F64,
  ING_CONNECTIONS_DROPPED_F64,
  ING_FORWARD_PAUSES_F64,
  ING_HELD_BYTES_F64,
  CONNECTION_DROP_REASON_COUNT,
  CONNECTION_DROP_REASON_NAMES,
  ING_DEVICES_F64,
  ING_DEVICES_EXPIRED_F64,
  ING_DEVICES_REVIVED_F64,
  ING_SLOTS_FREED_F64,
  ING_SLOTS_REUSED_F64,
  ING_FRAMES_F64,
  ING_REJECTED_F64,
  ING_RESYNCS_F64,
  ING_RESYNC_SKIPPED_BYTES_F64,
  LANE_COUNT,
  LANE_NAMES,
  REJECT_REASON_COUNT,
  REJECT_REASON_NAMES,
  SHED_REASON_COUNT,
  SHED_REASON_NAMES,
  SRC_ACKED_STREAM_SEQ_F64,
  SRC_AGED_MESSAGES_F64,
  SRC_BYTES_F64,
  SRC_CHECKPOINT_CAPTURED_MS_F64,
  SRC_CHECKPOINT_STREAM_SEQ_F64,
  SRC_LAG_AGE_MS_F64,
  SRC_LAG_MESSAGES_F64,
  SRC_MESSAGES_F64,
  SRC_OWNED_F64,
  SRC_REDELIVERED_F64,
  SRC_REWINDS_F64,
  SRC_STRIDE_F64,
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import {
  CNT_BLOCK_F64,
  CNT_CANDIDATE_OVERFLOW_F64,
  CNT_EXACT_TESTS_F64,
  CNT_FENCE_OVERFLOW_F64,
  CNT_EXPIRY_EXITS_F64,
  CNT_IMPLAUSIBLE_SEGMENTS_F64,
  CNT_CROSS_OVER_BUDGET_F64,
  CNT_PARKED_NS_F64,
  CNT_GENERATION_MISMATCH_F64,
  CNT_INVALID_F64,
  CNT_PROCESSED_F64,
  CNT_STALE_F64,
  CNT_TRIGGER_RING_WAITS_F64,
  CNT_TRIGGERS_F64,
  DEAD_LETTER_DROP_REASON_COUNT,
  DEAD_LETTER_DROP_REASON_NAMES,
  DEAD_LETTER_REASON_COUNT,
  DEAD_LETTER_REASON_NAMES,
  DS_BLOCK_F64,
  DS_BREAKER_STATE_F64,
  DS_DEAD_LETTER_DROPPED_F64,
  DS_DEAD_LETTERED_BY_REASON_F64,
  DS_REPLAY_REJECTED_BY_REASON_F64,
  DS_REPLAYED_BY_REASON_F64,
  DS_RTT_BUCKET_BOUNDS_MS,
  DS_RTT_BUCKETS_F64,
  DS_RTT_COUNT_F64,
  DS_LANE_HELD_BASE_F64,
  DISP_PUBLISH_VERSION_F64,
  HELD_BLOCK_F64,
  DS_RTT_SUM_NS_F64,
  HELD_BUCKETS_F64,
  HELD_COUNT_F64,
  HELD_SUM_NS_F64,
  PST_BATCHED_PINGS_F64,
  PST_CHECKPOINT_BYTES_F64,
  PST_CHECKPOINT_DEVICES_F64,
  PST_CHECKPOINT_FAILURES_F64,
  PST_CHECKPOINT_LAST_NS_F64,
  PST_CHECKPOINT_PAUSE_NS_F64,
  PST_CHECKPOINTS_F64,
  PST_CHECKPOINTS_PAUSED_F64,
  PST_HELD_BASE_F64,
  PST_CHECKPOINTS_DEFERRED_F64,
  PST_INPUT_ERRORS_F64,
  PST_LOST_PINGS_F64,
  PST_LOST_PINGS_HUNG_F64,
  PST_STALLED_GROUPS_F64,
  PST_TASKS_ABORTED_F64,
  PST_REPLAY_HELD_BASE_F64,
  PST_TAKEN_BASE_F64,
  PST_RELOADS_F64,
  PST_RELOADS_FAILED_F64,
  PST_FENCE_EDITS_F64,
  PST_FENCE_EDITS_FAILED_F64,
  PST_TASKS_COMPLETED_F64,
  PST_TASKS_FAILED_F64,
  PST_TASKS_SUBMITTED_F64,
  TRIGGER_TYPE_COUNT,
  TRIGGER_TYPE_NAMES,
} from '../shm/layout.js';
import {
  DISPATCHER_CELL_METRICS,
  DOWNSTREAM_CELL_METRICS,
  DOWNSTREAM_LABEL,
  METRIC_BREAKER_STATE,
  BREAKER_STATE_NAMES,
  METRIC_DEAD_LETTER_DROPPED,
  METRIC_DEAD_LETTERED,
  METRIC_HELD_TIME_SECONDS,
  METRIC_REPLAY_REJECTED,
  METRIC_REPLAYED,
  METRIC_RTT_SECONDS,
} from '../dispatch/metric-names.js';
import { copyPublished } from '../shm/published-copy.js';
import { HELD_BUCKET_BOUNDS_S } from '../pipeline/held-time.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { MetricNames } from './metric-names.js';
import { readThreadRuntime, type ThreadRuntimeReading } from '../pipeline/thread-runtime.js';

/** One labelled series read at scrape time. */
export interface SharedSeries {
  /** Label values of the series. */
  labels: Record<string, string>;
  /** Reads the current value (from shared memory). */
  read(): number;
}

/** Where the router's shared counters live. */
export interface MetricSources {
  /** The pipeline region (control cells and ingest counters). */
  pipeline: SharedArrayBuffer;
  /** Admission counter blocks, ADM_BLOCK_F64 Float64 cells per telemetry ring, in the rings' order. */
  admissionCounters?: SharedArrayBuffer;
  /** Telemetry ring regions, one per (ingest thread, shard) in `telemetryRingIndex` order. */
  telemetryRings?: SharedArrayBuffer[];
  /** Shards (default: one per telemetry ring, as with one ingest thread). */
  shards?: number;
  /** Trigger ring regions: by shard, then the control ring, then the COMPLIANCE group's (if any). */
  triggerRings?: SharedArrayBuffer[];
  /** COMPLIANCE ring regions, one per ingest thread (none when the COMPLIANCE path is off). */
  complianceRings?: SharedArrayBuffer[];
  /**
   * Containment counter blocks (CNT_*), CNT_BLOCK_F64 cells per block (shards, the reload block, the COMPLIANCE
   * group's).
   */
  containmentCounters?: SharedArrayBuffer;
  /** Dispatcher metric cells (DS_* blocks then the DISP_* block); needs `downstreamNames`. */
  dispatchMetrics?: SharedArrayBuffer;
  /** Downstream names, in dispatcher order. */
  downstreamNames?: readonly string[];
  /** Pipeline stats region (PST_* cells and the held-time histogram). */
  pipelineStats?: SharedArrayBuffer;
  /** Per-thread runtime reports (RT_* blocks, src/pipeline/thread-runtime.ts). */
  threadRuntime?: SharedArrayBuffer;
  /** Also export prom-client's default process metrics (default true). */
  defaultMetrics?: boolean;
}

/** A histogram read from shared cells: per-bucket (not cumulative) counts with upper bounds, a sum and a count. */
export interface SharedHistogramSource {
  /** Label values of the series. */
  labels: Record<string, string>;
  /** Upper bounds of the bounded buckets, in the exported unit. */
  bounds: readonly number[];
  /** Count in bucket i (i = bounds.length is the overflow bucket). */
  bucket(i: number): number;
  /** Sum of the samples, exported unit. */
  sum(): number;
  /** Number of samples. */
  count(): number;
}

/** Fences named in the untracked-pings gauge at most (a label per fence: bounded on purpose). */
const UNTRACKED_FENCES_SHOWN = 20;

/**
 * A Registry that runs `refresh` before each exposition (text or JSON): the series of one group then read one copy of
 * their cells, taken at one instant (see RouterMetrics.addAdmission and addDispatch).
 */
class RefreshingRegistry extends Registry {
  constructor(private readonly refresh: () => void) {
    super();
  }

  override metrics(): Promise<string> {
    this.refresh();
    return super.metrics();
  }

  override getMetricsAsJSON(): ReturnType<Registry['getMetricsAsJSON']> {
    this.refresh();
    return super.getMetricsAsJSON();
  }
}

/** The router's registry plus helpers to add shared-memory series. */
export class RouterMetrics {
  /** Copy the cells of one group of series before a scrape reads them. */
  private readonly refreshers: (() => void)[] = [];
  /** The registry `/metrics` serves: every `metrics()` call first copies the cells its series read. */
  readonly registry: Registry = new RefreshingRegistry(() => {
    for (const refresh of this.refreshers) refresh();
  });

  /** Content type of the exposition. */
  get contentType(): string {
    return this.registry.contentType;
  }

  constructor(sources: MetricSources) {
    if (sources.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    this.addPipeline(PipelineRegion.wrap(sources.pipeline));
    if (sources.admissionCounters !== undefined) this.addAdmission(new Float64Array(sources.admissionCounters));
    const rings: SharedSeries[] = [];
    const capacities: SharedSeries[] = [];
    const shards = sources.shards ?? sources.telemetryRings?.length ?? 1;
    // A telemetry ring is named by its shard and its producer (ingest thread); a trigger ring by its shard.
    // The trigger ring after the shards' is the control ring; the one after it the COMPLIANCE group's.
    const triggerShard = (r: number): string => (r < shards ? String(r) : r === shards ? 'control' : 'compliance');
    const addRings = (
      kind: string,
      buffers: SharedArrayBuffer[] | undefined,
      label: (r: number) => { shard: string; ingest_thread: string },
    ): void => {
      (buffers ?? []).forEach((b, r) => {
        const ring = SpscRing.wrap(b);
        const labels = { ring: kind, ...label(r) };
        rings.push({ labels, read: () => ring.depth() });
        capacities.push({ labels, read: () => ring.capacitySlots });
      });
    };
    addRings('telemetry', sources.telemetryRings, (r) => ({
      shard: String(r % shards),
      ingest_thread: String(Math.floor(r / shards)),
    }));
    addRings('telemetry', sources.complianceRings, (r) => ({ shard: 'compliance', ingest_thread: String(r) }));
    addRings('trigger', sources.triggerRings, (r) => ({ shard: triggerShard(r), ingest_thread: '' }));
    const complianceRings = sources.complianceRings?.length ?? 0;
    if (complianceRings > 0 && sources.admissionCounters !== undefined) {
      // The COMPLIANCE rings' admission blocks follow the shard rings'.
      const cells = new Float64Array(sources.admissionCounters);
      const first = sources.telemetryRings?.length ?? shards;
      this.addSharedCounter(
        MetricNames.COMPLIANCE_PATH_PINGS,
        'Pings admitted into a COMPLIANCE ring (the path that passes the other lanes), by lane (a device keeps its path until its earlier pings are processed and its triggers taken).',
        ['lane'],
        LANE_NAMES.map((lane, l) => ({
          labels: { lane },
          read: () => {
            let n = 0;
            for (let b = first; b < first + complianceRings; b++) n += cells[b * ADM_BLOCK_F64 + ADM_ADMITTED_F64 + l]!;
            return n;
          },
        })),
      );
    }
    if (sources.containmentCounters !== undefined)
      this.addContainment(new Float64Array(sources.containmentCounters), shards);
    if (sources.dispatchMetrics !== undefined)
      this.addDispatch(new Float64Array(sources.dispatchMetrics), sources.downstreamNames ?? []);
    if (sources.pipelineStats !== undefined) this.addPipelineStats(new Float64Array(sources.pipelineStats));
    if (sources.threadRuntime !== undefined) this.addThreadRuntime(sources.threadRuntime);
    if (rings.length > 0) {
      this.addSharedGauge(
        MetricNames.RING_DEPTH,
        'Records published and not yet consumed, per ring.',
        ['ring', 'shard', 'ingest_thread'],
        rings,
      );
      this.addSharedGauge(
        MetricNames.RING_CAPACITY,
        'Record slots per ring.',
        ['ring', 'shard', 'ingest_thread'],
        capacities,
      );
    }
  }

  /**
   * Adds the fence-tracking series: untracked pings of the `UNTRACKED_FENCES_SHOWN` fences with the most in the current
   * fence generation (by fence id), and the shared entry pool's use. Read at scrape time.
   */
  addFenceTracking(
    mostUntracked: (limit: number) => { fenceId: string; pings: number }[],
    poolUsedChunks: () => number,
    poolChunks: number,
  ): void {
    new Gauge({
      name: MetricNames.FENCES_UNTRACKED,
      help: `Pings that found a device inside this fence untracked (no free entry), this fence generation; the ${UNTRACKED_FENCES_SHOWN} fences with the most.`,
      labelNames: ['fence_id'],
      registers: [this.registry],
      collect(this: Gauge) {
        this.reset();
        for (const u of mostUntracked(UNTRACKED_FENCES_SHOWN)) this.set({ fence_id: u.fenceId }, u.pings);
      },
    });
    this.addSharedGauge(
      MetricNames.FENCE_ENTRY_POOL_USED,
      'Chunks of the shared fence entry pool in use.',
      [],
      [{ labels: {}, read: poolUsedChunks }],
    );
    this.addSharedGauge(
      MetricNames.FENCE_ENTRY_POOL_CAPACITY,
      'Chunks in the shared fence entry pool (8 entries each).',
      [],
      [{ labels: {}, read: () => poolChunks }],
    );
  }

  /**
   * Adds the partitioned source's series, one per partition this router owns (`partition` label): consumer lag in
   * messages and seconds, messages, bytes, redeliveries and aged messages taken, the stream sequence acknowledged.
   * `cells` is the SRC_* region (src/shm/layout.ts).
   */
  addSourcePartitions(cells: Float64Array, partitionCount: number): void {
    const per = (cell: number, scale = 1): SharedSeries[] =>
      Array.from({ length: partitionCount }, (_, p) => ({
        labels: { partition: String(p) },
        read: () => (cells[p * SRC_STRIDE_F64 + SRC_OWNED_F64] === 1 ? cells[p * SRC_STRIDE_F64 + cell]! * scale : NaN),
      }));
    this.addSharedGauge(
      MetricNames.SOURCE_PARTITION_OWNED,
      'Partitions of the JetStream source this router consumes (1 per owned partition).',
      ['partition'],
      per(SRC_OWNED_F64),
    );
    this.addSharedGauge(
      MetricNames.SOURCE_LAG_MESSAGES,
      'Messages of the partition not yet delivered to this router, as of the last message taken.',
      ['partition'],
      per(SRC_LAG_MESSAGES_F64),
    );
    this.addSharedGauge(
      MetricNames.SOURCE_LAG_SECONDS,
      'Age of the last message taken from the partition when it was taken.',
      ['partition'],
      per(SRC_LAG_AGE_MS_F64, 1e-3),
    );
    this.addSharedGauge(
      MetricNames.SOURCE_ACKED_SEQ,
      'Stream sequence of the last message of the partition acknowledged (it and everything before it processed and in a durable checkpoint).',
      ['partition'],
      per(SRC_ACKED_STREAM_SEQ_F64),
    );
    this.addSharedGauge(
      MetricNames.SOURCE_CHECKPOINT_SEQ,
      "Stream sequence the partition's last checkpoint stored in the state bucket covers (a router taking the partition reads on from the next).",
      ['partition'],
      per(SRC_CHECKPOINT_STREAM_SEQ_F64),
    );
    this.addSharedGauge(
      MetricNames.SOURCE_CHECKPOINT_AGE,
      "Time since the capture of the partition's last checkpoint stored in the state bucket (NaN: none yet).",
      ['partition'],
      Array.from({ length: partitionCount }, (_, p) => ({
        labels: { partition: String(p) },
        read: () => {
          const b = p * SRC_STRIDE_F64;
          const at = cells[b + SRC_CHECKPOINT_CAPTURED_MS_F64]!;
          return cells[b + SRC_OWNED_F64] === 1 && at > 0 ? (Date.now() - at) / 1000 : NaN;
        },
      })),
    );
    this.addSharedCounter(
      MetricNames.SOURCE_MESSAGES,
      'Messages taken from the partition.',
      ['partition'],
      per(SRC_MESSAGES_F64),
    );
    this.addSharedCounter(
      MetricNames.SOURCE_BYTES,
      'Bytes taken from the partition.',
      ['partition'],
      per(SRC_BYTES_F64),
    );
    this.addSharedCounter(
      MetricNames.SOURCE_REDELIVERED,
      'Messages the server delivered again (an acknowledgement it did not get in time, or another router before).',
      ['partition'],
      per(SRC_REDELIVERED_F64),
    );
    this.addSharedCounter(
      MetricNames.SOURCE_REWINDS,
      "Times the partition's consumer was made again because deliveries were lost on the way (a fetch that failed part way): it read on from the message after the last one taken.",
      ['partition'],
      per(SRC_REWINDS_F64),
    );
    this.addSharedCounter(
      MetricNames.SOURCE_AGED,
      'Messages older than maxBacklogAgeMs when taken, fed as live traffic (lane shedding applies).',
      ['partition'],
      per(SRC_AGED_MESSAGES_F64),
    );
  }

  /** Adds a counter whose series are read from shared memory at scrape time. */
  addSharedCounter(name: string, help: string, labelNames: readonly string[], series: SharedSeries[]): void {
    new Counter({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect(this: Counter) {
        this.reset();
        for (const s of series) {
          const v = s.read();
          if (v === v) this.inc(s.labels, v);
        }
      },
    });
  }

  /** Adds a gauge whose series are read from shared memory at scrape time. */
  addSharedGauge(name: string, help: string, labelNames: readonly string[], series: SharedSeries[]): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect(this: Gauge) {
        this.reset();
        // A value that is not a number (nothing measured, nothing configured) is left out, never exported as NaN.
        for (const s of series) {
          const v = s.read();
          if (v === v) this.set(s.labels, v);
        }
      },
    });
  }

  /**
   * Adds a histogram whose buckets are read from shared memory at scrape time (cumulative `_bucket` series with `le`,
   * `_sum` and `_count`, as Prometheus expects).
   */
  addSharedHistogram(name: string, help: string, series: SharedHistogramSource[]): void {
    const metric = {
      name,
      help,
      type: 'histogram',
      aggregator: 'sum',
      get: () => {
        const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
        for (const s of series) {
          let cumulative = 0;
          for (let i = 0; i <= s.bounds.length; i++) {
            cumulative += s.bucket(i);
            const le = i < s.bounds.length ? Number(s.bounds[i]!.toPrecision(6)) : '+Inf';
            values.push({ metricName: `${name}_bucket`, labels: { ...s.labels, le }, value: cumulative });
          }
          values.push({ metricName: `${name}_sum`, labels: s.labels, value: s.sum() });
          values.push({ metricName: `${name}_count`, labels: s.labels, value: s.count() });
        }
        return { name, help, type: 'histogram', aggregator: 'sum', values };
      },
    };
    this.registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  /**
   * Registers the per-thread runtime series (`thread` label: main, ingest, dispatcher, containment-<n>), read from the
   * threads' latest reports; a thread that stopped reporting drops out.
   */
  private addThreadRuntime(region: SharedArrayBuffer): void {
    let readings: ThreadRuntimeReading[] = [];
    this.refreshers.push(() => {
      readings = readThreadRuntime(region, Date.now());
    });
    const series: [string, string, 'gauge' | 'counter', (r: ThreadRuntimeReading) => number | null][] = [
      [MetricNames.THREAD_HEAP_USED, 'V8 heap in use, per router thread, bytes.', 'gauge', (r) => r.heapUsedBytes],
      [MetricNames.THREAD_HEAP_TOTAL, 'V8 heap reserved, per router thread, bytes.', 'gauge', (r) => r.heapTotalBytes],
      [
        MetricNames.THREAD_HEAP_LIVE,
        "V8 heap in use right after the thread's latest full collection (the live heap), bytes.",
        'gauge',
        (r) => r.heapLiveBytes,
      ],
      [
        MetricNames.THREAD_EXTERNAL,
        "Memory outside the V8 heap held by the thread's objects, bytes.",
        'gauge',
        (r) => r.externalBytes,
      ],
      [
        MetricNames.THREAD_LOOP_UTILIZATION,
        "Event-loop utilisation over the thread's last report interval (1 s), 0..1.",
        'gauge',
        (r) => r.loopUtilization,
      ],
      [
        MetricNames.THREAD_LOOP_DELAY_P99,
        "P99 of the event-loop delay over the thread's last report interval (1 s), seconds.",
        'gauge',
        (r) => r.loopDelayP99Ns / 1e9,
      ],
      [
        MetricNames.THREAD_GC_MAJOR,
        'Full (mark-compact) collections, per router thread.',
        'counter',
        (r) => r.majorGcs,
      ],
      [
        MetricNames.THREAD_GC_SECONDS,
        'Time in garbage collection, per router thread, seconds.',
        'counter',
        (r) => r.gcNs / 1e9,
      ],
      [
        MetricNames.THREAD_CPU_SECONDS,
        'CPU time used, per router thread, seconds (read at the scrape; Linux only): a thread near 1 s per second is saturated.',
        'counter',
        (r) => r.cpuSeconds,
      ],
      [
        MetricNames.THREAD_CPU_WAIT_SECONDS,
        'Time a router thread was ready to run but waiting for a core, seconds (Linux only): the host is short of cores.',
        'counter',
        (r) => r.cpuWaitSeconds,
      ],
    ];
    for (const [name, help, type, read] of series) {
      const collect = function (this: Gauge | Counter): void {
        this.reset();
        for (const r of readings) {
          const v = read(r);
          if (v === null) continue;
          if (this instanceof Gauge) this.set({ thread: r.thread }, v);
          else this.inc({ thread: r.thread }, v);
        }
      };
      if (type === 'gauge') new Gauge({ name, help, labelNames: ['thread'], registers: [this.registry], collect });
      else new Counter({ name, help, labelNames: ['thread'], registers: [this.registry], collect });
    }
  }

  /**
   * Registers the containment counters (summed over every block; the parked time over the shard groups' blocks only:
   * the COMPLIANCE ring's worker is idle by design).
   */
  private addContainment(f: Float64Array, shards: number): void {
    const blocks = Math.floor(f.length / CNT_BLOCK_F64);
    const sum =
      (cell: number, upTo = blocks) =>
      (): number => {
        let s = 0;
        for (let b = 0; b < upTo; b++) s += f[b * CNT_BLOCK_F64 + cell]!;
        return s;
      };
    for (const [name, help, cell] of CONTAINMENT_COUNTERS)
      this.addSharedCounter(name, help, [], [{ labels: {}, read: sum(cell) }]);
    const parkedNs = sum(CNT_PARKED_NS_F64, Math.min(blocks, shards));
    this.addSharedCounter(
      MetricNames.CONTAINMENT_PARKED,
      "Time containment tasks spent parked waiting for records, all shard groups together (near the elapsed time x the groups, one per pool worker: idle; near 0: working flat out); the COMPLIANCE ring's worker, idle by design, is not counted.",
      [],
      [{ labels: {}, read: () => parkedNs() / 1e9 }],
    );
    const triggers: SharedSeries[] = [];
    for (let t = 0; t < TRIGGER_TYPE_COUNT; t++)
      triggers.push({ labels: { type: TRIGGER_TYPE_NAMES[t]! }, read: sum(CNT_TRIGGERS_F64 + t) });
    this.addSharedCounter(
      MetricNames.TRIGGERS,
      'Triggers produced, by type (containment and reload EXITs).',
      ['type'],
      triggers,
    );
  }

  /** Registers the dispatcher's per-downstream and dispatcher-wide cells and the RTT histograms. */
  private addDispatch(cells: Float64Array, names: readonly string[]): void {
    // Read from one consistent copy per scrape (one publish of the dispatcher): the delivery identity holds in it.
    const f = new Float64Array(cells.length);
    const cellsI32 = new Int32Array(cells.buffer, cells.byteOffset, cells.length * 2);
    const versionI32 = (names.length * DS_BLOCK_F64 + DISP_PUBLISH_VERSION_F64) * 2;
    this.refreshers.push(() => copyPublished(cells, cellsI32, versionI32, f));
    if (names.length > 0) {
      for (const m of DOWNSTREAM_CELL_METRICS) {
        const series: SharedSeries[] = names.map((n, d) => ({
          labels: { [DOWNSTREAM_LABEL]: n },
          read: () => f[d * DS_BLOCK_F64 + m.cell]! * m.scale,
        }));
        if (m.type === 'counter') this.addSharedCounter(m.name, m.help, [DOWNSTREAM_LABEL], series);
        else this.addSharedGauge(m.name, m.help, [DOWNSTREAM_LABEL], series);
      }
      const breaker: SharedSeries[] = [];
      names.forEach((n, d) => {
        BREAKER_STATE_NAMES.forEach((state, value) =>
          breaker.push({
            labels: { [DOWNSTREAM_LABEL]: n, state },
            read: () => (f[d * DS_BLOCK_F64 + DS_BREAKER_STATE_F64] === value ? 1 : 0),
          }),
        );
      });
      this.addSharedGauge(
        METRIC_BREAKER_STATE,
        'Circuit breaker state, one series per state (closed, open, half_open): 1 for the state in force, else 0.',
        [DOWNSTREAM_LABEL, 'state'],
        breaker,
      );
      const byReason: SharedSeries[] = [];
      names.forEach((n, d) => {
        for (let r = 0; r < DEAD_LETTER_REASON_COUNT; r++) {
          byReason.push({
            labels: { [DOWNSTREAM_LABEL]: n, reason: DEAD_LETTER_REASON_NAMES[r]! },
            read: () => f[d * DS_BLOCK_F64 + DS_DEAD_LETTERED_BY_REASON_F64 + r]!,
          });
        }
      });
      this.addSharedCounter(
        METRIC_DEAD_LETTERED,
        'Triggers dead-lettered, by reason: rejected (refused for good), expired, undeliverable (every attempt failed; waits in the replay lane).',
        [DOWNSTREAM_LABEL, 'reason'],
        byReason,
      );
      // Replays by the reason their trigger was dead-lettered with (the replay lane parks undeliverable ones).
      const replayedByReason: SharedSeries[] = [];
      const replayRejectedByReason: SharedSeries[] = [];
      names.forEach((n, d) => {
        for (let r = 0; r < DEAD_LETTER_REASON_COUNT; r++) {
          const labels = { [DOWNSTREAM_LABEL]: n, reason: DEAD_LETTER_REASON_NAMES[r]! };
          replayedByReason.push({ labels, read: () => f[d * DS_BLOCK_F64 + DS_REPLAYED_BY_REASON_F64 + r]! });
          replayRejectedByReason.push({
            labels,
            read: () => f[d * DS_BLOCK_F64 + DS_REPLAY_REJECTED_BY_REASON_F64 + r]!,
          });
        }
      });
      this.addSharedCounter(
        METRIC_REPLAYED,
        'Dead letters re-delivered by the replay lane, by the reason they were dead-lettered with.',
        [DOWNSTREAM_LABEL, 'reason'],
        replayedByReason,
      );
      this.addSharedCounter(
        METRIC_REPLAY_REJECTED,
        'Dead letters the replay lane found refused for good (counted under dead-lettered reason rejected too), by the reason they were dead-lettered with first.',
        [DOWNSTREAM_LABEL, 'reason'],
        replayRejectedByReason,
      );
      const dropped: SharedSeries[] = [];
      names.forEach((n, d) => {
        for (let r = 0; r < DEAD_LETTER_DROP_REASON_COUNT; r++) {
          dropped.push({
            labels: { [DOWNSTREAM_LABEL]: n, reason: DEAD_LETTER_DROP_REASON_NAMES[r]! },
            read: () => f[d * DS_BLOCK_F64 + DS_DEAD_LETTER_DROPPED_F64 + r]!,
          });
        }
      });
      this.addSharedCounter(
        METRIC_DEAD_LETTER_DROPPED,
        'Dead-letter records dropped from storage, oldest first, by reason: over_budget (deadLetter.maxBytesPerDownstream), too_old (deadLetter.maxAgeMs), disk_error (could not be written).',
        [DOWNSTREAM_LABEL, 'reason'],
        dropped,
      );
      const bounds = DS_RTT_BUCKET_BOUNDS_MS.map((ms) => ms / 1000);
      this.addSharedHistogram(
        METRIC_RTT_SECONDS,
        'Round-trip time of downstream calls (the permit clock: the downstream interaction only).',
        names.map((n, d) => ({
          labels: { [DOWNSTREAM_LABEL]: n },
          bounds,
          bucket: (i: number) => f[d * DS_BLOCK_F64 + DS_RTT_BUCKETS_F64 + i]!,
          sum: () => f[d * DS_BLOCK_F64 + DS_RTT_SUM_NS_F64]! / 1e9,
          count: () => f[d * DS_BLOCK_F64 + DS_RTT_COUNT_F64]!,
        })),
      );
      const laneHeld: SharedHistogramSource[] = [];
      names.forEach((n, d) => {
        for (let lane = 0; lane < LANE_COUNT; lane++) {
          const h = d * DS_BLOCK_F64 + DS_LANE_HELD_BASE_F64 + lane * HELD_BLOCK_F64;
          laneHeld.push({
            labels: { [DOWNSTREAM_LABEL]: n, lane: LANE_NAMES[lane]! },
            bounds: HELD_BUCKET_BOUNDS_S,
            bucket: (i: number) => f[h + HELD_BUCKETS_F64 + i]!,
            sum: () => f[h + HELD_SUM_NS_F64]! / 1e9,
            count: () => f[h + HELD_COUNT_F64]!,
          });
        }
      });
      this.addSharedHistogram(
        METRIC_HELD_TIME_SECONDS,
        "Time from admission to the hand-over (of the attempt that succeeded) to this downstream, by the trigger's lane (its fence's class: COMPLIANCE for a compliance fence, else TRANSITION), per trigger delivered without a dead letter.",
        laneHeld,
      );
    }
    const base = names.length * DS_BLOCK_F64;
    for (const m of DISPATCHER_CELL_METRICS) {
      const series: SharedSeries[] = [{ labels: {}, read: () => f[base + m.cell]! * m.scale }];
      if (m.type === 'counter') this.addSharedCounter(m.name, m.help, [], series);
      else this.addSharedGauge(m.name, m.help, [], series);
    }
  }

  /** Registers the batching and reload counters and the held-time histogram. */
  private addPipelineStats(f: Float64Array): void {
    for (const [cell, name, help, type] of PIPELINE_STATS) {
      const series: SharedSeries[] = [{ labels: {}, read: () => f[cell]! }];
      if (type === 'counter') this.addSharedCounter(name, help, [], series);
      else this.addSharedGauge(name, help, [], series);
    }
    for (const [cell, name, help, scale] of PIPELINE_SCALED_GAUGES)
      this.addSharedGauge(name, help, [], [{ labels: {}, read: () => f[cell]! * scale }]);
    const held = (h: number) => [
      {
        labels: {},
        bounds: HELD_BUCKET_BOUNDS_S,
        bucket: (i: number) => f[h + HELD_BUCKETS_F64 + i]!,
        sum: () => f[h + HELD_SUM_NS_F64]! / 1e9,
        count: () => f[h + HELD_COUNT_F64]!,
      },
    ];
    this.addSharedHistogram(
      MetricNames.HELD_TIME_SECONDS,
      'Time from admission to the hand-over (of the attempt that succeeded) to a downstream, per delivered trigger that was never dead-lettered.',
      held(PST_HELD_BASE_F64),
    );
    this.addSharedHistogram(
      MetricNames.REPLAY_HELD_TIME_SECONDS,
      'Time from admission to the hand-over that delivered it, per dead letter re-delivered by the replay lane.',
      held(PST_REPLAY_HELD_BASE_F64),
    );
    this.addSharedHistogram(
      MetricNames.PIPELINE_TIME_SECONDS,
      "Time from admission to the start of the dispatcher's pass over the trigger rings that took the trigger (telemetry ring, containment, trigger ring; a pass that began before the trigger was written counts 0), by the trigger's lane, per trigger routed to a downstream: the pipeline's part of geofence_dispatch_held_time_seconds, the rest being the delivery's.",
      Array.from({ length: LANE_COUNT }, (_, lane) => ({
        ...held(PST_TAKEN_BASE_F64 + lane * HELD_BLOCK_F64)[0]!,
        labels: { lane: LANE_NAMES[lane]! },
      })),
    );
  }

  /** The Prometheus text exposition. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  private addPipeline(p: PipelineRegion): void {
    const f = p.f64;
    const one = (cell: number): SharedSeries[] => [{ labels: {}, read: () => f[cell]! }];
    this.addSharedCounter(
      MetricNames.INGEST_RECEIVED_BYTES,
      'Telemetry bytes received from every source.',
      [],
      one(ING_BYTES_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_FRAMES,
      'Telemetry frames delimited and examined.',
      [],
      one(ING_FRAMES_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_ACCEPTED,
      'Pings that passed validation and were offered to admission.',
      [],
      one(ING_ACCEPTED_F64),
    );
    const rejected: SharedSeries[] = [];
    for (let r = 0; r < REJECT_REASON_COUNT; r++)
      rejected.push({ labels: { reason: REJECT_REASON_NAMES[r]! }, read: () => f[ING_REJECTED_F64 + r]! });
    this.addSharedCounter(
      MetricNames.INGEST_REJECTED,
      'Frames and pings rejected at the ingest edge, by reason.',
      ['reason'],
      rejected,
    );
    this.addSharedCounter(
      MetricNames.INGEST_RESYNCS,
      'Resynchronisations of a byte stream after a structural reject.',
      [],
      one(ING_RESYNCS_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_RESYNC_SKIPPED_BYTES,
      'Bytes skipped while resynchronising.',
      [],
      one(ING_RESYNC_SKIPPED_BYTES_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_CONNECTIONS_OPENED,
      'Telemetry TCP connections accepted.',
      [],
      one(ING_CONNECTIONS_OPENED_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_CONNECTIONS_CLOSED,
      'Telemetry TCP connections closed.',
      [],
      one(ING_CONNECTIONS_CLOSED_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_CONNECTIONS_REFUSED,
      'Telemetry TCP connections refused at the connection limit.',
      [],
      one(ING_CONNECTIONS_REFUSED_F64),
    );
    const dropped: SharedSeries[] = [];
    for (let r = 0; r < CONNECTION_DROP_REASON_COUNT; r++) {
      dropped.push({
        labels: { reason: CONNECTION_DROP_REASON_NAMES[r]! },
        read: () => f[ING_CONNECTIONS_DROPPED_F64 + r]!,
      });
    }
    this.addSharedCounter(
      MetricNames.INGEST_CONNECTIONS_DROPPED,
      'Telemetry TCP connections the router closed, by reason: idle (ingest.idleTimeoutMs), frame_deadline (a frame not completed within ingest.frameDeadlineMs), held_bytes (partial frames over ingest.maxHeldBytes).',
      ['reason'],
      dropped,
    );
    this.addSharedGauge(
      MetricNames.INGEST_HELD_BYTES,
      'Bytes the telemetry TCP connections hold for partial frames.',
      [],
      one(ING_HELD_BYTES_F64),
    );
    this.addSharedCounter(
      MetricNames.INGEST_FORWARD_PAUSES,
      'Times a telemetry connection was paused because the ingest thread it was spread to had no room in its input ring (that thread is saturated).',
      [],
      one(ING_FORWARD_PAUSES_F64),
    );
    this.addSharedGauge(
      MetricNames.INGEST_OPEN_CONNECTIONS,
      'Open telemetry TCP connections.',
      [],
      [{ labels: {}, read: () => f[ING_CONNECTIONS_OPENED_F64]! - f[ING_CONNECTIONS_CLOSED_F64]! }],
    );
    this.addSharedGauge(
      MetricNames.DEVICES,
      'Device slots in use (registered devices not expired and freed).',
      [],
      one(ING_DEVICES_F64),
    );
    this.addSharedCounter(
      MetricNames.DEVICES_EXPIRED,
      'Devices expired after deviceIdleTimeoutMs without a ping.',
      [],
      one(ING_DEVICES_EXPIRED_F64),
    );
    this.addSharedCounter(
      MetricNames.DEVICES_REVIVED,
      'Expired devices that sent again before their slot was freed (same slot, seq continues).',
      [],
      one(ING_DEVICES_REVIVED_F64),
    );
    this.addSharedCounter(
      MetricNames.DEVICE_SLOTS_FREED,
      'Slots of expired devices freed once every downstream had settled their triggers.',
      [],
      one(ING_SLOTS_FREED_F64),
    );
    this.addSharedCounter(
      MetricNames.DEVICE_SLOTS_REUSED,
      'New devices registered into a freed slot.',
      [],
      one(ING_SLOTS_REUSED_F64),
    );
    this.addSharedGauge(
      MetricNames.FENCE_GENERATION,
      'Fence-store generation in force.',
      [],
      [{ labels: {}, read: () => Atomics.load(p.i32, CTL_FENCE_GENERATION_I32) }],
    );
    this.addSharedGauge(
      MetricNames.DRAINING,
      '1 while the router drains.',
      [],
      [{ labels: {}, read: () => Atomics.load(p.i32, CTL_DRAINING_I32) }],
    );
  }

  private addAdmission(cells: Float64Array): void {
    const shards = Math.floor(cells.length / ADM_BLOCK_F64);
    // Read from one copy per scrape: offered, admitted and shed then come from the same instant.
    const f = new Float64Array(cells.length);
    this.refreshers.push(() => f.set(cells));
    // Sum a cell over every shard's block.
    const sumOf = (cell: number): number => {
      let s = 0;
      for (let b = 0; b < shards; b++) s += f[b * ADM_BLOCK_F64 + cell]!;
      return s;
    };
    const sum = (cell: number) => (): number => sumOf(cell);
    const offered: SharedSeries[] = [];
    const admitted: SharedSeries[] = [];
    const shed: SharedSeries[] = [];
    for (let lane = 0; lane < LANE_COUNT; lane++) {
      const laneName = LANE_NAMES[lane]!;
      // Every offered ping is admitted or shed in the same call: offered is their sum (a separate counter read from
      // the cells could be one increment ahead of them).
      const offeredOf = (): number => {
        let n = sumOf(ADM_ADMITTED_F64 + lane);
        for (let r = 0; r < SHED_REASON_COUNT; r++) n += sumOf(ADM_SHED_F64 + lane * SHED_REASON_COUNT + r);
        return n;
      };
      offered.push({ labels: { lane: laneName }, read: offeredOf });
      admitted.push({ labels: { lane: laneName }, read: sum(ADM_ADMITTED_F64 + lane) });
      for (let r = 0; r < SHED_REASON_COUNT; r++) {
        shed.push({
          labels: { lane: laneName, reason: SHED_REASON_NAMES[r]! },
          read: sum(ADM_SHED_F64 + lane * SHED_REASON_COUNT + r),
        });
      }
    }
    this.addSharedCounter(MetricNames.PINGS_OFFERED, 'Pings offered to admission, by lane.', ['lane'], offered);
    this.addSharedCounter(
      MetricNames.PINGS_ADMITTED,
      'Pings admitted into a telemetry ring, by lane.',
      ['lane'],
      admitted,
    );
    this.addSharedCounter(
      MetricNames.PINGS_SHED,
      'Pings shed at admission, by lane and reason.',
      ['lane', 'reason'],
      shed,
    );
  }
}

/** Containment counters exported (summed over the shards' blocks and the reload block). */
const CONTAINMENT_COUNTERS: readonly [string, string, number][] = [
  [MetricNames.PINGS_PROCESSED, 'Pings processed by the containment state machine.', CNT_PROCESSED_F64],
  [MetricNames.PINGS_STALE, "Pings ignored by containment as older than the device's last ping.", CNT_STALE_F64],
  [MetricNames.PINGS_INVALID_AT_CONTAINMENT, 'Pings ignored by containment as out of range.', CNT_INVALID_F64],
  [
    MetricNames.FENCE_ENTRY_OVERFLOWS,
    'Pings that found a device inside a fence it had no free entry for (the fence is untracked for that stay).',
    CNT_FENCE_OVERFLOW_F64,
  ],
  [
    MetricNames.CANDIDATE_OVERFLOWS,
    'Queries with more candidates than the scratch array holds.',
    CNT_CANDIDATE_OVERFLOW_F64,
  ],
  [
    MetricNames.GENERATION_MISMATCHES,
    'Devices whose state referred to another fence generation (entries dropped).',
    CNT_GENERATION_MISMATCH_F64,
  ],
  [MetricNames.EXACT_TESTS, 'Exact point-in-fence tests run.', CNT_EXACT_TESTS_F64],
  [MetricNames.TRIGGER_RING_WAITS, 'Times containment blocked on a full trigger ring.', CNT_TRIGGER_RING_WAITS_F64],
  [
    MetricNames.EXPIRY_EXITS,
    'EXIT triggers written because their device expired (counted under EXIT too).',
    CNT_EXPIRY_EXITS_F64,
  ],
  [
    MetricNames.IMPLAUSIBLE_SEGMENTS,
    'Moves between two pings judged implausible (crossMaxSpeedMps, crossMaxGapMs): no CROSS looked for.',
    CNT_IMPLAUSIBLE_SEGMENTS_F64,
  ],
  [
    MetricNames.CROSS_OVER_BUDGET,
    'CROSS triggers not written because their device had used its crossMaxPerDevicePerSec budget.',
    CNT_CROSS_OVER_BUDGET_F64,
  ],
];

/** Pipeline stats exported (cell, name, help, type). */
const PIPELINE_STATS: readonly [number, string, string, 'counter' | 'gauge'][] = [
  [PST_TASKS_SUBMITTED_F64, MetricNames.TASKS_SUBMITTED, 'Containment tasks submitted to the pool.', 'counter'],
  [PST_TASKS_COMPLETED_F64, MetricNames.TASKS_COMPLETED, 'Containment tasks completed.', 'counter'],
  [PST_BATCHED_PINGS_F64, MetricNames.BATCHED_PINGS, 'Pings carried by completed containment tasks.', 'counter'],
  [PST_TASKS_FAILED_F64, MetricNames.TASKS_FAILED, 'Containment tasks that failed.', 'counter'],
  [
    PST_LOST_PINGS_F64,
    MetricNames.LOST_PINGS,
    'Admitted pings released unprocessed because their task failed or was aborted as hung.',
    'counter',
  ],
  [
    PST_CHECKPOINTS_DEFERRED_F64,
    MetricNames.CHECKPOINTS_DEFERRED,
    'Checkpoints not written: the triggers of the pings they would hold were not handed on in time (a JetStream source without a state bucket).',
    'counter',
  ],
  [
    PST_INPUT_ERRORS_F64,
    MetricNames.INPUT_ERRORS,
    'Input files (or stdin) whose reading ended with an error (the rest of each not read).',
    'counter',
  ],
  [
    PST_TASKS_ABORTED_F64,
    MetricNames.TASKS_ABORTED,
    'Containment tasks aborted by the watchdog (no progress with records waiting).',
    'counter',
  ],
  [
    PST_LOST_PINGS_HUNG_F64,
    MetricNames.LOST_PINGS_HUNG,
    'Pings a hung task was processing, dropped when it was aborted (part of the lost pings).',
    'counter',
  ],
  [
    PST_STALLED_GROUPS_F64,
    MetricNames.STALLED_GROUPS,
    'Shard groups declared hung by the containment watchdog and not yet making progress again.',
    'gauge',
  ],
  [PST_RELOADS_F64, MetricNames.FENCE_RELOADS, 'Fence reloads completed.', 'counter'],
  [
    PST_RELOADS_FAILED_F64,
    MetricNames.FENCE_RELOADS_FAILED,
    'Fence reloads refused (the old fences kept serving).',
    'counter',
  ],
  [PST_FENCE_EDITS_F64, MetricNames.FENCE_EDITS, 'Live fence edits applied (upserts, removals, expiries).', 'counter'],
  [
    PST_FENCE_EDITS_FAILED_F64,
    MetricNames.FENCE_EDITS_FAILED,
    'Live fence edits refused (invalid fence) or failed (the fences in force kept serving).',
    'counter',
  ],
  [PST_CHECKPOINTS_F64, MetricNames.CHECKPOINTS, 'Device-state checkpoints written.', 'counter'],
  [
    PST_CHECKPOINTS_PAUSED_F64,
    MetricNames.CHECKPOINTS_PAUSED,
    'Checkpoints that paused containment to copy the device state (the copy taken while it runs did not settle in time).',
    'counter',
  ],
  [
    PST_CHECKPOINT_FAILURES_F64,
    MetricNames.CHECKPOINT_FAILURES,
    'Device-state checkpoints that failed (the previous one stayed in force).',
    'counter',
  ],
];

/** Pipeline stats exported as gauges scaled from ns (cell, name, help, scale). */
const PIPELINE_SCALED_GAUGES: readonly [number, string, string, number][] = [
  [
    PST_CHECKPOINT_LAST_NS_F64,
    MetricNames.CHECKPOINT_DURATION_SECONDS,
    'Duration of the last checkpoint (pause, copy, encode, write, fsync).',
    1e-9,
  ],
  [
    PST_CHECKPOINT_PAUSE_NS_F64,
    MetricNames.CHECKPOINT_PAUSE_SECONDS,
    'How long the last checkpoint paused containment.',
    1e-9,
  ],
  [PST_CHECKPOINT_BYTES_F64, MetricNames.CHECKPOINT_BYTES, 'Size of the last checkpoint file.', 1],
  [PST_CHECKPOINT_DEVICES_F64, MetricNames.CHECKPOINT_DEVICES, 'Devices in the last checkpoint.', 1],
];
