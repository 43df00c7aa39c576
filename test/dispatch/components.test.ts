import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DeadLetterReason,
  DREC_STRIDE_BYTES,
  DREC_STRIDE_F64,
  DREC_TIME_NS_F64,
  Lane,
  TRG_SEQ_F64,
  TriggerType,
} from '../../src/shm/layout.js';
import { BreakerState, CircuitBreaker } from '../../src/dispatch/breaker.js';
import { CreditWindow } from '../../src/dispatch/credits.js';
import { DeadLetterFile, DEAD_LETTER_FILE_HEADER_BYTES } from '../../src/dispatch/dead-letter/file.js';
import { DeadLetterRing } from '../../src/dispatch/dead-letter/ring.js';
import { Limiter, NO_PERMIT } from '../../src/dispatch/limiter.js';
import { FixedLimit, GradientLimit } from '../../src/dispatch/limits/index.js';
import { TriggerRouter } from '../../src/dispatch/router.js';
import { parseRetryAfterMs } from '../../src/dispatch/sinks/webhook-sink.js';
import { TriggerQueue } from '../../src/dispatch/trigger-queue.js';
import type { TriggerNamer } from '../../src/dispatch/sinks/format.js';
import { TriggerRecord } from './fixtures.js';

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
  const b = new CircuitBreaker({ minimumRequests: 4, windowSize: 10, failureRateThreshold: 0.5, openDurationNs: 100 * MS });
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

test('queue: COMPLIANCE served first, FIFO within a class, reserved slots only for COMPLIANCE', () => {
  const r = new TriggerRecord();
  const q2 = new TriggerQueue(8, 2);
  for (let s = 1; s <= 6; s++) assert.equal(q2.push(r.set(s, 0, Lane.TRANSITION, 1, 1).f64, r.i32, 0, 0, s, 0), true);
  assert.equal(q2.push(r.set(7, 0, Lane.TRANSITION, 1, 1).f64, r.i32, 0, 0, 7, 0), false, 'reserved slice refused');
  assert.equal(q2.push(r.set(100, 0, Lane.COMPLIANCE, 1, 1).f64, r.i32, 0, 0, 8, 0), true);
  assert.equal(q2.push(r.set(101, 0, Lane.COMPLIANCE, 1, 1).f64, r.i32, 0, 0, 9, 0), true);
  assert.equal(q2.push(r.set(102, 0, Lane.COMPLIANCE, 1, 1).f64, r.i32, 0, 0, 10, 0), false, 'full');
  const order: number[] = [];
  for (;;) {
    const slot = q2.popSlot();
    if (slot < 0) break;
    order.push(q2.f64[slot * DREC_STRIDE_F64 + TRG_SEQ_F64]!);
    assert.ok(q2.f64[slot * DREC_STRIDE_F64 + DREC_TIME_NS_F64]! > 0);
    q2.freeSlot(slot);
  }
  assert.deepEqual(order, [100, 101, 1, 2, 3, 4, 5, 6]);
});

test('router: by fence id, tag, type and lane; unsubscribed downstreams get nothing', () => {
  const namer: TriggerNamer = {
    deviceId: (s) => `d${s}`,
    fenceId: (g, i) => `g${g}f${i}`,
    fenceTags: (_g, i) => (i % 2 === 0 ? ['compliance'] : []),
  };
  const r = new TriggerRouter(
    [undefined, { fenceIds: ['g1f3'] }, { tags: ['compliance'] }, { types: [TriggerType.DWELL] }, { lanes: [Lane.COMPLIANCE] }],
    namer,
  );
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, 1, 3), 0b00001 | 0b00010);
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, 1, 4), 0b00001 | 0b00100);
  assert.equal(r.route(TriggerType.DWELL, Lane.COMPLIANCE, 1, 5), 0b00001 | 0b01000 | 0b10000);
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, 2, 3), 0b00001, 'another generation, another id');
  assert.equal(r.route(TriggerType.ENTER, Lane.TRANSITION, 1, 100_000), 0b00101, 'table grows');
});

test('dead-letter file: appends durably, recovers after reopen, cuts a torn tail, keeps the replay cursor', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlq-'));
  const ring = new DeadLetterRing(8);
  const r = new TriggerRecord();
  for (let s = 1; s <= 5; s++) ring.put(r.set(s, 0, Lane.TRANSITION, 1, 1).f64, r.i32, 0, 0, 0, DeadLetterReason.UNDELIVERABLE, 1, s);
  // Same gather the dispatcher's flush does: ordinals and checksums.
  const f = new DeadLetterFile(dir, 'hook');
  const i32 = ring.i32;
  const f64 = ring.f64;
  for (let k = 0; k < 5; k++) {
    f64[k * 12 + 9] = k;
    let h = 0x811c9dc5 | 0;
    for (let c = 0; c < 23; c++) {
      const v = i32[k * 24 + c]!;
      for (let sh = 0; sh < 32; sh += 8) h = Math.imul(h ^ ((v >>> sh) & 0xff), 0x01000193);
    }
    i32[k * 24 + 23] = h;
  }
  f.append(ring.bytes, 5);
  f.writeCursor(2);
  f.close();
  // A crash mid-append: half a record at the end.
  fs.appendFileSync(f.filePath, Buffer.alloc(DREC_STRIDE_BYTES / 2, 7));
  const g = new DeadLetterFile(dir, 'hook');
  assert.equal(g.recordCount, 5);
  assert.equal(g.recoveredTornBytes, DREC_STRIDE_BYTES / 2);
  assert.equal(g.replayCursor, 2);
  assert.equal(fs.statSync(g.filePath).size, DEAD_LETTER_FILE_HEADER_BYTES + 5 * DREC_STRIDE_BYTES);
  const back = new Uint8Array(DREC_STRIDE_BYTES * 5);
  assert.equal(g.read(2, 10, back, 0), 3);
  assert.equal(new Float64Array(back.buffer)[TRG_SEQ_F64], 3);
  g.close();
  // A corrupt record (bad checksum) ends the valid prefix.
  const fd = fs.openSync(g.filePath, 'r+');
  fs.writeSync(fd, Buffer.from([1, 2, 3, 4]), 0, 4, DEAD_LETTER_FILE_HEADER_BYTES + 3 * DREC_STRIDE_BYTES);
  fs.closeSync(fd);
  const h = new DeadLetterFile(dir, 'hook');
  assert.equal(h.recordCount, 3);
  h.close();
  new DeadLetterFile(dir, 'a b').close();
  assert.throws(() => new DeadLetterFile(dir, 'a_b'), /belongs to another downstream than a_b/);
});

test('retry-after: seconds and HTTP dates', () => {
  assert.equal(parseRetryAfterMs('2', 0), 2000);
  assert.equal(parseRetryAfterMs(new Date(10_000).toUTCString(), 5_000), 5000);
  assert.equal(parseRetryAfterMs('soon', 0), undefined);
});

test('downstream: a sink that measures the downstream where it runs (serviceNs) gives the limiter that, not the round trip', async () => {
  const { Dispatcher } = await import('../../src/dispatch/dispatcher.js');
  const { IndexNamer } = await import('../../src/dispatch/sinks/format.js');
  let clockNs = 1e12;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ns-'));
  const d = new Dispatcher({
    deadLetterDir: dir,
    namer: new IndexNamer(),
    clock: () => clockNs,
    downstreams: [
      {
        name: 'bridged',
        // Each call takes 50 ms end to end on the dispatcher's clock, of which the downstream itself took 2 ms.
        sink: {
          deliver: async () => {
            clockNs += 50e6;
            return { status: 200, serviceNs: 2e6 };
          },
          close: async () => undefined,
        },
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
  const limiter = d.downstreams[0]!.limiter;
  assert.equal(d.totals().delivered, 20);
  assert.equal(limiter.rttMinNs, 2e6, 'RTT-min is the service time, not the 50 ms round trip');
  await d.close(1000);
});
