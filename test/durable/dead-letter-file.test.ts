/**
 * The dead-letter storage on real files: a damaged record is skipped alone and counted (the records after it are
 * kept and replayed once, in order, by a real dispatcher); a damaged status word costs one re-delivery, not all; the
 * size and age budgets drop oldest first and count why; replayed segments give their space back; an earlier layout's
 * single file is moved into segments.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { DeadLetterDropReason, DeadLetterStatus } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import {
  DEAD_LETTER_FILE,
  DeadLetterFile,
  deadLetterSegmentName,
  listDeadLetterSegments,
  positionOffset,
  positionSlot,
  scanDeadLetters,
} from '../../src/durable/dead-letter-file.js';
import { DEAD_LETTER_MAGIC, FILE_HEADER_BYTES, TREC_LAT_F64, TREC_STATUS_W } from '../../src/durable/file-layout.js';
import { writeFileHeader } from '../../src/durable/file-header.js';
import { scanRecords } from '../../src/durable/record-scan.js';
import { readTriggerIdentity, RecordBuffer } from '../../src/durable/trigger-codec.js';
import {
  appendDeadLetters,
  checkPerDeviceOrder,
  deadLetterBytesOnDisk,
  deadLetterCodec,
  RecordingSink,
} from './dead-letter-fixtures.js';

const MIB = 1024 * 1024;

function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Writes `bytes` at `offset` of the single segment in `dir` (a damaged disk). */
function damage(dir: string, position: number, offsetInRecord: number, bytes: number[]): void {
  const segments = listDeadLetterSegments(dir);
  const file = path.join(dir, deadLetterSegmentName(segments[positionSlot(position)]!));
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, Buffer.from(bytes), 0, bytes.length, positionOffset(position) + offsetInRecord);
  fs.closeSync(fd);
}

/** Seqs of every record in the dead-letter segments of `dir`, in file order. */
function allSeqs(dir: string): number[] {
  const out: number[] = [];
  const buf = new RecordBuffer(1 << 20);
  for (const n of listDeadLetterSegments(dir)) {
    const fd = fs.openSync(path.join(dir, deadLetterSegmentName(n)), 'r');
    scanRecords(fd, FILE_HEADER_BYTES, buf, (b, at) => out.push(readTriggerIdentity(b, at).seq));
    fs.closeSync(fd);
  }
  return out;
}

/** Reads one byte of a record on disk. */
function byteAt(dir: string, position: number, offsetInRecord: number): number {
  const segments = listDeadLetterSegments(dir);
  const fd = fs.openSync(path.join(dir, deadLetterSegmentName(segments[positionSlot(position)]!)), 'r');
  const b = Buffer.alloc(1);
  fs.readSync(fd, b, 0, 1, positionOffset(position) + offsetInRecord);
  fs.closeSync(fd);
  return b[0]!;
}

test('50,527 dead letters, one flipped byte in record 100: the open skips exactly that record and counts it; a dispatcher replays every other record once, in per-device order, then the files shrink to a header', async () => {
  const stateDir = tmp('dlq-flip-');
  const dir = path.join(stateDir, 'hook');
  const TOTAL = 50_527;
  const DEVICES = 97;
  const { codec, catalog } = deadLetterCodec(1);
  const writer = new DeadLetterFile(dir, 'hook', null);
  const positions = appendDeadLetters(writer, codec, catalog, 1, TOTAL, DEVICES);
  writer.close();
  const bytesBefore = deadLetterBytesOnDisk(dir);
  // One bit of record 100's latitude flips on disk.
  damage(dir, positions[99]!, TREC_LAT_F64 + 3, [byteAt(dir, positions[99]!, TREC_LAT_F64 + 3) ^ 0x10]);

  const seen: number[] = [];
  const t0 = performance.now();
  const reopened = new DeadLetterFile(dir, 'hook', (b, at) => seen.push(readTriggerIdentity(b, at).seq));
  const openMs = performance.now() - t0;
  assert.equal(reopened.damagedAtOpen, 1, 'one damaged record counted');
  assert.equal(reopened.recoveredTornBytes, 0, 'nothing cut: the records after the damage stay');
  assert.equal(seen.length, TOTAL - 1);
  assert.deepEqual(seen.slice(97, 101), [98, 99, 101, 102], 'record 100 alone is skipped');
  assert.ok(
    seen.every((s, i) => i === 0 || s > seen[i - 1]!),
    'in file order',
  );
  reopened.close();

  // The main thread's read-only scan at start agrees.
  let scanned = 0;
  assert.equal(
    scanDeadLetters(dir, 'hook', () => scanned++),
    TOTAL - 1,
  );

  const sink = new RecordingSink();
  const alarms: string[] = [];
  const t1 = performance.now();
  const d = new Dispatcher({
    stateDir,
    namer: new IndexNamer(),
    maxDevices: DEVICES,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    flushIntervalMs: 10,
    downstreams: [{ name: 'hook', sink, maxBatchTriggers: 512 }],
    alarm: (line) => alarms.push(line),
  });
  const startMs = performance.now() - t1;
  const ds = d.downstreams[0]!;
  assert.equal(ds.recovered, TOTAL - 1);
  assert.equal(ds.parked, TOTAL - 1, 'every PENDING dead letter waits in the replay lane');
  assert.match(alarms.join('\n'), /hook: dead-letter files damaged: 1 damaged records skipped/);
  const end = Date.now() + 60_000;
  while (!d.isIdle && Date.now() < end) {
    d.pump();
    await new Promise((r) => setTimeout(r, 1));
  }
  assert.equal(ds.replayed, TOTAL - 1, 'every other record replayed');
  const counts = checkPerDeviceOrder(sink.seen);
  assert.equal(sink.seen.length, TOTAL - 1);
  assert.equal(counts.get(100), undefined, 'the damaged record is not sent');
  for (let seq = 1; seq <= TOTAL; seq++)
    if (seq !== 100 && counts.get(seq) !== 1) assert.fail(`seq ${seq} arrived ${counts.get(seq) ?? 0} times`);
  assert.ok(
    sink.seen.every((t) => t.replay),
    'as replays',
  );
  // Replayed everything: the space is given back (one segment, cut back to its header).
  d.flushBacklogs();
  const file = ds.deadLetterFile!;
  assert.equal(file.byteLength, FILE_HEADER_BYTES);
  assert.equal(deadLetterBytesOnDisk(dir), FILE_HEADER_BYTES);
  assert.equal(file.segmentCount, 1);
  await d.close(100);
  console.log(
    `dead letters: ${TOTAL} records, ${bytesBefore} bytes on disk; open with one damaged record: ${openMs.toFixed(1)} ms ` +
      `(dispatcher start with take-over: ${startMs.toFixed(1)} ms); after the replay: ${deadLetterBytesOnDisk(dir)} bytes`,
  );
});

test('a flipped byte in a record length skips that record alone; a torn tail is cut; a damaged status word is re-delivered, not every record', () => {
  const dir = tmp('dlq-len-');
  const { codec, catalog } = deadLetterCodec(1);
  const writer = new DeadLetterFile(dir, 'hook', null);
  // Seq 1..1000: 500..510 wait for replay, the rest were re-delivered.
  const positions = appendDeadLetters(writer, codec, catalog, 1, 1000, 13, (s) =>
    s >= 500 && s <= 510 ? DeadLetterStatus.PENDING : DeadLetterStatus.RESOLVED,
  );
  writer.close();
  // Record 100's length word, and record 300's status word (a RESOLVED record), damaged; half a record at the end.
  damage(dir, positions[99]!, 1, [0x7f]);
  damage(dir, positions[299]!, TREC_STATUS_W * 4 + 2, [0x00]);
  fs.appendFileSync(path.join(dir, deadLetterSegmentName(listDeadLetterSegments(dir)[0]!)), Buffer.alloc(40, 7));
  const pending: number[] = [];
  const again = new DeadLetterFile(dir, 'hook', (b, at) => pending.push(readTriggerIdentity(b, at).seq));
  assert.equal(again.damagedAtOpen, 1);
  assert.equal(again.recordCount, 999, 'every record but the damaged one');
  assert.equal(again.recoveredTornBytes, 40);
  assert.equal(again.damagedStatuses, 1);
  assert.deepEqual(
    pending,
    [300, 500, 501, 502, 503, 504, 505, 506, 507, 508, 509, 510],
    'the damaged status is read as waiting: one re-delivery',
  );
  again.close();
});

test('compaction: segments whose records were all re-delivered are deleted and the write segment is cut back; final dead letters keep theirs', () => {
  const dir = tmp('dlq-compact-');
  const { codec, catalog } = deadLetterCodec(1);
  const file = new DeadLetterFile(dir, 'hook', null, { maxBytes: MIB });
  assert.equal(file.segmentMaxBytes, 128 * 1024);
  const positions = appendDeadLetters(file, codec, catalog, 1, 4000, 50);
  const finals = appendDeadLetters(file, codec, catalog, 4001, 10, 50, () => DeadLetterStatus.FINAL);
  assert.ok(file.segmentCount >= 4, `${file.segmentCount} segments`);
  const full = deadLetterBytesOnDisk(dir);
  assert.equal(full, file.byteLength);
  for (const p of positions.slice(0, 3000)) file.setStatus(p, DeadLetterStatus.RESOLVED);
  file.maintain();
  assert.ok(
    deadLetterBytesOnDisk(dir) < full * 0.4,
    `the replayed segments are gone: ${deadLetterBytesOnDisk(dir)} of ${full}`,
  );
  for (const p of positions.slice(3000)) file.setStatus(p, DeadLetterStatus.RESOLVED);
  file.maintain();
  assert.equal(file.segmentCount, 1, 'the segment with the final dead letters stays');
  assert.equal(file.finalRecords, 10);
  assert.ok(deadLetterBytesOnDisk(dir) <= 128 * 1024);
  // The final ones expire with the age budget only; a fresh store with every record re-delivered is one header.
  file.close();
  const dir2 = tmp('dlq-compact2-');
  const f2 = new DeadLetterFile(dir2, 'hook', null, { maxBytes: MIB });
  const p2 = appendDeadLetters(f2, codec, catalog, 1, 3000, 50);
  for (const p of p2) f2.setStatus(p, DeadLetterStatus.RESOLVED);
  f2.maintain();
  assert.equal(deadLetterBytesOnDisk(dir2), FILE_HEADER_BYTES, 'after the replay passed everything: a header');
  assert.equal(f2.compactedSegments >= 3, true);
  // New dead letters go on after the cut.
  const p3 = appendDeadLetters(f2, codec, catalog, 3001, 5, 50);
  assert.equal(p3.length, 5);
  f2.close();
  const seen: number[] = [];
  new DeadLetterFile(dir2, 'hook', (b, at) => seen.push(readTriggerIdentity(b, at).seq)).close();
  assert.deepEqual(seen, [3001, 3002, 3003, 3004, 3005]);
  assert.equal(finals.length, 10);
});

test('size budget: the bytes on disk never pass maxBytes; the oldest segments go first and every dropped record is counted as over_budget', () => {
  const dir = tmp('dlq-size-');
  const { codec, catalog } = deadLetterCodec(1);
  const file = new DeadLetterFile(dir, 'hook', null, { maxBytes: MIB });
  let appended = 0;
  let maxSeen = 0;
  for (let round = 0; round < 40; round++) {
    appendDeadLetters(file, codec, catalog, appended + 1, 500, 50, () => DeadLetterStatus.FINAL);
    appended += 500;
    const onDisk = deadLetterBytesOnDisk(dir);
    assert.equal(onDisk, file.byteLength);
    maxSeen = Math.max(maxSeen, onDisk);
    assert.ok(onDisk <= MIB, `round ${round}: ${onDisk} bytes on disk`);
  }
  assert.ok(file.droppedRecords[DeadLetterDropReason.OVER_BUDGET]! > 0);
  assert.equal(
    file.droppedRecords[DeadLetterDropReason.OVER_BUDGET]! + file.recordCount,
    appended,
    'kept + dropped = written',
  );
  // What is kept is the newest, in order, up to the last one written.
  file.close();
  const kept = allSeqs(dir);
  assert.equal(kept.length, appended - file.droppedRecords[DeadLetterDropReason.OVER_BUDGET]!);
  assert.equal(kept.at(-1), appended);
  assert.ok(
    kept.every((s, i) => i === 0 || s === kept[i - 1]! + 1),
    'a contiguous run of the newest',
  );
  console.log(
    `dead-letter size budget ${MIB} bytes: ${appended} final dead letters written, at most ${maxSeen} bytes on disk, ${file.droppedRecords[0]} dropped as over_budget`,
  );
});

test('age budget: segments older than maxAgeMs are dropped (too_old); the owner is told of dropped records that waited for replay', () => {
  const dir = tmp('dlq-age-');
  const { codec, catalog } = deadLetterCodec(1);
  let now = 1_000_000;
  const file = new DeadLetterFile(dir, 'hook', null, { maxBytes: MIB, maxAgeMs: 10_000, wallClockMs: () => now });
  const told: number[] = [];
  file.onDrop = (slot, reason) => {
    told.push(slot);
    assert.equal(reason, DeadLetterDropReason.TOO_OLD);
  };
  const early = appendDeadLetters(file, codec, catalog, 1, 300, 20);
  now += 5000;
  appendDeadLetters(file, codec, catalog, 301, 300, 20, () => DeadLetterStatus.FINAL);
  assert.equal(file.segmentCount, 2, 'a segment older than an eighth of the age budget rolls');
  now += 6000;
  file.maintain();
  assert.equal(file.droppedRecords[DeadLetterDropReason.TOO_OLD], 300, 'the first segment is past the age budget');
  assert.deepEqual(told, [positionSlot(early[0]!)], 'its records waited for replay: the owner is told');
  file.releaseSlot(told[0]!);
  now += 5000;
  file.maintain();
  assert.equal(file.droppedRecords[DeadLetterDropReason.TOO_OLD], 600);
  assert.equal(deadLetterBytesOnDisk(dir), FILE_HEADER_BYTES, 'nothing older than the budget is left');
  file.close();
  // At open, too: a segment whose newest record is older than the budget is not even reported.
  const dir2 = tmp('dlq-age2-');
  const f2 = new DeadLetterFile(dir2, 'hook', null);
  appendDeadLetters(f2, codec, catalog, 1, 50, 5);
  f2.close();
  const old = new Date(Date.now() - 60_000);
  for (const n of listDeadLetterSegments(dir2)) fs.utimesSync(path.join(dir2, deadLetterSegmentName(n)), old, old);
  let reported = 0;
  const f3 = new DeadLetterFile(dir2, 'hook', () => reported++, { maxAgeMs: 30_000 });
  assert.equal(reported, 0);
  assert.equal(f3.droppedRecords[DeadLetterDropReason.TOO_OLD], 50);
  f3.close();
});

test('a single-file dead-letter store of an earlier layout is moved into segments: waiting and final records kept, re-delivered ones not', () => {
  const dir = tmp('dlq-legacy-');
  const { codec, catalog } = deadLetterCodec(1);
  // Build the old file by hand: a header, then records as the old flush wrote them (bare status values).
  const staging = tmp('dlq-staging-');
  const f = new DeadLetterFile(staging, 'hook', null);
  appendDeadLetters(f, codec, catalog, 1, 30, 7, (s) =>
    s % 3 === 0 ? DeadLetterStatus.RESOLVED : s % 3 === 1 ? DeadLetterStatus.PENDING : DeadLetterStatus.FINAL,
  );
  f.close();
  const body = fs
    .readFileSync(path.join(staging, deadLetterSegmentName(listDeadLetterSegments(staging)[0]!)))
    .subarray(FILE_HEADER_BYTES);
  // Old status words: the bare values.
  for (let at = 0; at < body.length; at += body.readInt32LE(at))
    body.writeInt32LE(body.readInt32LE(at + TREC_STATUS_W * 4) & 0xff, at + TREC_STATUS_W * 4);
  const legacy = path.join(dir, DEAD_LETTER_FILE);
  const fd = fs.openSync(legacy, 'w+');
  writeFileHeader(fd, DEAD_LETTER_MAGIC, 'hook', 0);
  fs.writeSync(fd, body, 0, body.length, FILE_HEADER_BYTES);
  fs.closeSync(fd);
  let scanned = 0;
  scanDeadLetters(dir, 'hook', () => scanned++);
  assert.equal(scanned, 10, 'the read-only scan reads the old file');
  const pending: number[] = [];
  const moved = new DeadLetterFile(dir, 'hook', (b, at) => pending.push(readTriggerIdentity(b, at).seq));
  assert.equal(fs.existsSync(legacy), false);
  assert.deepEqual(pending, [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]);
  assert.equal(moved.finalRecords, 10);
  assert.equal(moved.recordCount, 20);
  moved.close();
});

test('options are checked with the option named', () => {
  const dir = tmp('dlq-opt-');
  assert.throws(
    () => new DeadLetterFile(dir, 'hook', null, { maxBytes: 1000 }),
    /deadLetter\.maxBytesPerDownstream must be an integer in \[1048576, /,
  );
  assert.throws(
    () => new DeadLetterFile(dir, 'hook', null, { maxAgeMs: 0 }),
    /deadLetter\.maxAgeMs must be an integer in \[1, /,
  );
});
