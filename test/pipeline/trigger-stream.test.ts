/**
 * `router.triggers()`: a downstream an embedding reads with `for await`, through the router's real threads. A loop
 * that keeps up gets every trigger once, in per-device order; a loop slower than the triggers holds at most the
 * batches in flight (the rest waits in the dispatcher's queues and backlog log, as for a slow webhook) and still gets
 * everything in order once it catches up; a loop that leaves early ends the stream, and the downstream is gone for
 * the run: nothing more is sent to it, and what it holds or gets is kept in the state directory for the next start. A loop that throws halfway through a batch does
 * not lose the rest of it: the next start's stream gets that batch again, under the same identities.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Trigger } from '../../src/index.js';
import { sendPaced, type CityTraffic } from '../support/city-traffic.js';
import { sinkTraffic } from '../support/sink-run.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { waitFor } from './support.js';

function traffic(devices: number): CityTraffic {
  return sinkTraffic(21, devices);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A router over `t`'s fences with one stream downstream `app` (its other options from `extra`). */
function startWithStream(t: CityTraffic, extra: Record<string, unknown>): ReturnType<typeof createRouter> {
  return createRouter({
    fences: t.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-stream-')), 'state'),
    downstreams: [{ name: 'app', kind: 'stream', ...extra }],
    log: () => undefined,
  });
}

test('a loop slower than the triggers: at most the in-flight batches wait for it, the backlog goes to disk, and every trigger arrives once, in per-device order', async () => {
  const t = traffic(1000);
  const SAFETY_CAP = 8;
  // A small queue, so that what the slow loop cannot take goes to the backlog log early.
  const router = await startWithStream(t, { safetyCap: SAFETY_CAP, maxBatchTriggers: 32, queueCapacitySlots: 1024 });
  const stream = router.triggers();
  assert.throws(() => router.triggers('nope'), /no trigger stream of that name \(streams: app\)/);
  const received: Trigger[] = [];
  let maxWaiting = 0;
  let slow = true;
  const loop = (async () => {
    for await (const batch of stream) {
      received.push(...batch);
      maxWaiting = Math.max(maxWaiting, (stream as unknown as { waitingBatches: number }).waitingBatches);
      // About 3,000 triggers a second at most while slow: far below what the traffic makes.
      if (slow) await sleep(10);
    }
  })();
  await sendPaced(router.ingestPort!, t, 20_000);
  await waitFor(() => router.stats().accepted === t.pings, 60_000, 'every ping read');
  const during = router.stats().downstreams[0]!;
  slow = false;
  await waitFor(() => router.stats().delivered === router.stats().triggersTotal, 120_000, 'the loop caught up');
  const summary = await router.close();
  await loop;
  assert.equal(summary.shedTotal, 0);
  assert.equal(summary.deadLettered, 0, 'no dead letter');
  assert.equal(received.length, summary.triggersTotal);
  assert.deepEqual(checkDeliveryContract(received, { complete: true, stays: true }).problems, []);
  assert.ok(maxWaiting <= SAFETY_CAP, `batches waiting for the loop: at most ${maxWaiting}`);
  assert.ok(
    summary.downstreams[0]!.spilled > 0,
    `the backlog went to the backlog log: ${summary.downstreams[0]!.spilled}`,
  );
  console.log(
    `slow stream: ${summary.triggersTotal} triggers, at most ${maxWaiting} batches waiting for the loop, ` +
      `${summary.downstreams[0]!.spilled} spilled (${during.backlogRecords} in the backlog log when the input ended)`,
  );
});

test('a loop that leaves early: the stream ends, a second loop is refused, and the downstream is gone for this run: nothing more is sent to it, nothing dead-lettered, everything kept for the next start', async () => {
  const t = traffic(300);
  // A stream takes no attempts or breaker options (they could have no effect: its batches are never sent again in a
  // run); with the defaults, a batch failed by the stream's end that used an attempt would be dead-lettered below.
  const router = await startWithStream(t, { maxBatchTriggers: 16 });
  let taken = 0;
  let held = 0;
  const took: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of router.triggers('app')) {
      taken += batch.length;
      took.push(...batch);
      held = batch.length;
      if (taken > 100) break;
    }
  })();
  await sendPaced(router.ingestPort!, t, 20_000);
  await loop;
  assert.throws(() => router.triggers()[Symbol.asyncIterator](), /already being read \(one consumer per stream\)/);
  await waitFor(() => router.stats().accepted === t.pings, 60_000, 'every ping read');
  const summary = await router.close();
  const d = summary.downstreams[0]!;
  assert.ok(held > 0);
  assert.equal(d.delivered, taken - held, 'what the loop took, but the batch it left holding, was delivered');
  assert.deepEqual(checkDeliveryContract(took, {}).problems, [], 'what the loop took is in per-device order');
  assert.ok(d.offered > 10 * taken, `the traffic went on after the loop left: ${d.offered} offered`);
  // The batches in flight when it left failed without using their attempt; nothing was sent to it again.
  assert.equal(d.deadLettered, 0, `dead letters: ${JSON.stringify(d.deadLetteredByReason)}`);
  assert.equal(d.delivered + d.carriedOver, d.offered, 'the rest was kept in the state directory for the next start');
  assert.ok(d.memoryOnly <= 8192, `memory held the queue's bound at most: ${d.memoryOnly}`);
});

test('a loop that throws halfway through a batch: that batch is not counted delivered, and the stream of the next start gets it again under the same identities, then everything else, in per-device order', async (t) => {
  const traffic1 = traffic(300);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-stream-')), 'state');
  const options = {
    fences: traffic1.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir,
    downstreams: [{ name: 'app', kind: 'stream' as const, maxBatchTriggers: 16 }],
    log: () => undefined,
  };
  const first = await createRouter(options);
  t.after(() => first.close());
  const handled: Trigger[] = [];
  let thrownIn: readonly Trigger[] = [];
  const loop = (async () => {
    for await (const batch of first.triggers('app')) {
      // Once 100 are handled, the handler fails on the second trigger of a batch: the rest of it is not handled.
      const failAt = handled.length >= 100 && batch.length > 1 ? 1 : -1;
      for (let i = 0; i < batch.length; i++) {
        if (i === failAt) {
          thrownIn = batch;
          throw new Error('handler failed');
        }
        handled.push(batch[i]!);
      }
    }
  })();
  const left = assert.rejects(loop, /handler failed/);
  await sendPaced(first.ingestPort!, traffic1, 20_000);
  await left;
  await waitFor(() => first.stats().processed === traffic1.pings, 60_000, 'every ping processed');
  const one = await first.close();
  const d1 = one.downstreams[0]!;
  assert.equal(one.shedTotal, 0, 'nothing shed');
  assert.equal(one.rejectedTotal, 0, 'no ping rejected');
  assert.ok(thrownIn.length > 1, 'the loop threw inside a batch of several triggers');
  assert.equal(d1.delivered, handled.length - 1, 'the batches handled whole were delivered; the one thrown in was not');
  assert.equal(d1.delivered + d1.carriedOver, one.triggersTotal, 'the rest is kept in the state directory');

  const second = await createRouter(options);
  t.after(() => second.close());
  const received: Trigger[] = [];
  const loop2 = (async () => {
    for await (const batch of second.triggers('app')) received.push(...batch);
  })();
  await waitFor(() => received.length >= d1.carriedOver, 60_000, 'the next start delivered what was kept');
  const two = await second.close();
  await loop2;
  assert.equal(two.downstreams[0]!.final, 0);
  const key = (x: Trigger): string => `${JSON.stringify(x.deviceId)}/${x.seq}`;
  const again = new Set(received.map(key));
  for (const x of thrownIn) assert.ok(again.has(key(x)), `the batch thrown in came again: ${key(x)}`);
  // What the first loop handled, then what the second got: every trigger of the run, each device's in seq order
  // (the re-delivered trigger the first loop handled carries its identity and content, and is skipped as such).
  const all = [...handled, ...received];
  assert.equal(new Set(all.map(key)).size, one.triggersTotal);
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true, allowRedelivery: true }).problems, []);
  console.log(
    `stream left by an exception: ${one.triggersTotal} triggers; the first loop handled ${handled.length}, ` +
      `${d1.delivered} counted delivered; the next start delivered ${received.length}`,
  );
});
