/**
 * kill -9 of a router reading a JetStream stream, then a restart on the same state directory: no trigger of the
 * reference (the same pings through one router over TCP) is missing, because what no checkpoint covered was not
 * acknowledged and is read again at once (the restart takes over its consumers from the first unacknowledged
 * message); no (deviceId, seq) names two different triggers; each run's output is in per-device seq order. With the
 * device state in the state directory only, triggers of the state since the last checkpoint are written again under
 * new seqs (the documented crash bound).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { NatsServer } from '../support/nats-server.js';
import { sinkTraffic, tcpReferenceTriggers } from '../support/sink-run.js';
import { readNdjson } from '../support/jetstream-publish.js';
import { runAcrossStop } from './jetstream-runs.js';

const DEVICES = 300;

/** What a trigger says, without its seq (a repeat after a crash carries a new one). */
const what = (t: Trigger): string => `${String(t.deviceId)} ${t.type} ${t.fenceId} ${t.eventTimeMs}`;

test('kill -9 of a router reading JetStream, then a restart: no reference trigger missing, no (deviceId, seq) reused', async (t) => {
  const traffic = sinkTraffic(24, DEVICES);
  const expected = await tcpReferenceTriggers(traffic);
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const dir = mkdtempSync(join(tmpdir(), 'gr-jsc-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify(traffic.fences));
  const stateDir = join(dir, 'state');
  const args = (out: string): string[] => [
    '--fences',
    fences,
    '--state-dir',
    stateDir,
    '--no-listen',
    '--no-admin',
    '--source',
    `jetstream://127.0.0.1:${nats.port}/TEL`,
    '--checkpoint-interval-ms',
    '500',
    // The state directory alone: jetstream-partition-state.test.ts covers the partitions' state in the bucket.
    '--partition-state-bucket',
    'none',
    '--ndjson',
    out,
  ];
  const out1 = join(dir, 'run1.ndjson');
  const out2 = join(dir, 'run2.ndjson');
  const { run1, run2 } = await runAcrossStop({
    natsUrl: nats.url,
    traffic,
    devices: DEVICES,
    expected,
    key: what,
    first: args(out1),
    second: args(out2),
    written: (which) => readNdjson(which === 1 ? out1 : out2),
    stop: 'SIGKILL',
    after: (fn) => t.after(fn),
  });
  const have = new Set([...run1, ...run2].map(what));
  const missing = (): string[] => expected.map(what).filter((w) => !have.has(w));
  assert.deepEqual(missing(), [], 'no reference trigger is missing');
  for (const run of [run1, run2]) assert.deepEqual(checkDeliveryContract(run, {}).problems, []);
  assert.deepEqual(checkDeliveryContract([...run1, ...run2], { allowRedelivery: true }).problems, []);
  const repeats = run1.length + run2.length - expected.length;
  console.log(
    `kill -9 after ${run1.length} of ${expected.length} triggers written; the restart wrote ${run2.length}: none missing, ${repeats} written twice (under a new seq: the state since the last checkpoint was re-derived)`,
  );
});
