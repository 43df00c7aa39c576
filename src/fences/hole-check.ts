/**
 * Validation of a polygon's holes: every hole vertex must lie inside (or on) its outer ring, and no hole edge may
 * cross an outer edge (a hole whose vertices are all inside can still cut through a concave outer ring). Tested one
 * vertex at a time against every outer edge this is (hole vertices) x (outer edges): 19 s for a 5 MB file of large
 * polygons. Here the outer ring's edges go into a flatbush index once; each hole vertex reads only the edges whose box
 * meets the ray from it towards +x (what the even-odd test needs), with the same per-edge rule and boundary rule as
 * `containsRings` (geometry.ts), and each hole edge only the outer edges whose box meets its own, tested with
 * geom-isec's segment intersection: about (E + H) log E for E outer edges and H hole vertices. The index, the
 * classification and the crossing test are ring-edges.ts's, shared with the ring validity checks.
 */
import { containsRings, Q_CELLS, Q_X, Q_Y } from './geometry.js';
import { classifyByEdges, edgeIndex, firstCrossing, INDEX_AT_TESTS, OUTSIDE } from './ring-edges.js';

/**
 * Why `hole` is not a valid hole of `outer` (a vertex outside it, or an edge crossing one of its edges), or null.
 * Both are flat closed rings [x0, y0, ..., x0, y0].
 */
export function holeProblem(outer: Float64Array, hole: Float64Array): string | null {
  const v = firstHoleVertexOutside(outer, hole);
  if (v >= 0) return `has a vertex outside its outer ring (position ${v})`;
  // Touching at a vertex, or a vertex of one lying on the other, is not a crossing.
  const crossing = firstCrossing(hole, outer);
  if (crossing !== null) return `crosses its outer ring (its edge from position ${crossing[0]})`;
  return null;
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
    if (classifyByEdges(outer, x, y, index.search(x, y, Math.max(x, maxX), y)) === OUTSIDE) return v;
  }
  return -1;
}
