/**
 * Devices that expire while their EXITs cannot be delivered, on a JetStream stream, the router killed meanwhile. A
 * partition checkpoint copied after the expiry sweep marked them and before containment processed their expiry records
 * holds them flagged expiring (whether the expiry happens or a ping revives them is decided after the copy), so it is
 * not stored as the delivered checkpoint, and no later one is while their EXITs wait: the restart reads the partitions
 * again from a delivered checkpoint that holds them with their stays, and they expire again. The receiver gets, for
 * every device, its ENTERs and then an EXIT marked expired per fence, once per (deviceId, seq), in per-device order.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { partitionSubject, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { byDevice, frameOf, square, TriggerServer, waitFor } from '../pipeline/support.js';
import { NatsServer } from '../support/nats-server.js';
import { assertDeliveredEverything, webhookRouterArgs } from './jetstream-runs.js';
import { CliProcess } from './support.js';

const DEVICES = 40;
/** Idle time before expiry: the sweep runs every 500 ms, and with two ingest threads a record waits a sweep. */
const IDLE_MS = 4000;

/** Publishes, per device, a ping outside both fences and then one inside both. */
async function publishEntries(url: string): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const js = jetstream(nc);
    for (const [eastM, dtMs] of [
      [-2000, 0],
      [0, 1000],
    ] as const) {
      const acks: Promise<unknown>[] = [];
      for (let d = 0; d < DEVICES; d++) {
        const id = `x${d}`;
        acks.push(js.publish(partitionSubject('telemetry', id, 16), frameOf({ id, eastM, northM: d, dtMs })));
      }
      await Promise.all(acks);
    }
  } finally {
    await nc.close();
  }
}

test('kill -9 while expired devices wait for their EXITs: no checkpoint copied while their expiry was on its way is the delivered one, the restart restores them with their stays, they expire again, and the receiver gets every EXIT marked expired once per (deviceId, seq)', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const dir = mkdtempSync(join(tmpdir(), 'gr-js-expiry-'));
  const s = { nats, dir, fences: join(dir, 'fences.geojson') };
  writeFileSync(
    s.fences,
    JSON.stringify({ type: 'FeatureCollection', features: [square('outer', 0, 0, 300), square('inner', 0, 0, 120)] }),
  );
  let refusing = true;
  let refused = 0;
  const server = new TriggerServer((batch) => {
    if (refusing && batch.some((x) => x.reason === 'expired')) {
      refused++;
      return 503;
    }
    return 200;
  });
  await server.start();
  t.after(() => server.stop());
  const args = webhookRouterArgs(s, server.url, {}, [
    '--device-idle-timeout-ms',
    String(IDLE_MS),
    '--ingest-threads',
    '2',
  ]).map((a, i, all) => (all[i - 1] === '--checkpoint-interval-ms' ? '100' : a));
  const a = new CliProcess(args, 120_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  await publishEntries(s.nats.url);
  const entersOf = (): number => server.received.filter((x) => x.type === 'ENTER').length;
  await waitFor(() => entersOf() >= 2 * DEVICES, 30_000, 'every ENTER at the receiver');
  // The devices go idle: their EXITs are made and refused; checkpoints every 100 ms go on meanwhile.
  await waitFor(() => refused > 0, 30_000, 'the expiry EXITs offered to the receiver');
  await new Promise((r) => setTimeout(r, 1500));
  a.child.kill('SIGKILL');
  await a.exited;
  refusing = false;
  const b = new CliProcess(args, 120_000);
  t.after(() => b.child.kill('SIGKILL'));
  const expiredExits = (): Trigger[] => server.received.filter((x) => x.type === 'EXIT' && x.reason === 'expired');
  await waitFor(
    () => new Set(expiredExits().map((x) => `${String(x.deviceId)} ${x.fenceId}`)).size === 2 * DEVICES,
    60_000,
    'an EXIT marked expired for every stay',
  ).catch(() => console.log(`the restarted router's log:\n${b.stderr}`));
  b.child.kill('SIGTERM');
  assert.equal((await b.exited).code, 0, b.stderr);
  // The restart's drain: nothing lost, shed, rejected or dead-lettered, and its accounting exact.
  assertDeliveredEverything(b);
  const received = server.received.slice();
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  const devices = byDevice(received);
  assert.equal(devices.size, DEVICES);
  for (const [id, list] of devices) {
    // Once per seq: a trigger received again is the same trigger.
    const once = [...new Map(list.map((x) => [x.seq, x])).values()].sort((p, q) => p.seq - q.seq);
    const said = once.map((x) => `${x.type} ${x.fenceId}${x.reason === undefined ? '' : ` ${x.reason}`}`);
    assert.equal(said.length, 4, `device ${String(id)}: ${said.join(', ')}`);
    assert.deepEqual(said.slice(0, 2).sort(), ['ENTER inner', 'ENTER outer'], `device ${String(id)}`);
    assert.deepEqual(said.slice(2).sort(), ['EXIT inner expired', 'EXIT outer expired'], `device ${String(id)}`);
  }
  // Read again from a delivered checkpoint that holds every device (with its stays): none was left out.
  const restored = /(\d+) devices restored from the stored checkpoints of (\d+) partitions/.exec(b.stderr);
  assert.ok(restored !== null, b.stderr);
  assert.equal(Number(restored[1]), DEVICES, restored[0]);
  console.log(
    `received ${received.length} triggers for ${DEVICES} devices (${expiredExits().length} expiry EXITs); ` +
      `${refused} refused requests before the kill; the restart: ${restored[0]}`,
  );
});
