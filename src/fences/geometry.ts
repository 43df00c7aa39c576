/**
 * Exact geometric predicates over packed Float64Array vertices (x = longitude, y = latitude, degrees).
 *
 * Boundary rule (the same everywhere): fences are closed sets. A point on an outer-ring edge or vertex, on a hole's
 * edge or vertex (holes are open), or at exactly `radiusM` from a circle's centre, is INSIDE. "On an edge" means the
 * orientation determinant `(bx - ax) * (y - ay) - (x - ax) * (by - ay)` is exactly 0 in double arithmetic for a
 * straddling edge, the point equals a vertex, or it lies on a horizontal edge; the crossing test uses the same
 * determinant, so the decision never disagrees with itself. A segment touching a fence (CROSS) follows the same rule.
 *
 * Edges are straight lines in the longitude/latitude plane (not great circles). Distances in metres use a local
 * equirectangular projection on a sphere of radius EARTH_RADIUS_M: exact enough for city-sized fences and radii up to
 * MAX_CIRCLE_RADIUS_M away from the poles.
 *
 * Every function here allocates nothing. The hot-path variants take the query point from a scratch Float64Array
 * (`Q_*` cells) instead of double arguments: a double passed to, or returned from, a call V8 does not inline is boxed
 * as a heap number, which is an allocation per call.
 */

/** Scratch cell: query point x (longitude). */
export const Q_X = 0;
/** Scratch cell: query point y (latitude). */
export const Q_Y = 1;
/** Scratch cell: segment start x (the previous ping's longitude). */
export const Q_X0 = 2;
/** Scratch cell: segment start y. */
export const Q_Y0 = 3;
/** Scratch cells: query box minX, minY, maxX, maxY. */
export const Q_MIN_X = 4;
/** Scratch cell: query box minY. */
export const Q_MIN_Y = 5;
/** Scratch cell: query box maxX. */
export const Q_MAX_X = 6;
/** Scratch cell: query box maxY. */
export const Q_MAX_Y = 7;
/** Scratch cell: a distance limit in metres. */
export const Q_LIMIT_M = 8;
/** Scratch cells in a query array. */
export const Q_CELLS = 9;

/** Mean Earth radius, metres (IUGG). */
export const EARTH_RADIUS_M = 6_371_008.8;
/** Metres per degree of latitude (and of longitude at the equator). */
export const M_PER_DEG = (EARTH_RADIUS_M * Math.PI) / 180;
/** Radians per degree. */
export const RAD_PER_DEG = Math.PI / 180;
/** Largest circle radius accepted, metres. */
export const MAX_CIRCLE_RADIUS_M = 100_000;
/** Largest |latitude| of a circle centre, degrees (the local projection degenerates at the poles). */
export const MAX_CIRCLE_ABS_LAT_DEG = 85;

/**
 * Even-odd containment of (x, y) in rings [firstRing, firstRing + ringCount) under the boundary rule above.
 * `ringOffsets[r]` is ring r's first vertex (pair index); each ring stores its closing vertex, so edges are
 * consecutive pairs. Valid GeoJSON (holes inside their outer ring, parts not overlapping) makes even-odd equal to
 * "inside an outer ring and not strictly inside one of its holes, in any part". The point is q[Q_X], q[Q_Y].
 */
export function containsRings(
  vertices: Float64Array,
  ringOffsets: Int32Array,
  firstRing: number,
  ringCount: number,
  q: Float64Array,
): boolean {
  const x = q[Q_X]!;
  const y = q[Q_Y]!;
  let inside = false;
  const ringEnd = firstRing + ringCount;
  for (let r = firstRing; r < ringEnd; r++) {
    const last = (ringOffsets[r + 1]! - 1) * 2;
    let i = ringOffsets[r]! * 2;
    let ax = vertices[i]!;
    let ay = vertices[i + 1]!;
    let aAbove = ay > y;
    // Each vertex is loaded and compared once: edge (a, b) reuses b as the next edge's a.
    for (i += 2; i <= last; i += 2) {
      const bx = vertices[i]!;
      const by = vertices[i + 1]!;
      const bAbove = by > y;
      // Most edges lie wholly above or below the point: one comparison rejects them.
      if (aAbove !== bAbove) {
        const cross = (bx - ax) * (y - ay) - (x - ax) * (by - ay);
        // On the edge: closed boundary counts as inside.
        if (cross === 0) return true;
        // The edge crosses the ray to +x exactly when the determinant has the sign of the edge's dy.
        if (cross > 0 === bAbove) inside = !inside;
      } else if (ay === y) {
        // On a vertex (local extremes are not caught by the straddle test).
        if (ax === x) return true;
        // On a horizontal edge.
        if (by === y && ax < x !== bx < x) return true;
      }
      ax = bx;
      ay = by;
      aAbove = bAbove;
    }
  }
  return inside;
}

/**
 * Circle containment, boundary included. `circle` holds [centreX, centreY, radiusM, metresPerDegreeX] from `at`;
 * the point is q[Q_X], q[Q_Y].
 */
export function containsCircle(circle: Float64Array, at: number, q: Float64Array): boolean {
  const dx = (q[Q_X]! - circle[at]!) * circle[at + 3]!;
  const dy = (q[Q_Y]! - circle[at + 1]!) * M_PER_DEG;
  const r = circle[at + 2]!;
  return dx * dx + dy * dy <= r * r;
}

/** Orientation determinant of c relative to the directed line a -> b (> 0: left). */
function orient(ax: number, ay: number, bx: number, by: number, cx: number, cy: number): number {
  return (bx - ax) * (cy - ay) - (cx - ax) * (by - ay);
}

/** True when closed segments p-q and a-b share a point. */
export function segmentsIntersect(
  px: number,
  py: number,
  qx: number,
  qy: number,
  ax: number,
  ay: number,
  bx: number,
  by: number,
): boolean {
  const d1 = orient(ax, ay, bx, by, px, py);
  const d2 = orient(ax, ay, bx, by, qx, qy);
  if ((d1 > 0 && d2 > 0) || (d1 < 0 && d2 < 0)) return false;
  const d3 = orient(px, py, qx, qy, ax, ay);
  const d4 = orient(px, py, qx, qy, bx, by);
  if ((d3 > 0 && d4 > 0) || (d3 < 0 && d4 < 0)) return false;
  if (d1 !== 0 || d2 !== 0 || d3 !== 0 || d4 !== 0) return true;
  // Collinear: intersect when the projections on both axes overlap.
  return (
    Math.max(px, qx) >= Math.min(ax, bx) &&
    Math.max(ax, bx) >= Math.min(px, qx) &&
    Math.max(py, qy) >= Math.min(ay, by) &&
    Math.max(ay, by) >= Math.min(py, qy)
  );
}

/** True when the segment (q[Q_X0], q[Q_Y0]) - (q[Q_X], q[Q_Y]) touches any edge of the rings. */
export function segmentTouchesRings(
  vertices: Float64Array,
  ringOffsets: Int32Array,
  firstRing: number,
  ringCount: number,
  seg: Float64Array,
): boolean {
  const px = seg[Q_X0]!;
  const py = seg[Q_Y0]!;
  const qx = seg[Q_X]!;
  const qy = seg[Q_Y]!;
  const minX = px < qx ? px : qx;
  const maxX = px < qx ? qx : px;
  const minY = py < qy ? py : qy;
  const maxY = py < qy ? qy : py;
  const ringEnd = firstRing + ringCount;
  for (let r = firstRing; r < ringEnd; r++) {
    const last = (ringOffsets[r + 1]! - 1) * 2;
    for (let i = ringOffsets[r]! * 2; i < last; i += 2) {
      const ax = vertices[i]!;
      const bx = vertices[i + 2]!;
      // Edges whose box misses the segment's box cannot touch it.
      if ((ax < minX && bx < minX) || (ax > maxX && bx > maxX)) continue;
      const ay = vertices[i + 1]!;
      const by = vertices[i + 3]!;
      if ((ay < minY && by < minY) || (ay > maxY && by > maxY)) continue;
      // segmentsIntersect, written out: a call with eight doubles would box them when not inlined.
      const d1 = (bx - ax) * (py - ay) - (px - ax) * (by - ay);
      const d2 = (bx - ax) * (qy - ay) - (qx - ax) * (by - ay);
      if ((d1 > 0 && d2 > 0) || (d1 < 0 && d2 < 0)) continue;
      const d3 = (qx - px) * (ay - py) - (ax - px) * (qy - py);
      const d4 = (qx - px) * (by - py) - (bx - px) * (qy - py);
      if ((d3 > 0 && d4 > 0) || (d3 < 0 && d4 < 0)) continue;
      // Not all collinear: they touch. All collinear: the boxes, which overlap here, settle it.
      return true;
    }
  }
  return false;
}

/** True when the segment (q[Q_X0], q[Q_Y0]) - (q[Q_X], q[Q_Y]) comes within the circle (see containsCircle). */
export function segmentTouchesCircle(circle: Float64Array, at: number, seg: Float64Array): boolean {
  const cx = circle[at]!;
  const cy = circle[at + 1]!;
  const radiusM = circle[at + 2]!;
  const mPerDegX = circle[at + 3]!;
  const px = seg[Q_X0]!;
  const py = seg[Q_Y0]!;
  const qx = seg[Q_X]!;
  const qy = seg[Q_Y]!;
  const ux = (px - cx) * mPerDegX;
  const uy = (py - cy) * M_PER_DEG;
  const dx = (qx - px) * mPerDegX;
  const dy = (qy - py) * M_PER_DEG;
  const len2 = dx * dx + dy * dy;
  let t = len2 > 0 ? -(ux * dx + uy * dy) / len2 : 0;
  t = t < 0 ? 0 : t > 1 ? 1 : t;
  const ex = ux + t * dx;
  const ey = uy + t * dy;
  return ex * ex + ey * ey <= radiusM * radiusM;
}

/** Distance in metres from (x, y) to the nearest edge of the rings (local projection at y); returns a double. */
export function distanceToRingsM(
  vertices: Float64Array,
  ringOffsets: Int32Array,
  firstRing: number,
  ringCount: number,
  x: number,
  y: number,
): number {
  const kx = M_PER_DEG * Math.cos(y * RAD_PER_DEG);
  let best = Infinity;
  const ringEnd = firstRing + ringCount;
  for (let r = firstRing; r < ringEnd; r++) {
    const last = (ringOffsets[r + 1]! - 1) * 2;
    for (let i = ringOffsets[r]! * 2; i < last; i += 2) {
      const ax = (vertices[i]! - x) * kx;
      const ay = (vertices[i + 1]! - y) * M_PER_DEG;
      const dx = (vertices[i + 2]! - x) * kx - ax;
      const dy = (vertices[i + 3]! - y) * M_PER_DEG - ay;
      const len2 = dx * dx + dy * dy;
      let t = len2 > 0 ? -(ax * dx + ay * dy) / len2 : 0;
      t = t < 0 ? 0 : t > 1 ? 1 : t;
      const ex = ax + t * dx;
      const ey = ay + t * dy;
      const d2 = ex * ex + ey * ey;
      // Keep the squared minimum; one sqrt at the end.
      if (d2 < best) best = d2;
    }
  }
  return Math.sqrt(best);
}

/** True when (q[Q_X], q[Q_Y]) is within q[Q_LIMIT_M] metres of an edge of the rings. Allocation-free. */
export function ringsWithinM(
  vertices: Float64Array,
  ringOffsets: Int32Array,
  firstRing: number,
  ringCount: number,
  q: Float64Array,
): boolean {
  const x = q[Q_X]!;
  const y = q[Q_Y]!;
  const limit2 = q[Q_LIMIT_M]! * q[Q_LIMIT_M]!;
  const kx = M_PER_DEG * Math.cos(y * RAD_PER_DEG);
  const ringEnd = firstRing + ringCount;
  for (let r = firstRing; r < ringEnd; r++) {
    const last = (ringOffsets[r + 1]! - 1) * 2;
    for (let i = ringOffsets[r]! * 2; i < last; i += 2) {
      const ax = (vertices[i]! - x) * kx;
      const ay = (vertices[i + 1]! - y) * M_PER_DEG;
      const dx = (vertices[i + 2]! - x) * kx - ax;
      const dy = (vertices[i + 3]! - y) * M_PER_DEG - ay;
      const len2 = dx * dx + dy * dy;
      let t = len2 > 0 ? -(ax * dx + ay * dy) / len2 : 0;
      t = t < 0 ? 0 : t > 1 ? 1 : t;
      const ex = ax + t * dx;
      const ey = ay + t * dy;
      // The first edge within the limit settles it.
      if (ex * ex + ey * ey <= limit2) return true;
    }
  }
  return false;
}

/** Metres per degree of longitude at latitude `latDeg`. */
export function metresPerDegreeX(latDeg: number): number {
  return M_PER_DEG * Math.cos(latDeg * RAD_PER_DEG);
}
