/**
 * The MQTT sink through the router's threads against a server that refuses messages for the moment and enforces its
 * Receive Maximum (test/support/mqtt-test-server.ts, over real TCP): the router never has more messages
 * unacknowledged than the broker allows, a device's later trigger never gets ahead of one the broker refused for the
 * moment, and what the broker took before a batch failed is not sent again.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { RouterSummary, Trigger } from '../../src/index.js';
import type { DownstreamOptions } from '../../src/config/options.js';
import { sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { MqttTestServer, type MqttTestServerOptions } from '../support/mqtt-test-server.js';
import { finishRun, routerFor, sinkTraffic } from '../support/sink-run.js';
import { MqttSink } from '../../src/dispatch/sinks/mqtt-sink.js';
import { TriggerType } from '../../src/shm/layout.js';
import { triggerBatch } from '../dispatch/fixtures.js';

/** The trigger a message carries. */
const triggerOf = (payload: string): Trigger => JSON.parse(payload) as Trigger;

/**
 * Refused once, for the moment: about one trigger in 40 (by its identity), by turns 151 (quota exceeded) and 128
 * (unspecified error).
 */
function refuseSomeOnce(payload: string, seenBefore: number): number {
  const t = triggerOf(payload);
  const h = [...String(t.deviceId)].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 9973, t.seq * 7919);
  if (seenBefore > 0 || h % 40 !== 0) return 0;
  return t.seq % 2 === 0 ? 151 : 128;
}

/**
 * Seeded traffic (`devices` devices) through a router whose one downstream is the MQTT sink to a test server started
 * with `server` (`extra`: further downstream options); what the router summed up, what the server accepted (in
 * arrival order) and how many messages it refused.
 */
async function runAgainst(
  t: TestContext,
  server: MqttTestServerOptions,
  seed: number,
  devices: number,
  extra: Partial<DownstreamOptions>,
): Promise<{ s: MqttTestServer; summary: RouterSummary; received: Trigger[]; refused: number }> {
  const s = await MqttTestServer.start(server);
  t.after(() => s.stop());
  const traffic = sinkTraffic(seed, devices);
  const router = await routerFor(traffic, {
    name: 'mq',
    kind: 'mqtt',
    url: s.url,
    topic: 'gf/{type}/{fenceId}',
    ...extra,
  } as DownstreamOptions);
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5000);
  const summary = await finishRun(router, traffic);
  assert.equal(summary.shedTotal, 0, 'nothing shed');
  const received = s.accepted.map((m) => triggerOf(m.payload));
  const refused = [...s.refusedByCode.values()].reduce((a, b) => a + b, 0);
  return { s, summary, received, refused };
}

/**
 * A refusal for the moment holds back its device alone (DeviceQueues.holdBack) where the broker took others of the
 * batch; only a batch of which the broker took nothing (a device sent alone, say) backs the downstream off as a whole,
 * and such a batch has at least one refusal. Most refusals come beside messages taken.
 */
function holdsPerRefusal(ds: { deviceHolds: number; backoffs: number }, refused: number): void {
  assert.ok(
    ds.deviceHolds + ds.backoffs <= refused,
    `${ds.deviceHolds} holds, ${ds.backoffs} backoffs, ${refused} refusals`,
  );
  assert.ok(ds.deviceHolds >= refused * 0.75, `device holds ${ds.deviceHolds} for ${refused} refusals`);
}

test('MQTT 5: a broker that refuses messages for the moment and enforces a Receive Maximum of 8 gets every trigger once, in per-device order, never more than 8 unacknowledged', async (t) => {
  const {
    s: server,
    summary,
    received,
    refused,
  } = await runAgainst(t, { receiveMaximum: 8, ackDelayMs: 2, reasonCode: refuseSomeOnce }, 29, 100, {
    ackTimeoutMs: 5000,
    maxAttempts: 10,
  });
  const ds = summary.downstreams[0]!;
  console.log(
    `mqtt 5, Receive Maximum 8, some refused once: ${summary.triggersTotal} triggers, ${received.length} accepted, ` +
      `${refused} refusals (${[...server.refusedByCode].map(([c, n]) => `${n} x ${c}`).join(', ')}), ` +
      `at most ${server.maxUnacked} unacknowledged, ${server.connections} connection(s); ` +
      `${ds.deviceHolds} device holds, ${ds.backoffs} backoffs, breaker opened ${ds.breakerOpens} times`,
  );
  assert.equal(server.receiveMaximumExceeded, 0, 'never past the Receive Maximum');
  // A refusal of one message holds back its device alone: the broker is not judged down, nor backed off as a whole.
  assert.equal(ds.breakerOpens, 0, 'the breaker never opened');
  holdsPerRefusal(ds, refused);
  assert.equal(server.maxUnacked, 8, 'the window is used to the full');
  assert.equal(server.connections, 1, 'never disconnected');
  assert.ok(summary.triggersTotal > 1000, `triggers: ${summary.triggersTotal}`);
  assert.ok(refused > 50, `refusals: ${refused}`);
  assert.equal(summary.deadLettered, 0);
  assert.equal(ds.delivered + ds.replayed, summary.triggersTotal);
  // A refused message is sent again ahead of its device's later triggers (order, whatever came twice) ...
  const report = checkDeliveryContract(received, { complete: true, stays: true, allowRedelivery: true });
  assert.deepEqual(report.problems.slice(0, 5), []);
  // ... and the messages a failed batch had delivered are not sent again.
  assert.equal(received.length, summary.triggersTotal, 'each trigger accepted once');
});

test('MQTT 5: messages never published (behind one of their device refused for the moment) use up no attempt: with maxAttempts 2 and one trigger in four refused once, nothing is dead-lettered', async (t) => {
  const { summary, received, refused } = await runAgainst(
    t,
    {
      receiveMaximum: 64,
      ackDelayMs: 1,
      reasonCode: (payload, seenBefore) => (seenBefore === 0 && triggerOf(payload).seq % 4 === 2 ? 151 : 0),
    },
    37,
    30,
    { maxAttempts: 2 },
  );
  console.log(
    `mqtt 5, one trigger in four refused once, maxAttempts 2: ${summary.triggersTotal} triggers, ${received.length} accepted, ` +
      `${refused} refusals, ${summary.deadLettered} dead-lettered; ${summary.downstreams[0]!.deviceHolds} device holds, ` +
      `${summary.downstreams[0]!.backoffs} backoffs, breaker opened ${summary.downstreams[0]!.breakerOpens} times`,
  );
  assert.ok(refused > 100, `refusals: ${refused}`);
  assert.equal(summary.downstreams[0]!.breakerOpens, 0, 'the breaker never opened');
  holdsPerRefusal(summary.downstreams[0]!, refused);
  assert.equal(summary.deadLettered, 0, 'a trigger refused once is not out of attempts');
  assert.deepEqual(checkDeliveryContract(received, { complete: true, stays: true }).problems.slice(0, 5), []);
  assert.equal(received.length, summary.triggersTotal, 'each trigger accepted once');
});

test("MQTT 5 sink: a device's next message waits for the PUBACK of the one before; refused for the moment, nothing after it is published, and sent again all arrive in order", async (t) => {
  const seqOf = (payload: string): number => triggerOf(payload).seq;
  // seq 2 is refused once (151, quota exceeded).
  const server = await MqttTestServer.start({
    receiveMaximum: 100,
    ackDelayMs: 1,
    reasonCode: (payload, seenBefore) => (seqOf(payload) === 2 && seenBefore === 0 ? 151 : 0),
  });
  t.after(() => server.stop());
  const sink = new MqttSink({ url: server.url, clientId: 'flow-unit', topic: 'gf/{type}' });
  t.after(() => sink.close());
  const { ENTER, EXIT } = TriggerType;
  // One device, seqs 1-4: 1 taken, 2 refused, 3 and 4 never published.
  assert.deepEqual(await sink.deliver(triggerBatch([ENTER, EXIT, ENTER, EXIT], 1)), {
    status: 0,
    error: 'network',
    delivered: [0],
    again: [1],
    unsent: [2, 3],
  });
  assert.deepEqual(
    server.accepted.map((m) => seqOf(m.payload)),
    [1],
  );
  assert.deepEqual([...server.refusedByCode], [[151, 1]], 'seq 2 was published (and refused), 3 and 4 were not');
  // The router sends the rest again.
  assert.deepEqual(await sink.deliver(triggerBatch([EXIT, ENTER, EXIT], 2)), { status: 200 });
  assert.deepEqual(
    server.accepted.map((m) => seqOf(m.payload)),
    [1, 2, 3, 4],
  );
});
