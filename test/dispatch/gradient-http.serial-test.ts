/**
 * The gradient limiter against a real HTTP downstream whose capacity and delay change at run time.
 *
 * A `.serial-test` file: `npm test` runs it after every other test, alone, because what it checks (the limit tracks
 * the downstream's capacity) reads latency, and a concurrently running CPU-heavy test inflates the client's RTTs
 * exactly as a queue at the downstream would.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import { assertPerDeviceOrder, CapacityServer, sleep, TriggerRecord } from './fixtures.js';

/** Keeps the downstream's queue topped up and samples the limit every tick; returns the mean limit of the phase's tail. */
async function runPhase(d: Dispatcher, r: TriggerRecord, seq: { n: number }, ms: number): Promise<number> {
  const ds = d.downstreams[0]!;
  const end = Date.now() + ms;
  const tailFrom = Date.now() + ms / 2;
  let sum = 0;
  let count = 0;
  while (Date.now() < end) {
    // Saturate: the pipeline always has work, so the limiter is the binding constraint.
    while (ds.queuedTriggers < 200)
      d.offer(r.set(++seq.n, TriggerType.ENTER, Lane.TRANSITION, 1, seq.n & 1023).f64, r.i32, 0, 0);
    d.pump();
    if (Date.now() >= tailFrom) {
      sum += ds.limiter.limit;
      count++;
    }
    await sleep(5);
  }
  return sum / count;
}

test('gradient limit tracks a real HTTP downstream whose capacity and delay change, with no configuration change', async () => {
  const server = new CapacityServer({ workers: 8, serviceMs: 20 });
  await server.start();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grad-http-'));
  const namer = new IndexNamer();
  const d = new Dispatcher({
    stateDir: dir,
    namer,
    maxDevices: 1024,
    spill: false,
    downstreams: [
      {
        name: 'hook',
        sink: new WebhookSink({ url: server.url, maxSockets: 256 }),
        limit: new GradientLimit({ initialLimit: 4, minLimit: 2, maxLimit: 200 }),
        safetyCap: 200,
        maxBatchTriggers: 1,
        queueCapacitySlots: 1024,
      },
    ],
  });
  const r = new TriggerRecord();
  const seq = { n: 0 };
  try {
    const bands: [string, number, number, number][] = [];
    bands.push(['8 workers, 20 ms', await runPhase(d, r, seq, 3000), 8, 20]);
    server.setWorkers(16);
    bands.push(['16 workers, 20 ms', await runPhase(d, r, seq, 3000), 16, 20]);
    server.setWorkers(5);
    server.settings.serviceMs = 40;
    bands.push(['5 workers, 40 ms', await runPhase(d, r, seq, 3500), 5, 40]);
    for (const [label, mean, workers] of bands) {
      // Band: near the capacity (full utilisation) and at most 2.5x it (bounded queueing). The lower edge leaves
      // room for a busy test machine, where client-side delays inflate RTTs and the limiter rightly backs off a bit.
      const lo = workers * 0.7;
      assert.ok(
        mean >= lo && mean <= workers * 2.5,
        `${label}: mean limit ${mean.toFixed(1)} outside [${lo}, ${workers * 2.5}]`,
      );
    }
    assert.ok(bands[1]![1] > bands[0]![1] * 1.4, 'the limit rose with the capacity');
    assert.ok(bands[2]![1] < bands[1]![1] * 0.6, 'the limit fell with the capacity');
  } finally {
    await d.close(5000);
    await server.kill();
  }
  const t = d.totals();
  assert.equal(t.offered + t.recovered, t.delivered + t.replayed + t.final + t.inFlight);
  assert.equal(t.deadLettered, 0, 'a downstream that keeps up sees no dead letter');
  // What the drain deadline did not reach stays for a next start, counted.
  assert.equal(t.inFlight, d.carriedOver[0]);
  // With up to 200 requests in flight, each device's triggers reached the server in their order, each once (a request
  // the close did not wait for may have been served unanswered: counted in flight, carried over).
  assert.ok(server.received.length >= t.delivered && server.received.length <= t.delivered + t.inFlight);
  assertPerDeviceOrder(server.received, 'hook');
});

test('gradient limit stays far below the cap when the downstream answers fast errors', async () => {
  const server = new CapacityServer({ workers: 64, serviceMs: 1, mode: 'error' });
  await server.start();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grad-err-'));
  const namer = new IndexNamer();
  const d = new Dispatcher({
    stateDir: dir,
    namer,
    maxDevices: 1024,
    spill: false,
    downstreams: [
      {
        name: 'failing',
        sink: new WebhookSink({ url: server.url }),
        limit: new GradientLimit({ initialLimit: 20, minLimit: 2, maxLimit: 400 }),
        safetyCap: 200,
        maxBatchTriggers: 1,
        maxAttempts: 1,
        replay: false,
        // The breaker is kept out of the way: this checks the limiter alone.
        breaker: { windowSize: 100_000, minimumRequests: 100_000 },
      },
    ],
  });
  const r = new TriggerRecord();
  const seq = { n: 0 };
  let peakLimit = 0;
  let peakInflight = 0;
  try {
    const ds = d.downstreams[0]!;
    const end = Date.now() + 1500;
    while (Date.now() < end) {
      while (ds.queuedTriggers < 200)
        d.offer(r.set(++seq.n, TriggerType.EXIT, Lane.TRANSITION, 1, seq.n & 1023).f64, r.i32, 0, 0);
      d.pump();
      peakLimit = Math.max(peakLimit, ds.limiter.limit);
      peakInflight = Math.max(peakInflight, ds.limiter.inflight);
      await sleep(2);
    }
    // Consecutive failures back off (10 ms doubling to 1 s): a failing downstream sees a few requests, not a storm.
    assert.ok(ds.limiter.dropped >= 10, `errors were seen: ${ds.limiter.dropped}`);
    assert.ok(
      server.stats.requests === 0 && ds.limiter.dropped < 100,
      `the failing downstream was not hammered: ${ds.limiter.dropped} requests in 1.5 s`,
    );
    assert.ok(ds.limiter.limit <= 10, `the limit fell from 20 on the errors: ${ds.limiter.limit}`);
    assert.ok(peakInflight <= 20, `in flight stayed far below the cap of 200: ${peakInflight}`);
    assert.ok(peakLimit <= 20, `limit never rose: ${peakLimit}`);
  } finally {
    await d.close(2000);
    await server.kill();
  }
  const t = d.totals();
  assert.equal(t.delivered, 0);
  // Every trigger that failed its one attempt was dead-lettered for good; the rest is kept for a next start.
  assert.equal(t.deadLettered, t.final);
  assert.ok(t.final >= 10);
  assert.equal(t.offered, t.final + t.inFlight);
  assert.equal(t.inFlight, d.carriedOver[0]);
});

/** Busy-waits `ms` on this thread: the router's own CPU stall (a long task, or a thread waiting for a core). */
function stallThread(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

test("the dispatcher's own event-loop stalls are not taken for a downstream queue: no fast cut, the limit holds", async () => {
  const server = new CapacityServer({ workers: 24, serviceMs: 20 });
  await server.start();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grad-stall-'));
  const d = new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: 1024,
    spill: false,
    downstreams: [
      {
        name: 'hook',
        sink: new WebhookSink({ url: server.url, maxSockets: 256 }),
        // Product defaults but the start and the bounds: the fast decrease is on (ratio 2, armed from a limit of 12).
        limit: new GradientLimit({ initialLimit: 16, minLimit: 2, maxLimit: 200 }),
        safetyCap: 200,
        maxBatchTriggers: 1,
        queueCapacitySlots: 1024,
      },
    ],
  });
  const r = new TriggerRecord();
  const seq = { n: 0 };
  const ds = d.downstreams[0]!;
  const g = ds.limiter.algorithm as GradientLimit;
  try {
    const settled = await runPhase(d, r, seq, 2500);
    const cutsBefore = g.fastDecreases;
    // From now on the thread stalls for 25 ms out of every 50 (longer than the downstream's 20 ms service time).
    const staller = setInterval(() => stallThread(25), 50);
    const stallBefore = ds.limiter.localStallNs;
    let stalled: number;
    try {
      stalled = await runPhase(d, r, seq, 4000);
    } finally {
      clearInterval(staller);
    }
    assert.ok(
      ds.limiter.localStallNs - stallBefore > 1e9,
      `stalls were measured and taken out: ${((ds.limiter.localStallNs - stallBefore) / 1e6).toFixed(0)} ms over ${ds.limiter.stallCorrectedSamples} samples`,
    );
    // At most one: on a host busy with other processes, one interval of real scheduling noise can read as a queue.
    // Without the correction (localStallCorrection false) the same stalls cut twice and took the limit from 24 to 8.
    assert.ok(
      g.fastDecreases - cutsBefore <= 1,
      `no fast cut for stalls of the caller: ${g.fastDecreases - cutsBefore} during the stalled phase`,
    );
    assert.ok(
      stalled >= settled * 0.7 && stalled >= 12,
      `the limit held through the stalls: ${stalled.toFixed(1)} (settled ${settled.toFixed(1)})`,
    );
  } finally {
    await d.close(5000);
    await server.kill();
  }
  const t = d.totals();
  assert.equal(t.offered + t.recovered, t.delivered + t.replayed + t.final + t.inFlight);
  assert.equal(t.deadLettered, 0);
  assert.ok(server.received.length >= t.delivered && server.received.length <= t.delivered + t.inFlight);
  assertPerDeviceOrder(server.received, 'hook');
});
