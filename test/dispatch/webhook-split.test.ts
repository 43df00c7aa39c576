/**
 * A webhook request refused for what it carries (400, 413, 422) is sent again in halves, down to single triggers:
 * only the triggers the receiver refuses on their own are dead-lettered, the rest arrive once and in order. Against a
 * real HTTP server, first through the sink alone, then through the router's threads with seeded traffic.
 */
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import type { Trigger } from '../../src/index.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import { TriggerType } from '../../src/shm/layout.js';
import { triggerBatch } from './fixtures.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { routerFor, sinkTraffic, waitSettled } from '../support/sink-run.js';
import { waitFor } from '../pipeline/support.js';
import { sendPaced } from '../support/city-traffic.js';

/** A receiver that answers each request's triggers with `answer` (a status), keeping what it answered 2xx. */
async function receiver(
  t: TestContext,
  answer: (triggers: Trigger[]) => number,
): Promise<{ url: string; delivered: Trigger[]; requests: () => number }> {
  const delivered: Trigger[] = [];
  let requests = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests++;
      const triggers = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Trigger[];
      const status = answer(triggers);
      if (status >= 200 && status < 300) delivered.push(...triggers);
      // The credit window left: what it has taken counts down from 1000.
      res.writeHead(status, { 'x-credit-window': String(1000 - delivered.length) }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    delivered,
    requests: () => requests,
  };
}

const { ENTER, EXIT } = TriggerType;
/** Sixteen triggers of one device, seqs 1..16. */
const sixteen = (): ReturnType<typeof triggerBatch> =>
  triggerBatch(Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? ENTER : EXIT)));

test('webhook sink: 413 above four triggers and 400 for seqs 7 and 12: sent in halves, seqs 7 and 12 refused alone, the rest delivered once and in order', async (t) => {
  const r = await receiver(t, (ts) => (ts.length > 4 ? 413 : ts.some((x) => x.seq === 7 || x.seq === 12) ? 400 : 200));
  const sink = new WebhookSink({ url: r.url });
  t.after(() => sink.close());
  assert.deepEqual(
    await sink.deliver(sixteen()),
    { status: 200, unsampled: true, credits: 1000 - 14, refused: [6, 11] },
    'the latest credit window stands; the limiter takes no sample from several requests',
  );
  assert.deepEqual(
    r.delivered.map((x) => x.seq),
    [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16],
  );
  // 16 → 8+8 → 4 per request; the quarters holding 7 and 12 → 2+2 → 1+1.
  assert.equal(r.requests(), 1 + 2 + 4 + 2 * (2 + 2));
});

test('webhook sink: a part that fails (503) fails the rest of the batch, with the refusals and the deliveries before it; another 4xx (401) refuses the whole request at once', async (t) => {
  const r = await receiver(t, (ts) =>
    ts.length > 4 ? 413 : ts.some((x) => x.seq === 7) ? 400 : ts.some((x) => x.seq === 14) ? 503 : 200,
  );
  const sink = new WebhookSink({ url: r.url });
  t.after(() => sink.close());
  assert.deepEqual(await sink.deliver(sixteen()), {
    status: 503,
    credits: 1000 - 11,
    refused: [6],
    delivered: [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11],
    unsampled: true,
  });
  assert.deepEqual(
    r.delivered.map((x) => x.seq),
    [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12],
    'what the result names as delivered is what the receiver took',
  );

  const denied = await receiver(t, () => 401);
  const sink2 = new WebhookSink({ url: denied.url });
  t.after(() => sink2.close());
  assert.deepEqual(await sink2.deliver(sixteen()), { status: 401, credits: 1000 });
  assert.equal(denied.requests(), 1, 'a refusal that is not about the content is not split');
});

test('a receiver that takes at most 5 triggers a request and refuses every EXIT: through the router, each EXIT alone is dead-lettered as rejected, everything else arrives once, in per-device order', async (t) => {
  const refusedExits = new Set<string>();
  const r = await receiver(t, (ts) => {
    if (ts.length > 5) return 413;
    const exit = ts.find((x) => x.type === 'EXIT');
    if (exit === undefined) return 200;
    if (ts.length === 1) refusedExits.add(`${JSON.stringify(exit.deviceId)}/${exit.seq}`);
    return 422;
  });
  const traffic = sinkTraffic(37, 200);
  const router = await routerFor(traffic, { name: 'hook', kind: 'webhook', url: r.url, maxBatchTriggers: 32 });
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5000);
  await waitSettled(router, traffic.pings);
  const summary = await router.close();
  const d = summary.downstreams[0]!;
  assert.equal(summary.shedTotal, 0, 'nothing shed');
  assert.equal(summary.rejectedTotal, 0, 'no ping rejected');
  assert.ok(refusedExits.size > 0, 'some EXIT triggers');
  assert.equal(d.deadLetteredByReason.rejected, refusedExits.size, 'each EXIT refused alone, and nothing else');
  assert.equal(d.final, d.deadLetteredByReason.rejected);
  assert.equal(d.replayed, 0);
  assert.equal(d.delivered + d.final, summary.triggersTotal);
  assert.ok(!r.delivered.some((x) => x.type === 'EXIT'));
  assert.ok(r.requests() > r.delivered.length / 5, `requests: ${r.requests()}`);
  // Every other trigger once (an EXIT is a gap in its device's seqs): in order, none twice, none missing.
  assert.equal(r.delivered.length, d.delivered);
  const ids = new Set([...r.delivered.map((x) => `${JSON.stringify(x.deviceId)}/${x.seq}`), ...refusedExits]);
  assert.equal(ids.size, summary.triggersTotal, 'every trigger either delivered or refused alone');
  assert.deepEqual(checkDeliveryContract(r.delivered, {}).problems, []);
  console.log(
    `webhook split: ${summary.triggersTotal} triggers in ${r.requests()} requests; ${d.delivered} delivered, ` +
      `${refusedExits.size} EXIT refused one by one`,
  );
});

test('parts delivered before a part fails count as delivered: with one attempt and no replay, only the triggers of the failed parts are dead-lettered, and none the receiver took', async (t) => {
  // At most 4 triggers a request; a request holding a device's fifth trigger fails (503) every time.
  const failing = (x: Trigger): boolean => x.seq === 5;
  const r = await receiver(t, (ts) => (ts.length > 4 ? 413 : ts.some(failing) ? 503 : 200));
  const traffic = sinkTraffic(41, 100);
  const router = await routerFor(traffic, {
    name: 'hook',
    kind: 'webhook',
    url: r.url,
    maxBatchTriggers: 32,
    maxAttempts: 1,
    replay: false,
    breaker: { minimumRequests: 100_000, windowSize: 100_000 },
  });
  t.after(() => router.close());
  await sendPaced(router.ingestPort!, traffic, 5000);
  await waitFor(
    () => {
      const d = router.stats().downstreams[0]!;
      return router.stats().accepted === traffic.pings && d.delivered + d.final === router.stats().triggersTotal;
    },
    60_000,
    'every trigger delivered or dead-lettered',
  );
  const summary = await router.close();
  const d = summary.downstreams[0]!;
  assert.equal(summary.shedTotal, 0, 'nothing shed');
  assert.equal(summary.rejectedTotal, 0, 'no ping rejected');
  assert.ok(d.deadLetteredByReason.undeliverable > 0, 'some triggers sent only in failed parts');
  assert.equal(d.final, d.deadLetteredByReason.undeliverable, 'dead-lettered only as undeliverable');
  assert.equal(d.delivered + d.final, summary.triggersTotal);
  // Each trigger the receiver took once, and counted delivered: none of them is among the dead letters.
  const ids = r.delivered.map((x) => `${JSON.stringify(x.deviceId)}/${x.seq}`);
  assert.equal(new Set(ids).size, ids.length, 'none received twice');
  assert.equal(r.delivered.length, d.delivered, 'what the receiver took is what counts as delivered');
  assert.ok(!r.delivered.some(failing));
  assert.deepEqual(checkDeliveryContract(r.delivered, {}).problems, []);
  console.log(
    `webhook parts: ${summary.triggersTotal} triggers in ${r.requests()} requests; ${d.delivered} delivered once, ` +
      `${d.final} dead-lettered as undeliverable`,
  );
});
