/**
 * An expiry record in the containment engine: the expired device's stays end with EXITs marked expired, at its last
 * position and time (or with nothing in silent mode), pending entries end silently, its state is cleared (its seq is
 * kept), and a retire marker carrying the life epoch follows its last trigger. Other devices are untouched. A record
 * whose device is no longer RETIRING in its epoch (revived since) ends nothing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CNT_BLOCK_F64,
  CNT_EXPIRED_DEVICES_F64,
  CNT_EXPIRY_EXITS_F64,
  CNT_TRIGGERS_F64,
  DEV_COMPLIANCE_COUNT_I32,
  DEV_ENTRY_COUNT_I32,
  DEV_HAS_LAST_I32,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  DEVICE_LIFE_EPOCH_SHIFT,
  DeviceLife,
  Lane,
  TRG_DEVICE_SLOT_I32,
  TRG_EXPIRED_FLAG,
  TRG_FENCE_INDEX_I32,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
  TRG_TYPE_RETIRE,
  TriggerType,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';
import { ContainmentEngine } from '../../src/fences/engine.js';
import { at, collection, expiryRecordRing, rig, square } from './helpers.js';

interface Raw {
  type: number;
  slot: number;
  fenceCell: number;
  seq: number;
  lat: number;
  lon: number;
  eventTimeMs: number;
  insideMs: number;
}

function expire(
  engine: ContainmentEngine,
  triggers: SpscRing,
  slot: number,
  epoch: number,
): { written: number; out: Raw[] } {
  const tel = expiryRecordRing(slot, epoch);
  const written = engine.processBatch(tel, tel.readSeq(), 1, triggers);
  const out: Raw[] = [];
  const n = triggers.available();
  for (let k = 0; k < n; k++) {
    const x = triggers.readSlot(k);
    const f = x * triggers.strideF64;
    const i = x * triggers.strideI32;
    out.push({
      type: triggers.i32[i + TRG_TYPE_I32]!,
      slot: triggers.i32[i + TRG_DEVICE_SLOT_I32]!,
      fenceCell: triggers.i32[i + TRG_FENCE_INDEX_I32]!,
      seq: triggers.f64[f + TRG_SEQ_F64]!,
      lat: triggers.f64[f + 0]!,
      lon: triggers.f64[f + 1]!,
      eventTimeMs: triggers.f64[f + 2]!,
      insideMs: triggers.f64[f + 5]!,
    });
  }
  triggers.release(n);
  return { written, out };
}

const C = CNT_BLOCK_F64;
const FENCES = collection(
  square('a', 0, 0, 300),
  square('b', 0, 0, 100),
  square('p', 0, 0, 50, { minInsideMs: 60_000 }),
  square('far', 5000, 0, 50),
);

test('expiry: an EXIT marked expired per fence the device is inside, then the retire marker; state cleared, seq kept', () => {
  const r = rig(FENCES);
  r.ping(0, -500, 0, 1000);
  const enters = r.ping(0, 0, 0, 2000);
  assert.equal(enters.length, 2, 'ENTER a, ENTER b (p is pending)');
  r.ping(0, 10, 0, 5000);
  r.ping(1, 5000, 0, 5000);
  const seqBefore = r.state.devF64[DEV_TRIGGER_SEQ_F64]!;
  const { written, out } = expire(r.engine, r.triggers, 0, 7);
  assert.equal(written, 2);
  assert.deepEqual(
    out.map((t) => t.type),
    [TriggerType.EXIT, TriggerType.EXIT, TRG_TYPE_RETIRE],
  );
  const [lat, lon] = at(10, 0);
  for (const t of out.slice(0, 2)) {
    assert.ok((t.fenceCell & TRG_EXPIRED_FLAG) !== 0, 'marked expired');
    assert.equal((t.fenceCell >>> 28) & 3, Lane.TRANSITION);
    assert.equal(t.eventTimeMs, 5000, 'at its last time');
    assert.equal(t.lat, lat);
    assert.equal(t.lon, lon);
    assert.equal(t.insideMs, 3000);
    assert.equal(t.slot, 0);
  }
  assert.deepEqual(
    out.slice(0, 2).map((t) => t.seq),
    [seqBefore + 1, seqBefore + 2],
  );
  assert.equal(out[2]!.seq, 7, 'the marker carries the life epoch');
  assert.equal(out[2]!.slot, 0);
  const di = 0 * DEV_STRIDE_I32;
  assert.equal(r.state.devI32[di + DEV_ENTRY_COUNT_I32], 0);
  assert.equal(r.state.devI32[di + DEV_HAS_LAST_I32], 0);
  assert.equal(r.state.devI32[di + DEV_COMPLIANCE_COUNT_I32], 0);
  assert.equal(r.state.devF64[0 * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64], seqBefore + 2, 'seq kept');
  assert.equal(r.counters[C + CNT_EXPIRED_DEVICES_F64], 1);
  assert.equal(r.counters[C + CNT_EXPIRY_EXITS_F64], 2);
  assert.equal(r.counters[C + CNT_TRIGGERS_F64 + TriggerType.EXIT], 2, 'the marker is not counted as a trigger');
  // The device sends again: a new stay, seq continuing.
  const again = r.ping(0, 0, 0, 9000);
  assert.deepEqual(
    again.map((t) => t.type),
    ['ENTER', 'ENTER'],
  );
  assert.ok(again[0]!.seq > seqBefore + 2);
  // The other device was not touched.
  assert.equal(r.state.devI32[1 * DEV_STRIDE_I32 + DEV_HAS_LAST_I32], 1);
});

test('silent expiry: no EXIT, only the marker; an idle device outside every fence gets only the marker', () => {
  const r = rig(FENCES);
  const silent = new ContainmentEngine(r.store, r.state, r.counters, C, { exitOnExpiry: false });
  r.ping(0, 0, 0, 1000);
  const s1 = expire(silent, r.triggers, 0, 1);
  assert.deepEqual(
    s1.out.map((t) => t.type),
    [TRG_TYPE_RETIRE],
  );
  assert.equal(s1.written, 0);
  assert.equal(r.state.devI32[DEV_ENTRY_COUNT_I32], 0);
  r.ping(2, 2000, 2000, 1000);
  const s2 = expire(r.engine, r.triggers, 2, 3);
  assert.deepEqual(
    s2.out.map((t) => t.type),
    [TRG_TYPE_RETIRE],
  );
});

test('an expiry record whose device sent again since (revived, or expired again) ends nothing: only the marker', () => {
  const r = rig(FENCES);
  const life = new Int32Array(new SharedArrayBuffer(4 * 4));
  r.engine.watchLifeWords(life);
  const word = (epoch: number, state: number): number => (epoch << DEVICE_LIFE_EPOCH_SHIFT) | state;
  r.ping(0, -500, 0, 1000);
  assert.equal(r.ping(0, 0, 0, 2000).length, 2, 'ENTER a, ENTER b');
  // Marked expired in epoch 5, then revived by a ping another ingest thread wrote (processed first): ACTIVE(5).
  life[0] = word(5, DeviceLife.ACTIVE);
  r.ping(0, 5, 0, 3000);
  const entries = r.state.devI32[DEV_ENTRY_COUNT_I32];
  assert.equal(entries, 3, 'a and b, and p pending');
  const revived = expire(r.engine, r.triggers, 0, 5);
  assert.deepEqual(
    revived.out.map((t) => t.type),
    [TRG_TYPE_RETIRE],
    'no EXIT for a device that is live',
  );
  assert.equal(revived.written, 0);
  assert.equal(r.state.devI32[DEV_ENTRY_COUNT_I32], entries, 'its stays go on');
  assert.equal(r.state.devI32[DEV_HAS_LAST_I32], 1);
  assert.equal(r.counters[C + CNT_EXPIRED_DEVICES_F64], 0);
  assert.equal(r.ping(0, 6, 0, 4000).length, 0, 'no second ENTER: the stays were never ended');
  // Expired again under epoch 6: the stale record of epoch 5 ends nothing, the one of epoch 6 ends the stays.
  life[0] = word(6, DeviceLife.RETIRING);
  assert.deepEqual(
    expire(r.engine, r.triggers, 0, 5).out.map((t) => t.type),
    [TRG_TYPE_RETIRE],
  );
  const current = expire(r.engine, r.triggers, 0, 6);
  assert.deepEqual(
    current.out.map((t) => t.type),
    [TriggerType.EXIT, TriggerType.EXIT, TRG_TYPE_RETIRE],
  );
  assert.equal(r.state.devI32[DEV_ENTRY_COUNT_I32], 0);
  assert.equal(r.counters[C + CNT_EXPIRED_DEVICES_F64], 1);
});
