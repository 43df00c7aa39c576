/**
 * Ring validity at load: a ring that crosses itself (properly, through a shared vertex, or by doubling back) is
 * refused with the positions of the edges; two holes of a polygon that cross or nest, and MultiPolygon parts that
 * cross or lie one inside another, are refused; a concave ring, a ring pinched at a vertex, touching parts and an
 * island in a lake are accepted. Rings are a few metres to a kilometre wide (geom-isec's absolute epsilon would hide
 * their crossings). Also: every ring the synthetic city generates passes the full test, not only the quick one, and
 * any proper crossing found by brute force on random rings is refused.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { FenceValidationError, parseFence, parseFences } from '../../src/fences/parse.js';
import { ringSelfProblem } from '../../src/fences/ring-validity.js';
import { generateSyntheticCity } from '../../src/fences/synthetic-city.js';

/** Grid units to lon/lat near Berlin: one unit is 0.0001 degrees (about 7 m east, 11 m north). */
const UNIT_DEG = 0.0001;
const place = (pts: number[][]): number[][] => pts.map(([x, y]) => [13.4 + x! * UNIT_DEG, 52.5 + y! * UNIT_DEG]);
/** A closed ring from grid points (the first repeated at the end). */
const ring = (pts: number[][]): number[][] => place([...pts, pts[0]!]);
/** The axis-aligned square [x0, x1] x [y0, y1] as a closed counter-clockwise ring. */
const rect = (x0: number, y0: number, x1: number, y1: number): number[][] =>
  ring([
    [x0, y0],
    [x1, y0],
    [x1, y1],
    [x0, y1],
  ]);

const polygon = (coordinates: number[][][]): Record<string, unknown> => ({
  type: 'Feature',
  properties: { id: 'f' },
  geometry: { type: 'Polygon', coordinates },
});
const multi = (coordinates: number[][][][]): Record<string, unknown> => ({
  type: 'Feature',
  properties: { id: 'f' },
  geometry: { type: 'MultiPolygon', coordinates },
});

/** The reason parseFence gives for `feature` (exactly one problem expected), or null when it is accepted. */
function reason(feature: Record<string, unknown>): string | null {
  try {
    parseFence(feature);
    return null;
  } catch (err) {
    assert.ok(err instanceof FenceValidationError, String(err));
    assert.equal(err.errors.length, 1, err.message);
    return err.reason;
  }
}

test('a bow-tie ring is refused, naming the crossing edges', () => {
  const bowTie = ring([
    [0, 0],
    [4, 4],
    [4, 0],
    [0, 4],
  ]);
  assert.equal(reason(polygon([bowTie])), 'polygon ring 0 crosses itself (edges from positions 0 and 2)');
  // The same in a file: the feature is named.
  assert.throws(
    () => parseFences({ type: 'FeatureCollection', features: [polygon([rect(0, 0, 1, 1)]), polygon([bowTie])] }),
    (e: unknown) =>
      e instanceof FenceValidationError &&
      e.message === 'feature 1: polygon ring 0 crosses itself (edges from positions 0 and 2)',
  );
});

test('concave rings are accepted, small and large (the plain loop and the edge index)', () => {
  const u = ring([
    [0, 0],
    [3, 0],
    [3, 3],
    [2, 3],
    [2, 1],
    [1, 1],
    [1, 3],
    [0, 3],
  ]);
  assert.equal(reason(polygon([u])), null);
  // A comb of 100 teeth (401 positions): not star-shaped, so every edge pair that may meet is tested.
  const comb: number[][] = [[0, 0]];
  for (let t = 0; t < 100; t++) comb.push([2 * t + 1, 0], [2 * t + 1, 10], [2 * t + 2, 10], [2 * t + 2, 0]);
  comb.push([201, 0], [201, -1], [0, -1]);
  assert.equal(reason(polygon([ring(comb)])), null);
});

test('a spike that doubles back, and an edge retraced later, are refused', () => {
  const spike = ring([
    [0, 0],
    [2, 0],
    [2, 1],
    [3, 1],
    [2, 1],
    [2, 2],
    [0, 2],
  ]);
  assert.equal(
    reason(polygon([spike])),
    'polygon ring 0 doubles back on itself at position 3 (edges from positions 2 and 3 overlap)',
  );
  // Out along y = 0 to x = 3 and, later, back along part of it.
  const retraced = ring([
    [0, 0],
    [3, 0],
    [3, 2],
    [2, 2],
    [2, 0],
    [1, 0],
    [1, 2],
    [0, 2],
  ]);
  assert.equal(
    reason(polygon([retraced])),
    'polygon ring 0 runs back along itself (edges from positions 0 and 4 overlap)',
  );
  assert.equal(
    reason(
      polygon([
        ring([
          [0, 0],
          [0, 0],
          [1, 1],
          [1, 1],
        ]),
      ]),
    ),
    'polygon ring 0 has 2 distinct positions, at least 3 required',
  );
});

test('a ring pinched at a vertex is accepted; one that crosses itself through a shared vertex is refused', () => {
  // Two triangles meeting at (2, 2), the ring touching itself there.
  const hourglass = ring([
    [0, 0],
    [4, 0],
    [2, 2],
    [4, 4],
    [0, 4],
    [2, 2],
  ]);
  assert.equal(reason(polygon([hourglass])), null);
  // Straight through (2, 2) twice, the second pass across the first.
  const crossed = ring([
    [0, 0],
    [2, 2],
    [4, 4],
    [4, 0],
    [2, 2],
    [0, 4],
  ]);
  assert.equal(reason(polygon([crossed])), 'polygon ring 0 crosses itself (edges from positions 1 and 4)');
  // A vertex on another edge, the ring passing through it there.
  const tee = ring([
    [0, 0],
    [4, 0],
    [4, 4],
    [2, 4],
    [2, 0],
    [2, -2],
    [0, -2],
  ]);
  assert.equal(reason(polygon([tee])), 'polygon ring 0 crosses itself (edges from positions 0 and 4)');
  // The same vertex on that edge, the ring turning back: a touch.
  const touch = ring([
    [0, 0],
    [4, 0],
    [4, 4],
    [3, 4],
    [2, 0],
    [1, 4],
    [0, 4],
  ]);
  assert.equal(reason(polygon([touch])), null);
  // Repeated positions in a row are skipped; positions named are the input's.
  const repeated = ring([
    [0, 0],
    [0, 0],
    [4, 4],
    [4, 4],
    [4, 0],
    [0, 4],
  ]);
  assert.equal(reason(polygon([repeated])), 'polygon ring 0 crosses itself (edges from positions 0 and 4)');
});

test('holes that cross or nest are refused; holes touching at a vertex are accepted', () => {
  const outer = rect(0, 0, 10, 10);
  assert.equal(
    reason(polygon([outer, rect(1, 1, 5, 5), rect(3, 3, 7, 7)])),
    'polygon ring 2 (a hole) crosses ring 1, another hole (edges from positions 0 and 1)',
  );
  assert.equal(
    reason(polygon([outer, rect(1, 1, 8, 8), rect(3, 3, 5, 5)])),
    'polygon ring 2 (a hole) overlaps ring 1, another hole (position 0 of ring 2 lies inside ring 1)',
  );
  assert.equal(reason(polygon([outer, rect(1, 1, 4, 4), rect(4, 4, 8, 8)])), null);
  // A hole that crosses itself is named as such.
  assert.equal(
    reason(
      polygon([
        outer,
        ring([
          [1, 1],
          [3, 3],
          [3, 1],
          [1, 3],
        ]),
      ]),
    ),
    'polygon ring 1 crosses itself (edges from positions 0 and 2)',
  );
});

test('a hole crossing its outer ring is seen on a fence a few tens of metres wide', () => {
  const u = ring([
    [0, 0],
    [3, 0],
    [3, 3],
    [2, 3],
    [2, 1],
    [1, 1],
    [1, 3],
    [0, 3],
  ]);
  const across = ring([
    [0.5, 2],
    [0.5, 2.5],
    [2.5, 2.5],
    [2.5, 2],
  ]);
  assert.equal(
    reason(polygon([u, across])),
    'polygon ring 1 (a hole) crosses its outer ring (its edge from position 1)',
  );
});

test('MultiPolygon parts that cross, or lie one inside another, are refused', () => {
  assert.equal(
    reason(multi([[rect(0, 0, 2, 2)], [rect(1, 1, 3, 3)]])),
    'multipolygon parts 0 and 1 overlap (the edge from position 0 of part 1 ring 0 crosses the edge from position 1 of part 0 ring 0)',
  );
  assert.equal(
    reason(multi([[rect(0, 0, 10, 10)], [rect(20, 0, 22, 2)], [rect(2, 2, 4, 4)]])),
    'multipolygon parts 0 and 2 overlap (position 0 of part 2 ring 0 lies inside part 0)',
  );
  assert.equal(
    reason(multi([[rect(2, 2, 4, 4)], [rect(0, 0, 10, 10)]])),
    'multipolygon parts 0 and 1 overlap (position 0 of part 0 ring 0 lies inside part 1)',
  );
  // The same square twice: every position of each lies on the other.
  assert.equal(
    reason(multi([[rect(0, 0, 2, 2)], [rect(0, 0, 2, 2)]])),
    'multipolygon parts 0 and 1 overlap (the edge from position 0 of part 1 ring 0 runs along the edge from position 0 of part 0 ring 0, both parts on the same side)',
  );
  // Corners on the other's edges, none inside: the middle of an edge is.
  const diamond = ring([
    [5, 0],
    [10, 5],
    [5, 10],
    [0, 5],
  ]);
  assert.equal(
    reason(multi([[rect(0, 0, 10, 10)], [diamond]])),
    'multipolygon parts 0 and 1 overlap (the edge from position 3 of part 1 ring 0 runs inside part 0)',
  );
  // Partly in the other part's hole, partly over its area.
  assert.equal(
    reason(multi([[rect(0, 0, 10, 10), rect(2, 2, 8, 8)], [rect(4, 4, 9, 6)]])),
    'multipolygon parts 0 and 1 overlap (the edge from position 0 of part 1 ring 0 crosses the edge from position 1 of part 0 ring 1)',
  );
});

test('MultiPolygon parts touching at a vertex or along an edge, and an island in a lake, are accepted', () => {
  assert.equal(reason(multi([[rect(0, 0, 1, 1)], [rect(1, 1, 2, 2)]])), null);
  assert.equal(reason(multi([[rect(0, 0, 1, 1)], [rect(1, 0, 2, 1)]])), null);
  // A triangle whose apex lies on the middle of the square's right edge.
  const apex = ring([
    [1, 0.5],
    [2, 0],
    [2, 1],
  ]);
  assert.equal(reason(multi([[rect(0, 0, 1, 1)], [apex]])), null);
  assert.equal(reason(multi([[rect(0, 0, 10, 10), rect(2, 2, 8, 8)], [rect(4, 4, 6, 6)]])), null);
  // The island touching the lake's shore at a corner.
  assert.equal(reason(multi([[rect(0, 0, 10, 10), rect(2, 2, 8, 8)], [rect(2, 2, 6, 6)]])), null);
});

test('a 20,000-position circle with one crossing near its end is refused, naming the edges', () => {
  const n = 20_000;
  const pts: number[][] = [];
  for (let i = 0; i < n; i++) {
    const a = (i / n) * 2 * Math.PI;
    pts.push([13.4 + 0.01 * Math.cos(a), 52.5 + 0.006 * Math.sin(a)]);
  }
  assert.equal(reason(polygon([[...pts, pts[0]!]])), null);
  // Swapping positions 15,000 and 15,001 makes the edges from 14,999 and 15,001 cross (and nothing else).
  [pts[15_000], pts[15_001]] = [pts[15_001]!, pts[15_000]!];
  const t0 = performance.now();
  assert.equal(
    reason(polygon([[...pts, pts[0]!]])),
    'polygon ring 0 crosses itself (edges from positions 14999 and 15001)',
  );
  assert.ok(performance.now() - t0 < 5_000, 'the indexed test stays near-linear');
});

test('every ring of a synthetic city passes the full test, not only the star-shaped shortcut', () => {
  const city = generateSyntheticCity({ seed: 7, fenceCount: 2_000 });
  const parsed = parseFences(city);
  let rings = 0;
  for (const fence of parsed.fences) {
    for (const r of fence.rings) {
      // A repeated first position keeps the ring's shape but leaves the shortcut (it needs strict turns).
      const repeated = new Float64Array(r.length + 2);
      repeated.set(r.subarray(0, 2), 0);
      repeated.set(r, 2);
      assert.equal(ringSelfProblem(repeated), null);
      rings++;
    }
  }
  assert.ok(rings > 2_000, `rings ${rings}`);
});

test('random rings: every proper crossing that brute force finds is refused', () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.integer({ min: 0, max: 12 }), fc.integer({ min: 0, max: 12 })), {
        minLength: 3,
        maxLength: 90,
      }),
      (raw) => {
        // Integer positions: the brute-force orientation tests below are exact.
        const pts = raw.filter((p, i) => i === 0 || p[0] !== raw[i - 1]![0] || p[1] !== raw[i - 1]![1]);
        while (pts.length > 1 && pts[pts.length - 1]![0] === pts[0]![0] && pts[pts.length - 1]![1] === pts[0]![1])
          pts.pop();
        const m = pts.length;
        if (m < 4) return;
        const flat = new Float64Array((m + 1) * 2);
        pts.forEach(([x, y], i) => {
          flat[i * 2] = x;
          flat[i * 2 + 1] = y;
        });
        flat[m * 2] = pts[0]![0];
        flat[m * 2 + 1] = pts[0]![1];
        const orient = (a: number, b: number, c: number): number =>
          Math.sign(
            (flat[b * 2]! - flat[a * 2]!) * (flat[c * 2 + 1]! - flat[a * 2 + 1]!) -
              (flat[c * 2]! - flat[a * 2]!) * (flat[b * 2 + 1]! - flat[a * 2 + 1]!),
          );
        let crossing = false;
        for (let t = 0; t < m && !crossing; t++) {
          for (let u = t + 2; u < m; u++) {
            if (t === 0 && u === m - 1) continue;
            const o1 = orient(t, t + 1, u);
            const o2 = orient(t, t + 1, u + 1);
            const o3 = orient(u, u + 1, t);
            const o4 = orient(u, u + 1, t + 1);
            if (o1 * o2 < 0 && o3 * o4 < 0) {
              crossing = true;
              break;
            }
          }
        }
        const problem = ringSelfProblem(flat);
        if (crossing) assert.notEqual(problem, null, JSON.stringify(pts));
      },
    ),
    { numRuns: 2_000, seed: 11 },
  );
});
