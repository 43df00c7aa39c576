import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CNT_BLOCK_F64,
  CNT_FENCE_OVERFLOW_F64,
  CNT_GENERATION_MISMATCH_F64,
  CNT_INVALID_F64,
  CNT_PROCESSED_F64,
  CNT_STALE_F64,
  CNT_TRIGGERS_F64,
  Lane,
  RingKind,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TELEMETRY_STRIDE_BYTES,
  TriggerType,
  EntryState,
} from '../../src/shm/layout.js';
import { allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { FenceStore, buildFenceStore, parseFences, reloadDeviceState } from '../../src/fences/index.js';
import { at, circle, collection, drain, rig, square } from './helpers.js';

const types = (ts: { type: string }[]): string[] => ts.map((t) => t.type);
const C = CNT_BLOCK_F64; // the rig's counters use the second block

test('ENTER then EXIT; pings outside produce nothing; no EXIT without ENTER', () => {
  const r = rig(collection(square('a', 0, 0, 50)));
  assert.deepEqual(r.ping(0, -200, 0, 1000), []);
  assert.deepEqual(r.ping(0, -100, 0, 2000), []);
  const enter = r.ping(0, 0, 0, 3000);
  assert.deepEqual(types(enter), ['ENTER']);
  assert.equal(enter[0]!.fence, 0);
  assert.equal(enter[0]!.slot, 0);
  assert.equal(enter[0]!.generation, 1);
  assert.equal(enter[0]!.eventTimeMs, 3000);
  assert.equal(enter[0]!.admitTimeNs, 3000 * 1e6);
  assert.deepEqual(r.ping(0, 10, 10, 4000), []);
  const exit = r.ping(0, 100, 0, 9000);
  assert.deepEqual(types(exit), ['EXIT']);
  assert.equal(exit[0]!.insideMs, 6000);
  assert.ok(exit[0]!.seq > enter[0]!.seq);
  assert.deepEqual(r.ping(0, 200, 0, 10_000), []);
  assert.equal(r.counters[C + CNT_PROCESSED_F64], 6);
  assert.equal(r.counters[C + CNT_TRIGGERS_F64 + TriggerType.ENTER], 1);
  assert.equal(r.counters[C + CNT_TRIGGERS_F64 + TriggerType.EXIT], 1);
  // First ping already inside: ENTER first, never a bare EXIT.
  assert.deepEqual(types(r.ping(1, 0, 0, 1000)), ['ENTER']);
  assert.deepEqual(types(r.ping(1, 500, 0, 2000)), ['EXIT']);
});

test('DWELL fires once per stay, again in a later stay', () => {
  const r = rig(collection(square('a', 0, 0, 50, { dwellMs: 5000 })));
  const seen: string[] = [];
  seen.push(...types(r.ping(0, 0, 0, 0)));
  for (let t = 1000; t <= 20_000; t += 1000) seen.push(...types(r.ping(0, 0, 0, t)));
  assert.deepEqual(seen, ['ENTER', 'DWELL']);
  seen.length = 0;
  seen.push(...types(r.ping(0, 300, 0, 21_000)));
  for (let t = 22_000; t <= 40_000; t += 1000) seen.push(...types(r.ping(0, 0, 0, t)));
  assert.deepEqual(seen, ['EXIT', 'ENTER', 'DWELL']);
});

test('DWELL carries the time inside; dwellMs 0 fires with the ENTER', () => {
  const r = rig(collection(square('a', 0, 0, 50, { dwellMs: 5000 }), square('b', 1000, 0, 50, { dwellMs: 0 })));
  r.ping(0, 0, 0, 0);
  const d = r.ping(0, 0, 0, 7000);
  assert.equal(d[0]!.type, 'DWELL');
  assert.equal(d[0]!.insideMs, 7000);
  assert.deepEqual(types(r.ping(1, 1000, 0, 0)), ['ENTER', 'DWELL']);
});

test('CROSS for a jump over a small fence and over a circle; not when an end is inside', () => {
  const r = rig(collection(square('small', 0, 0, 10), circle('c', 0, 500, 15)));
  r.ping(0, -100, 0, 0);
  const cross = r.ping(0, 100, 0, 1000);
  assert.deepEqual(types(cross), ['CROSS']);
  assert.equal(cross[0]!.fence, 0);
  r.ping(1, -100, 510, 0);
  const c = r.ping(1, 100, 490, 1000);
  assert.deepEqual(types(c), ['CROSS']);
  assert.equal(c[0]!.fence, 1);
  // A segment passing beside the fence is no CROSS.
  r.ping(2, -100, 30, 0);
  assert.deepEqual(r.ping(2, 100, 30, 1000), []);
  // Ending inside is an ENTER, not a CROSS.
  r.ping(3, -100, 0, 0);
  assert.deepEqual(types(r.ping(3, 0, 0, 1000)), ['ENTER']);
  assert.deepEqual(types(r.ping(3, 100, 0, 2000)), ['EXIT']);
  assert.equal(r.counters[C + CNT_TRIGGERS_F64 + TriggerType.CROSS], 2);
});

test('boundary flapping triggers without hysteresis, not with exitBufferM or minInsideMs/minOutsideMs', () => {
  // Pings alternate 2 m inside and 2 m outside the east edge of each fence.
  const flap = (r: ReturnType<typeof rig>, eastEdgeM: number): string[] => {
    const seen: string[] = [];
    for (let k = 0; k < 20; k++) seen.push(...types(r.ping(0, eastEdgeM + (k % 2 === 0 ? -2 : 2), 0, k * 1000)));
    return seen;
  };
  const plain = rig(collection(square('a', 0, 0, 50)));
  const noHysteresis = flap(plain, 50);
  assert.equal(noHysteresis.length, 20);
  assert.deepEqual(noHysteresis.slice(0, 4), ['ENTER', 'EXIT', 'ENTER', 'EXIT']);

  const buffered = rig(collection(square('a', 0, 0, 50, { exitBufferM: 10 })));
  assert.deepEqual(flap(buffered, 50), ['ENTER']);
  // Beyond the buffer the EXIT comes.
  assert.deepEqual(types(buffered.ping(0, 65, 0, 30_000)), ['EXIT']);

  const timed = rig(collection(square('a', 0, 0, 50, { minInsideMs: 3000, minOutsideMs: 3000 })));
  assert.deepEqual(flap(timed, 50), []);
  // Staying inside for minInsideMs confirms the ENTER; flapping out for less than minOutsideMs does not EXIT.
  const seen: string[] = [];
  for (let t = 30_000; t <= 34_000; t += 1000) seen.push(...types(timed.ping(0, 0, 0, t)));
  assert.deepEqual(seen, ['ENTER']);
  assert.deepEqual(timed.ping(0, 60, 0, 35_000), []);
  assert.deepEqual(timed.ping(0, 0, 0, 36_000), []);
  assert.deepEqual(timed.ping(0, 60, 0, 37_000), []);
  assert.deepEqual(timed.ping(0, 60, 0, 39_000), []);
  const exit = timed.ping(0, 60, 0, 40_000);
  assert.deepEqual(types(exit), ['EXIT']);
  assert.equal(exit[0]!.insideMs, 40_000 - 30_000);
});

test('out-of-order pings are ignored and counted; invalid pings counted', () => {
  const r = rig(collection(square('a', 0, 0, 50)));
  assert.deepEqual(types(r.ping(0, 0, 0, 5000)), ['ENTER']);
  assert.deepEqual(r.ping(0, 500, 0, 4000), []);
  assert.equal(r.counters[C + CNT_STALE_F64], 1);
  assert.ok(r.state.isInside(0, 0));
  assert.equal(r.state.lastEventMs(0), 5000);
  assert.deepEqual(types(r.ping(0, 500, 0, 6000)), ['EXIT']);
  r.engine.processPing(0, Number.NaN, 13.4, 7000, 0, 1, r.triggers);
  r.engine.processPing(99, 52.5, 13.4, 7000, 0, 1, r.triggers);
  assert.equal(r.counters[C + CNT_INVALID_F64], 2);
  assert.equal(r.counters[C + CNT_PROCESSED_F64], 2);
});

test('bounded fences per device: overflow counted, the rest tracked', () => {
  const r = rig(collection(square('a', 0, 0, 50), square('b', 0, 0, 40), square('c', 0, 0, 30)), 2);
  const enter = r.ping(0, 0, 0, 0);
  assert.deepEqual(types(enter), ['ENTER', 'ENTER']);
  assert.equal(r.counters[C + CNT_FENCE_OVERFLOW_F64], 1);
  assert.equal(r.state.entryCount(0), 2);
  // Leaving the smallest two frees an entry; the next ping inside the third tracks it.
  const tracked = new Set(enter.map((t) => t.fence));
  const missing = [0, 1, 2].find((f) => !tracked.has(f))!;
  assert.equal(r.counters[C + CNT_FENCE_OVERFLOW_F64], 1);
  assert.ok(!r.state.isInside(0, missing));
});

test('sequence numbers increase per device across fences and stays', () => {
  const r = rig(collection(square('a', 0, 0, 50, { dwellMs: 1000 }), square('b', 200, 0, 50)));
  const all = [
    ...r.ping(0, 0, 0, 0),
    ...r.ping(0, 0, 0, 2000),
    ...r.ping(0, 200, 0, 3000),
    ...r.ping(0, 0, 0, 4000),
    ...r.ping(0, -300, 0, 5000),
    ...r.ping(0, 300, 0, 6000),
  ];
  assert.deepEqual(types(all), ['ENTER', 'DWELL', 'EXIT', 'ENTER', 'EXIT', 'ENTER', 'EXIT', 'CROSS', 'CROSS']);
  for (let k = 1; k < all.length; k++) assert.ok(all[k]!.seq > all[k - 1]!.seq, `seq at ${k}`);
  assert.equal(all[0]!.seq, 1);
});

test('insideCompliance follows entries on compliance fences; a trigger takes the class of its fence as its lane', () => {
  const r = rig(collection(square('plain', 0, 0, 50), square('comp', 300, 0, 50, { compliance: true })));
  r.ping(0, 0, 0, 0);
  assert.equal(r.state.insideCompliance(0), false);
  const e = r.ping(0, 300, 0, 1000, Lane.COMPLIANCE);
  assert.deepEqual(types(e), ['EXIT', 'ENTER']);
  // The same COMPLIANCE ping: the EXIT of the plain fence is TRANSITION (like its ENTER was), the ENTER of the
  // compliance fence is COMPLIANCE, so no trigger of one (device, fence) can overtake another in a dispatch queue.
  assert.deepEqual(
    e.map((t) => t.lane),
    [Lane.TRANSITION, Lane.COMPLIANCE],
  );
  assert.equal(r.state.insideCompliance(0), true);
  r.ping(0, 600, 0, 2000, Lane.COMPLIANCE);
  assert.equal(r.state.insideCompliance(0), false);
  assert.equal(r.store.nearCompliance(...at(300, 0), 0), true);
  assert.equal(r.store.nearCompliance(...at(370, 0), 0), false);
  assert.equal(r.store.nearCompliance(...at(370, 0), 30), true);
});

test('processBatch over a telemetry ring equals processPing one by one', () => {
  const fences = collection(square('a', 0, 0, 50, { dwellMs: 2000 }), circle('c', 150, 0, 30), square('s', 0, 300, 5));
  const script: [number, number, number, number][] = [];
  for (let k = 0; k < 60; k++) script.push([k % 3, -200 + k * 10, (k % 3) * 20, k * 500]);
  const one = rig(fences);
  const expected = script.flatMap(([slot, e, n, t]) => one.ping(slot, e, n, t, Lane.TRANSITION));
  const batch = rig(fences);
  const tel = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 64, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  for (const [slot, e, n, t] of script) {
    const s = tel.claim();
    const [lat, lon] = at(e, n);
    tel.f64[s * tel.strideF64 + TEL_LAT_F64] = lat;
    tel.f64[s * tel.strideF64 + TEL_LON_F64] = lon;
    tel.f64[s * tel.strideF64 + TEL_EVENT_TIME_MS_F64] = t;
    tel.f64[s * tel.strideF64 + TEL_ADMIT_TIME_NS_F64] = t * 1e6;
    tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = slot;
    tel.i32[s * tel.strideI32 + TEL_LANE_I32] = Lane.TRANSITION;
  }
  tel.publish();
  const written = batch.engine.processBatch(tel, tel.readSeq(), tel.available(), batch.triggers);
  const got = drain(batch.triggers);
  assert.equal(written, got.length);
  assert.ok(got.length >= 6);
  assert.deepEqual(got, expected);
  // Consumer side only: the batch does not release the telemetry it read.
  assert.equal(tel.available(), script.length);
});

test('reload keeps state for fences that still exist and emits EXIT for removed fences', () => {
  const gen1 = collection(
    square('keep', 0, 0, 50, { dwellMs: 1000 }),
    square('gone', 0, 0, 40),
    square('other', 500, 0, 50),
  );
  const r = rig(gen1);
  assert.deepEqual(types(r.ping(0, 0, 0, 0)), ['ENTER', 'ENTER']);
  assert.deepEqual(types(r.ping(0, 0, 0, 2000)), ['DWELL']);
  // Device 1 is pending (minInsideMs) on nothing; device 2 outside everything.
  r.ping(2, 900, 0, 0);
  const oldStore = r.store;
  const keepOld = oldStore.indexOfId('keep');
  const goneOld = oldStore.indexOfId('gone');
  // Generation 2: 'gone' removed, 'keep' moved to another index, 'new' added.
  const gen2 = collection(
    square('new', 900, 0, 50),
    square('other', 500, 0, 50),
    square('keep', 0, 0, 50, { dwellMs: 1000 }),
  );
  const newStore = FenceStore.open(buildFenceStore(parseFences(gen2), 2));
  const written = reloadDeviceState(r.state, oldStore, newStore, r.triggers, r.counters, C, { reloadTimeNs: 123 });
  const exits = drain(r.triggers);
  assert.equal(written, 1);
  assert.deepEqual(types(exits), ['EXIT']);
  assert.equal(exits[0]!.fence, goneOld);
  assert.equal(exits[0]!.generation, 1);
  assert.equal(exits[0]!.insideMs, 2000);
  assert.equal(exits[0]!.admitTimeNs, 123);
  const keepNew = newStore.indexOfId('keep');
  assert.notEqual(keepNew, keepOld);
  assert.equal(r.state.entryStateOf(0, keepNew), EntryState.INSIDE | EntryState.DWELL_FIRED);
  assert.equal(r.state.generationOf(0), 2);
  r.engine.useStore(newStore);
  // Still inside 'keep': no new ENTER, no second DWELL.
  assert.deepEqual(r.ping(0, 0, 0, 3000), []);
  const exit = r.ping(0, 200, 0, 4000);
  assert.deepEqual(types(exit), ['EXIT']);
  assert.equal(exit[0]!.fence, keepNew);
  assert.equal(exit[0]!.generation, 2);
  assert.equal(exit[0]!.insideMs, 4000);
  // Device 2 now sits inside the new fence.
  assert.deepEqual(types(r.ping(2, 900, 0, 5000)), ['ENTER']);
  assert.equal(r.counters[C + CNT_GENERATION_MISMATCH_F64], 0);
});

test('a device whose state was not carried over is counted and starts afresh', () => {
  const r = rig(collection(square('a', 0, 0, 50)));
  r.ping(0, 0, 0, 0);
  const next = FenceStore.open(buildFenceStore(parseFences(collection(square('a', 0, 0, 50))), 2));
  r.engine.useStore(next);
  assert.deepEqual(types(r.ping(0, 0, 0, 1000)), ['ENTER']);
  assert.equal(r.counters[C + CNT_GENERATION_MISMATCH_F64], 1);
});
