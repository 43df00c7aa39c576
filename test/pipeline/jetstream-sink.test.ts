/**
 * The NATS JetStream sink through the router's threads against a real nats-server (started here, JetStream on): every
 * trigger is in the stream once, in per-device order, on the subject its template names, even though the relay in
 * between holds back the server's acknowledgements for a while (so the router times out and re-sends batches the
 * stream had already stored: the message id drops them).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { HoldingRelay, NatsServer } from '../support/nats-server.js';
import { routerFor, runThrough, sinkTraffic } from '../support/sink-run.js';
import { sendPaced } from '../support/city-traffic.js';
import { waitFor } from './support.js';

/** Every message of `stream`, in stream order, with its subject. */
async function readStream(url: string, stream: string): Promise<{ subject: string; trigger: Trigger }[]> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    const total = (await jsm.streams.info(stream)).state.messages;
    const consumer = await jetstream(nc).consumers.get(stream);
    const out: { subject: string; trigger: Trigger }[] = [];
    while (out.length < total) {
      const batch = await consumer.fetch({ max_messages: 1000, expires: 2000 });
      for await (const m of batch) out.push({ subject: m.subject, trigger: m.json<Trigger>() });
    }
    return out;
  } finally {
    await nc.close();
  }
}

test('JetStream sink: every trigger stored once and in per-device order, through acknowledgements lost on the way', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const relay = new HoldingRelay(nats.port);
  await relay.start();
  t.after(() => relay.stop());
  const traffic = sinkTraffic(8);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [`nats://127.0.0.1:${relay.port}`],
    subject: 'gf.{type}.{fenceId}',
    stream: 'GF',
    ackTimeoutMs: 300,
    maxAttempts: 10,
  });
  // For 1.5 s from the first publish, acknowledgements arrive 600 ms late: after the publishes have timed out.
  relay.delayMs = 600;
  let firstPublishMs = 0;
  const release = setInterval(() => {
    if (firstPublishMs === 0 && relay.msgIdsSeen > 0) firstPublishMs = Date.now();
    if (firstPublishMs > 0 && Date.now() - firstPublishMs > 1500) relay.delayMs = 0;
  }, 10);
  t.after(() => clearInterval(release));
  const summary = await runThrough(router, traffic, 10_000);
  const stored = await readStream(nats.url, 'GF');
  assert.equal(summary.shedTotal, 0);
  assert.equal(summary.deadLettered, 0, 'a receiver that keeps up gets no dead letter');
  assert.equal(summary.final, 0);
  assert.ok(summary.triggersTotal > 1000, `triggers: ${summary.triggersTotal}`);
  assert.equal(stored.length, summary.triggersTotal, 'the stream holds every trigger once');
  assert.ok(
    relay.msgIdsSeen > stored.length,
    `batches were re-sent after lost acknowledgements: ${relay.msgIdsSeen} publishes for ${stored.length} messages`,
  );
  const triggers = stored.map((s) => s.trigger);
  assert.deepEqual(checkDeliveryContract(triggers, { complete: true, stays: true }).problems, []);
  for (const s of stored) {
    const fence = s.trigger.fenceId.replace(/[^A-Za-z0-9_-]/g, '_');
    assert.equal(s.subject, `gf.${s.trigger.type}.${fence}`);
  }
  console.log(
    `jetstream: ${stored.length} triggers stored once from ${relay.msgIdsSeen} publishes (acks held back 600 ms for 1.5 s from the first publish); ` +
      `delivered ${summary.downstreams[0]!.delivered}, replayed ${summary.downstreams[0]!.replayed}`,
  );
});

test('JetStream sink: a subject no stream captures is refused at once (404), dead-lettered as rejected, nothing lost', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const traffic = sinkTraffic(9, 50);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [nats.url],
    subject: 'unrouted.{type}',
    stream: 'NONE',
    createStream: false,
  });
  await sendPaced(router.ingestPort!, traffic, 5_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(
    () => router.stats().downstreams[0]!.deadLettered === router.stats().triggersTotal,
    60_000,
    'every trigger dead-lettered',
  );
  const summary = await router.close();
  assert.ok(summary.triggersTotal > 100, `triggers: ${summary.triggersTotal}`);
  const ds = summary.downstreams[0]!;
  assert.equal(ds.delivered, 0);
  assert.equal(ds.deadLetteredByReason.rejected, summary.triggersTotal, 'every trigger dead-lettered as rejected');
  assert.equal(summary.lost, 0);
});
