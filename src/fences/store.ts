/**
 * The fence store: one generation of fences in SharedArrayBuffers, built once on the main thread
 * (`buildFenceStore`) and opened zero-copy by any thread (`FenceStore.open`).
 *
 * Regions: the store region (header, per-fence records, ring offsets, packed vertices, ids and tags as a UTF-8 JSON
 * blob; see "Fence store" in shm/layout.ts), a flatbush index over every fence's bounding box and, when there are
 * compliance fences, a flatbush index over those alone (for the ingest thread's lane decision).
 *
 * Methods marked allocation-free may run on hot paths; `open` and the string accessors' first use allocate.
 */
import Flatbush from 'flatbush';
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
  fenceStoreSections,
  FSTORE_COMPLIANCE_COUNT_I32,
  FSTORE_FENCE_COUNT_I32,
  FSTORE_GENERATION_I32,
  FSTORE_HEADER_BYTES,
  FSTORE_MAGIC,
  FSTORE_MAGIC_I32,
  FSTORE_META_BYTES_I32,
  FSTORE_RING_COUNT_I32,
  FSTORE_VERSION_I32,
  FSTORE_VERTEX_COUNT_I32,
  LAYOUT_VERSION,
  TRG_FENCE_INDEX_MASK,
  VERTEX_STRIDE_F64,
} from '../shm/layout.js';
import { BoxTree } from './box-tree.js';
import { FenceGrid } from './fence-grid.js';
import { RingBands } from './ring-bands.js';
import {
  containsCircle,
  containsRings,
  distanceToRingsM,
  metresPerDegreeX,
  M_PER_DEG,
  Q_CELLS,
  Q_LIMIT_M,
  Q_MIN_X,
  Q_X,
  Q_X0,
  Q_Y,
  Q_Y0,
  RAD_PER_DEG,
  ringsWithinM,
  segmentTouchesCircle,
  segmentTouchesRings,
} from './geometry.js';
import type { ParsedFences } from './parse.js';

/** Everything a thread needs to open a store generation: SharedArrayBuffers and numbers (structured-clone safe). */
export interface FenceStoreDescriptor {
  /** Layout version the regions were built with. */
  readonly layoutVersion: number;
  /** Generation number. */
  readonly generation: number;
  /** Number of fences. */
  readonly fenceCount: number;
  /** Store region (header, fence records, rings, vertices, ids and tags). */
  readonly storeBuffer: SharedArrayBuffer;
  /** flatbush index over all fence boxes (null when there are no fences). */
  readonly indexBuffer: SharedArrayBuffer | null;
  /** flatbush index over compliance fence boxes (null when there are none). */
  readonly complianceIndexBuffer: SharedArrayBuffer | null;
  /**
   * Per fence (Int32, Atomics.add): pings that found a device inside it with no free entry to track it (this
   * generation's count; see CNT_FENCE_OVERFLOW_F64 for the router's total).
   */
  readonly untrackedBuffer: SharedArrayBuffer;
}

/** Options of buildFenceStore. */
export interface FenceStoreOptions {
  /** flatbush node size (children per tree node), an integer in [2, 256]. */
  nodeSize?: number;
}

/** Defaults of buildFenceStore; nodeSize chosen by measurement (bench/RESULTS.md, "Fences and containment"). */
const FENCE_STORE_DEFAULTS: Required<FenceStoreOptions> = { nodeSize: 8 };

/** Options of FenceStore.open (per thread; nothing here changes the shared regions). */
export interface FenceStoreOpenOptions {
  /**
   * Build this thread's uniform grid over the fence boxes and answer candidate queries from it (see fence-grid.ts;
   * it declines layouts it does not suit, and the flatbush walk answers). false: always walk the flatbush index.
   */
  grid?: boolean;
  /**
   * Build this thread's latitude bands over each polygon's edges and run the exact tests on one band (see
   * ring-bands.ts; same answers). false: every test reads every edge.
   */
  edgeBands?: boolean;
}

/** Defaults of FenceStore.open. */
const FENCE_STORE_OPEN_DEFAULTS: Required<FenceStoreOpenOptions> = { grid: true, edgeBands: true };

/** Builds one store generation from validated fences (main thread; allocates the shared regions). */
export function buildFenceStore(
  parsed: ParsedFences,
  generation: number,
  options: FenceStoreOptions = {},
): FenceStoreDescriptor {
  const nodeSize = options.nodeSize ?? FENCE_STORE_DEFAULTS.nodeSize;
  if (!Number.isInteger(nodeSize) || nodeSize < 2 || nodeSize > 256) {
    throw new RangeError(`options.nodeSize must be an integer in [2, 256], got ${String(nodeSize)}`);
  }
  if (!Number.isInteger(generation) || generation < 0 || generation > 0x7fffffff) {
    throw new RangeError(`generation must be an integer in [0, 2^31 - 1], got ${String(generation)}`);
  }
  const fences = parsed.fences;
  const fenceCount = fences.length;
  if (fenceCount > TRG_FENCE_INDEX_MASK) throw new RangeError(`at most ${TRG_FENCE_INDEX_MASK} fences per store`);
  let ringCount = 0;
  let vertexCount = 0;
  let complianceCount = 0;
  for (const f of fences) {
    ringCount += f.rings.length;
    for (const ring of f.rings) vertexCount += ring.length / 2;
    if (f.compliance) complianceCount++;
  }
  const meta = new TextEncoder().encode(
    JSON.stringify({ ids: fences.map((f) => f.id), tags: fences.map((f) => f.tags) }),
  );
  const sections = fenceStoreSections(fenceCount, ringCount, vertexCount, meta.length);
  const storeBuffer = new SharedArrayBuffer(sections.totalBytes);
  const header = new Int32Array(storeBuffer, 0, FSTORE_HEADER_BYTES / 4);
  const fenceF64 = new Float64Array(storeBuffer, sections.fenceF64Byte, fenceCount * FENCE_STRIDE_F64);
  const fenceI32 = new Int32Array(storeBuffer, sections.fenceI32Byte, fenceCount * FENCE_STRIDE_I32);
  const ringOffsets = new Int32Array(storeBuffer, sections.ringOffsetsByte, ringCount + 1);
  const vertices = new Float64Array(storeBuffer, sections.verticesByte, vertexCount * VERTEX_STRIDE_F64);
  new Uint8Array(storeBuffer, sections.metaByte, meta.length).set(meta);

  const index = fenceCount > 0 ? new Flatbush(fenceCount, nodeSize, Float64Array, SharedArrayBuffer) : null;
  const complianceIndex =
    complianceCount > 0 ? new Flatbush(complianceCount, nodeSize, Float64Array, SharedArrayBuffer) : null;
  let ring = 0;
  let vertex = 0;
  for (let i = 0; i < fenceCount; i++) {
    const f = fences[i]!;
    const b = i * FENCE_STRIDE_F64;
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
    const bi = i * FENCE_STRIDE_I32;
    fenceI32[bi + FENCE_FLAGS_I32] =
      (f.kind === 'circle' ? FENCE_FLAG_CIRCLE : 0) | (f.compliance ? FENCE_FLAG_COMPLIANCE : 0);
    fenceI32[bi + FENCE_FIRST_RING_I32] = ring;
    fenceI32[bi + FENCE_RING_COUNT_I32] = f.rings.length;
    for (const r of f.rings) {
      ringOffsets[ring++] = vertex;
      vertices.set(r, vertex * VERTEX_STRIDE_F64);
      vertex += r.length / 2;
    }
    index!.add(minX, minY, maxX, maxY);
    if (f.compliance) complianceIndex!.add(minX, minY, maxX, maxY);
  }
  ringOffsets[ringCount] = vertex;
  index?.finish();
  complianceIndex?.finish();

  header[FSTORE_VERSION_I32] = LAYOUT_VERSION;
  header[FSTORE_GENERATION_I32] = generation;
  header[FSTORE_FENCE_COUNT_I32] = fenceCount;
  header[FSTORE_RING_COUNT_I32] = ringCount;
  header[FSTORE_VERTEX_COUNT_I32] = vertexCount;
  header[FSTORE_COMPLIANCE_COUNT_I32] = complianceCount;
  header[FSTORE_META_BYTES_I32] = meta.length;
  // The magic goes in last: a half-built region never looks valid.
  Atomics.store(header, FSTORE_MAGIC_I32, FSTORE_MAGIC);
  return {
    layoutVersion: LAYOUT_VERSION,
    generation,
    fenceCount,
    storeBuffer,
    indexBuffer: index === null ? null : (index.data as SharedArrayBuffer),
    complianceIndexBuffer: complianceIndex === null ? null : (complianceIndex.data as SharedArrayBuffer),
    untrackedBuffer: new SharedArrayBuffer(Math.max(1, fenceCount) * 4),
  };
}

/** One thread's view of a store generation. Construct with `FenceStore.open(descriptor)`. */
export class FenceStore {
  /** Generation number. */
  readonly generation: number;
  /** Number of fences. */
  readonly fenceCount: number;
  /** Number of compliance fences. */
  readonly complianceCount: number;
  /** The descriptor this view was opened from. */
  readonly descriptor: FenceStoreDescriptor;
  /** Per-fence Float64 records (FENCE_*_F64). */
  readonly fenceF64: Float64Array;
  /** Per-fence Int32 records (FENCE_*_I32). */
  readonly fenceI32: Int32Array;
  /** Ring offsets (pair index of each ring's first vertex; ringCount + 1 cells). */
  readonly ringOffsets: Int32Array;
  /** Packed vertices (x, y pairs). */
  readonly vertices: Float64Array;
  /** Per fence: pings that found a device inside it untracked (Atomics.add by the engine; read with Atomics.load). */
  readonly untracked: Int32Array;
  /**
   * This thread's query scratch (geometry.ts Q_* cells): hot callers write the point, segment and box here and call
   * the `...At` methods, which take no double arguments (doubles crossing a non-inlined call are boxed).
   */
  readonly q: Float64Array = new Float64Array(Q_CELLS);
  /** Traversal view of the all-fences index (null when empty). */
  readonly tree: BoxTree | null;
  /** This thread's grid over the fence boxes, or null (declined, disabled or empty): queries walk `tree` then. */
  readonly grid: FenceGrid | null;
  /** This thread's edge bands, or null (disabled): the exact tests read every edge then. */
  readonly bands: RingBands | null;
  private readonly complianceTree: BoxTree | null;
  private readonly ids: readonly string[];
  private readonly tagLists: readonly (readonly string[])[];
  private readonly idToIndex: Map<string, number>;

  private constructor(d: FenceStoreDescriptor, options: FenceStoreOpenOptions) {
    const useGrid = options.grid ?? FENCE_STORE_OPEN_DEFAULTS.grid;
    if (typeof useGrid !== 'boolean') throw new TypeError(`options.grid must be a boolean, got ${String(useGrid)}`);
    const useBands = options.edgeBands ?? FENCE_STORE_OPEN_DEFAULTS.edgeBands;
    if (typeof useBands !== 'boolean')
      throw new TypeError(`options.edgeBands must be a boolean, got ${String(useBands)}`);
    if (!(d.storeBuffer instanceof SharedArrayBuffer))
      throw new TypeError('descriptor.storeBuffer must be a SharedArrayBuffer');
    if (d.layoutVersion !== LAYOUT_VERSION)
      throw new RangeError(`fence store layout ${d.layoutVersion} != ${LAYOUT_VERSION}`);
    const header = new Int32Array(d.storeBuffer, 0, FSTORE_HEADER_BYTES / 4);
    if (Atomics.load(header, FSTORE_MAGIC_I32) !== FSTORE_MAGIC)
      throw new RangeError('not a fence store region (bad magic)');
    if (header[FSTORE_VERSION_I32] !== LAYOUT_VERSION)
      throw new RangeError('fence store region has another layout version');
    if (header[FSTORE_GENERATION_I32] !== d.generation || header[FSTORE_FENCE_COUNT_I32] !== d.fenceCount) {
      throw new RangeError('fence store descriptor does not match its region (generation or fence count)');
    }
    const fenceCount = d.fenceCount;
    const ringCount = header[FSTORE_RING_COUNT_I32]!;
    const vertexCount = header[FSTORE_VERTEX_COUNT_I32]!;
    const metaBytes = header[FSTORE_META_BYTES_I32]!;
    const s = fenceStoreSections(fenceCount, ringCount, vertexCount, metaBytes);
    if (s.totalBytes !== d.storeBuffer.byteLength)
      throw new RangeError('fence store region size does not match its header');
    this.descriptor = d;
    this.generation = d.generation;
    this.fenceCount = fenceCount;
    this.complianceCount = header[FSTORE_COMPLIANCE_COUNT_I32]!;
    this.fenceF64 = new Float64Array(d.storeBuffer, s.fenceF64Byte, fenceCount * FENCE_STRIDE_F64);
    this.fenceI32 = new Int32Array(d.storeBuffer, s.fenceI32Byte, fenceCount * FENCE_STRIDE_I32);
    this.ringOffsets = new Int32Array(d.storeBuffer, s.ringOffsetsByte, ringCount + 1);
    this.vertices = new Float64Array(d.storeBuffer, s.verticesByte, vertexCount * VERTEX_STRIDE_F64);
    this.untracked = new Int32Array(d.untrackedBuffer, 0, Math.max(1, fenceCount));
    // TextDecoder refuses views over shared memory: copy the blob once.
    const metaCopy = new Uint8Array(metaBytes);
    metaCopy.set(new Uint8Array(d.storeBuffer, s.metaByte, metaBytes));
    const meta = JSON.parse(new TextDecoder().decode(metaCopy)) as { ids: string[]; tags: string[][] };
    this.ids = meta.ids;
    this.tagLists = meta.tags.map((t) => Object.freeze(t));
    this.idToIndex = new Map(meta.ids.map((id, i) => [id, i]));
    this.tree = d.indexBuffer === null ? null : new BoxTree(d.indexBuffer);
    this.complianceTree = d.complianceIndexBuffer === null ? null : new BoxTree(d.complianceIndexBuffer);
    this.grid = useGrid ? FenceGrid.build(this.fenceF64, fenceCount) : null;
    this.bands = useBands
      ? new RingBands(this.fenceF64, this.fenceI32, this.ringOffsets, this.vertices, fenceCount)
      : null;
    if (fenceCount > 0 && this.tree?.size !== fenceCount)
      throw new RangeError('fence index size does not match the store');
    if (this.complianceCount > 0 && this.complianceTree?.size !== this.complianceCount) {
      throw new RangeError('compliance index size does not match the store');
    }
  }

  /**
   * Opens a store generation zero-copy over the descriptor's shared buffers (checks magic, version and sizes) and,
   * unless options.grid is false, builds this thread's candidate grid (fence-grid.ts).
   */
  static open(d: FenceStoreDescriptor, options: FenceStoreOpenOptions = {}): FenceStore {
    return new FenceStore(d, options);
  }

  /** Id of fence `index`. */
  fenceId(index: number): string {
    const id = this.ids[index];
    if (id === undefined) throw new RangeError(`fence index ${index} out of range [0, ${this.fenceCount})`);
    return id;
  }

  /** Index of the fence with `id`, or -1. */
  indexOfId(id: string): number {
    return this.idToIndex.get(id) ?? -1;
  }

  /** Whether fence `index` is a compliance fence. Allocation-free. */
  isCompliance(index: number): boolean {
    return (this.fenceI32[index * FENCE_STRIDE_I32 + FENCE_FLAGS_I32]! & FENCE_FLAG_COMPLIANCE) !== 0;
  }

  /** Tags of fence `index` (frozen). */
  tags(index: number): readonly string[] {
    const t = this.tagLists[index];
    if (t === undefined) throw new RangeError(`fence index ${index} out of range [0, ${this.fenceCount})`);
    return t;
  }

  /**
   * Writes the indices of fences whose bounding box holds (lat, lon) into `out` (at most out.length) and returns how
   * many there are (may exceed out.length; size `out` to fenceCount to never miss one). Allocation-free where
   * inlined (see nearCompliance); candidatesInQueryBoxInto() takes the box from `q` and always is.
   */
  candidatesInto(lat: number, lon: number, out: Int32Array): number {
    return this.candidatesInBoxInto(lat, lon, lat, lon, out);
  }

  /** Like candidatesInto, for the boxes that intersect a query box. Allocation-free. */
  candidatesInBoxInto(minLat: number, minLon: number, maxLat: number, maxLon: number, out: Int32Array): number {
    const q = this.q;
    q[Q_MIN_X] = minLon;
    q[Q_MIN_X + 1] = minLat;
    q[Q_MIN_X + 2] = maxLon;
    q[Q_MIN_X + 3] = maxLat;
    return this.candidatesInQueryBoxInto(out);
  }

  /**
   * candidatesInBoxInto for the box already in q[Q_MIN_X .. Q_MAX_Y]: from the grid when there is one, else from the
   * flatbush walk (the same set; the order differs). Allocation-free.
   */
  candidatesInQueryBoxInto(out: Int32Array): number {
    const grid = this.grid;
    if (grid !== null) return grid.searchBoxInto(this.q, Q_MIN_X, out);
    return this.tree === null ? 0 : this.tree.searchBoxInto(this.q, Q_MIN_X, out);
  }

  /**
   * The fences with the most untracked pings in this generation, most first (at most `limit`; only fences with some).
   * Cold path (metrics scrape, summary, log): allocates.
   */
  mostUntracked(limit: number): { fenceId: string; pings: number }[] {
    const out: { fenceId: string; pings: number }[] = [];
    for (let f = 0; f < this.fenceCount; f++) {
      const n = Atomics.load(this.untracked, f);
      if (n > 0) out.push({ fenceId: this.ids[f]!, pings: n });
    }
    out.sort((a, b) => b.pings - a.pings || (a.fenceId < b.fenceId ? -1 : 1));
    return out.slice(0, limit);
  }

  /** Exact containment of (lat, lon) in fence `index` under the boundary rule in geometry.ts (see containsAt). */
  contains(index: number, lat: number, lon: number): boolean {
    this.q[Q_X] = lon;
    this.q[Q_Y] = lat;
    return this.containsAt(index);
  }

  /** Exact containment of the point in q[Q_X], q[Q_Y] in fence `index`. Allocation-free. */
  containsAt(index: number): boolean {
    const q = this.q;
    const x = q[Q_X]!;
    const y = q[Q_Y]!;
    const b = index * FENCE_STRIDE_F64;
    const f = this.fenceF64;
    // The box test rejects most candidates of a multi-fence query before any edge is read.
    if (
      x < f[b + FENCE_MIN_X_F64]! ||
      x > f[b + FENCE_MAX_X_F64]! ||
      y < f[b + FENCE_MIN_Y_F64]! ||
      y > f[b + FENCE_MAX_Y_F64]!
    ) {
      return false;
    }
    const bi = index * FENCE_STRIDE_I32;
    if ((this.fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0)
      return containsCircle(f, b + FENCE_CENTER_X_F64, q);
    const bands = this.bands;
    if (bands !== null) return bands.containsAt(index, q);
    return containsRings(
      this.vertices,
      this.ringOffsets,
      this.fenceI32[bi + FENCE_FIRST_RING_I32]!,
      this.fenceI32[bi + FENCE_RING_COUNT_I32]!,
      q,
    );
  }

  /**
   * Exact containment of the previous point, (q[Q_Y0], q[Q_X0]), in fence `index`; q is left as it was.
   * Allocation-free.
   */
  containsPreviousAt(index: number): boolean {
    const q = this.q;
    const x = q[Q_X]!;
    const y = q[Q_Y]!;
    q[Q_X] = q[Q_X0]!;
    q[Q_Y] = q[Q_Y0]!;
    const inside = this.containsAt(index);
    q[Q_X] = x;
    q[Q_Y] = y;
    return inside;
  }

  /**
   * True when the segment from (q[Q_Y0], q[Q_X0]) to (q[Q_Y], q[Q_X]) touches fence `index` (the caller knows both
   * ends are outside). Allocation-free.
   */
  segmentTouchesAt(index: number): boolean {
    const bi = index * FENCE_STRIDE_I32;
    if ((this.fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0) {
      return segmentTouchesCircle(this.fenceF64, index * FENCE_STRIDE_F64 + FENCE_CENTER_X_F64, this.q);
    }
    const bands = this.bands;
    if (bands !== null) return bands.segmentTouchesAt(index, this.q);
    return segmentTouchesRings(
      this.vertices,
      this.ringOffsets,
      this.fenceI32[bi + FENCE_FIRST_RING_I32]!,
      this.fenceI32[bi + FENCE_RING_COUNT_I32]!,
      this.q,
    );
  }

  /** True when the point in q is within the fence's exitBufferM of its boundary (exit hysteresis). Allocation-free. */
  withinExitBufferAt(index: number): boolean {
    const b = index * FENCE_STRIDE_F64;
    const f = this.fenceF64;
    const q = this.q;
    q[Q_LIMIT_M] = f[b + FENCE_EXIT_BUFFER_M_F64]!;
    const bi = index * FENCE_STRIDE_I32;
    if ((this.fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0) {
      const dx = (q[Q_X]! - f[b + FENCE_CENTER_X_F64]!) * f[b + FENCE_M_PER_DEG_X_F64]!;
      const dy = (q[Q_Y]! - f[b + FENCE_CENTER_Y_F64]!) * M_PER_DEG;
      return Math.sqrt(dx * dx + dy * dy) - f[b + FENCE_RADIUS_M_F64]! <= q[Q_LIMIT_M]!;
    }
    return ringsWithinM(
      this.vertices,
      this.ringOffsets,
      this.fenceI32[bi + FENCE_FIRST_RING_I32]!,
      this.fenceI32[bi + FENCE_RING_COUNT_I32]!,
      q,
    );
  }

  /** Distance in metres from (lat, lon) to the boundary of fence `index` (diagnostics and tests; returns a double). */
  distanceToBoundaryM(index: number, lat: number, lon: number): number {
    const b = index * FENCE_STRIDE_F64;
    const f = this.fenceF64;
    const bi = index * FENCE_STRIDE_I32;
    if ((this.fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0) {
      const dx = (lon - f[b + FENCE_CENTER_X_F64]!) * f[b + FENCE_M_PER_DEG_X_F64]!;
      const dy = (lat - f[b + FENCE_CENTER_Y_F64]!) * M_PER_DEG;
      return Math.abs(Math.sqrt(dx * dx + dy * dy) - f[b + FENCE_RADIUS_M_F64]!);
    }
    return distanceToRingsM(
      this.vertices,
      this.ringOffsets,
      this.fenceI32[bi + FENCE_FIRST_RING_I32]!,
      this.fenceI32[bi + FENCE_RING_COUNT_I32]!,
      lon,
      lat,
    );
  }

  /**
   * True when (lat, lon) is inside, or within `marginM` metres of, the bounding box of any compliance fence
   * (the ingest thread's lane decision). Allocation-free where inlined; a double argument crossing a call V8 does not
   * inline is boxed, so a hot caller that must be sure uses nearComplianceAt().
   */
  nearCompliance(lat: number, lon: number, marginM: number): boolean {
    const q = this.q;
    q[Q_X] = lon;
    q[Q_Y] = lat;
    q[Q_LIMIT_M] = marginM;
    return this.nearComplianceAt();
  }

  /**
   * nearCompliance for the point in q[Q_X], q[Q_Y] and the margin in q[Q_LIMIT_M]; no double crosses the call, so
   * it stays allocation-free even where V8 does not inline it.
   */
  nearComplianceAt(): boolean {
    if (this.complianceTree === null) return false;
    const q = this.q;
    const lon = q[Q_X]!;
    const lat = q[Q_Y]!;
    const marginM = q[Q_LIMIT_M]!;
    const dLat = marginM / M_PER_DEG;
    const cosLat = Math.cos(lat * RAD_PER_DEG);
    // Near the poles a metre spans any longitude: widen to the whole range.
    const dLon = cosLat > 1e-6 ? marginM / (M_PER_DEG * cosLat) : 360;
    q[Q_MIN_X] = lon - dLon;
    q[Q_MIN_X + 1] = lat - dLat;
    q[Q_MIN_X + 2] = lon + dLon;
    q[Q_MIN_X + 3] = lat + dLat;
    return this.complianceTree.anyInBox(q, Q_MIN_X);
  }
}
