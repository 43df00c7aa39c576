/**
 * Without exact replay (a TCP listener beside the stream), a restart restores each partition's newest stored state,
 * not its delivered one, and does not derive again the triggers of the pings that state holds: they reach the
 * receiver only because the state was stored once they were in a durable file. A router whose webhook held every
 * request is killed with triggers in its memory and its backlog log, and restarted on its state directory: every
 * reference trigger arrives (a re-derived one may arrive again under a new seq, above the raised floor; one the first
 * router delivered just before the kill may come again under its identity), each device's triggers in seq order, and
 * no (deviceId, seq) names two triggers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { waitForStoredPartitionState } from '../support/jetstream-publish.js';
import { assertDeliveredEverything, content, killWithWebhookHeld, runUntilReceived } from './jetstream-runs.js';

const DEVICES = 300;

test('kill -9 of a router with a TCP listener beside the stream while its webhook held every request, restarted on its state directory: the newest stored state is restored and every reference trigger arrives, in per-device order', async (t) => {
  const { args, server, expected, firstReceived } = await killWithWebhookHeld(t, {
    seed: 47,
    devices: DEVICES,
    extra: ['--listen', '127.0.0.1:0'],
    settled: (natsUrl) => waitForStoredPartitionState(natsUrl, 20_000),
  });
  const b = await runUntilReceived(t, args, server, expected, undefined, content);
  // What the case is about: no exact replay, the newest stored state restored.
  assert.match(b.stderr, /seq continues above \d+ \(the floor rose by 2\^32\)/);
  const received = server.received.slice();
  // A trigger the first router delivered just before the kill, whose settling no file recorded yet, comes again from
  // the restart under the same identity (at least once); the restart itself delivers each trigger once.
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  assert.deepEqual(checkDeliveryContract(received.slice(firstReceived)).problems, []);
  const identity = (x: Trigger): string => `${JSON.stringify(x.deviceId)}/${x.seq}`;
  const again = new Set(received.slice(0, firstReceived).map(identity));
  const redelivered = received.slice(firstReceived).filter((x) => again.has(identity(x))).length;
  const have = new Set(received.map(content));
  const missing = expected.map(content).filter((w) => !have.has(w));
  assert.deepEqual(missing.slice(0, 10), [], `${missing.length} reference triggers missing`);
  assertDeliveredEverything(b);
  console.log(
    `listener beside the stream, kill -9 with the webhook held: the first router delivered ${firstReceived} triggers, the restart ${received.length - firstReceived}; every one of the reference's ${expected.length} arrived, ${received.length - have.size} more than once (re-derived under a new seq; ${redelivered} of the first router's came again under their identity)`,
  );
});
