/**
 * The dispatcher's delivery contract, one downstream at a time, against real HTTP servers and in-process sinks:
 * per-device order whatever the concurrency, failures, spill to the backlog log, breaker, replay and restart; no
 * dead letter for a downstream that is merely slow or down; dead letters only for a reason, each counted.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher, type DispatcherOptions } from '../../src/dispatch/dispatcher.js';
import type { Downstream, DownstreamOptions } from '../../src/dispatch/downstream.js';
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import { deadLetterSegmentName, listDeadLetterSegments } from '../../src/durable/dead-letter-file.js';
import { assertEachOnce, assertPerDeviceOrder, CapacityServer, sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 300;

/** What a receiver saw, in arrival order. */
interface Seen {
  deviceId: string | number;
  fenceId: string;
  seq: number;
  replay: boolean;
}

function assertAccounting(d: Dispatcher, label: string): void {
  for (const ds of d.downstreams) {
    assert.equal(
      ds.offered + ds.recovered,
      ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers,
      `${label}: ${ds.name} accounting`,
    );
  }
}

/** Resolves a device id of the IndexNamer (`device-<slot>`) to its slot: what a restart's registry does. */
const slotOfIndexId = (id: string | number): number =>
  typeof id === 'string' && id.startsWith('device-') ? Number(id.slice(7)) : -1;

function dispatcherOptions(
  dir: string,
  downstreams: DownstreamOptions[],
  extra: Partial<DispatcherOptions> = {},
): DispatcherOptions {
  return {
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    deviceSlotOf: slotOfIndexId,
    flushIntervalMs: 20,
    downstreams,
    ...extra,
  };
}

/** Offers triggers seq = first .. first + count - 1, device = a seeded walk over DEVICES, seq per device increasing. */
function offerTriggers(
  d: Dispatcher,
  r: TriggerRecord,
  seqs: Map<number, number>,
  count: number,
  sent: { deviceId: string; seq: number }[],
  rand: { x: number },
): void {
  for (let k = 0; k < count; k++) {
    rand.x = (Math.imul(rand.x, 1103515245) + 12345) >>> 0;
    const device = rand.x % DEVICES;
    const seq = (seqs.get(device) ?? 0) + 1;
    seqs.set(device, seq);
    const lane = seq % 5 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION;
    assert.ok(d.offer(r.set(seq, TriggerType.CROSS, lane, seq & 31, device).f64, r.i32, 0, 0) >= 1);
    sent.push({ deviceId: `device-${device}`, seq });
  }
}

async function settle(d: Dispatcher, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!d.isIdle && Date.now() < end) {
    d.pump();
    await sleep(2);
  }
}

test('a killed downstream: its breaker opens, its triggers wait in order (memory, then the backlog log) while the others deliver; back, it gets each once, in per-device order, with no dead letter', async () => {
  const servers = [
    new CapacityServer({ workers: 32, serviceMs: 2 }),
    new CapacityServer({ workers: 32, serviceMs: 2 }),
  ];
  for (const s of servers) await s.start();
  const killedPort = servers[1]!.port;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kill-'));
  const d = new Dispatcher(
    dispatcherOptions(
      dir,
      servers.map((s, i) => ({
        name: `ds-${i}`,
        sink: new WebhookSink({ url: s.url, timeoutMs: 2000 }),
        limit: new GradientLimit({ initialLimit: 16, minLimit: 4 }),
        maxBatchTriggers: 8,
        // Small memory, so the outage spills to the backlog log.
        queueCapacitySlots: 256,
        breaker: { openDurationNs: 50e6, maxOpenDurationNs: 100e6 },
      })),
    ),
  );
  const r = new TriggerRecord();
  const seqs = new Map<number, number>();
  const sent: { deviceId: string; seq: number }[] = [];
  const rand = { x: 17 };
  const [a, b] = d.downstreams as [Downstream, Downstream];
  let closed = false;
  try {
    for (let round = 0; round < 300; round++) {
      offerTriggers(d, r, seqs, 10, sent, rand);
      if (round === 60) await servers[1]!.kill();
      if (round === 220) {
        // The outage lasts until the breaker has opened (on a busy host 160 rounds may pass before enough failures).
        for (const end = Date.now() + 20_000; b.breaker.opens === 0 && Date.now() < end;) {
          d.pump();
          await sleep(2);
        }
        await servers[1]!.start(killedPort);
      }
      d.pump();
      assertAccounting(d, `round ${round}`);
      await sleep(2);
    }
    await settle(d, 20_000);
    assert.ok(b.breaker.opens >= 1, 'the breaker opened');
    assert.ok(b.spilled > 0, `the outage spilled to the backlog log: ${b.spilled}`);
    assert.equal(a.spilled, 0, 'the healthy downstream never spilled');
    for (const ds of [a, b]) {
      assert.equal(ds.deadLettered, 0, `${ds.name}: no dead letter`);
      assert.equal(ds.delivered, sent.length, `${ds.name}: delivered everything`);
    }
    assertAccounting(d, 'end');
    closed = true;
    await d.close(2000);
    for (const [i, s] of servers.entries()) {
      assertPerDeviceOrder(s.received, `downstream ${i}`);
      assertEachOnce(s.received, sent, `downstream ${i}`);
    }
  } finally {
    // A failure above must not leave the dispatcher and the servers (and with them the file) running.
    if (!closed) await d.close(0).catch(() => undefined);
    for (const s of servers) await s.kill();
  }
});

test('across a restart: what a dead downstream could not take is kept (pending file, backlog log) and the next dispatcher delivers it first, in order, under its original ids', async () => {
  const server = new CapacityServer({ workers: 16, serviceMs: 1 });
  await server.start();
  const port = server.port;
  await server.kill();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'restart-'));
  const options = (): DownstreamOptions[] => [
    {
      name: 'hook',
      sink: new WebhookSink({ url: `http://127.0.0.1:${port}/hook`, timeoutMs: 1000 }),
      maxBatchTriggers: 8,
      queueCapacitySlots: 512,
      breaker: { openDurationNs: 50e6, maxOpenDurationNs: 100e6 },
    },
  ];
  const r = new TriggerRecord();
  const seqs = new Map<number, number>();
  const sent: { deviceId: string; seq: number }[] = [];
  const rand = { x: 99 };
  const d1 = new Dispatcher(dispatcherOptions(dir, options()));
  for (let round = 0; round < 200; round++) {
    offerTriggers(d1, r, seqs, 10, sent, rand);
    d1.pump();
    await sleep(1);
  }
  await d1.close(300);
  const kept = d1.downstreams[0]!.inFlightTriggers;
  assert.equal(kept, sent.length, 'every trigger is kept for the next start');
  assert.equal(d1.carriedOver[0], kept);
  assert.ok(fs.existsSync(path.join(dir, 'hook', 'pending.bin')), 'memory went to the pending file');
  assert.ok(d1.downstreams[0]!.spilled > 0, 'the rest is in the backlog log');
  assert.equal(d1.downstreams[0]!.deadLettered, 0);

  // The downstream is back; a new dispatcher over the same directory, whose fence names differ (another process).
  await server.start(port);
  const d2 = new Dispatcher(dispatcherOptions(dir, options(), { runId: 12345 }));
  assert.equal(d2.downstreams[0]!.recovered, kept, 'taken over at start');
  for (let round = 0; round < 50; round++) {
    offerTriggers(d2, r, seqs, 10, sent, rand);
    d2.pump();
    await sleep(1);
  }
  await settle(d2, 20_000);
  await d2.close(1000);
  assert.ok(!fs.existsSync(path.join(dir, 'hook', 'pending.bin')), 'the pending file is gone once delivered');
  assertPerDeviceOrder(server.received, 'after restart');
  assertEachOnce(server.received, sent, 'after restart');
  assert.ok(
    server.received.every(
      (t) => typeof t.deviceId === 'string' && t.deviceId.startsWith('device-') && t.fenceId.startsWith('fence-1-'),
    ),
    'original ids',
  );
  // A third open finds nothing left.
  const d3 = new Dispatcher(dispatcherOptions(dir, options()));
  assert.equal(d3.downstreams[0]!.recovered, 0);
  await d3.close(100);
  await server.kill();
});

/** An in-process sink that fails every batch holding a trigger of `failing` devices, and records what it accepted. */
class FlakySink implements Sink {
  readonly seen: Seen[] = [];
  readonly failing = new Set<string | number>();
  status = 500;
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    for (let i = 0; i < batch.count; i++) if (this.failing.has(batch.deviceId(i))) return { status: this.status };
    for (let i = 0; i < batch.count; i++)
      this.seen.push({
        deviceId: batch.deviceId(i),
        fenceId: batch.fenceId(i),
        seq: batch.seq(i),
        replay: batch.replay(i),
      });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

test('out of attempts: the trigger is dead-lettered as undeliverable and parked, its device waits behind it, other devices flow; the replay lane re-delivers it in order, also after a restart', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-'));
  const sink = new FlakySink();
  sink.failing.add('device-7');
  const downstream = (): DownstreamOptions[] => [
    {
      name: 'app',
      sink,
      maxBatchTriggers: 1,
      maxAttempts: 3,
      breaker: { minimumRequests: 100_000, windowSize: 100_000 },
    },
  ];
  const r = new TriggerRecord();
  const d1 = new Dispatcher(dispatcherOptions(dir, downstream()));
  for (let seq = 1; seq <= 5; seq++) {
    d1.offer(r.set(seq, TriggerType.ENTER, Lane.TRANSITION, seq, 7).f64, r.i32, 0, 0);
    d1.offer(r.set(seq, TriggerType.ENTER, Lane.TRANSITION, seq, 8).f64, r.i32, 0, 0);
  }
  const end = Date.now() + 5000;
  while (d1.downstreams[0]!.parked === 0 || sink.seen.length < 5) {
    if (Date.now() > end) assert.fail('no park');
    d1.pump();
    await sleep(2);
  }
  const ds1 = d1.downstreams[0]!;
  assert.equal(ds1.deadLetteredByReason[2], 1, 'one undeliverable dead letter');
  assert.deepEqual(
    sink.seen.map((t) => `${String(t.deviceId)}/${t.seq}`),
    ['device-8/1', 'device-8/2', 'device-8/3', 'device-8/4', 'device-8/5'],
    'device 8 flowed, device 7 waited',
  );
  // Stop while device 7 is still refused: its dead letter stays PENDING, its later triggers go to the pending file.
  await d1.close(200);
  assert.equal(d1.carriedOver[0], 5);

  sink.failing.clear();
  const d2 = new Dispatcher(dispatcherOptions(dir, downstream(), { runId: 777 }));
  assert.equal(d2.downstreams[0]!.recovered, 5);
  assert.equal(d2.downstreams[0]!.parked, 1, 'the dead letter is parked again');
  d2.offer(r.set(6, TriggerType.EXIT, Lane.TRANSITION, 6, 7).f64, r.i32, 0, 0);
  await settle(d2, 5000);
  const seven = sink.seen.filter((t) => t.deviceId === 'device-7');
  assert.deepEqual(
    seven.map((t) => t.seq),
    [1, 2, 3, 4, 5, 6],
    'in order, the dead letter first',
  );
  assert.deepEqual(
    seven.map((t) => t.replay),
    [true, false, false, false, false, false],
    'only the dead letter is a replay',
  );
  assert.equal(d2.downstreams[0]!.replayed, 1);
  // Across both dispatchers: every device's triggers in seq order, nothing delivered twice or out of place.
  assertPerDeviceOrder(sink.seen, 'app', true);
  assertAccounting(d2, 'after replay');
  await d2.close(100);
  const d3 = new Dispatcher(dispatcherOptions(dir, downstream()));
  assert.equal(d3.downstreams[0]!.recovered, 0, 'the resolved dead letter does not come back');
  await d3.close(100);
});

test('refused for good (4xx) and expired: dead-lettered for good with their reason, the device goes on; a downstream that keeps up never sees a dead letter', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'final-'));
  const refusing = new FlakySink();
  refusing.status = 422;
  refusing.failing.add('device-3');
  const freshOnly = new FlakySink();
  const keepsUp = new FlakySink();
  const r = new TriggerRecord();
  let clock = 1e12;
  const d = new Dispatcher(
    dispatcherOptions(
      dir,
      [
        { name: 'strict', sink: refusing, maxBatchTriggers: 1 },
        { name: 'fresh-only', sink: freshOnly, maxBatchTriggers: 4, maxQueueAgeMs: 1000, safetyCap: 1 },
        { name: 'healthy', sink: keepsUp, maxBatchTriggers: 4 },
      ],
      { clock: () => clock },
    ),
  );
  for (let seq = 1; seq <= 3; seq++) {
    d.offer(r.set(seq, TriggerType.ENTER, Lane.TRANSITION, seq, 3, clock).f64, r.i32, 0, 0);
    d.offer(r.set(seq, TriggerType.ENTER, Lane.TRANSITION, seq, 4, clock).f64, r.i32, 0, 0);
  }
  // The 'fresh-only' downstream sends one batch; the rest age past a second before it can go.
  d.pump();
  clock += 2000e6;
  await settle(d, 3000);
  const [strict, fresh, ok] = d.downstreams as [Downstream, Downstream, Downstream];
  assert.equal(strict.deadLetteredByReason[0], 3, 'three refused for good');
  assert.equal(strict.final, 3);
  assert.deepEqual(
    refusing.seen.map((t) => `${String(t.deviceId)}/${t.seq}`),
    ['device-4/1', 'device-4/2', 'device-4/3'],
  );
  assert.ok(fresh.deadLetteredByReason[1]! > 0, `expired: ${fresh.deadLetteredByReason[1]}`);
  assert.equal(fresh.delivered + fresh.final, 6);
  assert.equal(ok.deadLettered, 0, 'a downstream that keeps up never sees a dead letter');
  assert.equal(ok.delivered, 6);
  const each = [3, 4].flatMap((n) => [1, 2, 3].map((seq) => ({ deviceId: `device-${n}`, seq })));
  assertPerDeviceOrder(keepsUp.seen, 'healthy');
  assertEachOnce(keepsUp.seen, each, 'healthy');
  // Expired triggers are gaps by design; what arrived is in each device's order.
  assertPerDeviceOrder(freshOnly.seen, 'fresh-only');
  assert.equal(freshOnly.seen.length, fresh.delivered);
  assertAccounting(d, 'end');
  await d.close(100);
  // Final dead letters are in the file, with their reason, and never come back.
  const d2 = new Dispatcher(
    dispatcherOptions(dir, [
      { name: 'strict', sink: new FlakySink() },
      { name: 'fresh-only', sink: new FlakySink() },
      { name: 'healthy', sink: new FlakySink() },
    ]),
  );
  for (const ds of d2.downstreams) assert.equal(ds.recovered, 0);
  await d2.close(100);
  const strictFiles = listDeadLetterSegments(path.join(dir, 'strict')).map(
    (n) => fs.statSync(path.join(dir, 'strict', deadLetterSegmentName(n))).size,
  );
  assert.ok(strictFiles.reduce((a, b) => a + b, 0) > 3 * 96, 'the final dead letters are kept');
});
