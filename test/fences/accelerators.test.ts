import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  FenceStore,
  buildFenceStore,
  generateSyntheticCity,
  mulberry32,
  parseFences,
  syntheticCityBounds,
} from '../../src/fences/index.js';
import { Q_X, Q_X0, Q_Y, Q_Y0 } from '../../src/fences/geometry.js';
import {
  FENCE_FIRST_RING_I32,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_RING_COUNT_I32,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
} from '../../src/shm/layout.js';
import { collection, square } from './helpers.js';

test('edge bands give the full edge loop answers: random, vertex, same-latitude and edge points; segments', () => {
  const options = { seed: 5, fenceCount: 3000, circleFraction: 0.05, fencesPerKm2: 200 };
  const d = buildFenceStore(parseFences(generateSyntheticCity(options)), 1);
  const banded = FenceStore.open(d);
  const full = FenceStore.open(d, { grid: false, edgeBands: false });
  assert.notEqual(banded.bands, null);
  assert.equal(full.bands, null);
  const v = full.vertices;
  const rng = mulberry32(3);
  let inside = 0;
  let touching = 0;
  let boundary = 0;
  for (let i = 0; i < 200_000; i++) {
    const f = Math.floor(rng() * d.fenceCount);
    const b = f * FENCE_STRIDE_F64;
    const r = rng();
    let lat: number;
    let lon: number;
    if (r < 0.3) {
      // A vertex, a point at a vertex's latitude, or an edge midpoint (on the boundary), of fence f's rings.
      const first = full.fenceI32[f * FENCE_STRIDE_I32 + FENCE_FIRST_RING_I32]!;
      const from = full.ringOffsets[first]!;
      const to = full.ringOffsets[first + full.fenceI32[f * FENCE_STRIDE_I32 + FENCE_RING_COUNT_I32]!]!;
      // Circles have no ring: any vertex then.
      const k = to > from + 1 ? from + Math.floor(rng() * (to - from - 1)) : Math.floor(rng() * (v.length / 2 - 1));
      lon = r < 0.1 ? v[k * 2]! : r < 0.2 ? v[k * 2]! + (rng() - 0.5) * 1e-3 : (v[k * 2]! + v[k * 2 + 2]!) / 2;
      lat = r < 0.2 ? v[k * 2 + 1]! : (v[k * 2 + 1]! + v[k * 2 + 3]!) / 2;
    } else {
      const f64 = full.fenceF64;
      lat = f64[b + FENCE_MIN_Y_F64]! + (rng() * 1.2 - 0.1) * (f64[b + FENCE_MAX_Y_F64]! - f64[b + FENCE_MIN_Y_F64]!);
      lon = f64[b + FENCE_MIN_X_F64]! + (rng() * 1.2 - 0.1) * (f64[b + FENCE_MAX_X_F64]! - f64[b + FENCE_MIN_X_F64]!);
    }
    const expected = full.contains(f, lat, lon);
    assert.equal(banded.contains(f, lat, lon), expected, `fence ${f} at ${lat}, ${lon}`);
    if (expected) inside++;
    if (expected && r < 0.3) boundary++;
    // A segment from the point, short or long (spanning many bands).
    const len = rng() < 0.5 ? 0.0003 : 0.003;
    for (const s of [banded, full]) {
      s.q[Q_X0] = lon;
      s.q[Q_Y0] = lat;
    }
    full.q[Q_X] = banded.q[Q_X] = lon + (rng() - 0.5) * len;
    full.q[Q_Y] = banded.q[Q_Y] = lat + (rng() - 0.5) * len;
    const touches = full.segmentTouchesAt(f);
    assert.equal(banded.segmentTouchesAt(f), touches, `segment from fence ${f} at ${lat}, ${lon}`);
    if (touches) touching++;
  }
  assert.ok(
    inside > 20_000 && touching > 20_000 && boundary > 1000,
    `inside ${inside}, touching ${touching}, boundary ${boundary}`,
  );
});

test('the grid returns the flatbush set for points and boxes, inside and outside the city', () => {
  for (const fenceCount of [1, 2500]) {
    const options = { seed: 8, fenceCount, circleFraction: 0.1, fencesPerKm2: 150 };
    const d = buildFenceStore(parseFences(generateSyntheticCity(options)), 1);
    const gridded = FenceStore.open(d);
    const walked = FenceStore.open(d, { grid: false });
    assert.notEqual(gridded.grid, null);
    assert.equal(walked.grid, null);
    const b = syntheticCityBounds(options);
    const rng = mulberry32(4);
    const a = new Int32Array(fenceCount);
    const w = new Int32Array(fenceCount);
    let found = 0;
    for (let i = 0; i < 50_000; i++) {
      const lat = b.minLat - 0.01 + rng() * (b.maxLat - b.minLat + 0.02);
      const lon = b.minLon - 0.01 + rng() * (b.maxLon - b.minLon + 0.02);
      const dLat = rng() < 0.5 ? 0 : rng() * 0.004;
      const dLon = rng() < 0.5 ? 0 : rng() * 0.004;
      const na = gridded.candidatesInBoxInto(lat, lon, lat + dLat, lon + dLon, a);
      const nw = walked.candidatesInBoxInto(lat, lon, lat + dLat, lon + dLon, w);
      const sa = Array.from(a.subarray(0, na)).sort((x, y) => x - y);
      assert.deepEqual(
        sa,
        Array.from(w.subarray(0, nw)).sort((x, y) => x - y),
      );
      found += na;
    }
    assert.ok(found > 1000 || fenceCount === 1, `found ${found}`);
  }
});

test('the grid declines clustered layouts and queries fall back to the flatbush walk', () => {
  // 40 fences on top of each other at one place and one far away: every grid cell would hold all 40.
  const features = [];
  for (let i = 0; i < 40; i++) features.push(square(`s${i}`, 0, 0, 50 + i));
  features.push(square('far', 50_000, 50_000, 50));
  const store = FenceStore.open(buildFenceStore(parseFences(collection(...features)), 1));
  assert.equal(store.grid, null);
  const out = new Int32Array(store.fenceCount);
  const lat = store.fenceF64[FENCE_MIN_Y_F64]! + 1e-6;
  const lon = store.fenceF64[FENCE_MIN_X_F64]! + 1e-6;
  assert.equal(store.candidatesInto(lat, lon, out), 40);
});

test('open options are validated', () => {
  const d = buildFenceStore(parseFences(collection(square('a', 0, 0, 50))), 1);
  assert.throws(
    () => FenceStore.open(d, { grid: 'yes' as unknown as boolean }),
    /options\.grid must be a boolean, got yes/,
  );
  assert.throws(
    () => FenceStore.open(d, { edgeBands: 1 as unknown as boolean }),
    /options\.edgeBands must be a boolean, got 1/,
  );
});
