import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allocateCounterRegion } from '../../src/shm/regions.js';
import { CNT_BLOCK_F64, CNT_FENCE_OVERFLOW_F64 } from '../../src/shm/layout.js';
import { Q_X, Q_X0, Q_Y, Q_Y0 } from '../../src/fences/geometry.js';
import {
  ContainmentEngine,
  DeviceState,
  FenceStore,
  allocateDeviceState,
  buildFenceStore,
  generateSyntheticCity,
  mulberry32,
  parseFences,
  syntheticCityBounds,
} from '../../src/fences/index.js';
import { ROUTER_DEFAULTS } from '../../src/config/options.js';
import { at, collection, drain, rig, square, triggerRing } from './helpers.js';

/** "TYPE fenceId" of each trigger. */
function names(store: FenceStore, list: { type: string; fence: number }[]): string[] {
  return list.map((t) => `${t.type} ${store.fenceId(t.fence)}`);
}

test('nested squares: every fence tracked with the default bound; with a bound of 2 the third is untracked and nothing is said about it', () => {
  const nested = collection(square('a', 0, 0, 300), square('b', 0, 0, 200), square('c', 0, 0, 100));
  const walk = [-400, -250, -150, 0, 150, 250, 400];

  const full = rig(nested, ROUTER_DEFAULTS.maxFencesPerDevice);
  const all = walk.flatMap((x, i) => full.ping(0, x, 0, 1000 * (i + 1)));
  assert.deepEqual(names(full.store, all), ['ENTER a', 'ENTER b', 'ENTER c', 'EXIT c', 'EXIT b', 'EXIT a']);
  assert.equal(full.counters[CNT_BLOCK_F64 + CNT_FENCE_OVERFLOW_F64], 0);

  const two = rig(nested, 2);
  const got = walk.flatMap((x, i) => two.ping(0, x, 0, 1000 * (i + 1)));
  // Before: ENTER a, ENTER b, then a CROSS c for the fence the device had been inside all along.
  assert.deepEqual(names(two.store, got), ['ENTER a', 'ENTER b', 'EXIT b', 'EXIT a']);
  assert.equal(
    two.counters[CNT_BLOCK_F64 + CNT_FENCE_OVERFLOW_F64],
    1,
    'the one ping inside c with no free entry is counted',
  );
  assert.deepEqual(two.store.mostUntracked(10), [{ fenceId: 'c', pings: 1 }], 'and named per fence');

  // Jumping out of all three in one ping: EXITs for the tracked ones, no CROSS for the untracked one.
  const jump = rig(nested, 2);
  const j = [...jump.ping(1, 0, 0, 1000), ...jump.ping(1, 900, 0, 2000)];
  assert.ok(!names(jump.store, j).some((n) => n.endsWith(' c')), names(jump.store, j).join(', '));
  assert.deepEqual(names(jump.store, j).sort(), ['ENTER a', 'ENTER b', 'EXIT a', 'EXIT b']);
});

test('an untracked stay gets no late ENTER when an entry frees up; the next stay is tracked', () => {
  // a holds everything; b and c overlap on x in [-50, 0]; a bound of 2 leaves c untracked while the device is in b.
  const r = rig(collection(square('a', 0, 0, 500), square('b', -100, 0, 100), square('c', 50, 0, 100)), 2);
  const steps: [number, string[]][] = [
    [-150, ['ENTER a', 'ENTER b']],
    [-25, []], // in a, b, c: c untracked
    [100, ['EXIT b']], // in a, c: the stay in c goes on untracked, no late ENTER
    [300, []], // left c: nothing about it
    [50, ['ENTER c']], // a new stay in c, with a free entry
    [600, ['EXIT a', 'EXIT c']],
  ];
  steps.forEach(([x, want], i) => {
    const got = names(r.store, r.ping(0, x, 0, 1000 * (i + 1))).sort();
    assert.deepEqual(got, want.slice().sort(), `step ${i} at ${x} m`);
  });
});

test('overflow pool: a device inside 40 fences holds them through pool chunks, which all go back when it leaves', () => {
  const fences = Array.from({ length: 40 }, (_, i) => square(`n${i}`, 0, 0, 100 + 10 * i));
  const store = FenceStore.open(buildFenceStore(parseFences(collection(...fences)), 1));
  const state = DeviceState.open(allocateDeviceState(4, 64, { overflowPoolEntries: 64 }));
  assert.equal(state.poolChunks, 8);
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  const ring = triggerRing(4096);
  const ping = (slot: number, eastM: number, t: number): string[] => {
    const [lat, lon] = at(eastM, 0);
    engine.processPing(slot, lat, lon, t, 0, 1, ring);
    return names(store, drain(ring));
  };
  assert.equal(ping(0, 0, 1000).length, 40);
  assert.equal(state.entryCount(0), 40);
  assert.equal(state.poolChunksInUse(), 4, '8 inline + 4 chunks of 8');
  // A second device takes the rest of the pool (4 chunks: 8 + 32 = 40 entries), a third finds it empty.
  assert.equal(ping(1, 0, 1000).length, 40);
  assert.equal(state.poolChunksInUse(), 8);
  const third = ping(2, 0, 1000);
  assert.equal(third.length, 8, 'only its inline entries');
  assert.equal(counters[CNT_FENCE_OVERFLOW_F64], 32);
  // Leaving: every tracked fence gets its EXIT, the untracked ones nothing; the chunks return.
  const out0 = ping(0, 5000, 2000);
  assert.equal(out0.filter((n) => n.startsWith('EXIT')).length, 40);
  assert.equal(state.poolChunksInUse(), 4);
  const out2 = ping(2, 5000, 2000);
  assert.deepEqual(
    out2.filter((n) => !n.startsWith('EXIT')),
    [],
    'no CROSS for the 32 untracked fences',
  );
  assert.equal(out2.length, 8);
  ping(1, 5000, 2000);
  assert.equal(state.poolChunksInUse(), 0);
  for (let s = 0; s < 3; s++) assert.equal(state.entryCount(s), 0);
});

/** One device walking through a dense city: the fences it is inside at each ping, computed without the engine. */
interface Walk {
  lat: number[];
  lon: number[];
}

test('a 10,000-fence city where devices are inside 20+ fences at once: with the default options the engine writes exactly what brute force expects', () => {
  const cityOptions = { seed: 11, fenceCount: 10_000, fencesPerKm2: 400, minRadiusM: 100, maxRadiusM: 200 };
  const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity(cityOptions)), 1));
  const devices = 120;
  const pings = 150;
  const state = DeviceState.open(allocateDeviceState(devices, ROUTER_DEFAULTS.maxFencesPerDevice));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  const ring = triggerRing(1 << 16);
  const b = syntheticCityBounds(cityOptions);
  const rng = mulberry32(3);
  const walks: Walk[] = [];
  for (let d = 0; d < devices; d++) {
    const w: Walk = { lat: [], lon: [] };
    // Keep away from the city's edge, where overlap thins out.
    let lat = b.minLat + (0.2 + 0.6 * rng()) * (b.maxLat - b.minLat);
    let lon = b.minLon + (0.2 + 0.6 * rng()) * (b.maxLon - b.minLon);
    for (let p = 0; p < pings; p++) {
      // Steps of up to ~60 m, now and then a jump of ~600 m (CROSS material).
      const scale = p % 37 === 36 ? 0.006 : 0.0006;
      lat += (rng() - 0.5) * scale;
      lon += (rng() - 0.5) * scale * 1.6;
      w.lat.push(lat);
      w.lon.push(lon);
    }
    walks.push(w);
  }

  const everything = new Int32Array(store.fenceCount);
  const insideAt = (lat: number, lon: number): Set<number> => {
    const n = store.candidatesInto(lat, lon, everything);
    const s = new Set<number>();
    for (let k = 0; k < n; k++) if (store.contains(everything[k]!, lat, lon)) s.add(everything[k]!);
    return s;
  };
  let maxInside = 0;
  let devicesOver20 = 0;
  let compared = 0;
  for (let d = 0; d < devices; d++) {
    const w = walks[d]!;
    let before = new Set<number>();
    let over20 = false;
    for (let p = 0; p < pings; p++) {
      const lat = w.lat[p]!;
      const lon = w.lon[p]!;
      const now = insideAt(lat, lon);
      maxInside = Math.max(maxInside, now.size);
      if (now.size >= 20) over20 = true;
      const want: string[] = [];
      for (const f of before) if (!now.has(f)) want.push(`EXIT ${store.fenceId(f)}`);
      for (const f of now) if (!before.has(f)) want.push(`ENTER ${store.fenceId(f)}`);
      if (p > 0) {
        const lat0 = w.lat[p - 1]!;
        const lon0 = w.lon[p - 1]!;
        const n = store.candidatesInBoxInto(
          Math.min(lat, lat0),
          Math.min(lon, lon0),
          Math.max(lat, lat0),
          Math.max(lon, lon0),
          everything,
        );
        for (let k = 0; k < n; k++) {
          const f = everything[k]!;
          if (now.has(f) || before.has(f)) continue;
          const q = store.q;
          q[Q_X] = lon;
          q[Q_Y] = lat;
          q[Q_X0] = lon0;
          q[Q_Y0] = lat0;
          if (store.segmentTouchesAt(f)) want.push(`CROSS ${store.fenceId(f)}`);
        }
      }
      engine.processPing(d, lat, lon, 1_000_000 + p * 1000, 0, 1, ring);
      const got = names(store, drain(ring));
      assert.deepEqual(got.slice().sort(), want.sort(), `device ${d} ping ${p}`);
      compared += got.length;
      before = now;
    }
    if (over20) devicesOver20++;
  }
  console.log(
    `dense city: ${devices} devices x ${pings} pings, up to ${maxInside} fences at once, ${devicesOver20} devices inside 20+; ${compared} triggers, each as brute force expects; pool chunks in use at the end ${state.poolChunksInUse()} of ${state.poolChunks}`,
  );
  assert.equal(counters[CNT_FENCE_OVERFLOW_F64], 0, 'nothing untracked with the default bound');
  assert.ok(maxInside >= 30 && maxInside <= ROUTER_DEFAULTS.maxFencesPerDevice, `max fences at once ${maxInside}`);
  assert.ok(devicesOver20 >= devices / 2, `${devicesOver20} devices were inside 20+ fences`);
  assert.ok(compared > 20_000, `compared ${compared} triggers`);
});

test('the same city with a small bound and an exhausted pool: fewer triggers, never a wrong one', () => {
  const cityOptions = { seed: 12, fenceCount: 4000, fencesPerKm2: 400, minRadiusM: 100, maxRadiusM: 200 };
  const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity(cityOptions)), 1));
  const devices = 60;
  const state = DeviceState.open(allocateDeviceState(devices, 24, { overflowPoolEntries: 80 }));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  const ring = triggerRing(1 << 16);
  const b = syntheticCityBounds(cityOptions);
  const rng = mulberry32(9);
  for (let d = 0; d < devices; d++) {
    let lat = b.minLat + (0.2 + 0.6 * rng()) * (b.maxLat - b.minLat);
    let lon = b.minLon + (0.2 + 0.6 * rng()) * (b.maxLon - b.minLon);
    /** Per fence: true while the engine said ENTER without an EXIT yet. */
    const open = new Map<number, boolean>();
    let prevLat = lat;
    let prevLon = lon;
    for (let p = 0; p < 120; p++) {
      const scale = p % 29 === 28 ? 0.006 : 0.0006;
      lat += (rng() - 0.5) * scale;
      lon += (rng() - 0.5) * scale * 1.6;
      engine.processPing(d, lat, lon, 1_000_000 + p * 1000, 0, 1, ring);
      for (const t of drain(ring)) {
        const insideNow = store.contains(t.fence, lat, lon);
        const insideBefore = p > 0 && store.contains(t.fence, prevLat, prevLon);
        if (t.type === 'ENTER') {
          assert.ok(insideNow && !open.get(t.fence), `device ${d} ping ${p}: ENTER ${t.fence}`);
          // Never a late ENTER: the stay began at this ping.
          assert.ok(!insideBefore, `device ${d} ping ${p}: late ENTER ${t.fence}`);
          open.set(t.fence, true);
        } else if (t.type === 'EXIT') {
          assert.ok(!insideNow && open.get(t.fence) === true, `device ${d} ping ${p}: EXIT ${t.fence}`);
          open.set(t.fence, false);
        } else if (t.type === 'CROSS') {
          assert.ok(!insideNow && !insideBefore, `device ${d} ping ${p}: CROSS ${t.fence} of a fence it was inside`);
        }
      }
      // Every fence the engine holds open is one the device is inside.
      for (const [f, isOpen] of open)
        if (isOpen) assert.ok(store.contains(f, lat, lon), `device ${d} ping ${p}: ${f} open`);
      prevLat = lat;
      prevLon = lon;
    }
  }
  assert.ok(counters[CNT_FENCE_OVERFLOW_F64]! > 1000, `untracked ${counters[CNT_FENCE_OVERFLOW_F64]}`);
  assert.ok(state.poolChunksInUse() <= state.poolChunks);
});
