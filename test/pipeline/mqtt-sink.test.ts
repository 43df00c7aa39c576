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
