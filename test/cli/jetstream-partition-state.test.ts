/**
 * A JetStream source's partitions move to a router on another host (its own state directory) with their device
 * state: the first router keeps each partition's state in the key-value bucket, paired with the stream position it
 * covers (stored only once the triggers of the pings it covers are handed on: the webhook case kills the router
 * while its memory holds triggers), and the second restores it and reads each partition from there. Both write NDJSON; what they wrote together,
 * taken once per (deviceId, seq) as a JetStream trigger sink's de-duplication would, equals the reference (the same
 * pings through one router over TCP) trigger for trigger, seqs included: no trigger missing, no second ENTER, and
 * every repeat is the same trigger under the same seq. A router killed while its webhook held every request and
 * restarted on its own state directory: the partitions' stored state (none: their start) is the whole state, the files'
 * copies of what the replay derives again are passed over, and the receiver gets every reference trigger in per-device
 * order.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import {
  oncePerIdentity,
  publishPaced,
  readNdjson,
  waitForStoredPartitionState,
  whole,
} from '../support/jetstream-publish.js';
import { TriggerServer } from '../pipeline/support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamRouterArgs,
  jetstreamScenario,
  runUntilReceived,
  runAcrossStop,
  smallQueueWebhookConfig,
} from './jetstream-runs.js';
import { CliProcess } from './support.js';

const DEVICES = 300;

const CASES = [
  { stop: 'SIGKILL', sink: 'ndjson' },
  { stop: 'SIGTERM', sink: 'ndjson' },
  { stop: 'SIGKILL', sink: 'webhook that stops answering' },
] as const;

for (const { stop, sink } of CASES) {
  test(`${stop === 'SIGKILL' ? 'kill -9 of' : 'a clean stop of'} a router mid-stream (${sink}), its partitions read on by a router with another state directory: the triggers equal the reference, each once`, async (t) => {
    const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 31, DEVICES);
    // A receiver that stops answering 1.2 s before the kill: the first router's memory holds the triggers of what its
    // later checkpoints capture (requests held then are refused with 503 once it is dead, so none is received).
    let held: (() => void)[] | null = null;
    const server = new TriggerServer(() =>
      held === null ? 200 : new Promise<number>((r) => held!.push(() => r(503))),
    );
    if (sink === 'webhook that stops answering') {
      await server.start();
      t.after(() => server.stop());
    }
    let firstCount = 0;
    const out1 = join(dir, 'a.ndjson');
    const out2 = join(dir, 'b.ndjson');
    const args = (stateDir: string, out: string): string[] => [
      '--fences',
      fences,
      '--state-dir',
      join(dir, stateDir),
      '--no-listen',
      '--no-admin',
      '--source',
      `jetstream://127.0.0.1:${nats.port}/TEL`,
      '--checkpoint-interval-ms',
      '500',
      ...(sink === 'ndjson' ? ['--ndjson', out] : ['--webhook', server.url]),
    ];
    const written = (which: 1 | 2): Trigger[] => {
      if (sink === 'ndjson') return readNdjson(which === 1 ? out1 : out2);
      if (which === 1) firstCount = server.received.length;
      return which === 1 ? server.received.slice() : server.received.slice(firstCount);
    };
    const { run1, run2, stderr2 } = await runAcrossStop({
      natsUrl: nats.url,
      traffic,
      devices: DEVICES,
      expected,
      key: whole,
      first: args('state-a', out1),
      second: args('state-b', out2),
      written,
      ...(sink === 'ndjson'
        ? // Stopped once it has stored some partition state (its successor restores it: the line asserted below).
          { ready: () => waitForStoredPartitionState(nats.url, 20_000) }
        : {
            firstSettleMs: 500,
            hold: {
              heldMs: 1200,
              // Held only once the first router has stored some partition state (a slow host may not have yet).
              ready: () => waitForStoredPartitionState(nats.url, 20_000),
              hold: () => (held = []),
              release: () => {
                const waiting = held ?? [];
                held = null;
                for (const answer of waiting) answer();
              },
            },
          }),
      stop,
      after: (fn) => t.after(fn),
    });
    assert.match(stderr2, /devices restored from the stored checkpoints of \d+ partitions/);
    const want = new Set(expected.map(whole));
    const have = new Set([...run1, ...run2].map(whole));
    const missing = (): string[] => [...want].filter((w) => !have.has(w));
    for (const run of [run1, run2]) assert.deepEqual(checkDeliveryContract(run, {}).problems, []);
    // Across the hand-over too, as a consumer that reads the first router's output and then the second's sees it (with
    // the webhook, one receiver in arrival order): per-device seq order, a trigger received again only as itself.
    assert.deepEqual(checkDeliveryContract([...run1, ...run2], { allowRedelivery: true }).problems, []);
    const stored = oncePerIdentity([...run1, ...run2]);
    const gone = missing();
    // On a failure, what the second router said tells a slow start from a partition it did not read again.
    assert.deepEqual(
      gone,
      [],
      `no reference trigger is missing; the second router's log ends:\n${stderr2.slice(-4000)}`,
    );
    assert.deepEqual(stored.map(whole).sort(), [...want].sort(), 'once per (deviceId, seq): exactly the reference');
    const repeats = run1.length + run2.length - stored.length;
    if (stop === 'SIGTERM') assert.equal(repeats, 0, 'after a clean stop nothing is derived twice');
    console.log(
      `${stop} (${sink}): the first router wrote ${run1.length} of ${expected.length} triggers, the second ${run2.length}; once per (deviceId, seq) they are the reference's ${expected.length}; ${repeats} re-derived under the seq they had`,
    );
  });
}

/**
 * Restarts on the same state directory after a kill -9 while the webhook held every request: the first router's
 * memory held triggers its local checkpoints had moved its devices past, and its backlog log held later ones.
 */
const RESTART_CASES = [
  { held: 'from the start', seed: 37 },
  { held: 'once partition state is stored', seed: 41 },
] as const;

for (const { held: heldWhen, seed } of RESTART_CASES) {
  test(`kill -9 of a router whose webhook held every request ${heldWhen}, restarted on the same state directory: the partitions are read again from their stored state (none: their start), the files' copies of what that derives again are passed over, and the receiver gets every reference trigger, in per-device order`, async (t) => {
    const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, seed, DEVICES);
    // Held requests are refused once the first router is dead: a trigger handed on only by being held is not received.
    let held: (() => void)[] | null = heldWhen === 'from the start' ? [] : null;
    const server = new TriggerServer(() =>
      held === null ? 200 : new Promise<number>((r) => held!.push(() => r(503))),
    );
    await server.start();
    t.after(() => server.stop());
    // A small memory queue: what the held webhook cannot take spills to the backlog log early.
    const config = smallQueueWebhookConfig(dir, server.url);
    const args = jetstreamRouterArgs({
      fences,
      stateDir: join(dir, 'state'),
      natsPort: nats.port,
      out: null,
      extra: ['--config', config],
    });
    const a = new CliProcess(args, 60_000);
    t.after(() => a.child.kill('SIGKILL'));
    await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
    const half = Math.floor(traffic.pings / 2);
    await publishPaced(nats.url, traffic, DEVICES, 0, half, 5000);
    if (held === null) {
      await waitForStoredPartitionState(nats.url, 20_000);
      held = [];
    }
    await publishPaced(nats.url, traffic, DEVICES, half, traffic.pings, 5000);
    // Two checkpoint intervals and more: a local checkpoint holds devices that moved past held triggers.
    await new Promise((r) => setTimeout(r, 1500));
    a.child.kill('SIGKILL');
    await a.exited;
    const waiting = held ?? [];
    held = null;
    for (const answer of waiting) answer();
    const firstReceived = server.received.length;
    if (heldWhen === 'from the start') assert.equal(firstReceived, 0, 'the first router handed nothing on');
    const b = await runUntilReceived(t, args, server, expected);
    const received = server.received.slice();
    // Per-device order over both runs at the receiver; a trigger received twice is the same under the same seq.
    assertReceivedReference(received, expected);
    console.log(
      `kill -9, webhook held ${heldWhen}: the first router delivered ${firstReceived} triggers, the restart ${received.length - firstReceived}; once per (deviceId, seq) the reference's ${expected.length}`,
    );
    // What the case is about: the state directory had a checkpoint with devices, set aside for the partitions' state,
    // and the backlog log held copies of triggers the replay derives again.
    assert.match(b.stderr, /its checkpoint #\d+ captured [^(]+\([1-9]\d* devices\) is set aside/);
    assert.match(b.stderr, /[1-9]\d* more are derived again, in their devices' order, by the partitions' replay/);
    if (heldWhen !== 'from the start') assert.match(b.stderr, /devices restored from the stored checkpoints/);
    // The restart's accounting: what it was offered and took over is delivered, settled or kept (passed-over copies
    // are in neither side).
    assertDeliveredEverything(b);
    console.log(`the restart's accounting: ${/offered=.*? kept=\d+/.exec(b.stdout)![0]}`);
  });
}
