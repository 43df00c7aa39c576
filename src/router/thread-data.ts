/**
 * What each pipeline thread is started with, taken from the resolved options: the slice of them a thread needs, in
 * the shape its workerData declares (structured-clone safe).
 */
import type { RouterOptions } from '../config/options.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { IngestThreadData } from '../pipeline/ingest-thread.js';
import type { PipelineMemory } from '../pipeline/memory.js';

/** The ingest thread's workerData: its options, the shared memory and the first fence generation. */
export function ingestThreadData(o: RouterOptions, m: PipelineMemory, fences: FenceStoreDescriptor): IngestThreadData {
  return {
    memory: m,
    fences: fences,
    listenHost: o.listenHost,
    listenPort: o.listenPort,
    ingest: {
      ...o.ingest,
      flood: {
        maxPingsPerSecPerConnection: o.ingest.maxPingsPerSecPerConnection,
        maxNewDevicesPerSecPerConnection: o.ingest.maxNewDevicesPerSecPerConnection,
        maxPingsPerSecPerAddress: o.ingest.maxPingsPerSecPerAddress,
        maxNewDevicesPerSecPerAddress: o.ingest.maxNewDevicesPerSecPerAddress,
      },
    },
    admission: {
      reservedFraction: o.admission.reservedFraction,
      watermarkFraction: o.admission.watermarkFraction,
      idleBucketCapacity: o.admission.idleBucketCapacity,
      idleBucketRatePerSecond: o.admission.idleBucketRatePerSec,
      queueDelayTargetMs: o.admission.queueDelayTargetMs,
      queueDelayIntervalMs: o.admission.queueDelayIntervalMs,
    },
    complianceMarginM: o.complianceMarginM,
    batchSize: o.batchSize,
    poolSize: o.poolSize,
    containmentStallMs: o.containmentStallMs,
    deviceIdleTimeoutMs: o.deviceIdleTimeoutMs,
    exitOnExpiry: o.deviceExpiry === 'exit',
    cross: {
      maxSpeedMps: o.crossMaxSpeedMps,
      maxGapMs: o.crossMaxGapMs,
      maxPerDevicePerSec: o.crossMaxPerDevicePerSec,
    },
    inputFiles: o.inputs.filter((p) => p !== '-'),
    stdinForwarded: o.inputs.includes('-'),
  };
}
