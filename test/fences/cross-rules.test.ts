/**
 * The CROSS rules against a device that "teleports": a move faster than crossMaxSpeedMps, or across a gap longer
 * than crossMaxGapMs, makes no CROSS (counted); at most crossMaxPerDevicePerSec CROSS triggers per device per second
 * of its pings' event time (the rest counted), whatever the router's clock, so a stream read again at another pace
 * gives the same triggers; ENTER / EXIT are never limited. Figures before (rules off) and after.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CNT_BLOCK_F64,
  CNT_CROSS_OVER_BUDGET_F64,
  CNT_IMPLAUSIBLE_SEGMENTS_F64,
  CNT_TRIGGERS_F64,
  TriggerType,
} from '../../src/shm/layout.js';
import { ContainmentEngine, type ContainmentEngineOptions } from '../../src/fences/engine.js';
import { allocateDeviceState, buildFenceStore, DeviceState, FenceStore, parseFences } from '../../src/fences/index.js';
import { allocateCounterRegion } from '../../src/shm/regions.js';
import { at, collection, drain, square, triggerRing } from './helpers.js';

/** A row of 40 small fences 100 m apart along the east axis, from x = 100 m. */
const ROW = collection(...Array.from({ length: 40 }, (_, k) => square(`r${k}`, 100 + k * 100, 0, 20)));

function engineWith(options: ContainmentEngineOptions): {
  ping: (slot: number, eastM: number, tMs: number, admitMs?: number) => string[];
  counters: Float64Array;
} {
  const store = FenceStore.open(buildFenceStore(parseFences(ROW), 1));
  const state = DeviceState.open(allocateDeviceState(8, 8));
  const counters = new Float64Array(allocateCounterRegion(2, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, CNT_BLOCK_F64, options);
  const triggers = triggerRing(4096);
  return {
    counters,
    ping(slot, eastM, tMs, admitMs = tMs) {
      const [lat, lon] = at(eastM, 0);
      engine.processPing(slot, lat, lon, tMs, admitMs * 1e6, 1, triggers);
      return drain(triggers).map((t) => t.type);
    },
  };
}

const C = CNT_BLOCK_F64;

test('a teleport across 4 km in one second: 40 CROSS with the rules off, none with the default speed rule', () => {
  const off = engineWith({});
  off.ping(0, 0, 1000);
  const before = off.ping(0, 4200, 2000);
  assert.equal(before.length, 40);
  const on = engineWith({ crossMaxSpeedMps: 250 });
  on.ping(0, 0, 1000);
  assert.deepEqual(on.ping(0, 4200, 2000), []);
  assert.equal(on.counters[C + CNT_IMPLAUSIBLE_SEGMENTS_F64], 1);
  // The same path at 40 m/s (105 s): every CROSS.
  on.ping(1, 0, 1000);
  assert.equal(on.ping(1, 4200, 106_000).length, 40);
  // Same timestamp, another place: implausible too.
  on.ping(2, 0, 1000);
  assert.deepEqual(on.ping(2, 4200, 1000), []);
  console.log(
    `# teleport 4.2 km in 1 s over a row of 40 fences: ${before.length} CROSS per ping with the rules off, 0 with crossMaxSpeedMps 250`,
  );
});

test('a gap longer than crossMaxGapMs makes no CROSS; shorter gaps do', () => {
  const e = engineWith({ crossMaxGapMs: 60_000 });
  e.ping(0, 0, 0);
  assert.deepEqual(e.ping(0, 4200, 120_000), []);
  assert.equal(e.counters[C + CNT_IMPLAUSIBLE_SEGMENTS_F64], 1);
  assert.equal(e.ping(0, 0, 170_000).length, 40);
});

test("at most crossMaxPerDevicePerSec CROSS per device per second of its pings' time, the rest counted; ENTER and EXIT unlimited", () => {
  const e = engineWith({ crossMaxPerDevicePerSec: 10 });
  e.ping(0, 0, 0);
  // 4.2 km within one second of the device's own time (no speed rule here): 40 crossings, 10 written.
  assert.equal(e.ping(0, 4200, 200).length, 10);
  assert.equal(e.counters[C + CNT_CROSS_OVER_BUDGET_F64], 30);
  assert.deepEqual(e.ping(0, 0, 400), [], 'the budget is spent for this second');
  assert.equal(e.counters[C + CNT_CROSS_OVER_BUDGET_F64], 70);
  // A second of the device's time later the budget is back.
  assert.equal(e.ping(0, 4200, 1300).length, 10);
  // ENTER and EXIT are not limited: inside r0 and out again, with the CROSS budget spent.
  const device = engineWith({ crossMaxPerDevicePerSec: 1 });
  device.ping(3, 0, 0);
  device.ping(3, 4200, 100);
  assert.deepEqual(device.ping(3, 4200 - 4100, 200), ['ENTER']);
  assert.deepEqual(device.ping(3, 0, 300), ['EXIT']);
  assert.equal(device.counters[C + CNT_TRIGGERS_F64 + TriggerType.CROSS], 1);
});

test("the CROSS budget follows the pings' times, not the router's clock: the same pings read at another pace give the same triggers", () => {
  // A device zig-zagging over the row every 300 ms of its own time, for 20 s: the budget binds in most seconds.
  const paths = Array.from({ length: 67 }, (_, k) => ({ eastM: k % 2 === 0 ? 0 : 4200, tMs: k * 300 }));
  const live = engineWith({ crossMaxPerDevicePerSec: 25 });
  // Read live: each ping admitted when it was sent.
  const asLive = paths.map((p) => live.ping(0, p.eastM, p.tMs, p.tMs).join(','));
  const replay = engineWith({ crossMaxPerDevicePerSec: 25 });
  // Read again from a backlog: every ping admitted within the same few milliseconds.
  const asReplay = paths.map((p, k) => replay.ping(0, p.eastM, p.tMs, 5_000_000 + k * 0.01).join(','));
  assert.deepEqual(asReplay, asLive);
  assert.ok(live.counters[C + CNT_CROSS_OVER_BUDGET_F64]! > 0, 'the budget bound');
  assert.equal(replay.counters[C + CNT_CROSS_OVER_BUDGET_F64], live.counters[C + CNT_CROSS_OVER_BUDGET_F64]);
});
