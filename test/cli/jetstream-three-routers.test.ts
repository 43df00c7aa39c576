/**
 * Three router processes split 16 partitions of a JetStream telemetry stream (0-5, 6-10, 11-15), each with its own
 * state directory, sharing the partition state bucket. One is killed (-9) mid-stream; an operator moves its partitions
 * to a survivor, which stops cleanly and starts again on 0-10. Everything the routers wrote, taken once per
 * (deviceId, seq), is the reference (the same pings through one router over TCP) trigger for trigger: the survivor
 * continued the killed router's devices from their stored state (no second ENTER), and what it derived again carries
 * the seqs the killed router gave it.
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
import { waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';
import { jetstreamRouterArgs, jetstreamScenario } from './jetstream-runs.js';

const DEVICES = 300;

test('three routers on 16 partitions, one killed mid-stream and its partitions moved to a survivor: once per (deviceId, seq), exactly the reference', async (t) => {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, 37, DEVICES);
  const outputs: string[] = [];
  const start = (name: string, partitions: string): CliProcess => {
    const out = join(dir, `${name}-${outputs.length}.ndjson`);
    outputs.push(out);
    const p = new CliProcess(
      jetstreamRouterArgs({
        fences,
        stateDir: join(dir, name),
        natsPort: nats.port,
        out,
        extra: ['--partitions', partitions],
      }),
      60_000,
    );
    t.after(() => p.child.kill('SIGKILL'));
    return p;
  };
  const ready = (p: CliProcess): Promise<void> => p.waitFor('the source', (q) => /telemetry jetstream/.test(q.stderr));
  const a = start('a', '0-5');
  const b = start('b', '6-10');
  const c = start('c', '11-15');
  await Promise.all([ready(a), ready(b), ready(c)]);
  const cut = Math.floor((traffic.pings * 2) / 3);
  const publishing = publishPaced(nats.url, traffic, DEVICES, 0, cut, 2000);
  await new Promise((r) => setTimeout(r, 1800));
  // Killed once each of its partitions has stored state (a slow host may not have stored every one yet).
  await waitForStoredPartitionState(nats.url, 20_000, [6, 7, 8, 9, 10]);
  b.child.kill('SIGKILL');
  await b.exited;
  await publishing;
  // b's partitions go to a: it stops cleanly and starts again on 0-10.
  a.child.kill('SIGTERM');
  assert.equal((await a.exited).code, 0, a.stderr);
  await publishPaced(nats.url, traffic, DEVICES, cut, traffic.pings, 20_000);
  const a2 = start('a', '0-10');
  const want = new Set(expected.map(whole));
  const all = (): Trigger[] => outputs.flatMap((o) => readNdjson(o));
  const complete = (): boolean => {
    const have = new Set(all().map(whole));
    return [...want].every((w) => have.has(w));
  };
  await waitFor(complete, 30_000, 'every reference trigger written').catch(() => undefined);
  for (const p of [a2, c]) p.child.kill('SIGTERM');
  await Promise.all([a2.exited, c.exited]);
  assert.match(a2.stderr, /devices restored from the stored checkpoints of 11 partitions/);
  for (const o of outputs) assert.deepEqual(checkDeliveryContract(readNdjson(o), {}).problems, [], o);
  const written = all();
  const stored = oncePerIdentity(written);
  const have = new Set(stored.map(whole));
  const missing = [...want].filter((w) => !have.has(w));
  assert.deepEqual(missing, [], 'no reference trigger is missing');
  assert.deepEqual(stored.map(whole).sort(), [...want].sort(), 'once per (deviceId, seq): exactly the reference');
  console.log(
    `three routers, one killed: ${outputs.map((o) => readNdjson(o).length).join(' + ')} triggers written (a, b, c, a again); once per (deviceId, seq) the reference's ${expected.length}; ${written.length - stored.length} re-derived under the seq they had`,
  );
});
