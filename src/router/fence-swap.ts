/**
 * The reload protocol (main thread), once the next fence generation is built (a FenceValidationError before this
 * point leaves the old one serving):
 *
 * give it to the dispatcher (it names triggers of every generation still in flight); pause the pool (batches in
 * flight finish on the generation they started with); wait until the dispatcher has read every shard's trigger ring
 * (so a reload EXIT never overtakes the ENTER it closes); carry the device state over by fence id, writing EXITs for
 * removed fences into the control trigger ring; wait until the dispatcher has read those too; publish the generation
 * and resume the pool, on the new generation, or on the old one when a step failed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { reloadDeviceState } from '../fences/reload.js';
import type { DeviceState } from '../fences/device-state.js';
import type { FenceStore } from '../fences/store.js';
import type { PipelineRegion } from '../shm/pipeline-region.js';
import type { DispatcherRequest, IngestRequest } from '../pipeline/messages.js';
import type { ThreadHandle } from '../pipeline/threads.js';
import { nowNs } from '../shm/clock.js';
import type { SpscRing } from '../shm/ring.js';

/** What a swap works on. */
export interface SwapParts {
  /** The dispatcher thread. */
  dispatcher: ThreadHandle;
  /** The ingest thread (it owns the containment pool). */
  ingest: ThreadHandle;
  /** Containment's trigger rings (pool -> dispatcher): the shards', and the COMPLIANCE group's. */
  shardTriggerRings: readonly SpscRing[];
  /** The control trigger ring (this thread -> dispatcher): the reload's EXITs. */
  controlRing: SpscRing;
  /** Per-device containment state. */
  state: DeviceState;
  /** The pipeline region (doorbell, fence generation). */
  pipeline: PipelineRegion;
  /** Containment counter cells. */
  containment: Float64Array;
  /** Start of the reload's block among them. */
  controlCounterBase: number;
}

/**
 * Swaps `next` in for `current` (see the module comment); resolves with the number of EXITs written for removed
 * fences. `oldToNew` maps current's fence indices to next's when the caller knows it (a live edit).
 */
export async function swapFenceGeneration(
  p: SwapParts,
  current: FenceStore,
  next: FenceStore,
  oldToNew?: Int32Array,
): Promise<number> {
  await p.dispatcher.requests.request<Extract<DispatcherRequest, { type: 'fences' }>>({
    type: 'fences',
    fences: next.descriptor,
  });
  await p.ingest.requests.request<Extract<IngestRequest, { type: 'pause' }>>({ type: 'pause' });
  let resumeWith = current;
  let exits: number;
  try {
    // Every trigger of the old generation already produced is read before the reload's EXITs are written.
    while (p.shardTriggerRings.some((r) => r.available() > 0)) await sleep(1);
    exits = reloadDeviceState(p.state, current, next, p.controlRing, p.containment, p.controlCounterBase, {
      reloadTimeNs: nowNs(),
      ...(oldToNew === undefined ? {} : { oldToNew }),
    });
    if (exits > 0) p.pipeline.ringDispatcher();
    // The EXITs are read before any trigger of the new generation can be produced.
    while (p.controlRing.available() > 0) await sleep(1);
    p.pipeline.setFenceGeneration(next.generation);
    resumeWith = next;
  } finally {
    await p.ingest.requests.request<Extract<IngestRequest, { type: 'resume' }>>({
      type: 'resume',
      fences: resumeWith.descriptor,
    });
  }
  return exits;
}
