/**
 * The check a partition group member makes before it gives partitions up with triggers undelivered (handOverReasons),
 * on a real NATS server: their next owner must read them again exactly from their delivered checkpoints, and a start
 * with a gap in any partition it owns is no exact replay for any, so a gap in a partition the member keeps (the next
 * owner may read it as well) holds the release as much as one in a partition it gives up.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { resolveRouterOptions } from '../../src/config/options.js';
import { partitionConsumerName } from '../../src/ingest/sources/jetstream-source.js';
import { PartitionStateBucket } from '../../src/durable/partition-state-bucket.js';
import { handOverReasons } from '../../src/router/partition-checkpoints.js';
import { NatsServer } from '../support/nats-server.js';

const PARTITIONS = 4;

test('a gap in a partition the member keeps holds the release of others; once that partition is stored past it, the release goes ahead', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
  const js = jetstream(nc);
  // Ten messages of partition 2, read by its consumer.
  for (let k = 0; k < 10; k++) await js.publish('telemetry.2.v1', new Uint8Array([k]));
  const consumer = partitionConsumerName('handover', 2);
  await jsm.consumers.add('TEL', {
    durable_name: consumer,
    filter_subject: 'telemetry.2.>',
    ack_policy: AckPolicy.Explicit,
  });
  const read = await (await js.consumers.get('TEL', consumer)).fetch({ max_messages: 10, expires: 2000 });
  let got = 0;
  for await (const m of read) {
    m.ack();
    if (++got === 10) break;
  }
  assert.equal(got, 10);
  const options = resolveRouterOptions({
    listenHost: null,
    jetstreamSource: { servers: [nats.url], partitionCount: PARTITIONS, stream: 'TEL', consumerPrefix: 'handover' },
  });
  const bucket = await PartitionStateBucket.open(nc, {
    bucket: 'GEOFENCE_PARTITION_STATE',
    scope: 'TEL.handover',
    replicas: 1,
    partitionCount: PARTITIONS,
    writer: 'member',
  });
  // Partition 2's state covers message 2, its consumer delivered up to 10, and retention removed messages 1-7.
  await bucket.read(2);
  await bucket.write(2, 2, Date.now(), new Uint8Array(64), true);
  await jsm.streams.purge('TEL', { seq: 8 });
  const reasons = await handOverReasons(nc, options, [0, 1], []);
  assert.equal(reasons.length, 1, reasons.join('\n'));
  assert.match(
    reasons[0]!,
    /^partition 2: its newest stored state covers up to stream sequence 2, its consumer had delivered up to 10, and the stream's first message is now sequence 8 \(retention removed the messages between\) \(a next owner that reads it as well starts with no exact replay\)$/,
  );
  // Stored past the gap: nothing stands in the way.
  await bucket.write(2, 10, Date.now(), new Uint8Array(64), true);
  assert.deepEqual(await handOverReasons(nc, options, [0, 1], []), []);
  // The partitions given up are checked as before: one whose delivered checkpoint the stream no longer follows.
  await bucket.read(1);
  await bucket.write(1, 3, Date.now(), new Uint8Array(64), true);
  await js.publish('telemetry.1.v2', new Uint8Array([1]));
  await bucket.write(1, 11, Date.now(), new Uint8Array(64), false);
  await jsm.streams.purge('TEL', { seq: 11 });
  const fallback = await handOverReasons(nc, options, [0, 1], []);
  assert.equal(fallback.length, 1, fallback.join('\n'));
  assert.match(fallback[0]!, /^partition 1: its delivered checkpoint covers up to stream sequence 3, captured/);
});
