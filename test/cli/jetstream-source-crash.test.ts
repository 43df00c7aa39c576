/**
 * kill -9 of a router reading a JetStream stream, then a restart on the same state directory: no trigger of the
 * reference (the same pings through one router over TCP) is missing, because what no checkpoint covered was not
 * acknowledged and is read again at once (the restart takes over its consumers from the first unacknowledged
 * message); no (deviceId, seq) names two different triggers; each run's output is in per-device seq order. Triggers
 * of the state since the last checkpoint are written again under new seqs (the documented crash bound).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { partitionSubject, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { NatsServer } from '../support/nats-server.js';
import { sinkTraffic, tcpReferenceTriggers } from '../support/sink-run.js';
import type { CityTraffic } from '../support/city-traffic.js';
import { waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';

const DEVICES = 300;

function readNdjson(path: string): Trigger[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Trigger);
}

/** What a trigger says, without its seq (a repeat after a crash carries a new one). */
const what = (t: Trigger): string => `${String(t.deviceId)} ${t.type} ${t.fenceId} ${t.eventTimeMs}`;

/** Publishes pings [from, to) at about `perSec`, one a message, to their partition subjects. */
async function publishPaced(
  url: string,
  traffic: CityTraffic,
  from: number,
  to: number,
  perSec: number,
): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const js = jetstream(nc);
    const t0 = performance.now();
    for (let k = from; k < to;) {
      const end = Math.min(to, k + Math.max(1, Math.round(perSec / 50)));
      const acks: Promise<unknown>[] = [];
      for (; k < end; k++) {
        const start = k === 0 ? 0 : traffic.ends[k - 1]!;
        acks.push(
          js.publish(
            partitionSubject('telemetry', `v${k % DEVICES}`, 16),
            traffic.frames.subarray(start, traffic.ends[k]!),
          ),
        );
      }
      await Promise.all(acks);
      const lead = ((k - from) / perSec) * 1000 - (performance.now() - t0);
      if (lead > 1) await new Promise((r) => setTimeout(r, lead));
    }
  } finally {
    await nc.close();
  }
}

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
    '--ndjson',
    out,
  ];
  const out1 = join(dir, 'run1.ndjson');
  const out2 = join(dir, 'run2.ndjson');
  const r1 = new CliProcess(args(out1), 60_000);
  t.after(() => r1.child.kill('SIGKILL'));
  await r1.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  // Two thirds of the pings over about 2 s; the router is killed while they flow.
  const cut = Math.floor((traffic.pings * 2) / 3);
  const publishing = publishPaced(nats.url, traffic, 0, cut, 2000);
  await new Promise((r) => setTimeout(r, 1800));
  r1.child.kill('SIGKILL');
  await r1.exited;
  await publishing;
  const run1 = readNdjson(out1);
  await publishPaced(nats.url, traffic, cut, traffic.pings, 20_000);
  const r2 = new CliProcess(args(out2), 60_000);
  t.after(() => r2.child.kill('SIGKILL'));
  const want = new Set(expected.map(what));
  const missing = (): string[] => {
    const have = new Set([...run1, ...readNdjson(out2)].map(what));
    return [...want].filter((w) => !have.has(w));
  };
  await waitFor(() => missing().length === 0, 30_000, 'every reference trigger written').catch(() => undefined);
  r2.child.kill('SIGTERM');
  await r2.exited;
  const run2 = readNdjson(out2);
  assert.ok(run1.length > 0 && run1.length < expected.length, `the first run was cut short: ${run1.length} triggers`);
  assert.deepEqual(missing(), [], 'no reference trigger is missing');
  for (const run of [run1, run2]) assert.deepEqual(checkDeliveryContract(run, {}).problems, []);
  assert.deepEqual(checkDeliveryContract([...run1, ...run2], { allowRedelivery: true }).problems, []);
  const repeats = run1.length + run2.length - expected.length;
  console.log(
    `kill -9 after ${run1.length} of ${expected.length} triggers written; the restart wrote ${run2.length}: none missing, ${repeats} written twice (under a new seq: the state since the last checkpoint was re-derived)`,
  );
});
