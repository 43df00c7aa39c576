import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DeadLetterReason,
  DeadLetterStatus,
  DREC_REASON_I32,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  Lane,
  TRG_SEQ_F64,
  TriggerType,
} from '../../src/shm/layout.js';
import { BreakerState, CircuitBreaker } from '../../src/dispatch/breaker.js';
import { CreditWindow } from '../../src/dispatch/credits.js';
import { DeviceQueues, ReadyList, REPLAY_TURN_EVERY } from '../../src/dispatch/device-queues.js';
import { FenceCatalog } from '../../src/dispatch/fence-catalog.js';
import { Limiter, NO_PERMIT } from '../../src/dispatch/limiter.js';
import { FixedLimit, GradientLimit } from '../../src/dispatch/limits/index.js';
import { TriggerRouter } from '../../src/dispatch/trigger-router.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { parseRetryAfterMs } from '../../src/dispatch/sinks/webhook-sink.js';
import { classifyResult, Outcome, type SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { DeadLetterFile, positionOffset } from '../../src/durable/dead-letter-file.js';
import { FILE_HEADER_BYTES } from '../../src/durable/file-layout.js';
import { readTriggerIdentity, recordLength, RecordBuffer, TriggerCodec } from '../../src/durable/trigger-codec.js';
import { dispatchRecord, namerIdentity, TriggerRecord } from './fixtures.js';

const MS = 1e6;

test('limiter: permits bounded by the limit and the safety cap; double and stale releases are harmless', () => {
  const l = new Limiter(new FixedLimit(5), 3);
  assert.equal(l.limit, 3);
  const p = [l.tryAcquire(0), l.tryAcquire(0), l.tryAcquire(0)];
  assert.ok(p.every((x) => x !== NO_PERMIT));
  assert.equal(l.tryAcquire(0), NO_PERMIT);
  assert.equal(l.rejected, 1);
  assert.equal(l.releaseSuccess(p[0]!, 10 * MS), true);
  assert.equal(l.releaseSuccess(p[0]!, 10 * MS), false);
  assert.equal(l.releaseDropped(p[0]!, 10 * MS), false);
  assert.equal(l.releaseIgnore(p[0]!), false);
  assert.equal(l.inflight, 2);
  const again = l.tryAcquire(20 * MS); // reuses p[0]'s slot with a new generation
  assert.equal(l.slotOf(again), l.slotOf(p[0]!));
  assert.equal(l.releaseIgnore(p[0]!), false, 'a stale permit cannot release the new holder');
  assert.equal(l.inflight, 3);
  assert.equal(l.succeeded, 1);
});

test('limiter: RTT runs from the (re)start of the call, not from a wait for the permit', () => {
  const g = new GradientLimit({ updateIntervalNs: 0, updateIntervalRtts: 0 });
  const l = new Limiter(g, 10);
  const p = l.tryAcquire(0);
  l.restart(p, 500 * MS); // e.g. the caller took the permit early
  l.releaseSuccess(p, 510 * MS);
  assert.equal(g.referenceRttNs, 10 * MS);
  assert.equal(l.rttSumNs, 10 * MS);
  assert.equal(l.rttBuckets[3], 1, '10 ms lands in the <= 10 ms bucket');
});

test('limiter: counts limit increases and decreases', () => {
  const l = new Limiter(new GradientLimit({ initialLimit: 10, updateIntervalNs: 0, updateIntervalRtts: 0 }), 100);
  for (let k = 0; k < 10; k++) {
    const ps: number[] = [];
    while (l.inflight < l.limit) ps.push(l.tryAcquire(k * 20 * MS));
    for (const p of ps) l.releaseSuccess(p, k * 20 * MS + 10 * MS);
  }
  assert.ok(l.limitIncreases > 0);
  const p = l.tryAcquire(1000 * MS);
  l.releaseDropped(p, 1001 * MS);
  assert.equal(l.limitDecreases, 1);
});

test('breaker: opens on failure rate, half-open admits one probe, success closes, failure doubles the open time', () => {
  const b = new CircuitBreaker({
    minimumRequests: 4,
    windowSize: 10,
    failureRateThreshold: 0.5,
    openDurationNs: 100 * MS,
  });
  b.onSuccess(0);
  b.onSuccess(0);
  b.onFailure(0, false);
  assert.equal(b.state, BreakerState.CLOSED);
  b.onFailure(1, false);
  assert.equal(b.state, BreakerState.OPEN);
  assert.equal(b.allowRequest(50 * MS), false);
  assert.equal(b.allowRequest(101 * MS), true);
  assert.equal(b.state, BreakerState.HALF_OPEN);
  assert.equal(b.allowRequest(101 * MS), false, 'one probe only');
  b.onFailure(120 * MS, false);
  assert.equal(b.state, BreakerState.OPEN);
  assert.equal(b.openUntil, 320 * MS, 'open time doubled');
  assert.equal(b.allowRequest(320 * MS), true);
  b.onSuccess(330 * MS);
  assert.equal(b.state, BreakerState.CLOSED);
  assert.equal(b.opens, 2);
});

test('breaker: refused connections open it without waiting for a rate', () => {
  const b = new CircuitBreaker({ refusalsToOpen: 2 });
  b.onFailure(0, true);
  assert.equal(b.state, BreakerState.CLOSED);
  b.onFailure(0, true);
  assert.equal(b.state, BreakerState.OPEN);
});

test('credits: nothing past zero; acks and advertisements refill', () => {
  const c = new CreditWindow(5);
  assert.equal(c.take(3), 3);
  assert.equal(c.take(3), 2);
  assert.equal(c.take(1), 0);
  c.grant(4);
  assert.equal(c.remaining, 4);
  c.advertise(10);
  assert.equal(c.remaining, 10);
  assert.equal(new CreditWindow(undefined).take(1000), 1000);
});

/** Appends a trigger (seq, lane) of `device` to the queues; returns its slot. */
function queueTrigger(q: DeviceQueues, r: TriggerRecord, device: number, seq: number, lane: number): number {
  const slot = q.allocate(lane);
  assert.ok(slot >= 0, `room for seq ${seq}`);
  r.set(seq, TriggerType.ENTER, lane, 1, device);
  for (let k = 0; k < 6; k++) q.f64[slot * DREC_STRIDE_F64 + k] = r.f64[k]!;
  for (let k = 12; k < 16; k++) q.i32[slot * DREC_STRIDE_I32 + k] = r.i32[k]!;
  q.i32[slot * DREC_STRIDE_I32 + DREC_REASON_I32] = -1;
  q.append(device, slot);
  return slot;
}

const seqOf = (q: DeviceQueues, slot: number): number => q.f64[slot * DREC_STRIDE_F64 + TRG_SEQ_F64]!;

test('device queues: FIFO per device, a busy device is never handed out, failed triggers go back to the front in order', () => {
  const r = new TriggerRecord();
  const q = new DeviceQueues(16, 0, 8);
  for (const s of [1, 2, 3]) queueTrigger(q, r, 5, s, Lane.TRANSITION);
  assert.equal(q.nextReady(), 5);
  const taken = [q.popHead(5), q.popHead(5)];
  assert.deepEqual(
    taken.map((s) => seqOf(q, s)),
    [1, 2],
  );
  q.setBusy(5, true);
  queueTrigger(q, r, 5, 4, Lane.TRANSITION);
  assert.equal(q.nextReady(), -1, 'busy: not ready although it has triggers queued');
  // The batch failed: back to the front, last first, so the order is 1 2 3 4 again.
  q.prepend(5, taken[1]!);
  q.prepend(5, taken[0]!);
  q.setBusy(5, false);
  assert.equal(q.nextReady(), 5);
  const order: number[] = [];
  for (let s = q.popHead(5); s >= 0; s = q.popHead(5)) order.push(seqOf(q, s));
  assert.deepEqual(order, [1, 2, 3, 4]);
});

test('device queues: a device with a COMPLIANCE trigger moves up as a whole; new devices before backlogged ones; replay last', () => {
  const r = new TriggerRecord();
  const q = new DeviceQueues(64, 4, 8);
  // Device 1 has a backlog (it had triggers left after a batch): OLD.
  queueTrigger(q, r, 1, 10, Lane.TRANSITION);
  q.setBusy(q.nextReady(), true);
  queueTrigger(q, r, 1, 11, Lane.TRANSITION);
  q.setBusy(1, false);
  assert.equal(q.listOfDevice(1), ReadyList.OLD);
  // Device 2 gets its first trigger: NEW, served before device 1.
  queueTrigger(q, r, 2, 20, Lane.TRANSITION);
  assert.equal(q.listOfDevice(2), ReadyList.NEW);
  // Device 3: a TRANSITION trigger, then a COMPLIANCE one: the device moves up with both, in order.
  queueTrigger(q, r, 3, 30, Lane.TRANSITION);
  queueTrigger(q, r, 3, 31, Lane.COMPLIANCE);
  assert.equal(q.listOfDevice(3), ReadyList.COMPLIANCE);
  // Device 4's first trigger is a parked dead letter: served only when nothing else is ready.
  const parked = queueTrigger(q, r, 4, 40, Lane.TRANSITION);
  q.i32[parked * DREC_STRIDE_I32 + DREC_REASON_I32] = 2;
  q.relist(4, false);
  assert.equal(q.listOfDevice(4), ReadyList.REPLAY);
  const served: number[] = [];
  for (let d = q.nextReady(); d >= 0; d = q.nextReady()) {
    for (let s = q.popHead(d); s >= 0; s = q.popHead(d)) served.push(seqOf(q, s));
  }
  assert.deepEqual(served, [30, 31, 20, 10, 11, 40]);
});

test('device queues: with live devices always ready, the replay lane still gets one turn in REPLAY_TURN_EVERY, and a COMPLIANCE trigger held behind a parked one leaves with it', () => {
  const r = new TriggerRecord();
  const q = new DeviceQueues(256, 4, 8);
  // Device 5: a parked dead letter, then a COMPLIANCE trigger behind it.
  const parked = queueTrigger(q, r, 5, 50, Lane.TRANSITION);
  q.i32[parked * DREC_STRIDE_I32 + DREC_REASON_I32] = 2;
  queueTrigger(q, r, 5, 51, Lane.COMPLIANCE);
  q.relist(5, false);
  assert.equal(q.listOfDevice(5), ReadyList.REPLAY, 'the parked head decides: behind live traffic');
  // Devices 1 and 2 always have live triggers waiting: each turn serves one, which queues another.
  let seq = 100;
  for (const d of [1, 2]) queueTrigger(q, r, d, seq++, Lane.TRANSITION);
  const served: number[] = [];
  let turns = 0;
  while (served.length === 0 && turns < 10 * REPLAY_TURN_EVERY) {
    const d = q.nextReady();
    turns++;
    assert.ok(d >= 0);
    if (d === 5) for (let s = q.popHead(d); s >= 0; s = q.popHead(d)) served.push(seqOf(q, s));
    else {
      q.popHead(d);
      queueTrigger(q, r, d, seq++, Lane.TRANSITION);
    }
  }
  assert.equal(turns, REPLAY_TURN_EVERY, 'the replay lane went first at its turn');
  assert.deepEqual(served, [50, 51], 'the parked trigger, then the COMPLIANCE one behind it, in order');
});

test('device queues: the reserved slots are only for COMPLIANCE triggers', () => {
  const r = new TriggerRecord();
  const q = new DeviceQueues(8, 2, 4);
  for (let s = 1; s <= 6; s++) queueTrigger(q, r, s & 3, s, Lane.TRANSITION);
  assert.equal(q.hasRoom(Lane.TRANSITION), false, 'reserved slice refused');
  assert.equal(q.allocate(Lane.TRANSITION), -1);
  queueTrigger(q, r, 0, 100, Lane.COMPLIANCE);
  queueTrigger(q, r, 1, 101, Lane.COMPLIANCE);
  assert.equal(q.allocate(Lane.COMPLIANCE), -1, 'full');
  assert.equal(q.used, 8);
});

test('router: by fence id, tag, type and lane through the fence catalog; unsubscribed downstreams get nothing', () => {
  const catalog = new FenceCatalog({
    fenceId: (g, i) => (i < 1000 ? `g${g}f${i}` : undefined),
    fenceTags: (_g, i) => (i % 2 === 0 ? ['compliance'] : []),
  });
  const r = new TriggerRouter(
    [
      undefined,
      { fenceIds: ['g1f3'] },
      { tags: ['compliance'] },
      { types: [TriggerType.DWELL] },
      { lanes: [Lane.COMPLIANCE] },
    ],
    catalog,
  );
  const h = (g: number, i: number): number => catalog.handleOf(g, i);
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, h(1, 3)), 0b00001 | 0b00010);
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, h(1, 4)), 0b00001 | 0b00100);
  assert.equal(r.route(TriggerType.DWELL, Lane.COMPLIANCE, h(1, 5)), 0b00001 | 0b01000 | 0b10000);
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, h(2, 3)), 0b00001, 'another generation, another id');
  assert.equal(h(1, 3), catalog.intern('g1f3', []), 'one handle per identity, however it is reached');
  assert.equal(h(1, 5000), -1, 'an index the names do not know');
  assert.equal(catalog.json(h(1, 4)), '"fenceId":"g1f4","tags":["compliance"]');
});

test('dead-letter file: appends durably, reports PENDING records after reopen, rewrites a status, cuts a torn tail', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlq-'));
  const namer = new IndexNamer();
  const catalog = new FenceCatalog(namer);
  const codec = new TriggerCodec(
    7,
    { ...namerIdentity(namer), fenceIdBytes: (h) => catalog.idBytes(h), fenceTagsBytes: (h) => catalog.tagsBytes(h) },
    0,
  );
  const r = new TriggerRecord();
  const buf = new RecordBuffer(1 << 16);
  let length = 0;
  const dlq = new DeadLetterFile(dir, 'hook', null);
  for (let s = 1; s <= 5; s++) {
    r.set(s, TriggerType.EXIT, Lane.TRANSITION, 1, 3);
    const rec = dispatchRecord(r, catalog.handleOf(1, s), DeadLetterReason.UNDELIVERABLE);
    length += codec.encode(
      rec.f64,
      rec.i32,
      0,
      0,
      buf,
      length,
      buf.byteLength,
      s === 2 ? DeadLetterStatus.FINAL : DeadLetterStatus.PENDING,
    );
  }
  assert.equal(dlq.ensureRoom(), true);
  const at = dlq.append(buf, length, 5, 4, 1);
  assert.equal(positionOffset(at), FILE_HEADER_BYTES);
  // Seq 1 was re-delivered; seq 2 was written final.
  dlq.setStatus(at, DeadLetterStatus.RESOLVED);
  assert.ok(recordLength(buf, 0, length) > 96);
  dlq.close();
  // A crash mid-append: half a record at the end.
  fs.appendFileSync(dlq.filePath, Buffer.alloc(40, 7));
  const pending: { seq: number; device: string | number; fence: string; position: number }[] = [];
  const again = new DeadLetterFile(dir, 'hook', (b, a, position) => {
    const who = readTriggerIdentity(b, a);
    pending.push({ seq: who.seq, device: who.deviceId, fence: who.fenceId, position });
  });
  assert.equal(again.recoveredTornBytes, 40);
  assert.equal(again.recordCount, 5);
  assert.deepEqual(
    pending.map((p) => p.seq),
    [3, 4, 5],
    'seq 1 resolved, seq 2 final: not pending',
  );
  assert.deepEqual([pending[0]!.device, pending[0]!.fence], ['device-3', 'fence-1-3'], 'ids, not slots');
  again.close();
  new DeadLetterFile(path.join(dir, 'x'), 'a b', null).close();
  assert.throws(() => new DeadLetterFile(path.join(dir, 'x'), 'a_b', null), /belongs to another downstream than "a_b"/);
});

test('retry-after: seconds and HTTP dates', () => {
  assert.equal(parseRetryAfterMs('2', 0), 2000);
  assert.equal(parseRetryAfterMs(new Date(10_000).toUTCString(), 5_000), 5000);
  assert.equal(parseRetryAfterMs('soon', 0), undefined);
});

test('sink results: 2xx delivered; 408, 425, 429 and 5xx are failures to retry; other 4xx (and 3xx) refuse for good; connection refused apart', () => {
  for (const status of [200, 204]) assert.equal(classifyResult({ status }), Outcome.OK, String(status));
  for (const status of [408, 425, 429, 500, 503])
    assert.equal(classifyResult({ status }), Outcome.LOSS, String(status));
  for (const status of [302, 400, 404, 413, 422])
    assert.equal(classifyResult({ status }), Outcome.REJECTED, String(status));
  assert.equal(classifyResult({ status: 0, error: 'timeout' }), Outcome.LOSS);
  assert.equal(classifyResult({ status: 0, error: 'refused' }), Outcome.REFUSED);
});

/**
 * Twenty one-trigger batches of 20 devices through a dispatcher whose clock is `clock.ns` to one downstream whose sink
 * is `deliver` (gradient limit from 4, at most 16 in flight); resolves with the downstream's limiter once all are
 * delivered.
 */
async function twentyThrough(
  clock: { ns: number },
  deliver: (batch: TriggerBatch) => Promise<SinkResult>,
): Promise<Limiter> {
  const { Dispatcher } = await import('../../src/dispatch/dispatcher.js');
  const d = new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'one-ds-')),
    namer: new IndexNamer(),
    maxDevices: 64,
    clock: () => clock.ns,
    downstreams: [
      {
        name: 'one',
        sink: { deliver, close: async () => undefined },
        limit: new GradientLimit({ initialLimit: 4, minLimit: 2 }),
        safetyCap: 16,
        maxBatchTriggers: 1,
      },
    ],
  });
  const r = new TriggerRecord();
  for (let i = 1; i <= 20; i++) d.offer(r.set(i, 0, 1, 1, i).f64, r.i32, 0, 0);
  for (let k = 0; k < 40 && !d.isIdle; k++) {
    d.pump();
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(d.totals().delivered, 20);
  const limiter = d.downstreams[0]!.limiter;
  await d.close(1000);
  return limiter;
}

test('downstream: a sink that measures the downstream where it runs (serviceNs) gives the limiter that, not the round trip', async () => {
  const clock = { ns: 1e12 };
  // Each call takes 50 ms end to end on the dispatcher's clock, of which the downstream itself took 2 ms.
  const limiter = await twentyThrough(clock, async () => {
    clock.ns += 50e6;
    return { status: 200, serviceNs: 2e6 };
  });
  assert.equal(limiter.rttMinNs, 2e6, 'RTT-min is the service time, not the 50 ms round trip');
});

test('downstream: a batch the sink sent in several requests (unsampled) is delivered, and the limiter takes no sample from it', async () => {
  const clock = { ns: 1e12 };
  // The batches of odd seqs took several requests each (800 ms on the clock); the others one (5 ms).
  const limiter = await twentyThrough(clock, async (batch) => {
    const parts = batch.seq(0) % 2 === 1;
    clock.ns += parts ? 800e6 : 5e6;
    return parts ? { status: 200, unsampled: true } : { status: 200 };
  });
  assert.equal(limiter.ignored, 10, 'the ten batches sent in parts released without a sample');
  assert.equal(limiter.rttCount, 10, 'the ten sent in one request each gave a sample');
});

test('downstream: a failed batch naming triggers delivered before the failure settles them; one behind a trigger of its device that is sent again goes again with it, in order', async () => {
  const { Dispatcher } = await import('../../src/dispatch/dispatcher.js');
  const calls: string[][] = [];
  const d = new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'part-')),
    namer: new IndexNamer(),
    maxDevices: 64,
    downstreams: [
      {
        name: 'parts',
        sink: {
          deliver: async (batch: TriggerBatch) => {
            const sent = Array.from({ length: batch.count }, (_, i) => `${batch.deviceSlot(i)}/${batch.seq(i)}`);
            calls.push(sent);
            if (calls.length > 1) return { status: 200 };
            // Every trigger but device 2's first is named delivered: its later ones must go again behind it.
            const first2 = sent.indexOf('2/4');
            return { status: 503, delivered: sent.map((_, i) => i).filter((i) => i !== first2) };
          },
          close: async () => undefined,
        },
        limit: new GradientLimit({ initialLimit: 4, minLimit: 2 }),
        safetyCap: 16,
        maxBatchTriggers: 16,
      },
    ],
  });
  const r = new TriggerRecord();
  for (const [seq, device] of [
    [1, 1],
    [2, 1],
    [3, 1],
    [4, 2],
    [5, 2],
    [6, 2],
  ] as const)
    d.offer(r.set(seq, 0, 1, 1, device).f64, r.i32, 0, 0);
  for (let k = 0; k < 100 && !d.isIdle; k++) {
    d.pump();
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  assert.equal(calls.length, 2, calls.join(' | '));
  assert.deepEqual([...calls[0]!].sort(), ['1/1', '1/2', '1/3', '2/4', '2/5', '2/6'], 'one batch first');
  assert.deepEqual(calls[1], ['2/4', '2/5', '2/6'], "device 2's three again, in order; device 1's not again");
  const t = d.totals();
  assert.equal(t.delivered, 6);
  assert.equal(t.deadLettered, 0);
  await d.close(1000);
});

test('dispatcher: a downstream gone for the run is sent nothing more, uses up no attempt, and a drain does not wait for what it holds', async () => {
  const { Dispatcher } = await import('../../src/dispatch/dispatcher.js');
  let calls = 0;
  const d = new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'gone-')),
    namer: new IndexNamer(),
    maxDevices: 64,
    downstreams: [
      {
        name: 'gone',
        sink: {
          deliver: async () => {
            calls++;
            return { status: 200 };
          },
          close: async () => undefined,
        },
        limit: new GradientLimit({ initialLimit: 4, minLimit: 2 }),
        safetyCap: 16,
        maxBatchTriggers: 1,
      },
    ],
  });
  d.downstreams[0]!.markGone();
  const r = new TriggerRecord();
  for (let i = 1; i <= 10; i++) d.offer(r.set(i, 0, 1, 1, i).f64, r.i32, 0, 0);
  for (let k = 0; k < 10; k++) {
    d.pump();
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(calls, 0, 'nothing sent');
  assert.equal(d.downstreams[0]!.isIdle, false, 'it holds the ten');
  assert.equal(d.isIdle, true, 'a drain does not wait for them');
  await d.drain(60_000);
  const t = d.totals();
  assert.equal(t.delivered, 0);
  assert.equal(t.deadLettered, 0);
  await d.close(1000);
});

test('downstream: devices with a backlog share a batch (one trigger each when many wait); a device with a COMPLIANCE trigger sends what fits at once', async () => {
  const { Dispatcher } = await import('../../src/dispatch/dispatcher.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'share-'));
  const batches: { device: number; seq: number }[][] = [];
  const waiting: (() => void)[] = [];
  const d = new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: 256,
    downstreams: [
      {
        name: 'held',
        // Records each batch and answers it when the test says so.
        sink: {
          deliver: (batch) => {
            const seen: { device: number; seq: number }[] = [];
            for (let k = 0; k < batch.count; k++) seen.push({ device: batch.deviceSlot(k), seq: batch.seq(k) });
            batches.push(seen);
            return new Promise((resolve) => waiting.push(() => resolve({ status: 200 })));
          },
          close: async () => undefined,
        },
        limit: new FixedLimit(1),
        maxBatchTriggers: 16,
      },
    ],
  });
  const r = new TriggerRecord();
  // 100 devices with 20 triggers each, offered device by device; device 200: 10 TRANSITION triggers, then one COMPLIANCE.
  for (let dev = 0; dev < 100; dev++)
    for (let s = 1; s <= 20; s++) d.offer(r.set(s, TriggerType.CROSS, Lane.TRANSITION, 1, dev).f64, r.i32, 0, 0);
  for (let s = 1; s <= 10; s++) d.offer(r.set(s, TriggerType.CROSS, Lane.TRANSITION, 1, 200).f64, r.i32, 0, 0);
  d.offer(r.set(11, TriggerType.ENTER, Lane.COMPLIANCE, 1, 200).f64, r.i32, 0, 0);
  const total = 100 * 20 + 11;
  let delivered = 0;
  while (delivered < total) {
    d.pump();
    await new Promise((resolve) => setImmediate(resolve));
    const answer = waiting.shift();
    if (answer === undefined) continue;
    delivered += batches[batches.length - 1]!.length;
    answer();
  }
  await d.close(1000);
  // The compliance device left first (after the batch already in flight), all 11 of its triggers in one batch.
  const complianceBatch = batches.findIndex((b) => b.some((t) => t.device === 200));
  assert.ok(complianceBatch <= 1, `the device with a COMPLIANCE trigger went first: batch ${complianceBatch}`);
  assert.deepEqual(
    batches[complianceBatch]!.filter((t) => t.device === 200).map((t) => t.seq),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    'its earlier triggers and the compliance one, in one batch',
  );
  // With 100 devices waiting, each batch takes one trigger per device: the first 100 triggers after the compliance
  // batch come from 100 different devices (a device joining the round waits about one trigger per waiting device).
  const after = batches
    .slice(complianceBatch + 1)
    .flat()
    .filter((t) => t.device !== 200);
  const firstRound = new Set(after.slice(0, 96).map((t) => t.device));
  assert.ok(
    firstRound.size >= 90,
    `one trigger per device per turn: ${firstRound.size} devices in the first 96 triggers`,
  );
  // Per-device order and each trigger once.
  const lastSeq = new Map<number, number>();
  for (const t of batches.flat()) {
    assert.ok(t.seq > (lastSeq.get(t.device) ?? 0), `device ${t.device}: seq ${t.seq} after ${lastSeq.get(t.device)}`);
    lastSeq.set(t.device, t.seq);
  }
  assert.equal(batches.flat().length, total);
});
