/**
 * One device whose first trigger the receiver refuses, through the router's real threads and a real webhook: the
 * device is parked at that trigger, its many later triggers wait in the backlog log (set aside, not in the memory every
 * device shares, which holds 256 here), and every other device's triggers arrive meanwhile, all of them, each once and
 * in order. Once the receiver takes the refused trigger, the parked device's follow: every trigger of every device
 * once, seq 1, 2, 3, ... per device, in arrival order.
 *
 * Traffic: 300 devices, each with a fence of its own, stepping in and out of it at every ping (a trigger a ping), 40
 * pings each; device "chatty" steps in and out of its own 40 times a round (1,600 triggers), fed through the
 * in-process input (back-pressured, nothing shed).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import { createRouter } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, square, T0, TriggerServer, waitFor } from './support.js';

const DEVICES = 300;
const ROUNDS = 40;
const CHATTY_PER_ROUND = 40;
const CHATTY = 'chatty';

/** Where device `i`'s fence lies (i = DEVICES: the chatty device's), metres east and north of the origin. */
function homeOf(i: number): [number, number] {
  return [(i % 20) * 200, Math.floor(i / 20) * 200];
}

/** A ping of device `id` (fence `i`) at ms `dtMs`, inside its fence when `inside`, else 60 m east of it. */
function pingOf(id: string, i: number, dtMs: number, inside: boolean): Uint8Array {
  const [east, north] = homeOf(i);
  const [lat, lon] = at(east + (inside ? 0 : 60), north);
  return pack({ id, lat, lon, ts: T0 + dtMs });
}

/** Value of the metric line `name{downstream="hook"...}` in the exposition `text` (NaN when absent). */
function metricOf(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes('downstream="hook"'));
  return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
}

test("a device whose first trigger the receiver refuses, through real threads: its later triggers wait set aside in the backlog log, every other device's arrive meanwhile, and once it is taken every trigger of every device arrives once, in order", async () => {
  let refusing = true;
  const http = new TriggerServer((batch) =>
    refusing && batch.some((t) => t.deviceId === CHATTY && t.seq === 1) ? 500 : 200,
  );
  await http.start();
  const features = Array.from({ length: DEVICES + 1 }, (_, i) => square(`home${i}`, ...homeOf(i), 20));
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features },
    stateDir: null,
    downstreams: [
      {
        name: 'hook',
        kind: 'webhook',
        url: http.url,
        queueCapacitySlots: 256,
        maxAttempts: 2,
        replayGiveUpMs: 0,
      },
    ],
    log: () => undefined,
  });
  const chattyTriggers = ROUNDS * CHATTY_PER_ROUND;
  const others = DEVICES * ROUNDS;
  let closed = false;
  const received = (chatty: boolean): number => http.received.filter((t) => (t.deviceId === CHATTY) === chatty).length;
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < CHATTY_PER_ROUND; k++) {
        const n = r * CHATTY_PER_ROUND + k;
        if (!router.ingest(pingOf(CHATTY, DEVICES, n * 25, n % 2 === 0))) await router.inputDrained();
      }
      for (let i = 0; i < DEVICES; i++)
        if (!router.ingest(pingOf(`d${i}`, i, r * 1000, r % 2 === 0))) await router.inputDrained();
    }
    await waitFor(() => received(false) === others, 60_000, "every other device's triggers");
    // The receiver records a batch before it answers: the router counts it delivered a moment later.
    let text = await router.metricsText();
    for (let i = 0; i < 200 && metricOf(text, 'geofence_dispatch_pending_triggers') !== chattyTriggers; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      text = await router.metricsText();
    }
    const setAside = metricOf(text, 'geofence_dispatch_set_aside_triggers');
    const backlog = metricOf(text, 'geofence_dispatch_backlog_records');
    assert.equal(received(true), 0, 'nothing of the chatty device overtakes its refused trigger');
    assert.ok(setAside > 0, `the chatty device's triggers set aside in the backlog log: ${setAside}`);
    assert.ok(backlog >= setAside, `backlog records ${backlog}`);
    // Those queued in memory before it was parked, and a few behind it, stay in memory: under half of it, so the
    // log's loading goes on for every other device.
    const inMemory = metricOf(text, 'geofence_dispatch_queue_depth');
    assert.ok(inMemory <= 128, `${inMemory} of its ${chattyTriggers} triggers in the 256 slots of memory`);
    assert.equal(metricOf(text, 'geofence_dispatch_pending_triggers'), chattyTriggers, 'all of its triggers pending');
    refusing = false;
    await waitFor(() => received(true) === chattyTriggers, 60_000, "the chatty device's triggers");
    const summary = await router.close();
    closed = true;
    assert.equal(summary.triggersTotal, others + chattyTriggers);
    const hook = summary.downstreams[0]!;
    assert.equal(hook.deadLettered, 1, 'the refused trigger, parked as a dead letter');
    assert.equal(hook.replayed, 1, 'and delivered by its replay');
    assert.equal(hook.delivered + hook.replayed, others + chattyTriggers, 'every trigger delivered');
    assert.equal(summary.final, 0, 'nothing given up');
    assert.equal(summary.carriedOver, 0);
    const report = checkDeliveryContract(http.received, { complete: true, stays: true });
    assert.deepEqual(report.problems, [], 'seq 1, 2, 3, ... per device, once each, in arrival order');
    assert.equal(report.devices, DEVICES + 1);
  } finally {
    if (!closed) await router.close().catch(() => undefined);
    await http.stop();
  }
});
