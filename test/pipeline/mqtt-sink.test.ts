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
import { cityTraffic, sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { MosquittoBroker } from '../support/mqtt-broker.js';
import { finishRun, routerFor, sinkTraffic, waitSettled } from '../support/sink-run.js';
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

/** What the subscriber received: one message per element. */
type Received = readonly { topic: string; trigger: Trigger }[];

/** A trigger's identity, `<deviceId as JSON>/<seq>`. */
const identity = (x: Trigger): string => `${JSON.stringify(x.deviceId)}/${x.seq}`;

/** Distinct triggers (deviceId, seq) among `received`. */
const distinct = (received: Received): number => new Set(received.map((m) => identity(m.trigger))).size;

/** The subscriber's triggers keep the delivery contract (a re-delivery allowed: QoS 1 is at-least-once). */
function assertSubscriberContract(received: Received): void {
  assert.deepEqual(
    checkDeliveryContract(
      received.map((m) => m.trigger),
      { allowRedelivery: true },
    ).problems,
    [],
  );
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
    const unique = (): number => distinct(sub.received);
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

test('MQTT: after a lost connection the client re-sends nothing by itself: triggers the router dead-lettered as expired never reach a subscriber', async (t) => {
  const broker = await MosquittoBroker.start();
  t.after(() => broker.stop());
  const relay = new SwallowingRelay(broker.port);
  await relay.start();
  t.after(() => relay.stop());
  const sub = await subscriber(broker.url, 5);
  t.after(() => sub.end());
  const devices = 200;
  const rounds = 21;
  const traffic = cityTraffic({
    seed: 21,
    fences: 300,
    devices,
    pingsPerDevice: rounds,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  const router = await routerFor(traffic, {
    name: 'mq',
    kind: 'mqtt',
    url: `mqtt://127.0.0.1:${relay.port}`,
    topic: 'gf/{type}/{fenceId}',
    ackTimeoutMs: 1000,
    maxQueueAgeMs: 1500,
    maxAttempts: 100,
  });
  t.after(() => router.close());
  // Three parts of 7 rounds each; the second is sent while the link blackholes what the router writes.
  const cut1 = devices * 7;
  const cut2 = devices * 14;
  await sendPaced(router.ingestPort!, traffic, 2000, 0, cut1);
  await waitSettled(router, cut1, 30_000);
  relay.swallowing = true;
  await sendPaced(router.ingestPort!, traffic, 2000, cut1, cut2);
  await waitFor(() => router.stats().processed === cut2, 30_000, 'the second part processed');
  // Its publishes time out (and are sent again, and swallowed again) until every one of its triggers is past
  // maxQueueAgeMs: each is dead-lettered as expired when it is next taken.
  await new Promise((r) => setTimeout(r, 2500));
  relay.swallowing = false;
  relay.cut();
  await sendPaced(router.ingestPort!, traffic, 2000, cut2, traffic.pings);
  await waitSettled(router, traffic.pings);
  const summary = await router.close();
  const ds = summary.downstreams[0]!;
  const unique = (): number => distinct(sub.received);
  await waitFor(() => unique() >= ds.delivered + ds.replayed, 20_000, 'every delivered trigger at the subscriber');
  // Anything more would come late: give a client that re-sends by itself the time to do it.
  await new Promise((r) => setTimeout(r, 1000));
  const secondFrom = Date.UTC(2026, 0, 1) + 7 * 8000;
  const secondTo = Date.UTC(2026, 0, 1) + 14 * 8000;
  const ofSecond = sub.received.filter((m) => m.trigger.eventTimeMs >= secondFrom && m.trigger.eventTimeMs < secondTo);
  assert.ok(relay.swallowedBytes > 0, 'publishes were swallowed');
  assert.ok(ds.deadLetteredByReason.expired > 0, `triggers expired: ${ds.deadLetteredByReason.expired}`);
  assert.deepEqual(
    ofSecond.map((m) => identity(m.trigger)),
    [],
    'no trigger of the swallowed part (every one of them dead-lettered as expired) reached the subscriber',
  );
  assertSubscriberContract(sub.received);
  console.log(
    `mqtt, link blackholed 2.5 s then cut: ${summary.triggersTotal} triggers, ${ds.delivered + ds.replayed} delivered, ${ds.deadLetteredByReason.expired} expired; subscriber got ${unique()} distinct (${sub.received.length} messages), none of the swallowed part; ${relay.swallowedBytes} bytes swallowed`,
  );
});

test('MQTT 5: a broker whose access rules deny some topics refuses those messages one by one: each dead-lettered as rejected, the rest of its batch delivered, the devices go on in order', async (t) => {
  // Anonymous clients may read everything and write ENTER and DWELL topics only: EXIT and CROSS are denied (135).
  const broker = await MosquittoBroker.start(
    'topic read gf/#\ntopic readwrite gf/ENTER/#\ntopic readwrite gf/DWELL/#\n',
  );
  t.after(() => broker.stop());
  const sub = await subscriber(broker.url, 5);
  t.after(() => sub.end());
  const traffic = sinkTraffic(23, 200);
  const router = await routerFor(traffic, {
    name: 'mq',
    kind: 'mqtt',
    url: broker.url,
    topic: 'gf/{type}/{fenceId}',
  });
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5000);
  await waitSettled(router, traffic.pings);
  const summary = await router.close();
  const ds = summary.downstreams[0]!;
  await waitFor(() => distinct(sub.received) >= ds.delivered, 20_000, 'the subscriber');
  assert.ok(ds.deadLetteredByReason.rejected > 0, 'some triggers refused');
  assert.equal(ds.final, ds.deadLetteredByReason.rejected, 'every trigger settled without delivery was refused');
  assert.equal(ds.replayed, 0, 'nothing parked for the replay lane: a refusal is not a failure');
  assert.ok(ds.delivered > 0);
  const types = new Set<string>(sub.received.map((m) => m.trigger.type));
  assert.ok(!types.has('EXIT') && !types.has('CROSS'), `no denied topic reached the subscriber: ${[...types]}`);
  assert.equal(distinct(sub.received), ds.delivered, 'each delivered trigger arrived');
  assertSubscriberContract(sub.received);
  console.log(
    `mqtt 5, EXIT and CROSS topics denied: ${summary.triggersTotal} triggers, ${ds.delivered} delivered, ${ds.deadLetteredByReason.rejected} refused one by one (rejected)`,
  );
});
