/**
 * Exact replay when the stream no longer holds what a partition's delivered checkpoint needs: a router whose webhook
 * turned slow (its triggers wait in its backlog log, its partitions' state stored past them, their delivered
 * checkpoints left behind) is killed after the stream's retention removed the messages after every delivered
 * checkpoint (all that every partition's newest state covers). The restart on the same state directory cannot read
 * the partitions again from their delivered checkpoints: each falls back to its newest state, says why, delivers its
 * own files' copies up to that state and derives the rest again; the receiver gets every reference trigger, in
 * per-device order.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { publishPaced } from '../support/jetstream-publish.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamRouterArgs,
  jetstreamScenario,
  runUntilReceived,
  smallQueueWebhookConfig,
} from './jetstream-runs.js';
import { CliProcess } from './support.js';

const DEVICES = 300;
const PARTITIONS = 16;

/** Per partition, the stream sequence its newest stored state covers and its delivered checkpoint's (0: none). */
async function storedHeads(url: string): Promise<{ newest: number[]; delivered: number[] }> {
  const nc = await connect({ servers: url });
  try {
    const kv = await new Kvm(nc).open('GEOFENCE_PARTITION_STATE');
    const newest: number[] = [];
    const delivered: number[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const e = await kv.get(`TEL.geofence-router.p${p}`);
      const head =
        e === null || e.operation !== 'PUT'
          ? null
          : e.json<{ streamSeq: number; delivered?: { streamSeq: number } | null }>();
      newest.push(head?.streamSeq ?? 0);
      delivered.push(head?.delivered?.streamSeq ?? 0);
    }
    return { newest, delivered };
  } finally {
    await nc.close();
  }
}

test('kill -9 of a router after retention removed the stream messages after its delivered checkpoints: each partition falls back to its newest state with a warning, and the receiver gets every reference trigger in per-device order', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 43, DEVICES);
  // A receiver that turns slow (each batch answered after 100 ms; two requests of 16 triggers at a time): what the
  // router cannot send yet waits in its backlog log, and partition state is stored past it, not as delivered.
  let slowMs = 0;
  const server = new TriggerServer(() =>
    slowMs === 0 ? 200 : new Promise<number>((r) => setTimeout(() => r(200), slowMs)),
  );
  await server.start();
  t.after(() => server.stop());
  const args = jetstreamRouterArgs({
    fences,
    stateDir: join(dir, 'state'),
    natsPort: nats.port,
    out: null,
    extra: ['--config', smallQueueWebhookConfig(dir, server.url, { safetyCap: 2, maxBatchTriggers: 16 })],
  });
  const a = new CliProcess(args, 60_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const third = Math.floor(traffic.pings / 3);
  await publishPaced(nats.url, traffic, DEVICES, 0, third, 5000);
  await waitFor(() => server.received.length > 0, 30_000, 'triggers at the receiver');
  slowMs = 100;
  await publishPaced(nats.url, traffic, DEVICES, third, traffic.pings, 5000);
  // Wait until every partition's newest state is past every delivered checkpoint: retention can then remove the
  // messages after all of those and before all newest states.
  const by = Date.now() + 45_000;
  let heads = await storedHeads(nats.url);
  while (Math.min(...heads.newest) <= Math.max(...heads.delivered)) {
    assert.ok(Date.now() < by, `newest ${heads.newest.join(',')}; delivered ${heads.delivered.join(',')}`);
    await new Promise((r) => setTimeout(r, 200));
    heads = await storedHeads(nats.url);
  }
  const firstKept = Math.min(...heads.newest) + 1;
  const nc = await connect({ servers: nats.url });
  const purged = await (await jetstreamManager(nc)).streams.purge('TEL', { seq: firstKept });
  await nc.close();
  assert.ok(purged.purged > 0);
  a.child.kill('SIGKILL');
  await a.exited;
  const firstReceived = server.received.length;
  slowMs = 0;

  const b = await runUntilReceived(t, args, server, expected);
  const fellBack = [
    ...b.stderr.matchAll(
      /partition (\d+): it(?:s delivered checkpoint covers up to stream sequence \d+, captured [^,]+,| has no delivered checkpoint) and the stream's first message is now sequence (\d+)/g,
    ),
  ];
  assert.match(
    b.stderr,
    /16 partitions restored from their newest stored checkpoints, not read again exactly \(copies of their triggers in other routers' files past that state are not delivered\): partition 0: /,
  );
  assert.equal(fellBack.length, PARTITIONS, b.stderr);
  assert.ok(fellBack.every((m) => Number(m[2]) === firstKept));
  // Per-device order over both runs; what the restart delivers again from its files is the same trigger under its seq.
  const received = server.received.slice();
  assertReceivedReference(received, expected);
  assertDeliveredEverything(b);
  console.log(
    `retention removed stream messages below ${firstKept} (${purged.purged}); the first router delivered ${firstReceived} triggers, the restart fell back on ${PARTITIONS} partitions and delivered ${received.length - firstReceived}; once per (deviceId, seq) the reference's ${expected.length}`,
  );
});
