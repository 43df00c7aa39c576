import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import nodeFs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DREC_LOG_ORDINAL_F64,
  DS_CURSOR_DAMAGED_COPIES_F64,
  DS_CURSOR_FALLBACKS_F64,
  Lane,
  TRG_SEQ_F64,
  TriggerType,
} from '../../src/shm/layout.js';
import { FenceCatalog } from '../../src/dispatch/fence-catalog.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import {
  BacklogLog,
  listSegments,
  LOAD_DAMAGED,
  LOAD_NONE,
  LOAD_SKIPPED,
  readCursor,
  scanBacklog,
  segmentFileName,
} from '../../src/durable/backlog-log.js';
import {
  checksumWords,
  CURSOR_BYTES,
  CURSOR_COMMIT_F64,
  CURSOR_OFFSET_F64,
  FILE_HEADER_BYTES,
} from '../../src/durable/file-layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { listSetAsideFiles, scanSetAsideFiles } from '../../src/durable/set-aside-files.js';
import {
  readTriggerIdentity,
  RecordBuffer,
  TriggerCodec,
  type TriggerResolver,
} from '../../src/durable/trigger-codec.js';
import {
  assertPerDeviceOrder,
  dispatchRecord,
  namerIdentity,
  type ReceivedRecord,
  TriggerRecord,
} from '../dispatch/fixtures.js';

function setup(runId: number): { codec: TriggerCodec; catalog: FenceCatalog } {
  const namer = new IndexNamer();
  const catalog = new FenceCatalog(namer);
  const codec = new TriggerCodec(
    runId,
    { ...namerIdentity(namer), fenceIdBytes: (h) => catalog.idBytes(h), fenceTagsBytes: (h) => catalog.tagsBytes(h) },
    0,
  );
  return { codec, catalog };
}

function open(
  dir: string,
  codec: TriggerCodec,
  extra: Partial<ConstructorParameters<typeof BacklogLog>[0]> = {},
): BacklogLog {
  return new BacklogLog({ dir, downstreamName: 'hook', codec, maxBytes: 1 << 30, ...extra });
}

/** Appends triggers seq 1..n of device (seq % 7) on fence (1, seq % 5). */
function appendAll(log: BacklogLog, catalog: FenceCatalog, from: number, to: number): void {
  const r = new TriggerRecord();
  for (let seq = from; seq <= to; seq++) {
    const rec = dispatchRecord(
      r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, seq % 7),
      catalog.handleOf(1, seq % 5),
    );
    assert.equal(log.append(rec.f64, rec.i32, 0, 0), true);
  }
}

/** Damages the bytes of record `index` (from 0) of the first segment of `dir`. */
function damageRecord(dir: string, index: number): void {
  const file = path.join(dir, segmentFileName(1));
  const bytes = fs.readFileSync(file);
  let at = FILE_HEADER_BYTES;
  for (let k = 0; k < index; k++) at += bytes.readInt32LE(at);
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, Buffer.from([0xde, 0xad]), 0, 2, at + 50);
  fs.closeSync(fd);
}

/**
 * Runs `run` while the node:fs function `name` throws an error with `code` for the calls `when` picks (the others go
 * through), as a failing disk does; then puts it back.
 */
function withFsFailing(
  name: 'openSync' | 'readSync' | 'writeSync',
  when: (...args: unknown[]) => boolean,
  code: string,
  run: () => void,
): void {
  const real = nodeFs[name] as (...a: unknown[]) => unknown;
  (nodeFs as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
    if (when(...args)) throw Object.assign(new Error(`${code}: failing disk, ${name}`), { code });
    return real(...args);
  };
  syncBuiltinESMExports();
  try {
    run();
  } finally {
    (nodeFs as unknown as Record<string, unknown>)[name] = real;
    syncBuiltinESMExports();
  }
}

/** Loads everything loadable; returns the seqs in load order (marking each done unless `keep` says otherwise). */
function loadAll(
  log: BacklogLog,
  resolver: TriggerResolver | null,
  keep: (seq: number) => boolean = () => false,
): number[] {
  const out: number[] = [];
  const rec = dispatchRecord(new TriggerRecord(), 0);
  for (;;) {
    const device = log.loadNext(rec.f64, rec.i32, 0, 0, resolver);
    if (device === LOAD_NONE) return out;
    if (device === LOAD_SKIPPED) continue;
    out.push(rec.f64[TRG_SEQ_F64]!);
    if (!keep(rec.f64[TRG_SEQ_F64]!)) log.markDone(rec.f64[9]!);
  }
}

test('backlog log: records come back in order, from the write buffer too; the cursor moves over the done prefix only', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 100);
  assert.equal(log.unread, 100);
  assert.equal(log.buffered > 0, true, 'not written yet');
  // Seq 40 stays undelivered: the durable cursor cannot pass it.
  assert.deepEqual(
    loadAll(log, null, (s) => s === 40),
    Array.from({ length: 100 }, (_, i) => i + 1),
  );
  assert.equal(log.unread, 0);
  assert.equal(log.loadedOutstanding, 61);
  log.flush();
  log.commit();
  log.close();
  // A restart re-reads from the first undelivered record (seq 40) on: what a crash would re-deliver.
  const again = open(dir, setup(2).codec);
  assert.equal(again.recovered, 61);
  const resolver: TriggerResolver = {
    deviceSlot: (id) => Number(String(id).slice(7)),
    fenceHandle: (id, tags) => catalog.intern(id, tags),
  };
  assert.deepEqual(
    loadAll(again, resolver),
    Array.from({ length: 61 }, (_, i) => i + 40),
  );
  again.close();
  const third = open(dir, setup(3).codec);
  assert.equal(third.recovered, 0, 'all done: nothing left');
  third.close();
});

test('backlog log: a held record leaves the load window but keeps the cursor at or before it; it is read again from the write buffer or the disk, and one damaged on disk since is LOAD_DAMAGED', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-hold-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec, { windowRecords: 8 });
  appendAll(log, catalog, 1, 20);
  const rec = dispatchRecord(new TriggerRecord(), 0);
  const holds = new Map<number, number>();
  const loaded: number[] = [];
  for (;;) {
    const device = log.loadNext(rec.f64, rec.i32, 0, 0, null);
    if (device === LOAD_NONE) break;
    const seq = rec.f64[TRG_SEQ_F64]!;
    loaded.push(seq);
    if (seq === 3 || seq === 10 || seq === 15) holds.set(seq, log.hold(rec.f64[DREC_LOG_ORDINAL_F64]!));
    else log.markDone(rec.f64[DREC_LOG_ORDINAL_F64]!);
  }
  // A window of 8 would stop at 8 records loaded and not done: the held ones are out of it.
  assert.deepEqual(
    loaded,
    Array.from({ length: 20 }, (_, i) => i + 1),
  );
  assert.equal(log.loadedOutstanding, 0);
  assert.equal(log.held, 3);
  // Seq 3 is still in the write buffer.
  assert.ok(log.buffered > 0);
  const out = dispatchRecord(new TriggerRecord(), 0);
  assert.ok(log.reloadHeld(holds.get(3)!, out.f64, out.i32, 0, 0, null) >= 0);
  assert.equal(out.f64[TRG_SEQ_F64], 3);
  assert.equal(out.f64[DREC_LOG_ORDINAL_F64], -1, "read again, it is no longer the log's");
  assert.equal(log.held, 2);
  log.flush();
  // Seq 10 from the disk, kept held.
  assert.ok(log.reloadHeld(holds.get(10)!, out.f64, out.i32, 0, 0, null, true) >= 0);
  assert.equal(out.f64[TRG_SEQ_F64], 10);
  assert.equal(log.held, 2);
  // Seq 15 damaged on disk since it was loaded.
  damageRecord(dir, 14);
  assert.equal(log.reloadHeld(holds.get(15)!, out.f64, out.i32, 0, 0, null), LOAD_DAMAGED);
  assert.equal(log.reloadDamaged, 1);
  assert.equal(log.held, 1, 'the damaged one is released');
  log.close();
  // The cursor stayed at seq 10, still held: a crash gives back seq 10 on (the damaged 15 found again at the open).
  const again = open(dir, setup(2).codec);
  assert.equal(again.recovered, 10);
  assert.equal(again.damagedAtOpen, 1);
  again.close();
});

test('backlog log: a held record the disk refuses to read again (EIO) is LOAD_DAMAGED, counted and released, not thrown', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-hold-eio-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 3);
  log.flush();
  const rec = dispatchRecord(new TriggerRecord(), 0);
  assert.ok(log.loadNext(rec.f64, rec.i32, 0, 0, null) >= 0);
  const h = log.hold(rec.f64[DREC_LOG_ORDINAL_F64]!);
  withFsFailing(
    'readSync',
    () => true,
    'EIO',
    () => assert.equal(log.reloadHeld(h, rec.f64, rec.i32, 0, 0, null), LOAD_DAMAGED),
  );
  assert.equal(log.reloadDamaged, 1);
  assert.equal(log.held, 0);
  assert.match(log.lastError ?? '', /EIO/);
  log.close();
});

test('backlog log: segments roll at their size and are deleted once the cursor passes them; a torn tail is cut', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-seg-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec, { segmentMaxBytes: 8192, bufferBytes: 64 * 1024 });
  appendAll(log, catalog, 1, 300);
  log.flush();
  const segments = listSegments(dir);
  assert.ok(segments.length >= 1);
  appendAll(log, catalog, 301, 600);
  log.flush();
  assert.ok(listSegments(dir).length > segments.length, `rolled: ${listSegments(dir).join(',')}`);
  const seen: number[] = [];
  assert.equal(
    scanBacklog(dir, 'hook', (buf, at) => seen.push(readTriggerIdentity(buf, at).seq)),
    600,
  );
  assert.deepEqual(seen.slice(0, 3), [1, 2, 3]);
  assert.equal(loadAll(log, null).length, 600);
  log.flush();
  log.commit();
  assert.ok(listSegments(dir).length <= 2, `consumed segments deleted: ${listSegments(dir).join(',')}`);
  appendAll(log, catalog, 601, 610);
  log.close();
  // A crash mid-write: half a record at the end of the last segment.
  const last = path.join(dir, segmentFileName(listSegments(dir).at(-1)!));
  fs.appendFileSync(last, Buffer.alloc(50, 9));
  const again = open(dir, setup(2).codec);
  assert.equal(again.recoveredTornBytes, 50);
  assert.equal(again.recovered, 10);
  again.close();
  assert.ok(readCursor(dir) !== null);
});

test('backlog log: damage in the last segment skips the damaged record only; later appends load', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-bad-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 20);
  log.flush();
  log.close();
  // Damage the 11th record's bytes on disk.
  damageRecord(dir, 10);
  const same = setup(1);
  const again = open(dir, same.codec, {});
  assert.equal(again.recovered, 19, 'the scan goes on past the damage');
  assert.equal(again.damagedAtOpen, 1);
  assert.deepEqual(
    loadAll(again, null),
    Array.from({ length: 20 }, (_, i) => i + 1).filter((s) => s !== 11),
  );
  appendAll(again, same.catalog, 21, 25);
  assert.deepEqual(loadAll(again, null), [21, 22, 23, 24, 25]);
  assert.equal(again.unread, 0);
  again.close();
});

test('backlog log: the cap refuses appends, and a drain lifts it', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-cap-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec, { maxBytes: 1 << 20, bufferBytes: 64 * 1024 });
  const r = new TriggerRecord();
  const rec = dispatchRecord(r.set(1, TriggerType.ENTER, Lane.TRANSITION, 1, 1), catalog.handleOf(1, 1));
  let n = 0;
  while (log.append(rec.f64, rec.i32, 0, 0)) n++;
  assert.ok(n > 1000 && log.isFull, `${n} appended before the cap`);
  log.ignoreCap = true;
  assert.equal(log.append(rec.f64, rec.i32, 0, 0), true);
  log.close();
});

test('backlog log: a damaged record in a closed segment is skipped alone; the records after it and the next segments load', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-bad2-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec, { segmentMaxBytes: 4096, bufferBytes: 64 * 1024 });
  // Flush in small steps so the first segment closes after about 4 KiB.
  for (let from = 1; from <= 200; from += 10) {
    appendAll(log, catalog, from, from + 9);
    log.flush();
  }
  log.close();
  assert.ok(listSegments(dir).length >= 3);
  const file = path.join(dir, segmentFileName(listSegments(dir)[0]!));
  const bytes = fs.readFileSync(file);
  let at = FILE_HEADER_BYTES;
  for (let k = 0; k < 5; k++) at += bytes.readInt32LE(at);
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, Buffer.from([0xde, 0xad]), 0, 2, at + 50);
  fs.closeSync(fd);
  const same = setup(1);
  const again = open(dir, same.codec);
  const loaded = loadAll(again, null);
  assert.deepEqual(
    loaded,
    Array.from({ length: 200 }, (_, i) => i + 1).filter((s) => s !== 6),
    'only the damaged record (seq 6) is missing',
  );
  assert.equal(again.damagedAtOpen, 1);
  assert.equal(again.corrupt, 0, 'counted at open, not again when loading');
  assert.equal(again.unread, 0);
  again.close();
});

test('backlog log: records damaged on disk after the open, in the segment it writes to, are settled as lost once reading reaches its write buffer, and the marked ones among them are told apart', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-bad-late-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 200);
  log.close();
  // The next run marks every third record (as a replay passes over copies it derives again).
  const same = setup(1);
  const again = open(dir, same.codec, { onPending: (buf, at) => readTriggerIdentity(buf, at).seq % 3 === 0 });
  assert.equal(again.recovered, 200);
  // Damaged after the open (the open counted them): records 51-60 of the one segment, which the log writes to.
  const file = path.join(dir, segmentFileName(listSegments(dir)[0]!));
  const bytes = fs.readFileSync(file);
  const fd = fs.openSync(file, 'r+');
  let at = FILE_HEADER_BYTES;
  for (let k = 0; k < 60; k++) {
    if (k >= 50) fs.writeSync(fd, Buffer.from([0xde, 0xad]), 0, 2, at + 20);
    at += bytes.readInt32LE(at);
  }
  fs.closeSync(fd);
  // This run appends two more, still in its write buffer.
  appendAll(again, same.catalog, 201, 202);
  const loaded: number[] = [];
  const rec = dispatchRecord(new TriggerRecord(), 0);
  for (;;) {
    const device = again.loadNext(rec.f64, rec.i32, 0, 0, null);
    if (device === LOAD_NONE) break;
    const seq = rec.f64[TRG_SEQ_F64]!;
    loaded.push(seq);
    if (seq % 3 === 0 && seq <= 200) again.markedLoaded();
    again.markDone(rec.f64[9]!);
  }
  const missing = Array.from({ length: 10 }, (_, i) => 51 + i);
  assert.deepEqual(
    loaded,
    Array.from({ length: 202 }, (_, i) => i + 1).filter((s) => !missing.includes(s)),
  );
  assert.equal(again.corrupt, 10, 'the damaged records, settled as lost');
  assert.equal(again.markedLost, missing.filter((s) => s % 3 === 0).length, 'the marked ones among them');
  assert.equal(again.unread, 0, 'nothing left counted that no load can reach');
  again.close();
});

test('backlog log: a segment whose creation a crash cut short (no whole header) is taken as empty', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-short-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 5);
  log.close();
  fs.writeFileSync(path.join(dir, segmentFileName(2)), Buffer.alloc(10));
  let seen = 0;
  assert.equal(
    scanBacklog(dir, 'hook', () => seen++),
    5,
  );
  const next = setup(2);
  const again = open(dir, next.codec);
  assert.equal(again.recovered, 5);
  appendAll(again, next.catalog, 6, 8);
  assert.equal(
    loadAll(again, { deviceSlot: () => 1, fenceHandle: (id, tags) => next.catalog.intern(id, tags) }).length,
    8,
  );
  again.close();
});

/**
 * A dispatcher over `stateDir` (device slots 0..7 named `device-<slot>`) with one downstream `hook` whose sink takes
 * every batch, recording it in `seen`.
 */
function recordingHook(
  stateDir: string,
  seen: ReceivedRecord[],
  extra: Partial<ConstructorParameters<typeof Dispatcher>[0]>,
): Dispatcher {
  return new Dispatcher({
    stateDir,
    namer: new IndexNamer(),
    maxDevices: 8,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    downstreams: [
      {
        name: 'hook',
        sink: {
          deliver: async (b) => {
            for (let i = 0; i < b.count; i++) seen.push({ deviceId: b.deviceId(i), seq: b.seq(i) });
            return { status: 200 };
          },
          close: async () => undefined,
        },
      },
    ],
    ...extra,
  });
}

/** The copy of the cursor file holding the newest commit (0 or 1), read from its bytes. */
function newestCursorCopy(dir: string): number {
  const b = fs.readFileSync(path.join(dir, 'backlog.cursor'));
  return b.readDoubleLE(CURSOR_COMMIT_F64) > b.readDoubleLE(CURSOR_BYTES + CURSOR_COMMIT_F64) ? 0 : 1;
}

/** Flips a byte of cursor copy `copy`. */
function damageCursorCopy(dir: string, copy: number): void {
  const file = path.join(dir, 'backlog.cursor');
  const b = fs.readFileSync(file);
  b[copy * CURSOR_BYTES + CURSOR_OFFSET_F64 + 1]! ^= 0x40;
  fs.writeFileSync(file, b);
}

/** A log of 5000 records, all delivered, the cursor committed after every 50 (100 commits). */
function deliveredLog(dir: string): void {
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 5000);
  log.flush();
  const rec = dispatchRecord(new TriggerRecord(), 0);
  for (let n = 0; n < 5000; n++) {
    assert.ok(log.loadNext(rec.f64, rec.i32, 0, 0, null) >= 0);
    log.markDone(rec.f64[9]!);
    if ((n + 1) % 50 === 0) log.commit();
  }
  log.close();
}

test('backlog cursor: two checksummed copies; a damaged newest copy costs one commit of re-delivery (50 of 5000), and is repaired', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-cursor-'));
  deliveredLog(dir);
  assert.equal(open(dir, setup(2).codec).recovered, 0, 'all delivered');
  damageCursorCopy(dir, newestCursorCopy(dir));
  const again = open(dir, setup(3).codec);
  assert.equal(again.cursorDamagedCopies, 1);
  assert.equal(again.cursorFallback, false);
  assert.equal(again.recovered, 50, 'the commit before: one commit interval comes again, not the log');
  assert.deepEqual(
    loadAll(again, { deviceSlot: () => 0, fenceHandle: () => 0 }),
    Array.from({ length: 50 }, (_, i) => 4951 + i),
  );
  again.close();
  const repaired = open(dir, setup(4).codec);
  assert.equal(repaired.cursorDamagedCopies, 0, 'both copies valid again');
  assert.equal(repaired.recovered, 0);
  repaired.close();
});

test('backlog cursor: with no valid copy the log is read again from its start (re-delivery, never a skip), counted and logged by the dispatcher', async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-cursor2-'));
  const dir = path.join(stateDir, 'hook');
  deliveredLog(dir);
  damageCursorCopy(dir, 0);
  damageCursorCopy(dir, 1);
  const alarms: string[] = [];
  const seen: ReceivedRecord[] = [];
  const d = recordingHook(stateDir, seen, { alarm: (line) => alarms.push(line) });
  const ds = d.downstreams[0]!;
  assert.equal(ds.backlog!.cursorFallback, true);
  assert.equal(ds.recovered, 5000, 'everything comes again: receivers de-duplicate by seq');
  assert.match(
    alarms.join('\n'),
    /hook: backlog cursor damaged \(no valid copy\): the backlog log is read again from its oldest segment/,
  );
  assert.equal(d.metrics[DS_CURSOR_FALLBACKS_F64], 1);
  assert.equal(d.metrics[DS_CURSOR_DAMAGED_COPIES_F64], 2);
  const end = Date.now() + 10_000;
  while (!d.isIdle && Date.now() < end) {
    d.pump();
    await new Promise((r) => setTimeout(r, 1));
  }
  assert.equal(seen.length, 5000);
  assertPerDeviceOrder(seen, 'hook');
  await d.close(100);
});

test('backlog cursor: the single-copy form an earlier layout wrote is read', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-cursor3-'));
  const { codec, catalog } = setup(1);
  const log = open(dir, codec);
  appendAll(log, catalog, 1, 100);
  log.close();
  // The old form: [segment, offset] and a checksum of words 0..3 in word 4, 32 bytes; the cursor past 40 records.
  const bytes = fs.readFileSync(path.join(dir, segmentFileName(1)));
  let at = FILE_HEADER_BYTES;
  for (let k = 0; k < 40; k++) at += bytes.readInt32LE(at);
  const old = new RecordBuffer(CURSOR_BYTES);
  old.f64[0] = 1;
  old.f64[1] = at;
  old.i32[4] = checksumWords(old.i32, 0, 4);
  fs.writeFileSync(path.join(dir, 'backlog.cursor'), old.bytes);
  assert.deepEqual(readCursor(dir), [1, at]);
  const again = open(dir, setup(2).codec);
  assert.equal(again.recovered, 60);
  again.close();
  assert.deepEqual(readCursor(dir), [1, at], 'rewritten in the two-copy form, same place');
  assert.equal(fs.statSync(path.join(dir, 'backlog.cursor')).size, 2 * CURSOR_BYTES);
});

/** Device of the test records of appendAll (seq % 7) whose records `holdMovedSetup` holds. */
const HELD_DEVICE = 0;

/**
 * A log of 600 records in segments of 8 KiB, loaded whole: device 0's records (seq % 7 === 0) held, the rest done,
 * then flushed and committed (unless `commit` is false). Returns the log, the holds by seq, and the segments written before the commit.
 */
function holdMovedSetup(
  dir: string,
  commit = true,
): { log: BacklogLog; holds: Map<number, number>; segmentsBefore: number } {
  const { codec, catalog } = setup(1);
  const log = open(dir, codec, { segmentMaxBytes: 8192, bufferBytes: 64 * 1024, windowRecords: 1024 });
  for (let from = 1; from <= 600; from += 30) {
    appendAll(log, catalog, from, from + 29);
    log.flush();
  }
  const segmentsBefore = listSegments(dir).length;
  const rec = dispatchRecord(new TriggerRecord(), 0);
  const holds = new Map<number, number>();
  for (;;) {
    const device = log.loadNext(rec.f64, rec.i32, 0, 0, null);
    if (device === LOAD_NONE) break;
    const seq = rec.f64[TRG_SEQ_F64]!;
    if (seq % 7 === HELD_DEVICE) holds.set(seq, log.hold(rec.f64[DREC_LOG_ORDINAL_F64]!));
    else log.markDone(rec.f64[DREC_LOG_ORDINAL_F64]!);
  }
  log.flush();
  if (commit) log.commit();
  return { log, holds, segmentsBefore };
}

test('backlog log: held records that alone keep older segments alive move to a set-aside file at the commit, so those segments go; they read again in order, and the file goes with the last', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-moved-'));
  const { log, holds, segmentsBefore } = holdMovedSetup(dir);
  assert.ok(segmentsBefore >= 5, `${segmentsBefore} segments written`);
  assert.ok(listSegments(dir).length <= 2, `segments left: ${listSegments(dir).join(',')} of ${segmentsBefore}`);
  assert.equal(listSetAsideFiles(dir).length, 1);
  assert.equal(log.held, holds.size, 'every hold still held');
  assert.ok(log.setAsideFiles.moved > 0 && log.setAsideFiles.moved < holds.size, `${log.setAsideFiles.moved} moved`);
  // The moved ones are what a scan of the file finds, in seq order, device 0's only.
  const inFile: number[] = [];
  scanSetAsideFiles(dir, 'hook', (buf, at) => inFile.push(readTriggerIdentity(buf, at).seq));
  assert.equal(inFile.length, log.setAsideFiles.moved);
  assert.deepEqual(inFile, [...holds.keys()].slice(0, inFile.length));
  const out = dispatchRecord(new TriggerRecord(), 0);
  const again: number[] = [];
  for (const h of holds.values()) {
    assert.ok(log.reloadHeld(h, out.f64, out.i32, 0, 0, null) >= 0);
    again.push(out.f64[TRG_SEQ_F64]!);
  }
  assert.deepEqual(again, [...holds.keys()], 'every held record reads again, in order');
  assert.equal(log.held, 0);
  assert.equal(listSetAsideFiles(dir).length, 0, 'the file goes with its last record');
  assert.equal(log.setAsideFiles.bytes, 0);
  log.flush();
  log.commit();
  log.close();
  assert.equal(open(dir, setup(2).codec).recovered, 0, 'nothing left in the log');
});

test('backlog log: after a crash the set-aside file and the log past its cursor hold every held record between them, none twice; releaseLoaded (a stop whose pending file holds them) removes the file', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-moved-crash-'));
  const { log, holds } = holdMovedSetup(dir);
  // Never closed: what the disk holds now is what a crash leaves.
  const found: number[] = [];
  scanSetAsideFiles(dir, 'hook', (buf, at) => found.push(readTriggerIdentity(buf, at).seq));
  scanBacklog(dir, 'hook', (buf, at) => {
    const seq = readTriggerIdentity(buf, at).seq;
    if (seq % 7 === HELD_DEVICE) found.push(seq);
  });
  assert.deepEqual(found, [...holds.keys()], 'file first, then the log: every held record once, in order');
  log.releaseLoaded();
  assert.equal(listSetAsideFiles(dir).length, 0);
  log.close();
});

test('backlog log: a held record damaged on disk before it moves is not copied and reads again as LOAD_DAMAGED; a set-aside file the disk refuses leaves every hold in place, counted', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-moved-damaged-'));
  const { log, holds } = holdMovedSetup(dir, false);
  // Record 6 of the first segment is seq 7, the first held.
  damageRecord(dir, 6);
  const segments = listSegments(dir).length;
  withFsFailing(
    'openSync',
    (file) => String(file).includes('setaside-'),
    'ENOSPC',
    () => log.commit(),
  );
  assert.equal(log.writeErrors, 1);
  assert.match(log.lastError ?? '', /ENOSPC/);
  assert.equal(listSegments(dir).length, segments, 'nothing moved: every segment kept');
  assert.equal(log.reloadDamaged, 0, 'nothing counted before it moves');
  // Moves wait 20 commits after a failed write (about a second), then go on.
  for (let k = 0; k < 20; k++) log.commit();
  assert.equal(listSegments(dir).length, segments, 'no move tried while it waits');
  log.commit();
  assert.ok(listSegments(dir).length <= 2, 'moved once the wait is over');
  assert.equal(log.reloadDamaged, 1, 'the damaged one is counted when it is found, since its segment goes');
  const out = dispatchRecord(new TriggerRecord(), 0);
  const again: number[] = [];
  for (const [seq, h] of holds) {
    const slot = log.reloadHeld(h, out.f64, out.i32, 0, 0, null);
    if (seq === 7) assert.equal(slot, LOAD_DAMAGED);
    else again.push(out.f64[TRG_SEQ_F64]!);
  }
  assert.deepEqual(again, [...holds.keys()].slice(1));
  assert.equal(log.reloadDamaged, 1);
  assert.equal(listSetAsideFiles(dir).length, 0);
  log.close();
});

/**
 * Reads again (releasing them) the oldest of the held records `holdMovedSetup` moved, until fewer than a quarter of
 * them are left in their set-aside file, so the next commit compacts it. Returns the number moved, the held seqs in
 * order, how many were released and a record to read into.
 */
function releaseUntilSparse(
  log: BacklogLog,
  holds: Map<number, number>,
): { moved: number; seqs: number[]; released: number; out: { f64: Float64Array; i32: Int32Array } } {
  const moved = log.setAsideFiles.moved;
  const seqs = [...holds.keys()];
  const out = dispatchRecord(new TriggerRecord(), 0);
  const released = moved - Math.floor((moved - 1) / 4);
  for (const seq of seqs.slice(0, released))
    assert.ok(log.reloadHeld(holds.get(seq)!, out.f64, out.i32, 0, 0, null) >= 0);
  return { moved, seqs, released, out };
}

test('backlog log: a set-aside file with fewer than a quarter of its records still held is compacted at the next commit: those copied into a new file, it removed; they read again in order', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-compact-'));
  // A temporary file a crash left mid-write is neither read nor kept.
  fs.writeFileSync(path.join(dir, 'setaside-000000000009.log.tmp'), Buffer.alloc(100, 7));
  const { log, holds } = holdMovedSetup(dir);
  assert.equal(fs.existsSync(path.join(dir, 'setaside-000000000009.log.tmp')), false);
  assert.deepEqual(listSetAsideFiles(dir), [1]);
  const bytesBefore = log.setAsideFiles.bytes;
  const { moved, seqs, released, out } = releaseUntilSparse(log, holds);
  assert.deepEqual(listSetAsideFiles(dir), [1], 'not compacted before the commit');
  log.commit();
  assert.deepEqual(listSetAsideFiles(dir), [2], 'compacted into a new file, the old one removed');
  assert.ok(log.setAsideFiles.bytes < bytesBefore / 2, `${log.setAsideFiles.bytes} of ${bytesBefore} bytes`);
  assert.equal(log.setAsideFiles.moved, moved, 'a compaction moves nothing out of the log');
  const inFile: number[] = [];
  scanSetAsideFiles(dir, 'hook', (buf, at) => inFile.push(readTriggerIdentity(buf, at).seq));
  assert.deepEqual(inFile, seqs.slice(released, moved));
  const again: number[] = [];
  for (const seq of seqs.slice(released)) {
    assert.ok(log.reloadHeld(holds.get(seq)!, out.f64, out.i32, 0, 0, null) >= 0);
    again.push(out.f64[TRG_SEQ_F64]!);
  }
  assert.deepEqual(again, seqs.slice(released), 'the rest read again, in order');
  assert.deepEqual(listSetAsideFiles(dir), []);
  log.close();
});

test("a crash between a set-aside file's write and the cursor's commit: the start takes the file's records once (the log's copies passed over) and the rest of the log, each device's in order, none lost", async () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-moved-uncommitted-'));
  const dir = path.join(stateDir, 'hook');
  const { log, holds } = holdMovedSetup(dir, false);
  // The commit moves the held records of the older segments, then its cursor write fails: the crash comes before the
  // cursor is durable, so the log still holds every record (those moved too) past its cursor.
  withFsFailing(
    'writeSync',
    (...args) => args[3] === CURSOR_BYTES,
    'EIO',
    () => log.commit(),
  );
  assert.ok(log.setAsideFiles.moved > 0, 'moved');
  assert.equal(log.writeErrors, 1, 'the cursor write failed');
  assert.deepEqual(readCursor(dir), [1, FILE_HEADER_BYTES], 'the cursor is still at the first record');
  const seen: ReceivedRecord[] = [];
  const d = recordingHook(stateDir, seen, { runId: 2, log: () => undefined });
  assert.deepEqual(listSetAsideFiles(dir), [], 'taken into the pending file at the start');
  const end = Date.now() + 10_000;
  while (!d.isIdle && Date.now() < end) {
    d.pump();
    await new Promise((r) => setTimeout(r, 1));
  }
  await d.close(100);
  assertPerDeviceOrder(seen, 'hook');
  assert.deepEqual(
    seen.filter((t) => t.deviceId === `device-${HELD_DEVICE}`).map((t) => t.seq),
    [...holds.keys()],
    "the held device's records once each, in order: the file's, then the log's",
  );
  assert.equal(seen.length, 600, 'every record of the log once (the others delivered again after the crash)');
});

test('backlog log: a set-aside file cut short (by something outside the router) is read as damage, not as a refused read: its compaction counts the missing records lost and goes on', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'backlog-moved-short-'));
  const { log, holds } = holdMovedSetup(dir);
  const { moved, seqs, released, out } = releaseUntilSparse(log, holds);
  // The file loses its last record: a read there finds no byte at all.
  let lastAt = 0;
  scanSetAsideFiles(dir, 'hook', (_buf, _at, position) => (lastAt = position));
  fs.truncateSync(path.join(dir, 'setaside-000000000001.log'), lastAt);
  log.commit();
  assert.deepEqual(listSetAsideFiles(dir), [2], 'compacted at once, not waiting');
  assert.equal(log.reloadDamaged, 1, 'the record cut short, counted');
  assert.equal(log.writeErrors, 0);
  const again: number[] = [];
  for (const seq of seqs.slice(released)) {
    if (log.reloadHeld(holds.get(seq)!, out.f64, out.i32, 0, 0, null) >= 0) again.push(out.f64[TRG_SEQ_F64]!);
  }
  assert.deepEqual(again, [...seqs.slice(released, moved - 1), ...seqs.slice(moved)], 'all but the one cut short');
  assert.equal(log.reloadDamaged, 1, 'counted once');
  log.close();
});
