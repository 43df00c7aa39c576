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
  ADM_OFFERED_F64,
  ADM_SHED_F64,
  CTL_DRAINING_I32,
  CTL_FENCE_GENERATION_I32,
  ING_ACCEPTED_F64,
  ING_BYTES_F64,
  ING_CONNECTIONS_CLOSED_F64,
  ING_CONNECTIONS_OPENED_F64,
  ING_CONNECTIONS_REFUSED_F64,
  ING_DEVICES_F64,
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
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import { PipelineRegion } from '../ingest/pipeline-region.js';
import { MetricNames } from './metric-names.js';

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
  /** Admission counter blocks, ADM_BLOCK_F64 Float64 cells per shard, shard-major. */
  admissionCounters?: SharedArrayBuffer;
  /** Telemetry ring regions, by shard. */
  telemetryRings?: SharedArrayBuffer[];
  /** Trigger ring regions, by shard. */
  triggerRings?: SharedArrayBuffer[];
  /** Also export prom-client's default process metrics (default true). */
  defaultMetrics?: boolean;
}

/** The router's registry plus helpers to add shared-memory series. */
export class RouterMetrics {
  /** The registry `/metrics` serves. */
  readonly registry = new Registry();

  constructor(sources: MetricSources) {
    if (sources.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    this.addPipeline(PipelineRegion.wrap(sources.pipeline));
    if (sources.admissionCounters !== undefined) this.addAdmission(new Float64Array(sources.admissionCounters));
    const rings: SharedSeries[] = [];
    const capacities: SharedSeries[] = [];
    const addRings = (kind: string, buffers: SharedArrayBuffer[] | undefined): void => {
      (buffers ?? []).forEach((b, shard) => {
        const ring = SpscRing.wrap(b);
        const labels = { ring: kind, shard: String(shard) };
        rings.push({ labels, read: () => ring.depth() });
        capacities.push({ labels, read: () => ring.capacitySlots });
      });
    };
    addRings('telemetry', sources.telemetryRings);
    addRings('trigger', sources.triggerRings);
    if (rings.length > 0) {
      this.addSharedGauge(MetricNames.RING_DEPTH, 'Records published and not yet consumed, per ring.', ['ring', 'shard'], rings);
      this.addSharedGauge(MetricNames.RING_CAPACITY, 'Record slots per ring.', ['ring', 'shard'], capacities);
    }
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
        for (const s of series) this.inc(s.labels, s.read());
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
        for (const s of series) this.set(s.labels, s.read());
      },
    });
  }

  /** The Prometheus text exposition. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  private addPipeline(p: PipelineRegion): void {
    const f = p.f64;
    const one = (cell: number): SharedSeries[] => [{ labels: {}, read: () => f[cell]! }];
    this.addSharedCounter(MetricNames.INGEST_RECEIVED_BYTES, 'Telemetry bytes received from every source.', [], one(ING_BYTES_F64));
    this.addSharedCounter(MetricNames.INGEST_FRAMES, 'Telemetry frames delimited and examined.', [], one(ING_FRAMES_F64));
    this.addSharedCounter(MetricNames.INGEST_ACCEPTED, 'Pings that passed validation and were offered to admission.', [], one(ING_ACCEPTED_F64));
    const rejected: SharedSeries[] = [];
    for (let r = 0; r < REJECT_REASON_COUNT; r++) rejected.push({ labels: { reason: REJECT_REASON_NAMES[r]! }, read: () => f[ING_REJECTED_F64 + r]! });
    this.addSharedCounter(MetricNames.INGEST_REJECTED, 'Frames and pings rejected at the ingest edge, by reason.', ['reason'], rejected);
    this.addSharedCounter(MetricNames.INGEST_RESYNCS, 'Resynchronisations of a byte stream after a structural reject.', [], one(ING_RESYNCS_F64));
    this.addSharedCounter(MetricNames.INGEST_RESYNC_SKIPPED_BYTES, 'Bytes skipped while resynchronising.', [], one(ING_RESYNC_SKIPPED_BYTES_F64));
    this.addSharedCounter(MetricNames.INGEST_CONNECTIONS_OPENED, 'Telemetry TCP connections accepted.', [], one(ING_CONNECTIONS_OPENED_F64));
    this.addSharedCounter(MetricNames.INGEST_CONNECTIONS_CLOSED, 'Telemetry TCP connections closed.', [], one(ING_CONNECTIONS_CLOSED_F64));
    this.addSharedCounter(MetricNames.INGEST_CONNECTIONS_REFUSED, 'Telemetry TCP connections refused at the connection limit.', [], one(ING_CONNECTIONS_REFUSED_F64));
    this.addSharedGauge(MetricNames.INGEST_OPEN_CONNECTIONS, 'Open telemetry TCP connections.', [], [
      { labels: {}, read: () => f[ING_CONNECTIONS_OPENED_F64]! - f[ING_CONNECTIONS_CLOSED_F64]! },
    ]);
    this.addSharedGauge(MetricNames.DEVICES, 'Device slots in use.', [], one(ING_DEVICES_F64));
    this.addSharedGauge(MetricNames.FENCE_GENERATION, 'Fence-store generation in force.', [], [{ labels: {}, read: () => Atomics.load(p.i32, CTL_FENCE_GENERATION_I32) }]);
    this.addSharedGauge(MetricNames.DRAINING, '1 while the router drains.', [], [{ labels: {}, read: () => Atomics.load(p.i32, CTL_DRAINING_I32) }]);
  }

  private addAdmission(f: Float64Array): void {
    const shards = Math.floor(f.length / ADM_BLOCK_F64);
    // Sum a cell over every shard's block.
    const sum = (cell: number) => (): number => {
      let s = 0;
      for (let b = 0; b < shards; b++) s += f[b * ADM_BLOCK_F64 + cell]!;
      return s;
    };
    const offered: SharedSeries[] = [];
    const admitted: SharedSeries[] = [];
    const shed: SharedSeries[] = [];
    for (let lane = 0; lane < LANE_COUNT; lane++) {
      const laneName = LANE_NAMES[lane]!;
      offered.push({ labels: { lane: laneName }, read: sum(ADM_OFFERED_F64 + lane) });
      admitted.push({ labels: { lane: laneName }, read: sum(ADM_ADMITTED_F64 + lane) });
      for (let r = 0; r < SHED_REASON_COUNT; r++) {
        shed.push({ labels: { lane: laneName, reason: SHED_REASON_NAMES[r]! }, read: sum(ADM_SHED_F64 + lane * SHED_REASON_COUNT + r) });
      }
    }
    this.addSharedCounter(MetricNames.PINGS_OFFERED, 'Pings offered to admission, by lane.', ['lane'], offered);
    this.addSharedCounter(MetricNames.PINGS_ADMITTED, 'Pings admitted into a telemetry ring, by lane.', ['lane'], admitted);
    this.addSharedCounter(MetricNames.PINGS_SHED, 'Pings shed at admission, by lane and reason.', ['lane', 'reason'], shed);
  }
}
