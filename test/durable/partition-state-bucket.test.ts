/**
 * The partitions' device state in a JetStream key-value bucket, on a real NATS server: a router's last checkpoint of a
 * partition holding thousands of devices spans several chunks and reads back whole; a second writer of a partition is
 * refused (the head is written only over the revision its writer read); a head written for another partition count, or
 * chunks that are not a checkpoint, fail the read with a message naming the key. A store made while a trigger it
 * covers is undelivered moves the head but not the delivered checkpoint, whose chunks stay until a delivered store
 * replaces it. With exact replay a partition falls back to its newest checkpoint where its delivered one is unknown (a
 * head of an earlier version) or older than the stream's first message.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { createRouter } from '../../src/index.js';
import { resolveRouterOptions } from '../../src/config/options.js';
import { PartitionCheckpoints, fallbackReason, gapReason } from '../../src/router/partition-checkpoints.js';
import { PartitionStateBucket, type PartitionHeadSummary } from '../../src/durable/partition-state-bucket.js';
import { cityTraffic } from '../support/city-traffic.js';
import { NatsServer } from '../support/nats-server.js';
import { waitFor } from '../pipeline/support.js';

const DEVICES = 6000;
const BUCKET = 'GEOFENCE_PARTITION_STATE';

test('partition state bucket: a large partition reads back whole from its chunks; a second writer is refused; a mismatched or damaged head fails naming the key', async (t) => {
  const traffic = cityTraffic({
    seed: 41,
    fences: 300,
    devices: DEVICES,
    pingsPerDevice: 2,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const router = await createRouter({
    fences: traffic.fences,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-psb-')), 'state'),
    checkpointIntervalMs: 500,
    jetstreamSource: { servers: [nats.url], partitionCount: 1, stream: 'TEL' },
    log: () => undefined,
  });
  // 50 frames a message, every one to partition 0 (the only one).
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const js = jetstream(nc);
  let messages = 0;
  for (let k = 0; k < traffic.pings; k += 50) {
    const from = k === 0 ? 0 : traffic.ends[k - 1]!;
    const to = traffic.ends[Math.min(traffic.pings, k + 50) - 1]!;
    await js.publish('telemetry.0.fleet', traffic.frames.subarray(from, to));
    messages++;
  }
  await waitFor(() => router.stats().accepted === traffic.pings, 60_000, 'every ping read');
  await router.close();

  const options = { bucket: BUCKET, scope: 'TEL.geofence-router', replicas: 1, partitionCount: 1, writer: 'test' };
  const first = await PartitionStateBucket.open(nc, options);
  const stored = await first.read(0);
  assert.ok(stored !== null);
  assert.equal(stored.checkpoint.devices.length, DEVICES, 'every device of the partition');
  assert.equal(stored.streamSeq, messages, 'the clean stop covers the last message');
  const kv = await new Kvm(nc).open(BUCKET);
  const head = (await kv.get('TEL.geofence-router.p0'))!.json<{ chunks: number; bytes: number; epoch: string }>();
  assert.ok(head.chunks >= 2, `${head.bytes} bytes in ${head.chunks} chunks`);
  // The clean stop left nothing undelivered: its checkpoint is the delivered one too.
  assert.equal((await first.read(0, 'delivered'))?.streamSeq, messages, 'the clean stop is a delivered checkpoint');
  const encoded = new Uint8Array(head.bytes);
  for (let k = 0, at = 0; k < head.chunks; k++) {
    const c = (await kv.get(`TEL.geofence-router.p0.e${head.epoch}.c${k}`))!.value;
    encoded.set(c, at);
    at += c.length;
  }

  // Two writers of one partition: the one that read the older revision is refused.
  const second = await PartitionStateBucket.open(nc, options);
  await second.read(0);
  const junk = new Uint8Array(300_000);
  await first.write(0, messages, Date.now(), junk, true);
  await assert.rejects(
    second.write(0, messages, Date.now(), junk, true),
    /^Error: partition 0: its checkpoint in bucket GEOFENCE_PARTITION_STATE was written by another router since this one read it \(revision \d+\): the partition is consumed twice$/,
  );
  // What the first one wrote is not a checkpoint; another partition count is refused before the chunks are read.
  await assert.rejects(
    (await PartitionStateBucket.open(nc, options)).read(0),
    /bucket GEOFENCE_PARTITION_STATE key TEL\.geofence-router\.p0/,
  );
  await assert.rejects(
    (await PartitionStateBucket.open(nc, { ...options, partitionCount: 2 })).read(0),
    /^Error: bucket GEOFENCE_PARTITION_STATE key TEL\.geofence-router\.p0: written for 1 partitions, not 2 \(the partition count of a stream cannot change under its checkpoints\)$/,
  );
  const keys: string[] = [];
  for await (const k of await kv.keys()) keys.push(k);
  const epoch = (await kv.get('TEL.geofence-router.p0'))!.json<{ epoch: number }>().epoch;
  const scope = 'TEL.geofence-router.p0';
  assert.deepEqual(keys.sort(), [scope, `${scope}.e${epoch}.c0`, `${scope}.e${epoch}.c1`], 'earlier epochs purged');

  // Delivered and newest apart (another scope: fresh keys): stores at 10 (delivered), 20 and 30 (a trigger undelivered).
  const apart = { ...options, scope: 'TEL.apart' };
  const writer = await PartitionStateBucket.open(nc, apart);
  assert.equal(await writer.read(0), null);
  await writer.write(0, 10, Date.now(), encoded, true);
  await writer.write(0, 20, Date.now(), encoded, false);
  await writer.write(0, 30, Date.now(), encoded, false);
  const reader = await PartitionStateBucket.open(nc, apart);
  assert.equal((await reader.read(0))?.streamSeq, 30, 'the head is the newest store');
  const delivered = await reader.read(0, 'delivered');
  assert.equal(delivered?.streamSeq, 10, 'the delivered checkpoint is the store at 10');
  assert.equal(delivered.checkpoint.devices.length, DEVICES, 'and reads back whole');
  const chunkEpochs = async (): Promise<string[]> => {
    const epochs = new Set<string>();
    for await (const k of await kv.keys('TEL.apart.p0.>')) epochs.add(k.split('.')[3]!);
    return [...epochs].sort();
  };
  const headOf = async (): Promise<{ epoch: string; delivered: { epoch: string } }> =>
    (await kv.get('TEL.apart.p0'))!.json<{ epoch: string; delivered: { epoch: string } }>();
  const h = await headOf();
  assert.deepEqual(await chunkEpochs(), [`e${h.epoch}`, `e${h.delivered.epoch}`].sort(), "the 20's chunks purged");
  // A delivered store replaces both.
  await writer.write(0, 40, Date.now(), encoded, true);
  const again = await PartitionStateBucket.open(nc, apart);
  assert.equal((await again.read(0, 'delivered'))?.streamSeq, 40);
  const h2 = await headOf();
  assert.equal(h2.delivered.epoch, h2.epoch);
  assert.deepEqual(await chunkEpochs(), [`e${h2.epoch}`], 'earlier epochs purged');
  // A store made after reading the delivered checkpoint, with a trigger undelivered, keeps naming it; so does a claim.
  await again.write(0, 50, Date.now(), encoded, false);
  await again.claim(0);
  const afterClaim = await PartitionStateBucket.open(nc, apart);
  assert.equal((await afterClaim.read(0, 'delivered'))?.streamSeq, 40, 'the delivered checkpoint survives a claim');
  assert.equal((await afterClaim.read(0))?.streamSeq, 50);

  // A head an earlier version wrote (no delivered field): which of its checkpoints was delivered is unknown, and
  // stays unknown through undelivered stores and claims, so exact replay falls back to the newest.
  await kv.put('TEL.legacy.p0.eold.c0', encoded.subarray(0, 256 * 1024));
  await kv.put('TEL.legacy.p0.eold.c1', encoded.subarray(256 * 1024));
  const legacyHead = { format: 1, partition: 0, partitionCount: 1, streamSeq: 7, capturedMs: 1, writer: 'earlier' };
  await kv.put('TEL.legacy.p0', JSON.stringify({ ...legacyHead, epoch: 'old', bytes: encoded.length, chunks: 2 }));
  const legacy = await PartitionStateBucket.open(nc, { ...options, scope: 'TEL.legacy' });
  const streamFrom1 = { firstSeq: 1, firstMs: Date.now(), maxAgeMs: 0 };
  assert.equal(await legacy.read(0, 'delivered'), null);
  assert.equal(legacy.headOf(0)?.delivered, undefined);
  assert.match(
    fallbackReason(legacy.headOf(0), streamFrom1, null, NaN, Date.now())!,
    /written by an earlier version, which kept no delivered checkpoint/,
  );
  assert.equal((await legacy.read(0))?.checkpoint.devices.length, DEVICES, 'its newest state reads back');
  await legacy.write(0, 8, Date.now(), encoded, false);
  await legacy.claim(0);
  const legacyAgain = await PartitionStateBucket.open(nc, { ...options, scope: 'TEL.legacy' });
  await legacyAgain.read(0, 'delivered');
  assert.equal(legacyAgain.headOf(0)?.delivered, undefined, 'still unknown after an undelivered store and a claim');
  await legacyAgain.write(0, 9, Date.now(), encoded, true);
  assert.deepEqual(legacyAgain.headOf(0)?.delivered?.streamSeq, 9, 'known from the first delivered store');
  assert.equal(fallbackReason(legacyAgain.headOf(0), streamFrom1, null, NaN, Date.now()), null);
  // Messages about to expire count as removed: a stream keeping them 24 h, the message after a delivered checkpoint
  // published 22 h ago (within 2.4 h of expiry) falls back, 21 h ago does not.
  const nowMs = Date.UTC(2026, 5, 1);
  const day = { firstSeq: 1, firstMs: nowMs - 23 * 3_600_000, maxAgeMs: 24 * 3_600_000 };
  const hoursAgo = (hours: number): number => nowMs - hours * 3_600_000;
  const aged = (hours: number): PartitionHeadSummary => ({
    streamSeq: 50,
    hasState: true,
    delivered: { streamSeq: 3, capturedMs: nowMs - hours * 3_600_000 },
  });
  assert.match(
    fallbackReason(aged(22), day, 60, hoursAgo(22), nowMs)!,
    /^its delivered checkpoint covers up to stream sequence 3, captured [^,]+, and the messages to read again from there expire within 120 min \(the stream keeps messages 1440 min\)$/,
  );
  assert.equal(fallbackReason(aged(21), day, 60, hoursAgo(21), nowMs), null);
  // A router lagging behind the stream: the checkpoint is an hour old, the message after it 23 hours.
  assert.match(fallbackReason(aged(1), day, 60, hoursAgo(23), nowMs)!, /expire within 60 min/);
  // Nothing read after the checkpoint (an idle partition): no trigger was issued past it, whatever expires.
  assert.equal(fallbackReason(aged(22), day, 3, hoursAgo(22), nowMs), null);
  assert.equal(fallbackReason(aged(22), { ...day, firstSeq: 9 }, 3, hoursAgo(22), nowMs), null);
  assert.match(
    fallbackReason(aged(1), { ...day, firstSeq: 9 }, 4, hoursAgo(1), nowMs)!,
    /first message is now sequence 9/,
  );
  // With no delivered checkpoint the read starts at the stream's first message: its age counts.
  assert.match(
    fallbackReason({ streamSeq: 50, hasState: true, delivered: null }, day, null, day.firstMs, nowMs)!,
    /^it has no delivered checkpoint, and the messages to read again from the stream's start expire within 60 min/,
  );
  // Retention past the newest state too, after a router read past it: no partition state is continued exactly.
  const newest4: PartitionHeadSummary = { streamSeq: 4, hasState: true, delivered: { streamSeq: 3, capturedMs: 0 } };
  assert.match(
    gapReason(newest4, { ...day, firstSeq: 9 }, 6)!,
    /^its newest stored state covers up to stream sequence 4, its consumer had delivered up to 6, and the stream's first message is now sequence 9 \(retention removed the messages between\)$/,
  );
  assert.match(gapReason(newest4, { ...day, firstSeq: 9 }, null)!, /an unknown sequence \(it is gone\)/);
  assert.equal(gapReason(newest4, { ...day, firstSeq: 9 }, 4), null, 'idle since its state: nothing issued past it');
  assert.equal(gapReason({ streamSeq: 8, hasState: true, delivered: null }, { ...day, firstSeq: 9 }, 20), null);
  assert.equal(gapReason({ streamSeq: 0, hasState: false, delivered: null }, { ...day, firstSeq: 9 }, 20), null);

  // Exact replay through the router's side (real options, real stream): the delivered checkpoint is read again from
  // while the stream holds the messages after it; once retention removed them the partition falls back to its newest
  // checkpoint and says why.
  const hourAgoMs = Date.now() - 3_600_000;
  const scoped = await PartitionStateBucket.open(nc, { ...options, scope: 'TEL.fallback' });
  await scoped.read(0);
  await scoped.write(0, 3, hourAgoMs, encoded, true);
  await scoped.write(0, messages, Date.now(), encoded, false);
  const routerOptions = resolveRouterOptions({
    listenHost: null,
    jetstreamSource: { servers: [nats.url], partitionCount: 1, stream: 'TEL', consumerPrefix: 'fallback' },
  });
  const exact = (await PartitionCheckpoints.open(routerOptions))!;
  t.after(() => exact.close());
  assert.equal(exact.atStart.exactReplay, true);
  assert.deepEqual(exact.atStart.fallback, []);
  assert.deepEqual(
    exact.atStart.stored.map((c) => c.streamSeq),
    [3],
    'the delivered checkpoint, the stream holding what follows',
  );
  assert.equal(exact.oldestDeliveredAgeS(hourAgoMs + 3_600_000), 3600, 'the delivered checkpoint is an hour old');
  await (await jetstreamManager(nc)).streams.purge('TEL', { seq: 5 });
  const fellBack = (await PartitionCheckpoints.open(routerOptions))!;
  t.after(() => fellBack.close());
  assert.deepEqual(
    fellBack.atStart.stored.map((c) => c.streamSeq),
    [messages],
    'the newest checkpoint',
  );
  assert.equal(fellBack.atStart.fallback.length, 1);
  assert.match(
    fellBack.atStart.fallback[0]!.reason,
    /^its delivered checkpoint covers up to stream sequence 3, captured [^,]+, and the stream's first message is now sequence 5 \(retention removed the messages after the checkpoint\)$/,
  );
  // Retention past the newest state too: the start is no exact replay, and seqs are to continue above a raised floor.
  await js.publish('telemetry.0.fleet', traffic.frames.subarray(0, traffic.ends[0]!));
  await js.publish('telemetry.0.fleet', traffic.frames.subarray(0, traffic.ends[0]!));
  await (await jetstreamManager(nc)).streams.purge('TEL', { seq: messages + 2 });
  const gapped = (await PartitionCheckpoints.open(routerOptions))!;
  t.after(() => gapped.close());
  assert.equal(gapped.atStart.exactReplay, false);
  assert.equal(gapped.atStart.raiseSeqFloor, true);
  assert.deepEqual(gapped.atStart.fallback, []);
  assert.deepEqual(
    gapped.atStart.gapped.map((g) => g.partition),
    [0],
  );
  assert.deepEqual(
    gapped.atStart.stored.map((c) => c.streamSeq),
    [messages],
    'the newest checkpoint',
  );
});
