/**
 * A device parked at a dead letter the receiver keeps refusing, with a backlog in the log: its triggers loaded from
 * the log behind the parked one stop holding the log's cursor back (as those behind it at the park do), so the log's
 * load window and cursor move on for every other device, whose triggers all arrive, once each, in seq order.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 8;
const PER_DEVICE = 30;
/** Device 0's triggers: fewer than half the memory, so its followers loaded behind the parked one fit there. */
const PARKED_DEVICE_TRIGGERS = 6;

/** Refuses (500) any batch holding device 0's first trigger; takes everything else, recording it. */
class PoisonSink implements Sink {
  readonly seen: { device: string; seq: number }[] = [];
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    for (let i = 0; i < batch.count; i++)
      if (batch.deviceId(i) === 'device-0' && batch.seq(i) === 1) return { status: 500 };
    for (let i = 0; i < batch.count; i++) this.seen.push({ device: String(batch.deviceId(i)), seq: batch.seq(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

test("a parked device's triggers loaded from the backlog log do not pin the log: its cursor passes them, and every other device's triggers arrive once, in order", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-backlog-'));
  const sink = new PoisonSink();
  const d = new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    runId: 1,
    flushIntervalMs: 5,
    log: () => undefined,
    downstreams: [
      {
        name: 'hook',
        sink,
        queueCapacitySlots: 24,
        reservedComplianceSlots: 2,
        maxBatchTriggers: 1,
        maxAttempts: 2,
        breaker: { minimumRequests: 100_000, windowSize: 100_000 },
      },
    ],
  });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  for (let seq = 1; seq <= PER_DEVICE; seq++)
    for (let device = seq <= PARKED_DEVICE_TRIGGERS ? 0 : 1; device < DEVICES; device++) {
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
      d.pump();
    }
  const others = (DEVICES - 1) * PER_DEVICE;
  const delivered = (): number => sink.seen.filter((t) => t.device !== 'device-0').length;
  for (let i = 0; i < 3000 && delivered() < others; i++) {
    d.pump();
    await sleep(2);
  }
  for (let i = 0; i < 20; i++) {
    d.pump();
    await sleep(2);
  }
  try {
    assert.equal(delivered(), others, 'every other device delivered');
    assert.ok(ds.parked >= 1, 'device 0 is parked at its first trigger');
    assert.equal(sink.seen.filter((t) => t.device === 'device-0').length, 0, 'nothing of device 0 overtakes it');
    assert.equal(ds.backlog!.loadedOutstanding, 0, 'no loaded record holds the log back');
    const last = new Map<string, number>();
    for (const t of sink.seen) {
      assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order, once`);
      last.set(t.device, t.seq);
    }
  } finally {
    await d.close(20);
  }
});
