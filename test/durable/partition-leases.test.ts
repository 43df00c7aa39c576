/**
 * Partition leases in a JetStream key-value bucket, on a real NATS server: the fair share; members that balance 16
 * partitions with no partition held twice; a member that stops renewing loses every lease once the lease time has
 * passed (the server removed its keys), another takes them, and the stale member's renewal reports them lost; the
 * validity a member counts on ends before the server could remove its lease; a claimed partition state head fences a
 * previous writer that had read the same revision; a member's next router (after a rebalance) opens the fences its
 * previous one closed with, a live edit included, and restores the devices of the partitions it keeps; what an earlier
 * router of the member lost stays in the member's outcome (earlierOutcomes).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { createPartitionGroup, fairShare, partitionOf, partitionSubject, type Trigger } from '../../src/index.js';
import { monotonicMs, PartitionLeases, VALID_FRACTION } from '../../src/durable/partition-leases.js';
import { PartitionStateBucket } from '../../src/durable/partition-state-bucket.js';
import { NatsServer } from '../support/nats-server.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, square, waitFor } from '../pipeline/support.js';

test('fairShare: the first P mod N members (by name) hold one more; the shares add up to P', () => {
  assert.deepEqual(
    ['b', 'a', 'c'].map((m) => fairShare(['c', 'a', 'b'], m, 16)),
    [5, 6, 5],
  );
  assert.equal(fairShare(['x'], 'x', 16), 16);
  for (let n = 1; n <= 20; n++) {
    const members = Array.from({ length: n }, (_, i) => `m${i}`);
    assert.equal(
      members.reduce((sum, m) => sum + fairShare(members, m, 16), 0),
      16,
    );
  }
  assert.throws(() => fairShare(['a'], 'b', 4), /member b is not among a/);
});

/** Opens a member over its own connection. */
async function member(
  url: string,
  name: string,
  leaseMs = 1500,
  bucket = 'LEASES',
  streamOnly = true,
): Promise<{ leases: PartitionLeases; close(): Promise<void> }> {
  const nc = await connect({ servers: url });
  const leases = await PartitionLeases.open(nc, {
    bucket,
    scope: 'TEL.geofence-router',
    partitionCount: 16,
    member: name,
    leaseMs,
    replicas: 1,
    streamOnly,
  });
  return { leases, close: () => nc.close() };
}

/** One balance step, as the group runs it: renew, then release above the share or take free ones below it. */
async function balance(l: PartitionLeases): Promise<void> {
  await l.renew();
  const share = fairShare(await l.members(), l.member, 16);
  const owned = l.owned();
  for (const p of owned.slice(share)) await l.release(p);
  for (const p of await l.free()) {
    if (l.owned().length >= share) break;
    await l.take(p);
  }
}

test('leases: two members balance 16 partitions 8 / 8, none held twice; a member that stops renewing loses them all to the other after the lease time', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const a = await member(nats.url, 'a');
  t.after(() => a.close());
  await a.leases.renew();
  await balance(a.leases);
  assert.deepEqual(a.leases.owned().length, 16, 'alone, a takes every partition');
  const b = await member(nats.url, 'b');
  t.after(() => b.close());
  await b.leases.renew();
  assert.equal(await b.leases.take(0), false, "b cannot take a's partition 0");
  await balance(a.leases);
  await balance(b.leases);
  assert.deepEqual(a.leases.owned(), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(b.leases.owned(), [8, 9, 10, 11, 12, 13, 14, 15]);
  assert.deepEqual(await a.leases.free(), [], 'every partition is held');

  // a stops renewing (a paused process); b keeps renewing and, once a's keys are gone, takes its partitions.
  const sentMs = monotonicMs();
  const lastA = await a.leases.renew();
  assert.ok(lastA.validUntilMs >= sentMs && lastA.validUntilMs <= sentMs + 1500 * VALID_FRACTION + 1);
  const until = Date.now() + 10_000;
  while (b.leases.owned().length < 16 && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 200));
    await balance(b.leases);
  }
  assert.equal(b.leases.owned().length, 16, 'b holds all 16 after a stopped renewing');
  assert.ok(monotonicMs() > lastA.validUntilMs, "b took them only after a's validity had passed");
  const resumed = await a.leases.renew();
  assert.deepEqual(resumed.lost, [0, 1, 2, 3, 4, 5, 6, 7], 'the resumed member learns it lost every lease');
  assert.deepEqual(a.leases.owned(), []);
  assert.equal(resumed.validUntilMs, 0);
});

test('membersNotStreamOnly names the other live members that may read pings from more than the stream, a heartbeat that says nothing of it included', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const a = await member(nats.url, 'a', 1500, 'LEASES', true);
  const b = await member(nats.url, 'b', 1500, 'LEASES', false);
  const c = await member(nats.url, 'c', 1500, 'LEASES', true);
  t.after(async () => {
    for (const m of [a, b, c]) await m.close();
  });
  for (const m of [a, b, c]) await m.leases.renew();
  assert.deepEqual(await a.leases.membersNotStreamOnly(), ['b']);
  assert.deepEqual(await b.leases.membersNotStreamOnly(), [], 'itself left out');
  // A heartbeat of an earlier version, without the field.
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const js = jetstream(nc);
  await js.publish('$KV.LEASES.TEL.geofence-router.member.d', JSON.stringify({ member: 'd', partitions: [], atMs: 0 }));
  assert.deepEqual(await a.leases.membersNotStreamOnly(), ['b', 'd']);
  assert.deepEqual(await c.leases.membersNotStreamOnly(), ['b', 'd']);
});

test('a claimed partition state head fences the previous writer even when both read the same revision', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const open = (writer: string): Promise<PartitionStateBucket> =>
    PartitionStateBucket.open(nc, { bucket: 'STATE', scope: 'TEL.p', replicas: 1, partitionCount: 16, writer });
  const old = await open('old');
  const next = await open('new');
  assert.equal(await old.read(3), null);
  assert.equal(await next.read(3), null);
  await next.claim(3);
  await assert.rejects(old.write(3, 10, Date.now(), new Uint8Array(8), true), /partition 3: .*consumed twice/);
  assert.equal(await (await open('reader')).read(3), null, 'the claim is an empty head: no state yet');
});

test('createPartitionGroup in a process: a lone member takes all 16 partitions, its router exports the group counters, and close releases every lease', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const options = {
    stateDir: null,
    fences: { type: 'FeatureCollection', features: [] },
    log: () => undefined,
    jetstreamSource: {
      servers: [nats.url],
      stream: 'TEL',
      partitions: 'auto',
      leaseMs: 1000,
      memberName: 'solo.1',
    },
  };
  const group = await createPartitionGroup(options);
  assert.equal(group.member, 'solo_1', 'the name as a key token');
  const until = Date.now() + 20_000;
  while (group.current() === null && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(
    group.owned(),
    Array.from({ length: 16 }, (_, p) => p),
  );
  const text = await group.current()!.metricsText();
  assert.match(text, /^geofence_group_partitions_taken_total 16$/m);
  assert.match(text, /^geofence_group_routers_started_total 1$/m);
  assert.match(text, /^geofence_group_leases_lost_total 0$/m);
  const valid = Number(/^geofence_group_lease_valid_seconds (\S+)$/m.exec(text)![1]);
  assert.ok(valid > 0 && valid <= 0.75, `the leases count for at most 0.75 x 1 s after a renewal: ${valid}`);
  assert.deepEqual(group.stats(), { routersStarted: 1, partitionsTaken: 16, partitionsReleased: 0, leasesLost: 0 });
  const summary = await group.close();
  assert.ok(summary !== null && summary.lost === 0);
  // Every lease released: another member finds all 16 free at once.
  const other = await member(nats.url, 'next', 1000, 'GEOFENCE_PARTITION_LEASES');
  t.after(() => other.close());
  assert.equal((await other.leases.free()).length, 16);
});

test("a member's next router takes over the fences its previous one closed with (a live edit included) and the devices of the partitions it keeps", async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const got: Trigger[] = [];
  const lines: string[] = [];
  const options = (name: string, into: Trigger[], log: string[]): Parameters<typeof createPartitionGroup>[0] => ({
    stateDir: null,
    fences: { type: 'FeatureCollection', features: [square('A', 0, 0, 50)] },
    log: (line) => void log.push(line),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void into.push(...ts) }],
    jetstreamSource: { servers: [nats.url], stream: 'TEL', partitions: 'auto', leaseMs: 1000, memberName: name },
  });
  const a = await createPartitionGroup(options('a', got, lines));
  t.after(() => a.close());
  await waitFor(() => a.current() !== null && a.owned().length === 16, 20_000, 'a holds all 16');
  const edit = await a.current()!.upsertFence(square('E', 0, 0, 30));
  assert.equal(edit.action, 'created');

  // A device of a partition the first member keeps when a second one joins (it gives up its highest eight).
  const id = Array.from({ length: 64 }, (_, k) => `dev${k}`).find((d) => partitionOf(d, 16) < 8)!;
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const js = jetstream(nc);
  const publish = (eastM: number, dtMs: number): Promise<unknown> =>
    js.publish(partitionSubject('telemetry', id, 16), frameOf({ id, eastM, northM: 0, dtMs }));
  await publish(-300, 0);
  await publish(0, 1000);
  await waitFor(() => got.length === 2, 20_000, 'ENTER A and ENTER E');
  // A message that is no telemetry frame: the first router rejects it, a loss its outcome keeps past the rebalance.
  await js.publish(partitionSubject('telemetry', id, 16), new Uint8Array([0xc1, 0xc1]));
  await waitFor(() => a.current()!.stats().rejectedTotal === 1, 20_000, 'the corrupt message rejected');

  const otherGot: Trigger[] = [];
  const b = await createPartitionGroup(options('b', otherGot, []));
  t.after(() => b.close());
  await waitFor(
    () => a.stats().routersStarted === 2 && a.current() !== null && b.current() !== null,
    30_000,
    'a restarted on the half it keeps',
  );
  assert.deepEqual(
    a.owned(),
    Array.from({ length: 8 }, (_, p) => p),
  );
  // The first router's loss is the member's, though its last router runs cleanly.
  const earlier = a.earlierOutcomes();
  assert.deepEqual(
    earlier.map((e) => [e.router, e.ended, e.outcome]),
    [[1, 'closed', 'dropped']],
  );
  assert.match(earlier[0]!.line, /^drained with loss: .*rejected=1 /);
  assert.deepEqual(b.earlierOutcomes(), []);
  // The fences file phase ran once: the next router opened the store the first closed with.
  const starts = lines.filter((l) => /^started in/.test(l));
  assert.equal(starts.length, 2, starts.join('\n'));
  assert.match(starts[0]!, /checking and indexing the fences/);
  assert.doesNotMatch(starts[1]!, /fences/, 'the second start read no fences file');
  assert.deepEqual(
    a
      .current()!
      .fenceOccupants('E')
      ?.map((o) => o.deviceId),
    [id],
    'the edit is in force in the next router, and the device inside it was restored there',
  );
  await publish(500, 2000);
  await waitFor(() => got.length === 4, 20_000, 'EXIT A and EXIT E');
  const named = got.map((x) => `${x.type} ${x.fenceId}`);
  assert.deepEqual(
    [named.slice(0, 2).sort(), named.slice(2).sort()],
    [
      ['ENTER A', 'ENTER E'],
      ['EXIT A', 'EXIT E'],
    ],
  );
  assert.deepEqual(checkDeliveryContract(got, {}).problems, []);
  assert.equal(otherGot.length, 0, 'nothing of the device from the other member');
});
