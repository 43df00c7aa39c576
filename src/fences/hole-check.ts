/**
 * Validation of a polygon's holes: every hole vertex must lie inside (or on) its outer ring, and no hole edge may
 * cross an outer edge (a hole whose vertices are all inside can still cut through a concave outer ring). Tested one
 * vertex at a time against every outer edge this is (hole vertices) x (outer edges): 19 s for a 5 MB file of large
 * polygons. Here the outer ring's edges go into a flatbush index once; each hole vertex reads only the edges whose box
 * meets the ray from it towards +x (what the even-odd test needs), with the same per-edge rule and boundary rule as
 * `containsRings` (geometry.ts), and each hole edge only the outer edges whose box meets its own, tested with
 * geom-isec's segment intersection: about (E + H) log E for E outer edges and H hole vertices.
 */
import { intersectLineLine, IntersectionType } from '@thi.ng/geom-isec';
import Flatbush from 'flatbush';
import { containsRings, Q_CELLS, Q_X, Q_Y } from './geometry.js';

/** Below this many edge tests the plain loop is faster than building an index. */
const INDEX_AT_TESTS = 65_536;

/**
 * Why `hole` is not a valid hole of `outer` (a vertex outside it, or an edge crossing one of its edges), or null.
 * Both are flat closed rings [x0, y0, ..., x0, y0].
 */
export function holeProblem(outer: Float64Array, hole: Float64Array): string | null {
  const v = firstHoleVertexOutside(outer, hole);
  if (v >= 0) return `has a vertex outside its outer ring (position ${v})`;
  const e = firstHoleEdgeCrossing(outer, hole);
  if (e >= 0) return `crosses its outer ring (its edge from position ${e})`;
  return null;
}

/**
 * Index of the first edge of `hole` (the pair index of its first vertex) that properly crosses an edge of `outer`
 * (touching at a vertex, or a vertex of one lying on the other, is not a crossing), or -1.
 */
function firstHoleEdgeCrossing(outer: Float64Array, hole: Float64Array): number {
  const edges = outer.length / 2 - 1;
  const holeEdges = hole.length / 2 - 1;
  const index = edges * holeEdges < INDEX_AT_TESTS ? null : edgeIndex(outer);
  const a = [0, 0];
  const b = [0, 0];
  const c = [0, 0];
  const d = [0, 0];
  for (let h = 0; h < holeEdges; h++) {
    c[0] = hole[h * 2]!;
    c[1] = hole[h * 2 + 1]!;
    d[0] = hole[h * 2 + 2]!;
    d[1] = hole[h * 2 + 3]!;
    const candidates =
      index === null
        ? null
        : index.search(Math.min(c[0], d[0]), Math.min(c[1], d[1]), Math.max(c[0], d[0]), Math.max(c[1], d[1]));
    const n = candidates === null ? edges : candidates.length;
    for (let k = 0; k < n; k++) {
      const e = candidates === null ? k : candidates[k]!;
      a[0] = outer[e * 2]!;
      a[1] = outer[e * 2 + 1]!;
      b[0] = outer[e * 2 + 2]!;
      b[1] = outer[e * 2 + 3]!;
      if (intersectLineLine(a, b, c, d).type === IntersectionType.INTERSECT) return h;
    }
  }
  return -1;
}

/** A flatbush index of a closed ring's edges (edge e joins vertices e and e + 1). */
function edgeIndex(ring: Float64Array): Flatbush {
  const edges = ring.length / 2 - 1;
  const index = new Flatbush(edges);
  for (let e = 0; e < edges; e++) {
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
 * Index of the first vertex (pair index) of `hole` outside `outer`, or -1 when every one is inside or on it. Both are
 * flat closed rings [x0, y0, ..., x0, y0].
 */
export function firstHoleVertexOutside(outer: Float64Array, hole: Float64Array): number {
  const edges = outer.length / 2 - 1;
  const vertices = hole.length / 2;
  if (edges * vertices < INDEX_AT_TESTS) {
    // Small enough for the exact test containment itself uses.
    const offsets = Int32Array.of(0, edges + 1);
    const q = new Float64Array(Q_CELLS);
    for (let v = 0; v < vertices; v++) {
      q[Q_X] = hole[v * 2]!;
      q[Q_Y] = hole[v * 2 + 1]!;
      if (!containsRings(outer, offsets, 0, 1, q)) return v;
    }
    return -1;
  }
  const index = edgeIndex(outer);
  let maxX = -Infinity;
  for (let e = 0; e < edges; e++) if (outer[e * 2]! > maxX) maxX = outer[e * 2]!;
  for (let v = 0; v < vertices; v++) {
    const x = hole[v * 2]!;
    const y = hole[v * 2 + 1]!;
    // Edges left of x can neither cross the ray to +x nor hold the point.
    if (!insideByEdges(outer, x, y, index.search(x, y, Math.max(x, maxX), y))) return v;
  }
  return -1;
}

/**
 * Even-odd containment of (x, y) in `ring` over the edges listed (edge e joins vertices e and e + 1: every edge the
 * ray from the point to +x can meet); the per-edge rule and the closed boundary are containsRings' (geometry.ts),
 * which walks every edge in ring order and so cannot take a subset.
 */
function insideByEdges(ring: Float64Array, x: number, y: number, edges: readonly number[]): boolean {
  let inside = false;
  for (let k = 0; k < edges.length; k++) {
    const e = edges[k]!;
    const ax = ring[e * 2]!;
    const ay = ring[e * 2 + 1]!;
    const bx = ring[e * 2 + 2]!;
    const by = ring[e * 2 + 3]!;
    const aAbove = ay > y;
    const bAbove = by > y;
    if (aAbove !== bAbove) {
      const cross = (bx - ax) * (y - ay) - (x - ax) * (by - ay);
      if (cross === 0) return true;
      if (cross > 0 === bAbove) inside = !inside;
    } else if (ay === y) {
      if (ax === x) return true;
      if (by === y && ax < x !== bx < x) return true;
    } else if (by === y && bx === x) {
      // The edge's second vertex is the point (the loop in containsRings meets it as the next edge's first).
      return true;
    }
  }
  return inside;
}
