/**
 * What every generation over one store region shares, derived once per thread: the full build's ids, tags and expiry
 * times, its flatbush views, and this thread's grid and edge bands over its fences. A live edit publishes a new
 * generation over the same region; a thread opening it finds the region's base here (by the region's random
 * identity) instead of deriving it again, so opening an edit generation costs only what the edit changed.
 */
import {
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
  fenceStoreSections,
  LAYOUT_VERSION,
} from '../shm/layout.js';
import { BoxTree } from './box-tree.js';
import { FenceGrid } from './fence-grid.js';
import { regionSections, type RegionSections } from './fence-record.js';
import { RingBands } from './ring-bands.js';

/** Bases kept per thread (a reload's old and new region, and room for one more). */
const KEPT_BASES = 4;

/** The region's sections at capacity: any generation's views are prefixes of these. */
function capacityViews(buffer: SharedArrayBuffer, header: Int32Array): { views: RegionSections; metaByte: number } {
  const fenceCapacity = header[FSTORE_FENCE_CAPACITY_I32]!;
  const ringCapacity = header[FSTORE_RING_CAPACITY_I32]!;
  const vertexCapacity = header[FSTORE_VERTEX_CAPACITY_I32]!;
  const s = fenceStoreSections(fenceCapacity, ringCapacity, vertexCapacity, header[FSTORE_META_BYTES_I32]!);
  if (s.totalBytes !== buffer.byteLength) throw new RangeError('fence store region size does not match its header');
  return { views: regionSections(buffer, s, fenceCapacity, ringCapacity, vertexCapacity), metaByte: s.metaByte };
}

/** One thread's derivation of a region's full build (see the file comment). */
export class StoreBase {
  /** The region's identity. */
  readonly baseId: number;
  /** Generation of the full build. */
  readonly generation: number;
  /** Fences of the full build. */
  readonly fenceCount: number;
  /** Compliance fences of the full build. */
  readonly complianceCount: number;
  /** Fence records the region has room for. */
  readonly fenceCapacity: number;
  /** Rings the region has room for. */
  readonly ringCapacity: number;
  /** Vertices the region has room for. */
  readonly vertexCapacity: number;
  /** Views of the sections at capacity. */
  readonly region: RegionSections;
  /** Ids of the full build's fences. */
  readonly ids: readonly string[];
  /** Tags of the full build's fences (frozen). */
  readonly tagLists: readonly (readonly string[])[];
  /** Fence index by id, full build. */
  readonly idToIndex: ReadonlyMap<string, number>;
  /** Expiry time by fence index (only fences that expire), epoch ms. */
  readonly expiresAtMs: ReadonlyMap<number, number>;
  /** Traversal view of the full build's index (null when it had no fences). */
  readonly tree: BoxTree | null;
  /** Traversal view of the full build's compliance index (null when it had none). */
  readonly complianceTree: BoxTree | null;
  /** This thread's grid over the full build's boxes, or null. */
  readonly grid: FenceGrid | null;
  /** This thread's edge bands over the full build's polygons, or null. */
  readonly bands: RingBands | null;

  private constructor(
    buffer: SharedArrayBuffer,
    indexBuffer: SharedArrayBuffer | null,
    complianceIndexBuffer: SharedArrayBuffer | null,
    useGrid: boolean,
    useBands: boolean,
  ) {
    const header = new Int32Array(buffer, 0, FSTORE_HEADER_BYTES / 4);
    if (Atomics.load(header, FSTORE_MAGIC_I32) !== FSTORE_MAGIC)
      throw new RangeError('not a fence store region (bad magic)');
    if (header[FSTORE_VERSION_I32] !== LAYOUT_VERSION)
      throw new RangeError('fence store region has another layout version');
    this.baseId = StoreBase.idOf(header);
    this.generation = header[FSTORE_GENERATION_I32]!;
    this.fenceCount = header[FSTORE_FENCE_COUNT_I32]!;
    this.complianceCount = header[FSTORE_COMPLIANCE_COUNT_I32]!;
    this.fenceCapacity = header[FSTORE_FENCE_CAPACITY_I32]!;
    this.ringCapacity = header[FSTORE_RING_CAPACITY_I32]!;
    this.vertexCapacity = header[FSTORE_VERTEX_CAPACITY_I32]!;
    const ringCount = header[FSTORE_RING_COUNT_I32]!;
    const vertexCount = header[FSTORE_VERTEX_COUNT_I32]!;
    if (this.fenceCount > this.fenceCapacity || ringCount > this.ringCapacity || vertexCount > this.vertexCapacity) {
      throw new RangeError('fence store header counts exceed its capacities');
    }
    const { views, metaByte } = capacityViews(buffer, header);
    this.region = views;
    const metaBytes = header[FSTORE_META_BYTES_I32]!;
    // TextDecoder refuses views over shared memory: copy the blob once.
    const metaCopy = new Uint8Array(metaBytes);
    metaCopy.set(new Uint8Array(buffer, metaByte, metaBytes));
    const meta = JSON.parse(new TextDecoder().decode(metaCopy)) as {
      ids: string[];
      tags: string[][];
      expires?: [number, number][];
    };
    this.ids = meta.ids;
    this.tagLists = meta.tags.map((t) => Object.freeze(t));
    this.idToIndex = new Map(meta.ids.map((id, i) => [id, i]));
    this.expiresAtMs = new Map(meta.expires ?? []);
    this.tree = indexBuffer === null ? null : new BoxTree(indexBuffer);
    this.complianceTree = complianceIndexBuffer === null ? null : new BoxTree(complianceIndexBuffer);
    if (this.fenceCount > 0 && this.tree?.size !== this.fenceCount)
      throw new RangeError('fence index size does not match the store');
    if (this.complianceCount > 0 && this.complianceTree?.size !== this.complianceCount) {
      throw new RangeError('compliance index size does not match the store');
    }
    const r = this.region;
    this.grid = useGrid ? FenceGrid.build(r.fenceF64, this.fenceCount) : null;
    this.bands = useBands ? new RingBands(r.fenceF64, r.fenceI32, r.ringOffsets, r.vertices, this.fenceCount) : null;
  }

  /** The identity written in a region's header. */
  static idOf(header: Int32Array): number {
    return header[FSTORE_BASE_ID_HI_I32]! * 0x80000000 + header[FSTORE_BASE_ID_LO_I32]!;
  }

  private static readonly cache = new Map<string, StoreBase>();

  /**
   * This thread's base for the region (derived now, or found from an earlier open of a generation over it). Throws a
   * RangeError for a region that is not a valid store or does not carry `baseId`.
   */
  static open(
    baseId: number,
    buffer: SharedArrayBuffer,
    indexBuffer: SharedArrayBuffer | null,
    complianceIndexBuffer: SharedArrayBuffer | null,
    useGrid: boolean,
    useBands: boolean,
  ): StoreBase {
    const key = `${baseId}/${useGrid ? 1 : 0}${useBands ? 1 : 0}`;
    const known = StoreBase.cache.get(key);
    if (known !== undefined) return known;
    const base = new StoreBase(buffer, indexBuffer, complianceIndexBuffer, useGrid, useBands);
    if (base.baseId !== baseId) throw new RangeError('fence store descriptor does not match its region (identity)');
    StoreBase.cache.set(key, base);
    while (StoreBase.cache.size > KEPT_BASES) StoreBase.cache.delete(StoreBase.cache.keys().next().value!);
    return base;
  }
}
