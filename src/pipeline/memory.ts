/**
 * Every shared region of one router, allocated once on the main thread and handed to each thread (structured-clone
 * safe: SharedArrayBuffers and numbers). Each thread wraps what it uses (allocation separate from wrapping).
 */
import type { RouterOptions } from '../config/options.js';
import { metricsCells } from '../dispatch/dispatcher.js';
import { allocateDeviceState, type DeviceStateDescriptor } from '../fences/device-state.js';
import { allocateDeviceIdTable } from '../ingest/device-registry.js';
import { allocatePipelineRegion } from '../shm/pipeline-region.js';
import {
  CNT_BLOCK_F64,
  ICTL_REGION_I32,
  INP_CONN_STRIDE_F64,
  INP_RING_SLOTS,
  INP_STRIDE_BYTES,
  LEASE_GATE_F64,
  MAX_INGEST_THREADS,
  PST_REGION_F64,
  RingKind,
  sourcePartitionRegionF64,
  TMARK_NONE,
  TMARK_STRIDE_I32,
  TRIGGER_STRIDE_BYTES,
  preImageRegionBytes,
  watchdogRegionBytes,
  WDG_HELD_RING_I32,
  WDG_PRE_SLOT_I32,
  WDG_STRIDE_I32,
} from '../shm/layout.js';
import { allocateThreadRuntimeRegion } from './thread-runtime.js';
import {
  allocateAdmissionCounters,
  allocateCounterRegion,
  allocateRingRegion,
  allocateTelemetryRing,
} from '../shm/regions.js';

/** Slots of the control trigger ring (the main thread's: EXIT triggers written by a fence reload). */
const CONTROL_TRIGGER_RING_SLOTS = 4096;

/** The shared regions of a router. */
export interface PipelineMemory {
  /** Telemetry shards. */
  readonly shards: number;
  /** Pipeline region: control cells and ingest counters (PipelineRegion). */
  readonly pipeline: SharedArrayBuffer;
  /** Pipeline stats region (PST_* cells): batching counters, reload counters, held-time histogram. */
  readonly stats: SharedArrayBuffer;
  /** Shared device id table. */
  readonly idTable: SharedArrayBuffer;
  /** Ingest threads (producers of telemetry rings). */
  readonly ingestThreads: number;
  /**
   * Telemetry rings (ingest thread -> containment pool): one per (ingest thread, shard), `ingestThreads * shards` in
   * all, in the order of `telemetryRingIndex` (the ring of index r serves shard `r % shards`).
   */
  readonly telemetryRings: readonly SharedArrayBuffer[];
  /**
   * COMPLIANCE rings (ingest thread -> the COMPLIANCE group's containment task): one per ingest thread when the
   * COMPLIANCE path is on (`complianceWorker`, with one ingest thread), else none. A task names ingest thread k's as
   * `complianceRingIndex(k, ...)`.
   */
  readonly complianceRings: readonly SharedArrayBuffer[];
  /** Per device slot: where its newest trigger was written (TMARK_* cells; see the TRIGGER MARKS region). */
  readonly triggerMarks: SharedArrayBuffer;
  /**
   * Trigger rings: one per shard (containment pool -> dispatcher), then the control ring at index `shards` (main
   * thread -> dispatcher, for reload EXITs), then, with the COMPLIANCE path on, the COMPLIANCE group's ring at
   * `complianceTriggerRingIndex(shards)`.
   */
  readonly triggerRings: readonly SharedArrayBuffer[];
  /**
   * Per ingest thread k >= 1 (index k - 1): the ring ingest thread 0 forwards the bytes of k's connections through
   * (INP_* records), and the pipeline region k counts its ingest counters in (ingest thread 0 adds them up).
   */
  readonly inputRings: readonly SharedArrayBuffer[];
  readonly ingestCounters: readonly SharedArrayBuffer[];
  /** Per ingest thread k >= 1 (index k - 1): the INP_CONN_* cells of the connections forwarded to it. */
  readonly inputConnections: readonly SharedArrayBuffer[];
  /** Ingest control cells (ICTL_*): the doorbell of ingest thread 0. */
  readonly ingestControl: SharedArrayBuffer;
  /** Admission counter blocks (ADM_*), one per telemetry ring (same order), then one per COMPLIANCE ring. */
  readonly admissionCounters: SharedArrayBuffer;
  /**
   * Containment counter blocks (CNT_*): one per shard, the control block at index `shards` (reloads), then the
   * COMPLIANCE group's (`complianceCounterBlock`).
   */
  readonly containmentCounters: SharedArrayBuffer;
  /** Per-device containment state. */
  readonly deviceState: DeviceStateDescriptor;
  /** Dispatcher metric cells (DS_* blocks, then the DISP_* block). */
  readonly dispatchMetrics: SharedArrayBuffer;
  /**
   * Containment watchdog cells (WDG_*, one block per shard, then the COMPLIANCE group's): task heartbeats, held
   * batches, stalled flags.
   */
  readonly watchdog: SharedArrayBuffer;
  /**
   * Device pre-images (the PRE-IMAGE region, one block per watchdog block): a device's state before the record a
   * containment task is in, put back if the task fails inside it (src/pipeline/held-batch.ts).
   */
  readonly preImages: SharedArrayBuffer;
  /** Per-thread runtime reports (RT_*, thread-runtime.ts). */
  readonly threadRuntime: SharedArrayBuffer;
  /** Per-partition cells of a partitioned source (SRC_*, one block per partition; one unused block without one). */
  readonly sourcePartitions: SharedArrayBuffer;
  /** Partitions of the partitioned source (0: none). */
  readonly sourcePartitionCount: number;
  /** The lease gate (LEASE_GATE_F64 cells; stays 0, open, unless the partitions are leased). */
  readonly leaseGate: SharedArrayBuffer;
}

/** What to allocate. */
export interface PipelineMemorySpec {
  /** Telemetry shards. */
  shards: number;
  /** Ingest threads, each the producer of one telemetry ring per shard (default 1). */
  ingestThreads?: number;
  /** TCP connections the listener allows at once (sizes the forwarded connections' cells; default 1024). */
  maxConnections?: number;
  /** Slots per telemetry ring (and per shard trigger ring). */
  ringCapacitySlots: number;
  /** Admission's reserved COMPLIANCE fraction (sets each telemetry ring's reserved slice). */
  reservedFraction: number;
  /** Device slots. */
  maxDevices: number;
  /** UTF-8 bytes per device id. */
  idBytesPerSlot: number;
  /** Fence entries per device. */
  maxFencesPerDevice: number;
  /** Fence entries provisioned per device on average (inline plus pool share; default 32). */
  fenceEntriesPerDevice?: number;
  /** Downstreams of the dispatcher. */
  downstreams: number;
  /** Containment pool workers (sizes the thread runtime region; default 1). */
  poolSize?: number;
  /** A COMPLIANCE ring and a containment worker for it, with one ingest thread (default false; compliance-path.ts). */
  complianceWorker?: boolean;
  /** Partitions of the partitioned telemetry source (default 0: none). */
  sourcePartitionCount?: number;
  /** The lease gate of a router whose partitions are leased (default: a gate of its own, always open). */
  leaseGate?: SharedArrayBuffer;
}

/** What a router with options `o` allocates (a lease gate aside: its own, always open). */
export function pipelineMemorySpecOf(o: RouterOptions): PipelineMemorySpec {
  return {
    shards: o.shards,
    ingestThreads: o.ingestThreads,
    maxConnections: o.ingest.maxConnections,
    ringCapacitySlots: o.ringCapacitySlots,
    reservedFraction: o.admission.reservedFraction,
    maxDevices: o.maxDevices,
    idBytesPerSlot: o.idBytesPerSlot,
    maxFencesPerDevice: o.maxFencesPerDevice,
    fenceEntriesPerDevice: o.fenceEntriesPerDevice,
    downstreams: o.downstreams.length,
    poolSize: o.poolSize,
    complianceWorker: o.complianceWorker,
    sourcePartitionCount: o.jetstreamSource?.partitionCount ?? 0,
  };
}

/** Allocates every region of a router (main thread). */
export function allocatePipelineMemory(spec: PipelineMemorySpec): PipelineMemory {
  const ingestThreads = spec.ingestThreads ?? 1;
  if (!Number.isInteger(ingestThreads) || ingestThreads < 1 || ingestThreads > MAX_INGEST_THREADS) {
    throw new RangeError(
      `ingestThreads must be an integer in [1, ${MAX_INGEST_THREADS}], got ${String(ingestThreads)}`,
    );
  }
  const telemetryRings: SharedArrayBuffer[] = [];
  const triggerRings: SharedArrayBuffer[] = [];
  for (let r = 0; r < ingestThreads * spec.shards; r++) {
    telemetryRings.push(allocateTelemetryRing(spec.ringCapacitySlots, spec.reservedFraction));
  }
  const inputRings: SharedArrayBuffer[] = [];
  const ingestCounters: SharedArrayBuffer[] = [];
  const inputConnections: SharedArrayBuffer[] = [];
  for (let k = 1; k < ingestThreads; k++) {
    inputConnections.push(new SharedArrayBuffer((spec.maxConnections ?? 1024) * INP_CONN_STRIDE_F64 * 8));
    inputRings.push(
      allocateRingRegion({ capacitySlots: INP_RING_SLOTS, strideBytes: INP_STRIDE_BYTES, kind: RingKind.INPUT }),
    );
    ingestCounters.push(allocatePipelineRegion(spec.shards));
  }
  for (let s = 0; s < spec.shards; s++) {
    triggerRings.push(
      allocateRingRegion({
        capacitySlots: spec.ringCapacitySlots,
        strideBytes: TRIGGER_STRIDE_BYTES,
        kind: RingKind.TRIGGER,
      }),
    );
  }
  triggerRings.push(
    allocateRingRegion({
      capacitySlots: CONTROL_TRIGGER_RING_SLOTS,
      strideBytes: TRIGGER_STRIDE_BYTES,
      kind: RingKind.TRIGGER,
    }),
  );
  const complianceRings: SharedArrayBuffer[] = [];
  // One ingest thread only: a device's path is that thread's to choose (with several, its pings may reach two).
  if (spec.complianceWorker === true && ingestThreads === 1) {
    for (let k = 0; k < ingestThreads; k++) {
      complianceRings.push(allocateTelemetryRing(spec.ringCapacitySlots, spec.reservedFraction));
    }
    triggerRings.push(
      allocateRingRegion({
        capacitySlots: spec.ringCapacitySlots,
        strideBytes: TRIGGER_STRIDE_BYTES,
        kind: RingKind.TRIGGER,
      }),
    );
  }
  const triggerMarks = new SharedArrayBuffer(spec.maxDevices * TMARK_STRIDE_I32 * 4);
  new Int32Array(triggerMarks).fill(TMARK_NONE);
  const extraWorkers = complianceRings.length > 0 ? 1 : 0;
  return {
    shards: spec.shards,
    ingestThreads,
    inputRings,
    ingestCounters,
    inputConnections,
    ingestControl: new SharedArrayBuffer(ICTL_REGION_I32 * 4),
    pipeline: allocatePipelineRegion(spec.shards),
    stats: allocateCounterRegion(1, PST_REGION_F64),
    idTable: allocateDeviceIdTable(spec.maxDevices, spec.idBytesPerSlot, Math.max(1, spec.sourcePartitionCount ?? 0)),
    telemetryRings,
    complianceRings,
    triggerMarks,
    triggerRings,
    admissionCounters: allocateAdmissionCounters(ingestThreads * spec.shards + complianceRings.length),
    containmentCounters: allocateCounterRegion(spec.shards + 2, CNT_BLOCK_F64),
    deviceState: allocateDeviceState(spec.maxDevices, spec.maxFencesPerDevice, {
      entriesPerDevice: spec.fenceEntriesPerDevice ?? 32,
    }),
    dispatchMetrics: allocateCounterRegion(1, Math.max(1, metricsCells(Math.max(1, spec.downstreams)))),
    watchdog: allocateWatchdogRegion(spec.shards + 1),
    preImages: new SharedArrayBuffer(preImageRegionBytes(spec.shards + 1, spec.maxFencesPerDevice)),
    threadRuntime: allocateThreadRuntimeRegion((spec.poolSize ?? 1) + extraWorkers, ingestThreads),
    sourcePartitions: new SharedArrayBuffer(sourcePartitionRegionF64(spec.sourcePartitionCount ?? 0) * 8),
    sourcePartitionCount: spec.sourcePartitionCount ?? 0,
    leaseGate: spec.leaseGate ?? new SharedArrayBuffer(LEASE_GATE_F64 * 8),
  };
}

/** Allocates a containment watchdog region of `blocks` blocks: no batch held in any. */
function allocateWatchdogRegion(blocks: number): SharedArrayBuffer {
  const sab = new SharedArrayBuffer(watchdogRegionBytes(blocks));
  const cells = new Int32Array(sab);
  for (let b = 0; b < blocks; b++) {
    cells[b * WDG_STRIDE_I32 + WDG_HELD_RING_I32] = -1;
    cells[b * WDG_STRIDE_I32 + WDG_PRE_SLOT_I32] = -1;
  }
  return sab;
}
