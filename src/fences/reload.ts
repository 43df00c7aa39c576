/**
 * Carrying device state across a fence store generation swap.
 *
 * Reload protocol (the pipeline's part): build the new generation on the main thread (`parseFences` +
 * `buildFenceStore`; a FenceValidationError leaves the old store serving), wait until no batch touching the slots is
 * in flight (batches finish on the generation they started with), call `reloadDeviceState` for those slots, then
 * hand the new descriptor to the workers (`engine.useStore`). Keep the old generation open until the EXIT triggers
 * written here are dispatched: they name the OLD generation and fence index.
 *
 * Per device: entries whose fence id exists in the new store are remapped to its new index, keeping their state
 * (INSIDE, DWELL_FIRED, pending times); an INSIDE entry whose fence was removed gets an EXIT (at the device's last
 * position and event time, insideMs up to that time, lane COMPLIANCE for a compliance fence, TRANSITION otherwise) and
 * is dropped; a PENDING_ENTER entry of a removed fence is dropped silently (no ENTER was sent). A fence whose geometry
 * changed keeps its state; the device's next ping decides against the new geometry. A fence whose tags changed ends
 * its stays as a removed one does (an EXIT under the old generation, so a downstream subscribed by the old tags sees
 * the stay it got the ENTER of end), and the entry stays as a PENDING_ENTER from the device's last event time: its
 * next ping inside begins a stay under the new tags (ENTER), one outside drops it with no trigger (see
 * retaggedFences).
 *
 * Allocates one Int32Array (old index -> new index) per call, and a Uint8Array when tags changed; not a hot path.
 */
import {
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  ENTRY_FENCE_I32,
  ENTRY_PENDING_MS_F64,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  FENCE_FLAG_COMPLIANCE,
  FENCE_FLAGS_I32,
  FENCE_STRIDE_I32,
  Lane,
  TriggerType,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import { DeviceState, publishComplianceCount } from './device-state.js';
import type { FenceStore } from './store.js';
import {
  REC_ADMIT_TIME_NS,
  REC_CELLS,
  REC_EVENT_TIME_MS,
  REC_INSIDE_MS,
  REC_LAT,
  REC_LON,
  REC_SEQ,
  writeTrigger,
} from './trigger-writer.js';

/** Options of reloadDeviceState. */
export interface ReloadOptions {
  /** First device slot to carry over (default 0). */
  fromSlot?: number;
  /** One past the last slot (default state.maxDevices). */
  toSlot?: number;
  /** Admission-time cell of the EXIT triggers written (the router's clock at reload, ns; default 0). */
  reloadTimeNs?: number;
  /**
   * Old fence index -> new index (-1: removed), when the caller knows it (a live edit); default: matched by id. A kept
   * fence whose tags changed ends its stays all the same (see the module comment).
   */
  oldToNew?: Int32Array;
}

/**
 * Carries the state of slots [fromSlot, toSlot) from `oldStore` to `newStore` by fence id, writing EXIT triggers
 * for fences removed (or retagged) while a device was inside (published before returning). Slots already on the new
 * generation are left alone; slots on neither are counted nowhere and left for the engine's mismatch check. Returns
 * the number of EXIT triggers written.
 */
export function reloadDeviceState(
  state: DeviceState,
  oldStore: FenceStore,
  newStore: FenceStore,
  triggers: SpscRing,
  counters: Float64Array,
  counterBaseF64: number,
  options: ReloadOptions = {},
): number {
  const fromSlot = options.fromSlot ?? 0;
  const toSlot = options.toSlot ?? state.maxDevices;
  const reloadTimeNs = options.reloadTimeNs ?? 0;
  if (!Number.isInteger(fromSlot) || fromSlot < 0 || fromSlot > state.maxDevices) {
    throw new RangeError(`options.fromSlot must be an integer in [0, ${state.maxDevices}], got ${String(fromSlot)}`);
  }
  if (!Number.isInteger(toSlot) || toSlot < fromSlot || toSlot > state.maxDevices) {
    throw new RangeError(`options.toSlot must be an integer in [fromSlot, ${state.maxDevices}], got ${String(toSlot)}`);
  }
  let oldToNew = options.oldToNew;
  if (oldToNew === undefined) {
    oldToNew = new Int32Array(oldStore.fenceCount);
    for (let f = 0; f < oldStore.fenceCount; f++) {
      oldToNew[f] = oldStore.isRemoved(f) ? -1 : newStore.indexOfId(oldStore.fenceId(f));
    }
  } else if (oldToNew.length !== oldStore.fenceCount) {
    throw new RangeError(`options.oldToNew must have ${oldStore.fenceCount} cells, got ${oldToNew.length}`);
  }
  const retagged = retaggedFences(oldStore, newStore, oldToNew);
  const oldGen = oldStore.generation;
  const newGen = newStore.generation;
  const rec = new Float64Array(REC_CELLS);
  let written = 0;
  for (let slot = fromSlot; slot < toSlot; slot++) {
    const di = slot * DEV_STRIDE_I32;
    const df = slot * DEV_STRIDE_F64;
    if (state.devI32[di + DEV_GENERATION_I32] !== oldGen) continue;
    let count = state.devI32[di + DEV_ENTRY_COUNT_I32]!;
    for (let e = 0; e < count;) {
      const ex = state.entryIndex(slot, e);
      const ei = ex * ENTRY_STRIDE_I32;
      const ef = ex * ENTRY_STRIDE_F64;
      const oldIndex = state.entryI32[ei + ENTRY_FENCE_I32]!;
      const newIndex = oldToNew[oldIndex]!;
      const endsStay = (state.entryI32[ei + ENTRY_STATE_I32]! & EntryState.INSIDE) !== 0;
      if (newIndex >= 0 && (retagged === null || retagged[oldIndex] === 0 || !endsStay)) {
        state.entryI32[ei + ENTRY_FENCE_I32] = newIndex;
        e++;
        continue;
      }
      if (endsStay) {
        const t = state.devF64[df + DEV_LAST_EVENT_MS_F64]!;
        const lane = oldStore.isCompliance(oldIndex) ? Lane.COMPLIANCE : Lane.TRANSITION;
        written++;
        rec[REC_LAT] = state.devF64[df + DEV_LAST_LAT_F64]!;
        rec[REC_LON] = state.devF64[df + DEV_LAST_LON_F64]!;
        rec[REC_EVENT_TIME_MS] = t;
        rec[REC_ADMIT_TIME_NS] = reloadTimeNs;
        rec[REC_SEQ] = ++state.devF64[df + DEV_TRIGGER_SEQ_F64]!;
        rec[REC_INSIDE_MS] = t - state.entryF64[ef + ENTRY_SINCE_MS_F64]!;
        writeTrigger(triggers, counters, counterBaseF64, TriggerType.EXIT, oldGen, slot, oldIndex, lane, rec);
      }
      if (newIndex >= 0) {
        // Retagged: a stay under the new tags may begin with the device's next ping (from its last event time).
        state.entryI32[ei + ENTRY_FENCE_I32] = newIndex;
        state.entryI32[ei + ENTRY_STATE_I32] = EntryState.PENDING_ENTER;
        state.entryF64[ef + ENTRY_SINCE_MS_F64] = state.devF64[df + DEV_LAST_EVENT_MS_F64]!;
        state.entryF64[ef + ENTRY_PENDING_MS_F64] = state.devF64[df + DEV_LAST_EVENT_MS_F64]!;
        e++;
        continue;
      }
      // Swap the last entry in and re-examine index e.
      count--;
      const lx = state.entryIndex(slot, count);
      const li = lx * ENTRY_STRIDE_I32;
      const lf = lx * ENTRY_STRIDE_F64;
      state.entryI32[ei + ENTRY_FENCE_I32] = state.entryI32[li + ENTRY_FENCE_I32]!;
      state.entryI32[ei + ENTRY_STATE_I32] = state.entryI32[li + ENTRY_STATE_I32]!;
      state.entryF64[ef + ENTRY_SINCE_MS_F64] = state.entryF64[lf + ENTRY_SINCE_MS_F64]!;
      state.entryF64[ef + ENTRY_PENDING_MS_F64] = state.entryF64[lf + ENTRY_PENDING_MS_F64]!;
    }
    state.devI32[di + DEV_ENTRY_COUNT_I32] = count;
    state.trimEntryCapacity(slot, count);
    state.devI32[di + DEV_GENERATION_I32] = newGen;
    publishComplianceCount(state, slot, newStore.fenceI32, FENCE_STRIDE_I32, FENCE_FLAGS_I32, FENCE_FLAG_COMPLIANCE);
  }
  triggers.publish();
  return written;
}

/**
 * Per old fence index, 1 where the fence is kept (`oldToNew` >= 0) with other tags, or null when none is. A downstream
 * subscribed by tag receives a fence's triggers by its tags of the time, so a stay begun under the old tags ends at
 * the swap and one under the new tags begins: otherwise a downstream subscribed to the old tags would never see the
 * stay end, and one subscribed to the new ones would see a DWELL or an EXIT with no ENTER.
 */
function retaggedFences(oldStore: FenceStore, newStore: FenceStore, oldToNew: Int32Array): Uint8Array | null {
  let out: Uint8Array | null = null;
  for (let f = 0; f < oldToNew.length; f++) {
    const n = oldToNew[f]!;
    if (n < 0 || sameTags(oldStore.tags(f), newStore.tags(n))) continue;
    out ??= new Uint8Array(oldToNew.length);
    out[f] = 1;
  }
  return out;
}

/** Whether two tag lists hold the same tags (in any order). */
export function sameTags(a: readonly string[], b: readonly string[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (const t of a) if (!b.includes(t)) return false;
  for (const t of b) if (!a.includes(t)) return false;
  return true;
}
