/**
 * Writing one fence into a store region (full builds and live edits share it), and the headroom a full build leaves
 * for edits.
 */
import {
  FENCE_CENTER_X_F64,
  FENCE_CENTER_Y_F64,
  FENCE_DWELL_MS_F64,
  FENCE_EXIT_BUFFER_M_F64,
  FENCE_FIRST_RING_I32,
  FENCE_FLAG_CIRCLE,
  FENCE_FLAG_COMPLIANCE,
  FENCE_FLAGS_I32,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_INSIDE_MS_F64,
  FENCE_MIN_OUTSIDE_MS_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_M_PER_DEG_X_F64,
  FENCE_RADIUS_M_F64,
  FENCE_RING_COUNT_I32,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
  type FenceStoreSections,
  VERTEX_STRIDE_F64,
} from '../shm/layout.js';
import { metresPerDegreeX } from './geometry.js';
import type { ParsedFence } from './parse.js';

/** The writable sections of a store region, at full capacity. */
export interface RegionSections {
  /** Per-fence Float64 records. */
  fenceF64: Float64Array;
  /** Per-fence Int32 records. */
  fenceI32: Int32Array;
  /** Ring offsets (pair index of each ring's first vertex). */
  ringOffsets: Int32Array;
  /** Packed vertices. */
  vertices: Float64Array;
}

/**
 * Writes fence `f` as record `index`, its rings from ring `ring` and its vertices from vertex `vertex`, and the ring
 * offset that closes its last ring; returns the next free ring and vertex as [ring, vertex].
 */
export function writeFenceRecord(
  s: RegionSections,
  index: number,
  ring: number,
  vertex: number,
  f: ParsedFence,
): [number, number] {
  const b = index * FENCE_STRIDE_F64;
  const fenceF64 = s.fenceF64;
  const [minX, minY, maxX, maxY] = f.bbox;
  fenceF64[b + FENCE_MIN_X_F64] = minX;
  fenceF64[b + FENCE_MIN_Y_F64] = minY;
  fenceF64[b + FENCE_MAX_X_F64] = maxX;
  fenceF64[b + FENCE_MAX_Y_F64] = maxY;
  fenceF64[b + FENCE_DWELL_MS_F64] = f.dwellMs;
  fenceF64[b + FENCE_EXIT_BUFFER_M_F64] = f.exitBufferM;
  fenceF64[b + FENCE_MIN_INSIDE_MS_F64] = f.minInsideMs;
  fenceF64[b + FENCE_MIN_OUTSIDE_MS_F64] = f.minOutsideMs;
  fenceF64[b + FENCE_CENTER_X_F64] = f.centerLon;
  fenceF64[b + FENCE_CENTER_Y_F64] = f.centerLat;
  fenceF64[b + FENCE_RADIUS_M_F64] = f.radiusM;
  fenceF64[b + FENCE_M_PER_DEG_X_F64] = f.kind === 'circle' ? metresPerDegreeX(f.centerLat) : 0;
  const bi = index * FENCE_STRIDE_I32;
  s.fenceI32[bi + FENCE_FLAGS_I32] =
    (f.kind === 'circle' ? FENCE_FLAG_CIRCLE : 0) | (f.compliance ? FENCE_FLAG_COMPLIANCE : 0);
  s.fenceI32[bi + FENCE_FIRST_RING_I32] = ring;
  s.fenceI32[bi + FENCE_RING_COUNT_I32] = f.rings.length;
  for (const r of f.rings) {
    s.ringOffsets[ring++] = vertex;
    s.vertices.set(r, vertex * VERTEX_STRIDE_F64);
    vertex += r.length / 2;
  }
  // The closing offset of this fence's last ring (the next ring's start when one is written after it).
  s.ringOffsets[ring] = vertex;
  return [ring, vertex];
}

/** Rings and vertices of one fence. */
export function fenceSize(f: ParsedFence): { rings: number; vertices: number } {
  let vertices = 0;
  for (const r of f.rings) vertices += r.length / 2;
  return { rings: f.rings.length, vertices };
}

/**
 * Room a full build leaves for live edits: an eighth more fence records (at least 256), rings (at least 1,024) and
 * vertices (at least 65,536). An edit that does not fit makes a new full build.
 */
export function withHeadroom(fences: number, rings: number, vertices: number): [number, number, number] {
  return [
    fences + Math.max(256, Math.ceil(fences / 8)),
    rings + Math.max(1024, Math.ceil(rings / 8)),
    vertices + Math.max(65_536, Math.ceil(vertices / 8)),
  ];
}

/** Typed views over the writable sections of a region, at the given capacities. */
export function regionSections(
  storeBuffer: SharedArrayBuffer,
  s: FenceStoreSections,
  fenceCapacity: number,
  ringCapacity: number,
  vertexCapacity: number,
): RegionSections {
  return {
    fenceF64: new Float64Array(storeBuffer, s.fenceF64Byte, fenceCapacity * FENCE_STRIDE_F64),
    fenceI32: new Int32Array(storeBuffer, s.fenceI32Byte, fenceCapacity * FENCE_STRIDE_I32),
    ringOffsets: new Int32Array(storeBuffer, s.ringOffsetsByte, ringCapacity + 1),
    vertices: new Float64Array(storeBuffer, s.verticesByte, vertexCapacity * VERTEX_STRIDE_F64),
  };
}
