/**
 * Dead-letter storage under pressure, through a real dispatcher, real HTTP downstreams and real files: a downstream
 * that refuses everything stays inside its size budget on disk (the overflow dropped oldest first, counted and
 * alarmed), dead letters past the age budget are dropped (and parked triggers with them, so their devices go on), a
 * disk that refuses writes (ENOSPC from /dev/full) stops nothing but that downstream's dead-letter writes, and a
 * replay that passes everything gives the space back.
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
  Lane,
  TriggerType,
} from '../../src/shm/layout.js';
import { Dispatcher, type DispatcherDownstreamOptions, type DispatcherOptions } from '../../src/dispatch/dispatcher.js';
import type { Downstream } from '../../src/dispatch/downstream.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
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
  assert.ok(alarms.length <= 2, `rate-limited: ${alarms.length} alarm lines`);
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
  await settle(d, () => ref.final === 200 && fails.parked === 100, 5000);
  assert.equal(fails.parked, 100, 'one parked per device');
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
  // The disk has room again: what waits in the ring is written, and new dead letters with it.
  fs.unlinkSync(next);
  const waiting = d.deadLetterRing.depth;
  await settle(d, () => d.deadLetterRing.depth === 0 && !d.durableFailing(1), 5000);
  assert.equal(d.deadLetterRing.depth, 0);
  assert.equal(d.durableFailing(1), false);
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
