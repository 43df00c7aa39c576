/**
 * Validation of a polygon's holes: every hole vertex must lie inside (or on) its outer ring. Tested one vertex at a
 * time against every outer edge this is (hole vertices) x (outer edges): 19 s for a 5 MB file of large polygons.
 * Here the outer ring's edges go into a flatbush index once, and each hole vertex reads only the edges whose box meets
 * the ray from it towards +x (what the even-odd test needs), with the same per-edge rule and boundary rule as
 * `containsRings` (geometry.ts): about (E log E + H log E) for E outer edges and H hole vertices.
 */
import Flatbush from 'flatbush';

/** Below this many edge tests the plain loop is faster than building an index. */
const INDEX_AT_TESTS = 65_536;

/**
 * Index of the first vertex (pair index) of `hole` outside `outer`, or -1 when every one is inside or on it. Both are
 * flat closed rings [x0, y0, ..., x0, y0].
 */
export function firstHoleVertexOutside(outer: Float64Array, hole: Float64Array): number {
  const edges = outer.length / 2 - 1;
  const vertices = hole.length / 2;
  if (edges * vertices < INDEX_AT_TESTS) {
    for (let v = 0; v < vertices; v++) {
      if (!insideByEdges(outer, hole[v * 2]!, hole[v * 2 + 1]!, null)) return v;
    }
    return -1;
  }
  const index = new Flatbush(edges);
  let maxX = -Infinity;
  for (let e = 0; e < edges; e++) {
    const ax = outer[e * 2]!;
    const ay = outer[e * 2 + 1]!;
    const bx = outer[e * 2 + 2]!;
    const by = outer[e * 2 + 3]!;
    index.add(Math.min(ax, bx), Math.min(ay, by), Math.max(ax, bx), Math.max(ay, by));
    if (ax > maxX) maxX = ax;
  }
  index.finish();
  for (let v = 0; v < vertices; v++) {
    const x = hole[v * 2]!;
    const y = hole[v * 2 + 1]!;
    // Edges left of x can neither cross the ray to +x nor hold the point.
    if (!insideByEdges(outer, x, y, index.search(x, y, Math.max(x, maxX), y))) return v;
  }
  return -1;
}

/**
 * Even-odd containment of (x, y) in `ring` over the edges listed (edge e joins vertices e and e + 1), or every edge
 * when `edges` is null; the closed boundary counts as inside, as in containsRings.
 */
function insideByEdges(ring: Float64Array, x: number, y: number, edges: readonly number[] | null): boolean {
  const n = edges === null ? ring.length / 2 - 1 : edges.length;
  let inside = false;
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
