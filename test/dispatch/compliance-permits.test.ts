/**
 * Reserved COMPLIANCE permits (`reservedCompliancePermits`): while a downstream's concurrency limit is taken, a device
 * with a COMPLIANCE trigger queued leaves at once on a request beyond the limit, in a batch of such devices only, with
 * its earlier triggers ahead of the compliance one; never beyond the safety cap; and everything still arrives once, in
 * per-device order, with the accounting exact.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import type { DownstreamOptions } from '../../src/dispatch/downstream.js';
import { FixedLimit } from '../../src/dispatch/limits/index.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 32;

/** A downstream whose answers wait until the test releases them; it records each batch as it is sent. */
class HeldSink implements Sink {
  /** Each batch sent, as `device/seq/lane` (C for COMPLIANCE, T otherwise). */
  readonly batches: string[][] = [];
  private readonly waiting: (() => void)[] = [];
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    const items: string[] = [];
    for (let i = 0; i < batch.count; i++)
      items.push(`${String(batch.deviceId(i))}/${batch.seq(i)}/${batch.lane(i) === Lane.COMPLIANCE ? 'C' : 'T'}`);
    this.batches.push(items);
    await new Promise<void>((r) => this.waiting.push(r));
    return { status: 200 };
  }
  /** Answers every request in flight with 200. */
  releaseAll(): void {
    for (const r of this.waiting.splice(0)) r();
  }
  /** Requests waiting for an answer. */
  get inFlight(): number {
    return this.waiting.length;
  }
  async close(): Promise<void> {}
}

/**
 * Two requests fill the limit (devices 0-7, four triggers a batch, devices 8-11 waiting), then device 9 gets a
 * COMPLIANCE trigger behind its TRANSITION one and device 20 a COMPLIANCE trigger of its own; returns what happened next.
 */
async function scenario(
  downstream: Partial<DownstreamOptions>,
): Promise<{ sink: HeldSink; d: Dispatcher; inFlightAfter: number; thirdBatch: string[] | undefined }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reserved-permits-'));
  const sink = new HeldSink();
  const d = new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    flushIntervalMs: 20,
    downstreams: [{ name: 'held', sink, limit: new FixedLimit(2), maxBatchTriggers: 4, ...downstream }],
  });
  const r = new TriggerRecord();
  for (let device = 0; device < 12; device++)
    assert.ok(d.offer(r.set(1, TriggerType.ENTER, Lane.TRANSITION, 1, device).f64, r.i32, 0, 0) >= 1);
  d.pump();
  assert.equal(sink.inFlight, 2, 'the limit (2) is taken');
  assert.deepEqual(sink.batches, [
    ['device-0/1/T', 'device-1/1/T', 'device-2/1/T', 'device-3/1/T'],
    ['device-4/1/T', 'device-5/1/T', 'device-6/1/T', 'device-7/1/T'],
  ]);
  assert.ok(d.offer(r.set(2, TriggerType.EXIT, Lane.COMPLIANCE, 2, 9).f64, r.i32, 0, 0) >= 1);
  assert.ok(d.offer(r.set(1, TriggerType.ENTER, Lane.COMPLIANCE, 3, 20).f64, r.i32, 0, 0) >= 1);
  d.pump();
  d.pump();
  return { sink, d, inFlightAfter: sink.inFlight, thirdBatch: sink.batches[2] };
}

/** Answers everything until the dispatcher is idle; checks each trigger arrived once, in per-device order. */
async function drain(sink: HeldSink, d: Dispatcher, expected = 14): Promise<void> {
  const end = Date.now() + 5000;
  while (!d.isIdle && Date.now() < end) {
    sink.releaseAll();
    d.pump();
    await sleep(1);
  }
  assert.ok(d.isIdle, 'everything was delivered');
  const seen = sink.batches.flat();
  assert.equal(new Set(seen).size, seen.length, 'each trigger once');
  assert.equal(seen.length, expected, 'every trigger offered');
  const last = new Map<string, number>();
  for (const t of seen) {
    const [device, seq] = t.split('/') as [string, string];
    assert.ok(Number(seq) > (last.get(device) ?? 0), `${device}: seq ${seq} after ${last.get(device)}`);
    last.set(device, Number(seq));
  }
  const ds = d.downstreams[0]!;
  assert.equal(ds.offered, ds.delivered, 'accounting: offered = delivered');
  assert.equal(ds.deadLettered, 0, 'no dead letter');
  await d.close(100);
}

test('the limit taken: devices with a COMPLIANCE trigger leave at once on the reserved permit, each with its earlier triggers first, and no other device rides along; the reserve is one request', async () => {
  const { sink, d, inFlightAfter, thirdBatch } = await scenario({});
  assert.equal(inFlightAfter, 3, 'one request beyond the limit, and only one');
  assert.deepEqual(
    thirdBatch,
    ['device-9/1/T', 'device-9/2/C', 'device-20/1/C'],
    'device 9 as a whole in seq order, then device 20; devices 8, 10 and 11 (TRANSITION only) wait',
  );
  const ds = d.downstreams[0]!;
  assert.equal(ds.reservedPermitRequests, 1);
  assert.equal(ds.limiter.inflight, 3);
  // A third COMPLIANCE device now waits: the reserve is in use.
  const r = new TriggerRecord();
  assert.ok(d.offer(r.set(1, TriggerType.ENTER, Lane.COMPLIANCE, 4, 21).f64, r.i32, 0, 0) >= 1);
  d.pump();
  assert.equal(sink.inFlight, 3);
  assert.equal(ds.reservedPermitRequests, 1);
  sink.releaseAll();
  await sleep(5);
  assert.equal(sink.batches[3]?.[0], 'device-21/1/C', `it goes first after: ${JSON.stringify(sink.batches.slice(3))}`);
  await drain(sink, d, 15);
});

test('reservedCompliancePermits 0: the COMPLIANCE trigger waits for a completion like the rest, then goes first', async () => {
  const { sink, d, inFlightAfter, thirdBatch } = await scenario({ reservedCompliancePermits: 0 });
  assert.equal(inFlightAfter, 2, 'nothing beyond the limit');
  assert.equal(thirdBatch, undefined);
  assert.equal(d.downstreams[0]!.reservedPermitRequests, 0);
  sink.releaseAll();
  await sleep(5);
  assert.deepEqual(
    sink.batches[2]?.slice(0, 3),
    ['device-9/1/T', 'device-9/2/C', 'device-20/1/C'],
    'they go first once the limit frees',
  );
  await drain(sink, d);
});

test('the reserve never goes beyond the safety cap', async () => {
  const { sink, d, inFlightAfter } = await scenario({ safetyCap: 2 });
  assert.equal(inFlightAfter, 2, 'the safety cap (2) holds');
  assert.equal(d.downstreams[0]!.reservedPermitRequests, 0);
  await drain(sink, d);
});

test('a bad reservedCompliancePermits is refused with a message naming it', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reserved-permits-'));
  assert.throws(
    () =>
      new Dispatcher({
        stateDir: dir,
        namer: new IndexNamer(),
        maxDevices: DEVICES,
        downstreams: [{ name: 'bad', sink: new HeldSink(), reservedCompliancePermits: 65 }],
      }),
    /bad\.reservedCompliancePermits/,
  );
});
