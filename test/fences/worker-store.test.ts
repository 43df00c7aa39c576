import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import {
  FenceStore,
  allocateDeviceState,
  DeviceState,
  buildFenceStore,
  generateSyntheticCity,
  mulberry32,
  parseFences,
  syntheticCityBounds,
} from '../../src/fences/index.js';
import { allocateCounterRegion } from '../../src/shm/regions.js';
import { CNT_BLOCK_F64, CNT_PROCESSED_F64, FENCE_MIN_X_F64, FENCE_STRIDE_F64 } from '../../src/shm/layout.js';
import { at, collection, drain, square, triggerRing } from './helpers.js';

async function ask<T>(worker: Worker, msg: unknown): Promise<T> {
  worker.postMessage(msg);
  const [reply] = (await once(worker, 'message')) as [T];
  return reply;
}

test('a worker opens the store from its descriptor zero-copy and gives the same answers', async () => {
  const options = { seed: 9, fenceCount: 2000, fencesPerKm2: 300, circleFraction: 0.1 };
  const descriptor = buildFenceStore(parseFences(generateSyntheticCity(options)), 5);
  const store = FenceStore.open(descriptor);
  const stateD = allocateDeviceState(4, 4);
  const counters = allocateCounterRegion(1, CNT_BLOCK_F64);
  const triggers = triggerRing(256);
  const worker = new Worker(new URL('./fixtures/store-worker.js', import.meta.url), {
    workerData: { store: descriptor, state: stateD, counters, triggers: triggers.buffer },
  });
  try {
    const b = syntheticCityBounds(options);
    const rng = mulberry32(1);
    const points = new Float64Array(4000);
    for (let i = 0; i < points.length; i += 2) {
      points[i] = b.minLat + rng() * (b.maxLat - b.minLat);
      points[i + 1] = b.minLon + rng() * (b.maxLon - b.minLon);
    }
    const out = new Int32Array(store.fenceCount);
    const mine = (): number[][] => {
      const answers: number[][] = [];
      for (let i = 0; i < points.length; i += 2) {
        const n = store.candidatesInto(points[i]!, points[i + 1]!, out);
        const inside: number[] = [];
        for (let k = 0; k < n; k++) if (store.contains(out[k]!, points[i]!, points[i + 1]!)) inside.push(out[k]!);
        answers.push(inside.sort((x, y) => x - y));
      }
      return answers;
    };
    const first = await ask<{ answers: number[][]; sharedIndex: boolean }>(worker, { points });
    assert.equal(first.sharedIndex, true);
    const expected = mine();
    assert.deepEqual(first.answers, expected);
    assert.ok(expected.filter((a) => a.length > 0).length > 100);
    // Zero-copy: a change this thread makes to the shared fence records is seen by the worker.
    const victim = expected.find((a) => a.length > 0)![0]!;
    store.fenceF64[victim * FENCE_STRIDE_F64 + FENCE_MIN_X_F64] = Infinity;
    const second = await ask<{ answers: number[][] }>(worker, { points });
    assert.deepEqual(second.answers, mine());
    assert.notDeepEqual(second.answers, expected);
  } finally {
    await worker.terminate();
  }
});

test('device state written by a worker is read by this thread (insideCompliance, entries)', async () => {
  const descriptor = buildFenceStore(parseFences(collection(square('comp', 0, 0, 50, { compliance: true }))), 1);
  const stateD = allocateDeviceState(4, 4);
  const counters = allocateCounterRegion(1, CNT_BLOCK_F64);
  const triggers = triggerRing(256);
  const worker = new Worker(new URL('./fixtures/store-worker.js', import.meta.url), {
    workerData: { store: descriptor, state: stateD, counters, triggers: triggers.buffer },
  });
  try {
    const state = DeviceState.open(stateD);
    const [lat, lon] = at(0, 0);
    const reply = await ask<{ written: number }>(worker, { pings: Float64Array.of(2, lat, lon, 1000) });
    assert.equal(reply.written, 1);
    assert.equal(state.insideCompliance(2), true);
    assert.equal(state.isInside(2, 0), true);
    const got = drain(triggers);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.type, 'ENTER');
    assert.equal(got[0]!.lane, 2);
    assert.equal(new Float64Array(counters)[CNT_PROCESSED_F64], 1);
    const [lat2, lon2] = at(500, 0);
    await ask(worker, { pings: Float64Array.of(2, lat2, lon2, 2000) });
    assert.equal(state.insideCompliance(2), false);
    assert.equal(drain(triggers)[0]!.type, 'EXIT');
  } finally {
    await worker.terminate();
  }
});
