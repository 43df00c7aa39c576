/**
 * Device pre-images: a device's state kept before a record and put back after the record half changed it, with its
 * entries in the overflow pool too, and what happens when the pool gave the chunks away meanwhile.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceState, allocateDeviceState } from '../../src/fences/index.js';
import { DevicePreImages } from '../../src/fences/pre-image.js';
import {
  DEV_CHUNK_COUNT_I32,
  DEV_COMPLIANCE_COUNT_I32,
  DEV_ENTRY_COUNT_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  DEV_UNTRACKED_I32,
  ENTRY_FENCE_I32,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  preImageRegionBytes,
  TMARK_END_I32,
  TMARK_RING_I32,
  TMARK_STRIDE_I32,
} from '../../src/shm/layout.js';

const MAX_FENCES = 32;

/** Gives `slot` `n` entries on fences 100.. (inside since 1000 + k) and some cell values. */
function fill(state: DeviceState, slot: number, n: number, seq: number): void {
  assert.ok(state.ensureEntryCapacity(slot, n));
  for (let e = 0; e < n; e++) {
    const x = state.entryIndex(slot, e);
    state.entryI32[x * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = 100 + e;
    state.entryI32[x * ENTRY_STRIDE_I32 + ENTRY_STATE_I32] = EntryState.INSIDE;
    state.entryF64[x * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64] = 1000 + e;
  }
  state.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32] = n;
  state.devI32[slot * DEV_STRIDE_I32 + DEV_COMPLIANCE_COUNT_I32] = 2;
  state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = seq;
  state.devF64[slot * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64] = 5000;
}

/** The device's state as a comparable value. */
function view(state: DeviceState, slot: number): unknown {
  const n = state.entryCount(slot);
  const entries = [];
  for (let e = 0; e < n; e++) {
    const x = state.entryIndex(slot, e);
    entries.push([
      state.entryI32[x * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32],
      state.entryI32[x * ENTRY_STRIDE_I32 + ENTRY_STATE_I32],
      state.entryF64[x * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64],
    ]);
  }
  return {
    seq: state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64],
    lastMs: state.devF64[slot * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64],
    compliance: state.devI32[slot * DEV_STRIDE_I32 + DEV_COMPLIANCE_COUNT_I32],
    untracked: state.devI32[slot * DEV_STRIDE_I32 + DEV_UNTRACKED_I32],
    entries,
  };
}

test('a device with entries in the overflow pool is put back exactly, its trigger mark too', () => {
  const state = DeviceState.open(allocateDeviceState(8, MAX_FENCES, { overflowPoolEntries: 64 }));
  const pre = new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(3, MAX_FENCES)), 3, MAX_FENCES);
  const marks = new Int32Array(8 * TMARK_STRIDE_I32);
  const slot = 5;
  fill(state, slot, 20, 41);
  marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32] = 1;
  marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32] = 777;
  const before = view(state, slot);
  const chunksBefore = state.poolChunksInUse();
  assert.ok(chunksBefore >= 2);
  pre.save(2, state, slot, marks);
  pre.saveEntries(2, state, slot);

  // A record half done: entries swapped and dropped, a chunk given back, the sequence moved on, the mark moved.
  const x0 = state.entryIndex(slot, 0);
  state.entryI32[x0 * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = 999;
  state.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32] = 3;
  state.trimEntryCapacity(slot, 3);
  state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = 44;
  marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32] = 780;
  assert.notDeepEqual(view(state, slot), before);

  const version = state.writeVersion(slot);
  assert.equal(pre.restore(2, state, slot, marks), 0);
  assert.deepEqual(view(state, slot), before);
  assert.equal(state.poolChunksInUse(), chunksBefore);
  assert.equal(marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32], 777);
  // One update of the device: a checkpoint copying it meanwhile copies it again.
  assert.equal(state.writeVersion(slot) % 2, 0);
  assert.ok(state.writeVersion(slot) > version);
});

test('a device whose chunks the pool gave away meanwhile keeps what fits and is marked untracked', () => {
  // Room for one device's overflow only: 2 chunks of 8.
  const state = DeviceState.open(allocateDeviceState(4, MAX_FENCES, { overflowPoolEntries: 16 }));
  const pre = new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(1, MAX_FENCES)), 1, MAX_FENCES);
  fill(state, 0, 20, 7);
  pre.save(0, state, 0, null);
  pre.saveEntries(0, state, 0);
  state.devI32[DEV_ENTRY_COUNT_I32] = 0;
  state.trimEntryCapacity(0, 0);
  // Another device takes the pool's chunks.
  fill(state, 1, 20, 1);
  assert.equal(state.devI32[DEV_CHUNK_COUNT_I32], 0);
  const lost = pre.restore(0, state, 0, null);
  assert.equal(lost, 20 - state.inlineFences);
  assert.equal(state.entryCount(0), state.inlineFences);
  assert.equal(state.devI32[DEV_UNTRACKED_I32], 1);
  assert.equal(state.devF64[DEV_TRIGGER_SEQ_F64], 7);
});

test('a record that changed no entry (only added new ones) is put back without its entries kept', () => {
  const state = DeviceState.open(allocateDeviceState(4, MAX_FENCES, { overflowPoolEntries: 64 }));
  const pre = new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(1, MAX_FENCES)), 1, MAX_FENCES);
  fill(state, 2, 5, 9);
  const before = view(state, 2);
  const chunksBefore = state.poolChunksInUse();
  pre.save(0, state, 2, null);
  // New entries after the existing ones, into the overflow pool, and the sequence spent on their ENTERs.
  assert.ok(state.ensureEntryCapacity(2, 14));
  for (let e = 5; e < 14; e++) state.entryI32[state.entryIndex(2, e) * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = 300 + e;
  state.devI32[2 * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32] = 14;
  state.devF64[2 * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = 18;
  assert.ok(state.poolChunksInUse() > chunksBefore);
  assert.equal(pre.restore(0, state, 2, null), 0);
  assert.deepEqual(view(state, 2), before);
  assert.equal(state.poolChunksInUse(), chunksBefore);
});

test('a region of the wrong size is refused', () => {
  assert.throws(
    () => new DevicePreImages(new SharedArrayBuffer(preImageRegionBytes(2, 8)), 3, 8),
    /pre-image region holds \d+ bytes, not 3 blocks/,
  );
});
