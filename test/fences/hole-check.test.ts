/**
 * The indexed hole check agrees with containsRings (the exact test containment uses) point by point, boundary
 * included, on seeded star polygons large enough to take the indexed path; and parseFences refuses a hole with a
 * vertex outside its outer ring, and a ring or a collection over its limit, naming the feature and the limit.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { containsRings, Q_CELLS, Q_X, Q_Y } from '../../src/fences/geometry.js';
import { firstHoleVertexOutside } from '../../src/fences/hole-check.js';
import { FenceValidationError, parseFences } from '../../src/fences/parse.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';

/** A closed star ring of `n` positions around (0, 0), radii in [0.5, 1] from a seed. */
function star(n: number, seed: number): Float64Array {
  const rng = mulberry32(seed);
  const out = new Float64Array(n * 2);
  for (let i = 0; i < n - 1; i++) {
    const a = (i / (n - 1)) * 2 * Math.PI;
    const r = 0.5 + rng() * 0.5;
    out[i * 2] = r * Math.cos(a);
    out[i * 2 + 1] = r * Math.sin(a);
  }
  out[(n - 1) * 2] = out[0]!;
  out[(n - 1) * 2 + 1] = out[1]!;
  return out;
}

test('the indexed hole check agrees with containsRings on every point, boundary included', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 300, max: 2000 }),
      fc.integer({ min: 1, max: 1e9 }),
      fc.integer({ min: 1, max: 1e9 }),
      (n, seed, pointSeed) => {
        const outer = star(n, seed);
        const rng = mulberry32(pointSeed);
        // Candidate points: random ones, the outer ring's own vertices and edge midpoints (the boundary), closed as a ring.
        const pts: number[] = [];
        for (let i = 0; i < 300; i++) pts.push((rng() - 0.5) * 2.2, (rng() - 0.5) * 2.2);
        for (let i = 0; i < 40; i++) {
          const e = Math.floor(rng() * (n - 1));
          pts.push(outer[e * 2]!, outer[e * 2 + 1]!);
          pts.push((outer[e * 2]! + outer[e * 2 + 2]!) / 2, (outer[e * 2 + 1]! + outer[e * 2 + 3]!) / 2);
        }
        const q = new Float64Array(Q_CELLS);
        const offsets = Int32Array.of(0, n);
        for (let i = 0; i < pts.length; i += 2) {
          q[Q_X] = pts[i]!;
          q[Q_Y] = pts[i + 1]!;
          const expected = containsRings(outer, offsets, 0, 1, q);
          // The point alone as a "hole", repeated 500 times so that edges x vertices takes the indexed path.
          const hole = new Float64Array(1000).map((_, k) => (k % 2 === 0 ? pts[i]! : pts[i + 1]!));
          assert.equal(firstHoleVertexOutside(outer, hole) < 0, expected, `point ${pts[i]}, ${pts[i + 1]}`);
        }
      },
    ),
    { numRuns: 25 },
  );
});

test('parseFences: a hole vertex outside its outer ring, a ring over maxVerticesPerRing and a collection over maxFences are refused by name', () => {
  const ring = (r: number, n: number): number[][] => {
    const out: number[][] = [];
    for (let i = 0; i < n - 1; i++)
      out.push([13.4 + r * Math.cos((i / (n - 1)) * 2 * Math.PI), 52.5 + r * Math.sin((i / (n - 1)) * 2 * Math.PI)]);
    out.push(out[0]!);
    return out;
  };
  const feature = (coordinates: number[][][]) => ({
    type: 'Feature',
    properties: { id: 'f' },
    geometry: { type: 'Polygon', coordinates },
  });
  const bad = { type: 'FeatureCollection', features: [feature([ring(0.01, 500), ring(0.02, 500)])] };
  assert.throws(
    () => parseFences(bad),
    (e: unknown) =>
      e instanceof FenceValidationError &&
      /feature 0: polygon ring 1 \(a hole\) has a vertex outside its outer ring/.test(e.message),
  );
  // A U-shaped outer ring and a hole whose four corners lie in the two arms: every vertex inside, an edge across the gap.
  const u = [
    [0, 0],
    [3, 0],
    [3, 3],
    [2, 3],
    [2, 1],
    [1, 1],
    [1, 3],
    [0, 3],
    [0, 0],
  ].map(([x, y]) => [13.4 + x! * 0.001, 52.5 + y! * 0.001]);
  const across = [
    [0.5, 2],
    [2.5, 2],
    [2.5, 2.5],
    [0.5, 2.5],
    [0.5, 2],
  ].map(([x, y]) => [13.4 + x! * 0.001, 52.5 + y! * 0.001]);
  assert.throws(
    () => parseFences({ type: 'FeatureCollection', features: [feature([u, across])] }),
    /feature 0: polygon ring 1 \(a hole\) crosses its outer ring \(its edge from position 0\)/,
  );
  const good = { type: 'FeatureCollection', features: [feature([ring(0.02, 500), ring(0.01, 500)])] };
  assert.equal(parseFences(good).fences.length, 1);
  assert.throws(
    () => parseFences(good, { maxFences: 10, maxVerticesPerRing: 400 }),
    /feature 0: polygon ring 0 has 500 positions, over the limit maxVerticesPerRing 400/,
  );
  const many = { type: 'FeatureCollection', features: [feature([ring(0.02, 5)]), feature([ring(0.02, 5)])] };
  assert.throws(
    () => parseFences(many, { maxFences: 1, maxVerticesPerRing: 100 }),
    /feature collection: 2 features, over the limit maxFences 1/,
  );
});
