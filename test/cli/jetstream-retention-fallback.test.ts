/**
 * Exact replay when the stream no longer holds what a partition's delivered checkpoint needs: a router whose webhook
 * turned slow (its triggers wait in its backlog log, its partitions' state stored past them, their delivered
 * checkpoints left behind) is killed after the stream's retention removed the messages after every delivered
 * checkpoint (all that every partition's newest state covers). The restart on the same state directory cannot read
 * the partitions again from their delivered checkpoints: each falls back to its newest state, says why, delivers its
 * own files' copies up to that state and derives the rest again; the receiver gets every reference trigger, in
 * per-device order. When retention removed every message (past the newest states too), the restart says the removed
 * pings are read by no one, reads nothing again exactly and continues seqs above a raised floor: at the receiver one
 * (deviceId, seq) is one trigger, in per-device order.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { publishPaced } from '../support/jetstream-publish.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamScenario,
  runUntilReceived,
  scrapeMetric,
  withAdmin,
  webhookRouterArgs,
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

/**
 * Waits until some partition's consumer at `url` has delivered a message past what that partition's newest stored state
 * covers: the router has read pings its stored state does not cover (however slow the host).
 */
async function readPastStoredState(url: string): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    const until = Date.now() + 30_000;
    for (;;) {
      const { newest } = await storedHeads(url);
      for (let p = 0; p < PARTITIONS; p++) {
        const info = await jsm.consumers.info('TEL', `geofence-router-p${p}`).catch(() => null);
        if (info !== null && info.delivered.stream_seq > newest[p]!) return;
      }
      assert.ok(Date.now() < until, 'the router read pings past its stored state');
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    await nc.close();
  }
}

/**
 * A router on a fresh scenario whose webhook turns slow after the first triggers (each batch answered after 100 ms,
 * two requests of 16 triggers at a time: what it cannot send yet waits in its backlog log, and partition state is
 * stored past it, not as delivered), fed pings [0, publishTo), killed once every partition's newest state is past
 * every delivered checkpoint (with `killWhile`, while publishing pings [publishTo, killWhile) more, once it has read
 * messages its stored state does not cover). The webhook answers at once again after the kill.
 */
async function killedWithStateAhead(
  t: TestContext,
  seed: number,
  publishTo: (pings: number) => number,
  killWhile: ((pings: number) => number) | null = null,
) {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, seed, DEVICES);
  let slowMs = 0;
  const server = new TriggerServer(() =>
    slowMs === 0 ? 200 : new Promise<number>((r) => setTimeout(() => r(200), slowMs)),
  );
  await server.start();
  t.after(() => server.stop());
  const args = webhookRouterArgs({ fences, dir, nats }, server.url, { safetyCap: 2, maxBatchTriggers: 16 });
  const a = new CliProcess(args, 60_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const third = Math.floor(traffic.pings / 3);
  await publishPaced(nats.url, traffic, DEVICES, 0, third, 5000);
  await waitFor(() => server.received.length > 0, 30_000, 'triggers at the receiver');
  slowMs = 100;
  await publishPaced(nats.url, traffic, DEVICES, third, publishTo(traffic.pings), 5000);
  const by = Date.now() + 45_000;
  let heads = await storedHeads(nats.url);
  while (Math.min(...heads.newest) <= Math.max(...heads.delivered)) {
    assert.ok(Date.now() < by, `newest ${heads.newest.join(',')}; delivered ${heads.delivered.join(',')}`);
    await new Promise((r) => setTimeout(r, 200));
    heads = await storedHeads(nats.url);
  }
  const more =
    killWhile === null
      ? null
      : publishPaced(nats.url, traffic, DEVICES, publishTo(traffic.pings), killWhile(traffic.pings), 5000);
  if (more !== null) await readPastStoredState(nats.url);
  a.child.kill('SIGKILL');
  await a.exited;
  await more;
  slowMs = 0;
  return { traffic, expected, nats, server, args, heads, firstReceived: server.received.length };
}

/** Purges stream TEL at `url` below sequence `seq` (every message without one) as retention would; returns how many. */
async function purgeBelow(url: string, seq: number | null): Promise<number> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    return (await jsm.streams.purge('TEL', seq === null ? undefined : { seq })).purged;
  } finally {
    await nc.close();
  }
}

test('kill -9 of a router after retention removed the stream messages after its delivered checkpoints: each partition falls back to its newest state with a warning, and the receiver gets every reference trigger in per-device order', async (t) => {
  const { expected, nats, server, args, heads, firstReceived } = await killedWithStateAhead(t, 43, (n) => n);
  // Retention removes the messages after all delivered checkpoints and before all newest states.
  const firstKept = Math.min(...heads.newest) + 1;
  const purged = await purgeBelow(nats.url, firstKept);
  assert.ok(purged > 0);
  let started = new Map<string, number>();
  const b = await runUntilReceived(t, withAdmin(args), server, expected, async (p) => {
    started = await scrapeMetric(p, 'geofence_source_start_partitions');
  });
  assert.deepEqual(Object.fromEntries(started), {
    'read_from="delivered_checkpoint"': 0,
    'read_from="newest_state_fallback"': PARTITIONS,
    'read_from="newest_state_gap"': 0,
    'read_from="newest_state"': 0,
  });
  const fellBack = [
    ...b.stderr.matchAll(
      /partition (\d+): it(?:s delivered checkpoint covers up to stream sequence \d+, captured [^,]+| has no delivered checkpoint), and the stream's first message is now sequence (\d+)/g,
    ),
  ];
  assert.match(
    b.stderr,
    /16 partitions restored from the newest stored state, not read again exactly from a delivered checkpoint \(copies of their triggers up to that state in other routers' files are not delivered\): partition 0: /,
  );
  assert.equal(fellBack.length, PARTITIONS, b.stderr);
  assert.ok(fellBack.every((m) => Number(m[2]) === firstKept));
  // Per-device order over both runs; what the restart delivers again from its files is the same trigger under its seq.
  const received = server.received.slice();
  assertReceivedReference(received, expected);
  assertDeliveredEverything(b);
  console.log(
    `retention removed stream messages below ${firstKept} (${purged}); the first router delivered ${firstReceived} triggers, the restart fell back on ${PARTITIONS} partitions and delivered ${received.length - firstReceived}; once per (deviceId, seq) the reference's ${expected.length}`,
  );
});

test('kill -9 of a router after retention removed the stream messages after its newest stored states too: the restart says so, reads no partition again exactly, and no (deviceId, seq) names two triggers at the receiver, in per-device order', async (t) => {
  const { traffic, nats, server, args, firstReceived } = await killedWithStateAhead(
    t,
    47,
    (n) => Math.floor(n / 2),
    (n) => Math.floor((2 * n) / 3),
  );
  // The routers were down longer than the stream keeps messages: every message is gone.
  assert.ok((await purgeBelow(nats.url, null)) > 0);
  const b = new CliProcess(withAdmin(args), 60_000);
  t.after(() => b.child.kill('SIGKILL'));
  await b.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const started = await scrapeMetric(b, 'geofence_source_start_partitions');
  await publishPaced(nats.url, traffic, DEVICES, Math.floor((2 * traffic.pings) / 3), traffic.pings, 5000);
  // Until the receiver has had nothing new for 2 s.
  for (let seen = -1; seen !== server.received.length;) {
    seen = server.received.length;
    await new Promise((r) => setTimeout(r, 2000));
  }
  b.child.kill('SIGTERM');
  // Drained with loss (exit 3): the summary names the partitions whose removed pings no one read.
  assert.equal((await b.exited).code, 3, b.stderr);
  assert.match(b.stderr + b.stdout, /drained with loss: .* partitions_after_gap=\d+: /);
  assert.match(
    b.stderr,
    /the stream no longer holds every message the stored partition state needs: the pings removed are read by no one, so this start reads no partition again exactly, seqs continue above \d+ \(the floor rose by 2\^32, no \(deviceId, seq\) is reused\) and every copy in the state directory's files is delivered: partition \d+: its newest stored state covers up to stream sequence \d+, its consumer had delivered up to \d+, and the stream's first message is now sequence \d+/,
  );
  // The partitions read past their state are counted as started with a gap, the others as not read again exactly.
  const gapped = b.stderr.match(/partition \d+: its newest stored state/g)!.length;
  assert.deepEqual(Object.fromEntries(started), {
    'read_from="delivered_checkpoint"': 0,
    'read_from="newest_state_fallback"': 0,
    'read_from="newest_state_gap"': gapped,
    'read_from="newest_state"': PARTITIONS - gapped,
  });
  const received = server.received.slice();
  // Triggers of the removed pings are lost (said); what arrives is in per-device order, one identity one trigger.
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  assert.ok(
    received.some((tr) => tr.seq > 2 ** 32),
    'seqs continue above the raised floor',
  );
  assertDeliveredEverything(b);
  console.log(
    `every stream message removed after the kill (${b.stderr.match(/partition \d+: its newest stored state/g)!.length} partitions had been read past their stored state): the first router delivered ${firstReceived} triggers, the restart ${received.length - firstReceived} (seqs above 2^32 after its restored ones); per-device order and one trigger per (deviceId, seq) at the receiver`,
  );
});
