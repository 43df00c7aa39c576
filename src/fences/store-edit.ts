/**
 * Live fence edits: add, replace or remove one fence as a new store generation over the same region (main thread).
 *
 * An upsert appends the fence's record, rings and vertices past the counts of the generation it edits (a region is
 * built with headroom: fence-record.ts) and, for an id already in force, marks the old index removed; a removal only
 * marks. Generations already published never read past their own counts, so they keep serving unchanged while the
 * new one is swapped in. The appended fences get a small flatbush index of their own, rebuilt per edit; the full
 * build's index, grid and edge bands are reused as they are. When the edit does not fit the region's headroom,
 * `liveFences` gives what a new full build starts from.
 */
import Flatbush from 'flatbush';
import { fenceSize, writeFenceRecord } from './fence-record.js';
import type { ParsedFence } from './parse.js';
import { FenceStore, type AppendedFences, type FenceStoreDescriptor } from './store.js';
import {
  FSTORE_FENCE_CAPACITY_I32,
  FSTORE_HEADER_BYTES,
  FSTORE_RING_CAPACITY_I32,
  FSTORE_VERTEX_CAPACITY_I32,
  FENCE_FLAG_COMPLIANCE,
  FENCE_CENTER_X_F64,
  FENCE_CENTER_Y_F64,
  FENCE_DWELL_MS_F64,
  FENCE_EXIT_BUFFER_M_F64,
  FENCE_FIRST_RING_I32,
  FENCE_FLAG_CIRCLE,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_INSIDE_MS_F64,
  FENCE_MIN_OUTSIDE_MS_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_RADIUS_M_F64,
  FENCE_RING_COUNT_I32,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
  FENCE_FLAGS_I32,
  VERTEX_STRIDE_F64,
} from '../shm/layout.js';

/** One edit: put a fence in force (adding it, or replacing the one with its id), or remove the fence with an id. */
export type FenceEdit = { upsert: ParsedFence } | { remove: string };

/** A new generation made by one edit. */
export interface EditedStore {
  /** The new generation's descriptor. */
  descriptor: FenceStoreDescriptor;
  /** Fence index in the edited generation -> index in the new one (-1: removed). */
  oldToNew: Int32Array;
  /** What the edit did. */
  action: 'created' | 'replaced' | 'removed';
}

/** flatbush node size of the appended fences' index. */
const APPENDED_NODE_SIZE = 8;

/**
 * Builds the generation `generation` that applies `edit` to `current` (the generation in force; edits must be applied
 * one at a time, each to the generation the previous one made). Returns null when the edit does not change anything
 * (removing an id not in force) and 'no-room' when it does not fit the region's headroom (make a full build of
 * `liveFences(current)` with the edit applied instead).
 */
export function editFenceStore(
  current: FenceStore,
  edit: FenceEdit,
  generation: number,
): EditedStore | null | 'no-room' {
  const d = current.descriptor;
  const id = 'upsert' in edit ? edit.upsert.id : edit.remove;
  const oldIndex = current.indexOfId(id);
  if (!('upsert' in edit) && oldIndex < 0) return null;
  const header = new Int32Array(d.storeBuffer, 0, FSTORE_HEADER_BYTES / 4);
  let ringCount = d.ringCount;
  let vertexCount = d.vertexCount;
  let fenceCount = d.fenceCount;
  const appended: { ids: string[]; tags: (readonly string[])[]; expiresAtMs: number[] } = {
    ids: d.appended === null ? [] : [...d.appended.ids],
    tags: d.appended === null ? [] : [...d.appended.tags],
    expiresAtMs: d.appended === null ? [] : [...d.appended.expiresAtMs],
  };
  const removed = oldIndex >= 0 ? [...d.removed, oldIndex].sort((a, b) => a - b) : [...d.removed];
  const oldToNew = new Int32Array(d.fenceCount);
  for (let f = 0; f < d.fenceCount; f++) oldToNew[f] = f;
  if ('upsert' in edit) {
    const f = edit.upsert;
    const size = fenceSize(f);
    if (
      fenceCount + 1 > header[FSTORE_FENCE_CAPACITY_I32]! ||
      ringCount + size.rings > header[FSTORE_RING_CAPACITY_I32]! ||
      vertexCount + size.vertices > header[FSTORE_VERTEX_CAPACITY_I32]!
    ) {
      return 'no-room';
    }
    // Writes go past every published generation's counts: nothing that reads them changes.
    const region = {
      fenceF64: new Float64Array(d.storeBuffer, current.fenceF64.byteOffset, (fenceCount + 1) * FENCE_STRIDE_F64),
      fenceI32: new Int32Array(d.storeBuffer, current.fenceI32.byteOffset, (fenceCount + 1) * FENCE_STRIDE_I32),
      ringOffsets: new Int32Array(d.storeBuffer, current.ringOffsets.byteOffset, ringCount + size.rings + 1),
      vertices: new Float64Array(
        d.storeBuffer,
        current.vertices.byteOffset,
        (vertexCount + size.vertices) * VERTEX_STRIDE_F64,
      ),
    };
    [ringCount, vertexCount] = writeFenceRecord(region, fenceCount, ringCount, vertexCount, f);
    appended.ids.push(f.id);
    appended.tags.push(f.tags);
    appended.expiresAtMs.push(f.expiresAtMs);
    if (oldIndex >= 0) oldToNew[oldIndex] = fenceCount;
    fenceCount++;
  } else {
    oldToNew[oldIndex] = -1;
  }
  const descriptor: FenceStoreDescriptor = {
    ...d,
    generation,
    fenceCount,
    ringCount,
    vertexCount,
    appended: appended.ids.length > 0 ? (appended as AppendedFences) : null,
    removed,
    ...appendedIndexes(current, fenceCount, removed),
  };
  return {
    descriptor,
    oldToNew,
    action: 'upsert' in edit ? (oldIndex >= 0 ? 'replaced' : 'created') : 'removed',
  };
}

/** The flatbush indexes over the appended fences (all of them; the compliance one over those in force only). */
function appendedIndexes(
  current: FenceStore,
  fenceCount: number,
  removed: readonly number[],
): Pick<FenceStoreDescriptor, 'appendedIndexBuffer' | 'appendedComplianceIndexBuffer'> {
  const first = current.baseFenceCount;
  const count = fenceCount - first;
  if (count === 0) return { appendedIndexBuffer: null, appendedComplianceIndexBuffer: null };
  // The record of the fence just appended lies past current's views: read the region at the new count.
  const f64 = new Float64Array(
    current.descriptor.storeBuffer,
    current.fenceF64.byteOffset,
    fenceCount * FENCE_STRIDE_F64,
  );
  const i32 = new Int32Array(
    current.descriptor.storeBuffer,
    current.fenceI32.byteOffset,
    fenceCount * FENCE_STRIDE_I32,
  );
  const gone = new Set(removed);
  const index = new Flatbush(count, APPENDED_NODE_SIZE, Float64Array, SharedArrayBuffer);
  const compliance: number[] = [];
  for (let f = first; f < fenceCount; f++) {
    const b = f * FENCE_STRIDE_F64;
    index.add(
      f64[b + FENCE_MIN_X_F64]!,
      f64[b + FENCE_MIN_Y_F64]!,
      f64[b + FENCE_MAX_X_F64]!,
      f64[b + FENCE_MAX_Y_F64]!,
    );
    if (!gone.has(f) && (i32[f * FENCE_STRIDE_I32 + FENCE_FLAGS_I32]! & FENCE_FLAG_COMPLIANCE) !== 0)
      compliance.push(f);
  }
  index.finish();
  let complianceIndex: Flatbush | null = null;
  if (compliance.length > 0) {
    complianceIndex = new Flatbush(compliance.length, APPENDED_NODE_SIZE, Float64Array, SharedArrayBuffer);
    for (const f of compliance) {
      const b = f * FENCE_STRIDE_F64;
      complianceIndex.add(
        f64[b + FENCE_MIN_X_F64]!,
        f64[b + FENCE_MIN_Y_F64]!,
        f64[b + FENCE_MAX_X_F64]!,
        f64[b + FENCE_MAX_Y_F64]!,
      );
    }
    complianceIndex.finish();
  }
  return {
    appendedIndexBuffer: index.data as SharedArrayBuffer,
    appendedComplianceIndexBuffer: complianceIndex === null ? null : (complianceIndex.data as SharedArrayBuffer),
  };
}

/** The fences in force in `store`, in index order, as a full build takes them (cold path: copies every ring). */
export function liveFences(store: FenceStore): ParsedFence[] {
  const out: ParsedFence[] = [];
  const f64 = store.fenceF64;
  const i32 = store.fenceI32;
  for (let f = 0; f < store.fenceCount; f++) {
    if (store.isRemoved(f)) continue;
    const b = f * FENCE_STRIDE_F64;
    const bi = f * FENCE_STRIDE_I32;
    const circle = (i32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0;
    const rings: Float64Array[] = [];
    const first = i32[bi + FENCE_FIRST_RING_I32]!;
    for (let r = first; r < first + i32[bi + FENCE_RING_COUNT_I32]!; r++) {
      rings.push(
        store.vertices.slice(store.ringOffsets[r]! * VERTEX_STRIDE_F64, store.ringOffsets[r + 1]! * VERTEX_STRIDE_F64),
      );
    }
    out.push({
      id: store.fenceId(f),
      compliance: store.isCompliance(f),
      tags: store.tags(f),
      dwellMs: f64[b + FENCE_DWELL_MS_F64]!,
      exitBufferM: f64[b + FENCE_EXIT_BUFFER_M_F64]!,
      minInsideMs: f64[b + FENCE_MIN_INSIDE_MS_F64]!,
      minOutsideMs: f64[b + FENCE_MIN_OUTSIDE_MS_F64]!,
      kind: circle ? 'circle' : 'polygon',
      rings,
      centerLon: f64[b + FENCE_CENTER_X_F64]!,
      centerLat: f64[b + FENCE_CENTER_Y_F64]!,
      radiusM: f64[b + FENCE_RADIUS_M_F64]!,
      bbox: [
        f64[b + FENCE_MIN_X_F64]!,
        f64[b + FENCE_MIN_Y_F64]!,
        f64[b + FENCE_MAX_X_F64]!,
        f64[b + FENCE_MAX_Y_F64]!,
      ],
      expiresAtMs: store.expiresAtMs(f),
    });
  }
  return out;
}

/** `fences` with `edit` applied (an upsert replaces the fence with its id in place, or goes last). */
export function applyEdit(fences: readonly ParsedFence[], edit: FenceEdit): ParsedFence[] {
  const id = 'upsert' in edit ? edit.upsert.id : edit.remove;
  const out = fences.filter((f) => f.id !== id);
  if ('upsert' in edit) {
    const at = fences.findIndex((f) => f.id === id);
    if (at >= 0) out.splice(at, 0, edit.upsert);
    else out.push(edit.upsert);
  }
  return out;
}
