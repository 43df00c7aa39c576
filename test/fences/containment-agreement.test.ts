import { test } from 'node:test';
import assert from 'node:assert/strict';
import { booleanPointInPolygon } from '@turf/boolean-point-in-polygon';
import { pointInCircle } from '@thi.ng/geom-isec/point';
import { intersectLineLine } from '@thi.ng/geom-isec/line-line';
import { IntersectionType } from '@thi.ng/geom-isec/api';
import Flatbush from 'flatbush';
import {
  FenceStore,
  buildFenceStore,
  generateSyntheticCity,
  mulberry32,
  parseFences,
  segmentsIntersect,
  syntheticCityBounds,
  EARTH_RADIUS_M,
  M_PER_DEG,
} from '../../src/fences/index.js';
import { distanceToRingsM, metresPerDegreeX } from '../../src/fences/geometry.js';

type Geometry =
  | { type: 'Polygon'; coordinates: number[][][] }
  | { type: 'MultiPolygon'; coordinates: number[][][][] }
  | { type: 'Point'; coordinates: number[] };

/** Great-circle distance, metres (an implementation independent of the store's local projection). */
function haversineM(lat1: number, lon1: number, lat2: number, lon2: number): number {
  const r = Math.PI / 180;
  const a =
    Math.sin(((lat2 - lat1) * r) / 2) ** 2 +
    Math.cos(lat1 * r) * Math.cos(lat2 * r) * Math.sin(((lon2 - lon1) * r) / 2) ** 2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.sqrt(a));
}

test('containment agrees with turf (polygons, holes, MultiPolygons) and haversine (circles) on 120,000 random points', () => {
  // Large fences on a small city, so a good share of points falls inside; circles up to 2 km.
  const options = {
    seed: 2024,
    fenceCount: 300,
    fencesPerKm2: 3,
    minRadiusM: 50,
    maxRadiusM: 2000,
    circleFraction: 0.2,
    holeFraction: 0.5,
    multiPolygonFraction: 0.2,
    minVertices: 8,
    maxVertices: 40,
  };
  const geojson = generateSyntheticCity(options);
  const store = FenceStore.open(buildFenceStore(parseFences(geojson), 1, { nodeSize: 8 }));
  const geoms = geojson.features.map((f) => f['geometry'] as Geometry);
  const radii = geojson.features.map((f) => (f['properties'] as { radius?: number }).radius ?? 0);
  const kinds = new Set(geoms.map((g) => g.type));
  assert.deepEqual([...kinds].sort(), ['MultiPolygon', 'Point', 'Polygon']);
  assert.ok(
    geoms.some((g) => g.type === 'Polygon' && g.coordinates.length > 1),
    'some polygons have holes',
  );
  const b = syntheticCityBounds(options);
  const rng = mulberry32(77);
  const out = new Int32Array(store.fenceCount);
  let compared = 0;
  let inside = 0;
  let nearEdge = 0;
  for (let p = 0; p < 120_000; p++) {
    const lat = b.minLat + rng() * (b.maxLat - b.minLat);
    const lon = b.minLon + rng() * (b.maxLon - b.minLon);
    // Test the fences found by the query and a few random others (box rejection must agree too).
    const n = store.candidatesInto(lat, lon, out);
    for (let k = -1; k < n; k++) {
      const f = k < 0 ? Math.floor(rng() * store.fenceCount) : out[k]!;
      const g = geoms[f]!;
      const got = store.contains(f, lat, lon);
      let want: boolean;
      if (g.type === 'Point') {
        const d = haversineM(lat, lon, g.coordinates[1]!, g.coordinates[0]!);
        // Away from the edge: the two distance models differ by far less than 0.1 %.
        if (Math.abs(d - radii[f]!) < radii[f]! * 1e-3) {
          nearEdge++;
          continue;
        }
        want = d <= radii[f]!;
      } else {
        const fi = f * 4;
        if (
          distanceToRingsM(
            store.vertices,
            store.ringOffsets,
            store.fenceI32[fi + 1]!,
            store.fenceI32[fi + 2]!,
            lon,
            lat,
          ) < 0.01
        ) {
          nearEdge++;
          continue;
        }
        want = booleanPointInPolygon([lon, lat], g);
      }
      assert.equal(got, want, `fence ${f} (${g.type}) at ${lat},${lon}`);
      compared++;
      if (got) inside++;
    }
  }
  assert.ok(compared >= 100_000, `compared ${compared}`);
  assert.ok(inside >= 20_000, `inside ${inside}`);
  assert.ok(nearEdge < compared / 100, `near edge ${nearEdge}`);
});

test('boundary points are inside: vertices and edges of outer rings and holes, the circle rim', () => {
  // Axis-aligned rings make edge points exact in double arithmetic.
  const outer = [
    [13, 52],
    [14, 52],
    [14, 53],
    [13, 53],
    [13, 52],
  ];
  const hole = [
    [13.25, 52.25],
    [13.25, 52.75],
    [13.75, 52.75],
    [13.75, 52.25],
    [13.25, 52.25],
  ];
  const part2 = [
    [15, 52],
    [16, 52],
    [15.5, 53],
    [15, 52],
  ];
  const fc = {
    type: 'FeatureCollection',
    features: [
      {
        type: 'Feature',
        properties: { id: 'p' },
        geometry: { type: 'MultiPolygon', coordinates: [[outer, hole], [part2]] },
      },
      {
        type: 'Feature',
        properties: { id: 'c', radius: M_PER_DEG * 0.001 },
        geometry: { type: 'Point', coordinates: [0, 0] },
      },
    ],
  };
  const store = FenceStore.open(buildFenceStore(parseFences(fc), 1));
  const poly = fc.features[0]!.geometry as Exclude<Geometry, { type: 'Point' }>;
  const onBoundary: [number, number][] = [
    ...outer.map(([x, y]) => [y!, x!] as [number, number]),
    ...hole.map(([x, y]) => [y!, x!] as [number, number]),
    ...part2.map(([x, y]) => [y!, x!] as [number, number]),
    [52, 13.5],
    [53, 13.1],
    [52.4, 13],
    [52.6, 14], // outer edges
    [52.25, 13.5],
    [52.75, 13.3],
    [52.5, 13.25],
    [52.5, 13.75], // hole edges
    [52, 15.5], // part 2's bottom edge
  ];
  for (const [lat, lon] of onBoundary) {
    assert.equal(store.contains(0, lat, lon), true, `boundary ${lat},${lon}`);
    assert.equal(booleanPointInPolygon([lon, lat], poly), true, `turf agrees at ${lat},${lon}`);
  }
  for (const [lat, lon, want] of [
    [52.5, 13.5, false],
    [52.1, 13.1, true],
    [52.9, 13.9, true],
    [51.999, 13.5, false],
    [52.2, 15.5, true],
  ] as const) {
    assert.equal(store.contains(0, lat, lon), want, `${lat},${lon}`);
  }
  // The circle at the equator: a point exactly one radius east is on the rim, hence inside.
  const r = M_PER_DEG * 0.001;
  assert.equal(store.contains(1, 0, 0.001), true);
  assert.equal(store.contains(1, 0.001, 0), true);
  assert.equal(store.contains(1, 0, 0.0010000001), false);
  // geom-isec's pointInCircle over the same local metres agrees, rim included.
  for (const [lat, lon] of [
    [0, 0.001],
    [0.0007, 0.0007],
    [0.0005, -0.0008],
    [0, 0.0010000001],
  ] as const) {
    const want = pointInCircle([lon * metresPerDegreeX(0), lat * M_PER_DEG], [0, 0], r);
    assert.equal(store.contains(1, lat, lon), want, `circle ${lat},${lon}`);
  }
});

test('segment test agrees with geom-isec on random segments away from degenerate cases', () => {
  const rng = mulberry32(5);
  let hits = 0;
  let compared = 0;
  for (let k = 0; k < 50_000; k++) {
    const p = [rng(), rng()];
    const q = [rng(), rng()];
    const a = [rng(), rng()];
    const c = [rng(), rng()];
    const ref = intersectLineLine(p, q, a, c);
    if (ref.type !== IntersectionType.INTERSECT && ref.type !== IntersectionType.INTERSECT_OUTSIDE) continue;
    const alpha = ref.alpha!;
    const beta = ref.beta!;
    // Skip touching-at-an-end cases, where geom-isec's epsilon decides.
    if (Math.min(Math.abs(alpha), Math.abs(alpha - 1), Math.abs(beta), Math.abs(beta - 1)) < 1e-6) continue;
    const want = ref.type === IntersectionType.INTERSECT;
    assert.equal(segmentsIntersect(p[0]!, p[1]!, q[0]!, q[1]!, a[0]!, a[1]!, c[0]!, c[1]!), want);
    compared++;
    if (want) hits++;
  }
  assert.ok(compared > 45_000 && hits > 5_000);
  // Touching at an endpoint counts (closed boundary), as does collinear overlap.
  assert.equal(segmentsIntersect(0, 0, 1, 0, 1, 0, 1, 1), true);
  assert.equal(segmentsIntersect(0, 0, 2, 0, 1, 0, 3, 0), true);
  assert.equal(segmentsIntersect(0, 0, 1, 0, 2, 0, 3, 0), false);
});

test('candidatesInto returns exactly what flatbush search returns, for points and boxes', () => {
  for (const nodeSize of [2, 4, 16, 64]) {
    const parsed = parseFences(generateSyntheticCity({ seed: nodeSize, fenceCount: 3000 }));
    const d = buildFenceStore(parsed, 1, { nodeSize });
    const store = FenceStore.open(d);
    const reference = Flatbush.from(d.indexBuffer!);
    const b = syntheticCityBounds({ fenceCount: 3000 });
    const rng = mulberry32(nodeSize);
    const out = new Int32Array(store.fenceCount);
    let total = 0;
    for (let k = 0; k < 3000; k++) {
      const lat = b.minLat + rng() * (b.maxLat - b.minLat);
      const lon = b.minLon + rng() * (b.maxLon - b.minLon);
      const span = k % 2 === 0 ? 0 : rng() * 0.01;
      const n = store.candidatesInBoxInto(lat, lon, lat + span, lon + span, out);
      const want = reference.search(lon, lat, lon + span, lat + span).sort((x, y) => x - y);
      assert.deepEqual(
        Array.from(out.subarray(0, n)).sort((x, y) => x - y),
        want,
      );
      total += n;
    }
    assert.ok(total > 1000);
    // A too-small output array gets the count, and as many ids as fit.
    const small = new Int32Array(1);
    const big = store.candidatesInBoxInto(b.minLat, b.minLon, b.maxLat, b.maxLon, small);
    assert.equal(big, store.fenceCount);
  }
});
