/**
 * The delivery contract end to end through real threads: 200,000 seeded, CROSS-heavy pings sent over TCP at 50,000
 * pings/s reach a real local webhook, an NDJSON file and an in-process callback, each with the default downstream
 * options: no dead letter, every trigger exactly once, and per device seq 1, 2, 3, ... in arrival order at every
 * receiver, forming valid stays.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { cityTraffic, sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { TriggerServer, waitFor } from './support.js';

const PINGS_PER_DEVICE = 20;
const DEVICES = 10_000;
const RATE = 50_000;

test('200,000 pings over TCP at 50,000/s: webhook, NDJSON and callback with default options each get every trigger once, in per-device order, with no dead letter', async () => {
  const traffic = cityTraffic({
    seed: 11,
    fences: 2000,
    devices: DEVICES,
    pingsPerDevice: PINGS_PER_DEVICE,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  assert.equal(traffic.pings, 200_000);
  const http = new TriggerServer();
  await http.start();
  const dir = mkdtempSync(join(tmpdir(), 'gr-contract-'));
  const ndjsonPath = join(dir, 'triggers.ndjson');
  const called: Trigger[] = [];
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    ringCapacitySlots: 65536,
    stateDir: join(dir, 'state'),
    downstreams: [
      { name: 'hook', kind: 'webhook', url: http.url },
      { name: 'file', kind: 'ndjson', path: ndjsonPath },
      { name: 'app', kind: 'callback', callback: (ts) => void called.push(...ts) },
    ],
    log: () => undefined,
  });
  try {
    const achieved = await sendPaced(router.ingestPort!, traffic, RATE);
    assert.ok(achieved > RATE * 0.8, `sent at ${Math.round(achieved)} pings/s`);
    await waitFor(() => router.stats().accepted === traffic.pings, 60_000, 'every ping read');
    const summary = await router.close();
    assert.equal(summary.shedTotal, 0, 'nothing shed');
    assert.equal(summary.processed, traffic.pings);
    const total = summary.triggersTotal;
    assert.ok(total > 100_000, `plenty of triggers: ${total}`);
    assert.ok(summary.triggers.CROSS > total / 4, `CROSS-heavy: ${summary.triggers.CROSS} of ${total}`);
    assert.equal(summary.deadLettered, 0, 'no dead letter');
    assert.equal(summary.final, 0);
    assert.equal(summary.carriedOver, 0);
    assert.equal(summary.deliveriesOffered, 3 * total);
    assert.equal(summary.delivered, 3 * total, 'every trigger delivered to each of the three');
    console.log(
      `200,000 pings sent at ${Math.round(achieved)}/s: ${total} triggers (${summary.triggers.CROSS} CROSS), delivered ${summary.delivered} ` +
        `(webhook / ndjson / callback spilled ${summary.downstreams.map((d) => d.spilled).join(' / ')}), dead letters ${summary.deadLettered}, held P99 ${summary.heldTimeP99Ms.toFixed(1)} ms`,
    );
    const file = readFileSync(ndjsonPath, 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Trigger);
    for (const [name, received] of [
      ['webhook', http.received],
      ['ndjson', file],
      ['callback', called],
    ] as const) {
      assert.equal(received.length, total, `${name}: one delivery per trigger`);
      const report = checkDeliveryContract(received, { complete: true, stays: true });
      assert.deepEqual(report.problems, [], `${name}: the delivery contract holds`);
      assert.ok(report.devices > DEVICES / 2, `${name}: ${report.devices} devices`);
      assert.ok(received.every((t) => t.replay === false));
    }
  } finally {
    await router.close();
    await http.stop();
  }
});
