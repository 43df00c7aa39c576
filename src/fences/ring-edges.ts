/**
 * Edge machinery of the fence-load checks (hole-check.ts, ring-validity.ts; main thread or the loader thread, at load
 * time; allocates per call): a flatbush index of a ring's edges, a point classification (outside / on the boundary /
 * inside) that reads only the edges a ray query returns, and the first proper crossing between the edges of two rings,
 * tested with geom-isec's segment intersection. Rings are flat and closed, [x0, y0, ..., x0, y0]; edge e joins
 * positions e and e + 1.
 *
 * geom-isec's default epsilon (1e-6) is absolute: on lon/lat degrees it is a cross product in square degrees, so it
 * would call any two edges shorter than about 100 m parallel and never see them cross. Every call here passes
 * EXACT (0): a crossing is an intersection strictly inside both segments in double arithmetic.
 */
import { intersectLineLine, IntersectionType } from '@thi.ng/geom-isec';
import Flatbush from 'flatbush';

/** Below this many edge tests (edges x edges, or points x edges) the plain loop is faster than building an index. */
export const INDEX_AT_TESTS = 65_536;

/** geom-isec epsilon for segment tests: none (see the header). */
export const EXACT = 0;

/** classifyPoint: the point is outside the ring (or the even-odd region of several rings). */
export const OUTSIDE = -1;
/** classifyPoint: the point lies on an edge or a vertex. */
export const ON_BOUNDARY = 0;
/** classifyPoint: the point is strictly inside. */
export const INSIDE = 1;

/** Where a point lies: OUTSIDE, ON_BOUNDARY or INSIDE. */
export type PointClass = typeof OUTSIDE | typeof ON_BOUNDARY | typeof INSIDE;

/** A flatbush index of a closed ring's edges (edge e joins positions e and e + 1); `edgeCount` edges from the start. */
export function edgeIndex(ring: Float64Array, edgeCount: number = ring.length / 2 - 1): Flatbush {
  const index = new Flatbush(edgeCount);
  for (let e = 0; e < edgeCount; e++) {
    const ax = ring[e * 2]!;
    const ay = ring[e * 2 + 1]!;
    const bx = ring[e * 2 + 2]!;
    const by = ring[e * 2 + 3]!;
    index.add(Math.min(ax, bx), Math.min(ay, by), Math.max(ax, bx), Math.max(ay, by));
  }
  index.finish();
  return index;
}

/**
 * Even-odd classification of (x, y) against `ring` over the edges listed (every edge the ray from the point to +x can
 * meet), or over all edges when `edges` is null. The per-edge rule and the closed boundary are containsRings'
 * (geometry.ts), which walks every edge in ring order and so cannot take a subset.
 */
export function classifyByEdges(ring: Float64Array, x: number, y: number, edges: readonly number[] | null): PointClass {
  let inside = false;
  const n = edges === null ? ring.length / 2 - 1 : edges.length;
  for (let k = 0; k < n; k++) {
    const e = edges === null ? k : edges[k]!;
    const ax = ring[e * 2]!;
    const ay = ring[e * 2 + 1]!;
    const bx = ring[e * 2 + 2]!;
    const by = ring[e * 2 + 3]!;
    const aAbove = ay > y;
    const bAbove = by > y;
    if (aAbove !== bAbove) {
      const cross = (bx - ax) * (y - ay) - (x - ax) * (by - ay);
      if (cross === 0) return ON_BOUNDARY;
      if (cross > 0 === bAbove) inside = !inside;
    } else if (ay === y) {
      if (ax === x) return ON_BOUNDARY;
      if (by === y && ax < x !== bx < x) return ON_BOUNDARY;
    } else if (by === y && bx === x) {
      // The edge's second vertex is the point (the loop in containsRings meets it as the next edge's first).
      return ON_BOUNDARY;
    }
  }
  return inside ? INSIDE : OUTSIDE;
}

/**
 * A ring prepared for classifying many points: a plain loop over its edges for few points, a flatbush index of its
 * edges (built on first use past `plainQueries` classifications) otherwise.
 */
export class RingClassifier {
  /** The ring. */
  readonly ring: Float64Array;
  private readonly plainQueries: number;
  private queries = 0;
  private index: Flatbush | null = null;
  private maxX = -Infinity;

  /** `expectedPoints`: about how many points will be classified (sets whether an index pays). */
  constructor(ring: Float64Array, expectedPoints: number) {
    this.ring = ring;
    const edges = ring.length / 2 - 1;
    this.plainQueries = edges * expectedPoints < INDEX_AT_TESTS ? Infinity : 0;
  }

  /** Where (x, y) lies relative to the ring (closed boundary). */
  classify(x: number, y: number): PointClass {
    if (this.queries++ < this.plainQueries) return classifyByEdges(this.ring, x, y, null);
    if (this.index === null) {
      this.index = edgeIndex(this.ring);
      for (let i = 0; i < this.ring.length; i += 2) if (this.ring[i]! > this.maxX) this.maxX = this.ring[i]!;
    }
    // Edges left of x can neither cross the ray to +x nor hold the point.
    return classifyByEdges(this.ring, x, y, this.index.search(x, y, Math.max(x, this.maxX), y));
  }
}

// Reused operands of intersectLineLine (it reads them, never keeps them).
const A = [0, 0];
const B = [0, 0];
const C = [0, 0];
const D = [0, 0];

/**
 * Whether segments (ax, ay)-(bx, by) and (cx, cy)-(dx, dy) properly cross: one point strictly inside both (geom-isec
 * IntersectionType.INTERSECT, exact). Touching at an end, or a collinear overlap, is not a crossing.
 */
function segmentsCross(
  ax: number,
  ay: number,
  bx: number,
  by: number,
  cx: number,
  cy: number,
  dx: number,
  dy: number,
): boolean {
  A[0] = ax;
  A[1] = ay;
  B[0] = bx;
  B[1] = by;
  C[0] = cx;
  C[1] = cy;
  D[0] = dx;
  D[1] = dy;
  return intersectLineLine(A, B, C, D, EXACT).type === IntersectionType.INTERSECT;
}

/**
 * The first edge of `a` (lowest start position) that properly crosses an edge of `b`, with the lowest such edge of
 * `b`: [edge of a, edge of b], or null. Pass `bIndex` (edgeIndex(b)) when one is at hand; without it a plain loop is
 * used below INDEX_AT_TESTS edge pairs and an index of `b` is built above.
 */
export function firstCrossing(
  a: Float64Array,
  b: Float64Array,
  bIndex: Flatbush | null = null,
): [number, number] | null {
  const aEdges = a.length / 2 - 1;
  const bEdges = b.length / 2 - 1;
  const index = bIndex ?? (aEdges * bEdges < INDEX_AT_TESTS ? null : edgeIndex(b));
  for (let i = 0; i < aEdges; i++) {
    const cx = a[i * 2]!;
    const cy = a[i * 2 + 1]!;
    const dx = a[i * 2 + 2]!;
    const dy = a[i * 2 + 3]!;
    const minX = Math.min(cx, dx);
    const minY = Math.min(cy, dy);
    const maxX = Math.max(cx, dx);
    const maxY = Math.max(cy, dy);
    const candidates = index === null ? null : index.search(minX, minY, maxX, maxY);
    const n = candidates === null ? bEdges : candidates.length;
    let best = -1;
    for (let k = 0; k < n; k++) {
      const e = candidates === null ? k : candidates[k]!;
      if (best >= 0 && e >= best) continue;
      const ex = b[e * 2]!;
      const ey = b[e * 2 + 1]!;
      const fx = b[e * 2 + 2]!;
      const fy = b[e * 2 + 3]!;
      // Boxes apart: no crossing (geom-isec would allocate a result to say so).
      if ((ex < minX && fx < minX) || (ex > maxX && fx > maxX)) continue;
      if ((ey < minY && fy < minY) || (ey > maxY && fy > maxY)) continue;
      if (segmentsCross(ex, ey, fx, fy, cx, cy, dx, dy)) best = e;
    }
    if (best >= 0) return [i, best];
  }
  return null;
}
