/**
 * The NATS JetStream sink at the server's limits, through a real nats-server (started here): an account whose
 * JetStream storage is used up is waited for, not refused; a stream deleted mid-run is created again
 * (`createStream`) and the rest stored there; a trigger larger than the server's max_payload is refused alone, before
 * it is published, and its device goes on. Every check is at the receiver: per-device order, each trigger once.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy } from '@nats-io/jetstream';
import { createRouter, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { NatsServer } from '../support/nats-server.js';
import { readStream } from '../support/jetstream-read.js';
import { finishRun, routerFor, runThrough, sinkTraffic } from '../support/sink-run.js';
import { sendPaced } from '../support/city-traffic.js';
import { waitFor } from './support.js';
import { JetStreamSink } from '../../src/dispatch/sinks/jetstream-sink.js';
import { DREC_STRIDE_BYTES, Lane, TriggerType } from '../../src/shm/layout.js';
import { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { triggerJson } from '../../src/dispatch/sinks/format.js';
import { dispatchRecord, triggerBatch, TriggerRecord } from '../dispatch/fixtures.js';

test('JetStream sink: an account whose JetStream storage is used up ("resource limits exceeded for account", 400 / 10002) is waited for, not refused: every trigger is stored once, in per-device order, none dead-lettered', async (t) => {
  // Account A may store 64 KiB (a few hundred triggers); the sink connects as its user (no_auth_user).
  const nats = await NatsServer.start(
    'accounts: { A: { jetstream: { max_file: 65536, max_mem: 0 }, users: [ { user: a, password: a } ] } }\n' +
      'no_auth_user: a\n',
  );
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const jsm = await jetstreamManager(nc);
  // A work queue: a message leaves the account's storage once the reader acknowledges it.
  await jsm.streams.add({ name: 'GF', subjects: ['gf.>'], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add('GF', { durable_name: 'reader', ack_policy: AckPolicy.Explicit });
  const consumer = await jetstream(nc).consumers.get('GF', 'reader');
  // The reader takes about 800 triggers a second: slower than the router sends, so the account fills again and again.
  const read: Trigger[] = [];
  let reading = true;
  const reader = (async () => {
    while (reading) {
      const batch = await consumer.fetch({ max_messages: 20, expires: 1000 });
      for await (const m of batch) {
        read.push(m.json<Trigger>());
        m.ack();
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  const traffic = sinkTraffic(31, 120);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [nats.url],
    subject: 'gf.{type}.{fenceId}',
    stream: 'GF',
    createStream: false,
  });
  t.after(() => router.close());
  const summary = await runThrough(router, traffic, 5000);
  const ds = summary.downstreams[0]!;
  await waitFor(() => read.length >= summary.triggersTotal, 60_000, 'the reader took every trigger');
  reading = false;
  await reader;
  console.log(
    `jetstream, account storage used up: ${summary.triggersTotal} triggers, ${read.length} read; ` +
      `${ds.backoffs} backoffs, ${ds.deviceHolds} device holds, breaker opened ${ds.breakerOpens} times`,
  );
  assert.ok(summary.triggersTotal > 2000, `triggers: ${summary.triggersTotal}`);
  assert.ok(ds.backoffs + ds.deviceHolds > 0, 'the account was full at times (batches waited)');
  assert.equal(summary.shedTotal, 0);
  // Nothing refused for good: a trigger that waited through its attempts is parked and replayed (the full account is
  // the downstream falling behind, as a full stream is), never dead-lettered as rejected.
  assert.equal(ds.deadLetteredByReason.rejected, 0, `dead letters: ${JSON.stringify(ds.deadLetteredByReason)}`);
  assert.equal(ds.final, 0, 'nothing settled for good but delivered');
  assert.equal(ds.replayed, summary.deadLettered, 'every parked trigger was replayed');
  assert.deepEqual(checkDeliveryContract(read, { complete: true, stays: true }).problems.slice(0, 5), []);
  assert.equal(read.length, summary.triggersTotal, 'each stored once');
});

test('JetStream sink with createStream: a stream deleted mid-run is created again and the rest is stored there, each device a gapless run of its latest triggers, in order, none dead-lettered', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const traffic = sinkTraffic(12, 200);
  // A callback beside the stream gets every trigger: the reference the stream's content is held to.
  const all: Trigger[] = [];
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-sink-')), 'state'),
    downstreams: [
      {
        name: 'js',
        kind: 'jetstream',
        servers: [nats.url],
        subject: 'gf.{type}.{fenceId}',
        stream: 'GF',
        createStream: true,
      },
      { name: 'all', kind: 'callback', callback: (ts) => void all.push(...ts) },
    ],
    log: () => undefined,
  });
  t.after(() => router.close());
  const sending = sendPaced(router.ingestPort!, traffic, 1_000);
  await waitFor(() => router.stats().downstreams[0]!.delivered > 200, 30_000, 'triggers stored');
  const nc = await connect({ servers: nats.url });
  try {
    await (await jetstreamManager(nc)).streams.delete('GF');
  } finally {
    await nc.close();
  }
  const deliveredAtDelete = router.stats().downstreams[0]!.delivered;
  await sending;
  const summary = await finishRun(router, traffic);
  const ds = summary.downstreams[0]!;
  assert.equal(ds.final, 0, 'nothing dead-lettered for good');
  assert.equal(ds.delivered + ds.replayed, summary.triggersTotal);
  assert.equal(all.length, summary.triggersTotal, 'the callback got every trigger');
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true }).problems, [], 'the callback');
  const stored = (await readStream(nats.url, 'GF')).map((x) => x.trigger);
  assert.ok(stored.length > 0, 'the stream was created again and holds what came after the delete');
  assert.deepEqual(checkDeliveryContract(stored, {}).problems, [], 'per-device order, each once');
  // Against what the callback got: each device's run in the new stream is gapless, ends at its last trigger, and
  // holds the same triggers.
  const reference = new Map<string, Trigger>();
  const lastSeq = new Map<string, number>();
  for (const x of all) {
    const k = JSON.stringify(x.deviceId);
    reference.set(`${k}/${x.seq}`, x);
    lastSeq.set(k, Math.max(lastSeq.get(k) ?? 0, x.seq));
  }
  const byDevice = new Map<string, number[]>();
  for (const x of stored) {
    const k = JSON.stringify(x.deviceId);
    byDevice.set(k, [...(byDevice.get(k) ?? []), x.seq]);
    const ref = reference.get(`${k}/${x.seq}`);
    assert.ok(
      ref !== undefined && ref.type === x.type && ref.fenceId === x.fenceId,
      `${k}/${x.seq} as the callback got it`,
    );
  }
  for (const [device, seqs] of byDevice) {
    assert.equal(seqs.at(-1), lastSeq.get(device), `device ${device}: the new stream ends at its last trigger`);
    assert.equal(seqs.at(-1)! - seqs[0]! + 1, seqs.length, `device ${device}: a gapless run of seqs in the new stream`);
  }
  console.log(
    `jetstream, stream deleted mid-run: ${summary.triggersTotal} triggers, ${deliveredAtDelete} stored before the delete, ` +
      `${stored.length} in the stream created again`,
  );
});

test('JetStream sink: a trigger larger than the server takes (max_payload, its headers counted) is refused for good alone, and its device goes on in order; the connection stays up', async (t) => {
  const MAX_PAYLOAD = 2048;
  const nats = await NatsServer.start(`max_payload: ${MAX_PAYLOAD}\n`);
  t.after(() => nats.stop());
  const sink = new JetStreamSink({ servers: [nats.url], subject: 'gf.{type}', stream: 'GF' });
  t.after(() => sink.close());
  // Device 7, seqs 1..5: the second names a fence whose tags make its JSON 4 KiB; the fourth one whose JSON is just
  // under max_payload, over it with the message id header.
  const { ENTER, EXIT } = TriggerType;
  const types = [ENTER, EXIT, ENTER, EXIT, ENTER];
  let tagLength = 4096;
  const json = (h: number): string =>
    `"fenceId":"${h === 0 ? 'A' : 'B'}","tags":[${h === 0 ? '' : JSON.stringify('x'.repeat(h === 1 ? 4096 : tagLength))}]`;
  const f64 = new Float64Array((types.length * DREC_STRIDE_BYTES) / 8);
  const batch = new TriggerBatch(f64, new Int32Array(f64.buffer), types.length, {
    deviceId: () => 7,
    fenceId: (h) => (h === 0 ? 'A' : 'B'),
    fenceTags: (h) => (h === 0 ? [] : ['x'.repeat(h === 1 ? 4096 : tagLength)]),
    fenceJson: json,
  });
  for (let i = 0; i < types.length; i++) {
    const handle = i === 1 ? 1 : i === 3 ? 2 : 0;
    const rec = dispatchRecord(new TriggerRecord().set(i + 1, types[i]!, Lane.COMPLIANCE, 0, 0), handle);
    f64.set(rec.f64, (i * DREC_STRIDE_BYTES) / 8);
    batch.add(i);
  }
  // The fourth trigger's JSON made 10 bytes under max_payload.
  tagLength += MAX_PAYLOAD - 10 - Buffer.byteLength(triggerJson(batch, 3));
  assert.equal(Buffer.byteLength(triggerJson(batch, 3)), MAX_PAYLOAD - 10);
  assert.deepEqual(await sink.deliver(batch), { status: 200, refused: [1, 3] });
  // The same sink delivers the next batch over the same connection.
  assert.deepEqual(await sink.deliver(triggerBatch([ENTER], 6)), { status: 200 });
  const stored = (await readStream(nats.url, 'GF')).map((m) => `${m.subject} ${m.trigger.seq}`);
  assert.deepEqual(stored, ['gf.ENTER 1', 'gf.ENTER 3', 'gf.ENTER 5', 'gf.ENTER 6']);
});
