/**
 * A JetStream source's partitions move to a router on another host (its own state directory) with their device
 * state: the first router keeps each partition's state in the key-value bucket, paired with the stream position it
 * covers (stored only once the triggers of the pings it covers are handed on: the webhook case kills the router
 * while its memory holds triggers), and the second restores it and reads each partition from there. Both write NDJSON; what they wrote together,
 * taken once per (deviceId, seq) as a JetStream trigger sink's de-duplication would, equals the reference (the same
 * pings through one router over TCP) trigger for trigger, seqs included: no trigger missing, no second ENTER, and
 * every repeat is the same trigger under the same seq.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { oncePerIdentity, readNdjson, waitForStoredPartitionState, whole } from '../support/jetstream-publish.js';
import { TriggerServer } from '../pipeline/support.js';
import { jetstreamScenario, runAcrossStop } from './jetstream-runs.js';

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
        ? {}
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
    const stored = oncePerIdentity([...run1, ...run2]);
    assert.deepEqual(missing(), [], 'no reference trigger is missing');
    assert.deepEqual(stored.map(whole).sort(), [...want].sort(), 'once per (deviceId, seq): exactly the reference');
    const repeats = run1.length + run2.length - stored.length;
    if (stop === 'SIGTERM') assert.equal(repeats, 0, 'after a clean stop nothing is derived twice');
    console.log(
      `${stop} (${sink}): the first router wrote ${run1.length} of ${expected.length} triggers, the second ${run2.length}; once per (deviceId, seq) they are the reference's ${expected.length}; ${repeats} re-derived under the seq they had`,
    );
  });
}
