/**
 * Deliveries lost on the way from a JetStream partition: a fetch that fails part way (heartbeats missed while the
 * ingest thread was busy, a connection lost) leaves the messages the server had already sent it with the consumer as
 * delivered, and the next fetch goes on after them. The drill GEOFENCE_SOURCE_FAULT_INJECT=drop-deliveries:<p>:<n>
 * stops the first full fetch of partition p after n messages, so the rest of that fetch is delivered by the server and
 * never seen by the router: a real loss on the way. The router must notice the skip in the consumer's delivery
 * sequence, make the consumer again from the message after the last one it took, and read those messages: the
 * receiver gets every reference trigger, in per-device order, once per (deviceId, seq).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
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
const DRILL_ENV = 'GEOFENCE_SOURCE_FAULT_INJECT';
const PARTITION = 3;
const TAKEN = 40;

test('deliveries of a partition lost on the way (a fetch that stopped part way): the router reads them again from the message after the last one it took, and the receiver gets every reference trigger', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 71, DEVICES);
  // The whole trajectory set is in the stream first, so the partition's first fetch is a full one.
  const nc = await connect({ servers: nats.url });
  await (await jetstreamManager(nc)).streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
  await nc.close();
  await publishPaced(nats.url, traffic, DEVICES, 0, traffic.pings, 20_000);
  const server = new TriggerServer(() => 200);
  await server.start();
  t.after(() => server.stop());
  const args = withAdmin(webhookRouterArgs({ fences, dir, nats }, server.url));
  let rewinds = new Map<string, number>();
  // The ingest thread reads the drill from the environment, which the child inherits when it is spawned (at once).
  process.env[DRILL_ENV] = `drop-deliveries:${PARTITION}:${TAKEN}`;
  const running = runUntilReceived(t, args, server, expected, async (p) => {
    rewinds = await scrapeMetric(p, 'geofence_source_rewinds_total');
  });
  delete process.env[DRILL_ENV];
  const p = await running;
  const stored = assertReceivedReference(server.received, expected);
  assertDeliveredEverything(p);
  assert.match(
    p.stderr,
    new RegExp(
      `partition ${PARTITION}: the consumer's deliveries do not follow .* reading again from stream sequence \\d+`,
    ),
  );
  assert.equal(rewinds.get(`partition="${PARTITION}"`), 1, [...rewinds].join(' '));
  console.log(
    `partition ${PARTITION}: a fetch stopped after ${TAKEN} messages; ${server.received.length} triggers received, once per (deviceId, seq) the reference's ${stored}`,
  );
});
