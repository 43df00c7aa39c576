/**
 * A member of a partition group killed while its triggers wait undelivered in its own files (a shared webhook
 * receiver that turned slow), its partitions' state stored meanwhile: the member that takes them over derives those
 * triggers again from each partition's newest delivered checkpoint, so the receiver gets every reference trigger
 * while the killed member is still gone, in per-device order; and when the killed member comes back on its state
 * directory, the copies its files hold are passed over (nothing reaches the receiver late or twice under one
 * identity with other content).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { Kvm } from '@nats-io/kv';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { oncePerIdentity, publishPaced, whole } from '../support/jetstream-publish.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';
import {
  assertDeliveredEverything,
  jetstreamScenario,
  partitionsRead,
  smallQueueWebhookConfig,
  startGroupMember,
} from './jetstream-runs.js';

const DEVICES = 300;
const PARTITIONS = 16;

/** Partitions whose stored head covers more of the stream than their delivered checkpoint (or than nothing). */
async function headsAheadOfDelivered(url: string): Promise<number> {
  const nc = await connect({ servers: url });
  try {
    const kv = await new Kvm(nc).open('GEOFENCE_PARTITION_STATE');
    let ahead = 0;
    for (let p = 0; p < PARTITIONS; p++) {
      const e = await kv.get(`TEL.geofence-router.p${p}`);
      if (e === null || e.operation !== 'PUT') continue;
      const head = e.json<{ streamSeq: number; delivered?: { streamSeq: number } | null }>();
      if (head.streamSeq > (head.delivered?.streamSeq ?? 0)) ahead++;
    }
    return ahead;
  } finally {
    await nc.close();
  }
}

test('a member killed with triggers undelivered in its files: the member taking its partitions over derives them again, the receiver gets every reference trigger in per-device order while the killed member is gone, and its files are passed over when it comes back', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 67, DEVICES);
  // A receiver that turns slow (each batch answered after 100 ms): with two requests of 16 triggers at a time, a
  // member delivers about 300 triggers a second, and what it cannot send yet waits in its backlog log (the memory
  // queue holds 512). Partition state is stored past those (they are handed on: in a durable file) and not as a
  // delivered checkpoint.
  let slowMs = 0;
  const server = new TriggerServer(() =>
    slowMs === 0 ? 200 : new Promise<number>((r) => setTimeout(() => r(200), slowMs)),
  );
  await server.start();
  t.after(() => server.stop());
  const config = smallQueueWebhookConfig(dir, server.url, { safetyCap: 2, maxBatchTriggers: 16 });
  const start = (name: string): CliProcess =>
    startGroupMember(t, { fences, dir, natsPort: nats.port, name, extra: ['--config', config] });
  const reading = partitionsRead;
  const a = start('a');
  await waitFor(() => reading(a) === PARTITIONS, 60_000, 'a reading all 16 partitions');
  const third = Math.floor(traffic.pings / 3);
  await publishPaced(nats.url, traffic, DEVICES, 0, third, 5000);
  await waitFor(() => server.received.length > 0, 30_000, 'triggers at the receiver');
  slowMs = 100;
  await publishPaced(nats.url, traffic, DEVICES, third, 2 * third, 5000);
  // a's backlog log holds triggers the receiver has not had yet, and a's stored partition state covers their pings.
  const aheadBy = Date.now() + 45_000;
  let ahead = await headsAheadOfDelivered(nats.url);
  while (ahead === 0) {
    assert.ok(
      Date.now() < aheadBy,
      `partition state stored beyond the delivered checkpoints: ${ahead} partitions\n${a.stderr}`,
    );
    await new Promise((r) => setTimeout(r, 200));
    ahead = await headsAheadOfDelivered(nats.url);
  }
  await new Promise((r) => setTimeout(r, 1000));
  a.child.kill('SIGKILL');
  await a.exited;
  const receivedBeforeKill = server.received.length;
  const b = start('b');
  await waitFor(() => reading(b) === PARTITIONS, 60_000, 'b reading all 16 partitions');
  slowMs = 0;
  await publishPaced(nats.url, traffic, DEVICES, 2 * third, traffic.pings, 5000);
  const want = new Set(expected.map(whole));
  const missingNow = (): string[] => {
    const have = new Set(server.received.map(whole));
    return [...want].filter((w) => !have.has(w));
  };
  await waitFor(() => missingNow().length === 0, 90_000, 'every reference trigger received').catch(() => undefined);
  // Nothing of the reference waits for the killed member to come back.
  const missingWhileGone = missingNow();
  assert.deepEqual(
    missingWhileGone.slice(0, 10),
    [],
    `${missingWhileGone.length} reference triggers missing while a is gone; b's log:\n${b.stderr}`,
  );
  const receivedWhileGone = server.received.length;
  // a comes back on its state directory: b releases half the partitions to it, and a passes its files' copies over.
  const a2 = start('a');
  await waitFor(
    () => reading(a2) === PARTITIONS / 2 && reading(b) === PARTITIONS / 2,
    60_000,
    'a and b reading 8 each',
  );
  const passedOver = /(\d+) more are derived again/.exec(a2.stderr);
  assert.ok(passedOver !== null && Number(passedOver[1]) > 0, `a passes its files' copies over:\n${a2.stderr}`);
  await new Promise((r) => setTimeout(r, 2000));
  for (const p of [a2, b]) p.child.kill('SIGTERM');
  for (const p of [a2, b]) assert.equal((await p.exited).code, 0, p.stderr);
  for (const p of [a2, b]) assertDeliveredEverything(p);
  const received = server.received.slice();
  // A trigger received again is the same trigger under the same seq (b derived again some a had delivered).
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  const stored = oncePerIdentity(received);
  assert.deepEqual(stored.map(whole).sort(), [...want].sort(), 'once per (deviceId, seq): exactly the reference');
  console.log(
    `a killed with ${ahead} partitions stored past their delivered checkpoints: ${receivedBeforeKill} received before the kill, ${receivedWhileGone} once b had read on (every reference trigger), ${received.length} in all; a passed ${passedOver[1]} copies over when it came back`,
  );
});
