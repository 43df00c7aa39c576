/**
 * A device first seen after its partition's stored state, while a device of another partition had expired and been
 * freed: the router that reads the partition next (another member, killed -9 in between) gives the new device's
 * triggers the seqs the first router gave them. Each partition has its own seq floor, stored with its checkpoint, so
 * what other partitions' devices did does not move it; the receiver gets the new device's ENTER again under the same
 * (deviceId, seq), never under a second identity.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { partitionOf, partitionSubject, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { byDevice, frameOf, square, TriggerServer, waitFor } from '../pipeline/support.js';
import { NatsServer } from '../support/nats-server.js';
import { assertDeliveredEverything, scrapeMetric, webhookRouterArgs, withAdmin } from './jetstream-runs.js';
import { CliProcess } from './support.js';

const PARTITIONS = 16;
/** Idle time before expiry (the sweep runs every 187 ms). */
const IDLE_MS = 1500;

/** Publishes a ping of `id` outside the fence, then one inside it a second later (event time from `atMs`). */
async function publishEntry(url: string, id: string, atMs: number): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const js = jetstream(nc);
    for (const [eastM, dtMs] of [
      [-2000, atMs],
      [0, atMs + 1000],
    ] as const)
      await js.publish(partitionSubject('telemetry', id, PARTITIONS), frameOf({ id, eastM, northM: 0, dtMs }));
  } finally {
    await nc.close();
  }
}

test('a new device after another partition freed a device: the next reader of its partition gives its triggers the same seqs, so the receiver gets its ENTER again under the same identity', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const dir = mkdtempSync(join(tmpdir(), 'gr-js-newseq-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('zone', 0, 0, 300)] }));
  const expiring = 'x0';
  const late = Array.from({ length: 64 }, (_, i) => `late${i}`).find(
    (id) => partitionOf(id, PARTITIONS) !== partitionOf(expiring, PARTITIONS),
  )!;
  const server = new TriggerServer(() => 200);
  await server.start();
  t.after(() => server.stop());
  // Checkpoints 14 s apart: the late device's partition has no stored state holding it when the first router dies.
  const argsOf = (member: string): string[] => {
    mkdirSync(join(dir, member), { recursive: true });
    return withAdmin(
      webhookRouterArgs({ fences, dir: join(dir, member), nats }, server.url, {}, [
        '--device-idle-timeout-ms',
        String(IDLE_MS),
      ]),
    ).map((x, i, all) => (all[i - 1] === '--checkpoint-interval-ms' ? '14000' : x));
  };
  const of = (id: string, type: string): Trigger[] =>
    server.received.filter((x) => x.deviceId === id && x.type === type);

  const a = new CliProcess(argsOf('a'), 120_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  await publishEntry(nats.url, expiring, 0);
  await waitFor(() => of(expiring, 'EXIT').length > 0, 30_000, 'the expiring device enters, goes idle and exits');
  // Its slot is freed once the receiver has its EXIT: its final seq is the floor of its own partition only.
  const freed = async (): Promise<number> => (await scrapeMetric(a, 'geofence_device_slots_freed_total')).get('') ?? 0;
  for (let i = 0; i < 100 && (await freed()) === 0; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await freed(), 1, 'the expired device was freed');
  await publishEntry(nats.url, late, 10_000);
  await waitFor(() => of(late, 'ENTER').length > 0, 30_000, 'the late device enters');
  a.child.kill('SIGKILL');
  await a.exited;
  const firstSeq = of(late, 'ENTER')[0]!.seq;

  // Another member reads every partition again (none has a stored state past the start).
  const b = new CliProcess(argsOf('b'), 120_000);
  t.after(() => b.child.kill('SIGKILL'));
  await waitFor(
    () => of(late, 'ENTER').length >= 2 && of(late, 'EXIT').length > 0 && of(expiring, 'EXIT').length >= 2,
    60_000,
    'the second router derives both devices again, and they expire again',
  ).catch(() => console.log(`the second router's log:\n${b.stderr}`));
  b.child.kill('SIGTERM');
  assert.equal((await b.exited).code, 0, b.stderr);
  assertDeliveredEverything(b);
  const received = server.received.slice();
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  assert.deepEqual(
    of(late, 'ENTER').map((x) => x.seq),
    [firstSeq, firstSeq],
    'the late device entered once, under one identity, received twice',
  );
  for (const [id, list] of byDevice(received)) {
    const once = [...new Map(list.map((x) => [x.seq, x])).values()].sort((p, q) => p.seq - q.seq);
    assert.deepEqual(
      once.map((x) => `${x.seq} ${x.type}${x.reason === undefined ? '' : ` ${x.reason}`}`),
      [`${once[0]!.seq} ENTER`, `${once[0]!.seq + 1} EXIT expired`],
      `device ${String(id)}`,
    );
  }
  console.log(
    `${received.length} triggers received; the late device (partition ${partitionOf(late, PARTITIONS)}) entered under seq ` +
      `${firstSeq} from both routers; the freed device was in partition ${partitionOf(expiring, PARTITIONS)}`,
  );
});
