/**
 * The compliance grid in front of the compliance tree changes no answer: for a 10,000-fence city (5 % compliance) and
 * margins from 0 to 1 km, nearCompliance equals a brute-force check of every compliance fence's box on 40,000 points
 * per margin (half uniform over the city, half on and around the boxes' edges and corners), and so it does on a store
 * with an appended compliance fence (a live edit) and with the city near the pole.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { generateSyntheticCity, mulberry32, syntheticCityBounds } from '../../src/fences/synthetic-city.js';
import { parseFence, parseFences } from '../../src/fences/parse.js';
import { buildFenceStore, FenceStore } from '../../src/fences/store.js';
import { editFenceStore } from '../../src/fences/store-edit.js';
import { M_PER_DEG, RAD_PER_DEG } from '../../src/fences/geometry.js';
import {
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_STRIDE_F64,
} from '../../src/shm/layout.js';

/** The tree's question, asked of every compliance fence's box. */
function bruteNear(store: FenceStore, lat: number, lon: number, marginM: number): boolean {
  const dLat = marginM / M_PER_DEG;
  const cosLat = Math.cos(lat * RAD_PER_DEG);
  const dLon = cosLat > 1e-6 ? marginM / (M_PER_DEG * cosLat) : 360;
  const f = store.fenceF64;
  for (let i = 0; i < store.fenceCount; i++) {
    if (!store.isCompliance(i)) continue;
    const b = i * FENCE_STRIDE_F64;
    if (
      f[b + FENCE_MIN_X_F64]! <= lon + dLon &&
      f[b + FENCE_MAX_X_F64]! >= lon - dLon &&
      f[b + FENCE_MIN_Y_F64]! <= lat + dLat &&
      f[b + FENCE_MAX_Y_F64]! >= lat - dLat
    )
      return true;
  }
  return false;
}

/** Points: half uniform over `bounds` widened, half on and around compliance boxes' edges (widened by the margin). */
function* points(
  store: FenceStore,
  bounds: ReturnType<typeof syntheticCityBounds>,
  marginM: number,
  n: number,
  seed: number,
) {
  const rng = mulberry32(seed);
  const compliance: number[] = [];
  for (let i = 0; i < store.fenceCount; i++) if (store.isCompliance(i)) compliance.push(i);
  const f = store.fenceF64;
  for (let k = 0; k < n; k++) {
    if (k % 2 === 0) {
      const w = bounds.maxLon - bounds.minLon;
      const h = bounds.maxLat - bounds.minLat;
      yield [bounds.minLat - h * 0.1 + rng() * h * 1.2, bounds.minLon - w * 0.1 + rng() * w * 1.2] as const;
      continue;
    }
    const b = compliance[Math.floor(rng() * compliance.length)]! * FENCE_STRIDE_F64;
    const dLat = marginM / M_PER_DEG;
    const lat0 = rng() < 0.5 ? f[b + FENCE_MIN_Y_F64]! - dLat : f[b + FENCE_MAX_Y_F64]! + dLat;
    const dLon = marginM / (M_PER_DEG * Math.cos(lat0 * RAD_PER_DEG));
    const lon0 = rng() < 0.5 ? f[b + FENCE_MIN_X_F64]! - dLon : f[b + FENCE_MAX_X_F64]! + dLon;
    // On the widened edge, or a metre or a hair either side of it.
    const jitter = pick(rng, [0, 1e-12, -1e-12, 1 / M_PER_DEG, -1 / M_PER_DEG, (rng() - 0.5) * 0.001]);
    yield (rng() < 0.5 ? [lat0 + jitter, lon0] : [lat0, lon0 + jitter]) as readonly [number, number];
  }
}

function pick<T>(rng: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rng() * xs.length)]!;
}

test('nearCompliance with the grid equals the brute-force answer: city, edited store, near the pole', () => {
  for (const centerLat of [52.52, 84.5]) {
    const city = generateSyntheticCity({ seed: 42, fenceCount: 10_000, centerLat, centerLon: 13.4 });
    const bounds = syntheticCityBounds({ seed: 42, fenceCount: 10_000, centerLat, centerLon: 13.4 });
    const store = FenceStore.open(buildFenceStore(parseFences(city), 1));
    assert.ok(store.complianceCount > 300, `compliance fences: ${store.complianceCount}`);
    let near = 0;
    let far = 0;
    for (const marginM of [0, 30, 100, 1000]) {
      for (const [lat, lon] of points(store, bounds, marginM, 40_000, marginM + 1)) {
        const want = bruteNear(store, lat, lon, marginM);
        assert.equal(store.nearCompliance(lat, lon, marginM), want, `lat ${lat} lon ${lon} margin ${marginM}`);
        if (want) near++;
        else far++;
      }
    }
    assert.ok(near > 20_000 && far > 20_000, `both answers seen: ${near} near, ${far} not`);

    // A compliance fence appended by a live edit, away from the others: near it only after the edit.
    const lat = bounds.maxLat + 0.05;
    const lon = bounds.maxLon + 0.05;
    const d = 0.001;
    const square = {
      type: 'Feature',
      properties: { id: 'late-compliance', compliance: true },
      geometry: {
        type: 'Polygon',
        coordinates: [
          [
            [lon, lat],
            [lon + d, lat],
            [lon + d, lat + d],
            [lon, lat + d],
            [lon, lat],
          ],
        ],
      },
    };
    assert.equal(store.nearCompliance(lat + d / 2, lon + d / 2, 10), false);
    const made = editFenceStore(store, { upsert: parseFence(square) }, 2);
    assert.ok(made !== null && made !== 'no-room');
    const edited = FenceStore.open(made.descriptor);
    assert.equal(edited.nearCompliance(lat + d / 2, lon + d / 2, 10), true);
    for (const [pLat, pLon] of points(edited, bounds, 100, 10_000, 7))
      assert.equal(
        edited.nearCompliance(pLat, pLon, 100),
        bruteNear(edited, pLat, pLon, 100),
        `edited: ${pLat} ${pLon}`,
      );
  }
});
