/**
 * The MQTT sink through the router's threads against a real Mosquitto broker (started here): QoS 1 messages on the
 * topics the template names, read by a subscriber with a persistent session: every trigger arrives once, in
 * per-device order, over MQTT 5 and over 3.1.1; and through a broker restart mid-run (`run(version, true)`), where QoS 1
 * is at-least-once: every trigger arrives, in order, and the subscriber keeps the first (deviceId, seq).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import mqtt from 'mqtt';
import type { Trigger } from '../../src/index.js';
import { sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { MosquittoBroker } from '../support/mqtt-broker.js';
import { finishRun, routerFor, sinkTraffic } from '../support/sink-run.js';
import { SwallowingRelay } from '../support/swallowing-relay.js';
import { waitFor } from './support.js';

/** A subscriber to `gf/#` at QoS 1 with a persistent session; what it received, in arrival order. */
async function subscriber(
  url: string,
  protocolVersion: 4 | 5,
): Promise<{ received: { topic: string; trigger: Trigger }[]; end: () => Promise<void> }> {
  const received: { topic: string; trigger: Trigger }[] = [];
  const client = mqtt.connect(url, {
    clientId: `test-sub-${protocolVersion}`,
    protocolVersion,
    clean: false,
    reconnectPeriod: 100,
    ...(protocolVersion === 5 ? { properties: { sessionExpiryInterval: 3600 } } : {}),
  });
  client.on('error', () => undefined);
  client.on('message', (topic, payload) =>
    received.push({ topic, trigger: JSON.parse(payload.toString('utf8')) as Trigger }),
  );
  await new Promise<void>((resolve) => client.once('connect', () => resolve()));
  await client.subscribeAsync('gf/#', { qos: 1 });
  return { received, end: () => client.endAsync() };
}

async function run(protocolVersion: 4 | 5, restart: boolean): Promise<void> {
  const broker = await MosquittoBroker.start();
  try {
    const sub = await subscriber(broker.url, protocolVersion);
    const traffic = sinkTraffic(13);
    const router = await routerFor(traffic, {
      name: 'mq',
      kind: 'mqtt',
      url: broker.url,
      topic: 'gf/{type}/{fenceId}',
      protocolVersion,
      ackTimeoutMs: 2000,
      maxAttempts: 10,
    });
    const sending = sendPaced(router.ingestPort!, traffic, 10_000);
    let deliveredAtRestart = -1;
    if (restart) {
      // Mid-run: once the first triggers have reached the broker (its connection may still be opening at the start).
      await waitFor(() => router.stats().downstreams[0]!.delivered > 0, 20_000, 'the first triggers delivered');
      deliveredAtRestart = router.stats().downstreams[0]!.delivered;
      await broker.restart(500);
    }
    await sending;
    const summary = await finishRun(router, traffic);
    const unique = (): number =>
      new Set(sub.received.map((m) => `${JSON.stringify(m.trigger.deviceId)}/${m.trigger.seq}`)).size;
    await waitFor(() => unique() === summary.triggersTotal, 30_000, 'every trigger at the subscriber').catch(
      (e: Error) => {
        throw new Error(`${e.message}: ${unique()} of ${summary.triggersTotal} (${sub.received.length} messages)`);
      },
    );
    await sub.end();
    assert.equal(summary.shedTotal, 0);
    assert.equal(summary.deadLettered, 0, 'a receiver that keeps up gets no dead letter');
    assert.equal(summary.final, 0);
    assert.ok(summary.triggersTotal > 1000, `triggers: ${summary.triggersTotal}`);
    const report = checkDeliveryContract(
      sub.received.map((m) => m.trigger),
      { complete: true, stays: true, allowRedelivery: true },
    );
    assert.deepEqual(report.problems, []);
    if (restart) {
      assert.ok(
        deliveredAtRestart > 0 && deliveredAtRestart < summary.triggersTotal,
        `the broker restarted mid-run: ${deliveredAtRestart} of ${summary.triggersTotal} delivered before`,
      );
    } else {
      assert.equal(sub.received.length, summary.triggersTotal, 'each once');
    }
    for (const m of sub.received) {
      const fence = m.trigger.fenceId.replace(/[^A-Za-z0-9_-]/g, '_');
      assert.equal(m.topic, `gf/${m.trigger.type}/${fence}`);
    }
    console.log(
      `mqtt ${protocolVersion === 5 ? '5' : '3.1.1'}${restart ? ', broker restarted mid-run' : ''}: ${summary.triggersTotal} triggers, ` +
        `${sub.received.length - summary.triggersTotal} arrived twice; delivered ${summary.downstreams[0]!.delivered}, replayed ${summary.downstreams[0]!.replayed}`,
    );
  } finally {
    await broker.stop();
  }
}

test('MQTT 5: every trigger arrives once, in per-device order', async () => {
  await run(5, false);
});

test('MQTT 3.1.1: every trigger arrives once, in per-device order', async () => {
  await run(4, false);
});

test('MQTT 5 through a broker restart mid-run: every trigger arrives, in per-device order', async () => {
  await run(5, true);
});

test('MQTT 3.1.1 through a broker restart mid-run: every trigger arrives, in per-device order', async () => {
  await run(4, true);
});

test('MQTT: after a lost connection the client re-sends nothing by itself: a trigger the router dead-lettered as expired never reaches a subscriber', async (t) => {
  const broker = await MosquittoBroker.start();
  t.after(() => broker.stop());
  const relay = new SwallowingRelay(broker.port);
  await relay.start();
  t.after(() => relay.stop());
  const sub = await subscriber(broker.url, 5);
  t.after(() => sub.end());
  const traffic = sinkTraffic(21, 200);
  const router = await routerFor(traffic, {
    name: 'mq',
    kind: 'mqtt',
    url: `mqtt://127.0.0.1:${relay.port}`,
    topic: 'gf/{type}/{fenceId}',
    ackTimeoutMs: 300,
    maxQueueAgeMs: 1500,
    maxAttempts: 100,
  });
  t.after(() => router.close());
  const sending = sendPaced(router.ingestPort!, traffic, 1000);
  await waitFor(() => router.stats().downstreams[0]!.delivered > 0, 20_000, 'the first triggers delivered');
  // The link blackholes what the router writes: its publishes time out, are re-sent (and swallowed), and expire.
  relay.swallowing = true;
  await new Promise((r) => setTimeout(r, 2500));
  relay.swallowing = false;
  relay.cut();
  await sending;
  const settled = (): boolean => {
    const s = router.stats();
    const d = s.downstreams[0]!;
    return s.processed === traffic.pings && d.delivered + d.replayed + d.final === s.triggersTotal;
  };
  await waitFor(settled, 60_000, 'every trigger delivered or dead-lettered');
  const summary = await router.close();
  const ds = summary.downstreams[0]!;
  const key = (x: Trigger): string => `${JSON.stringify(x.deviceId)}/${x.seq}`;
  const unique = (): number => new Set(sub.received.map((m) => key(m.trigger))).size;
  await waitFor(() => unique() >= ds.delivered + ds.replayed, 20_000, 'every delivered trigger at the subscriber');
  // Anything more would have come late: give a client that re-sends by itself the time to do it.
  await new Promise((r) => setTimeout(r, 1000));
  assert.ok(relay.swallowedBytes > 0, 'publishes were swallowed');
  assert.ok(ds.deadLetteredByReason.expired > 0, `triggers expired: ${ds.deadLetteredByReason.expired}`);
  assert.equal(
    unique(),
    ds.delivered + ds.replayed,
    `the subscriber got exactly the triggers the router delivered (${ds.deadLetteredByReason.expired} expired ones not among them)`,
  );
  assert.deepEqual(
    checkDeliveryContract(
      sub.received.map((m) => m.trigger),
      { allowRedelivery: true },
    ).problems,
    [],
  );
  console.log(
    `mqtt, link blackholed 2.5 s then cut: ${summary.triggersTotal} triggers, ${ds.delivered + ds.replayed} delivered, ${ds.deadLetteredByReason.expired} expired; subscriber got ${unique()} distinct (${sub.received.length} messages); ${relay.swallowedBytes} bytes swallowed`,
  );
});
