import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import { allocateDeviceState, buildFenceStore, parseFences } from '../../src/fences/index.js';
import { allocateCounterRegion, allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import {
  CNT_BLOCK_F64,
  CNT_PROCESSED_F64,
  CNT_TRIGGER_RING_WAITS_F64,
  RingKind,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TELEMETRY_STRIDE_BYTES,
} from '../../src/shm/layout.js';
import { at, collection, drain, readTrigger, rig, square, triggerRing, type ReadTrigger } from './helpers.js';

const DEVICES = 8;
const PINGS_PER_DEVICE = 300;
/** Far smaller than the triggers the batch produces: the worker must stop and resume many times. */
const TRIGGER_RING_SLOTS = 16;

/** Where device d is at its k-th ping (metres east, north): fence A, fence B, then well outside both, in turn. */
function position(d: number, k: number): [number, number] {
  const phase = (k + d) % 3;
  return phase === 0 ? [0, 0] : phase === 1 ? [1000, 0] : [0, 2000 + d * 10];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

test('a worker whose trigger ring is full blocks, resumes as another thread releases, and loses nothing', async () => {
  const geojson = collection(square('A', 0, 0, 50), square('B', 1000, 0, 50, { dwellMs: 0 }));
  const descriptor = buildFenceStore(parseFences(geojson), 1);
  const count = DEVICES * PINGS_PER_DEVICE;

  // The expected triggers: the same pings through an engine on this thread with a ring that never fills.
  const reference = rig(geojson, 8);
  const expected: ReadTrigger[] = [];
  for (let k = 0; k < PINGS_PER_DEVICE; k++) {
    for (let d = 0; d < DEVICES; d++) {
      const [e, n] = position(d, k);
      const [lat, lon] = at(e, n);
      reference.engine.processPing(d, lat, lon, k * 1000, k * 1e6 + d, 1, reference.triggers);
      expected.push(...drain(reference.triggers));
    }
  }
  assert.ok(expected.length > 10 * TRIGGER_RING_SLOTS, `expected ${expected.length} triggers`);

  // The batch, preloaded into a telemetry ring the worker consumes.
  const telemetry = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 4096, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  for (let k = 0; k < PINGS_PER_DEVICE; k++) {
    for (let d = 0; d < DEVICES; d++) {
      const [e, n] = position(d, k);
      const [lat, lon] = at(e, n);
      const s = telemetry.claim();
      telemetry.f64[s * telemetry.strideF64 + TEL_LAT_F64] = lat;
      telemetry.f64[s * telemetry.strideF64 + TEL_LON_F64] = lon;
      telemetry.f64[s * telemetry.strideF64 + TEL_EVENT_TIME_MS_F64] = k * 1000;
      telemetry.f64[s * telemetry.strideF64 + TEL_ADMIT_TIME_NS_F64] = k * 1e6 + d;
      telemetry.i32[s * telemetry.strideI32 + TEL_DEVICE_SLOT_I32] = d;
      telemetry.i32[s * telemetry.strideI32 + TEL_LANE_I32] = 1;
    }
  }
  telemetry.publish();

  const triggers = triggerRing(TRIGGER_RING_SLOTS);
  const countersBuffer = allocateCounterRegion(1, CNT_BLOCK_F64);
  const counters = new Float64Array(countersBuffer);
  const worker = new Worker(new URL('./fixtures/batch-worker.js', import.meta.url), {
    workerData: {
      store: descriptor,
      state: allocateDeviceState(DEVICES, 8),
      counters: countersBuffer,
      telemetry: telemetry.buffer,
      triggers: triggers.buffer,
      count,
    },
  });
  const done = once(worker, 'message') as Promise<[{ written: number }]>;
  try {
    const got: ReadTrigger[] = [];
    // Nothing is consumed yet: the worker fills the ring and parks. Then, five times over: release 3 records and
    // see the worker resume, fill the 3 slots and park again (its wait count rises by one each time).
    for (let round = 1; round <= 6; round++) {
      for (let waited = 0; counters[CNT_TRIGGER_RING_WAITS_F64]! < round; waited += 2) {
        assert.ok(waited < 30_000, `the worker did not wait for trigger ring space (round ${round})`);
        await sleep(2);
      }
      assert.equal(counters[CNT_TRIGGER_RING_WAITS_F64], round);
      // The ring is full: of published triggers, and of the blocked record's own, which it publishes once done.
      const published = triggers.available();
      assert.ok(published >= 3 && published <= TRIGGER_RING_SLOTS, `${published} published`);
      const processedWhenBlocked = counters[CNT_PROCESSED_F64]!;
      assert.ok(processedWhenBlocked < count);
      if (round === 1) {
        // While nobody releases, the worker makes no progress (it waits; it does not skip or overwrite).
        await sleep(100);
        assert.equal(counters[CNT_PROCESSED_F64], processedWhenBlocked);
        assert.equal(triggers.available(), published);
      }
      if (round === 6) break;
      for (let k = 0; k < 3; k++) got.push(readTrigger(triggers, k));
      triggers.release(3);
    }

    // Then consume a few records at a time, as a dispatcher on this thread, to the end of the batch.
    while (got.length < expected.length) {
      // A wait may end early with nothing to read (a wake meant for an earlier wait): wait again, 10 s in all.
      let n = 0;
      for (const end = Date.now() + 10_000; n === 0 && Date.now() < end;) n = triggers.waitForData(1000);
      assert.ok(n > 0, `no trigger for 10 s after ${got.length} of ${expected.length}`);
      // At most 3 at a time, so the worker refills a nearly full ring again and again.
      const take = Math.min(n, 3);
      for (let k = 0; k < take; k++) got.push(readTrigger(triggers, k));
      triggers.release(take);
    }
    const [{ written }] = await done;
    assert.equal(written, expected.length);
    assert.equal(triggers.available(), 0);
    assert.equal(counters[CNT_PROCESSED_F64], count);
    // Every trigger, in order, none lost or duplicated.
    const key = (t: ReadTrigger): string =>
      `${t.type} ${t.slot} ${t.fence} ${t.seq} ${t.eventTimeMs} ${t.admitTimeNs} ${t.lat} ${t.lon}`;
    assert.deepEqual(got.map(key), expected.map(key));
  } finally {
    await worker.terminate();
  }
});
