/**
 * Ring validity at fence-load time (main thread or the loader thread; allocates per call): a ring may not cross
 * itself, the holes of one polygon may not overlap one another, and the parts of one MultiPolygon may not overlap.
 * Containment is even-odd over all rings of a fence (containsRings, geometry.ts), so where two parts or two holes
 * overlap the answer flips to its opposite, and a ring that crosses itself has an inside nobody drew.
 *
 * A ring crosses itself when two of its edges that are not neighbours properly cross (geom-isec's segment
 * intersection, exact: see ring-edges.ts), when it passes through one of its own points from one side to the other (a
 * vertex it visits twice, or a vertex lying on another of its edges), or when two of its edges run along each other (a
 * spike that doubles back, or an edge retraced later). It may touch itself at a point without crossing (a ring pinched
 * at a vertex, as the "inverted" rings of some GIS exports are): even-odd gives such a ring one inside, the union of
 * its loops. Repeated consecutive positions are skipped; fewer than 3 distinct positions is refused.
 *
 * Two regions (two holes of a polygon, two parts of a MultiPolygon) overlap when an edge of one properly crosses an
 * edge of the other, when edges of both run along each other with both insides on the same side (two equal parts),
 * when a vertex of one's outer ring lies strictly inside the other, or when the middle of an edge leaving a vertex
 * that lies on the other's boundary does. Touching at points, or along edges from opposite sides, is allowed, and so
 * is a part inside another part's hole (an island in a lake: inside none of its area). These tests find every
 * overlap of regions whose boundaries cross or share stretches; one that only passes through shared points (an edge
 * from a touching point entering the other region and leaving it through a vertex of that region, with no vertex
 * of either inside the other) is not looked for.
 *
 * Cost: only edges whose boxes meet are tested: a plain loop over the pairs of a ring of at most PLAIN_LOOP_MAX_EDGES
 * edges, a flatbush index of its edges above (about E log E for E edges); regions are compared only when their boxes
 * meet.
 */
import { intersectLineLine, IntersectionType } from '@thi.ng/geom-isec';
import Flatbush from 'flatbush';
import {
  edgeIndex,
  EXACT,
  firstCrossing,
  INDEX_AT_TESTS,
  INSIDE,
  ON_BOUNDARY,
  OUTSIDE,
  RingClassifier,
} from './ring-edges.js';
import type { PointClass } from './ring-edges.js';

/** Rings of at most this many edges pair their edges in a plain loop; larger ones through an edge index. */
const PLAIN_LOOP_MAX_EDGES = 64;
/** At most this many regions are paired in a plain loop; more go through an index of their boxes. */
const PLAIN_LOOP_MAX_REGIONS = 32;

/** pairFault: nothing wrong. */
const NO_FAULT = 0;
/** pairFault: the edges cross (properly, or where the ring passes through a shared point). */
const CROSS = 1;
/** pairFault: the edges run along each other. */
const RETRACE = 2;

// Edge boxes of the plain loop, [minX, minY, maxX, maxY] per edge (parse runs one fence at a time per thread).
const boxes = new Float64Array(PLAIN_LOOP_MAX_EDGES * 4);

// Reused operands of intersectLineLine (it reads them, never keeps them).
const A = [0, 0];
const B = [0, 0];
const C = [0, 0];
const D = [0, 0];

/**
 * Why `ring` (flat, closed [x0, y0, ..., x0, y0]) is not a simple ring, as a phrase to follow its name (`crosses
 * itself (edges from positions 3 and 17)`), or null. Positions are those of the input ring; an edge is named by its
 * first position.
 */
export function ringSelfProblem(ring: Float64Array): string | null {
  if (starShaped(ring)) return null;
  const n = ring.length / 2 - 1;
  let xy = ring;
  let positions: Int32Array | null = null;
  let m = n;
  for (let i = 0; i < n; i++) {
    if (ring[i * 2] === ring[i * 2 + 2] && ring[i * 2 + 1] === ring[i * 2 + 3]) {
      // Rare: a repeated position. Work on a copy without them, remembering where each vertex came from.
      positions = distinctPositions(ring);
      m = positions.length;
      xy = new Float64Array((m + 1) * 2);
      for (let t = 0; t < m; t++) {
        xy[t * 2] = ring[positions[t]! * 2]!;
        xy[t * 2 + 1] = ring[positions[t]! * 2 + 1]!;
      }
      xy[m * 2] = xy[0]!;
      xy[m * 2 + 1] = xy[1]!;
      break;
    }
  }
  if (m < 3) return `has ${m} distinct position${m === 1 ? '' : 's'}, at least 3 required`;
  const at = (t: number): number => (positions === null ? t : positions[t]!);

  // A spike: the edges either side of a vertex run back along each other.
  for (let t = 0; t < m; t++) {
    const p = t === 0 ? m - 1 : t - 1;
    const inX = xy[t * 2]! - xy[p * 2]!;
    const inY = xy[t * 2 + 1]! - xy[p * 2 + 1]!;
    const outX = xy[t * 2 + 2]! - xy[t * 2]!;
    const outY = xy[t * 2 + 3]! - xy[t * 2 + 1]!;
    if (inX * outY - inY * outX === 0 && inX * outX + inY * outY < 0) {
      return `doubles back on itself at position ${at(t)} (edges from positions ${at(p)} and ${at(t)} overlap)`;
    }
  }

  const found = m <= PLAIN_LOOP_MAX_EDGES ? firstFaultPlain(xy, m) : firstFaultIndexed(xy, m);
  if (found === null) return null;
  const [t, u, fault] = found;
  return fault === CROSS
    ? `crosses itself (edges from positions ${at(t)} and ${at(u)})`
    : `runs back along itself (edges from positions ${at(t)} and ${at(u)} overlap)`;
}

/**
 * Whether `ring` is star-shaped around the mean of its positions, turning one way once: every edge turns strictly
 * the same way around that point and the ring goes round it exactly once. Such a ring is simple (each edge stays in
 * its own wedge around the point), so most rings (convex ones, the synthetic cities' stars, circles) are settled in
 * one pass over their positions; false sends the ring to the full test.
 */
function starShaped(ring: Float64Array): boolean {
  const n = ring.length / 2 - 1;
  let cx = 0;
  let cy = 0;
  for (let i = 0; i < n; i++) {
    cx += ring[i * 2]!;
    cy += ring[i * 2 + 1]!;
  }
  cx /= n;
  cy /= n;
  let sign = 0;
  let turns = 0;
  let ax = ring[0]! - cx;
  let ay = ring[1]! - cy;
  for (let i = 1; i <= n; i++) {
    const bx = ring[i * 2]! - cx;
    const by = ring[i * 2 + 1]! - cy;
    const cross = ax * by - ay * bx;
    if (sign === 0) sign = cross > 0 ? 1 : -1;
    if (cross * sign <= 0) return false;
    // Turning counter-clockwise an edge crosses the line y = cy upwards only right of the point (clockwise:
    // downwards): the count of such crossings is how many times the ring goes round.
    if (sign > 0 ? ay < 0 && by >= 0 : ay >= 0 && by < 0) turns++;
    ax = bx;
    ay = by;
  }
  return turns === 1;
}

/** Positions of `ring` with each run of equal consecutive positions (the closing one included) kept once. */
function distinctPositions(ring: Float64Array): Int32Array {
  const n = ring.length / 2 - 1;
  const kept: number[] = [0];
  for (let i = 1; i < n; i++) {
    const last = kept[kept.length - 1]!;
    if (ring[i * 2] !== ring[last * 2] || ring[i * 2 + 1] !== ring[last * 2 + 1]) kept.push(i);
  }
  // Positions at the end equal to the first close the ring early.
  while (
    kept.length > 1 &&
    ring[kept[kept.length - 1]! * 2] === ring[0] &&
    ring[kept[kept.length - 1]! * 2 + 1] === ring[1]
  )
    kept.pop();
  return Int32Array.from(kept);
}

/** The lowest pair of non-neighbouring edges (t < u) of the m-edge ring `xy` with a fault, by a plain loop. */
function firstFaultPlain(xy: Float64Array, m: number): [number, number, number] | null {
  for (let e = 0; e < m; e++) {
    const ax = xy[e * 2]!;
    const ay = xy[e * 2 + 1]!;
    const bx = xy[e * 2 + 2]!;
    const by = xy[e * 2 + 3]!;
    boxes[e * 4] = ax < bx ? ax : bx;
    boxes[e * 4 + 1] = ay < by ? ay : by;
    boxes[e * 4 + 2] = ax < bx ? bx : ax;
    boxes[e * 4 + 3] = ay < by ? by : ay;
  }
  for (let t = 0; t < m - 2; t++) {
    const minX = boxes[t * 4]!;
    const minY = boxes[t * 4 + 1]!;
    const maxX = boxes[t * 4 + 2]!;
    const maxY = boxes[t * 4 + 3]!;
    // Edge m - 1 is edge 0's neighbour.
    const end = t === 0 ? m - 1 : m;
    for (let u = t + 2; u < end; u++) {
      if (boxes[u * 4]! > maxX || boxes[u * 4 + 2]! < minX) continue;
      if (boxes[u * 4 + 1]! > maxY || boxes[u * 4 + 3]! < minY) continue;
      const fault = pairFault(xy, m, t, u);
      if (fault !== NO_FAULT) return [t, u, fault];
    }
  }
  return null;
}

/** The lowest pair of non-neighbouring edges (t < u) of the m-edge ring `xy` with a fault, through an edge index. */
function firstFaultIndexed(xy: Float64Array, m: number): [number, number, number] | null {
  const index = edgeIndex(xy, m);
  for (let t = 0; t < m - 2; t++) {
    const ax = xy[t * 2]!;
    const ay = xy[t * 2 + 1]!;
    const bx = xy[t * 2 + 2]!;
    const by = xy[t * 2 + 3]!;
    const candidates = index.search(Math.min(ax, bx), Math.min(ay, by), Math.max(ax, bx), Math.max(ay, by));
    let best = -1;
    let bestFault = NO_FAULT;
    for (let k = 0; k < candidates.length; k++) {
      const u = candidates[k]!;
      // Lower edges were paired with this one on their own turn; neighbours share a vertex by construction.
      if (u < t + 2 || (t === 0 && u === m - 1) || (best >= 0 && u >= best)) continue;
      const fault = pairFault(xy, m, t, u);
      if (fault !== NO_FAULT) {
        best = u;
        bestFault = fault;
      }
    }
    if (best >= 0) return [t, best, bestFault];
  }
  return null;
}

/**
 * What is wrong with non-neighbouring edges t and u (t < u) of the m-edge ring `xy`, whose boxes meet: CROSS, RETRACE
 * or NO_FAULT.
 */
function pairFault(xy: Float64Array, m: number, t: number, u: number): number {
  const ax = xy[t * 2]!;
  const ay = xy[t * 2 + 1]!;
  const bx = xy[t * 2 + 2]!;
  const by = xy[t * 2 + 3]!;
  const cx = xy[u * 2]!;
  const cy = xy[u * 2 + 1]!;
  const dx = xy[u * 2 + 2]!;
  const dy = xy[u * 2 + 3]!;
  // One edge wholly on one side of the other's line: they cannot meet (most pairs whose boxes meet).
  const c1 = (bx - ax) * (cy - ay) - (cx - ax) * (by - ay);
  const d1 = (bx - ax) * (dy - ay) - (dx - ax) * (by - ay);
  if ((c1 > 0 && d1 > 0) || (c1 < 0 && d1 < 0)) return NO_FAULT;
  const a2 = (dx - cx) * (ay - cy) - (ax - cx) * (dy - cy);
  const b2 = (dx - cx) * (by - cy) - (bx - cx) * (dy - cy);
  if ((a2 > 0 && b2 > 0) || (a2 < 0 && b2 < 0)) return NO_FAULT;
  A[0] = ax;
  A[1] = ay;
  B[0] = bx;
  B[1] = by;
  C[0] = cx;
  C[1] = cy;
  D[0] = dx;
  D[1] = dy;
  const type = intersectLineLine(A, B, C, D, EXACT).type;
  if (type === IntersectionType.INTERSECT) return CROSS;
  if (type === IntersectionType.COINCIDENT || type === IntersectionType.COINCIDENT_NO_INTERSECT) {
    // On one line: run along each other when their extents overlap by more than a point.
    const alongX = Math.abs(bx - ax) >= Math.abs(by - ay);
    const lo1 = alongX ? Math.min(ax, bx) : Math.min(ay, by);
    const hi1 = alongX ? Math.max(ax, bx) : Math.max(ay, by);
    const lo2 = alongX ? Math.min(cx, dx) : Math.min(cy, dy);
    const hi2 = alongX ? Math.max(cx, dx) : Math.max(cy, dy);
    if (Math.min(hi1, hi2) > Math.max(lo1, lo2)) return RETRACE;
  }
  // Where the edges meet at an end, does the ring pass through from one side to the other? Each contact is seen at
  // the first position of some edge (an edge's last position is the next edge's first, paired on its own).
  const tp = t === 0 ? m - 1 : t - 1;
  const up = u === 0 ? m - 1 : u - 1;
  if (ax === cx && ay === cy) {
    // A vertex visited twice.
    return passesCross(xy, t, tp, t + 1, up, u + 1) ? CROSS : NO_FAULT;
  }
  if (strictlyWithin(ax, ay, cx, cy, dx, dy) && passesCross(xy, t, tp, t + 1, u, u + 1)) return CROSS;
  if (strictlyWithin(cx, cy, ax, ay, bx, by) && passesCross(xy, u, up, u + 1, t, t + 1)) return CROSS;
  return NO_FAULT;
}

/** Whether (px, py) lies on segment (ax, ay)-(bx, by), strictly between its ends. */
function strictlyWithin(px: number, py: number, ax: number, ay: number, bx: number, by: number): boolean {
  if ((bx - ax) * (py - ay) - (px - ax) * (by - ay) !== 0) return false;
  const d = (px - ax) * (bx - ax) + (py - ay) * (by - ay);
  return d > 0 && d < (bx - ax) * (bx - ax) + (by - ay) * (by - ay);
}

/**
 * Whether two passes of the ring through the point at vertex `v` cross there: one pass arrives from vertex `in1` and
 * leaves to `out1` (through v), the other comes from `in2` and goes to `out2` (through v, or along a straight edge
 * in2 - out2 that v lies on). They cross when the second pass's two directions lie on different sides of the first
 * pass's. A direction shared by both passes is an overlap, reported by the collinear test: not a crossing here.
 */
function passesCross(xy: Float64Array, v: number, in1: number, out1: number, in2: number, out2: number): boolean {
  const px = xy[v * 2]!;
  const py = xy[v * 2 + 1]!;
  const ux = xy[in1 * 2]! - px;
  const uy = xy[in1 * 2 + 1]! - py;
  const wx = xy[out1 * 2]! - px;
  const wy = xy[out1 * 2 + 1]! - py;
  const sx = xy[in2 * 2]! - px;
  const sy = xy[in2 * 2 + 1]! - py;
  const rx = xy[out2 * 2]! - px;
  const ry = xy[out2 * 2 + 1]! - py;
  if (sameDirection(sx, sy, ux, uy) || sameDirection(sx, sy, wx, wy)) return false;
  if (sameDirection(rx, ry, ux, uy) || sameDirection(rx, ry, wx, wy)) return false;
  return inSector(sx, sy, ux, uy, wx, wy) !== inSector(rx, ry, ux, uy, wx, wy);
}

function sameDirection(ax: number, ay: number, bx: number, by: number): boolean {
  return ax * by - ay * bx === 0 && ax * bx + ay * by > 0;
}

/** Whether direction (x, y) lies strictly inside the sector swept counter-clockwise from direction a to direction b. */
function inSector(x: number, y: number, ax: number, ay: number, bx: number, by: number): boolean {
  const ab = ax * by - ay * bx;
  const ap = ax * y - ay * x;
  const pb = x * by - y * bx;
  if (ab > 0) return ap > 0 && pb > 0;
  if (ab < 0) return ap > 0 || pb > 0;
  // a and b opposite: the half-plane left of a.
  return ap > 0;
}

/** How two regions were found to overlap (positions of the input rings; an edge is named by its first position). */
export interface RegionOverlap {
  /** The lower region's index. */
  readonly first: number;
  /** The higher region's index. */
  readonly second: number;
  /**
   * 'cross': edges cross; 'along': edges run along each other with both insides on the same side; 'vertex': a vertex
   * lies inside the other region; 'edge': an edge's middle does.
   */
  readonly kind: 'cross' | 'along' | 'vertex' | 'edge';
  /** The region whose ring shows it (for 'cross' and 'along', the higher region). */
  readonly region: number;
  /** Its ring (0 the outer ring). */
  readonly ring: number;
  /** The position: the vertex, or the first position of the edge. */
  readonly position: number;
  /** For 'cross' and 'along': the other region's ring. */
  readonly otherRing: number;
  /** For 'cross' and 'along': the first position of the other region's edge. */
  readonly otherPosition: number;
}

/**
 * The first pair of overlapping regions (lowest first, then lowest second) among `regions`, each an outer ring and
 * its holes (a hole alone is a region of one ring), every ring simple; null when none overlap.
 */
export function firstOverlap(regions: readonly (readonly Float64Array[])[]): RegionOverlap | null {
  const count = regions.length;
  if (count < 2) return null;
  const box = new Float64Array(count * 4);
  for (let r = 0; r < count; r++) ringBox(regions[r]![0]!, box, r);
  const index = count <= PLAIN_LOOP_MAX_REGIONS ? null : boxIndex(box, count);
  const classifiers = new Map<Float64Array, RingClassifier>();
  for (let i = 0; i < count - 1; i++) {
    let others: number[];
    if (index === null) {
      others = [];
      for (let j = i + 1; j < count; j++) others.push(j);
    } else {
      others = index
        .search(box[i * 4]!, box[i * 4 + 1]!, box[i * 4 + 2]!, box[i * 4 + 3]!)
        .filter((j) => j > i)
        .sort((a, b) => a - b);
    }
    for (const j of others) {
      if (!boxesMeet(box, i, j)) continue;
      const found = regionsOverlap(regions, i, j, classifiers);
      if (found !== null) return found;
    }
  }
  return null;
}

/** How regions i < j overlap, or null; their boxes meet. */
function regionsOverlap(
  regions: readonly (readonly Float64Array[])[],
  i: number,
  j: number,
  classifiers: Map<Float64Array, RingClassifier>,
): RegionOverlap | null {
  const a = regions[i]!;
  const b = regions[j]!;
  for (let rb = 0; rb < b.length; rb++) {
    for (let ra = 0; ra < a.length; ra++) {
      const crossing = firstCrossing(b[rb]!, a[ra]!);
      if (crossing !== null) {
        return {
          first: i,
          second: j,
          kind: 'cross',
          region: j,
          ring: rb,
          position: crossing[0],
          otherRing: ra,
          otherPosition: crossing[1],
        };
      }
    }
  }
  for (let rb = 0; rb < b.length; rb++) {
    for (let ra = 0; ra < a.length; ra++) {
      // A region's inside is left of its outer ring's edges when that ring turns counter-clockwise, right of a hole's.
      const shared = firstSameSideStretch(
        b[rb]!,
        (rb === 0) === turnsLeft(b[rb]!),
        a[ra]!,
        (ra === 0) === turnsLeft(a[ra]!),
      );
      if (shared !== null) {
        return {
          first: i,
          second: j,
          kind: 'along',
          region: j,
          ring: rb,
          position: shared[0],
          otherRing: ra,
          otherPosition: shared[1],
        };
      }
    }
  }
  return sampleInside(regions, j, i, classifiers) ?? sampleInside(regions, i, j, classifiers);
}

/** Whether `ring` turns counter-clockwise (positive signed area). */
function turnsLeft(ring: Float64Array): boolean {
  let twiceArea = 0;
  for (let k = 0; k + 3 < ring.length; k += 2) twiceArea += ring[k]! * ring[k + 3]! - ring[k + 2]! * ring[k + 1]!;
  return twiceArea > 0;
}

/**
 * The first edge of `a` that runs along an edge of `b` (on one line, overlapping by more than a point) with both
 * regions' insides on the same side of it, and that edge of `b`: [edge of a, edge of b], or null. `aLeft` / `bLeft`:
 * whether each region's inside lies left of its ring's edges.
 */
function firstSameSideStretch(
  a: Float64Array,
  aLeft: boolean,
  b: Float64Array,
  bLeft: boolean,
): [number, number] | null {
  const aEdges = a.length / 2 - 1;
  const bEdges = b.length / 2 - 1;
  const index = aEdges * bEdges < INDEX_AT_TESTS ? null : edgeIndex(b);
  for (let i = 0; i < aEdges; i++) {
    const ax = a[i * 2]!;
    const ay = a[i * 2 + 1]!;
    const bx = a[i * 2 + 2]!;
    const by = a[i * 2 + 3]!;
    const minX = Math.min(ax, bx);
    const minY = Math.min(ay, by);
    const maxX = Math.max(ax, bx);
    const maxY = Math.max(ay, by);
    const candidates = index === null ? null : index.search(minX, minY, maxX, maxY);
    const n = candidates === null ? bEdges : candidates.length;
    let best = -1;
    for (let k = 0; k < n; k++) {
      const e = candidates === null ? k : candidates[k]!;
      if (best >= 0 && e >= best) continue;
      const cx = b[e * 2]!;
      const cy = b[e * 2 + 1]!;
      const dx = b[e * 2 + 2]!;
      const dy = b[e * 2 + 3]!;
      if ((cx < minX && dx < minX) || (cx > maxX && dx > maxX)) continue;
      if ((cy < minY && dy < minY) || (cy > maxY && dy > maxY)) continue;
      if ((bx - ax) * (cy - ay) - (cx - ax) * (by - ay) !== 0) continue;
      if ((bx - ax) * (dy - ay) - (dx - ax) * (by - ay) !== 0) continue;
      const alongX = Math.abs(bx - ax) >= Math.abs(by - ay);
      const lo = alongX ? Math.max(minX, Math.min(cx, dx)) : Math.max(minY, Math.min(cy, dy));
      const hi = alongX ? Math.min(maxX, Math.max(cx, dx)) : Math.min(maxY, Math.max(cy, dy));
      if (hi <= lo) continue;
      const sameDirection = (bx - ax) * (dx - cx) + (by - ay) * (dy - cy) > 0;
      if (sameDirection === (aLeft === bLeft)) best = e;
    }
    if (best >= 0) return [i, best];
  }
  return null;
}

/**
 * A vertex of region `s`'s outer ring strictly inside region `o` (or, from a vertex on o's boundary, the middle of
 * an edge), as a RegionOverlap, or null.
 */
function sampleInside(
  regions: readonly (readonly Float64Array[])[],
  s: number,
  o: number,
  classifiers: Map<Float64Array, RingClassifier>,
): RegionOverlap | null {
  const ring = regions[s]![0]!;
  const vertices = ring.length / 2 - 1;
  const other = regions[o]!;
  const outer = other[0]!;
  let minX = Infinity;
  let minY = Infinity;
  let maxX = -Infinity;
  let maxY = -Infinity;
  for (let k = 0; k < outer.length; k += 2) {
    minX = Math.min(minX, outer[k]!);
    maxX = Math.max(maxX, outer[k]!);
    minY = Math.min(minY, outer[k + 1]!);
    maxY = Math.max(maxY, outer[k + 1]!);
  }
  const classify = (x: number, y: number): PointClass => {
    // Outside the other's box: outside it (most vertices, when only the boxes meet).
    if (x < minX || x > maxX || y < minY || y > maxY) return OUTSIDE;
    let inside = false;
    for (const r of other) {
      let c = classifiers.get(r);
      if (c === undefined) {
        c = new RingClassifier(r, vertices);
        classifiers.set(r, c);
      }
      const k = c.classify(x, y);
      if (k === ON_BOUNDARY) return ON_BOUNDARY;
      if (k === INSIDE) inside = !inside;
    }
    return inside ? INSIDE : OUTSIDE;
  };
  const first = s < o ? s : o;
  const second = s < o ? o : s;
  const found = (kind: 'vertex' | 'edge', position: number): RegionOverlap => ({
    first,
    second,
    kind,
    region: s,
    ring: 0,
    position,
    otherRing: -1,
    otherPosition: -1,
  });
  let previousOn = classify(ring[(vertices - 1) * 2]!, ring[(vertices - 1) * 2 + 1]!) === ON_BOUNDARY;
  for (let v = 0; v < vertices; v++) {
    const x = ring[v * 2]!;
    const y = ring[v * 2 + 1]!;
    const c = classify(x, y);
    if (c === INSIDE) return found('vertex', v);
    const on = c === ON_BOUNDARY;
    // Touching the other's boundary: the ring may leave that point on either side; the edge's middle tells.
    if (on || previousOn) {
      const p = v === 0 ? vertices - 1 : v - 1;
      if (classify((ring[p * 2]! + x) / 2, (ring[p * 2 + 1]! + y) / 2) === INSIDE) return found('edge', p);
    }
    previousOn = on;
  }
  return null;
}

/** Writes the box [minX, minY, maxX, maxY] of `ring` into `out` at slot `slot`. */
function ringBox(ring: Float64Array, out: Float64Array, slot: number): void {
  let minX = Infinity;
  let minY = Infinity;
  let maxX = -Infinity;
  let maxY = -Infinity;
  for (let k = 0; k < ring.length; k += 2) {
    if (ring[k]! < minX) minX = ring[k]!;
    if (ring[k]! > maxX) maxX = ring[k]!;
    if (ring[k + 1]! < minY) minY = ring[k + 1]!;
    if (ring[k + 1]! > maxY) maxY = ring[k + 1]!;
  }
  out[slot * 4] = minX;
  out[slot * 4 + 1] = minY;
  out[slot * 4 + 2] = maxX;
  out[slot * 4 + 3] = maxY;
}

function boxesMeet(box: Float64Array, i: number, j: number): boolean {
  return (
    box[j * 4]! <= box[i * 4 + 2]! &&
    box[j * 4 + 2]! >= box[i * 4]! &&
    box[j * 4 + 1]! <= box[i * 4 + 3]! &&
    box[j * 4 + 3]! >= box[i * 4 + 1]!
  );
}

function boxIndex(box: Float64Array, count: number): Flatbush {
  const index = new Flatbush(count);
  for (let r = 0; r < count; r++) index.add(box[r * 4]!, box[r * 4 + 1]!, box[r * 4 + 2]!, box[r * 4 + 3]!);
  index.finish();
  return index;
}
