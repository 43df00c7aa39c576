/**
 * Router processes that take the 16 partitions of a JetStream telemetry stream through leases (--partitions auto),
 * each with its own state directory, sharing the lease and partition state buckets, fed a seeded trajectory set whose
 * triggers are known (the same pings through one router over TCP). Mid-stream one member is killed (-9), one joins,
 * one stops cleanly, or one is paused (SIGSTOP) past its lease and resumed: in each case the members balance by
 * themselves and everything they wrote, taken once per (deviceId, seq), is exactly the reference (no second ENTER, no
 * trigger missing), each member's output in per-device order. A clean stop or a join derives nothing twice; a paused
 * member that resumes writes nothing on the leases it lost.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { partitionOf, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { oncePerIdentity, publishPaced, readNdjson, whole } from '../support/jetstream-publish.js';
import { waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';
import { jetstreamRouterArgs, jetstreamScenario } from './jetstream-runs.js';

const DEVICES = 300;
const LEASE_MS = 2000;

/** A member process and its output. */
interface Member {
  name: string;
  p: CliProcess;
  out: string;
}

/**
 * The partitions a member read last (its last "reading partitions" line logged at or after `sinceMs`, epoch ms), or []
 * when none.
 */
function readingNow(m: Member, sinceMs = 0): number[] {
  let last: number[] = [];
  for (const line of m.p.stderr.split('\n')) {
    const found = /partition group: reading partitions ([\d,]+)/.exec(line);
    if (found === null || Date.parse((JSON.parse(line) as { time: string }).time) < sinceMs) continue;
    last = found[1]!.split(',').map(Number);
  }
  return last;
}

/** Epoch ms of the first log line of `m` matching `re` written at or after `sinceMs`, or null. */
function loggedAt(m: Member, re: RegExp, sinceMs: number): number | null {
  for (const line of m.p.stderr.split('\n')) {
    if (!re.test(line)) continue;
    const at = Date.parse((JSON.parse(line) as { time: string }).time);
    if (at >= sinceMs) return at;
  }
  return null;
}

/** Starts a group over a fresh NATS server; returns the helpers of one scenario. */
async function group(t: TestContext, seed: number) {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, seed, DEVICES);
  const members: Member[] = [];
  const start = (name: string): Member => {
    const out = join(dir, `${name}.ndjson`);
    const p = new CliProcess(
      jetstreamRouterArgs({
        fences,
        stateDir: join(dir, name),
        natsPort: nats.port,
        out,
        extra: ['--partitions', 'auto', '--lease-ms', String(LEASE_MS), '--member-name', name],
      }),
      90_000,
    );
    t.after(() => {
      p.child.kill('SIGCONT');
      p.child.kill('SIGKILL');
    });
    const m = { name, p, out };
    members.push(m);
    return m;
  };
  /**
   * Waits until the running members read every partition between them, each partition once, each its share (as
   * logged at or after `sinceMs`: a member paused meanwhile still shows what it read before).
   */
  const balanced = (running: Member[], what: string, sinceMs = 0): Promise<void> =>
    waitFor(
      () => {
        const all = running.flatMap((m) => readingNow(m, sinceMs)).sort((a, b) => a - b);
        const fair = running.every((m) => readingNow(m, sinceMs).length >= Math.floor(16 / running.length));
        return fair && all.length === 16 && all.every((p, i) => p === i);
      },
      // Three router processes starting on two busy cores can take a while to load their fences and join.
      60_000,
      what,
    );
  const cut = Math.floor((traffic.pings * 2) / 3);
  const want = new Set(expected.map(whole));
  const all = (): Trigger[] => members.flatMap((m) => readNdjson(m.out));
  const complete = (): boolean => {
    const have = new Set(all().map(whole));
    return [...want].every((w) => have.has(w));
  };
  /** Publishes the first two thirds over about 2 s, calling `during` 1.8 s in. */
  const firstPart = async (during: () => Promise<void> | void): Promise<void> => {
    const publishing = publishPaced(nats.url, traffic, DEVICES, 0, cut, 2000);
    await new Promise((r) => setTimeout(r, 1800));
    await during();
    await publishing;
  };
  /** Publishes pings [from, to) of the two thirds before `finish`, over about 1 s. */
  const publishPart = (from: number, to: number): Promise<void> =>
    publishPaced(nats.url, traffic, DEVICES, Math.floor(cut * from), Math.floor(cut * to), cut);
  /**
   * Publishes the rest, waits for every reference trigger, stops the members still running, and checks the output
   * (`stale`: a member that was paused past its leases).
   */
  const finish = async (
    running: Member[],
    stale: Member | null = null,
  ): Promise<{ written: Trigger[]; repeats: number }> => {
    await publishPaced(nats.url, traffic, DEVICES, cut, traffic.pings, 20_000);
    await waitFor(complete, 45_000, 'every reference trigger written').catch(() => undefined);
    for (const m of running) m.p.child.kill('SIGTERM');
    for (const m of running) assert.equal((await m.p.exited).code, 0, m.p.stderr);
    for (const m of members) {
      // A member whose leases were taken while it was stopped (`stale`) may write again, when it gets a partition
      // back, triggers it wrote before the pause: the state it gets back may be older than what it had written (the
      // other member stored what it had restored, not yet re-derived). The same trigger under the same seq: a
      // re-delivery, which every other rule of the contract still checks.
      const report = checkDeliveryContract(readNdjson(m.out), { allowRedelivery: m === stale });
      assert.deepEqual(report.problems, [], m.name);
      // A state write refused as "consumed twice" by a member that holds its leases would mean another member had
      // written over its state (a paused member's late write is refused, and says so, in its own log).
      if (m !== stale)
        assert.doesNotMatch(m.p.stderr, /consumed twice/, `no member wrote the state of a partition ${m.name} held`);
    }
    const written = all();
    const stored = oncePerIdentity(written);
    const have = new Set(stored.map(whole));
    const missing = [...want].filter((w) => !have.has(w));
    if (missing.length > 0) {
      // Where they are missing, and what each member did with its partitions, for the failure's message.
      const byPartition = new Map<number, number>();
      for (const w of missing) {
        const p = partitionOf(w.split(' ')[0]!, 16);
        byPartition.set(p, (byPartition.get(p) ?? 0) + 1);
      }
      const groupLines = members.map(
        (m) =>
          `${m.name}:\n` +
          m.p.stderr
            .split('\n')
            .filter((l) => /partition group|lost|consumer|checkpoint|abandon/.test(l))
            .join('\n'),
      );
      assert.fail(
        `${missing.length} reference triggers missing, by partition ${JSON.stringify([...byPartition].sort((x, y) => x[0] - y[0]))}\n${groupLines.join('\n')}`,
      );
    }
    assert.deepEqual(stored.map(whole).sort(), [...want].sort(), 'once per (deviceId, seq): exactly the reference');
    return { written, repeats: written.length - stored.length };
  };
  return { start, balanced, firstPart, publishPart, finish, expected, members };
}

test('leased partitions: three members, one killed (-9) mid-stream; the others take its partitions after the lease expires: once per (deviceId, seq), exactly the reference', async (t) => {
  const g = await group(t, 43);
  const [a, b, c] = [g.start('a'), g.start('b'), g.start('c')];
  await g.balanced([a, b, c], 'three members reading 16 partitions between them');
  const bHeld = readingNow(b);
  let killedAtMs = 0;
  await g.firstPart(async () => {
    killedAtMs = Date.now();
    b.p.child.kill('SIGKILL');
    await b.p.exited;
  });
  await g.balanced([a, c], "the survivors reading b's partitions too");
  const { written, repeats } = await g.finish([a, c]);
  const tookAt = [a, c]
    .map((m) => loggedAt(m, /partition group: .*took partitions/, killedAtMs))
    .filter((x): x is number => x !== null);
  assert.ok(tookAt.length > 0, 'a survivor took partitions after the kill');
  const takeoverMs = Math.max(...tookAt) - killedAtMs;
  const readingAt = [a, c]
    .map((m) => loggedAt(m, /partition group: reading partitions/, killedAtMs))
    .filter((x): x is number => x !== null);
  const readingMs = Math.max(...readingAt) - killedAtMs;
  console.log(
    `kill -9 of a member holding partitions ${bHeld.join(',')}: its leases taken ${takeoverMs} ms after the kill (lease ${LEASE_MS} ms), read again ${readingMs} ms after it; ${written.length} triggers written, once per (deviceId, seq) the reference's ${g.expected.length}; ${repeats} re-derived under the seq they had`,
  );
});

test('leased partitions: a member joins mid-stream and takes its share from the others, which store the state first: exactly the reference, nothing derived twice', async (t) => {
  const g = await group(t, 47);
  const [a, b] = [g.start('a'), g.start('b')];
  await g.balanced([a, b], 'two members reading 16 partitions between them');
  let c: Member | null = null;
  await g.firstPart(() => {
    c = g.start('c');
  });
  await g.balanced([a, b, c!], 'three members reading 16 partitions between them');
  assert.ok(readingNow(c!).length >= 5, `the new member reads its share: ${readingNow(c!).join(',')}`);
  const { written, repeats } = await g.finish([a, b, c!]);
  assert.equal(repeats, 0, 'a balance moves state, nothing is derived twice');
  console.log(`a member joined: ${written.length} triggers written, exactly the reference's ${g.expected.length}`);
});

test('leased partitions: a member stops cleanly mid-stream; its leases are released with the state stored: exactly the reference, nothing derived twice', async (t) => {
  const g = await group(t, 53);
  const [a, b, c] = [g.start('a'), g.start('b'), g.start('c')];
  await g.balanced([a, b, c], 'three members reading 16 partitions between them');
  await g.firstPart(async () => {
    b.p.child.kill('SIGTERM');
    assert.equal((await b.p.exited).code, 0, b.p.stderr);
  });
  await g.balanced([a, c], "the others reading b's partitions too");
  const { written, repeats } = await g.finish([a, c]);
  assert.equal(repeats, 0, 'a clean stop moves state, nothing is derived twice');
  console.log(
    `a member stopped cleanly: ${written.length} triggers written, exactly the reference's ${g.expected.length}`,
  );
});

test('leased partitions, split brain: a member paused (SIGSTOP) past its lease loses its partitions to the other; resumed, it takes, writes and stores nothing on the leases it lost, then rejoins', async (t) => {
  const g = await group(t, 59);
  const [a, b] = [g.start('a'), g.start('b')];
  await g.balanced([a, b], 'two members reading 16 partitions between them');
  // Paused once it has written what it read (a batch it had handed on before a pause may land after it: that is
  // not the point here), while pings keep coming: resumed, it could take them from its old consumers.
  await g.publishPart(0, 0.5);
  // Nothing more written for a second (a router that lags goes more than a poll between two writes).
  let last = -1;
  let sameSinceMs = Date.now();
  await waitFor(
    () => {
      const n = readNdjson(a.out).length;
      if (n !== last) {
        last = n;
        sameSinceMs = Date.now();
      }
      return n > 0 && Date.now() - sameSinceMs >= 1000;
    },
    30_000,
    'a writing nothing more',
  );
  a.p.child.kill('SIGSTOP');
  const writtenAtPause = readNdjson(a.out).length;
  await g.publishPart(0.5, 0.75);
  await waitFor(() => readingNow(b).length === 16, 30_000, 'b reading all 16 partitions');
  const bBeforeResume = new Set(readNdjson(b.out).map(whole));
  const resumedAtMs = Date.now();
  a.p.child.kill('SIGCONT');
  await g.publishPart(0.75, 1);
  await a.p.waitFor('the lost leases', (p) => /lost the leases of partitions/.test(p.stderr));
  await g.balanced([a, b], 'the resumed member rejoined with its share', resumedAtMs);
  const { written } = await g.finish([a, b], a);
  const afterResume = readNdjson(a.out).slice(writtenAtPause);
  const stale = afterResume.filter((x) => bBeforeResume.has(whole(x)));
  assert.deepEqual(stale, [], 'nothing the resumed member wrote repeats what the new owner had derived');
  console.log(
    `split brain: the paused member wrote ${writtenAtPause} before the pause and ${afterResume.length} after it rejoined (none on its lost leases); ${written.length} triggers in all, once per (deviceId, seq) the reference's ${g.expected.length}`,
  );
});
