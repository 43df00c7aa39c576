import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher, type DispatcherOptions } from '../../src/dispatch/dispatcher.js';
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import { CapacityServer, sleep, TriggerRecord } from './fixtures.js';

function options(dir: string, servers: CapacityServer[], replayOrder: number[][]): DispatcherOptions {
  const namer = new IndexNamer();
  return {
    deadLetterDir: dir,
    namer,
    flushIntervalMs: 20,
    downstreams: servers.map((s, i) => ({
      name: `ds-${i}`,
      sink: new WebhookSink({ url: s.url, timeoutMs: 2000 }, namer),
      limit: new GradientLimit({ initialLimit: 8, minLimit: 2 }),
      maxBatchTriggers: 8,
      breaker: { openDurationNs: 100e6, maxOpenDurationNs: 200e6 },
    })),
    onDelivered: (d, batch) => {
      // Behind live traffic: a replay batch is only ever sent while the live queue is empty.
      if (batch.replay) replayOrder[d]!.push(batch.count);
    },
  };
}

function assertAccounting(d: Dispatcher, label: string): void {
  for (const ds of d.downstreams) {
    assert.equal(ds.offered, ds.delivered + ds.deadLettered + ds.inFlightTriggers, `${label}: ${ds.name} accounting`);
  }
}

test('a downstream killed mid-stream trips its breaker, dead-letters durably, others keep delivering; replay re-delivers each once, across a restart', async () => {
  const servers = [new CapacityServer({ workers: 32, serviceMs: 3 }), new CapacityServer({ workers: 32, serviceMs: 3 }), new CapacityServer({ workers: 32, serviceMs: 3 })];
  for (const s of servers) await s.start();
  const killedPort = servers[1]!.port;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'breaker-'));
  const replayBatches: number[][] = [[], [], []];
  const r = new TriggerRecord();
  const TOTAL = 3000;
  const KILL_AT = 600;
  let seq = 0;

  // Run 1: B dies at trigger 600 and stays down; the dispatcher then shuts down (drain) with B still dead.
  const d1 = new Dispatcher(options(dir, servers, replayBatches));
  const liveQueueSizesAtReplay: number[] = [];
  while (seq < TOTAL / 2) {
    for (let k = 0; k < 10; k++) {
      seq++;
      const lane = seq % 7 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION;
      assert.equal(d1.offer(r.set(seq, TriggerType.ENTER, lane, seq & 255, seq & 1023).f64, r.i32, 0, 0), 3);
    }
    if (seq === KILL_AT) await servers[1]!.kill();
    d1.pump();
    assertAccounting(d1, 'run 1');
    await sleep(2);
  }
  await d1.close(3000);
  const b1 = d1.downstreams[1]!;
  assert.ok(b1.breaker.opens >= 1, 'the breaker opened');
  assert.ok(b1.deadLettered > TOTAL / 2 - KILL_AT - 50, `B's triggers went to the dead-letter file: ${b1.deadLettered}`);
  for (const i of [0, 2]) {
    const ds = d1.downstreams[i]!;
    assert.equal(ds.delivered, TOTAL / 2, `${ds.name} delivered everything while B was down`);
    assert.equal(ds.deadLettered, 0);
  }
  assertAccounting(d1, 'run 1 end');
  assert.equal(d1.totals().inFlight, 0);
  const fileRecords = (fs.statSync(path.join(dir, 'ds-1.dlq')).size - 64) / 96;
  assert.equal(fileRecords, b1.deadLettered, 'every dead-lettered trigger is in the file');

  // Run 2: a new dispatcher over the same directory (a restart); B is back on its port.
  await servers[1]!.start(killedPort);
  const d2 = new Dispatcher(options(dir, servers, replayBatches));
  assert.equal(d2.downstreams[1]!.replay!.depth, b1.deadLettered, 'recovered from the file on open');
  const origPump = d2.downstreams[1]!.pump.bind(d2.downstreams[1]!);
  d2.downstreams[1]!.pump = (now: number): void => {
    const before = d2.downstreams[1]!.replaySending;
    origPump(now);
    if (d2.downstreams[1]!.replaySending > before) liveQueueSizesAtReplay.push(d2.downstreams[1]!.queue.size);
  };
  while (seq < TOTAL) {
    for (let k = 0; k < 10; k++) {
      seq++;
      d2.offer(r.set(seq, TriggerType.EXIT, Lane.TRANSITION, seq & 255, seq & 1023).f64, r.i32, 0, 0);
    }
    d2.pump();
    assertAccounting(d2, 'run 2');
    await sleep(2);
  }
  const deadline = Date.now() + 15_000;
  while (!(d2.isIdle && d2.isReplayDone) && Date.now() < deadline) {
    d2.pump();
    await sleep(5);
  }
  await d2.close(3000);
  for (const s of servers) await s.kill();

  const b2 = d2.downstreams[1]!;
  assert.equal(b2.replayed, b1.deadLettered, 'every dead-lettered trigger was re-delivered');
  assert.ok(liveQueueSizesAtReplay.length > 0);
  assert.ok(liveQueueSizesAtReplay.every((n) => n === 0), 'replay only ever sent with an empty live queue');
  assert.equal(replayBatches[0]!.length + replayBatches[2]!.length, 0, 'healthy downstreams replayed nothing');
  // Zero lost, nothing twice: every seq reached every downstream exactly once (B: live or replay).
  for (let i = 0; i < 3; i++) {
    const s = servers[i]!;
    for (let q = 1; q <= TOTAL; q++) {
      const n = (s.liveSeqs.get(q) ?? 0) + (s.replaySeqs.get(q) ?? 0);
      if (n !== 1) assert.fail(`downstream ${i} got seq ${q} ${n} times`);
    }
  }
  assert.equal(servers[1]!.replaySeqs.size, b1.deadLettered);
  assertAccounting(d2, 'run 2 end');
  // A third open finds nothing left to replay: progress was durable.
  const d3 = new Dispatcher(options(dir, servers, replayBatches));
  assert.equal(d3.downstreams[1]!.replay!.depth, 0);
  await d3.close(100);
});
