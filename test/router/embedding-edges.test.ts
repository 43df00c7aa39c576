/**
 * What an embedding meets around its own code, through the router's real threads: a trigger stream nobody reads, or
 * whose loop awaits `close()` inside its body, does not hold `close()` for ever (at the drain deadline the stream lets
 * go of its batches, which the next start's stream gets, in per-device order); a callback that throws or rejects is
 * named in the log with what it threw, and its batch is sent again; in-process input after `drain()`, and a point
 * the ingest thread cannot be handed, are refused with an error instead of being shed or lost; `fences` and
 * `fencesFile` together are refused.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Trigger } from '../../src/index.js';

/** What createRouter takes. */
type CreateOptions = NonNullable<Parameters<typeof createRouter>[0]>;
import { sendPaced, type CityTraffic } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { sinkTraffic } from '../support/sink-run.js';
import { waitFor, within } from '../pipeline/support.js';

const DRAIN_DEADLINE_MS = 500;

/** Options of a router over `t`'s fences with one stream downstream `app`, its state in `stateDir`. */
function streamOptions(t: CityTraffic, stateDir: string, lines: string[]): CreateOptions {
  return {
    fences: t.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir,
    drainDeadlineMs: DRAIN_DEADLINE_MS,
    downstreams: [{ name: 'app', kind: 'stream', maxBatchTriggers: 16 }],
    log: (line, level) => lines.push(`${level} ${line}`),
  };
}

/** Reads the stream of a router started on `options` until it has `count` triggers; closes it. */
async function nextStartReads(options: CreateOptions, count: number): Promise<Trigger[]> {
  const router = await createRouter(options);
  const received: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of router.triggers('app')) received.push(...batch);
  })();
  try {
    await waitFor(() => received.length >= count, 60_000, 'the next start delivered what was kept');
  } finally {
    const summary = await router.close();
    await loop;
    assert.equal(summary.downstreams[0]!.final, 0, 'nothing settled for good at the next start');
  }
  return received;
}

const key = (x: Trigger): string => `${JSON.stringify(x.deviceId)}/${x.seq}`;

/** A router with stream `app` over a fresh state directory, fed `traffic` over TCP until every ping is processed. */
async function fedStreamRouter(
  traffic: CityTraffic,
): Promise<{ router: Awaited<ReturnType<typeof createRouter>>; options: CreateOptions }> {
  const options = streamOptions(traffic, join(mkdtempSync(join(tmpdir(), 'gr-embed-')), 'state'), []);
  const router = await createRouter(options);
  await sendPaced(router.ingestPort!, traffic, 20_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  return { router, options };
}

test('a trigger stream nobody reads does not hold close(): at the drain deadline it lets go of its batches, and the next start reads every trigger once, in per-device order', async () => {
  const traffic = sinkTraffic(21, 300);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-embed-')), 'state');
  const lines: string[] = [];
  const options = streamOptions(traffic, stateDir, lines);
  const router = await createRouter(options);
  await sendPaced(router.ingestPort!, traffic, 20_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(() => router.stats().downstreams[0]!.inflight > 0, 10_000, 'batches sent to the stream');
  const one = await within(router.close(), 20_000, 'close() with an unread stream');
  const d = one.downstreams[0]!;
  assert.equal(one.shedTotal, 0);
  assert.equal(d.delivered, 0, 'nothing read, nothing delivered');
  assert.equal(d.deadLettered, 0, `dead letters: ${JSON.stringify(d.deadLetteredByReason)}`);
  assert.equal(d.carriedOver, one.triggersTotal, 'every trigger kept for the next start');
  assert.ok(
    lines.some((l) =>
      /^warn trigger stream app: \d+ batch\(es\) not taken by its loop within the drain deadline/.test(l),
    ),
    `the log says the stream let go: ${lines.filter((l) => l.startsWith('warn')).join(' | ')}`,
  );
  const received = await nextStartReads(options, one.triggersTotal);
  assert.equal(received.length, one.triggersTotal, 'each once');
  assert.deepEqual(checkDeliveryContract(received, { complete: true, stays: true }).problems, []);
  console.log(
    `unread stream: close took its ${DRAIN_DEADLINE_MS} ms deadline; ${received.length} read at the next start`,
  );
});

test('a loop that awaits close() inside its body: close() finishes at the drain deadline, and the batch the loop held comes again at the next start, under the same identities', async () => {
  const traffic = sinkTraffic(22, 300);
  const { router, options } = await fedStreamRouter(traffic);
  const handled: Trigger[] = [];
  let heldAtClose: readonly Trigger[] = [];
  const loop = (async () => {
    for await (const batch of router.triggers('app')) {
      handled.push(...batch);
      if (handled.length > 100) {
        heldAtClose = batch;
        return await router.close();
      }
    }
    return null;
  })();
  const one = await within(loop, 20_000, 'close() awaited inside the loop');
  assert.ok(one !== null && heldAtClose.length > 0);
  const d = one.downstreams[0]!;
  assert.equal(d.deadLettered, 0);
  assert.equal(d.delivered, handled.length - heldAtClose.length, 'the batch held at close is not counted delivered');
  assert.equal(d.delivered + d.carriedOver, one.triggersTotal, 'the rest kept for the next start');
  const received = await nextStartReads(options, d.carriedOver);
  const again = new Set(received.map(key));
  for (const x of heldAtClose) assert.ok(again.has(key(x)), `the held batch came again: ${key(x)}`);
  const all = [...handled, ...received];
  assert.equal(new Set(all.map(key)).size, one.triggersTotal);
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true, allowRedelivery: true }).problems, []);
});

test('a slow loop still reading at the drain deadline: the batch it holds is counted delivered when it comes back for the next, and the next start sends none of what it handled', async () => {
  const traffic = sinkTraffic(25, 300);
  const { router, options } = await fedStreamRouter(traffic);
  const handled: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of router.triggers('app')) {
      // 200 ms a batch: far slower than the triggers, well within the second a held batch is given.
      await new Promise((r) => setTimeout(r, 200));
      handled.push(...batch);
    }
  })();
  await waitFor(() => handled.length > 0, 10_000, 'the loop reading');
  const one = await within(router.close(), 20_000, 'close() while the loop reads slowly');
  await loop;
  const d = one.downstreams[0]!;
  assert.equal(d.delivered, handled.length, 'every batch the loop handled counted delivered');
  assert.equal(d.delivered + d.carriedOver, one.triggersTotal);
  const received = await nextStartReads(options, d.carriedOver);
  const handledKeys = new Set(handled.map(key));
  assert.equal(received.filter((x) => handledKeys.has(key(x))).length, 0, 'nothing handled comes again');
  const all = [...handled, ...received];
  assert.equal(all.length, one.triggersTotal);
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true }).problems, []);
});

test('a callback that throws or rejects: the log names the downstream and what it threw, the batch is sent again, and every trigger arrives once, in per-device order', async () => {
  const traffic = sinkTraffic(23, 200);
  const lines: string[] = [];
  const got: Trigger[] = [];
  let calls = 0;
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-embed-')), 'state'),
    downstreams: [
      {
        name: 'cb',
        kind: 'callback',
        callback: (ts) => {
          calls++;
          // The first call throws, the second rejects; later ones take their batch.
          if (calls === 1) throw new TypeError('handler cannot read property "x"');
          if (calls === 2) return Promise.reject(new Error('database unavailable'));
          got.push(...ts);
          return undefined;
        },
      },
    ],
    log: (line, level) => lines.push(`${level} ${line}`),
  });
  await sendPaced(router.ingestPort!, traffic, 20_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(() => got.length === router.stats().triggersTotal, 60_000, 'every trigger delivered');
  const summary = await router.close();
  const failures = lines.filter((l) => l.includes('its callback failed'));
  assert.equal(failures.length, 2, failures.join(' | '));
  assert.match(
    failures[0]!,
    /^warn downstream cb: its callback failed on a batch of \d+ trigger\(s\) .*TypeError: handler cannot read property "x"$/,
  );
  assert.match(failures[1]!, /^warn downstream cb: .*Error: database unavailable$/);
  assert.equal(summary.deadLettered, 0);
  assert.equal(got.length, summary.triggersTotal);
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});

test('in-process input after drain() is refused with an error naming why, not shed; the same after close()', async () => {
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features: [] },
    stateDir: null,
    log: () => undefined,
  });
  const point = { id: 'd1', lat: 52.5, lon: 13.4, ts: Date.now() };
  assert.equal(typeof router.push(point), 'boolean', 'taken before the drain');
  await router.drain();
  assert.throws(
    () => router.push(point),
    /^Error: push\(\): the router is draining \(drain\(\) or close\(\) was called\)/,
  );
  assert.throws(() => router.ingest(new Uint8Array([0x80])), /^Error: ingest\(\): the router is draining/);
  const summary = await router.close();
  assert.equal(summary.shedTotal, 0, 'nothing shed');
  assert.equal(summary.accepted, 1, 'the point pushed before the drain was taken');
  assert.throws(() => router.push(point), /push\(\): the router is closed/);
});

test('a point the ingest thread cannot be handed (a function in it) is refused with a TypeError naming why; it is not counted in flight, and the router goes on', async () => {
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features: [] },
    stateDir: null,
    log: () => undefined,
  });
  try {
    const bad = { id: 'd1', lat: 52.5, lon: 13.4, ts: Date.now(), toJSON: () => 'x' };
    for (let i = 0; i < 3; i++)
      assert.throws(
        () => router.push(bad as unknown as Parameters<typeof router.push>[0]),
        /^TypeError: push\(\): the point cannot be handed to the ingest thread \(.*could not be cloned.*\)/,
      );
    // Nothing of them is in flight: the input is drained at once, and a good point still goes through.
    await within(router.inputDrained(), 5_000, 'inputDrained() after refused points');
    router.push({ id: 'd1', lat: 52.5, lon: 13.4, ts: Date.now() });
    await waitFor(() => router.stats().accepted === 1, 10_000, 'the good point accepted');
  } finally {
    await router.close();
  }
});

test('fences and fencesFile together are refused, naming both', async () => {
  await assert.rejects(
    createRouter({
      fences: { type: 'FeatureCollection', features: [] },
      fencesFile: '/nonexistent/fences.geojson',
      stateDir: null,
      log: () => undefined,
    }),
    /^RangeError: options.fences and options.fencesFile cannot both be given/,
  );
});
