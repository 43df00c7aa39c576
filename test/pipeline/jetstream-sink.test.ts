/**
 * The NATS JetStream sink through the router's threads against a real nats-server (started here, JetStream on): every
 * trigger is in the stream once, in per-device order, on the subject its template names, even though the relay in
 * between holds back the server's acknowledgements for a while (so the router times out and re-sends batches the
 * stream had already stored: the message id drops them); and across a restart, whose re-sends carry the first run's
 * message ids.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { DiscardPolicy, jetstreamManager } from '@nats-io/jetstream';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { HoldingRelay, NatsServer } from '../support/nats-server.js';
import { readStream } from '../support/jetstream-read.js';
import { finishRun, routerFor, runThrough, sinkTraffic, waitSettled } from '../support/sink-run.js';
import { sendPaced } from '../support/city-traffic.js';
import { waitFor } from './support.js';
import { JetStreamSink, subjectCaptures } from '../../src/dispatch/sinks/jetstream-sink.js';
import { TriggerType } from '../../src/shm/layout.js';
import { triggerBatch } from '../dispatch/fixtures.js';

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

test('JetStream sink: while no stream captures the subject, deliveries fail and are retried; once one does, every trigger is stored once and in per-device order, none dead-lettered for good', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const traffic = sinkTraffic(9, 50);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [nats.url],
    subject: 'unrouted.{type}',
    stream: 'LATE',
    createStream: false,
  });
  // A failed wait must not leave the router's threads running (close is idempotent).
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  // The server answers "no responders" (503): a failed delivery, so the breaker opens and the triggers wait.
  await waitFor(() => router.stats().downstreams[0]!.breakerState === 'open', 30_000, 'the breaker open');
  const during = router.stats().downstreams[0]!;
  assert.equal(during.delivered + during.replayed, 0, 'nothing delivered while no stream captures the subject');
  assert.equal(during.final, 0, 'no trigger dead-lettered for good for a missing stream');
  // The operator creates the stream: the breaker's probe finds it and everything waiting is stored.
  const nc = await connect({ servers: nats.url });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: 'LATE', subjects: ['unrouted.>'] });
  } finally {
    await nc.close();
  }
  const summary = await finishRun(router, traffic);
  assert.ok(summary.triggersTotal > 100, `triggers: ${summary.triggersTotal}`);
  const ds = summary.downstreams[0]!;
  assert.equal(ds.final, 0, 'nothing dead-lettered for good');
  assert.equal(ds.delivered + ds.replayed, summary.triggersTotal);
  assert.equal(summary.lost, 0);
  const stored = await readStream(nats.url, 'LATE');
  assert.equal(stored.length, summary.triggersTotal, 'the stream holds every trigger once');
  assert.deepEqual(
    checkDeliveryContract(
      stored.map((x) => x.trigger),
      { complete: true, stays: true },
    ).problems,
    [],
  );
  console.log(
    `jetstream, stream created late: ${stored.length} triggers stored once; delivered ${ds.delivered}, replayed ${ds.replayed} (dead-lettered ${ds.deadLettered} while waiting, none for good)`,
  );
});

test('JetStream sink across a restart: what the first run left unacknowledged is re-sent by the next with the same ids, and the stream holds each trigger once', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const relay = new HoldingRelay(nats.port);
  await relay.start();
  t.after(() => relay.stop());
  const traffic = sinkTraffic(10);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-js-restart-')), 'state');
  const downstream = {
    name: 'js',
    kind: 'jetstream' as const,
    servers: [`nats://127.0.0.1:${relay.port}`],
    subject: 'gf.{type}.{fenceId}',
    stream: 'GF',
    ackTimeoutMs: 300,
    maxAttempts: 3,
  };
  const first = await routerFor(traffic, downstream, stateDir, { drainDeadlineMs: 1000 });
  // Half a second after the first publish the server's acknowledgements stop coming back (the stream still stores
  // every message): the rest of the run's triggers are stored but never acknowledged to the router.
  const hold = setInterval(() => {
    if (relay.msgIdsSeen > 0) {
      clearInterval(hold);
      setTimeout(() => (relay.delayMs = 600_000), 500);
    }
  }, 5);
  t.after(() => clearInterval(hold));
  await sendPaced(first.ingestPort!, traffic, 10_000);
  await waitFor(() => first.stats().processed === traffic.pings, 60_000, 'every ping processed');
  const one = await first.close();
  const triggers = one.triggersTotal;
  const acked = one.downstreams[0]!.delivered + one.downstreams[0]!.replayed;
  assert.ok(triggers > 1000, `triggers: ${triggers}`);
  assert.ok(acked > 0 && acked < triggers, `acknowledged in the first run: ${acked} of ${triggers}`);
  assert.equal(one.carriedOver + one.deadLetterDropped.over_budget + one.deadLetterDropped.too_old, triggers - acked);
  assert.equal(one.shedTotal, 0);
  const storedBefore = (await readStream(nats.url, 'GF')).length;
  assert.ok(storedBefore > acked, `the stream holds more than was acknowledged: ${storedBefore} > ${acked}`);
  // The next run over the same state directory, acknowledgements flowing again: it re-sends what it took over.
  relay.delayMs = 0;
  const publishesBefore = relay.msgIdsSeen;
  const second = await routerFor(traffic, downstream, stateDir);
  const recovered = second.stats().recovered;
  assert.equal(recovered, triggers - acked, 'the next run takes over every unacknowledged trigger');
  await waitFor(
    () => {
      const d = second.stats().downstreams[0]!;
      return d.delivered + d.replayed === recovered;
    },
    60_000,
    'every trigger taken over acknowledged',
  );
  const two = await second.close();
  assert.equal(two.final, 0);
  assert.equal(two.triggersTotal, 0, 'no ping in the second run');
  const stored = await readStream(nats.url, 'GF');
  assert.ok(relay.msgIdsSeen - publishesBefore >= recovered, 'the second run re-published what it took over');
  const ids = new Set(stored.map((s) => `${JSON.stringify(s.trigger.deviceId)}/${s.trigger.seq}`));
  assert.equal(
    stored.length,
    triggers,
    `each trigger stored once: the re-sends carried the ids of the first run (${ids.size} distinct (deviceId, seq))`,
  );
  assert.deepEqual(
    checkDeliveryContract(
      stored.map((s) => s.trigger),
      { complete: true, stays: true },
    ).problems,
    [],
  );
  console.log(
    `jetstream restart: ${triggers} triggers; first run acknowledged ${acked} (stream held ${storedBefore}); ` +
      `second run took over ${recovered} and re-published ${relay.msgIdsSeen - publishesBefore}; stream holds ${stored.length}`,
  );
});

/**
 * Runs seeded traffic into stream `stream` (made first with `subjects` and `extra`, subject template `gf.{type}`)
 * and checks that the triggers the stream refuses one by one are dead-lettered as rejected, nothing else: the stream
 * holds exactly the triggers counted delivered, in per-device order. Returns the stored triggers.
 */
async function refusedOneByOne(
  t: TestContext,
  stream: string,
  subjects: string[],
  extra: Record<string, unknown>,
  label: string,
): Promise<Trigger[]> {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: stream, subjects, ...extra });
  } finally {
    await nc.close();
  }
  const traffic = sinkTraffic(29, 200);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [nats.url],
    subject: 'gf.{type}',
    stream,
    createStream: false,
  });
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5000);
  await waitSettled(router, traffic.pings);
  const summary = await router.close();
  const ds = summary.downstreams[0]!;
  const stored = (await readStream(nats.url, stream)).map((x) => x.trigger);
  assert.ok(ds.deadLetteredByReason.rejected > 0, 'some triggers refused');
  assert.ok(ds.delivered > 0, 'some triggers stored');
  assert.equal(ds.final, ds.deadLetteredByReason.rejected, 'every trigger settled without delivery was refused');
  assert.equal(ds.replayed, 0, 'a refusal is not a failure: nothing parked');
  assert.equal(stored.length, ds.delivered, 'the stream holds exactly the triggers counted delivered');
  assert.deepEqual(checkDeliveryContract(stored, {}).problems, []);
  console.log(
    `jetstream, ${label}: ${summary.triggersTotal} triggers, ${ds.delivered} stored, ${ds.deadLetteredByReason.rejected} refused one by one`,
  );
  return stored;
}

test('JetStream sink: a message the stream refuses (over its size limit) is dead-lettered as rejected one by one; the rest of its batch is stored, in per-device order', async (t) => {
  // Triggers whose JSON (and message id header) is over 240 bytes are refused with code 400.
  await refusedOneByOne(t, 'SMALL', ['gf.>'], { max_msg_size: 240 }, 'messages over 240 bytes refused');
});

test('JetStream sink: subjects the stream does not capture ("no responders" beside stored messages) are refused one by one, not waited for', async (t) => {
  const stored = await refusedOneByOne(t, 'PART', ['gf.ENTER', 'gf.EXIT'], {}, 'CROSS and DWELL subjects not captured');
  const types = new Set<string>(stored.map((x) => x.type));
  assert.ok(!types.has('CROSS') && !types.has('DWELL'), `stored types: ${[...types]}`);
});

test('JetStream sink: "no responders" is a refusal only where no stream captures the subject and the stream exists; a batch of such messages alone is refused, a missing stream is waited for', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const sink = new JetStreamSink({ servers: [nats.url], subject: 'gf.{type}', stream: 'PART', createStream: false });
  t.after(() => sink.close());
  const { ENTER, EXIT, CROSS } = TriggerType;
  // No stream yet: every message unanswered, the batch fails (retried), nothing refused.
  const missing = await sink.deliver(triggerBatch([EXIT, CROSS], 1));
  assert.deepEqual(missing, { status: 503, again: [0], unsent: [1] }, "the CROSS waits behind its device's EXIT");
  const nc = await connect({ servers: nats.url });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: 'PART', subjects: ['gf.ENTER', 'gf.*.x'] });
  } finally {
    await nc.close();
  }
  // The sink keeps the server's answer about a subject for a second.
  await new Promise((resolve) => setTimeout(resolve, 1100));
  // Only subjects the stream does not capture, no message stored: each refused, the batch settled.
  assert.deepEqual(await sink.deliver(triggerBatch([EXIT, CROSS], 1)), { status: 200, refused: [0, 1] });
  // Beside a stored message: the captured one stored, the others refused.
  assert.deepEqual(await sink.deliver(triggerBatch([EXIT, ENTER, CROSS], 3)), { status: 200, refused: [0, 2] });
  assert.deepEqual(await sink.deliver(triggerBatch([ENTER], 6)), { status: 200 });
  const stored = (await readStream(nats.url, 'PART')).map((m) => `${m.subject} ${m.trigger.seq}`);
  assert.deepEqual(stored, ['gf.ENTER 4', 'gf.ENTER 6']);
});

test('JetStream sink: a batch that fails (a message for a missing stream) names the messages stored before the failure as delivered, and no later message of a device is published past one that goes again', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  try {
    // ENTER subjects go to another stream; the sink's own stream is missing (being created, say).
    await (await jetstreamManager(nc)).streams.add({ name: 'OTHER', subjects: ['gf.ENTER'] });
  } finally {
    await nc.close();
  }
  const sink = new JetStreamSink({ servers: [nats.url], subject: 'gf.{type}', stream: 'TRIG', createStream: false });
  t.after(() => sink.close());
  const { ENTER, EXIT } = TriggerType;
  // One device: seq 2 cannot be stored now, so seq 3 waits behind it (stored ahead of it, it would stay ahead).
  assert.deepEqual(await sink.deliver(triggerBatch([ENTER, EXIT, ENTER, EXIT], 1)), {
    status: 503,
    delivered: [0],
    again: [1],
    unsent: [2, 3],
  });
  const stored = (await readStream(nats.url, 'OTHER')).map((m) => `${m.subject} ${m.trigger.seq}`);
  assert.deepEqual(stored, ['gf.ENTER 1'], 'what the result names as delivered is what was stored');
});

test('JetStream sink: a stream whose subjects fill for the moment (discard new per subject: "maximum messages per subject exceeded", 503) stores every trigger once, in per-device order, none dead-lettered', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    // At most 4 messages younger than 200 ms on each subject (a trigger type and fence): past that a message is
    // refused "again later" while the next one, on another subject, is stored. ALL mirrors what GF stores, in GF's
    // order, and keeps it.
    await jsm.streams.add({
      name: 'GF',
      subjects: ['gf.>'],
      max_msgs_per_subject: 4,
      discard: DiscardPolicy.New,
      discard_new_per_subject: true,
      max_age: 200_000_000,
    });
    await jsm.streams.add({ name: 'ALL', mirror: { name: 'GF' } });
  } finally {
    await nc.close();
  }
  const traffic = sinkTraffic(31, 120);
  const router = await routerFor(traffic, {
    name: 'js',
    kind: 'jetstream',
    servers: [nats.url],
    subject: 'gf.{type}.{fenceId}',
    stream: 'GF',
    createStream: false,
    maxAttempts: 100,
  });
  t.after(() => router.close());
  const summary = await runThrough(router, traffic, 5000);
  const ds = summary.downstreams[0]!;
  assert.equal(summary.shedTotal, 0);
  assert.equal(summary.deadLettered, 0);
  const mirrored = async (): Promise<number> => {
    const c = await connect({ servers: nats.url });
    try {
      return (await (await jetstreamManager(c)).streams.info('ALL')).state.messages;
    } finally {
      await c.close();
    }
  };
  for (const end = Date.now() + 20_000; (await mirrored()) < summary.triggersTotal;) {
    if (Date.now() > end) throw new Error(`the mirror holds ${await mirrored()} of ${summary.triggersTotal}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const stored = (await readStream(nats.url, 'ALL')).map((x) => x.trigger);
  console.log(
    `jetstream, subjects full for the moment: ${summary.triggersTotal} triggers, ${stored.length} stored; ` +
      `${ds.delivered} delivered, ${ds.replayed} replayed; ${ds.deviceHolds} device holds, ${ds.backoffs} backoffs, ` +
      `breaker opened ${ds.breakerOpens} times`,
  );
  assert.ok(summary.triggersTotal > 2000, `triggers: ${summary.triggersTotal}`);
  assert.deepEqual(checkDeliveryContract(stored, { complete: true, stays: true }).problems.slice(0, 5), []);
  assert.equal(stored.length, summary.triggersTotal, 'each stored once');
});

test('JetStream sink: a user not permitted to read the stream has "no responders" refused beside a message stored (in the batch, or within the last second), and the device goes on in order', async (t) => {
  // "pub" may publish triggers and hear the answers, not ask the JetStream API anything.
  const nats = await NatsServer.start(
    'authorization { users = [\n' +
      '  { user: admin, password: admin }\n' +
      '  { user: pub, password: pub, permissions: { publish: { allow: ["gf.>"] }, subscribe: { allow: ["_INBOX.>"] } } }\n' +
      '] }\nno_auth_user: pub\n',
  );
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url, user: 'admin', pass: 'admin' });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: 'PART', subjects: ['gf.ENTER'] });
  } finally {
    await nc.close();
  }
  // Connecting without credentials, the sink is "pub" (no_auth_user).
  const sink = new JetStreamSink({
    servers: [nats.url],
    subject: 'gf.{type}',
    stream: 'PART',
    createStream: false,
  });
  t.after(() => sink.close());
  const { ENTER, EXIT } = TriggerType;
  // Nothing stored yet: the EXIT (no responders, the stream unreadable) may be a stream not there; it waits, and
  // the device's ENTER behind it is not published.
  assert.deepEqual(await sink.deliver(triggerBatch([EXIT, ENTER], 1)), { status: 503, again: [0], unsent: [1] });
  assert.deepEqual(await sink.deliver(triggerBatch([ENTER], 1)), { status: 200 });
  // Stored a moment ago: the EXIT is refused, and the device goes on.
  assert.deepEqual(await sink.deliver(triggerBatch([EXIT, ENTER, EXIT, ENTER], 2)), { status: 200, refused: [0, 2] });
  const stored = (await readStream(nats.url, 'PART', { user: 'admin', pass: 'admin' })).map(
    (m) => `${m.subject} ${m.trigger.seq}`,
  );
  assert.deepEqual(stored, ['gf.ENTER 1', 'gf.ENTER 3', 'gf.ENTER 5']);
});

test('subjectCaptures: "*" is one token, ">" one or more last tokens, literals match whole tokens', () => {
  const cases: [string, string, boolean][] = [
    ['gf.ENTER', 'gf.ENTER', true],
    ['gf.ENTER', 'gf.ENTERX', false],
    ['gf.ENTER', 'gf.ENTER.a', false],
    ['gf.*', 'gf.EXIT', true],
    ['gf.*', 'gf.EXIT.a', false],
    ['gf.*', 'gf', false],
    ['gf.>', 'gf.a.b.c', true],
    ['gf.>', 'gf', false],
    ['>', 'a', true],
    ['*.x', 'gf.x', true],
    ['*.x', 'gf.y', false],
    ['gf.*.x', 'gf.CROSS', false],
  ];
  for (const [pattern, subject, want] of cases)
    assert.equal(subjectCaptures(pattern, subject), want, `${pattern} captures ${subject}`);
});

test('JetStream sink: two downstreams publishing to one stream each have every trigger stored, in per-device order (their message ids differ)', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  try {
    await (await jetstreamManager(nc)).streams.add({ name: 'BOTH', subjects: ['gf.>'] });
  } finally {
    await nc.close();
  }
  const traffic = sinkTraffic(9, 200);
  const common = { kind: 'jetstream' as const, servers: [nats.url], stream: 'BOTH', createStream: false };
  const router = await routerFor(traffic, [
    { ...common, name: 'by-fence', subject: 'gf.fence.{type}.{fenceId}' },
    { ...common, name: 'by-device', subject: 'gf.device.{deviceId}' },
  ]);
  await sendPaced(router.ingestPort!, traffic, 5_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(
    () => router.stats().downstreams.every((d) => d.delivered + d.replayed + d.final === router.stats().triggersTotal),
    60_000,
    'every trigger settled at both downstreams',
  );
  const summary = await router.close();
  assert.equal(summary.deadLettered, 0);
  const stored = await readStream(nats.url, 'BOTH');
  for (const kind of ['fence', 'device']) {
    const triggers = stored.filter((s) => s.subject.startsWith(`gf.${kind}.`)).map((s) => s.trigger);
    assert.equal(triggers.length, summary.triggersTotal, `every trigger stored for the by-${kind} downstream`);
    assert.deepEqual(checkDeliveryContract(triggers, { complete: true, stays: true }).problems, [], kind);
  }
});
