/**
 * Dead-letter storage under pressure, through a real dispatcher, real HTTP downstreams and real files: a downstream
 * that refuses everything stays inside its size budget on disk (the overflow dropped oldest first, counted and
 * alarmed), dead letters past the age budget are dropped (and parked triggers with them, so their devices go on), a
 * disk that refuses writes (ENOSPC from /dev/full) stops nothing but that downstream's dead-letter writes (and a crash
 * meanwhile loses none of the triggers waiting in the ring), and a replay that passes everything gives the space back.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DeadLetterDropReason,
  DISP_DURABLE_FAILING_F64,
  DS_BLOCK_F64,
  DS_DURABLE_FAILING_F64,
  DREC_STRIDE_I32,
  Lane,
  TRG_DEVICE_SLOT_I32,
  TriggerType,
} from '../../src/shm/layout.js';
import { Dispatcher, type DispatcherDownstreamOptions, type DispatcherOptions } from '../../src/dispatch/dispatcher.js';
import type { Downstream } from '../../src/dispatch/downstream.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { deadLetterSegmentName, DeadLetterFile } from '../../src/durable/dead-letter-file.js';
import { FILE_HEADER_BYTES } from '../../src/durable/file-layout.js';
import { deadLetterBytesOnDisk } from '../durable/dead-letter-fixtures.js';
import { assertPerDeviceOrder, CapacityServer, sleep, TriggerRecord } from './fixtures.js';

const MIB = 1024 * 1024;
const DEVICES = 3000;

/** A real HTTP downstream that answers every batch with `status` at once (400: refused for good). */
class AnsweringServer {
  private server: http.Server | null = null;
  requests = 0;
  constructor(public status: number) {}
  async start(): Promise<void> {
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        this.requests++;
        res.writeHead(this.status, { 'content-length': 0 });
        res.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.server = server;
  }
  get url(): string {
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}/hook`;
  }
  async stop(): Promise<void> {
    const s = this.server;
    if (s === null) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}

const slotOfIndexId = (id: string | number): number =>
  typeof id === 'string' && id.startsWith('device-') ? Number(id.slice(7)) : -1;

function options(
  dir: string,
  downstreams: DispatcherDownstreamOptions[],
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

/** Offers `count` triggers, seq per device increasing, devices round robin; returns the next trigger number. */
function offer(d: Dispatcher, r: TriggerRecord, seqs: Int32Array, from: number, count: number): number {
  for (let k = 0; k < count; k++) {
    const device = (from + k) % DEVICES;
    const seq = ++seqs[device]!;
    assert.ok(d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 16, device).f64, r.i32, 0, 0) >= 1);
  }
  return from + count;
}

async function settle(d: Dispatcher, until: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!until() && Date.now() < end) {
    d.pump();
    await sleep(2);
  }
}

function assertAccounting(d: Dispatcher, label: string): void {
  for (const ds of d.downstreams)
    assert.equal(
      ds.offered + ds.recovered,
      ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers,
      `${label}: ${ds.name} accounting`,
    );
}

/**
 * A healthy webhook ('good') and one that refuses everything with 400 (`badName`, dead letters within 1 MiB), both
 * real HTTP servers stopped after the test, behind one dispatcher over a fresh directory; alarms are collected.
 */
async function goodAndRefusing(
  t: { after: (fn: () => Promise<void>) => void },
  dirPrefix: string,
  badName: string,
  extra: Partial<DispatcherOptions> = {},
): Promise<{ d: Dispatcher; dir: string; alarms: string[]; good: CapacityServer }> {
  const good = new CapacityServer({ workers: 16, serviceMs: 1 });
  const bad = new AnsweringServer(400);
  await good.start();
  await bad.start();
  t.after(async () => {
    await good.kill();
    await bad.stop();
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), dirPrefix));
  const alarms: string[] = [];
  const d = new Dispatcher(
    options(
      dir,
      [
        { name: 'good', sink: new WebhookSink({ url: good.url, timeoutMs: 5000 }), maxBatchTriggers: 128 },
        {
          name: badName,
          sink: new WebhookSink({ url: bad.url, timeoutMs: 5000 }),
          maxBatchTriggers: 128,
          deadLetterMaxBytes: MIB,
        },
      ],
      { ...extra, alarm: (line) => alarms.push(line) },
    ),
  );
  return { d, dir, alarms, good };
}

/** Records (PENDING + FINAL) kept in the dead-letter files of `dir` (opened read-write: call after close). */
function keptRecords(dir: string): number {
  const f = new DeadLetterFile(dir, path.basename(dir), null);
  const n = f.pendingRecords + f.finalRecords;
  f.close();
  return n;
}

test('size budget: a downstream that refuses everything keeps at most maxBytes of dead letters on disk; the overflow is dropped oldest first, counted as over_budget and alarmed; the other downstream gets everything', async (t) => {
  const { d, dir, alarms, good } = await goodAndRefusing(t, 'dlq-budget-', 'refuses');
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  const TOTAL = 24_000;
  let next = 0;
  let maxOnDisk = 0;
  const dlqDir = path.join(dir, 'refuses');
  const [g, b] = d.downstreams as [Downstream, Downstream];
  const startedMs = Date.now();
  while (next < TOTAL) {
    next = offer(d, r, seqs, next, 400);
    await settle(d, () => b.final >= next && g.delivered >= next, 5000);
    maxOnDisk = Math.max(maxOnDisk, deadLetterBytesOnDisk(dlqDir));
    assert.ok(maxOnDisk <= MIB, `${maxOnDisk} bytes of dead letters on disk after ${next} triggers`);
  }
  await settle(d, () => d.isIdle, 10_000);
  d.flushBacklogs();
  maxOnDisk = Math.max(maxOnDisk, deadLetterBytesOnDisk(dlqDir));
  assert.equal(g.delivered, TOTAL, 'the healthy downstream got everything');
  assert.equal(good.stats.triggers, TOTAL);
  assertPerDeviceOrder(good.received, 'good', true);
  assert.equal(b.final, TOTAL, 'every trigger refused for good');
  const dropped = d.deadLettersDropped(1, DeadLetterDropReason.OVER_BUDGET);
  assert.ok(dropped > 0, 'the overflow was dropped');
  assert.equal(d.deadLettersDropped(0, DeadLetterDropReason.OVER_BUDGET), 0);
  assert.match(
    alarms.join('\n'),
    /downstream refuses: dead letters dropped oldest first: over_budget=\d+ \(\d+ in all\); dead-letter storage \d+ of 1048576 bytes/,
  );
  // At most one line every 10 s (ALARM_INTERVAL_MS) however many drops: two at most for a run of under 10 s.
  const allowed = 2 + Math.floor((Date.now() - startedMs) / 10_000);
  assert.ok(alarms.length <= allowed, `rate-limited: ${alarms.length} alarm lines (${allowed} allowed)`);
  assertAccounting(d, 'end');
  await d.close(1000);
  assert.equal(keptRecords(dlqDir) + dropped, TOTAL, 'every dead letter is on disk or counted as dropped');
  console.log(
    `size budget 1 MiB: ${TOTAL} refused triggers, at most ${maxOnDisk} bytes of dead letters on disk, ${dropped} dropped (over_budget)`,
  );
});

test('age budget: dead letters older than maxAgeMs are dropped (too_old); a parked trigger whose copy is dropped is given up and its device goes on', async (t) => {
  const refusing = new AnsweringServer(400);
  const failing = new CapacityServer({ workers: 16, serviceMs: 1, mode: 'error' });
  await refusing.start();
  await failing.start();
  t.after(async () => {
    await refusing.stop();
    await failing.kill();
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlq-age-'));
  const alarms: string[] = [];
  const MAX_AGE_MS = 400;
  const d = new Dispatcher(
    options(
      dir,
      [
        { name: 'refuses', sink: new WebhookSink({ url: refusing.url, timeoutMs: 5000 }), maxBatchTriggers: 64 },
        // Fails every batch: each device's first trigger parks for the replay lane, its later ones wait behind it.
        {
          name: 'fails',
          sink: new WebhookSink({ url: failing.url, timeoutMs: 5000 }),
          maxBatchTriggers: 64,
          maxAttempts: 1,
          breaker: { minimumRequests: 100_000, windowSize: 100_000 },
        },
      ],
      { deadLetterMaxAgeMs: MAX_AGE_MS, alarm: (line) => alarms.push(line) },
    ),
  );
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  const [ref, fails] = d.downstreams as [Downstream, Downstream];
  // Two triggers per device for 100 devices.
  for (let k = 0; k < 2; k++)
    for (let device = 0; device < 100; device++)
      d.offer(r.set(++seqs[device]!, TriggerType.ENTER, Lane.TRANSITION, 1, device).f64, r.i32, 0, 0);
  // Parked first (each on its first failure), before the age budget gives any up; the refusals may come later on a
  // busy host.
  await settle(d, () => fails.parked === 100, 5000);
  assert.equal(fails.parked, 100, 'one parked per device');
  await settle(d, () => ref.final === 200, 5000);
  d.flushBacklogs();
  assert.ok(deadLetterBytesOnDisk(path.join(dir, 'refuses')) > 200 * 96);
  // Past the age budget: the refused dead letters are dropped, the parked triggers given up with their copies.
  await settle(
    d,
    () => fails.givenUp >= 100 && d.deadLettersDropped(0, DeadLetterDropReason.TOO_OLD) === 200,
    MAX_AGE_MS * 10,
  );
  assert.equal(fails.givenUp >= 100, true, `given up: ${fails.givenUp}`);
  assert.equal(
    d.deadLettersDropped(0, DeadLetterDropReason.TOO_OLD),
    200,
    'every refused dead letter dropped as too_old',
  );
  assert.ok(d.deadLettersDropped(1, DeadLetterDropReason.TOO_OLD) >= 100);
  assert.equal(
    deadLetterBytesOnDisk(path.join(dir, 'refuses')),
    FILE_HEADER_BYTES,
    'nothing older than the budget left on disk',
  );
  assert.match(
    alarms.join('\n'),
    /downstream refuses: dead letters dropped oldest first: too_old=\d+ \(\d+ in all\); dead-letter storage \d+ of \d+ bytes, max age 400 ms/,
  );
  assert.match(
    alarms.join('\n'),
    /downstream fails: dead letters dropped oldest first: too_old=\d+ .*; \d+ of them waited for replay: those triggers are given up/,
  );
  // The devices went on: once the downstream answers, a new trigger of every device arrives. (A device's second
  // trigger may itself have parked and aged out by now on a slow host, so the check is on triggers offered after.)
  failing.settings.mode = 'ok';
  for (let device = 0; device < 100; device++)
    d.offer(r.set(++seqs[device]!, TriggerType.EXIT, Lane.TRANSITION, 1, device).f64, r.i32, 0, 0);
  await settle(d, () => d.isIdle, 10_000);
  assert.equal(fails.delivered + fails.replayed + fails.final, 300, 'every trigger delivered, replayed or given up');
  assert.ok(fails.delivered + fails.replayed >= 100, `the devices go on: ${fails.delivered + fails.replayed} arrived`);
  assert.equal(
    failing.stats.triggers,
    fails.delivered + fails.replayed,
    'the receiver got what was counted as arrived',
  );
  // Given-up triggers are gaps by design; what arrived is in each device's order.
  assertPerDeviceOrder(failing.received, 'fails');
  assertAccounting(d, 'end');
  await d.close(500);
});

test('a disk that refuses dead-letter writes (ENOSPC from /dev/full): the other downstream gets everything, the loop goes on, errors and drops are counted and alarmed; writes resume when the disk does', async (t) => {
  assert.ok(fs.existsSync('/dev/full'), 'this test needs /dev/full, the device whose writes fail with ENOSPC (Linux)');
  const { d, dir, alarms, good } = await goodAndRefusing(t, 'dlq-enospc-', 'bad', {
    deadLetterCapacityRecords: 1024,
    flushBatchRecords: 128,
  });
  // The next segment of 'bad' (the first rolls at 128 KiB) is on a device that is always full.
  const next = path.join(dir, 'bad', deadLetterSegmentName(2));
  fs.symlinkSync('/dev/full', next);
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  const [g, b] = d.downstreams as [Downstream, Downstream];
  let offered = 0;
  const TOTAL = 8000;
  while (offered < TOTAL) {
    offered = offer(d, r, seqs, offered, 200);
    await settle(d, () => b.final >= offered && g.delivered >= offered, 5000);
  }
  await settle(d, () => d.isIdle, 10_000);
  assert.equal(g.delivered, TOTAL, 'the healthy downstream got everything');
  assert.equal(b.final, TOTAL, 'the refusing downstream went on too');
  const file = b.deadLetterFile!;
  assert.ok(file.writeErrors > 0, 'write errors counted');
  assert.match(file.lastError ?? '', /ENOSPC/);
  assert.equal(d.durableFailing(1), true);
  assert.equal(d.metrics[DS_BLOCK_F64 + DS_DURABLE_FAILING_F64], 1);
  assert.equal(d.metrics[2 * DS_BLOCK_F64 + DISP_DURABLE_FAILING_F64], 1);
  assert.equal(d.durableFailing(0), false);
  const lostToDisk = d.deadLettersDropped(1, DeadLetterDropReason.DISK_ERROR);
  assert.ok(lostToDisk > 0, 'the ring made room by dropping the oldest unwritten dead letters');
  assert.ok(
    d.deadLetterRing.depth > 0 && d.deadLetterRing.depth <= 1024,
    `the unwritten ones wait in the ring: ${d.deadLetterRing.depth}`,
  );
  assert.match(alarms.join('\n'), /downstream bad: durable writes failing \(ENOSPC: [^)]*\): \d+ failed writes/);
  // A device whose dead letter waits in the ring is not settled (its slot is not freed for another device before the
  // entry is written under its id); one with none is.
  const ring = d.deadLetterRing;
  const inRing = new Set<number>();
  for (let k = 0; k < ring.depth; k++) inRing.add(ring.i32[k * DREC_STRIDE_I32 + TRG_DEVICE_SLOT_I32]!);
  const held = [...inRing][0]!;
  let notHeld = 0;
  while (inRing.has(notHeld)) notHeld++;
  d.noteRingHeldDevices();
  assert.equal(d.deviceSettled(held), false, `device ${held} has a dead letter waiting in the ring`);
  assert.equal(d.deviceSettled(notHeld), true, `device ${notHeld} has nothing anywhere`);
  // The disk has room again: what waits in the ring is written, and new dead letters with it.
  fs.unlinkSync(next);
  const waiting = d.deadLetterRing.depth;
  await settle(d, () => d.deadLetterRing.depth === 0 && !d.durableFailing(1), 5000);
  assert.equal(d.deadLetterRing.depth, 0);
  assert.equal(d.durableFailing(1), false);
  d.noteRingHeldDevices();
  assert.equal(d.deviceSettled(held), true, `device ${held}'s dead letter was written`);
  offer(d, r, seqs, offered, 200);
  await settle(d, () => d.isIdle, 5000);
  d.flushBacklogs();
  assertAccounting(d, 'end');
  assert.equal(good.received.length, TOTAL + 200);
  assertPerDeviceOrder(good.received, 'good', true);
  const t0 = Date.now();
  await d.close(1000);
  assert.ok(Date.now() - t0 < 5000, 'close does not hang');
  // The last alarm, at close, reports what the rate limit held back since the first.
  assert.match(alarms.join('\n'), /downstream bad: (?:[^\n]*; )?dead letters dropped oldest first: disk_error=\d+/);
  assert.equal(
    keptRecords(path.join(dir, 'bad')) + lostToDisk,
    TOTAL + 200,
    'every dead letter is on disk or counted as lost to the disk',
  );
  console.log(
    `ENOSPC: ${file.writeErrors} failed writes, ${lostToDisk} dead letters dropped (disk_error), ${waiting} waited in the ring and were written once the disk had room`,
  );
});

/**
 * A callback downstream for the crash test: refuses for good (400) every trigger of `refusedDevice`, and while
 * `failing` fails (500) any batch holding seq 4 of a device below 10; records what it took, per run.
 */
class CrashTestSink implements Sink {
  readonly seen: { deviceId: string; seq: number }[] = [];
  constructor(
    private readonly refusedDevice: number,
    private readonly failing: boolean,
  ) {}
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    for (let i = 0; i < batch.count; i++) {
      const device = slotOfIndexId(batch.deviceId(i));
      if (device === this.refusedDevice) return { status: 400 };
      if (this.failing && batch.seq(i) === 4 && device < 10) return { status: 500 };
    }
    for (let i = 0; i < batch.count; i++) this.seen.push({ deviceId: String(batch.deviceId(i)), seq: batch.seq(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

/** Devices the disk-refusing runs below use: 0-2 park from memory, 3-29 mostly through the backlog log, 39 fills. */
const FILLER = 39;
const IN_MEMORY = 3;
const LIVE = 30;
const PER_DEVICE = 6;

/** A dispatcher on `dir` whose one downstream, `hook`, keeps little in memory and parks at the first failure. */
function smallParkingHook(dir: string, sink: Sink, runId: number, clock?: () => number): Dispatcher {
  return new Dispatcher(
    options(
      dir,
      [
        {
          name: 'hook',
          sink,
          // A small memory: most triggers spill to the backlog log and load back from it; one attempt: a failed
          // batch parks its triggers at once.
          queueCapacitySlots: 48,
          reservedComplianceSlots: 2,
          maxBatchTriggers: 4,
          maxAttempts: 1,
          deadLetterMaxBytes: MIB,
          breaker: { minimumRequests: 100_000, windowSize: 100_000 },
        },
      ],
      { runId, flushIntervalMs: 5, ...(clock === undefined ? {} : { clock }) },
    ),
  );
}

/**
 * A first run on a fresh directory whose dead-letter writes fail from the second segment on (/dev/full): the filler's
 * refused triggers fill the first; devices 0-2 then park their seq 4 from memory, one after the other, and devices
 * 3-29 (offered all at once, mostly through the backlog log) park theirs after loading it. Returns the run, its
 * sink, and the link that makes the disk refuse (unlink it to give the disk room again).
 */
async function parkWhileDiskRefuses(
  prefix: string,
  clock?: () => number,
): Promise<{ dir: string; d: Dispatcher; ds: Downstream; sink: CrashTestSink; fullLink: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const sink = new CrashTestSink(FILLER, true);
  const d = smallParkingHook(dir, sink, 1, clock);
  const ds = d.downstreams[0]!;
  // The first segment (128 KiB at this budget) takes the filler's dead letters; the next one is on a full disk.
  const fullLink = path.join(dir, 'hook', deadLetterSegmentName(2));
  fs.symlinkSync('/dev/full', fullLink);
  const r = new TriggerRecord();
  const offerOne = (device: number, seq: number): void => {
    d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 16, device).f64, r.i32, 0, 0);
  };
  // Twenty at a time, so none goes through the backlog log: the filler's dead letters hold no place in it.
  const FILL = 1500;
  for (let seq = 1; seq <= FILL; seq++) {
    offerOne(FILLER, seq);
    if (seq % 20 === 0) await settle(d, () => ds.final >= seq, 5000);
  }
  await settle(d, () => ds.final >= FILL, 10_000);
  assert.equal(ds.final, FILL, 'the filler was refused for good');
  assert.equal(ds.spilled, 0, 'from memory');
  assert.ok(ds.deadLetterFile!.writeErrors > 0, 'the disk refused dead-letter writes');
  const spilledBefore = ds.spilled;
  for (let device = 0; device < IN_MEMORY; device++) {
    for (let seq = 1; seq <= PER_DEVICE; seq++) offerOne(device, seq);
    await settle(d, () => ds.parked > device, 10_000);
  }
  assert.equal(ds.spilled, spilledBefore, 'devices 0-2 stayed in memory');
  for (let seq = 1; seq <= PER_DEVICE; seq++)
    for (let device = IN_MEMORY; device < LIVE; device++) {
      offerOne(device, seq);
      d.pump();
    }
  await settle(d, () => ds.parked >= 10, 10_000);
  // Until the receiver has taken nothing more for 100 ms (the parked devices' triggers wait behind them).
  for (let seen = -1; seen !== sink.seen.length;) {
    seen = sink.seen.length;
    const until = Date.now() + 100;
    while (Date.now() < until) {
      d.pump();
      await sleep(2);
    }
  }
  d.flushBacklogs();
  assert.ok(ds.spilled > spilledBefore, 'triggers of the other devices went through the backlog log');
  assert.ok(ds.parked >= 10, `triggers were parked: ${ds.parked}`);
  assert.ok(d.deadLetterRing.depth > 0, 'their dead-letter copies wait in the ring, unwritten');
  assert.equal(d.deadLettersDropped(0, DeadLetterDropReason.DISK_ERROR), 0, 'none dropped by the ring');
  assertPerDeviceOrder(sink.seen, 'run 1');
  return { dir, d, ds, sink, fullLink };
}

/** The (device, seq) keys of devices 0..LIVE-1 that no sink in `sinks` took. */
function missingAfter(...sinks: CrashTestSink[]): string[] {
  const got = new Set(sinks.flatMap((s) => s.seen.map((t) => `${t.deviceId}/${t.seq}`)));
  const missing: string[] = [];
  for (let device = 0; device < LIVE; device++)
    for (let seq = 1; seq <= PER_DEVICE; seq++)
      if (!got.has(`device-${device}/${seq}`)) missing.push(`device-${device}/${seq}`);
  return missing;
}

test('a crash while the disk refuses dead-letter writes: parked triggers from the backlog log come back from it at the next start, and those held only in memory are counted as such', async () => {
  assert.ok(fs.existsSync('/dev/full'), 'this test needs /dev/full, the device whose writes fail with ENOSPC (Linux)');
  const { dir, d: d1, ds: ds1, sink: first, fullLink } = await parkWhileDiskRefuses('dlq-crash-');
  const memoryOnlyAtCrash = ds1.memoryOnly;
  const unwritten = d1.deadLetterRing.depth;
  // A crash: the first dispatcher is abandoned as it stands (nothing closed, nothing more written); the disk has room
  // again when the next one starts on the same directory, and the downstream takes everything (the filler's triggers
  // too, read again from the log: their dead letters never reached the disk).
  fs.unlinkSync(fullLink);
  const second = new CrashTestSink(-1, false);
  const d2 = smallParkingHook(dir, second, 2);
  const ds2 = d2.downstreams[0]!;
  await settle(d2, () => d2.isIdle, 20_000);
  assert.equal(ds2.inFlightTriggers, 0, 'the second run settled everything');
  assertAccounting(d2, 'run 2');
  // Receivers de-duplicate by seq: the crash may deliver again what the first run delivered, in each device's order.
  assertPerDeviceOrder(second.seen, 'run 2');
  const missing = missingAfter(first, second);
  // The parked triggers taken from the log came back from it; those parked from memory were lost with it, and the
  // crash lost nothing that was not counted as held in memory only.
  const parkedFromLog: string[] = [];
  for (let device = IN_MEMORY; device < 10; device++) parkedFromLog.push(`device-${device}/4`);
  assert.deepEqual(
    parkedFromLog.filter((key) => missing.includes(key)),
    [],
    'no parked trigger from the log is missing',
  );
  for (let device = 0; device < IN_MEMORY; device++)
    assert.ok(missing.includes(`device-${device}/4`), `device-${device}/4 was parked from memory: lost in the crash`);
  assert.ok(
    missing.length <= memoryOnlyAtCrash,
    `every trigger the crash lost was counted as held in memory only: ${missing.length} lost, ${memoryOnlyAtCrash} counted`,
  );
  const parkedBack = second.seen.filter((t) => t.seq === 4 && slotOfIndexId(t.deviceId) < 10).length;
  await d2.close(1000);
  console.log(
    `crash with the disk refusing: ${ds1.parked} parked, ${unwritten} dead letters unwritten in the ring and ${memoryOnlyAtCrash} triggers held only in memory at the crash; run 2 delivered ${second.seen.length} (${parkedBack} of the parked among them), lost ${missing.length}`,
  );
});

test('the backlog log keeps a dead letter the disk refuses for at most 10 s: then it passes it, and a parked trigger it held counts as held in memory only', async () => {
  assert.ok(fs.existsSync('/dev/full'), 'this test needs /dev/full, the device whose writes fail with ENOSPC (Linux)');
  let offsetNs = 0;
  const clock = (): number => Number(process.hrtime.bigint()) + offsetNs;
  const { d, ds, fullLink } = await parkWhileDiskRefuses('dlq-keep-', clock);
  const parkedFromLog = ds.parked - IN_MEMORY;
  assert.ok(parkedFromLog >= 7, `parked after loading from the log: ${parkedFromLog}`);
  const before = ds.memoryOnly;
  d.flushBacklogs();
  assert.equal(ds.memoryOnly, before, 'kept by the log within 10 s');
  offsetNs += 11e9;
  d.flushBacklogs();
  assert.equal(ds.memoryOnly, before + parkedFromLog, 'passed by the log after 10 s: held in memory only');
  assert.ok(
    d.deadLetterRing.depth > 0,
    'the dead letters still wait in the ring, to be written when the disk takes them',
  );
  fs.unlinkSync(fullLink);
  await d.close(100);
});

test('a close while the disk refuses dead-letter writes: the parked triggers go to the pending file, the next start counts them as parked and replays them; nothing lost, nothing twice', async () => {
  assert.ok(fs.existsSync('/dev/full'), 'this test needs /dev/full, the device whose writes fail with ENOSPC (Linux)');
  const { dir, d: d1, ds: ds1, sink: first, fullLink } = await parkWhileDiskRefuses('dlq-close-');
  const parkedAtClose = ds1.parked;
  await d1.close(50);
  assert.ok(d1.carriedOver[0]! > 0, 'the close kept what was not delivered');
  fs.unlinkSync(fullLink);
  const second = new CrashTestSink(-1, false);
  const d2 = smallParkingHook(dir, second, 2);
  const ds2 = d2.downstreams[0]!;
  assert.equal(ds2.parked, parkedAtClose, 'the next start counts every parked trigger as parked');
  let lowest = ds2.parked;
  const end = Date.now() + 20_000;
  while (!d2.isIdle && Date.now() < end) {
    d2.pump();
    lowest = Math.min(lowest, ds2.parked);
    await sleep(2);
  }
  assert.equal(ds2.inFlightTriggers, 0, 'the second run settled everything');
  assert.equal(lowest, 0, 'the parked gauge went down to 0, never below');
  assert.equal(ds2.parked, 0);
  assert.ok(ds2.replayed >= parkedAtClose, `the parked triggers were replayed: ${ds2.replayed}`);
  assertAccounting(d2, 'run 2');
  // A clean close: each trigger of the live devices once over both runs, each device's complete and in order.
  assert.deepEqual(missingAfter(first, second), []);
  const live = [...first.seen, ...second.seen].filter((t) => slotOfIndexId(t.deviceId) < LIVE);
  assert.equal(live.length, LIVE * PER_DEVICE, 'nothing twice');
  assertPerDeviceOrder(live, 'both runs', true);
  await d2.close(1000);
});

test('compaction: a downstream that was down comes back, the replay lane passes every parked dead letter, and the files shrink to a header', async (t) => {
  const server = new CapacityServer({ workers: 16, serviceMs: 1, mode: 'error' });
  await server.start();
  t.after(() => server.kill());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlq-compaction-'));
  const d = new Dispatcher(
    options(
      dir,
      [
        {
          name: 'hook',
          sink: new WebhookSink({ url: server.url, timeoutMs: 5000 }),
          maxBatchTriggers: 64,
          maxAttempts: 1,
          breaker: { minimumRequests: 100_000, windowSize: 100_000 },
        },
      ],
      {
        deadLetterMaxBytes: MIB,
      },
    ),
  );
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  // Every device parks one; some devices more than once over the rounds (each parks again after a replay fails).
  offer(d, r, seqs, 0, DEVICES * 3);
  await settle(d, () => ds.parked === DEVICES, 10_000);
  await settle(d, () => false, 300);
  d.flushBacklogs();
  const file = ds.deadLetterFile!;
  const before = deadLetterBytesOnDisk(path.join(dir, 'hook'));
  assert.ok(before > DEVICES * 96, `${before} bytes of parked dead letters`);
  assert.ok(file.segmentCount >= 3, `${file.segmentCount} segments`);
  assert.ok(file.pendingRecords >= DEVICES);
  server.settings.mode = 'ok';
  await settle(d, () => d.isIdle, 20_000);
  assert.equal(ds.parked, 0);
  assert.equal(ds.replayed + ds.delivered, DEVICES * 3);
  // The parked triggers and those that waited behind them arrive once each, in each device's order.
  assert.equal(server.received.length, DEVICES * 3);
  assertPerDeviceOrder(server.received, 'hook', true);
  await settle(d, () => false, 100);
  d.flushBacklogs();
  const after = deadLetterBytesOnDisk(path.join(dir, 'hook'));
  assert.equal(after, FILE_HEADER_BYTES, 'every record replayed: one segment, cut back to its header');
  assert.equal(file.byteLength, FILE_HEADER_BYTES);
  assertAccounting(d, 'end');
  await d.close(500);
  console.log(`compaction: ${before} bytes of parked dead letters before the replay, ${after} after`);
});
