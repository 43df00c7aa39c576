import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';

/**
 * Runs `body` (an async function's source taking the module namespaces) in a worker thread and resolves with what it
 * returns, or rejects after `timeoutMs`: a producer blocked on a full ring parks its whole thread, which no test
 * timeout on the blocked thread itself could interrupt.
 */
function inWorker(body: string, timeoutMs: number): Promise<unknown> {
  const base = new URL('../../src/', import.meta.url).href;
  const source = `
    const { parentPort } = await import('node:worker_threads');
    const m = {
      fences: await import('${base}fences/index.js'),
      layout: await import('${base}shm/layout.js'),
      regions: await import('${base}shm/regions.js'),
      ring: await import('${base}shm/ring.js'),
      warm: await import('${base}pipeline/warm-up.js'),
    };
    parentPort.postMessage(await (${body})(m));
  `;
  const worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(source)}`));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void worker.terminate();
      reject(new Error(`still blocked after ${timeoutMs} ms`));
    }, timeoutMs);
    worker.once('message', (v) => {
      clearTimeout(timer);
      void worker.terminate();
      resolve(v);
    });
    worker.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

test('a scratch trigger ring is emptied by its writer when full: one ping that writes 40 triggers into 16 slots returns', async () => {
  const written = await inWorker(
    `async (m) => {
      const { fences, layout, regions, ring } = m;
      const sq = (id, half) => ({ type: 'Feature', properties: { id }, geometry: { type: 'Polygon', coordinates: [[
        [13.4 - half, 52.5 - half], [13.4 + half, 52.5 - half], [13.4 + half, 52.5 + half], [13.4 - half, 52.5 + half], [13.4 - half, 52.5 - half]]] } });
      const fc = { type: 'FeatureCollection', features: Array.from({ length: 40 }, (_, i) => sq('n' + i, 0.001 * (i + 1))) };
      const store = fences.FenceStore.open(fences.buildFenceStore(fences.parseFences(fc), 1));
      const state = fences.DeviceState.open(fences.allocateDeviceState(4, 64));
      const counters = new Float64Array(regions.allocateCounterRegion(1, layout.CNT_BLOCK_F64));
      const engine = new fences.ContainmentEngine(store, state, counters, 0);
      const triggers = ring.SpscRing.wrap(regions.allocateRingRegion({ capacitySlots: 16, strideBytes: layout.TRIGGER_STRIDE_BYTES, kind: layout.RingKind.TRIGGER }), layout.RingKind.TRIGGER).markScratch();
      return engine.processPing(0, 52.5, 13.4, 1000, 0, 1, triggers);
    }`,
    20_000,
  );
  assert.equal(written, 40);
});

test('warm-up over a dense city (3,019 fences in 2 x 2 km) finishes', async () => {
  const pings = await inWorker(
    `async (m) => {
      const city = m.fences.generateSyntheticCity({ seed: 7, fenceCount: 3019, fencesPerKm2: 3019 / 4, minRadiusM: 60, maxRadiusM: 300 });
      const store = m.fences.FenceStore.open(m.fences.buildFenceStore(m.fences.parseFences(city), 1));
      return m.warm.warmContainment(store, { pings: 20_000, maxMs: 60_000, seed: 7 });
    }`,
    60_000,
  );
  assert.ok((pings as number) >= 20_000, `warmed ${String(pings)} pings`);
});
