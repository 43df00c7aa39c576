/**
 * A device parked at a dead letter the receiver keeps refusing. With a backlog in the log: its triggers loaded from the
 * log behind the parked one stop holding the log's cursor back (as those behind it at the park do), so the log's load
 * window and cursor move on for every other device, whose triggers all arrive, once each, in seq order. With little
 * other traffic: the poison's repeated failures alone count once in the breaker's window, so it keeps going alone, no
 * other device is dead-lettered, the breaker stays closed, and the poison is given up after replayGiveUpMs.
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
import { DeadLetterReason, Lane, TriggerType } from '../../src/shm/layout.js';
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

/** Each device's triggers the sink took are in seq order, each once. */
function assertInOrderOnce(sink: PoisonSink): void {
  const last = new Map<string, number>();
  for (const t of sink.seen) {
    assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order, once`);
    last.set(t.device, t.seq);
  }
}

/** A dispatcher over a fresh directory for device slots 0..DEVICES-1 with one downstream `hook` to `sink`. */
function poisonedHook(sink: Sink, options: Record<string, unknown>): Dispatcher {
  return new Dispatcher({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'parked-')),
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    runId: 1,
    flushIntervalMs: 5,
    log: () => undefined,
    downstreams: [{ name: 'hook', sink, ...options }],
  });
}

test("a parked device's triggers loaded from the backlog log do not pin the log: its cursor passes them, and every other device's triggers arrive once, in order", async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, {
    queueCapacitySlots: 24,
    reservedComplianceSlots: 2,
    maxBatchTriggers: 1,
    maxAttempts: 2,
    breaker: { minimumRequests: 100_000, windowSize: 100_000 },
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
    assertInOrderOnce(sink);
  } finally {
    await d.close(20);
  }
});

test('a poison trigger on a downstream with little other traffic: its repeated failures alone do not fill the breaker window, so it stays alone, no other device is dead-lettered, the breaker stays closed, and it is given up after replayGiveUpMs', async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { maxBatchTriggers: 4, maxAttempts: 3, replayGiveUpMs: 3000 });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  const offer = (device: number, seq: number): void =>
    void d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
  offer(0, 1);
  // About 6 triggers a second of other traffic, one device at a time, for 5 s; then until the poison is given up.
  let sent = 0;
  const until = Date.now() + 15_000;
  for (let tick = 0; Date.now() < until && (ds.replayGivenUp === 0 || sent < 35); tick++) {
    if (tick % 30 === 0 && sent < 35) {
      offer(1 + (sent % (DEVICES - 1)), 1 + Math.floor(sent / (DEVICES - 1)));
      sent++;
    }
    d.pump();
    await sleep(5);
  }
  for (let i = 0; i < 100 && sink.seen.filter((t) => t.device !== 'device-0').length < sent; i++) {
    d.pump();
    await sleep(5);
  }
  try {
    assert.equal(sink.seen.filter((t) => t.device !== 'device-0').length, sent, 'every other trigger delivered');
    assert.equal(ds.breaker.opens, 0, 'the breaker never opened');
    assert.equal(ds.deadLetteredByReason[DeadLetterReason.UNDELIVERABLE], 1, 'only the poison was dead-lettered');
    assert.equal(ds.replayGivenUp, 1, 'the poison was given up');
    assertInOrderOnce(sink);
  } finally {
    await d.close(20);
  }
});
