/**
 * Settling the batch of a failed containment task (HeldBatches.settle) on real shared memory: which records count
 * done, lost or dropped, and what becomes of an expiry record that fails (run again once, then dropped with its device
 * made active again for a later sweep).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolveRouterOptions } from '../../src/config/options.js';
import { DeviceIdReader } from '../../src/ingest/device-registry.js';
import { HeldBatches } from '../../src/pipeline/held-batch.js';
import { allocatePipelineMemory, pipelineMemorySpecOf } from '../../src/pipeline/memory.js';
import {
  DEVICE_LIFE_EPOCH_SHIFT,
  DeviceLife,
  RingKind,
  TEL_DEVICE_SLOT_I32,
  TEL_EXPIRE_EPOCH_F64,
  TEL_LANE_EXPIRE,
  TEL_LANE_I32,
  WDG_HELD_COUNT_I32,
  WDG_HELD_DONE_I32,
  WDG_PRE_SLOT_I32,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';

function rig(): { held: HeldBatches; cells: Int32Array; tel: SpscRing; life: Int32Array } {
  const o = resolveRouterOptions({ shards: 1, poolSize: 1, maxDevices: 8, stateDir: null });
  const m = allocatePipelineMemory(pipelineMemorySpecOf(o));
  const cells = new Int32Array(m.watchdog);
  const held = new HeldBatches(cells, m.preImages, m.deviceState, m.triggerRings, m.triggerMarks, m.idTable);
  return {
    held,
    cells,
    tel: SpscRing.wrap(m.telemetryRings[0]!, RingKind.TELEMETRY),
    life: new DeviceIdReader(m.idTable).lifeWords,
  };
}

/** Appends a record of `slot` (an expiry record of `epoch` when given, else a ping) to `tel`. */
function put(tel: SpscRing, slot: number, epoch?: number): void {
  const s = tel.claim();
  tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = slot;
  tel.i32[s * tel.strideI32 + TEL_LANE_I32] = epoch === undefined ? 1 : TEL_LANE_EXPIRE;
  if (epoch !== undefined) tel.f64[s * tel.strideF64 + TEL_EXPIRE_EPOCH_F64] = epoch;
  tel.publish();
}

/** Block 0 as a failed task leaves it: `count` records held, `done` of them done, no device state kept. */
function failed(cells: Int32Array, count: number, done: number): void {
  cells[WDG_HELD_COUNT_I32] = count;
  cells[WDG_HELD_DONE_I32] = done;
  cells[WDG_PRE_SLOT_I32] = -1;
}

test('a ping the task failed in is the one lost; the records done stand and the rest stay', () => {
  const { held, cells, tel } = rig();
  for (let k = 0; k < 5; k++) put(tel, k);
  failed(cells, 5, 2);
  const out = held.settle(0, tel, 0);
  assert.deepEqual([out.done, out.lost, out.dropped], [2, 1, 0]);
  // A batch run without the accounting is dropped whole.
  failed(cells, 5, -1);
  const whole = held.settle(0, tel, 0);
  assert.deepEqual([whole.done, whole.lost], [0, 5]);
});

test('an expiry record that fails is run again once; failing again it is dropped, its device active again', () => {
  const { held, cells, tel, life } = rig();
  const slot = 3;
  const epoch = 5;
  const retiring = (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING;
  life[slot] = retiring;
  put(tel, slot, epoch);

  failed(cells, 1, 0);
  const first = held.settle(0, tel, 0);
  assert.deepEqual([first.done, first.lost, first.dropped], [0, 0, 0], 'left in the ring to run again');
  assert.equal(life[slot], retiring);

  // The same record failing in another ring is another record: run again too.
  failed(cells, 1, 0);
  assert.equal(held.settle(0, tel, 1).dropped, 0);

  // The same record of the same ring failing again: dropped (not a lost ping), the sweep's step undone.
  failed(cells, 1, 0);
  const again = held.settle(0, tel, 1);
  assert.deepEqual([again.done, again.lost, again.dropped, again.droppedExpirySlot], [0, 0, 1, slot]);
  assert.equal(again.expiryUndone, true);
  assert.equal(life[slot], ((epoch - 1) << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.ACTIVE);
});

test('a dropped expiry record of a device a ping revived meanwhile leaves it as the ping left it', () => {
  const { held, cells, tel, life } = rig();
  const revived = (7 << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.ACTIVE;
  put(tel, 2, 6);
  life[2] = revived;
  failed(cells, 1, 0);
  held.settle(0, tel, 0);
  failed(cells, 1, 0);
  const out = held.settle(0, tel, 0);
  assert.equal(out.dropped, 1);
  assert.equal(out.expiryUndone, false);
  assert.equal(life[2], revived);
});
