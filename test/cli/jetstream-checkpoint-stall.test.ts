/**
 * A partition checkpoint is stored as delivered only once every trigger of the pings its state holds is delivered,
 * those of a containment batch whose device updates the copy saw but whose triggers were not published yet included
 * (a batch publishes its triggers at its end: a worker descheduled in between, as on a busy host). The drill hook
 * stalls one batch there for seconds while the router checkpoints and then is killed; the restart reads the
 * partitions again from their delivered checkpoints and the receiver gets every reference trigger.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { publishPaced, waitForStoredPartitionState } from '../support/jetstream-publish.js';
import { TriggerServer } from '../pipeline/support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamScenario,
  runUntilReceived,
  webhookRouterArgs,
} from './jetstream-runs.js';
import { CliProcess } from './support.js';

const DEVICES = 300;
/** How long the drilled batch holds its triggers back, ms; the router is killed well inside it. */
const STALL_MS = 8000;
/** From the drilled device's first publish to the kill, ms: several checkpoint intervals (500 ms). */
const KILL_AFTER_MS = 4000;

test('kill -9 while a containment batch held its triggers back from the state copies: no checkpoint taken meanwhile is stored as delivered, and the restart derives those triggers again', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 43, DEVICES);
  // A device whose first ping gives a trigger; its pings are published once the router has a delivered checkpoint.
  const firstMs = Math.min(...expected.map((x) => x.eventTimeMs));
  const late = expected.find((x) => x.seq === 1 && x.eventTimeMs === firstMs)!.deviceId;
  const ofLate = (k: number): boolean => `v${k % DEVICES}` === late;
  const server = new TriggerServer(() => 200);
  await server.start();
  t.after(() => server.stop());
  const args = webhookRouterArgs({ fences, dir, nats }, server.url);
  // Pool workers read the drill from the environment, which the child inherits when it is spawned.
  process.env['GEOFENCE_FAULT_INJECT'] = `stall-on-device:${String(late)}:${STALL_MS}`;
  const a = new CliProcess(args, 60_000);
  delete process.env['GEOFENCE_FAULT_INJECT'];
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const half = Math.floor(traffic.pings / 2);
  await publishPaced(nats.url, traffic, DEVICES, 0, half, 5000, (k) => !ofLate(k));
  await waitForStoredPartitionState(nats.url, 20_000);
  const stallFrom = Date.now();
  await publishPaced(nats.url, traffic, DEVICES, 0, half, 5000, ofLate);
  // The rest is published while the batch stalls; the kill comes inside the stall however long that takes.
  const rest = publishPaced(nats.url, traffic, DEVICES, half, traffic.pings, 5000);
  await new Promise((r) => setTimeout(r, Math.max(0, stallFrom + KILL_AFTER_MS - Date.now())));
  a.child.kill('SIGKILL');
  await a.exited;
  await rest;
  // The checkpoints taken during the stall waited for the batch and were not stored.
  assert.match(a.stderr, /partition checkpoints deferred .*containment had not processed the pings before the copy/);
  const b = await runUntilReceived(t, args, server, expected);
  const received = server.received.slice();
  assertReceivedReference(received, expected);
  assertDeliveredEverything(b);
  console.log(
    `stalled batch of ${String(late)}: ${received.length} triggers received over both runs; once per (deviceId, seq) the reference's ${expected.length}`,
  );
});
