/**
 * A containment task that fails in the middle of one device's record, inside a batch that holds other devices' pings
 * before and after it, through real threads and real pool workers (the drill hook GEOFENCE_FAULT_INJECT fires at the
 * armed device's first trigger, or its nth, just after writing it: that device's state is part updated and the
 * trigger claimed, not published). Whatever the failure (a throw, a worker that ends, a hang the watchdog ends):
 * - the pings of the batch before the failed one keep their triggers (their state changed with them);
 * - the pings after it are processed by the group's next task, none lost;
 * - the failed ping is the one ping lost, counted, and its device is put back as before it: its later triggers run
 *   on from the same sequence, with no gap and no stay the receiver never saw begin;
 * - the trigger counters count only what was delivered.
 * An expiry record that fails is run again, its EXIT delivered once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardOfId } from '../../src/ingest/device-registry.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { createDrilledRouter, devicesOnShard } from './drill-support.js';
import { byDevice, frameOf, square, waitFor, type ScriptedPing } from './support.js';

const FENCES = { type: 'FeatureCollection', features: [square('A', 0, 0, 50)] };
const SHARDS = 2;
/** Devices walking through A beside the armed one, per shard. */
const PER_SHARD = 12;

/** A ping of each of `ids`, `eastM` east of the origin, at `dtMs`. */
function step(eastM: number, dtMs: number, ids: readonly number[]): ScriptedPing[] {
  return ids.map((id) => ({ id, eastM, northM: 0, dtMs }));
}

/** One read's worth of frames: the router takes them in one chunk, so each shard's pings reach its ring together. */
function chunkOf(pings: readonly ScriptedPing[]): Buffer {
  return Buffer.concat(pings.map(frameOf));
}

for (const mode of ['throw', 'exit', 'hang'] as const) {
  test(`a task that ${mode === 'hang' ? 'hangs' : mode + 's'} inside one device's record loses that ping only, and puts the device back`, async () => {
    const BAD = 1999;
    const badShard = shardOfId(BAD, SHARDS);
    const called: Trigger[] = [];
    const router = await createDrilledRouter(`${mode}-on-device:${BAD}`, FENCES, SHARDS, called);
    try {
      const others = [
        ...devicesOnShard(badShard, SHARDS, PER_SHARD, BAD, 2000),
        ...devicesOnShard(1 - badShard, SHARDS, PER_SHARD, BAD, 2000),
      ];
      const walkers = [...others, BAD];
      // Outside A (west), inside, outside (east): ENTER then EXIT for each, and for BAD the failure at its ENTER.
      router.ingest(chunkOf(step(-200, 0, walkers)));
      await waitFor(() => router.stats().processed === walkers.length, 10_000, 'the first pings processed');
      // The armed ping in the middle of its shard's pings: some before it in the batch, some after.
      const half = PER_SHARD / 2;
      const inside = [...others.slice(0, half), BAD, ...others.slice(half)];
      router.ingest(chunkOf(step(0, 1000, inside)));
      await waitFor(() => router.stats().lost >= 1, 10_000, 'the failed ping counted');
      router.ingest(chunkOf(step(200, 2000, walkers)));
      // BAD again, inside then outside: the stay the lost ping could not begin.
      router.ingest(chunkOf(step(0, 3000, [BAD])));
      router.ingest(chunkOf(step(200, 4000, [BAD])));
      const expected = 2 * others.length + 3;
      await waitFor(() => called.length >= expected, 15_000, `${expected} triggers`);

      const seen = byDevice(called);
      for (const id of others) {
        assert.deepEqual(
          (seen.get(id) ?? []).map((t) => `${t.type} ${t.fenceId} ${t.seq}`),
          ['ENTER A 1', 'EXIT A 2'],
          `device ${id}`,
        );
      }
      // Put back as before the lost ping: its last position is the first ping's, so the next one (east of A) crosses A;
      // then the stay, all from seq 1 on.
      assert.deepEqual(
        (seen.get(BAD) ?? []).map((t) => `${t.type} ${t.fenceId} ${t.seq}`),
        ['CROSS A 1', 'ENTER A 2', 'EXIT A 3'],
      );
      const contract = checkDeliveryContract(called, { complete: true, stays: true });
      assert.deepEqual(contract.problems, []);

      const summary = await router.close();
      assert.equal(summary.lost, 1);
      assert.equal(summary.processed + summary.lost, summary.admittedTotal);
      assert.equal(summary.admittedTotal, 3 * walkers.length + 2);
      // Counted only once published: the ENTER claimed by the failed record is not among them.
      assert.equal(summary.triggersTotal, called.length);
      assert.equal(called.length, expected);
    } finally {
      await router.close();
    }
  });
}

test('a record that fails after removing one of its device stays puts every stay back', async () => {
  // B holds A: a device at the centre is inside both, and one ping far away leaves both (EXIT A, the entry removed,
  // then EXIT B, where the drill throws: the device's 4th trigger).
  const nested = { type: 'FeatureCollection', features: [square('A', 0, 0, 50), square('B', 0, 0, 150)] };
  const BAD = 1999;
  const called: Trigger[] = [];
  const router = await createDrilledRouter(`throw-on-device:${BAD}#4`, nested, SHARDS, called);
  try {
    const others = devicesOnShard(shardOfId(BAD, SHARDS), SHARDS, 6, BAD, 2000);
    const walkers = [...others, BAD];
    router.ingest(chunkOf(step(0, 0, walkers)));
    await waitFor(() => called.length === 2 * walkers.length, 10_000, 'the ENTERs');
    router.ingest(chunkOf(step(1000, 1000, [...others.slice(0, 3), BAD, ...others.slice(3)])));
    await waitFor(() => router.stats().lost >= 1, 10_000, 'the failed ping counted');
    // Far away again: the stays the lost ping could not end end now.
    router.ingest(chunkOf(step(1100, 2000, [BAD])));
    await waitFor(() => called.length >= 4 * walkers.length, 10_000, 'the EXITs');

    const seen = byDevice(called);
    for (const id of walkers) {
      const list = (seen.get(id) ?? []).map((t) => `${t.seq} ${t.type}`);
      assert.deepEqual(list, ['1 ENTER', '2 ENTER', '3 EXIT', '4 EXIT'], `device ${id}`);
    }
    assert.deepEqual(checkDeliveryContract(called, { complete: true, stays: true }).problems, []);
    const summary = await router.close();
    assert.equal(summary.lost, 1);
    assert.equal(summary.processed + summary.lost, summary.admittedTotal);
    assert.equal(summary.triggersTotal, called.length);
    assert.equal(called.length, 4 * walkers.length);
  } finally {
    await router.close();
  }
});

test('an expiry record that fails inside its EXIT is put back and run again: the EXIT arrives once, nothing lost', async () => {
  const BAD = 1999;
  const called: Trigger[] = [];
  const router = await createDrilledRouter(`throw-on-device:${BAD}#2`, FENCES, SHARDS, called, {
    deviceIdleTimeoutMs: 300,
  });
  try {
    router.ingest(chunkOf([{ id: BAD, eastM: 0, northM: 0, dtMs: 0 }]));
    // Idle past the timeout: the expiry record's EXIT is the device's 2nd trigger, where the drill throws.
    await waitFor(() => called.length === 2, 10_000, 'the ENTER and the expiry EXIT');
    const list = called.map((t) => `${t.seq} ${t.type} ${t.fenceId} ${t.reason ?? ''}`);
    assert.deepEqual(list, ['1 ENTER A ', '2 EXIT A expired']);
    assert.deepEqual(checkDeliveryContract(called, { complete: true, stays: true }).problems, []);
    const summary = await router.close();
    assert.equal(summary.lost, 0);
    assert.equal(summary.processed, summary.admittedTotal);
    assert.equal(summary.triggersTotal, called.length);
  } finally {
    await router.close();
  }
});
