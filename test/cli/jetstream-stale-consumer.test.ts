/**
 * A partition's consumer made again behind the reading router's back, from a later message (what a router paused past
 * the partition's lease could do with a rewind it began before the pause, or an operator by hand): the consumer's
 * delivery sequence starts again at 1, below the one the reader expects. The reader must not take what the new
 * consumer delivers from its later position; it reads on from the message after the last one it took, and the
 * receiver gets every reference trigger, in per-device order, once per (deviceId, seq).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstreamManager } from '@nats-io/jetstream';
import { partitionOf } from '../../src/index.js';
import { publishPaced } from '../support/jetstream-publish.js';
import { TriggerServer } from '../pipeline/support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamScenario,
  runUntilReceived,
  scrapeMetric,
  webhookRouterArgs,
  withAdmin,
} from './jetstream-runs.js';

const DEVICES = 300;
const PARTITION = 5;
/** Stream sequences the stale consumer starts past the last message published before it. */
const SKIPPED = 1600;

test('a partition consumer made again behind the router from a later message: the router reads on from the message after the last one it took, and the receiver gets every reference trigger', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 73, DEVICES);
  const nc = await connect({ servers: nats.url });
  t.after(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
  const server = new TriggerServer(() => 200);
  await server.start();
  t.after(() => server.stop());
  const args = withAdmin(webhookRouterArgs({ fences, dir, nats }, server.url));
  const name = `geofence-router-p${PARTITION}`;
  let rewinds = new Map<string, number>();
  const half = Math.floor(traffic.pings / 2);
  const running = runUntilReceived(t, args, server, expected, async (p) => {
    rewinds = await scrapeMetric(p, 'geofence_source_rewinds_total');
  });
  await publishPaced(nats.url, traffic, DEVICES, 0, half, 10_000);
  // The router has taken every message of the partition published so far.
  for (const end = Date.now() + 30_000; ;) {
    const info = await jsm.consumers.info('TEL', name).catch(() => null);
    if (info !== null && info.num_pending === 0 && info.delivered.consumer_seq > 0) break;
    if (Date.now() > end) assert.fail(`consumer ${name} did not deliver everything published within 30 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const lastSeq = (await jsm.streams.info('TEL')).state.last_seq;
  // Made again from past the start of the second half, as a router that lost the lease would from its own position.
  await jsm.consumers.delete('TEL', name);
  await jsm.consumers.add('TEL', {
    durable_name: name,
    filter_subject: `telemetry.${PARTITION}.>`,
    ack_policy: AckPolicy.All,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: lastSeq + 1 + SKIPPED,
    max_ack_pending: -1,
  });
  await publishPaced(nats.url, traffic, DEVICES, half, traffic.pings, 10_000);
  const p = await running;
  const stored = assertReceivedReference(server.received, expected);
  assertDeliveredEverything(p);
  assert.match(p.stderr, new RegExp(`partition ${PARTITION}: the consumer's deliveries do not follow`));
  assert.ok((rewinds.get(`partition="${PARTITION}"`) ?? 0) >= 1, [...rewinds].join(' '));
  const skipped = expected.filter((x) => partitionOf(x.deviceId, 16) === PARTITION).length;
  console.log(
    `partition ${PARTITION}: consumer made again ${SKIPPED} stream sequences past the last published message; ${server.received.length} triggers received, once per (deviceId, seq) the reference's ${stored} (${skipped} of partition ${PARTITION})`,
  );
});
