/**
 * Per-thread horizontal bands over each polygon fence's edges: the exact tests read only the edges whose latitude
 * range meets the query's, instead of every edge of every ring.
 *
 * A fence's box [minY, maxY] is cut into B equal bands (B about edges / EDGES_PER_BAND). Each band lists the edges
 * (by the pair index of their first vertex; rings store their closing vertex, so an edge is vertices a, a + 1)
 * whose closed latitude range [min(ay, by), max(ay, by)] meets the band. `bandOf` is monotone in y, so an edge
 * whose range holds y is listed in y's band. An edge whose range does not hold y cannot straddle y, start at height
 * y or be a horizontal edge at y: in containsRings it changes nothing. So the banded tests return exactly what the
 * full loops in geometry.ts return (the same boundary rule), from a fraction of the edges.
 *
 * Built when a thread opens a store (plain ArrayBuffers derived from the shared vertices); about 1.4 Int32 cells
 * per edge. Queries are allocation-free.
 */
import {
  FENCE_FIRST_RING_I32,
  FENCE_FLAG_CIRCLE,
  FENCE_FLAGS_I32,
  FENCE_MAX_Y_F64,
  FENCE_MIN_Y_F64,
  FENCE_RING_COUNT_I32,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
} from '../shm/layout.js';
import { Q_X, Q_X0, Q_Y, Q_Y0, segmentTouchesRings } from './geometry.js';

/** Target edges per band (sets the band count of each fence). */
const EDGES_PER_BAND = 6;
/** Most bands per fence. */
const MAX_BANDS_PER_FENCE = 4096;

/** Edge bands of every polygon fence of one store (circles have none). */
export class RingBands {
  /** First band of fence f: bandBase[f] .. bandBase[f + 1]. */
  private readonly bandBase: Int32Array;
  /** Bands per unit of latitude for each fence (bandCount / (maxY - minY)); 0 for a fence of zero height. */
  private readonly bandsPerDeg: Float64Array;
  /** Edges of band b: edges[bandStart[b] .. bandStart[b + 1]] (vertex pair indices). */
  private readonly bandStart: Int32Array;
  private readonly edges: Int32Array;
  private readonly fenceF64: Float64Array;
  private readonly fenceI32: Int32Array;
  private readonly ringOffsets: Int32Array;
  private readonly vertices: Float64Array;

  /** Builds the bands of every polygon fence from the store's records, ring offsets and vertices. Allocates. */
  constructor(
    fenceF64: Float64Array,
    fenceI32: Int32Array,
    ringOffsets: Int32Array,
    vertices: Float64Array,
    fenceCount: number,
  ) {
    this.fenceF64 = fenceF64;
    this.fenceI32 = fenceI32;
    this.ringOffsets = ringOffsets;
    this.vertices = vertices;
    this.bandBase = new Int32Array(fenceCount + 1);
    this.bandsPerDeg = new Float64Array(fenceCount);
    let bands = 0;
    for (let f = 0; f < fenceCount; f++) {
      this.bandBase[f] = bands;
      const bi = f * FENCE_STRIDE_I32;
      if ((fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0) continue;
      const first = fenceI32[bi + FENCE_FIRST_RING_I32]!;
      const edgeCount = ringOffsets[first + fenceI32[bi + FENCE_RING_COUNT_I32]!]! - ringOffsets[first]!;
      const height =
        fenceF64[f * FENCE_STRIDE_F64 + FENCE_MAX_Y_F64]! - fenceF64[f * FENCE_STRIDE_F64 + FENCE_MIN_Y_F64]!;
      const count = height > 0 ? Math.min(MAX_BANDS_PER_FENCE, Math.max(1, Math.round(edgeCount / EDGES_PER_BAND))) : 1;
      this.bandsPerDeg[f] = height > 0 ? count / height : 0;
      bands += count;
    }
    this.bandBase[fenceCount] = bands;
    // Two passes over the edges: count per band, then fill.
    const counts = new Int32Array(bands + 1);
    this.forEachEdgeBand(fenceI32, ringOffsets, fenceCount, (band) => {
      counts[band]!++;
    });
    this.bandStart = new Int32Array(bands + 1);
    let total = 0;
    for (let b = 0; b < bands; b++) {
      this.bandStart[b] = total;
      total += counts[b]!;
    }
    this.bandStart[bands] = total;
    this.edges = new Int32Array(total);
    counts.set(this.bandStart);
    this.forEachEdgeBand(fenceI32, ringOffsets, fenceCount, (band, edge) => {
      this.edges[counts[band]!++] = edge;
    });
  }

  /** Calls visit(band, edge) for every (band, edge) pair of every polygon fence (build time only). */
  private forEachEdgeBand(
    fenceI32: Int32Array,
    ringOffsets: Int32Array,
    fenceCount: number,
    visit: (band: number, edge: number) => void,
  ): void {
    const v = this.vertices;
    for (let f = 0; f < fenceCount; f++) {
      const bi = f * FENCE_STRIDE_I32;
      if ((fenceI32[bi + FENCE_FLAGS_I32]! & FENCE_FLAG_CIRCLE) !== 0) continue;
      const first = fenceI32[bi + FENCE_FIRST_RING_I32]!;
      const ringEnd = first + fenceI32[bi + FENCE_RING_COUNT_I32]!;
      for (let r = first; r < ringEnd; r++) {
        const last = ringOffsets[r + 1]! - 1;
        for (let e = ringOffsets[r]!; e < last; e++) {
          const ay = v[e * 2 + 1]!;
          const by = v[e * 2 + 3]!;
          const lo = this.bandOf(f, ay < by ? ay : by);
          const hi = this.bandOf(f, ay < by ? by : ay);
          for (let b = lo; b <= hi; b++) visit(b, e);
        }
      }
    }
  }

  /**
   * Absolute band of latitude y in fence f, clamped to the fence's bands (monotone in y). Build time only: the
   * queries write the same expression out (a double passed to a call V8 does not inline is boxed).
   */
  private bandOf(f: number, y: number): number {
    const base = this.bandBase[f]!;
    const last = this.bandBase[f + 1]! - 1;
    const v = (y - this.fenceF64[f * FENCE_STRIDE_F64 + FENCE_MIN_Y_F64]!) * this.bandsPerDeg[f]!;
    // For v >= 0 truncation is floor; NaN (never stored) would land in the first band.
    return v <= 0 ? base : v >= last - base ? last : base + (v | 0);
  }

  /**
   * containsRings (geometry.ts) of the point in q[Q_X], q[Q_Y] in polygon fence f, reading only y's band.
   * Same result, same boundary rule. Allocation-free.
   */
  containsAt(f: number, q: Float64Array): boolean {
    const x = q[Q_X]!;
    const y = q[Q_Y]!;
    const vertices = this.vertices;
    const edges = this.edges;
    // bandOf(f, y), written out.
    const base = this.bandBase[f]!;
    const last = this.bandBase[f + 1]! - 1;
    const v = (y - this.fenceF64[f * FENCE_STRIDE_F64 + FENCE_MIN_Y_F64]!) * this.bandsPerDeg[f]!;
    const band = v <= 0 ? base : v >= last - base ? last : base + (v | 0);
    const end = this.bandStart[band + 1]!;
    let inside = false;
    for (let k = this.bandStart[band]!; k < end; k++) {
      const i = edges[k]! << 1;
      const ay = vertices[i + 1]!;
      const by = vertices[i + 3]!;
      const aAbove = ay > y;
      const bAbove = by > y;
      // The loop of containsRings, one edge at a time (edges of a band are not consecutive).
      if (aAbove !== bAbove) {
        const ax = vertices[i]!;
        const cross = (vertices[i + 2]! - ax) * (y - ay) - (x - ax) * (by - ay);
        // On the edge: closed boundary counts as inside.
        if (cross === 0) return true;
        if (cross > 0 === bAbove) inside = !inside;
      } else if (ay === y) {
        const ax = vertices[i]!;
        // On a vertex, or on a horizontal edge.
        if (ax === x) return true;
        if (by === y && ax < x !== vertices[i + 2]! < x) return true;
      }
    }
    return inside;
  }

  /**
   * segmentTouchesRings (geometry.ts) of the segment (q[Q_X0], q[Q_Y0]) - (q[Q_X], q[Q_Y]) and polygon fence f,
   * reading only the bands its latitude range meets (an edge may be read twice; the answer is the same). A segment
   * spanning more than two bands reads every edge once instead. Allocation-free.
   */
  segmentTouchesAt(f: number, seg: Float64Array): boolean {
    const px = seg[Q_X0]!;
    const py = seg[Q_Y0]!;
    const qx = seg[Q_X]!;
    const qy = seg[Q_Y]!;
    const minX = px < qx ? px : qx;
    const maxX = px < qx ? qx : px;
    const minY = py < qy ? py : qy;
    const maxY = py < qy ? qy : py;
    const b = f * FENCE_STRIDE_F64;
    // A segment beside the fence's latitude range touches no edge.
    if (maxY < this.fenceF64[b + FENCE_MIN_Y_F64]! || minY > this.fenceF64[b + FENCE_MAX_Y_F64]!) return false;
    const vertices = this.vertices;
    const edges = this.edges;
    // bandOf(f, minY) and bandOf(f, maxY), written out.
    const base = this.bandBase[f]!;
    const last = this.bandBase[f + 1]! - 1;
    const perDeg = this.bandsPerDeg[f]!;
    const v0 = (minY - this.fenceF64[b + FENCE_MIN_Y_F64]!) * perDeg;
    const v1 = (maxY - this.fenceF64[b + FENCE_MIN_Y_F64]!) * perDeg;
    const lo = v0 <= 0 ? base : v0 >= last - base ? last : base + (v0 | 0);
    const hi = v1 <= 0 ? base : v1 >= last - base ? last : base + (v1 | 0);
    if (hi - lo > 1) {
      // A long segment: edges spanning several bands would be read once per band.
      const bi = f * FENCE_STRIDE_I32;
      return segmentTouchesRings(
        vertices,
        this.ringOffsets,
        this.fenceI32[bi + FENCE_FIRST_RING_I32]!,
        this.fenceI32[bi + FENCE_RING_COUNT_I32]!,
        seg,
      );
    }
    const end = this.bandStart[hi + 1]!;
    for (let k = this.bandStart[lo]!; k < end; k++) {
      const i = edges[k]! << 1;
      const ax = vertices[i]!;
      const bx = vertices[i + 2]!;
      // Edges whose box misses the segment's box cannot touch it.
      if ((ax < minX && bx < minX) || (ax > maxX && bx > maxX)) continue;
      const ay = vertices[i + 1]!;
      const by = vertices[i + 3]!;
      if ((ay < minY && by < minY) || (ay > maxY && by > maxY)) continue;
      const d1 = (bx - ax) * (py - ay) - (px - ax) * (by - ay);
      const d2 = (bx - ax) * (qy - ay) - (qx - ax) * (by - ay);
      if ((d1 > 0 && d2 > 0) || (d1 < 0 && d2 < 0)) continue;
      const d3 = (qx - px) * (ay - py) - (ax - px) * (qy - py);
      const d4 = (qx - px) * (by - py) - (bx - px) * (qy - py);
      if ((d3 > 0 && d4 > 0) || (d3 < 0 && d4 < 0)) continue;
      // Not all collinear: they touch. All collinear: the boxes, which overlap here, settle it.
      return true;
    }
    return false;
  }
}
