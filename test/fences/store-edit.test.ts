/**
 * Edit generations against full builds: after a seeded run of adds, replacements and removals over a synthetic city,
 * the edited store (full build's index, grid and bands reused, appended fences in their own index, removed ones
 * filtered) answers every candidate, containment, id and compliance question as a fresh full build of the same fences
 * does; an edit past the headroom says so, and the loader's full build of it agrees too; the edited store's queries
 * allocate nothing.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import { generateSyntheticCity, mulberry32, syntheticCityBounds } from '../../src/fences/synthetic-city.js';
import { parseFence, parseFences, type ParsedFence } from '../../src/fences/parse.js';
import { buildFenceStore, FenceStore } from '../../src/fences/store.js';
import { editFenceStore, type FenceEdit } from '../../src/fences/store-edit.js';
import { loadFenceStore } from '../../src/fences/fence-file.js';
import { DEFAULT_FENCE_LIMITS } from '../../src/fences/parse.js';
import { Q_MAX_X, Q_MAX_Y, Q_MIN_X, Q_MIN_Y, Q_X, Q_Y } from '../../src/fences/geometry.js';

const city = { seed: 5, fenceCount: 1500, fencesPerKm2: 150, complianceFraction: 0.2, circleFraction: 0.2 };

/** A feature of the city moved by (dx, dy) degrees, under a new id. */
function moved(feature: Record<string, unknown>, id: string, dx: number, dy: number): Record<string, unknown> {
  const shift = (c: unknown): unknown =>
    typeof (c as number[])[0] === 'number'
      ? [(c as number[])[0]! + dx, (c as number[])[1]! + dy]
      : (c as unknown[]).map(shift);
  const g = feature['geometry'] as { type: string; coordinates: unknown };
  return {
    ...feature,
    properties: { ...(feature['properties'] as object), id },
    geometry: { type: g.type, coordinates: shift(g.coordinates) },
  };
}

/** The fences in force by id, kept by the test itself (insertion order irrelevant to the answers compared). */
function insideIds(store: FenceStore, lat: number, lon: number, out: Int32Array): string[] {
  const q = store.q;
  q[Q_X] = lon;
  q[Q_Y] = lat;
  q[Q_MIN_X] = lon;
  q[Q_MIN_Y] = lat;
  q[Q_MAX_X] = lon;
  q[Q_MAX_Y] = lat;
  const n = store.candidatesInQueryBoxInto(out);
  const ids: string[] = [];
  for (let k = 0; k < n; k++) {
    const f = out[k]!;
    assert.equal(store.isRemoved(f), false, 'a removed fence came back as a candidate');
    if (store.containsAt(f)) ids.push(store.fenceId(f));
  }
  return ids.sort();
}

test('a seeded run of 300 edits answers as a full build of the same fences does', () => {
  const geo = generateSyntheticCity(city);
  const features = geo.features as Record<string, unknown>[];
  const initial = parseFences(geo);
  let store = FenceStore.open(buildFenceStore(initial, 1));
  const oracle = new Map<string, ParsedFence>(initial.fences.map((f) => [f.id, f]));
  const rng = mulberry32(9);
  const counts = { created: 0, replaced: 0, removed: 0 };
  for (let i = 0; i < 300; i++) {
    const r = rng();
    const ids = [...oracle.keys()];
    let edit: FenceEdit;
    if (r < 0.4 || ids.length === 0) {
      const src = features[Math.floor(rng() * features.length)]!;
      edit = { upsert: parseFence(moved(src, `new${i}`, (rng() - 0.5) * 0.002, (rng() - 0.5) * 0.002)) };
    } else if (r < 0.7) {
      const id = ids[Math.floor(rng() * ids.length)]!;
      const src = features[Math.floor(rng() * features.length)]!;
      edit = { upsert: parseFence(moved(src, id, (rng() - 0.5) * 0.002, 0)) };
    } else {
      edit = { remove: ids[Math.floor(rng() * ids.length)]! };
    }
    const made = editFenceStore(store, edit, store.generation + 1);
    assert.ok(made !== null && made !== 'no-room', `edit ${i} applied`);
    counts[made.action]++;
    // Each intermediate generation opens (on this thread, reusing the full build's derivations).
    store = FenceStore.open(made.descriptor);
    if ('upsert' in edit) oracle.set(edit.upsert.id, edit.upsert);
    else oracle.delete(edit.remove);
  }
  assert.ok(counts.created > 50 && counts.replaced > 50 && counts.removed > 50, JSON.stringify(counts));
  const fresh = FenceStore.open(buildFenceStore({ fences: [...oracle.values()] }, 999));
  const plain = FenceStore.open(store.descriptor, { grid: false, edgeBands: false });
  assert.equal(store.liveFenceCount, oracle.size);
  assert.equal(store.complianceCount, fresh.complianceCount);
  for (const id of oracle.keys()) assert.ok(store.indexOfId(id) >= 0, `id ${id} in force`);
  for (let f = 0; f < store.fenceCount; f++) {
    const id = store.fenceId(f);
    if (store.isRemoved(f)) continue;
    assert.equal(store.indexOfId(id), f);
    assert.deepEqual(store.tags(f), oracle.get(id)!.tags);
  }
  const b = syntheticCityBounds(city);
  const outA = new Int32Array(store.fenceCount);
  const outB = new Int32Array(fresh.fenceCount);
  const outC = new Int32Array(plain.fenceCount);
  let inside = 0;
  for (let k = 0; k < 20_000; k++) {
    const lat = b.minLat + rng() * (b.maxLat - b.minLat);
    const lon = b.minLon + rng() * (b.maxLon - b.minLon);
    const want = insideIds(fresh, lat, lon, outB);
    assert.deepEqual(insideIds(store, lat, lon, outA), want, `point ${k}`);
    assert.deepEqual(insideIds(plain, lat, lon, outC), want, `point ${k} without grid or bands`);
    assert.equal(store.nearCompliance(lat, lon, 50) || !fresh.nearCompliance(lat, lon, 50), true);
    inside += want.length;
  }
  assert.ok(inside > 2000, `points inside fences: ${inside}`);
});

test('an edit past the headroom says no-room, and the full build of it agrees with the edits before it', () => {
  const geo = generateSyntheticCity({ ...city, fenceCount: 100 });
  const features = geo.features as Record<string, unknown>[];
  let store = FenceStore.open(buildFenceStore(parseFences(geo), 1));
  let i = 0;
  let made: ReturnType<typeof editFenceStore>;
  for (;;) {
    const edit: FenceEdit = { upsert: parseFence(moved(features[i % 100]!, `x${i}`, 0.003, 0)) };
    made = editFenceStore(store, edit, store.generation + 1);
    if (made === 'no-room') {
      const rebuilt = FenceStore.open(
        loadFenceStore({
          compact: { from: store.descriptor, edit },
          limits: { ...DEFAULT_FENCE_LIMITS, maxFileBytes: 1 << 30 },
          generation: store.generation + 1,
        }).descriptor,
      );
      assert.equal(rebuilt.liveFenceCount, store.liveFenceCount + 1);
      assert.equal(rebuilt.baseFenceCount, rebuilt.fenceCount, 'a full build: nothing appended');
      for (let f = 0; f < store.fenceCount; f++) assert.ok(rebuilt.indexOfId(store.fenceId(f)) >= 0);
      const b = syntheticCityBounds({ ...city, fenceCount: 100 });
      const rng = mulberry32(2);
      const outA = new Int32Array(store.fenceCount + 1);
      const outB = new Int32Array(rebuilt.fenceCount);
      for (let k = 0; k < 5000; k++) {
        const lat = b.minLat + rng() * (b.maxLat - b.minLat);
        const lon = b.minLon + rng() * (b.maxLon - b.minLon) + 0.003 * rng();
        const before = insideIds(store, lat, lon, outA).filter((id) => id !== `x${i}`);
        assert.deepEqual(
          insideIds(rebuilt, lat, lon, outB).filter((id) => id !== `x${i}`),
          before,
        );
      }
      break;
    }
    assert.ok(made !== null);
    store = FenceStore.open(made.descriptor);
    i++;
  }
  // The headroom of a 100-fence build is 256 fence records.
  assert.equal(i, 256);
});

test('queries on an edited store (appended and removed fences) allocate nothing', async () => {
  const geo = generateSyntheticCity(city);
  const features = geo.features as Record<string, unknown>[];
  let store = FenceStore.open(buildFenceStore(parseFences(geo), 1));
  for (let i = 0; i < 40; i++) {
    const edit: FenceEdit =
      i % 2 === 0 ? { upsert: parseFence(moved(features[i]!, `a${i}`, 0.0005, 0)) } : { remove: `f${i * 7}` };
    const made = editFenceStore(store, edit, store.generation + 1);
    assert.ok(made !== null && made !== 'no-room');
    store = FenceStore.open(made.descriptor);
  }
  const b = syntheticCityBounds(city);
  const rng = mulberry32(4);
  const N = 1 << 14;
  const lat = Float64Array.from({ length: N }, () => b.minLat + rng() * (b.maxLat - b.minLat));
  const lon = Float64Array.from({ length: N }, () => b.minLon + rng() * (b.maxLon - b.minLon));
  const out = new Int32Array(store.fenceCount);
  const q = store.q;
  let hits = 0;
  for (let run = 0; run < 4; run++) {
    const report = await measureAllocations(500_000, (i) => {
      const k = i & (N - 1);
      q[Q_X] = lon[k]!;
      q[Q_Y] = lat[k]!;
      q[Q_MIN_X] = lon[k]!;
      q[Q_MIN_Y] = lat[k]!;
      q[Q_MAX_X] = lon[k]! + 0.0003;
      q[Q_MAX_Y] = lat[k]! + 0.0003;
      const n = store.candidatesInQueryBoxInto(out);
      for (let c = 0; c < n; c++) if (store.containsAt(out[c]!)) hits++;
    });
    assert.equal(report.gcCount, 0, `run ${run}: ${JSON.stringify(report)}`);
    assert.ok(report.newSpaceGrowthBytes <= ALLOCATION_SLACK_BYTES, JSON.stringify(report));
    assert.ok(report.oldSpaceGrowthBytes <= ALLOCATION_SLACK_BYTES, JSON.stringify(report));
  }
  assert.ok(hits > 0);
});
