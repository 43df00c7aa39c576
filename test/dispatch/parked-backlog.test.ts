/**
 * A device parked at a dead letter the receiver keeps refusing. With a backlog in the log: its later triggers wait in
 * the log, not in memory, and those the log loads while it is parked are held there (set aside) rather than in the
 * load window, so the log's loading goes on for every other device, whose triggers all arrive, once each, in seq
 * order; once the parked trigger is settled, its device's follow in order, also across a restart. With little
 * other traffic: the poison's repeated failures alone count once in the breaker's window, so it keeps going alone, no
 * other device is dead-lettered, the breaker stays closed, and the poison is given up after replayGiveUpMs.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { listSegments } from '../../src/durable/backlog-log.js';
import { listSetAsideFiles } from '../../src/durable/set-aside-files.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { DeadLetterReason, DS_LOAD_WAITING_F64, DS_SET_ASIDE_F64, Lane, TriggerType } from '../../src/shm/layout.js';
import { sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 8;
const PER_DEVICE = 30;
/** Device 0's triggers: fewer than half the memory, so its followers loaded behind the parked one fit there. */
const PARKED_DEVICE_TRIGGERS = 6;

/** 24 slots of memory, one trigger a batch, parked after 2 attempts, a breaker that never opens, never given up. */
const SMALL_MEMORY = {
  queueCapacitySlots: 24,
  reservedComplianceSlots: 2,
  maxBatchTriggers: 1,
  maxAttempts: 2,
  replayGiveUpMs: 0,
  breaker: { minimumRequests: 100_000, windowSize: 100_000 },
};

/**
 * Refuses (500) any batch holding a trigger `refuses` names (by device slot and seq; default device 0's first); takes
 * everything else, recording it.
 */
class PoisonSink implements Sink {
  readonly seen: { device: string; seq: number }[] = [];
  constructor(private readonly refuses = (device: number, seq: number): boolean => device === 0 && seq === 1) {}
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    for (let i = 0; i < batch.count; i++)
      if (this.refuses(Number(String(batch.deviceId(i)).slice(7)), batch.seq(i))) return { status: 500 };
    for (let i = 0; i < batch.count; i++) this.seen.push({ device: String(batch.deviceId(i)), seq: batch.seq(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

/** A sink that takes every batch, recording it. */
const takingSink = (): PoisonSink => new PoisonSink(() => false);

/** Offers seq 1..PER_DEVICE to every device (device 0 only its first `deviceZero`), in turn, pumping after each. */
function offerAll(d: Dispatcher, deviceZero: number): void {
  const r = new TriggerRecord();
  for (let seq = 1; seq <= PER_DEVICE; seq++)
    for (let device = seq <= deviceZero ? 0 : 1; device < DEVICES; device++) {
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
      d.pump();
    }
}

/** Each device's triggers the sink took are in seq order, each once. */
function assertInOrderOnce(sink: { seen: readonly { device: string; seq: number }[] }): void {
  const last = new Map<string, number>();
  for (const t of sink.seen) {
    assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order, once`);
    last.set(t.device, t.seq);
  }
}

let lastRunId = 0;

/**
 * A dispatcher over `stateDir` (default a fresh directory) for device slots 0..DEVICES-1 with one downstream `hook` to
 * `sink` (backlog segments of `backlogSegmentMaxBytes`, default 64 MiB).
 */
function poisonedHook(
  sink: Sink,
  options: Record<string, unknown>,
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-')),
  backlogWindowRecords?: number,
  maxDevices = DEVICES,
  backlogSegmentMaxBytes?: number,
): Dispatcher {
  return new Dispatcher({
    stateDir,
    ...(backlogWindowRecords === undefined ? {} : { backlogWindowRecords }),
    ...(backlogSegmentMaxBytes === undefined ? {} : { backlogSegmentMaxBytes }),
    namer: new IndexNamer(),
    maxDevices,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    // Each dispatcher a run of its own, as the router numbers them: an earlier run's records are read by their ids.
    runId: ++lastRunId,
    flushIntervalMs: 5,
    log: () => undefined,
    downstreams: [{ name: 'hook', sink, ...options }],
  });
}

test("a parked device's triggers loaded from the backlog log do not pin the log's load window, and every other device's triggers arrive once, in order", async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { ...SMALL_MEMORY, replayGiveUpMs: 3_600_000 });
  const ds = d.downstreams[0]!;
  offerAll(d, PARKED_DEVICE_TRIGGERS);
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

test("a parked device with more triggers than memory holds: they wait in the backlog log, not in memory, so every other device's triggers arrive once, in order; once the poison is given up its device's follow, in order", async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { ...SMALL_MEMORY, replayGiveUpMs: 1500 });
  const ds = d.downstreams[0]!;
  // Device 0 has as many triggers as every other device: more than the 24 slots of memory.
  offerAll(d, PER_DEVICE);
  const others = (DEVICES - 1) * PER_DEVICE;
  const seenOf = (device: string): number => sink.seen.filter((t) => t.device === device).length;
  const delivered = (): number => sink.seen.length - seenOf('device-0');
  let mostHeldByParked = 0;
  for (let i = 0; i < 3000 && delivered() < others; i++) {
    d.pump();
    if (ds.replayGivenUp === 0) mostHeldByParked = Math.max(mostHeldByParked, ds.queues.queuedOf(0));
    await sleep(2);
  }
  try {
    // Its parked trigger and the few queued before it was parked; the rest wait in the log.
    assert.ok(mostHeldByParked <= 4, `device 0 held at most ${mostHeldByParked} of the 24 slots of memory`);
    assert.equal(ds.replayGivenUp, 0, 'the others were delivered before the poison was given up');
    assert.equal(delivered(), others, 'every other device delivered while device 0 is parked');
    assert.equal(seenOf('device-0'), 0, 'nothing of device 0 overtakes its parked trigger');
    for (let i = 0; i < 2000 && seenOf('device-0') < PER_DEVICE - 1; i++) {
      d.pump();
      await sleep(2);
    }
    assertGivenUpAndFollowed(ds, sink);
    assert.equal(ds.backlog!.loadedOutstanding, 0, 'no loaded record holds the log back');
  } finally {
    await d.close(20);
  }
});

/**
 * Device 0's poison was given up, and its later triggers (2..PER_DEVICE) followed, once each, in order; every device's
 * arrived in order, once; nothing is held.
 */
function assertGivenUpAndFollowed(ds: Dispatcher['downstreams'][number], sink: PoisonSink): void {
  assert.equal(ds.replayGivenUp, 1, 'the poison was given up');
  assert.deepEqual(
    sink.seen.filter((t) => t.device === 'device-0').map((t) => t.seq),
    Array.from({ length: PER_DEVICE - 1 }, (_, k) => k + 2),
    "device 0's later triggers, once each, in order",
  );
  assertInOrderOnce(sink);
  assert.equal(ds.inFlightTriggers, 0, 'nothing held');
}

/** Offers PER_DEVICE triggers to each device, then pumps until every other device's are delivered. */
async function parkDeviceZero(d: Dispatcher, sink: PoisonSink): Promise<void> {
  offerAll(d, PER_DEVICE);
  const others = (DEVICES - 1) * PER_DEVICE;
  for (let i = 0; i < 3000 && sink.seen.length < others; i++) {
    d.pump();
    await sleep(2);
  }
  for (let i = 0; i < 10; i++) {
    d.pump();
    await sleep(2);
  }
  assert.equal(sink.seen.length, others, 'every other device delivered while device 0 is parked');
  assert.ok(d.downstreams[0]!.setAside!.count > 0, 'records of device 0 set aside in the log');
}

/** A dispatcher over a new directory parks device 0 (parkDeviceZero) and stops; returns the directory. */
async function stopParked(): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-'));
  const poison = new PoisonSink();
  const first = poisonedHook(poison, SMALL_MEMORY, dir);
  try {
    await parkDeviceZero(first, poison);
  } finally {
    await first.close(20);
  }
  return dir;
}

/** Pumps `d` until `sink` took `count` triggers (or 6 s passed). */
async function pumpUntil(d: Dispatcher, sink: PoisonSink, count: number): Promise<void> {
  for (let i = 0; i < 3000 && sink.seen.length < count; i++) {
    d.pump();
    await sleep(2);
  }
}

test("a parked device's triggers set aside in the log at a stop: the next start delivers all of them after its parked one, once each, in order, and nothing of another device again", async () => {
  const dir = await stopParked();
  const sink = takingSink();
  const second = poisonedHook(sink, SMALL_MEMORY, dir);
  try {
    await pumpUntil(second, sink, PER_DEVICE);
    assert.deepEqual(
      sink.seen.map((t) => `${t.device}/${t.seq}`),
      Array.from({ length: PER_DEVICE }, (_, k) => `device-0/${k + 1}`),
      "device 0's triggers, its parked one first, once each, in order; nothing else again",
    );
    assert.equal(second.downstreams[0]!.inFlightTriggers, 0, 'nothing held');
  } finally {
    await second.close(20);
  }
});

/**
 * Pumps the dispatcher started after a crash until device 0's triggers arrived: its parked one, then every one set
 * aside (all but the `inMemoryOnly` queued in memory only behind it, which the crash lost), once each, in order. Another
 * device's triggers loaded after the first one set aside may come again (a crash delivers again what the cursor had
 * not passed): each device's in order, each once in this run.
 */
async function assertDeliveredAfterCrash(second: Dispatcher, sink: PoisonSink, inMemoryOnly: number): Promise<void> {
  const expected = [1, ...Array.from({ length: PER_DEVICE - 1 - inMemoryOnly }, (_, k) => k + 2 + inMemoryOnly)];
  for (let i = 0; i < 3000 && sink.seen.filter((t) => t.device === 'device-0').length < expected.length; i++) {
    second.pump();
    await sleep(2);
  }
  assert.ok(inMemoryOnly < 4, `${inMemoryOnly} in memory only`);
  assert.deepEqual(
    sink.seen.filter((t) => t.device === 'device-0').map((t) => t.seq),
    expected,
    "device 0's parked trigger, then every one set aside, once each, in order",
  );
  assertInOrderOnce(sink);
}

test("a crash while a parked device's triggers are set aside in the log: the next start reads the log from before the first of them (the cursor stays there), so all of them arrive after its parked one, in order", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-'));
  const poison = new PoisonSink();
  // Never closed: what it left on disk at its last pass is what the next start finds.
  const crashed = poisonedHook(poison, SMALL_MEMORY, dir);
  await parkDeviceZero(crashed, poison);
  // Device 0's triggers queued in memory behind it before it was parked (2, 3, ...) are held in memory only: a crash
  // loses them, as any trigger in memory only (the metric geofence_dispatch_memory_only_triggers).
  const inMemoryOnly = crashed.downstreams[0]!.memoryOnly;
  const sink = takingSink();
  const second = poisonedHook(sink, SMALL_MEMORY, dir);
  try {
    await assertDeliveredAfterCrash(second, sink, inMemoryOnly);
  } finally {
    await second.close(20);
  }
});

test('a parked device with few triggers behind it keeps them in memory (up to 16, a sixteenth of the memory): the backlog log holds none of them, so its cursor is never pinned by it', async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { ...SMALL_MEMORY, queueCapacitySlots: 64, replayGiveUpMs: 3_600_000 });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  d.offer(r.set(1, TriggerType.CROSS, Lane.TRANSITION, 1, 0).f64, r.i32, 0, 0);
  for (let i = 0; i < 1000 && ds.parked === 0; i++) {
    d.pump();
    await sleep(2);
  }
  // Parked: device 0's next 3 (within a sixteenth of 64 slots) go to the log, and come back into memory behind it.
  for (let seq = 2; seq <= 4; seq++) d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, 1, 0).f64, r.i32, 0, 0);
  offerAll(d, 0);
  const others = (DEVICES - 1) * PER_DEVICE;
  for (let i = 0; i < 3000 && sink.seen.length < others; i++) {
    d.pump();
    await sleep(2);
  }
  try {
    assert.equal(sink.seen.length, others, 'every other device delivered');
    assert.ok(ds.spilled > 0, 'the log took some');
    assert.ok(ds.parked >= 1, 'device 0 is parked');
    // Its 3 behind it in memory (the parked one itself may be out for its replay at this moment).
    assert.ok(ds.queues.queuedOf(0) >= 3, `device 0: ${ds.queues.queuedOf(0)} queued in memory`);
    assert.equal(ds.backlog!.held, 0, 'the log holds none of device 0');
    assert.equal(ds.backlog!.loadedOutstanding, 0);
    assert.equal(ds.backlog!.unread, 0);
    assertInOrderOnce(sink);
  } finally {
    await d.close(20);
  }
});

test("the log holds as many set-aside triggers as it can (8 here): the next one of the parked device waits in memory, and so does the loading, until the parked trigger is settled; then its device's triggers follow in order", async () => {
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { ...SMALL_MEMORY, replayGiveUpMs: 1500 }, undefined, 8);
  const ds = d.downstreams[0]!;
  offerAll(d, PER_DEVICE);
  let stashed = false;
  let mostSetAside = 0;
  const others = (DEVICES - 1) * PER_DEVICE;
  const total = (): number => sink.seen.length;
  for (let i = 0; i < 4000 && total() < others + PER_DEVICE - 1; i++) {
    d.pump();
    // The gauges say so: the loading waits, with 8 set aside.
    if (d.metrics[DS_LOAD_WAITING_F64] === 1) stashed = true;
    mostSetAside = Math.max(mostSetAside, d.metrics[DS_SET_ASIDE_F64]!);
    await sleep(2);
  }
  try {
    assert.equal(ds.replayGivenUp, 1, 'the poison was given up');
    assert.deepEqual(
      sink.seen.filter((t) => t.device === 'device-0').map((t) => t.seq),
      Array.from({ length: PER_DEVICE - 1 }, (_, k) => k + 2),
      "device 0's later triggers, once each, in order",
    );
    assert.ok(stashed, 'a record of device 0 waited in memory for its place');
    assert.equal(mostSetAside, 8);
    assert.equal(d.metrics[DS_SET_ASIDE_F64], 0);
    assert.equal(d.metrics[DS_LOAD_WAITING_F64], 0);
    assert.equal(total(), others + PER_DEVICE - 1, 'every other trigger delivered');
    assertInOrderOnce(sink);
    assert.equal(ds.inFlightTriggers, 0, 'nothing held');
  } finally {
    await d.close(20);
  }
});

test('a device the receiver refuses every trigger of: once its parked trigger is given up, at most 16 of its set-aside triggers come back into memory, so when the next is parked the rest still wait in the log, and every other device goes on', async () => {
  const sink = new PoisonSink((device) => device === 0);
  const d = poisonedHook(sink, { ...SMALL_MEMORY, queueCapacitySlots: 64, replayGiveUpMs: 200 });
  const ds = d.downstreams[0]!;
  offerAll(d, PER_DEVICE);
  const others = (DEVICES - 1) * PER_DEVICE;
  let mostHeld = 0;
  const until = Date.now() + 15_000;
  while (Date.now() < until && (sink.seen.length < others || ds.replayGivenUp < 3)) {
    d.pump();
    mostHeld = Math.max(mostHeld, ds.queues.queuedOf(0));
    await sleep(2);
  }
  try {
    assert.ok(ds.replayGivenUp >= 3, `${ds.replayGivenUp} of device 0's triggers given up one after another`);
    assert.ok(ds.setAside!.count > 0, 'the rest of device 0 still waits in the log');
    assert.ok(mostHeld <= 17, `device 0 held at most ${mostHeld} of the 64 slots`);
    assert.equal(sink.seen.length, others, 'every other device delivered');
    assert.equal(sink.seen.filter((t) => t.device === 'device-0').length, 0);
    assertInOrderOnce(sink);
  } finally {
    await d.close(20);
  }
});

test("a start that carries over a parked device's triggers (more than memory holds) still loads every other device's from the log", async () => {
  const dir = await stopParked();
  // Device 0 is still refused: its 30 triggers carried over stay in memory behind its parked one.
  const sink = new PoisonSink();
  const second = poisonedHook(sink, SMALL_MEMORY, dir);
  const ds = second.downstreams[0]!;
  try {
    assert.ok(ds.queues.used >= PER_DEVICE - 2, `${ds.queues.used} carried over into memory`);
    // 30 more triggers for every other device: more than the 24 slots of memory, so most wait in the log.
    const r = new TriggerRecord();
    for (let seq = PER_DEVICE + 1; seq <= 2 * PER_DEVICE; seq++)
      for (let device = 1; device < DEVICES; device++) {
        second.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
        second.pump();
      }
    const others = (DEVICES - 1) * PER_DEVICE;
    for (let i = 0; i < 3000 && sink.seen.length < others; i++) {
      second.pump();
      await sleep(2);
    }
    assert.ok(ds.spilled > 0, 'the log took some');
    assert.equal(sink.seen.length, others, 'every other device delivered while device 0 stays parked');
    assertInOrderOnce(sink);
  } finally {
    await second.close(20);
  }
});

test('many parked devices together keep few of their triggers in memory (only while three quarters of it are free): the loading goes on for every other device', async () => {
  const PARKED = 12;
  const ALL = 24;
  const PER = 20;
  const sink = new PoisonSink((device, seq) => seq === 1 && device < PARKED);
  const d = poisonedHook(
    sink,
    { ...SMALL_MEMORY, queueCapacitySlots: 64, replayGiveUpMs: 3_600_000 },
    undefined,
    undefined,
    ALL,
  );
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  for (let device = 0; device < PARKED; device++)
    d.offer(r.set(1, TriggerType.CROSS, Lane.TRANSITION, 1, device).f64, r.i32, 0, 0);
  for (let i = 0; i < 2000 && ds.parked < PARKED; i++) {
    d.pump();
    await sleep(2);
  }
  assert.equal(ds.parked, PARKED, 'every poisoned device parked at its first trigger');
  for (let seq = 1; seq <= PER; seq++)
    for (let device = seq === 1 ? PARKED : 0; device < ALL; device++) {
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
      d.pump();
    }
  const others = (ALL - PARKED) * PER;
  let mostParkedMemory = 0;
  for (let i = 0; i < 3000 && sink.seen.length < others; i++) {
    d.pump();
    let held = 0;
    for (let device = 0; device < PARKED; device++) held += ds.queues.queuedOf(device);
    mostParkedMemory = Math.max(mostParkedMemory, held);
    await sleep(2);
  }
  try {
    assert.ok(mostParkedMemory < 32, `the parked devices held at most ${mostParkedMemory} of the 64 slots`);
    assert.equal(sink.seen.length, others, 'every other device delivered while 12 stay parked');
    assert.ok(ds.setAside!.count > 0, 'the parked devices wait in the log');
    assertInOrderOnce(sink);
  } finally {
    await d.close(20);
  }
});

/** Backlog segments of 1 KiB: device 0's set-aside triggers lie in many of them. */
const SMALL_SEGMENTS = 1024;

/**
 * Offers seq 1..PER_DEVICE to every device, a seq a pass, 3 ms apart, so the backlog log's flushes (every 5 ms) fill
 * several segments; `each` runs after each pass.
 */
async function offerSlowly(d: Dispatcher, each: () => void = () => undefined): Promise<void> {
  const r = new TriggerRecord();
  for (let seq = 1; seq <= PER_DEVICE; seq++) {
    for (let device = 0; device < DEVICES; device++) {
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
      d.pump();
    }
    each();
    await sleep(3);
  }
}

/** Pumps `d` `passes` times, 2 ms apart (flushes and commits run every 5 ms). */
async function pumpFor(d: Dispatcher, passes: number): Promise<void> {
  for (let i = 0; i < passes; i++) {
    d.pump();
    await sleep(2);
  }
}

test("a parked device's set-aside triggers do not keep the backlog log's disk: those that alone keep older segments move to a set-aside file, the segments go while it stays parked, and once it goes on its triggers follow in order and the file goes", async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-moved-'));
  const dir = path.join(stateDir, 'hook');
  const sink = new PoisonSink();
  const d = poisonedHook(sink, { ...SMALL_MEMORY, replayGiveUpMs: 2000 }, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  const ds = d.downstreams[0]!;
  try {
    await offerSlowly(d);
    const others = (DEVICES - 1) * PER_DEVICE;
    for (let i = 0; i < 3000 && sink.seen.length < others; i++) {
      d.pump();
      await sleep(2);
    }
    await pumpFor(d, 20);
    assert.equal(sink.seen.length, others, 'every other device delivered while device 0 is parked');
    assert.equal(ds.replayGivenUp, 0, 'device 0 still parked');
    assert.ok(ds.setAside!.count > 0, 'device 0 has triggers set aside');
    // Segments are numbered from 1 as they are started.
    const started = listSegments(dir).at(-1)!;
    assert.ok(started >= 4, `${started} segments started`);
    assert.ok(listSegments(dir).length <= 2, `segments left while parked: ${listSegments(dir).length} of ${started}`);
    assert.ok(ds.backlog!.setAsideFiles.moved > 0, 'moved to a set-aside file');
    assert.ok(listSetAsideFiles(dir).length >= 1);
    for (let i = 0; i < 3000 && sink.seen.length < others + PER_DEVICE - 1; i++) {
      d.pump();
      await sleep(2);
    }
    await pumpFor(d, 10);
    assertGivenUpAndFollowed(ds, sink);
    assert.deepEqual(listSetAsideFiles(dir), [], 'the set-aside files went with their last trigger');
  } finally {
    await d.close(20);
  }
});

/**
 * Offers slowly (offerSlowly) to a dispatcher with small segments and pumps until every other device's triggers are
 * delivered, so device 0's set-aside triggers are moved to a set-aside file.
 */
async function parkMoved(d: Dispatcher, sink: PoisonSink, dir: string): Promise<void> {
  await offerSlowly(d);
  await pumpUntil(d, sink, (DEVICES - 1) * PER_DEVICE);
  await pumpFor(d, 10);
  assert.equal(sink.seen.length, (DEVICES - 1) * PER_DEVICE, 'every other device delivered while device 0 is parked');
  assert.ok(d.downstreams[0]!.backlog!.setAsideFiles.moved > 0, 'moved to a set-aside file');
  assert.ok(listSetAsideFiles(dir).length >= 1);
}

/**
 * A dispatcher over a new directory parks device 0 with its triggers moved to a set-aside file (parkMoved) and is
 * never closed: what it left on disk at its last pass is what the next start finds. Returns the directories and how
 * many of device 0's triggers it held in memory only (lost with it).
 */
async function crashParkedMoved(): Promise<{ stateDir: string; dir: string; inMemoryOnly: number }> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-moved-crash-'));
  const dir = path.join(stateDir, 'hook');
  const poison = new PoisonSink();
  const crashed = poisonedHook(poison, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  await parkMoved(crashed, poison, dir);
  return { stateDir, dir, inMemoryOnly: crashed.downstreams[0]!.memoryOnly };
}

test("a stop while a parked device's triggers lie in a set-aside file: the pending file takes them and the file goes; the next start delivers them after its parked one, once each, in order", async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'parked-moved-stop-'));
  const dir = path.join(stateDir, 'hook');
  const poison = new PoisonSink();
  const first = poisonedHook(poison, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  try {
    await parkMoved(first, poison, dir);
  } finally {
    await first.close(20);
  }
  assert.deepEqual(listSetAsideFiles(dir), [], 'removed at the stop');
  const sink = takingSink();
  const second = poisonedHook(sink, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  try {
    await pumpUntil(second, sink, PER_DEVICE);
    await pumpFor(second, 10);
    assert.deepEqual(
      sink.seen.map((t) => `${t.device}/${t.seq}`),
      Array.from({ length: PER_DEVICE }, (_, k) => `device-0/${k + 1}`),
      "device 0's triggers, its parked one first, once each, in order; nothing else again",
    );
  } finally {
    await second.close(20);
  }
});

test("a crash while a parked device's triggers lie in a set-aside file: the next start carries them over in front of the log (through the pending file), so all of them arrive after its parked one, once each, in order", async () => {
  const { stateDir, dir, inMemoryOnly } = await crashParkedMoved();
  const sink = takingSink();
  const second = poisonedHook(sink, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  assert.deepEqual(
    listSetAsideFiles(dir),
    [],
    'the start wrote what it took of them to the pending file, and removed them',
  );
  assert.ok(fs.existsSync(path.join(dir, 'pending.bin')));
  try {
    await assertDeliveredAfterCrash(second, sink, inMemoryOnly);
    await pumpFor(second, 20);
    assert.equal(second.downstreams[0]!.inFlightTriggers, 0, 'nothing held');
    assert.equal(
      fs.existsSync(path.join(dir, 'pending.bin')),
      false,
      'the pending file that took them over went once they were delivered',
    );
    assert.deepEqual(listSetAsideFiles(dir), [], 'and no set-aside file is left');
  } finally {
    await second.close(20);
  }
});

test("a crash while a parked device's triggers lie in a set-aside file, then a start that keeps it parked and stops: the start after delivers its triggers once each, in order, and nothing the run between delivered", async () => {
  const { stateDir, dir, inMemoryOnly } = await crashParkedMoved();
  // Still refused: device 0 stays parked; what the crash gives back of the others is delivered here.
  const between = new PoisonSink();
  const second = poisonedHook(between, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  try {
    await pumpFor(second, 200);
    assert.ok(second.downstreams[0]!.parked >= 1, 'device 0 parked again');
    assertInOrderOnce(between);
  } finally {
    await second.close(20);
  }
  assert.deepEqual(listSetAsideFiles(dir), []);
  const sink = takingSink();
  const third = poisonedHook(sink, SMALL_MEMORY, stateDir, undefined, DEVICES, SMALL_SEGMENTS);
  try {
    await pumpUntil(third, sink, PER_DEVICE - inMemoryOnly);
    await pumpFor(third, 20);
    assert.deepEqual(
      sink.seen.map((t) => `${t.device}/${t.seq}`),
      [1, ...Array.from({ length: PER_DEVICE - 1 - inMemoryOnly }, (_, k) => k + 2 + inMemoryOnly)].map(
        (seq) => `device-0/${seq}`,
      ),
      "device 0's parked trigger, then every one set aside, once each, in order; nothing else again",
    );
  } finally {
    await third.close(20);
  }
});
