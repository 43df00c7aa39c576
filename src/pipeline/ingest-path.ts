/**
 * The ingest thread's path over one set of shared regions (ingest thread, and benchmarks that run it on their own
 * thread): the rings, the shard scheduler, per-ring admission, the device registry, the lane predicates, the
 * admission sink and the edge that decodes frames into it.
 */
import type { Piscina } from 'piscina';
import { DeviceState } from '../fences/device-state.js';
import { FenceStore } from '../fences/store.js';
import { LaneAdmission, type AdmissionOptions } from '../ingest/admission.js';
import { DeviceRegistry } from '../ingest/device-registry.js';
import { RejectLog } from '../ingest/reject-log.js';
import { nowNs } from '../shm/clock.js';
import {
  ADM_BLOCK_F64,
  complianceRingIndex,
  complianceTriggerRingIndex,
  DEVID_HEADER_BYTES,
  DEVID_TICK_I32,
  ICTL_BUSY_SINCE_TICK_I32,
  ICTL_DOORBELL_I32,
  RingKind,
  telemetryRingIndex,
} from '../shm/layout.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { SpscRing } from '../shm/ring.js';
import type { ContainmentTask } from './containment-task.js';
import type { IngestThreadData } from './ingest-thread.js';
import { slotReusePort } from './device-expiry.js';
import { AdmissionRoom, AdmissionSink, PipelineEdge, StorePredicates, type RingPublisher } from './ingest-wiring.js';
import type { PipelineMemory } from './memory.js';
import { HeldBatches } from './held-batch.js';
import { ShardScheduler, type WatchdogSettings } from './shard-scheduler.js';
import { CompliancePaths } from './compliance-path.js';
import { LOOKUP_ONLY_STORE } from './store-views.js';

/** The ingest path over one set of shared regions: rings, scheduler, admission, registry, predicates, sink, edge. */
export interface IngestPath {
  scheduler: ShardScheduler;
  admissions: LaneAdmission[];
  /** The COMPLIANCE ring's admission and the devices' paths, or null (the COMPLIANCE path off). */
  complianceAdmission: LaneAdmission | null;
  paths: CompliancePaths | null;
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
  const allRings = m.telemetryRings.map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  // The scratch path of the warm-up runs no task, so it needs no watchdog.
  const watchdog: WatchdogSettings | null = watched
    ? {
        cells: new Int32Array(m.watchdog),
        stallMs: d.containmentStallMs,
        triggerRings: m.triggerRings.slice(0, m.shards).map((b) => SpscRing.wrap(b, RingKind.TRIGGER)),
        complianceTriggerRing:
          m.complianceRings.length > 0
            ? SpscRing.wrap(m.triggerRings[complianceTriggerRingIndex(m.shards)]!, RingKind.TRIGGER)
            : null,
        heldBatches: new HeldBatches(
          new Int32Array(m.watchdog),
          m.preImages,
          m.deviceState,
          m.triggerRings,
          m.triggerMarks,
          m.idTable,
        ),
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
    m.complianceRings.map((b) => SpscRing.wrap(b, RingKind.TELEMETRY)),
  );
  return { scheduler, ...buildEdgePart(m, d, 0, scheduler.rings, scheduler, log) };
}

/**
 * The admission options of each of `threads` ingest threads: the IDLE lane's token bucket (burst and rate) split
 * evenly, so that the configured rate and burst hold over all of them together; every ring keeps its own reserved
 * slice and watermark.
 */
export function admissionOptionsPerThread(options: AdmissionOptions, threads: number): AdmissionOptions {
  if (threads === 1) return options;
  return {
    ...options,
    idleBucketCapacity: Math.max(1, options.idleBucketCapacity / threads),
    idleBucketRatePerSec: options.idleBucketRatePerSec / threads,
  };
}

/** What every ingest thread builds over its own rings: admission, registry, predicates, sink, edge and room. */
type EdgePart = Omit<IngestPath, 'scheduler'>;

/**
 * The path of ingest thread `producer` up to its telemetry rings (`rings`: its ring of each shard), publishing
 * through `publisher`. Each thread admits into its own rings with their counter blocks, and registers devices in the
 * shared id table as member `producer` of `m.ingestThreads`; the IDLE lane's token bucket is split evenly between
 * the threads, so the configured rate holds in total.
 */
function buildEdgePart(
  m: PipelineMemory,
  d: IngestThreadData,
  producer: number,
  rings: readonly SpscRing[],
  publisher: RingPublisher,
  log: { error: (line: string) => void; warn: (line: string) => void },
): EdgePart {
  const state = DeviceState.open(m.deviceState);
  const threads = m.ingestThreads;
  const admissionOptions = admissionOptionsPerThread(d.admission, threads);
  const admissionCounters = new Float64Array(m.admissionCounters);
  const t0 = nowNs();
  const admissions = rings.map(
    (ring, s) =>
      new LaneAdmission(
        ring,
        admissionCounters,
        telemetryRingIndex(producer, s, m.shards) * ADM_BLOCK_F64,
        admissionOptions,
        t0,
      ),
  );
  const registry = new DeviceRegistry(m.idTable, m.shards, producer, threads);
  // The COMPLIANCE path: a ring of this thread's, with an admission of its own (counter block after the shard rings').
  const ownRing = producer < m.complianceRings.length ? m.complianceRings[producer]! : null;
  const complianceRing = ownRing === null ? null : SpscRing.wrap(ownRing, RingKind.TELEMETRY);
  const complianceAdmission =
    complianceRing === null
      ? null
      : new LaneAdmission(
          complianceRing,
          admissionCounters,
          complianceRingIndex(producer, m.shards, threads) * ADM_BLOCK_F64,
          admissionOptions,
          t0,
        );
  const paths =
    complianceRing === null
      ? null
      : new CompliancePaths(
          complianceRing,
          rings,
          registry.shardOfSlot,
          m.triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER)),
          m.triggerMarks,
        );
  const predicates = new StorePredicates(
    FenceStore.open(d.fences, LOOKUP_ONLY_STORE),
    state,
    d.complianceMarginM,
    rings,
    registry.shardOfSlot,
    complianceRing,
  );
  const rejectLog = new RejectLog({
    intervalMs: d.ingest.rejectLogIntervalMs,
    nowMs: () => Date.now(),
    write: log.warn,
  });
  const sink = new AdmissionSink(admissions, publisher, predicates, paths, complianceAdmission);
  // Ingest thread 0 counts in the router's pipeline region; another thread in its own (thread 0 adds it up).
  const counters = producer === 0 ? m.pipeline : m.ingestCounters[producer - 1]!;
  const edge = new PipelineEdge(
    {
      maxFrameBytes: d.ingest.maxFrameBytes,
      readChunkBytes: d.ingest.readChunkBytes,
      sharedStructures: d.ingest.sharedStructures,
      stationarySpeedMps: d.ingest.stationarySpeedMps,
      stationaryRadiusM: d.ingest.stationaryRadiusM,
    },
    { pipeline: PipelineRegion.wrap(counters), registry, predicates, sink, log: rejectLog },
  );
  const room = new AdmissionRoom(complianceAdmission === null ? admissions : [...admissions, complianceAdmission]);
  edge.attach(publisher, sink, room);
  return { admissions, complianceAdmission, paths, predicates, sink, edge, room, registry, state };
}

/** Records claimed in one shard after which an ingest thread other than 0 publishes them (as the scheduler does). */
const PEER_PUBLISH_EVERY_RECORDS = 256;

/**
 * The publisher of an ingest thread other than 0: publishes its rings at the end of every read chunk (and every
 * PEER_PUBLISH_EVERY_RECORDS records within one), then rings ingest thread 0's doorbell, which submits a containment
 * task for every shard group that is idle and has records.
 */
class PeerPublisher implements RingPublisher {
  private readonly rings: readonly SpscRing[];
  /** The ingest control region: the doorbell and this thread's busy tick (ICTL_BUSY_SINCE_TICK_I32). */
  private readonly control: Int32Array;
  private readonly busyCell: number;
  /** The device id table's header (its DEVID_TICK_I32). */
  private readonly idHeader: Int32Array;
  private readonly dirty: Uint8Array;
  private readonly dirtyList: Int32Array;
  private dirtyCount = 0;
  private claimedSinceFlush = 0;

  /**
   * `rings`: this thread's ring of each shard; `ingestControl`: memory.ingestControl; `idTable`: memory.idTable;
   * `producer`: this ingest thread (>= 1).
   */
  constructor(
    rings: readonly SpscRing[],
    ingestControl: SharedArrayBuffer,
    idTable: SharedArrayBuffer,
    producer: number,
  ) {
    this.rings = rings;
    this.control = new Int32Array(ingestControl);
    this.busyCell = ICTL_BUSY_SINCE_TICK_I32 + producer - 1;
    this.idHeader = new Int32Array(idTable, 0, DEVID_HEADER_BYTES / 4);
    this.dirty = new Uint8Array(rings.length);
    this.dirtyList = new Int32Array(rings.length);
  }

  begin(): void {
    this.holdSince();
  }

  noteClaimed(shard: number): void {
    if (this.dirty[shard] === 0) {
      this.dirty[shard] = 1;
      this.dirtyList[this.dirtyCount++] = shard;
    }
    if (++this.claimedSinceFlush >= PEER_PUBLISH_EVERY_RECORDS) {
      this.publish();
      // Still inside the chunk: what it confirms from now on is held since now.
      this.holdSince();
    }
  }

  flush(): void {
    this.publish();
    Atomics.store(this.control, this.busyCell, 0);
  }

  noteComplianceClaimed(ring: SpscRing): void {
    ring.publish();
    Atomics.add(this.control, ICTL_DOORBELL_I32, 1);
    Atomics.notify(this.control, ICTL_DOORBELL_I32);
  }

  /** Notes that the pings confirmed from now on are held since the sweep's current tick. */
  private holdSince(): void {
    Atomics.store(this.control, this.busyCell, Atomics.load(this.idHeader, DEVID_TICK_I32) || 1);
  }

  private publish(): void {
    this.claimedSinceFlush = 0;
    const n = this.dirtyCount;
    if (n === 0) return;
    for (let k = 0; k < n; k++) {
      const shard = this.dirtyList[k]!;
      this.dirty[shard] = 0;
      this.rings[shard]!.publish();
    }
    this.dirtyCount = 0;
    Atomics.add(this.control, ICTL_DOORBELL_I32, 1);
    Atomics.notify(this.control, ICTL_DOORBELL_I32);
  }
}

/** The path of ingest thread `producer` (>= 1): its rings, its publisher, and the edge part. */
export function buildPeerPath(
  m: PipelineMemory,
  d: IngestThreadData,
  producer: number,
  log: { error: (line: string) => void; warn: (line: string) => void },
): EdgePart & { publisher: RingPublisher; rings: SpscRing[] } {
  const rings: SpscRing[] = [];
  for (let s = 0; s < m.shards; s++) {
    rings.push(SpscRing.wrap(m.telemetryRings[telemetryRingIndex(producer, s, m.shards)]!, RingKind.TELEMETRY));
  }
  const publisher = new PeerPublisher(rings, m.ingestControl, m.idTable, producer);
  const part = buildEdgePart(m, d, producer, rings, publisher, log);
  part.registry.setReusePort(slotReusePort(part.state, part.predicates));
  return { ...part, publisher, rings };
}
