/**
 * A trigger the downstream can never take, through a real dispatcher and a real HTTP receiver that answers 500 to
 * any request holding it (a payload it cannot handle, reported as a server error): on its last attempt the trigger
 * goes in a request of its own, so it alone runs out of attempts (a failure alone holds its device back, not the
 * downstream). The other devices' triggers that shared requests with it are delivered, each once and in order, none parked or dead-lettered behind it; with the replay lane the
 * trigger is parked alone (its device waits), without it it is dead-lettered alone (its device goes on). With one
 * attempt, the triggers that failed beside it are parked too; their replay goes alone once a shared one has failed,
 * so they are delivered and the poison alone stays parked.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DeadLetterReason, Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import { assertPerDeviceOrder, CapacityServer, sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 300;
const PER_DEVICE = 10;
/** The trigger no request may hold: device 0's fourth. */
const POISON_DEVICE = 'device-0';
const POISON_SEQ = 4;

/** Offers PER_DEVICE triggers to each of DEVICES devices, a round at a time, and waits until nothing is in flight. */
async function run(
  replay: boolean,
  maxAttempts?: number,
  replayGiveUpMs?: number,
  poisonStatus?: number,
): Promise<{ d: Dispatcher; server: CapacityServer }> {
  const server = new CapacityServer({
    workers: 8,
    serviceMs: 1,
    poison: (t) => t.deviceId === POISON_DEVICE && t.seq === POISON_SEQ,
    ...(poisonStatus === undefined ? {} : { poisonStatus }),
  });
  await server.start();
  const d = new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'poison-')),
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    flushIntervalMs: 5,
    // The product's defaults otherwise: 3 attempts, the breaker on, batches of up to 128.
    downstreams: [
      {
        name: 'hook',
        sink: new WebhookSink({ url: server.url, timeoutMs: 5000 }),
        replay,
        ...(maxAttempts === undefined ? {} : { maxAttempts }),
        ...(replayGiveUpMs === undefined ? {} : { replayGiveUpMs }),
      },
    ],
  });
  const r = new TriggerRecord();
  for (let seq = 1; seq <= PER_DEVICE; seq++) {
    for (let device = 0; device < DEVICES; device++)
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 16, device).f64, r.i32, 0, 0);
    d.pump();
    await sleep(2);
  }
  const ds = d.downstreams[0]!;
  const waiting = replay ? PER_DEVICE - POISON_SEQ + 1 : 0;
  const end = Date.now() + 20_000;
  while (ds.inFlightTriggers > waiting && Date.now() < end) {
    d.pump();
    await sleep(2);
  }
  // A little longer: the replay lane sends the parked trigger again, alone, and it fails again.
  for (let k = 0; k < 100; k++) {
    d.pump();
    await sleep(2);
  }
  return { d, server };
}

/** The triggers of devices other than the poison's device, as the receiver got them. */
function othersReceived(server: CapacityServer): { deviceId: string | number; seq: number }[] {
  return server.received.filter((t) => t.deviceId !== POISON_DEVICE);
}

test('replay lane on: a trigger the receiver always fails is parked alone; every other device gets each of its triggers once, in order', async (t) => {
  const { d, server } = await run(true);
  t.after(async () => {
    await d.close(100);
    await server.kill();
  });
  const ds = d.downstreams[0]!;
  assert.ok(server.stats.poisoned > 1, `requests holding the poison failed: ${server.stats.poisoned}`);
  assert.equal(ds.parked, 1, 'one trigger parked: the poison');
  assert.equal(ds.deadLetteredByReason[DeadLetterReason.UNDELIVERABLE], 1, 'one dead letter, undeliverable');
  const others = othersReceived(server);
  assert.equal(others.length, (DEVICES - 1) * PER_DEVICE, 'every other trigger arrived');
  assertPerDeviceOrder(others, 'other devices', true);
  const own = server.received.filter((r) => r.deviceId === POISON_DEVICE).map((r) => r.seq);
  assert.deepEqual(own, [1, 2, 3], "the poison's device: its triggers before it, then it waits behind it");
  assert.equal(ds.inFlightTriggers, PER_DEVICE - POISON_SEQ + 1, 'the poison and the triggers behind it wait');
  // Its failures alone hold its device back, not the downstream: the breaker never opened.
  assert.ok(ds.deviceHolds > 0, `its device was held back: ${ds.deviceHolds}`);
  assert.equal(ds.breaker.opens, 0, 'the breaker never opened');
  console.log(
    `poison, replay on: ${server.stats.poisoned} requests failed for it, ${server.stats.requests} in all; ${others.length} other triggers delivered; parked ${ds.parked}`,
  );
});

test('replay lane off: a trigger the receiver always fails is dead-lettered alone and its device goes on; nothing else is dead-lettered', async (t) => {
  const { d, server } = await run(false);
  t.after(async () => {
    await d.close(100);
    await server.kill();
  });
  const ds = d.downstreams[0]!;
  assert.equal(ds.inFlightTriggers, 0, 'everything settled');
  assert.equal(ds.deadLettered, 1, 'one dead letter');
  assert.equal(ds.deadLetteredByReason[DeadLetterReason.UNDELIVERABLE], 1, 'the poison, undeliverable');
  assert.equal(ds.delivered, DEVICES * PER_DEVICE - 1, 'everything else delivered');
  const others = othersReceived(server);
  assert.equal(others.length, (DEVICES - 1) * PER_DEVICE, 'every other trigger arrived');
  assertPerDeviceOrder(others, 'other devices', true);
  const own = server.received.filter((r) => r.deviceId === POISON_DEVICE).map((r) => r.seq);
  assert.deepEqual(
    own,
    Array.from({ length: PER_DEVICE }, (_, k) => k + 1).filter((seq) => seq !== POISON_SEQ),
    "the poison's device went on without it, in order",
  );
});

test('one attempt: the triggers parked beside the poison are replayed alone after a shared replay failed, and delivered; the poison alone stays parked', async (t) => {
  const { d, server } = await run(true, 1);
  t.after(async () => {
    await d.close(100);
    await server.kill();
  });
  const ds = d.downstreams[0]!;
  const others = othersReceived(server);
  assert.ok(ds.replayed > 0, `triggers parked beside the poison were replayed: ${ds.replayed}`);
  assert.equal(others.length, (DEVICES - 1) * PER_DEVICE, 'every other trigger arrived');
  assertPerDeviceOrder(others, 'other devices', true);
  assert.equal(ds.parked, 1, 'the poison alone stays parked');
  assert.equal(ds.inFlightTriggers, PER_DEVICE - POISON_SEQ + 1, 'the poison and the triggers behind it wait');
  console.log(
    `poison, one attempt: ${ds.replayed} replayed; ${others.length} other triggers delivered; parked ${ds.parked}`,
  );
});

test('replayGiveUpMs: a parked trigger that keeps failing alone is given up once it has been parked that long; its device then goes on, in order, and nothing else is dead-lettered', async (t) => {
  const GIVE_UP_MS = 300;
  const { d, server } = await run(true, undefined, GIVE_UP_MS);
  t.after(async () => {
    await d.close(100);
    await server.kill();
  });
  const ds = d.downstreams[0]!;
  for (const end = Date.now() + 15_000; ds.inFlightTriggers > 0 && Date.now() < end;) {
    d.pump();
    await sleep(2);
  }
  assert.equal(ds.inFlightTriggers, 0, 'everything settled');
  assert.equal(ds.replayGivenUp, 1, 'the poison was given up');
  assert.equal(ds.replayRejected, 1, 'counted as refused for good by the replay lane');
  assert.equal(ds.parked, 0);
  assert.equal(ds.final, 1, 'the poison alone settled without delivery');
  assert.equal(ds.deadLettered, 1, 'one dead letter (counted once, when it was parked)');
  assert.equal(ds.delivered + ds.replayed, DEVICES * PER_DEVICE - 1, 'everything else delivered');
  assert.equal(ds.offered, ds.delivered + ds.replayed + ds.final, 'accounting');
  assert.ok(server.stats.poisoned > 3, `it failed alone again and again first: ${server.stats.poisoned}`);
  const own = server.received.filter((r) => r.deviceId === POISON_DEVICE).map((r) => r.seq);
  assert.deepEqual(
    own,
    Array.from({ length: PER_DEVICE }, (_, k) => k + 1).filter((seq) => seq !== POISON_SEQ),
    "the poison's device went on without it, in order",
  );
  assertPerDeviceOrder(othersReceived(server), 'other devices', true);
  assert.equal(ds.breaker.opens, 0, 'the breaker never opened');
});

test('replayGiveUpMs counts only answers that ask for no "later": a trigger answered 503 alone again and again stays parked, its device waiting', async (t) => {
  const { d, server } = await run(true, undefined, 100, 503);
  t.after(async () => {
    await d.close(100);
    await server.kill();
  });
  const ds = d.downstreams[0]!;
  // Well past the give-up time, with the replay lane sending it alone again and again.
  const before = server.stats.poisoned;
  for (const end = Date.now() + 1500; Date.now() < end;) {
    d.pump();
    await sleep(2);
  }
  assert.ok(server.stats.poisoned > before, `it was sent again meanwhile: ${server.stats.poisoned - before} times`);
  assert.equal(ds.replayGivenUp, 0, 'not given up');
  assert.equal(ds.parked, 1, 'still parked');
  const own = server.received.filter((r) => r.deviceId === POISON_DEVICE).map((r) => r.seq);
  assert.deepEqual(own, [1, 2, 3], 'its device waits behind it');
  assertPerDeviceOrder(othersReceived(server), 'other devices', true);
});
