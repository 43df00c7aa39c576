/**
 * A JetStream source whose device state stays in the state directory (`--partition-state-bucket none`): the local
 * checkpoint is what a restart after a crash restores, and what it covers is acknowledged, so it is written only once
 * the triggers of the pings it holds are handed on. A router whose webhook held every request is killed with triggers
 * in its memory, and restarted on its state directory: every reference trigger arrives (one re-derived after the
 * crash may arrive again under a new seq, above the raised floor), each device's triggers in seq order, and no
 * (deviceId, seq) names two triggers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { assertDeliveredEverything, content, killWithWebhookHeld, runUntilReceived } from './jetstream-runs.js';

const DEVICES = 300;

test('kill -9 of a router keeping its JetStream partitions’ state in the state directory while its webhook held every request: every reference trigger arrives after the restart, in per-device order', async (t) => {
  const { args, server, expected, firstStderr, firstReceived } = await killWithWebhookHeld(t, {
    seed: 48,
    devices: DEVICES,
    extra: ['--partition-state-bucket', 'none'],
    // Several checkpoint intervals with the receiver taking everything: checkpoints are written and acknowledged.
    settled: () => new Promise((r) => setTimeout(r, 1500)),
  });
  assert.match(firstStderr, /checkpoint deferred: the triggers of the pings it would hold are not handed on yet/);
  const b = await runUntilReceived(t, args, server, expected, undefined, content);
  const received = server.received.slice();
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  assert.deepEqual(checkDeliveryContract(received.slice(firstReceived)).problems, []);
  const have = new Set(received.map(content));
  const missing = expected.map(content).filter((w) => !have.has(w));
  assert.deepEqual(missing.slice(0, 10), [], `${missing.length} reference triggers missing`);
  assertDeliveredEverything(b);
  console.log(
    `state directory only, kill -9 with the webhook held: the first router delivered ${firstReceived} triggers, the restart ${received.length - firstReceived}; every one of the reference's ${expected.length} arrived, ${received.length - have.size} more than once (re-derived under a new seq)`,
  );
});
