/**
 * Flood limits on the TCP listener, with real sockets: one connection registering thousands of new devices a second,
 * and one sending far more pings than its budget, are rejected past their budgets and counted by reason, while a
 * well-behaved sender on another connection (same address, known devices) keeps all of its triggers, in order.
 * Figures before (limits off) and after.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRouter, type RouterOptionsInput } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, sendOverTcp, square, waitFor, type ScriptedPing } from './support.js';

const FENCES = { type: 'FeatureCollection', features: [square('A', 0, 0, 100)] };
const FLOOD_DEVICES = 5000;

/** The attacker: FLOOD_DEVICES distinct ids, one ping each. */
function floodFrames(): Buffer {
  return Buffer.concat(
    Array.from({ length: FLOOD_DEVICES }, (_, i) => frameOf({ id: `fake-${i}`, eastM: 1000, northM: 0, dtMs: i })),
  );
}

/** The honest sender: 20 devices, each in and out of A (a known set of devices, 6 pings each). */
function honestFrames(): Buffer {
  const pings: ScriptedPing[] = [];
  for (let step = 0; step < 6; step++) {
    for (let d = 0; d < 20; d++)
      pings.push({ id: `truck-${d}`, eastM: step % 3 === 2 ? 500 : 0, northM: 0, dtMs: step * 1000 });
  }
  return Buffer.concat(pings.map(frameOf));
}

async function run(
  ingest: NonNullable<RouterOptionsInput['ingest']>,
  honestKept = true,
): Promise<{ rejected: Record<string, number>; devices: number; honest: Trigger[] }> {
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: FENCES,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    poolSize: 1,
    maxDevices: 10_000,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-flood-')),
    ingest,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
  });
  try {
    await Promise.all([
      sendOverTcp(router.ingestPort!, floodFrames(), 65536),
      sendOverTcp(router.ingestPort!, honestFrames(), 512),
    ]);
    await waitFor(() => router.stats().frames >= FLOOD_DEVICES + 120, 10_000, 'every frame read');
    if (honestKept)
      await waitFor(
        () => got.filter((t) => String(t.deviceId).startsWith('truck-')).length >= 80,
        10_000,
        'the honest triggers',
      );
    else await router.drain();
    const s = router.stats();
    return {
      rejected: s.rejected,
      devices: s.devices,
      honest: got.filter((t) => String(t.deviceId).startsWith('truck-')),
    };
  } finally {
    await router.close();
  }
}

test('a new-device flood from one connection is capped per connection; the honest connection keeps flowing', async () => {
  const before = await run({});
  assert.equal(before.devices, FLOOD_DEVICES + 20, 'without limits every fake device takes a slot');
  const after = await run({ maxNewDevicesPerSecPerConnection: 200 });
  const denied = after.rejected.new_device_rate ?? 0;
  assert.ok(denied >= FLOOD_DEVICES - 1000, `new_device_rate rejects: ${denied}`);
  assert.ok(after.devices <= 1000 + 20, `slots taken by the flood: ${after.devices - 20}`);
  for (const r of [before, after]) {
    assert.equal(r.honest.length, 80, 'every honest trigger: 20 devices x (ENTER, EXIT) x 2');
    assert.deepEqual(checkDeliveryContract(r.honest, { complete: true, stays: true }).problems, []);
  }
  console.log(
    `# new-device flood of ${FLOOD_DEVICES} ids from one connection: ${before.devices - 20} slots taken with no limit, ${after.devices - 20} with 200/s per connection (${denied} rejected as new_device_rate); the honest connection got all 80 triggers both times`,
  );
});

test('a ping flood over its connection budget is rejected as connection_rate; other connections are not charged', async () => {
  const after = await run({ maxPingsPerSecPerConnection: 500 });
  const denied = after.rejected.connection_rate ?? 0;
  assert.ok(denied >= FLOOD_DEVICES - 2000, `connection_rate rejects: ${denied}`);
  assert.equal(after.honest.length, 80, 'the honest connection (120 pings) stays within its own budget');
  assert.deepEqual(checkDeliveryContract(after.honest, { complete: true, stays: true }).problems, []);
});

test('the address budget is shared by every connection from one address', async () => {
  // Both connections come from 127.0.0.1: the flood spends the address budget the honest sender also draws on, so
  // some of its pings are refused too (which is what an address cap is for); what it does deliver keeps its order.
  const after = await run({ maxPingsPerSecPerAddress: 1000 }, false);
  const denied = after.rejected.connection_rate ?? 0;
  assert.ok(denied >= FLOOD_DEVICES - 2500, `connection_rate rejects: ${denied}`);
  assert.ok(
    denied <= FLOOD_DEVICES + 120 - 1000,
    `at least the address budget's burst was admitted: ${denied} rejected`,
  );
  assert.deepEqual(checkDeliveryContract(after.honest, {}).problems, []);
});
