/**
 * Clean restarts in the middle of everything: a seeded run of several dispatchers, one after the other on the same
 * directory, each closing with a short drain deadline while its downstream is slow and flaky, with a memory small
 * enough that triggers spill to the backlog log, load back, fail, park and wait for replay. Across all of them the
 * receiver gets every trigger exactly once and each device's triggers in seq order.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import nodeFs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { DeadLetterDropReason, DS_DAMAGED_RECORDS_F64, Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';
import { sleep, TriggerRecord } from './fixtures.js';
import { scanPendingFile } from '../../src/durable/pending-file.js';
import { readTriggerIdentity } from '../../src/durable/trigger-codec.js';
import { FILE_HEADER_BYTES } from '../../src/durable/file-layout.js';

const DEVICES = 40;

/** A seeded slow, flaky downstream: answers after 0-4 ms, 200 most of the time, 500 otherwise, while `flaky`. */
class SeededSink implements Sink {
  readonly seen: { device: string; seq: number; replay: boolean }[] = [];
  flaky = true;
  private readonly rnd: () => number;
  constructor(seed: number) {
    this.rnd = mulberry32(seed);
  }
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(Math.floor(this.rnd() * 5));
    if (this.flaky && this.rnd() < 0.25) return { status: 500 };
    for (let i = 0; i < batch.count; i++)
      this.seen.push({ device: String(batch.deviceId(i)), seq: batch.seq(i), replay: batch.replay(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

test('restarts with a flaky, slow downstream and a small memory: every trigger once, in per-device order, across five dispatchers', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'restarts-'));
  const sink = new SeededSink(5);
  const rnd = mulberry32(77);
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  let sent = 0;
  for (let run = 0; run < 5; run++) {
    const last = run === 4;
    sink.flaky = !last;
    const d = new Dispatcher({
      stateDir: dir,
      namer: new IndexNamer(),
      maxDevices: DEVICES,
      deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
      runId: run + 1,
      flushIntervalMs: 5,
      downstreams: [
        {
          name: 'hook',
          sink,
          // A small memory: triggers spill to the log and load back; a few attempts: some park for the replay lane.
          queueCapacitySlots: 24,
          reservedComplianceSlots: 2,
          maxBatchTriggers: 6,
          maxAttempts: 2,
          breaker: { minimumRequests: 100_000, windowSize: 100_000 },
        },
      ],
    });
    const ds = d.downstreams[0]!;
    for (let step = 0; step < (last ? 0 : 60); step++) {
      for (let k = 0; k < 10; k++) {
        const device = Math.floor(rnd() * DEVICES);
        const seq = ++seqs[device]!;
        d.offer(
          r.set(seq, TriggerType.CROSS, seq % 7 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION, seq % 5, device).f64,
          r.i32,
          0,
          0,
        );
        sent++;
      }
      d.pump();
      await sleep(1);
    }
    assert.equal(
      ds.offered + ds.recovered,
      ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers,
      `run ${run}: accounting`,
    );
    // A short deadline while the downstream is still slow and flaky: much is left for the next run.
    await d.close(last ? 30_000 : 20);
    assert.equal(ds.final, 0, `run ${run}: nothing final`);
    if (!last) assert.ok(d.carriedOver[0]! > 0, `run ${run}: something carried over (${d.carriedOver[0]})`);
    else assert.equal(d.carriedOver[0], 0, 'the last run delivers everything');
  }
  // Every trigger once, and each device's in seq order.
  const perDevice = new Map<string, number[]>();
  for (const t of sink.seen) {
    let list = perDevice.get(t.device);
    if (list === undefined) perDevice.set(t.device, (list = []));
    list.push(t.seq);
  }
  let total = 0;
  for (const [device, list] of perDevice) {
    const slot = Number(device.slice(7));
    assert.deepEqual(
      list,
      Array.from({ length: seqs[slot]! }, (_, i) => i + 1),
      `${device}: every seq once, in order`,
    );
    total += list.length;
  }
  assert.equal(total, sent);
  assert.ok(
    sink.seen.some((t) => t.replay),
    'some went through the replay lane',
  );
});

/**
 * A dispatcher on `dir` for device slots 0..devices-1 (ids `device-N`), with one downstream `hook` of a small memory:
 * most triggers spill to the backlog log, and those in memory go to the pending file at close.
 */
function smallHook(
  dir: string,
  devices: number,
  log: (line: string) => void,
  sink: Sink,
  runId: number,
  replayFloors?: Float64Array,
): Dispatcher {
  return new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: devices,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    runId,
    flushIntervalMs: 5,
    log,
    ...(replayFloors === undefined ? {} : { replayFloors }),
    downstreams: [
      {
        name: 'hook',
        sink,
        queueCapacitySlots: 24,
        reservedComplianceSlots: 2,
        maxBatchTriggers: 4,
        maxAttempts: 100,
        breaker: { minimumRequests: 100_000, windowSize: 100_000 },
      },
    ],
  });
}

/** Offers seqs 1..perDevice of every device to `d` in turn, a pump after each. */
function offerInTurn(d: Dispatcher, devices: number, perDevice: number): void {
  const r = new TriggerRecord();
  for (let seq = 1; seq <= perDevice; seq++)
    for (let device = 0; device < devices; device++) {
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
      d.pump();
    }
}

/** `offerInTurn`, then 20 pumps a millisecond apart (the downstream takes what it takes, memory loads from the log). */
async function offerAndSettle(d: Dispatcher, devices: number, perDevice: number): Promise<void> {
  offerInTurn(d, devices, perDevice);
  for (let i = 0; i < 20; i++) {
    d.pump();
    await sleep(1);
  }
}

/** A run whose downstream refuses everything: seqs 1..perDevice of every device, offered in turn, then a close. */
async function refusedRun(d: Dispatcher, devices: number, perDevice: number): Promise<void> {
  offerInTurn(d, devices, perDevice);
  await d.close(20);
}

/** A downstream that refuses everything (500) while `refusing`; records what it took. */
class GateSink implements Sink {
  readonly seen: { device: string; seq: number }[] = [];
  constructor(private readonly refusing: boolean) {}
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    if (this.refusing) return { status: 500 };
    for (let i = 0; i < batch.count; i++) this.seen.push({ device: String(batch.deviceId(i)), seq: batch.seq(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

/** A sink that passes its first 10 batches to `sink`, then fails every batch (500). */
function takesTenBatches(sink: Sink): Sink {
  let batches = 0;
  return {
    deliver: (batch) => (++batches <= 10 ? sink.deliver(batch) : Promise.resolve({ status: 500 })),
    close: async () => undefined,
  };
}

/**
 * Run 1 of a stop whose cursor commit is lost: seqs 1..perDevice of every device offered to `d` (its downstream takes
 * some, then refuses: memory holds records loaded from the backlog log), a close, and the cursor file put back as it
 * was before the close, as if its commit never reached the disk.
 */
async function lostCommitRun(d: Dispatcher, dir: string, devices: number, perDevice: number): Promise<void> {
  await offerAndSettle(d, devices, perDevice);
  assert.ok(d.downstreams[0]!.backlog!.loadedOutstanding > 0, 'memory holds records loaded from the log');
  const cursorFile = path.join(dir, 'hook', 'backlog.cursor');
  const cursorBefore = fs.readFileSync(cursorFile);
  await d.close(20);
  assert.ok(d.carriedOver[0]! > 0);
  fs.writeFileSync(cursorFile, cursorBefore);
}

/** Every device of `devices` got seqs 1..perDevice at `sink`, each once, in order. */
function assertEverySeqOnce(sink: GateSink, devices: number, perDevice: number): void {
  const byDevice = new Map<number, number[]>();
  for (const t of sink.seen) {
    const device = Number(t.device.slice(7));
    byDevice.set(device, [...(byDevice.get(device) ?? []), t.seq]);
  }
  for (let device = 0; device < devices; device++)
    assert.deepEqual(
      byDevice.get(device) ?? [],
      Array.from({ length: perDevice }, (_, i) => i + 1),
      `device ${device}: every seq once, in order`,
    );
}

test("replay floors: an earlier run's copies above their device's floor are passed over (pending file and backlog log), the rest delivered in per-device order, the accounting exact at every pump, and the pending file rewritten without them", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-floors-'));
  const PER_DEVICE = 12;
  const FLOOR = 1;
  const devices = 8;
  const lines: string[] = [];
  const open = (sink: Sink, runId: number, replayFloors?: Float64Array): Dispatcher =>
    smallHook(dir, devices, (line) => lines.push(line), sink, runId, replayFloors);
  // Run 1: everything refused; memory (then the pending file) and the backlog log hold it all at its close.
  const d1 = open(new GateSink(true), 1);
  await refusedRun(d1, devices, PER_DEVICE);
  assert.ok(d1.carriedOver[0]! > 0, `the pending file holds triggers (${d1.carriedOver[0]})`);
  assert.equal(d1.downstreams[0]!.delivered, 0);
  // Run 2: the even devices' partitions are read again from a state at seq FLOOR (what is above comes again from the
  // replay); the odd devices' are not (NaN: everything of theirs is taken over).
  const floors = new Float64Array(devices).map((_, device) => (device % 2 === 0 ? FLOOR : NaN));
  const sink = new GateSink(false);
  const d2 = open(sink, 2, floors);
  const ds = d2.downstreams[0]!;
  const passedOver = (devices / 2) * (PER_DEVICE - FLOOR);
  assert.equal(ds.superseded, passedOver, 'every copy above its floor, once');
  assert.ok(
    lines.some((l) => l.includes(`${passedOver} more are derived again`)),
    lines.join('\n'),
  );
  // A later start finds the pending file with what was taken over and without the passed-over copies.
  let kept = 0;
  let passedOverLeft = 0;
  scanPendingFile(path.join(dir, 'hook'), 'hook', (buf, at) => {
    const id = readTriggerIdentity(buf, at);
    if (Number(String(id.deviceId).slice(7)) % 2 === 0 && id.seq > FLOOR) passedOverLeft++;
    else kept++;
  });
  assert.equal(passedOverLeft, 0, 'no passed-over copy left in the pending file');
  assert.ok(kept > 0, 'the pending file keeps what was taken over');
  for (let i = 0; i < 400 && ds.delivered + ds.final < devices * PER_DEVICE - passedOver; i++) {
    d2.pump();
    assert.equal(ds.offered + ds.recovered, ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers, 'accounting');
    await sleep(2);
  }
  await d2.close(5_000);
  assert.equal(ds.final, 0);
  // Per device: the odd ones everything, the even ones up to the floor, each in seq order.
  const perDevice = new Map<number, number[]>();
  for (const t of sink.seen) {
    const device = Number(t.device.slice(7));
    perDevice.set(device, [...(perDevice.get(device) ?? []), t.seq]);
  }
  for (let device = 0; device < devices; device++) {
    const last = device % 2 === 0 ? FLOOR : PER_DEVICE;
    assert.deepEqual(
      perDevice.get(device) ?? [],
      Array.from({ length: last }, (_, i) => i + 1),
      `device ${device}`,
    );
  }
});

test('replay floors with backlog records damaged on disk after the open: the copies among them that the replay derives again are not counted lost, the accounting is exact at every pump, and nothing stays counted that would hold stores or device slots', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-floors-damaged-'));
  const PER_DEVICE = 40;
  const FLOOR = 10;
  const devices = 8;
  const open = (sink: Sink, runId: number, replayFloors?: Float64Array): Dispatcher =>
    smallHook(dir, devices, () => undefined, sink, runId, replayFloors);
  // Run 1: everything refused; most of it spills to the backlog log.
  await refusedRun(open(new GateSink(true), 1), devices, PER_DEVICE);
  // Run 2: the even devices' partitions are read again from seq FLOOR.
  const floors = new Float64Array(devices).map((_, device) => (device % 2 === 0 ? FLOOR : NaN));
  const sink = new GateSink(false);
  const d2 = open(sink, 2, floors);
  const ds = d2.downstreams[0]!;
  const log = ds.backlog!;
  assert.ok(log.recovered > 100, `the backlog log holds most (${log.recovered})`);
  // Then a run of records in the middle of the segment the log writes to is damaged on disk.
  const hookDir = path.join(dir, 'hook');
  const segment = fs.readdirSync(hookDir).filter((f) => /^backlog-.*\.log$/.test(f));
  assert.equal(segment.length, 1);
  const file = path.join(hookDir, segment[0]!);
  const bytes = fs.readFileSync(file);
  const fd = fs.openSync(file, 'r+');
  let at = FILE_HEADER_BYTES;
  for (let k = 0; at < bytes.length; k++) {
    if (k >= 40 && k < 80) fs.writeSync(fd, Buffer.from([0xde, 0xad]), 0, 2, at + 20);
    at += bytes.readInt32LE(at);
  }
  fs.closeSync(fd);
  for (let i = 0; i < 600 && (log.unread > 0 || ds.inFlightTriggers > 0); i++) {
    d2.pump();
    assert.equal(ds.offered + ds.recovered, ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers, 'accounting');
    await sleep(2);
  }
  assert.equal(log.unread, 0);
  assert.equal(log.corrupt, 40, 'the damaged records');
  assert.ok(log.markedLost > 0 && log.markedLost < 40, `copies derived again among them: ${log.markedLost}`);
  assert.equal(ds.final, log.corrupt - log.markedLost, 'only the others are lost');
  assert.equal(ds.inFlightTriggers, 0);
  assert.equal(ds.memoryOnlyTakenBy(Infinity, new Uint8Array(24)), 0, 'nothing holds a partition store back');
  d2.pump();
  for (let device = 0; device < devices; device++) assert.ok(d2.deviceSettled(device), `device ${device} settled`);
  await d2.close(5_000);
  // Per device: seqs rising, the even devices' at or below the floor.
  const perDevice = new Map<number, number[]>();
  for (const t of sink.seen) {
    const device = Number(t.device.slice(7));
    perDevice.set(device, [...(perDevice.get(device) ?? []), t.seq]);
  }
  for (const [device, seqs] of perDevice) {
    assert.ok(
      seqs.every((s, i) => i === 0 || s > seqs[i - 1]!),
      `device ${device} in order`,
    );
    if (device % 2 === 0) assert.ok(seqs.every((s) => s <= FLOOR));
  }
});

test("a stop that wrote its pending file but lost its backlog cursor commit (a second signal, a failed commit): the next start passes over the log's copies of what the pending file holds; every trigger once, in per-device order, the accounting exact", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lost-commit-'));
  const PER_DEVICE = 12;
  const devices = 8;
  const lines: string[] = [];
  const open = (sink: Sink, runId: number): Dispatcher =>
    smallHook(dir, devices, (line) => lines.push(line), sink, runId);
  // Run 1 delivers through the same receiver as run 2.
  const sink = new GateSink(false);
  await lostCommitRun(open(takesTenBatches(sink), 1), dir, devices, PER_DEVICE);

  const delivered1 = sink.seen.length;
  assert.ok(delivered1 > 0);
  const d2 = open(sink, 2);
  const ds = d2.downstreams[0]!;
  assert.ok(ds.copiesPassedOver > 0, 'the log held copies of what the pending file holds');
  assert.ok(
    lines.some((l) => l.includes(`${ds.copiesPassedOver} backlog records are copies of triggers the pending`)),
    lines.join('\n'),
  );
  for (let i = 0; i < 400 && ds.delivered + delivered1 < devices * PER_DEVICE; i++) {
    d2.pump();
    assert.equal(ds.offered + ds.recovered, ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers, 'accounting');
    await sleep(2);
  }
  await d2.close(5_000);
  assert.equal(ds.final, 0);
  assert.equal(d2.carriedOver[0], 0);
  assertEverySeqOnce(sink, devices, PER_DEVICE);
});

test('a pending file damaged on disk: the next start skips the damaged record, alarms it and counts it in damagedRecords; every other trigger arrives once, in per-device order', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pending-damage-'));
  const PER_DEVICE = 6;
  const devices = 8;
  const lines: string[] = [];
  const d1 = smallHook(dir, devices, () => undefined, new GateSink(true), 1);
  await refusedRun(d1, devices, PER_DEVICE);
  // The second record of the pending file: one byte of its body flipped.
  const records: { position: number; length: number; key: string }[] = [];
  scanPendingFile(path.join(dir, 'hook'), 'hook', (buf, at, position, length) => {
    const id = readTriggerIdentity(buf, at);
    records.push({ position, length, key: `${String(id.deviceId)}/${id.seq}` });
  });
  assert.ok(records.length >= 3, `the pending file holds ${records.length} records`);
  const damaged = records[1]!;
  const file = path.join(dir, 'hook', 'pending.bin');
  const bytes = fs.readFileSync(file);
  bytes[damaged.position + damaged.length - 4]! ^= 0xff;
  fs.writeFileSync(file, bytes);

  const sink = new GateSink(false);
  const d2 = smallHook(dir, devices, (line) => lines.push(line), sink, 2);
  const ds = d2.downstreams[0]!;
  assert.ok(
    lines.some((l) =>
      /^downstream hook: pending file damaged: 1 damaged stretches skipped, their triggers lost/.test(l),
    ),
    lines.join('\n'),
  );
  d2.pump();
  assert.equal(d2.metrics[DS_DAMAGED_RECORDS_F64], 1, 'counted in damagedRecords');
  for (let i = 0; i < 400 && ds.delivered < devices * PER_DEVICE - 1; i++) {
    d2.pump();
    await sleep(2);
  }
  await d2.close(5_000);
  const got = sink.seen.map((t) => `${t.device}/${t.seq}`);
  assert.equal(got.length, devices * PER_DEVICE - 1, 'all but the damaged record');
  assert.ok(!got.includes(damaged.key), `the damaged record ${damaged.key} is the one missing`);
  assert.equal(new Set(got).size, got.length, 'each once');
  const last = new Map<string, number>();
  for (const t of sink.seen) {
    assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order`);
    last.set(t.device, t.seq);
  }
});

test("copies of carried-over triggers not passed over before the next stop: the carried-ceilings file keeps them passed over at the start after, though that start's pending file no longer names their devices", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ceilings-'));
  const PER_DEVICE = 12;
  const devices = 8;
  const sink = new GateSink(false);
  // Run 1: as above, a close whose cursor commit is lost.
  await lostCommitRun(
    smallHook(dir, devices, () => undefined, takesTenBatches(sink), 1),
    dir,
    devices,
    PER_DEVICE,
  );
  // Run 2 finds the copies and keeps their ceilings; then it delivers what it carried over (its pending file is then
  // removed) and stops before its loader reaches the copies: the receiver has the carried triggers, the disk no
  // pending file, and the log the copies past its cursor.
  const d2 = smallHook(dir, devices, () => undefined, new GateSink(true), 2);
  assert.ok(d2.downstreams[0]!.carriedCopiesLeft > 0, 'run 2 found copies');
  const ceilingsFile = path.join(dir, 'hook', 'carried-ceilings.json');
  assert.ok(fs.existsSync(ceilingsFile), 'their ceilings are kept');
  scanPendingFile(path.join(dir, 'hook'), 'hook', (buf, at) => {
    const id = readTriggerIdentity(buf, at);
    sink.seen.push({ device: String(id.deviceId), seq: id.seq });
  });
  fs.unlinkSync(path.join(dir, 'hook', 'pending.bin'));
  // Run 3: no pending file; the ceilings file passes the copies over.
  const d3 = smallHook(dir, devices, () => undefined, sink, 3);
  const ds = d3.downstreams[0]!;
  assert.ok(ds.copiesPassedOver > 0, 'the copies are known from the ceilings file');
  for (let i = 0; i < 400 && sink.seen.length < devices * PER_DEVICE; i++) {
    d3.pump();
    assert.equal(ds.offered + ds.recovered, ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers, 'accounting');
    await sleep(2);
  }
  await d3.close(5_000);
  assert.equal(ds.carriedCopiesLeft, 0);
  assert.ok(!fs.existsSync(ceilingsFile), 'the ceilings file is removed once every copy is passed over');
  assertEverySeqOnce(sink, devices, PER_DEVICE);
});

test("while the backlog log's writes fail, the triggers its write buffer holds count as held in memory only (a hand-off waits for them, a crash would lose them); once a flush succeeds they are on disk", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'unflushed-'));
  const d = smallHook(dir, 8, () => undefined, new GateSink(true), 1);
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  const syncs = nodeFs.fdatasyncSync;
  let failing = true;
  // The disk refuses to make writes durable (EIO), as a failing device does.
  nodeFs.fdatasyncSync = (fd: number): void => {
    if (failing) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    syncs(fd);
  };
  syncBuiltinESMExports();
  try {
    for (let seq = 1; seq <= 10; seq++)
      for (let device = 0; device < 8; device++)
        d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0);
    const held = d.memoryOnlyTakenBy(Infinity);
    const buffered = ds.backlog!.bufferedRecords;
    assert.ok(ds.backlog!.failing && buffered > 0, `records wait in the write buffer (${buffered})`);
    assert.equal(held, ds.memoryOnly + buffered, 'held only in memory: those in memory and those not flushed');
    failing = false;
    assert.equal(d.memoryOnlyTakenBy(Infinity), ds.memoryOnly, 'flushed: on disk');
    assert.equal(ds.backlog!.bufferedRecords, 0);
  } finally {
    failing = false;
    nodeFs.fdatasyncSync = syncs;
    syncBuiltinESMExports();
    await d.close(20);
  }
});

test("a stop while the backlog log's writes fail: the triggers loaded from its write buffer go to the pending file and are not counted lost; those never loaded are, and what the stop says it kept is what the next start delivers", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'unflushed-stop-'));
  const before = new GateSink(false);
  const first = smallHook(dir, 8, () => undefined, takesTenBatches(before), 1);
  const ds = first.downstreams[0]!;
  const r = new TriggerRecord();
  const syncs = nodeFs.fdatasyncSync;
  // The disk refuses to make the log's writes durable (EIO) for the whole run, its close included.
  nodeFs.fdatasyncSync = (): void => {
    throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
  };
  syncBuiltinESMExports();
  let offered = 0;
  try {
    for (let seq = 1; seq <= 30; seq++)
      for (let device = 0; device < 8; device++)
        if (first.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, device).f64, r.i32, 0, 0)) offered++;
    for (let i = 0; i < 300 && before.seen.length < 40; i++) {
      first.pump();
      await sleep(2);
    }
    for (let i = 0; i < 20; i++) {
      first.pump();
      await sleep(2);
    }
    const unloaded = ds.backlog!.bufferedUnloaded;
    const loadedFromBuffer = ds.backlog!.bufferedRecords - unloaded;
    assert.ok(
      loadedFromBuffer > 0 && unloaded > 0,
      `${loadedFromBuffer} loaded from the write buffer, ${unloaded} not`,
    );
    await first.close(20);
  } finally {
    nodeFs.fdatasyncSync = syncs;
    syncBuiltinESMExports();
  }
  const lost = ds.deadLetterFile!.droppedRecords[DeadLetterDropReason.DISK_ERROR]!;
  // Read after the close, whose drain may have loaded more of them.
  assert.equal(lost, ds.backlog!.bufferedUnloaded, 'lost: the records of the write buffer never loaded');
  assert.ok(lost < ds.backlog!.bufferedRecords, 'those loaded from it are not counted');
  const after = new GateSink(false);
  const second = smallHook(dir, 8, () => undefined, after, 2);
  for (let i = 0; i < 3000 && !second.isIdle; i++) {
    second.pump();
    await sleep(1);
  }
  await second.close(20);
  assert.equal(after.seen.length, first.carriedOver[0], 'what the stop said it kept came back');
  assert.equal(before.seen.length + after.seen.length + lost, offered, 'delivered, carried over or counted lost');
  const last = new Map<string, number>();
  for (const t of [...before.seen, ...after.seen]) {
    assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order, once`);
    last.set(t.device, t.seq);
  }
});

test('a settled pending file the disk refuses to remove: tried again about once a second, not at every flush, each refusal counted once; removed once the disk takes it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pending-unremovable-'));
  const PER_DEVICE = 4;
  const devices = 4;
  const d1 = smallHook(dir, devices, () => undefined, new GateSink(true), 1);
  await refusedRun(d1, devices, PER_DEVICE);
  const pendingFile = path.join(dir, 'hook', 'pending.bin');
  assert.ok(fs.existsSync(pendingFile), 'the first run kept triggers in its pending file');
  const unlink = nodeFs.unlinkSync;
  let refused = 0;
  nodeFs.unlinkSync = (p: fs.PathLike): void => {
    if (String(p) === pendingFile) {
      refused++;
      throw Object.assign(new Error('EIO: failing disk, unlink'), { code: 'EIO' });
    }
    unlink(p);
  };
  syncBuiltinESMExports();
  const sink = new GateSink(false);
  const d2 = smallHook(dir, devices, () => undefined, sink, 2);
  const ds = d2.downstreams[0]!;
  try {
    for (let i = 0; i < 2000 && ds.delivered < devices * PER_DEVICE; i++) {
      d2.pump();
      await sleep(2);
    }
    assert.equal(ds.delivered, devices * PER_DEVICE, 'everything delivered: the pending file is settled');
    // 100 durable flushes (flushIntervalMs 5, a pump every 6 ms) with the file settled and its removal refused.
    const errorsBefore = d2.durableWriteErrors(0);
    const refusedBefore = refused;
    for (let i = 0; i < 100; i++) {
      d2.pump();
      await sleep(6);
    }
    const tries = refused - refusedBefore;
    assert.ok(tries >= 2 && tries <= 100 / 20 + 1, `${tries} removals tried in 100 flushes`);
    assert.equal(d2.durableWriteErrors(0) - errorsBefore, tries, 'each refusal counted once');
    assert.ok(fs.existsSync(pendingFile));
  } finally {
    nodeFs.unlinkSync = unlink;
    syncBuiltinESMExports();
  }
  for (let i = 0; i < 40 && fs.existsSync(pendingFile); i++) {
    d2.pump();
    await sleep(6);
  }
  assert.equal(fs.existsSync(pendingFile), false, 'removed once the disk takes it');
  await d2.close(5_000);
  assertEverySeqOnce(sink, devices, PER_DEVICE);
});

for (const logFailing of [false, true])
  test(`a stop whose pending file cannot be written${logFailing ? ", the backlog log's writes failing too," : ''} loses only the triggers no other file holds${logFailing ? ' (the log flushed none)' : ': those loaded from the backlog log come back at the next start'}, and what the stop says it kept is what that start delivers`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pending-unwritable-'));
    const PER_DEVICE = 12;
    const devices = 8;
    // The downstream takes ten batches, then refuses everything: memory frees room and loads from the log.
    const before = new GateSink(false);
    const lines: string[] = [];
    const first = smallHook(dir, devices, (line) => lines.push(line), takesTenBatches(before), 1);
    const ds = first.downstreams[0]!;
    // With logFailing, the disk never makes the log's writes durable (EIO): what it takes stays in its write buffer,
    // and memory loads from there.
    const syncs = nodeFs.fdatasyncSync;
    if (logFailing) {
      nodeFs.fdatasyncSync = (): void => {
        throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
      };
      syncBuiltinESMExports();
    }
    await offerAndSettle(first, devices, PER_DEVICE);
    const loaded = ds.backlog!.loadedOutstanding;
    const memoryOnly = ds.memoryOnly;
    assert.ok(loaded > 0 && memoryOnly > 0, `memory holds ${loaded} records loaded from the log, ${memoryOnly} not`);
    const total = devices * PER_DEVICE;
    const unloaded = ds.backlog!.bufferedUnloaded;
    // The disk refuses the pending file (its temporary file cannot be created) at the close.
    const pendingFile = path.join(dir, 'hook', 'pending.bin');
    const open = nodeFs.openSync;
    nodeFs.openSync = ((p: fs.PathLike, ...rest: unknown[]): number => {
      if (String(p).startsWith(pendingFile)) throw Object.assign(new Error('EIO: failing disk, open'), { code: 'EIO' });
      return (open as (...a: unknown[]) => number)(p, ...rest);
    }) as typeof nodeFs.openSync;
    syncBuiltinESMExports();
    try {
      await first.close(20);
    } finally {
      nodeFs.openSync = open;
      nodeFs.fdatasyncSync = syncs;
      syncBuiltinESMExports();
    }
    assert.equal(fs.existsSync(pendingFile), false, 'no pending file was written');
    const lost = ds.deadLetterFile!.droppedRecords[DeadLetterDropReason.DISK_ERROR]!;
    // Lost: those held in memory only, and with logFailing those of the write buffer (in memory or never loaded).
    if (logFailing) assert.ok(lost > memoryOnly + unloaded, `${lost} lost`);
    else assert.equal(lost, memoryOnly);
    assert.ok(
      lines.some((l) =>
        new RegExp(
          `^downstream hook: the pending file could not be written at close \\(EIO: failing disk, open\\): of the \\d+ triggers it was to keep, \\d+ stay in the backlog log or the files carried over at start for the next start, ${logFailing ? '\\d+' : String(memoryOnly)} are lost$`,
        ).test(l),
      ),
      lines.join('\n'),
    );
    assert.equal(
      before.seen.length + first.carriedOver[0]! + lost,
      total,
      'every trigger delivered, kept or counted lost',
    );
    const after = new GateSink(false);
    const second = smallHook(dir, devices, () => undefined, after, 2);
    for (let i = 0; i < 3000 && !second.isIdle; i++) {
      second.pump();
      await sleep(1);
    }
    await second.close(20);
    // The next start delivers, each once and in per-device order, what the stop said it kept (and it may deliver
    // again some delivered before the stop whose log records its cursor had not passed: receivers drop those seqs).
    const seen = new Set<string>();
    const last = new Map<string, number>();
    for (const t of after.seen) {
      const key = `${t.device}/${t.seq}`;
      assert.ok(!seen.has(key), `${key} once`);
      seen.add(key);
      assert.ok(t.seq > (last.get(t.device) ?? 0), `${t.device}: seq ${t.seq} in order`);
      last.set(t.device, t.seq);
    }
    const deliveredBefore = new Set(before.seen.map((t) => `${t.device}/${t.seq}`));
    const fresh = [...seen].filter((key) => !deliveredBefore.has(key));
    assert.equal(fresh.length, first.carriedOver[0], 'what the stop said it kept came back');
  });
