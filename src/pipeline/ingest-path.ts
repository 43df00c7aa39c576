/**
 * The ingest thread's path over one set of shared regions (ingest thread, and benchmarks that run it on their own
 * thread): the rings, the shard scheduler, per-ring admission, the device registry, the lane predicates, the
 * admission sink and the edge that decodes frames into it.
 */
import type { Piscina } from 'piscina';
import { DeviceState } from '../fences/device-state.js';
import { FenceStore } from '../fences/store.js';
import { LaneAdmission } from '../ingest/admission.js';
import { DeviceRegistry } from '../ingest/device-registry.js';
import { RejectLog } from '../ingest/reject-log.js';
import { nowNs } from '../shm/clock.js';
import { ADM_BLOCK_F64, RingKind, telemetryRingIndex } from '../shm/layout.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { SpscRing } from '../shm/ring.js';
import type { ContainmentTask } from './containment-task.js';
import type { IngestThreadData } from './ingest-thread.js';
import { AdmissionRoom, AdmissionSink, PipelineEdge, StorePredicates } from './ingest-wiring.js';
import type { PipelineMemory } from './memory.js';
import { ShardScheduler, type WatchdogSettings } from './shard-scheduler.js';
import { LOOKUP_ONLY_STORE } from './store-views.js';

/** The ingest path over one set of shared regions: rings, scheduler, admission, registry, predicates, sink, edge. */
export interface IngestPath {
  scheduler: ShardScheduler;
  admissions: LaneAdmission[];
  predicates: StorePredicates;
  sink: AdmissionSink;
  edge: PipelineEdge;
  room: AdmissionRoom;
  registry: DeviceRegistry;
  state: DeviceState;
}

/** Wires the ingest path over `m` (the router's regions, or scratch ones for the warm-up). */
export function buildIngestPath(
  m: PipelineMemory,
  d: IngestThreadData,
  pool: Piscina<ContainmentTask, number>,
  log: { error: (line: string) => void; warn: (line: string) => void },
  watched: boolean,
): IngestPath {
  const stats = new Float64Array(m.stats);
  const state = DeviceState.open(m.deviceState);
  const allRings = m.telemetryRings.map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  // The scratch path of the warm-up runs no task, so it needs no watchdog.
  const watchdog: WatchdogSettings | null = watched
    ? {
        cells: new Int32Array(m.watchdog),
        stallMs: d.containmentStallMs,
        triggerRings: m.triggerRings.slice(0, m.shards).map((b) => SpscRing.wrap(b, RingKind.TRIGGER)),
      }
    : null;
  const scheduler = new ShardScheduler(
    pool,
    allRings,
    m.shards,
    { batchSize: d.batchSize, batchBudgetUs: d.batchBudgetUs },
    d.poolSize,
    stats,
    d.fences,
    log.error,
    watchdog,
  );
  // This thread (ingest thread 0) produces into the first ring of each shard, and admits with their counter blocks.
  const rings = scheduler.rings;
  const admissionCounters = new Float64Array(m.admissionCounters);
  const t0 = nowNs();
  const admissions = rings.map(
    (ring, s) =>
      new LaneAdmission(ring, admissionCounters, telemetryRingIndex(0, s, m.shards) * ADM_BLOCK_F64, d.admission, t0),
  );
  const registry = new DeviceRegistry(m.idTable, m.shards);
  const predicates = new StorePredicates(
    FenceStore.open(d.fences, LOOKUP_ONLY_STORE),
    state,
    d.complianceMarginM,
    rings,
    registry.shardOfSlot,
  );
  const rejectLog = new RejectLog({
    intervalMs: d.ingest.rejectLogIntervalMs,
    nowMs: () => Date.now(),
    write: log.warn,
  });
  const sink = new AdmissionSink(admissions, scheduler, predicates);
  const edge = new PipelineEdge(
    {
      maxFrameBytes: d.ingest.maxFrameBytes,
      readChunkBytes: d.ingest.readChunkBytes,
      sharedStructures: d.ingest.sharedStructures,
      stationarySpeedMps: d.ingest.stationarySpeedMps,
      stationaryRadiusM: d.ingest.stationaryRadiusM,
    },
    { pipeline: PipelineRegion.wrap(m.pipeline), registry, predicates, sink, log: rejectLog },
  );
  const room = new AdmissionRoom(admissions);
  edge.attach(scheduler, sink, room);
  return { scheduler, admissions, predicates, sink, edge, room, registry, state };
}
