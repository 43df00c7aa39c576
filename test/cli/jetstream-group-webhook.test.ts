/**
 * Two router processes of a partition group sharing one webhook receiver (as services behind one endpoint do). The
 * receiver goes down while the first member reads every partition, and a second member joins. When every ping comes
 * from the stream (exact replay), the first member releases half its partitions at once, with triggers of theirs
 * undelivered in its files: their next owner derives them again from the partitions' delivered checkpoints, and the
 * first member passes its copies over. When the members also listen on TCP (no exact replay), or only the second one
 * does (it could not derive them again, and its heartbeat says so), the first member keeps its partitions while its close leaves triggers undelivered (they would reach the receiver after the later seqs the
 * next owner sends), and releases them once the receiver is back. Either way, at the receiver each device's triggers
 * arrive in seq order, and once per (deviceId, seq) they are exactly the reference. The balance's close gives up on the
 * receiver after one lease time (2 s), not the 30 s drain deadline of a stop.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { publishPaced, whole } from '../support/jetstream-publish.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';
import {
  assertDeliveredEverything,
  assertReceivedReference,
  jetstreamScenario,
  partitionsRead,
  startGroupMember,
} from './jetstream-runs.js';

const DEVICES = 300;

/** Which members also listen on TCP (no exact replay for them), and what a holding member says of it. */
const CASES: { pings: string; listeners: readonly string[]; holdsFor: RegExp | null }[] = [
  { pings: 'from the stream alone', listeners: [], holdsFor: null },
  { pings: 'from the stream and a TCP listener', listeners: ['a', 'b'], holdsFor: /there is no exact replay/ },
  {
    pings: 'from the stream alone at a, and a TCP listener at b',
    listeners: ['b'],
    holdsFor: /members b may read pings from more than the stream/,
  },
];

for (const { pings, listeners, holdsFor } of CASES) {
  const listen = holdsFor !== null;
  test(`leased partitions (pings ${pings}) and a shared webhook that goes down while a member joins: ${listen ? 'no partition moves with triggers undelivered' : 'half the partitions move at once, their undelivered triggers derived again by the next owner'}; at the receiver per-device order holds and the triggers are exactly the reference`, async (t) => {
    const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 61, DEVICES);
    let down = false;
    const server = new TriggerServer(() => (down ? 503 : 200));
    await server.start();
    t.after(() => server.stop());
    const start = (name: string): CliProcess =>
      startGroupMember(t, {
        fences,
        dir,
        natsPort: nats.port,
        name,
        extra: ['--webhook', server.url, ...(listeners.includes(name) ? ['--listen', '127.0.0.1:0'] : [])],
      });
    const reading = partitionsRead;
    const a = start('a');
    await waitFor(() => reading(a) === 16, 60_000, 'a reading all 16 partitions');
    const third = Math.floor(traffic.pings / 3);
    await publishPaced(nats.url, traffic, DEVICES, 0, third, 5000);
    await waitFor(() => server.received.length > 0, 30_000, 'triggers at the receiver');
    down = true;
    await publishPaced(nats.url, traffic, DEVICES, third, 2 * third, 5000);
    const b = start('b');
    if (listen) {
      await waitFor(() => /are not released yet/.test(a.stderr), 60_000, 'a holding its partitions back');
      // The balance's close was given one lease time, not the 30 s drain deadline of a stop.
      assert.match(
        a.stderr,
        /triggers kept undelivered by a close given 2000 ms to drain, and that their next owner derives them again cannot be shown/,
      );
      assert.match(a.stderr, holdsFor);
      assert.equal(reading(b), 0, 'b reads nothing while a holds every partition');
      down = false;
      await waitFor(() => reading(a) === 8 && reading(b) === 8, 60_000, 'a and b reading 8 partitions each');
    } else {
      // The receiver is still down: the partitions move with triggers undelivered.
      await waitFor(() => reading(a) === 8 && reading(b) === 8, 60_000, 'a and b reading 8 partitions each');
      assert.match(
        a.stderr,
        /triggers kept undelivered by a close given 2000 ms to drain; partitions [\d,]+ move all the same/,
      );
      assert.doesNotMatch(a.stderr, /are not released yet/);
      // a's next router passed its copies over; b read its partitions again from their delivered checkpoints.
      assert.match(a.stderr, /more are derived again, in their devices' order/);
      assert.doesNotMatch(b.stderr, /restored from the newest stored state, not read again exactly/);
      down = false;
    }
    await publishPaced(nats.url, traffic, DEVICES, 2 * third, traffic.pings, 5000);
    const want = new Set(expected.map(whole));
    const complete = (): boolean => {
      const have = new Set(server.received.map(whole));
      return [...want].every((w) => have.has(w));
    };
    await waitFor(complete, 45_000, 'every reference trigger received').catch(() => undefined);
    for (const p of [a, b]) p.child.kill('SIGTERM');
    for (const p of [a, b]) assert.equal((await p.exited).code, 0, p.stderr);
    // Each member's last router: its accounting holds and nothing was dead-lettered for good or left undelivered.
    for (const p of [a, b]) assertDeliveredEverything(p);
    const received = server.received.slice();
    // A trigger received again is the same trigger under the same seq (a partition read again from its stored state).
    assertReceivedReference(received, expected);
    console.log(
      `shared webhook down while b joined, pings ${pings}: a held its partitions back ${(a.stderr.match(/are not released yet/g) ?? []).length} times and moved them with triggers undelivered ${(a.stderr.match(/move all the same/g) ?? []).length} times; ${received.length} triggers received, once per (deviceId, seq) the reference's ${expected.length}`,
    );
  });
}
