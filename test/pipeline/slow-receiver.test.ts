/**
 * A receiver that can take only a third of the trigger rate for 30 s, then keeps up: devices with a backlog wait in
 * order (memory, then the backlog log) while devices without one keep flowing; once the receiver is fast again the
 * backlog drains and every trigger arrives once, in per-device order, with no dead letter.
 *
 * Traffic, live (event time = wall time): 1,000 "heavy" devices at 1 Hz driving 150 m a ping along rows of a grid of
 * small fences (about three triggers a ping), and 1,000 "light" devices at 1 Hz, each stepping in or out of its own
 * fence every 10 s (one trigger per 10 s). The receiver serves one request at a time at a fixed cost per trigger.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import { createRouter } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, square, TriggerServer } from './support.js';

const HEAVY = 1000;
const LIGHT = 1000;
const ROWS = 25;
const COLUMNS = 40;
const PITCH_M = 50;
const SLOW_MS = 30_000;
const AFTER_MS = 4_000;

/** A webhook that serves one request at a time, `costMs` per trigger. */
class MeteredReceiver extends TriggerServer {
  costMs = 0;
  private busyUntil = 0;

  constructor() {
    super((batch) => {
      // One worker: this request starts when the previous one is done.
      const start = Math.max(Date.now(), this.busyUntil);
      this.busyUntil = start + batch.length * this.costMs;
      return new Promise((resolve) => setTimeout(() => resolve(200), this.busyUntil - Date.now()));
    });
  }
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
}

test('a receiver at a third of the trigger rate for 30 s, then fast: devices without a backlog keep flowing; afterwards every trigger once, in per-device order, no dead letter', async () => {
  const features: unknown[] = [];
  for (let r = 0; r < ROWS; r++)
    for (let c = 0; c < COLUMNS; c++) features.push(square(`g${r}-${c}`, c * PITCH_M, r * PITCH_M, 15));
  // Each light device's own fence, 5 km north of the grid.
  for (let i = 0; i < LIGHT; i++)
    features.push(square(`home${i}`, (i % 40) * 200, 5000 + Math.floor(i / 40) * 200, 20));
  const receiver = new MeteredReceiver();
  await receiver.start();
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features },
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-slow-')),
    downstreams: [{ name: 'hook', kind: 'webhook', url: receiver.url }],
    log: () => undefined,
  });
  const socket: Socket = connect({ host: '127.0.0.1', port: router.ingestPort! });
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  const t0 = Date.now();
  const stepOf = (ms: number): number => Math.floor(ms / 1000);
  let sentSteps = 0;
  let pings = 0;
  /** Wall time each second's pings were written, by step. */
  const sentAtMs: number[] = [];
  /** Sends the pings of second `k`: every device once. */
  const sendStep = (k: number): void => {
    const ts = t0 + k * 1000;
    const frames: Buffer[] = [];
    for (let i = 0; i < HEAVY; i++) {
      // 150 m a ping along row i % ROWS, back and forth over the grid's width.
      const span = COLUMNS * PITCH_M;
      const x = (i * 37 + k * 150) % (2 * span);
      const [lat, lon] = at(x < span ? x : 2 * span - x, (i % ROWS) * PITCH_M + 5);
      frames.push(pack({ id: `heavy-${i}`, lat, lon, ts, speed: 150 }));
    }
    for (let i = 0; i < LIGHT; i++) {
      // Inside its fence for 10 s, outside for 10 s (phases spread over the devices).
      const inside = Math.floor((k + (i % 10)) / 10) % 2 === 0;
      const [lat, lon] = at((i % 40) * 200 + (inside ? 0 : 80), 5000 + Math.floor(i / 40) * 200);
      frames.push(pack({ id: `light-${i}`, lat, lon, ts, speed: 1.2 }));
    }
    sentAtMs[k] = Date.now();
    socket.write(Buffer.concat(frames));
    pings += HEAVY + LIGHT;
  };
  // Slow phase: the receiver takes a third of what the heavy devices produce (about 3,000 triggers/s).
  receiver.costMs = 1;
  const total = SLOW_MS + AFTER_MS;
  while (Date.now() - t0 < total) {
    const now = Date.now() - t0;
    while (sentSteps <= stepOf(now)) sendStep(sentSteps++);
    if (now >= SLOW_MS && receiver.costMs !== 0) receiver.costMs = 0;
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise<void>((resolve) => socket.end(resolve));
  const deadline = Date.now() + 120_000;
  while (router.stats().accepted < pings || router.stats().delivered < router.stats().triggersTotal) {
    if (Date.now() > deadline) assert.fail(`backlog not drained: ${JSON.stringify(router.stats().downstreams[0])}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const summary = await router.close();
  await receiver.stop();

  assert.equal(summary.shedTotal, 0, 'nothing shed');
  assert.equal(summary.deadLettered, 0, 'no dead letter');
  assert.equal(summary.delivered, summary.triggersTotal, 'every trigger delivered');
  const hook = summary.downstreams[0]!;
  assert.ok(hook.spilled > 0, `the backlog outgrew memory and waited in the backlog log: ${hook.spilled} spilled`);
  const report = checkDeliveryContract(receiver.received, { complete: true, stays: true });
  assert.deepEqual(report.problems, [], 'every trigger once, in per-device order, valid stays');
  assert.equal(receiver.received.length, summary.triggersTotal);

  // During the slow phase, once every device has been seen (a device's first trigger counts as one without a
  // backlog): a light trigger "overtakes" a heavy trigger from an earlier second that the receiver got after it.
  // Delivery in arrival order across devices would let a light trigger overtake nothing; per-device queues let it
  // pass the whole heavy backlog. Waits (receipt minus the wall time its ping was written) are printed, not
  // asserted: they depend on how busy the machine is.
  const stepOfTrigger = (eventTimeMs: number): number => Math.round((eventTimeMs - t0) / 1000);
  const firstStep = 10;
  const lastStep = Math.floor((SLOW_MS - 5000) / 1000);
  const heavyLaterByStep = new Array<number>(sentSteps + 1).fill(0);
  const overtaken: number[] = [];
  const lightWait: number[] = [];
  const heavyWait: number[] = [];
  for (let k = receiver.received.length - 1; k >= 0; k--) {
    const t = receiver.received[k]!;
    const step = stepOfTrigger(t.eventTimeMs);
    const heavyDevice = !String(t.deviceId).startsWith('light-');
    if (heavyDevice) heavyLaterByStep[step]!++;
    if (step < firstStep || step > lastStep) continue;
    const wait = receiver.receivedAtMs[k]! - sentAtMs[step]!;
    if (heavyDevice) {
      heavyWait.push(wait);
      continue;
    }
    lightWait.push(wait);
    let passed = 0;
    for (let s = 0; s < step; s++) passed += heavyLaterByStep[s]!;
    overtaken.push(passed);
  }
  const flowing = overtaken.filter((n) => n >= 100).length;
  // And none waited like a backlog: a light trigger that a younger heavy trigger (from a later second) overtook was
  // treated as one (it waited its turn behind the heavy devices' backlogs, which are seconds deep).
  let newestHeavyStep = -1;
  let treatedAsBacklog = 0;
  receiver.received.forEach((t) => {
    const step = stepOfTrigger(t.eventTimeMs);
    if (!String(t.deviceId).startsWith('light-')) newestHeavyStep = Math.max(newestHeavyStep, step);
    else if (step >= firstStep && step <= lastStep && newestHeavyStep > step) treatedAsBacklog++;
  });
  console.log(
    `slow receiver: ${lightWait.length} light triggers in the slow phase, ${flowing} of them passed 100 or more older heavy triggers ` +
      `(median ${quantile(overtaken, 0.5)} passed); wait P50/P99 light ${quantile(lightWait, 0.5)}/${quantile(lightWait, 0.99)} ms, ` +
      `heavy ${quantile(heavyWait, 0.5)}/${quantile(heavyWait, 0.99)} ms; spilled ${hook.spilled}; ${treatedAsBacklog} light triggers overtaken by younger heavy ones`,
  );
  assert.ok(lightWait.length > 1000, `light devices triggered during the slow phase: ${lightWait.length}`);
  assert.ok(
    flowing >= 0.9 * overtaken.length,
    `devices without a backlog passed the heavy backlog: ${flowing} of ${overtaken.length} light triggers passed 100 or more older heavy triggers`,
  );
  assert.ok(
    treatedAsBacklog <= 0.01 * overtaken.length,
    `devices without a backlog did not wait behind it: ${treatedAsBacklog} of ${overtaken.length} light triggers were overtaken by younger heavy triggers`,
  );
});
