/**
 * A trigger parked undeliverable (its copy in the dead-letter file, waiting in the replay lane) is not delivered: no
 * partition checkpoint stored while it waits counts as delivered, so a router killed meanwhile and restarted on its
 * state directory reads the partitions again from before it (their delivered checkpoints, or the stream's first
 * message), derives it again under its seq, passes its file copy over, and the receiver gets it (and every other
 * reference trigger, in per-device order).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { publishPaced, whole } from '../support/jetstream-publish.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamScenario,
  runUntilReceived,
  webhookRouterArgs,
} from './jetstream-runs.js';
import { CliProcess } from './support.js';

const DEVICES = 300;

test('kill -9 while a trigger waits parked in the replay lane (its copy in the dead-letter file): the restart reads the partitions again from before it, derives it again, and the receiver gets every reference trigger', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 53, DEVICES);
  // The last trigger the reference produced: refused while the first router runs (one trigger a request, one attempt).
  const refused = whole(expected[expected.length - 1]!);
  let refusing = true;
  const server = new TriggerServer((batch) => (refusing && batch.some((x) => whole(x) === refused) ? 503 : 200));
  await server.start();
  t.after(() => server.stop());
  // Memory large enough that nothing spills to the backlog log: the parked trigger is the only one undelivered.
  const args = webhookRouterArgs({ fences, dir, nats }, server.url, {
    queueCapacitySlots: 65_536,
    maxBatchTriggers: 1,
    maxAttempts: 1,
  });
  const a = new CliProcess(args, 120_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  await publishPaced(nats.url, traffic, DEVICES, 0, traffic.pings, 5000);
  const others = new Set(expected.map(whole).filter((w) => w !== refused));
  await waitFor(
    () => {
      const have = new Set(server.received.map(whole));
      return [...others].every((w) => have.has(w));
    },
    60_000,
    'every other reference trigger at the receiver',
  );
  // Several checkpoint intervals (500 ms) with the refused trigger parked.
  await new Promise((r) => setTimeout(r, 2500));
  a.child.kill('SIGKILL');
  await a.exited;
  assert.ok(!server.received.some((x) => whole(x) === refused), 'the refused trigger was not received');
  refusing = false;
  const b = await runUntilReceived(t, args, server, expected);
  const received = server.received.slice();
  assertReceivedReference(received, expected);
  assertDeliveredEverything(b);
  console.log(
    `parked ${refused}: the first router delivered every other reference trigger; after the restart ${received.length} triggers received in all, once per (deviceId, seq) the reference's ${expected.length}`,
  );
});
