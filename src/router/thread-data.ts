/**
 * What each pipeline thread is started with, taken from the resolved options: the slice of them a thread needs, in
 * the shape its workerData declares (structured-clone safe).
 */
import { threadOptions, type RouterOptions } from '../config/options.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { IngestThreadData } from '../pipeline/ingest-thread.js';
import type { PipelineMemory } from '../pipeline/memory.js';

/** The ingest thread's workerData: its options, the shared memory and the first fence generation. */
export function ingestThreadData(o: RouterOptions, m: PipelineMemory, fences: FenceStoreDescriptor): IngestThreadData {
  return {
    ...threadOptions(o, 'ingest'),
    memory: m,
    fences,
    stdinForwarded: o.inputs.includes('-'),
    startedAtEpochMs: Date.now(),
  };
}
