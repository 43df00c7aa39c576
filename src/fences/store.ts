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
import { ComplianceGrid } from './compliance-grid.js';
import { randomInt } from 'node:crypto';
import Flatbush from 'flatbush';
import {
  FENCE_CENTER_X_F64,
  FENCE_CENTER_Y_F64,
  FENCE_EXIT_BUFFER_M_F64,
  FENCE_FIRST_RING_I32,
  FENCE_FLAG_CIRCLE,
  FENCE_FLAG_COMPLIANCE,
  FENCE_FLAGS_I32,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_M_PER_DEG_X_F64,
  FENCE_RADIUS_M_F64,
  FENCE_RING_COUNT_I32,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
  fenceStoreSections,
  FSTORE_BASE_ID_HI_I32,
  FSTORE_BASE_ID_LO_I32,
  FSTORE_COMPLIANCE_COUNT_I32,
  FSTORE_FENCE_CAPACITY_I32,
  FSTORE_FENCE_COUNT_I32,
  FSTORE_GENERATION_I32,
  FSTORE_HEADER_BYTES,
  FSTORE_MAGIC,
  FSTORE_MAGIC_I32,
  FSTORE_META_BYTES_I32,
  FSTORE_RING_CAPACITY_I32,
  FSTORE_RING_COUNT_I32,
  FSTORE_VERSION_I32,
  FSTORE_VERTEX_CAPACITY_I32,
  FSTORE_VERTEX_COUNT_I32,
  LAYOUT_VERSION,
  TRG_FENCE_INDEX_MASK,
  VERTEX_STRIDE_F64,
} from '../shm/layout.js';
import { BoxTree } from './box-tree.js';
import type { FenceGrid } from './fence-grid.js';
import { fenceSize, regionSections, withHeadroom, writeFenceRecord } from './fence-record.js';
import type { RingBands } from './ring-bands.js';
import { StoreBase } from './store-base.js';
import {
  containsCircle,
  containsRings,
  distanceToRingsM,
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

/** Fences appended by live edits since a store's full build (position k is fence index baseFenceCount + k). */
export interface AppendedFences {
  /** Ids. */
  readonly ids: readonly string[];
  /** Tags. */
  readonly tags: readonly (readonly string[])[];
  /** Expiry times, epoch ms (Infinity: none). */
  readonly expiresAtMs: readonly number[];
}

/** Everything a thread needs to open a store generation: SharedArrayBuffers and numbers (structured-clone safe). */
export interface FenceStoreDescriptor {
  /** Layout version the regions were built with. */
  readonly layoutVersion: number;
  /** Generation number. */
  readonly generation: number;
  /** Fence indices in use (the full build's fences plus those edits appended; removed ones included). */
  readonly fenceCount: number;
  /** Rings in use. */
  readonly ringCount: number;
  /** Vertices in use. */
  readonly vertexCount: number;
  /** The region's identity (random; shared by a full build and every edit over it). */
  readonly baseId: number;
  /** Store region (header, fence records, rings, vertices, ids and tags), with headroom for edits. */
  readonly storeBuffer: SharedArrayBuffer;
  /** flatbush index over the full build's fence boxes (null when it had no fences). */
  readonly indexBuffer: SharedArrayBuffer | null;
  /** flatbush index over the full build's compliance fence boxes (null when it had none). */
  readonly complianceIndexBuffer: SharedArrayBuffer | null;
  /** Fences appended by edits since the full build (null: none). */
  readonly appended: AppendedFences | null;
  /** flatbush index over the appended fences' boxes, item k = fence baseFenceCount + k (null: none). */
  readonly appendedIndexBuffer: SharedArrayBuffer | null;
  /** flatbush index over the boxes of the appended compliance fences still in force (null: none). */
  readonly appendedComplianceIndexBuffer: SharedArrayBuffer | null;
  /** Indices of the fences removed or replaced by edits since the full build, ascending. */
  readonly removed: readonly number[];
  /**
   * Per fence (Int32, Atomics.add): pings that found a device inside it with no free entry to track it (since the full
   * build; see CNT_FENCE_OVERFLOW_F64 for the router's total). Sized to the region's fence capacity.
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
  const expires: [number, number][] = [];
  for (let i = 0; i < fenceCount; i++) {
    const f = fences[i]!;
    const size = fenceSize(f);
    ringCount += size.rings;
    vertexCount += size.vertices;
    if (f.compliance) complianceCount++;
    if (f.expiresAtMs !== Infinity) expires.push([i, f.expiresAtMs]);
  }
  const meta = new TextEncoder().encode(
    JSON.stringify({ ids: fences.map((f) => f.id), tags: fences.map((f) => f.tags), expires }),
  );
  const [fenceRoom, ringRoom, vertexRoom] = withHeadroom(fenceCount, ringCount, vertexCount);
  const fenceCapacity = Math.min(fenceRoom, TRG_FENCE_INDEX_MASK);
  const sections = fenceStoreSections(fenceCapacity, ringRoom, vertexRoom, meta.length);
  const storeBuffer = new SharedArrayBuffer(sections.totalBytes);
  const header = new Int32Array(storeBuffer, 0, FSTORE_HEADER_BYTES / 4);
  const region = regionSections(storeBuffer, sections, fenceCapacity, ringRoom, vertexRoom);
  new Uint8Array(storeBuffer, sections.metaByte, meta.length).set(meta);

  const index = fenceCount > 0 ? new Flatbush(fenceCount, nodeSize, Float64Array, SharedArrayBuffer) : null;
  const complianceIndex =
    complianceCount > 0 ? new Flatbush(complianceCount, nodeSize, Float64Array, SharedArrayBuffer) : null;
  let ring = 0;
  let vertex = 0;
  for (let i = 0; i < fenceCount; i++) {
    const f = fences[i]!;
    [ring, vertex] = writeFenceRecord(region, i, ring, vertex, f);
    const [minX, minY, maxX, maxY] = f.bbox;
    index!.add(minX, minY, maxX, maxY);
    if (f.compliance) complianceIndex!.add(minX, minY, maxX, maxY);
  }
  region.ringOffsets[ringCount] = vertex;
  index?.finish();
  complianceIndex?.finish();

  // 62 random bits: a thread that opened this region before knows it again; two routers never share one.
  const idLo = randomInt(0x7fffffff);
  const idHi = randomInt(0x7fffffff);
  header[FSTORE_VERSION_I32] = LAYOUT_VERSION;
  header[FSTORE_GENERATION_I32] = generation;
  header[FSTORE_FENCE_COUNT_I32] = fenceCount;
  header[FSTORE_RING_COUNT_I32] = ringCount;
  header[FSTORE_VERTEX_COUNT_I32] = vertexCount;
  header[FSTORE_COMPLIANCE_COUNT_I32] = complianceCount;
  header[FSTORE_META_BYTES_I32] = meta.length;
  header[FSTORE_FENCE_CAPACITY_I32] = fenceCapacity;
  header[FSTORE_RING_CAPACITY_I32] = ringRoom;
  header[FSTORE_VERTEX_CAPACITY_I32] = vertexRoom;
  header[FSTORE_BASE_ID_LO_I32] = idLo;
  header[FSTORE_BASE_ID_HI_I32] = idHi;
  // The magic goes in last: a half-built region never looks valid.
  Atomics.store(header, FSTORE_MAGIC_I32, FSTORE_MAGIC);
  return {
    layoutVersion: LAYOUT_VERSION,
    generation,
    fenceCount,
    ringCount,
    vertexCount,
    baseId: idHi * 0x80000000 + idLo,
    storeBuffer,
    indexBuffer: index === null ? null : (index.data as SharedArrayBuffer),
    complianceIndexBuffer: complianceIndex === null ? null : (complianceIndex.data as SharedArrayBuffer),
    appended: null,
    appendedIndexBuffer: null,
    appendedComplianceIndexBuffer: null,
    removed: [],
    untrackedBuffer: new SharedArrayBuffer(Math.max(1, fenceCapacity) * 4),
  };
}

/**
 * One thread's view of a store generation. Construct with `FenceStore.open(descriptor)`.
 *
 * A generation published by live edits covers the full build's fences plus those the edits appended (indices from
 * `baseFenceCount` on), less those they removed or replaced (`removed`); the candidate queries never return a removed
 * fence, and the appended ones come from a small index of their own.
 */
export class FenceStore {
  /** Generation number. */
  readonly generation: number;
  /** Fence indices in use (removed ones included: an index is never reused within a region). */
  readonly fenceCount: number;
  /** Fences in force (fenceCount less those removed). */
  readonly liveFenceCount: number;
  /** Fences of the full build this generation edits (indices below it are the full build's). */
  readonly baseFenceCount: number;
  /** Compliance fences in force. */
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
  /** Traversal view of the full build's index (null when it had no fences). */
  readonly tree: BoxTree | null;
  /** This thread's grid over the full build's boxes, or null (declined, disabled or empty): queries walk `tree` then. */
  readonly grid: FenceGrid | null;
  /** This thread's edge bands over the full build's polygons, or null (disabled): exact tests read every edge then. */
  readonly bands: RingBands | null;
  private readonly base: StoreBase;
  private readonly complianceTree: BoxTree | null;
  private readonly appendedTree: BoxTree | null;
  private readonly appendedComplianceTree: BoxTree | null;
  /** Built on the first nearCompliance question (see compliance-grid.ts). */
  private complianceGrid: ComplianceGrid | null = null;
  private readonly appended: AppendedFences | null;
  /** Appended fences in force, by id. */
  private readonly appendedIds: Map<string, number>;
  /** 1 for a removed fence index (null when none is). */
  private readonly removedFlags: Uint8Array | null;

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
    const base = StoreBase.open(d.baseId, d.storeBuffer, d.indexBuffer, d.complianceIndexBuffer, useGrid, useBands);
    const appendedCount = d.appended === null ? 0 : d.appended.ids.length;
    if (
      d.generation < base.generation ||
      d.fenceCount !== base.fenceCount + appendedCount ||
      d.fenceCount > base.fenceCapacity ||
      d.ringCount > base.ringCapacity ||
      d.vertexCount > base.vertexCapacity
    ) {
      throw new RangeError('fence store descriptor does not match its region (generation or counts)');
    }
    const fenceCount = d.fenceCount;
    const r = base.region;
    this.base = base;
    this.descriptor = d;
    this.generation = d.generation;
    this.fenceCount = fenceCount;
    this.baseFenceCount = base.fenceCount;
    this.fenceF64 = r.fenceF64.subarray(0, fenceCount * FENCE_STRIDE_F64);
    this.fenceI32 = r.fenceI32.subarray(0, fenceCount * FENCE_STRIDE_I32);
    this.ringOffsets = r.ringOffsets.subarray(0, d.ringCount + 1);
    this.vertices = r.vertices.subarray(0, d.vertexCount * VERTEX_STRIDE_F64);
    this.untracked = new Int32Array(d.untrackedBuffer, 0, Math.max(1, fenceCount));
    this.tree = base.tree;
    this.complianceTree = base.complianceTree;
    this.grid = base.grid;
    this.bands = base.bands;
    this.appended = d.appended;
    this.appendedTree = d.appendedIndexBuffer === null ? null : new BoxTree(d.appendedIndexBuffer);
    this.appendedComplianceTree =
      d.appendedComplianceIndexBuffer === null ? null : new BoxTree(d.appendedComplianceIndexBuffer);
    if (this.appendedTree !== null && this.appendedTree.size !== appendedCount)
      throw new RangeError('appended fence index size does not match the descriptor');
    let removedFlags: Uint8Array | null = null;
    let complianceCount = base.complianceCount;
    if (d.removed.length > 0) {
      removedFlags = new Uint8Array(fenceCount);
      for (const f of d.removed) {
        if (!Number.isInteger(f) || f < 0 || f >= fenceCount)
          throw new RangeError(`removed fence index ${f} out of range`);
        removedFlags[f] = 1;
        if (f < base.fenceCount && this.isCompliance(f)) complianceCount--;
      }
    }
    this.removedFlags = removedFlags;
    this.appendedIds = new Map();
    for (let k = 0; k < appendedCount; k++) {
      const f = base.fenceCount + k;
      if (removedFlags !== null && removedFlags[f] === 1) continue;
      this.appendedIds.set(d.appended!.ids[k]!, f);
      if (this.isCompliance(f)) complianceCount++;
    }
    this.complianceCount = complianceCount;
    this.liveFenceCount = fenceCount - d.removed.length;
  }

  /**
   * Opens a store generation zero-copy over the descriptor's shared buffers (checks magic, version and sizes) and,
   * unless options.grid is false, builds this thread's candidate grid (fence-grid.ts); a generation over a region this
   * thread opened before reuses what it derived then (store-base.ts).
   */
  static open(d: FenceStoreDescriptor, options: FenceStoreOpenOptions = {}): FenceStore {
    return new FenceStore(d, options);
  }

  /** Id of fence `index` (a removed fence keeps its id). */
  fenceId(index: number): string {
    const id = index < this.baseFenceCount ? this.base.ids[index] : this.appended?.ids[index - this.baseFenceCount];
    if (id === undefined || index < 0 || index >= this.fenceCount)
      throw new RangeError(`fence index ${index} out of range [0, ${this.fenceCount})`);
    return id;
  }

  /** Index of the fence in force with `id`, or -1. */
  indexOfId(id: string): number {
    const appended = this.appendedIds.get(id);
    if (appended !== undefined) return appended;
    const index = this.base.idToIndex.get(id);
    if (index === undefined || this.isRemoved(index)) return -1;
    return index;
  }

  /** Whether fence `index` was removed (or replaced) by an edit. Allocation-free. */
  isRemoved(index: number): boolean {
    return this.removedFlags !== null && this.removedFlags[index] === 1;
  }

  /** When fence `index` expires, epoch ms (Infinity: never). */
  expiresAtMs(index: number): number {
    if (index >= this.baseFenceCount) return this.appended?.expiresAtMs[index - this.baseFenceCount] ?? Infinity;
    return this.base.expiresAtMs.get(index) ?? Infinity;
  }

  /** Indices of the fences in force that expire (cold path: allocates). */
  expiringFences(): number[] {
    const out: number[] = [];
    for (const f of this.base.expiresAtMs.keys()) if (!this.isRemoved(f)) out.push(f);
    for (const f of this.appendedIds.values()) if (this.expiresAtMs(f) !== Infinity) out.push(f);
    return out;
  }

  /** Whether fence `index` is a compliance fence. Allocation-free. */
  isCompliance(index: number): boolean {
    return (this.fenceI32[index * FENCE_STRIDE_I32 + FENCE_FLAGS_I32]! & FENCE_FLAG_COMPLIANCE) !== 0;
  }

  /** Tags of fence `index` (frozen). */
  tags(index: number): readonly string[] {
    const t =
      index < this.baseFenceCount
        ? this.base.tagLists[index]
        : index < this.fenceCount
          ? this.appended?.tags[index - this.baseFenceCount]
          : undefined;
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
    let n =
      grid !== null
        ? grid.searchBoxInto(this.q, Q_MIN_X, out)
        : this.tree === null
          ? 0
          : this.tree.searchBoxInto(this.q, Q_MIN_X, out);
    const appendedTree = this.appendedTree;
    if (appendedTree !== null) n += appendedTree.searchBoxIntoFrom(this.q, Q_MIN_X, out, n, this.baseFenceCount);
    const removed = this.removedFlags;
    if (removed !== null) {
      // Drop removed fences in place (the scratch holds every index, so nothing was cut).
      const m = n < out.length ? n : out.length;
      let w = 0;
      for (let k = 0; k < m; k++) {
        const f = out[k]!;
        if (removed[f] === 0) out[w++] = f;
      }
      n = w + (n - m);
    }
    return n;
  }

  /**
   * The fences with the most untracked pings in this generation, most first (at most `limit`; only fences with some).
   * Cold path (metrics scrape, summary, log): allocates.
   */
  mostUntracked(limit: number): { fenceId: string; pings: number }[] {
    const out: { fenceId: string; pings: number }[] = [];
    for (let f = 0; f < this.fenceCount; f++) {
      const n = Atomics.load(this.untracked, f);
      if (n > 0 && !this.isRemoved(f)) out.push({ fenceId: this.fenceId(f), pings: n });
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
    if (bands !== null && index < this.baseFenceCount) return bands.containsAt(index, q);
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
    if (bands !== null && index < this.baseFenceCount) return bands.segmentTouchesAt(index, this.q);
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
    if (this.complianceCount === 0) return false;
    const q = this.q;
    const lon = q[Q_X]!;
    const lat = q[Q_Y]!;
    const marginM = q[Q_LIMIT_M]!;
    // Most pings are in cells no compliance box reaches: answered without the tree.
    let grid = this.complianceGrid;
    if (grid === null || grid.marginM !== marginM) grid = this.buildComplianceGrid(marginM);
    if (!grid.mayBeNear(lon, lat)) return false;
    const dLat = marginM / M_PER_DEG;
    const cosLat = Math.cos(lat * RAD_PER_DEG);
    // Near the poles a metre spans any longitude: widen to the whole range.
    const dLon = cosLat > 1e-6 ? marginM / (M_PER_DEG * cosLat) : 360;
    q[Q_MIN_X] = lon - dLon;
    q[Q_MIN_X + 1] = lat - dLat;
    q[Q_MIN_X + 2] = lon + dLon;
    q[Q_MIN_X + 3] = lat + dLat;
    // A compliance fence of the full build removed by an edit still counts here (its pings travel COMPLIANCE) until
    // the next full build: the lane decision errs towards keeping.
    if (this.complianceTree !== null && this.complianceTree.anyInBox(q, Q_MIN_X)) return true;
    return this.appendedComplianceTree !== null && this.appendedComplianceTree.anyInBox(q, Q_MIN_X);
  }

  /** This thread's compliance grid for `marginM` over both compliance trees' boxes (first use, or a new margin). */
  private buildComplianceGrid(marginM: number): ComplianceGrid {
    const boxes: Float64Array[] = [];
    if (this.complianceTree !== null) boxes.push(this.complianceTree.itemBoxes());
    if (this.appendedComplianceTree !== null) boxes.push(this.appendedComplianceTree.itemBoxes());
    this.complianceGrid = new ComplianceGrid(boxes, marginM);
    return this.complianceGrid;
  }
}
