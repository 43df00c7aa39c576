/**
 * A failed batch the downstream answered in part (it took some triggers, or refused some for good, and failed the
 * rest: a broker refusing one message for the moment) holds back only the devices left to send again; the downstream
 * goes on at once with the others, and the breaker does not count the failure. A batch answered with nothing still
 * backs the whole downstream off.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DREC_REASON_I32, DREC_STRIDE_F64, DREC_STRIDE_I32, Lane, TRG_SEQ_F64 } from '../../src/shm/layout.js';
import { BreakerState } from '../../src/dispatch/breaker.js';
import { DeviceQueues } from '../../src/dispatch/device-queues.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { FixedLimit } from '../../src/dispatch/limits/index.js';
import { copyTrigger } from '../../src/dispatch/record.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { TriggerRecord } from './fixtures.js';

const MS = 1e6;

/** Queues trigger `seq` of `device` in `q`. */
function queue(q: DeviceQueues, device: number, seq: number): void {
  const r = new TriggerRecord().set(seq, 0, Lane.TRANSITION, 0, device);
  const slot = q.allocate(Lane.TRANSITION);
  copyTrigger(r.f64, r.i32, 0, 0, q.f64, q.i32, slot * DREC_STRIDE_F64, slot * DREC_STRIDE_I32);
  q.i32[slot * DREC_STRIDE_I32 + DREC_REASON_I32] = -1;
  q.append(device, slot);
}

test('device queues: a held device is busy and off the ready lists for its hold, keeps what arrives meanwhile, and goes back in its place', () => {
  const now = new Float64Array([1e12]);
  const q = new DeviceQueues(8, 0, 16, now);
  queue(q, 1, 1);
  queue(q, 2, 2);
  assert.equal(q.nextReady(), 1);
  q.setBusy(1, true);
  // Refused for the moment: held 10 ms.
  assert.equal(q.holdBack(1), true);
  assert.equal(q.isBusy(1), true);
  assert.equal(q.isHeld(1), true);
  assert.equal(q.heldDevicesCount, 1);
  queue(q, 1, 3);
  assert.equal(q.listOfDevice(1), -1, 'a trigger arriving while held does not list it');
  now[0] = 1e12 + 9.9 * MS;
  assert.equal(q.releaseHeld(), 0, 'not before its time');
  assert.equal(q.nextReady(), 2, 'the other device goes on');
  q.setBusy(2, true);
  assert.equal(q.nextReady(), -1);
  now[0] = 1e12 + 10 * MS;
  assert.equal(q.releaseHeld(), 1);
  assert.equal(q.isBusy(1), false);
  assert.equal(q.heldDevicesCount, 0);
  assert.equal(q.nextReady(), 1);
  assert.equal(q.f64[q.headOf(1) * DREC_STRIDE_F64 + TRG_SEQ_F64], 1, 'its first trigger is still first');
});

test('device queues: holds in a row double (10, 20, 40 ms ... at most 1 s) until the streak ends; each device ends at its own time', () => {
  const now = new Float64Array([0]);
  const q = new DeviceQueues(8, 0, 16, now);
  queue(q, 3, 1);
  /** Holds device 3 at the present time; the ms it stays held. */
  const heldMs = (): number => {
    q.setBusy(3, true);
    const from = now[0]!;
    q.holdBack(3);
    while (q.releaseHeld() === 0) now[0] = now[0]! + 0.5 * MS;
    return (now[0]! - from) / MS;
  };
  assert.deepEqual([heldMs(), heldMs(), heldMs()], [10, 20, 40]);
  for (let k = 0; k < 10; k++) heldMs();
  assert.equal(heldMs(), 1000, 'at most 1 s');
  q.endHoldStreak(3);
  assert.equal(heldMs(), 10, 'the first hold again');
  // Two devices held at once go back each at its own time.
  queue(q, 4, 2);
  q.setBusy(4, true);
  q.holdBack(4);
  q.endHoldStreak(3);
  q.setBusy(3, true);
  q.holdBack(3);
  q.setBusy(4, false); // something else released 4: its hold ends without touching it again
  assert.equal(q.isBusy(4), false);
  q.setBusy(4, true);
  now[0] = now[0]! + 10 * MS;
  assert.equal(q.releaseHeld(), 2);
  assert.equal(q.isBusy(4), true, 'a device no longer held is left as it is');
  assert.equal(q.isBusy(3), false);
});

/**
 * A dispatcher on a clock of the test's own (`clock.ns`) with one downstream (four batches in flight, up to 16
 * triggers each, `maxAttempts` attempts, a breaker that opens on the first counted failure) whose sink answers each
 * batch with `answer(sent, call)` (`sent`: "device/seq" per trigger; `call`: 1 for the first); the calls it made.
 */
function downstreamAnswering(
  clock: { ns: number },
  answer: (sent: string[], call: number) => SinkResult,
  maxAttempts = 3,
): { d: Dispatcher; calls: string[][] } {
  const calls: string[][] = [];
  const d = new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'holds-')),
    namer: new IndexNamer(),
    maxDevices: 64,
    clock: () => clock.ns,
    downstreams: [
      {
        name: 'held',
        sink: {
          deliver: async (batch: TriggerBatch) => {
            const sent = Array.from({ length: batch.count }, (_, i) => `${batch.deviceSlot(i)}/${batch.seq(i)}`);
            calls.push(sent);
            return answer(sent, calls.length);
          },
          close: async () => undefined,
        },
        limit: new FixedLimit(4),
        safetyCap: 4,
        maxBatchTriggers: 16,
        maxAttempts,
        breaker: { minimumRequests: 1, failureRateThreshold: 0.5 },
      },
    ],
  });
  return { d, calls };
}

/** downstreamAnswering, the first batch answered with `firstAnswer(sent)` and every later one with 200. */
function oneDownstream(
  clock: { ns: number },
  firstAnswer: (sent: string[]) => SinkResult,
  maxAttempts = 3,
): { d: Dispatcher; calls: string[][] } {
  return downstreamAnswering(clock, (sent, call) => (call === 1 ? firstAnswer(sent) : { status: 200 }), maxAttempts);
}

/** Offers trigger `seq` of `device`. */
function offer(d: Dispatcher, device: number, seq: number): void {
  const r = new TriggerRecord().set(seq, 0, Lane.TRANSITION, 0, device);
  d.offer(r.f64, r.i32, 0, 0);
}

/** Pumps `d` a few turns at the clock's present time, letting the sink's answers come in. */
async function settle(d: Dispatcher): Promise<void> {
  for (let k = 0; k < 5; k++) {
    d.pump();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test('downstream: a batch answered in part holds back only the device refused for the moment; the others go on at once, neither breaker nor attempts count it, and the held one goes again after 10 ms, in order', async () => {
  const clock = { ns: 1e12 };
  // Device 2's first trigger is refused for the moment; its later two were never published; device 1's were taken.
  // One attempt only: a refusal for the moment must not use it up.
  const { d, calls } = oneDownstream(
    clock,
    (sent) => ({
      status: 0,
      error: 'network',
      delivered: [sent.indexOf('1/1'), sent.indexOf('1/2')],
      again: [sent.indexOf('2/4')],
      unsent: [sent.indexOf('2/5'), sent.indexOf('2/6')],
    }),
    1,
  );
  for (const [device, seq] of [
    [1, 1],
    [1, 2],
    [2, 4],
    [2, 5],
    [2, 6],
  ] as const)
    offer(d, device, seq);
  await settle(d);
  assert.equal(calls.length, 1);
  const ds = d.downstreams[0]!;
  assert.equal(ds.deviceHolds, 1);
  assert.equal(ds.backoffs, 0);
  assert.equal(ds.breaker.state, BreakerState.CLOSED, 'a live broker is not judged down');
  assert.equal(ds.queues.isHeld(2), true);
  // Device 1 goes on at once; device 2 waits.
  offer(d, 1, 3);
  offer(d, 2, 7);
  await settle(d);
  assert.deepEqual(calls[1], ['1/3'], 'device 1 at once, without device 2');
  assert.equal(calls.length, 2);
  clock.ns += 10 * MS;
  await settle(d);
  assert.deepEqual(calls[2], ['2/4', '2/5', '2/6', '2/7'], "device 2's four after its 10 ms, in order");
  const t = d.totals();
  assert.equal(t.delivered, 7);
  assert.equal(t.deadLettered, 0);
  assert.equal(ds.queues.heldDevicesCount, 0);
  await d.close(1000);
});

test('downstream: a trigger refused for the moment time after time uses no attempt for its first seven holds, then one each, and ends in the replay lane; the other device never waits', async () => {
  const clock = { ns: 1e12 };
  // Device 2's trigger is refused for the moment every time (until take2); device 1's are taken.
  let take2 = false;
  const { d, calls } = downstreamAnswering(
    clock,
    (sent) => {
      const of2 = sent.flatMap((x, i) => (x.startsWith('2/') ? [i] : []));
      if (of2.length === 0 || take2) return { status: 200 };
      const of1 = sent.flatMap((x, i) => (x.startsWith('1/') ? [i] : []));
      return { status: 0, error: 'network', delivered: of1, again: [of2[0]!], unsent: of2.slice(1) };
    },
    2,
  );
  offer(d, 2, 100);
  const ds = d.downstreams[0]!;
  // Each round device 1 has a trigger when device 2's hold (at most 1 s) has ended: they go in one batch.
  for (let round = 1; round <= 10; round++) {
    offer(d, 1, round);
    await settle(d);
    assert.equal(d.totals().deadLettered, round < 9 ? 0 : 1, `round ${round}: seven free refusals, then two attempts`);
    clock.ns += 1000 * MS;
  }
  assert.equal(ds.deviceHolds, 10);
  assert.equal(ds.deadLetteredByReason[2], 1, 'dead-lettered undeliverable, waiting in the replay lane');
  assert.equal(ds.parked, 1);
  assert.equal(ds.breaker.state, BreakerState.CLOSED);
  assert.equal(ds.backoffs, 0);
  // Taken at last: the replay lane delivers it.
  take2 = true;
  clock.ns += 1000 * MS;
  await settle(d);
  assert.equal(ds.replayed, 1);
  const ones = calls.flat().filter((x) => x.startsWith('1/'));
  assert.deepEqual(
    ones,
    Array.from({ length: 10 }, (_, i) => `1/${i + 1}`),
    'device 1: each once, in order',
  );
  await d.close(1000);
});

for (const [what, answer] of [
  ['answered with nothing', (): SinkResult => ({ status: 0, error: 'network' })],
  [
    'timed out after one message was taken',
    (sent: string[]): SinkResult => ({ status: 0, error: 'timeout', delivered: [sent.indexOf('1/1')] }),
  ],
  [
    'refused for the moment whole (nothing taken)',
    (sent: string[]): SinkResult => ({ status: 503, again: sent.map((_, i) => i) }),
  ],
] as const) {
  test(`downstream: a batch ${what} backs the whole downstream off and counts for the breaker; every trigger delivered once`, async () => {
    const clock = { ns: 1e12 };
    const { d, calls } = oneDownstream(clock, answer);
    offer(d, 1, 1);
    offer(d, 2, 4);
    await settle(d);
    const ds = d.downstreams[0]!;
    assert.equal(ds.backoffs, 1);
    assert.equal(ds.deviceHolds, 0);
    assert.equal(ds.breaker.state, BreakerState.OPEN);
    offer(d, 3, 9);
    await settle(d);
    assert.equal(calls.length, 1, 'nothing sent while backed off and open');
    // Past the open period a probe goes, then the rest.
    clock.ns += 2000 * MS;
    for (let k = 0; k < 4 && d.totals().delivered < 3; k++) await settle(d);
    assert.equal(d.totals().delivered, 3);
    assert.equal(d.totals().deadLettered, 0);
    const sent = calls.slice(1).flat();
    assert.deepEqual(sent.sort(), (what.startsWith('timed') ? ['2/4', '3/9'] : ['1/1', '2/4', '3/9']).sort());
    await d.close(1000);
  });
}
