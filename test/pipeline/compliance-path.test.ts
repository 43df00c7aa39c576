/**
 * The COMPLIANCE path's rule over real shared rings: a device changes path only once its last ping is released by
 * containment and its newest trigger taken by the dispatcher.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { CompliancePaths, PATH_COMPLIANCE, PATH_SHARD } from '../../src/pipeline/compliance-path.js';
import { allocateRingRegion, allocateTelemetryRing } from '../../src/shm/regions.js';
import {
  Lane,
  RingKind,
  TMARK_END_I32,
  TMARK_NONE,
  TMARK_RING_I32,
  TMARK_STRIDE_I32,
  TRIGGER_STRIDE_BYTES,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';

const SLOTS = 8;

/** Two shards, one COMPLIANCE ring, three trigger rings (two shards' and the COMPLIANCE group's), and the marks. */
function setUp(): {
  paths: CompliancePaths;
  shardRings: SpscRing[];
  own: SpscRing;
  triggerRings: SpscRing[];
  marks: Int32Array;
} {
  const shardRings = [0, 1].map(() => SpscRing.wrap(allocateTelemetryRing(64, 0.05), RingKind.TELEMETRY));
  const own = SpscRing.wrap(allocateTelemetryRing(64, 0.05), RingKind.TELEMETRY);
  const triggerRings = [0, 1, 2].map(() =>
    SpscRing.wrap(
      allocateRingRegion({ capacitySlots: 64, strideBytes: TRIGGER_STRIDE_BYTES, kind: RingKind.TRIGGER }),
      RingKind.TRIGGER,
    ),
  );
  const marksBuffer = new SharedArrayBuffer(SLOTS * TMARK_STRIDE_I32 * 4);
  const marks = new Int32Array(marksBuffer).fill(TMARK_NONE);
  // Slot s is in shard s % 2.
  const shardOfSlot = Uint16Array.from({ length: SLOTS }, (_, s) => s % 2);
  const paths = new CompliancePaths(own, shardRings, shardOfSlot, triggerRings, marksBuffer);
  return { paths, shardRings, own, triggerRings, marks };
}

/** Claims and publishes one record of `slot` in `ring` through the path's bookkeeping, as the admission sink does. */
function write(paths: CompliancePaths, slot: number, ring: SpscRing): void {
  ring.claim();
  paths.noteClaimed(slot, ring);
  ring.publish();
}

/** What a containment worker does for one trigger of `slot`: write it to trigger ring `r` and mark it there. */
function trigger(triggerRings: SpscRing[], marks: Int32Array, slot: number, r: number): void {
  const ring = triggerRings[r]!;
  ring.claim();
  marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32] = r;
  marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32] = (ring.writeSeq() + ring.pendingCount()) | 0;
  ring.publish();
}

test('a COMPLIANCE ping follows the device to its shard ring until that ping is released and its trigger taken', () => {
  const { paths, shardRings, own, triggerRings, marks } = setUp();
  const slot = 3;
  assert.equal(paths.choose(slot, Lane.TRANSITION, true), PATH_SHARD);
  write(paths, slot, shardRings[1]!);
  // Pending in the shard ring: the COMPLIANCE ping stays behind it.
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_SHARD);
  write(paths, slot, shardRings[1]!);
  // Containment takes both, writes a trigger for the device in shard 1's trigger ring, releases the pings.
  trigger(triggerRings, marks, slot, 1);
  shardRings[1]!.release(2);
  // Released, but the trigger is not taken: still the shard ring.
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_SHARD);
  write(paths, slot, shardRings[1]!);
  shardRings[1]!.release(1);
  triggerRings[1]!.release(1);
  // Everything released and taken: the COMPLIANCE ring, and the mark is cleared.
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  assert.equal(marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32], TMARK_NONE);
  write(paths, slot, own);
  // A TRANSITION ping while the COMPLIANCE one is pending stays on the COMPLIANCE ring.
  assert.equal(paths.choose(slot, Lane.TRANSITION, true), PATH_COMPLIANCE);
  write(paths, slot, own);
  trigger(triggerRings, marks, slot, 2);
  own.release(2);
  assert.equal(paths.choose(slot, Lane.TRANSITION, true), PATH_COMPLIANCE, 'its trigger is still in the ring');
  write(paths, slot, own);
  own.release(1);
  triggerRings[2]!.release(1);
  assert.equal(paths.choose(slot, Lane.TRANSITION, true), PATH_SHARD);
  assert.equal(paths.switches, 2);
});

test('devices are settled one by one: another device of the same shard does not hold one back', () => {
  const { paths, shardRings, triggerRings, marks } = setUp();
  // Slots 1 and 5 share shard 1; slot 1 has a trigger not taken yet, slot 5 has none.
  write(paths, 1, shardRings[1]!);
  write(paths, 5, shardRings[1]!);
  trigger(triggerRings, marks, 1, 1);
  shardRings[1]!.release(2);
  assert.equal(paths.choose(5, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  assert.equal(paths.choose(1, Lane.COMPLIANCE, true), PATH_SHARD);
  // A ping of slot 5 still unreleased would hold it: written after the other's were released.
  write(paths, 5, paths.ring);
  assert.equal(paths.choose(5, Lane.TRANSITION, true), PATH_COMPLIANCE);
});

test('an expiry record goes to the shard ring only once the device is settled there', () => {
  const { paths, own, marks } = setUp();
  const slot = 2;
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  write(paths, slot, own);
  assert.equal(paths.toShardRing(slot), false);
  assert.equal(paths.pathOf(slot), PATH_COMPLIANCE);
  own.release(1);
  assert.equal(paths.toShardRing(slot), true);
  assert.equal(paths.pathOf(slot), PATH_SHARD);
  // A freed slot's new device starts on its shard ring with nothing pending and no mark (the old device's records are
  // all taken by then; what is left here is only this thread's and the marks' bookkeeping).
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  write(paths, slot, own);
  marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32] = 2;
  marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32] = 1;
  paths.forgetSlot(slot);
  assert.equal(paths.pathOf(slot), PATH_SHARD);
  assert.equal(marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32], TMARK_NONE);
  // Nothing pending any more: a COMPLIANCE ping may take its ring at once (the record above is not the new device's).
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
});

test('a trigger that was never published (its batch failed) does not hold its device for ever', () => {
  const { paths, shardRings, triggerRings, marks } = setUp();
  const slot = 4;
  write(paths, slot, shardRings[0]!);
  // The worker claimed a trigger for the device, its batch threw, and it dropped the claim; the batch was released.
  const ring = triggerRings[0]!;
  ring.claim();
  marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32] = 0;
  marks[slot * TMARK_STRIDE_I32 + TMARK_END_I32] = (ring.writeSeq() + ring.pendingCount()) | 0;
  assert.equal(ring.discardPending(), 1);
  shardRings[0]!.release(1);
  assert.equal(paths.choose(slot, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  assert.equal(marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32], TMARK_NONE);
  // A trigger published in the same ring afterwards, not taken yet, holds its own device.
  const other = 6;
  write(paths, other, shardRings[0]!);
  trigger(triggerRings, marks, other, 0);
  shardRings[0]!.release(1);
  assert.equal(paths.choose(other, Lane.COMPLIANCE, true), PATH_SHARD);
  triggerRings[0]!.release(1);
  assert.equal(paths.choose(other, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
});

test('with the COMPLIANCE ring closed to it a settled device stays on its shard ring', () => {
  const { paths, own } = setUp();
  assert.equal(paths.choose(0, Lane.COMPLIANCE, false), PATH_SHARD);
  assert.equal(paths.choose(0, Lane.COMPLIANCE, true), PATH_COMPLIANCE);
  write(paths, 0, own);
  // On the COMPLIANCE ring with a ping pending, it follows that ping, full or not.
  assert.equal(paths.choose(0, Lane.COMPLIANCE, false), PATH_COMPLIANCE);
  own.release(1);
  assert.equal(paths.choose(0, Lane.COMPLIANCE, false), PATH_SHARD);
});
