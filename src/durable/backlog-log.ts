/**
 * One downstream's backlog log: the durable, append-only overflow of its per-device queues.
 *
 * A trigger the downstream's memory cannot take goes here (and so does every later trigger of the same device until
 * the log has given its records back), so a device's pending triggers are always "the ones in memory, then the ones
 * in the log", in seq order. Records are trigger records with ids (see trigger-codec.ts), appended through a write
 * buffer flushed with one write and one fdatasync; segments of `segmentMaxBytes` are named
 * `backlog-<segment>.log`. Loading reads records back in file order into memory slots (records still in the write
 * buffer are read from there, without forcing a flush); each loaded record gets an ordinal, and the durable cursor
 * (`backlog.cursor`) moves over the prefix of loaded records that are done: delivered, settled for good, or owned by
 * another file (a parked dead letter and the triggers of its device behind it; at close, the pending file, which then
 * holds every undelivered trigger of memory in order: `releaseLoaded`). The dispatcher flushes its dead-letter ring
 * before it commits the cursor, so the cursor never passes a record whose new owner has not written it yet. A loaded
 * record may also be held (`hold`: out of the load window, read again later by `reloadHeld`): the cursor then stays
 * at or before the oldest held record, until held records are all that keeps whole segments alive; then `commit`
 * moves those into a set-aside file of their own (set-aside-files.ts) before the cursor passes them, so a record held
 * for an hour does not keep the disk of everything logged since.
 *
 * After a crash the log gives back what its durable cursor had not passed: a record delivered after the last commit
 * (or after an older record that was still waiting) comes again, with the same seq; what was still in the write buffer
 * is lost with the rest of memory.
 *
 * Dispatcher thread only. `append`, `loadNext`, `markDone` allocate nothing; `flush` and `commit` do file I/O.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DREC_LOG_ORDINAL_F64 } from '../shm/layout.js';
import { checkFileHeader, writeFileHeader } from './file-header.js';
import {
  BACKLOG_MAGIC,
  checksumWords,
  CURSOR_BYTES,
  CURSOR_CHECKSUM_W,
  CURSOR_COMMIT_F64,
  CURSOR_COPIES,
  CURSOR_FILE_BYTES,
  CURSOR_LEGACY_CHECKSUM_W,
  CURSOR_MAGIC,
  CURSOR_MAGIC_W,
  CURSOR_OFFSET_F64,
  CURSOR_SEGMENT_F64,
  FILE_HEADER_BYTES,
  TREC_MAX_BYTES,
} from './file-layout.js';
import { errorText, listNumberedFiles, numberedFileName, readFully, syncDir, writeFully } from './fs-util.js';
import { BacklogHolds } from './backlog-holds.js';
import { SetAsideFiles } from './set-aside-files.js';
import { findNextRecord, readRecordAt, scanRecords, type RecordVisitor } from './record-scan.js';
import { RecordBuffer, recordIsValid, recordLength, type TriggerCodec, type TriggerResolver } from './trigger-codec.js';

/** Options of BacklogLog. */
export interface BacklogLogOptions {
  /** The downstream's directory (created if absent). */
  dir: string;
  /** The downstream's name (checked against every segment's header). */
  downstreamName: string;
  /** Encodes and decodes records (this run's id and ids). */
  codec: TriggerCodec;
  /** Most bytes of live segments plus the write buffer; past it `append` refuses. */
  maxBytes: number;
  /** A segment is closed once it reaches this size. Default 64 MiB. */
  segmentMaxBytes?: number;
  /** Bytes of the write buffer and of the read buffer each. Default 1 MiB. */
  bufferBytes?: number;
  /** Loaded records that may wait for delivery at once (the done window), a power of two. Default 65536. */
  windowRecords?: number;
  /**
   * Called at open for each record past the cursor (the backlog an earlier run left). Returning true marks the record:
   * the caller will pass it over when it loads it (and says so with `markedLoaded`), so one damaged on disk before it
   * was loaded is counted in `markedLost` as well as in `corrupt`.
   */
  onPending?: (buf: RecordBuffer, at: number, position: number, length: number) => boolean | void;
}

/** Loaded ordinals count modulo this (they stay small integers, so passing one around never boxes a double). */
const ORDINAL_MODULUS = 1 << 30;
const ORDINAL_MASK = ORDINAL_MODULUS - 1;

/** `loadNext` result: nothing left to load (or the done window is full). */
export const LOAD_NONE = -2;
/** `loadNext` result: a record whose device this run cannot name was skipped (counted in `unresolvable`). */
export const LOAD_SKIPPED = -1;
/**
 * `reloadHeld` result: the record no longer verifies (damaged on disk since it was loaded) or cannot be read; counted
 * in `reloadDamaged`.
 */
export const LOAD_DAMAGED = -3;

/** Held records moved out of the log by one commit at most, and the bytes of the buffer that gathers them. */
const MOVE_BATCH_RECORDS = 4096;
const MOVE_BATCH_BYTES = 4 << 20;
/** Segment of a hold whose record was found damaged when it was to be moved (read again as LOAD_DAMAGED). */
const DAMAGED_SEG = 0;
/** Commits that try no move after a set-aside file could not be written (about a second at the usual 50 ms). */
const MOVE_BACKOFF_COMMITS = 20;

const SEGMENT_PREFIX = 'backlog-';
const SEGMENT_SUFFIX = '.log';
const CURSOR_FILE = 'backlog.cursor';

/** Name of segment `n`. */
export function segmentFileName(n: number): string {
  return numberedFileName(SEGMENT_PREFIX, n, SEGMENT_SUFFIX);
}

/** Segment numbers present in `dir`, ascending. */
export function listSegments(dir: string): number[] {
  return listNumberedFiles(dir, SEGMENT_PREFIX, SEGMENT_SUFFIX);
}

/** What reading the cursor file found. */
export interface CursorRead {
  /** [segment, offset] of the newest valid copy, or null when the file is absent or no copy is valid. */
  cursor: [number, number] | null;
  /** Commit number of that copy (0 for the single-copy form of an earlier layout). */
  commit: number;
  /** True when the file exists. */
  exists: boolean;
  /** Copies found damaged (torn, bad checksum or magic); 0 when the file is absent. */
  damagedCopies: number;
}

/** Reads the cursor file of `dir`: both copies, the newest valid one wins (see CURSOR_* in file-layout.ts). */
function readCursorFile(dir: string): CursorRead {
  const buf = new RecordBuffer(CURSOR_FILE_BYTES);
  let fd = -1;
  let got: number;
  try {
    fd = fs.openSync(path.join(dir, CURSOR_FILE), 'r');
    got = readFully(fd, buf.bytes, 0, CURSOR_FILE_BYTES, 0);
  } catch {
    return { cursor: null, commit: 0, exists: false, damagedCopies: 0 };
  } finally {
    if (fd >= 0) fs.closeSync(fd);
  }
  const w = buf.i32;
  // The single-copy form an earlier layout wrote: 32 bytes, checksum of words 0..3 in word 4.
  if (
    got === CURSOR_BYTES &&
    w[CURSOR_MAGIC_W] === 0 &&
    checksumWords(w, 0, CURSOR_LEGACY_CHECKSUM_W) === w[CURSOR_LEGACY_CHECKSUM_W]
  ) {
    return {
      cursor: [buf.f64[CURSOR_SEGMENT_F64 >> 3]!, buf.f64[CURSOR_OFFSET_F64 >> 3]!],
      commit: 0,
      exists: true,
      damagedCopies: 0,
    };
  }
  let best = -1;
  let damaged = 0;
  for (let k = 0; k < CURSOR_COPIES; k++) {
    const cw = (k * CURSOR_BYTES) >> 2;
    const whole = got >= (k + 1) * CURSOR_BYTES;
    if (
      !whole ||
      w[cw + CURSOR_MAGIC_W] !== CURSOR_MAGIC ||
      checksumWords(w, cw, cw + CURSOR_CHECKSUM_W) !== w[cw + CURSOR_CHECKSUM_W]
    ) {
      damaged++;
      continue;
    }
    if (
      best < 0 ||
      buf.f64[(cw >> 1) + (CURSOR_COMMIT_F64 >> 3)]! > buf.f64[((best * CURSOR_BYTES) >> 3) + (CURSOR_COMMIT_F64 >> 3)]!
    )
      best = k;
  }
  if (best < 0) return { cursor: null, commit: 0, exists: true, damagedCopies: damaged };
  const c = (best * CURSOR_BYTES) >> 3;
  return {
    cursor: [buf.f64[c + (CURSOR_SEGMENT_F64 >> 3)]!, buf.f64[c + (CURSOR_OFFSET_F64 >> 3)]!],
    commit: buf.f64[c + (CURSOR_COMMIT_F64 >> 3)]!,
    exists: true,
    damagedCopies: damaged,
  };
}

/** Reads the durable cursor of `dir`: [segment, offset] of its newest valid copy, or null when absent or damaged. */
export function readCursor(dir: string): [number, number] | null {
  return readCursorFile(dir).cursor;
}

/**
 * Visits every pending record of the backlog in `dir` (from its cursor to the end, read-only; stops at a torn tail).
 * The main thread uses it at start to learn which devices the backlog names (`downstreamName` null: a log of any
 * downstream, to count what a downstream no longer configured left). Returns the records visited.
 */
export function scanBacklog(dir: string, downstreamName: string | null, visit: RecordVisitor): number {
  const segments = listSegments(dir);
  if (segments.length === 0) return 0;
  const cursor = readCursor(dir) ?? [segments[0]!, FILE_HEADER_BYTES];
  const buf = new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES));
  let records = 0;
  for (const seg of segments) {
    if (seg < cursor[0]) continue;
    const file = path.join(dir, segmentFileName(seg));
    const fd = fs.openSync(file, 'r');
    try {
      // A segment whose creation a crash cut short holds nothing.
      if (fs.fstatSync(fd).size < FILE_HEADER_BYTES) continue;
      checkFileHeader(fd, file, BACKLOG_MAGIC, downstreamName);
      records += scanRecords(
        fd,
        seg === cursor[0] ? Math.max(FILE_HEADER_BYTES, cursor[1]) : FILE_HEADER_BYTES,
        buf,
        visit,
      ).records;
    } finally {
      fs.closeSync(fd);
    }
  }
  return records;
}

/** A downstream's backlog log (see the module comment). */
export class BacklogLog {
  /** Directory of the segments. */
  readonly dir: string;
  /** Records written by this run. */
  appended = 0;
  /** Records of earlier runs found past the cursor at open. */
  readonly recovered: number;
  /** Records loaded whose device this run could not name (skipped). */
  unresolvable = 0;
  /**
   * Records settled as lost while loading: counted among the pending records, then found damaged on disk (the span is
   * skipped up to the next valid record). The owner settles them (`final`).
   */
  corrupt = 0;
  /** Of `corrupt`, records that `onPending` marked at open (see BacklogLogOptions.onPending). */
  markedLost = 0;
  /**
   * Held records lost when read again (`reloadHeld`): they no longer verified, the disk refused the read (the text in
   * `lastError`), or their device could not be named; and those found damaged when they were to be moved to a
   * set-aside file (counted then, though the owner settles them only when it reads them again). The owner settles them
   * (`final`).
   */
  reloadDamaged = 0;
  /** Per segment: records `onPending` marked at open and not loaded yet. */
  private readonly segmentMarked = new Map<number, number>();
  /** Segment of the record `loadNext` returned last. */
  private lastLoadedSeg = -1;
  /** Damaged spans found past the cursor at open (each at least one record, lost; not among `recovered`). */
  readonly damagedAtOpen: number;
  /** Bytes cut from a torn tail at open. */
  readonly recoveredTornBytes: number;
  /** Cursor copies found damaged at open (0, 1 or 2). */
  readonly cursorDamagedCopies: number;
  /**
   * True when the cursor file existed but no copy of it was valid: the log is read again from its oldest segment (a
   * re-delivery of what was already delivered, which receivers de-duplicate by seq, rather than a loss).
   */
  readonly cursorFallback: boolean;
  /**
   * Failed writes, fsyncs and cursor commits (the data stays buffered and is written again at the next `flush`), and
   * failed writes and removals of set-aside files (the records stay where they were and moves wait
   * MOVE_BACKOFF_COMMITS commits; a removal is tried again as often; a file still there is read again by the next
   * start).
   */
  writeErrors = 0;
  /** Where held records go once they alone keep segments alive (see the module comment). */
  readonly setAsideFiles: SetAsideFiles;
  /** True when the record `loadNext` loaded last was written by an earlier run (found past the cursor at open). */
  lastLoadedEarlier = false;
  /** The last write error, as text (null: none yet). */
  lastError: string | null = null;
  /** True while the last flush failed: the write buffer keeps what it could not write. */
  private writeFailing = false;

  private readonly name: string;
  private readonly codec: TriggerCodec;
  private readonly maxBytes: number;
  private readonly segmentMaxBytes: number;
  private readonly wbuf: RecordBuffer;
  private wlen = 0;
  /** Records in the write buffer. */
  private wcount = 0;
  private readonly rbuf: RecordBuffer;
  /** Holds one record read again by `reloadHeld`. */
  private readonly reloadBuf = new RecordBuffer(TREC_MAX_BYTES);
  /** Segment and file position of the bytes held in rbuf: [rbufPos, rbufPos + rbufLen) of segment rbufSeg. */
  private rbufSeg = -1;
  private rbufPos = 0;
  private rbufLen = 0;
  /** Records not yet loaded in each live segment (written or in the write buffer), by segment number. */
  private readonly segmentUnread = new Map<number, number>();
  /** Flushed bytes of every live segment, by segment number, and their sum. */
  private readonly segmentBytes = new Map<number, number>();
  private segmentsTotalBytes = 0;
  private writeSeg: number;
  private writeFd: number;
  private readSeg: number;
  private readOff: number;
  private readFd = -1;
  private readFdSeg = -1;
  /** Records appended (or recovered) and not loaded. */
  private unreadCount: number;
  /** Done window over loaded ordinals [doneOrd, loadOrd), counted modulo ORDINAL_MODULUS. */
  private readonly windowRecords: number;
  private readonly winSeg: Float64Array;
  private readonly winOff: Float64Array;
  private readonly winDone: Uint8Array;
  /** Held records (see `hold`): windowRecords at most at once. */
  private readonly holds: BacklogHolds;
  /**
   * A read descriptor of its own for `reloadHeld` (segment reloadFdSeg), so the loader's is not closed and opened
   * again.
   */
  private reloadFd = -1;
  private reloadFdSeg = -1;
  /** Gather a move's cells and their records (allocated at the first move). */
  private moveCells: Int32Array | null = null;
  private moveAt: Float64Array | null = null;
  private moveBuf: RecordBuffer | null = null;
  /** Commits left before moves, and removals of set-aside files the disk refused, are tried again. */
  private moveBackoff = 0;
  private removeBackoff = 0;
  private doneOrd = 0;
  private loadOrd = 0;
  /** The cursor last made durable. */
  private durableSeg: number;
  private durableOff: number;
  private readonly cursorFd: number;
  private readonly cursorBuf = new RecordBuffer(CURSOR_BYTES);
  /** Number of the last cursor commit written (copy `commitNumber & 1` holds it). */
  private commitNumber: number;
  private closed = false;
  /** Where the records of earlier runs end: segment and offset (this run appends after them). */
  private readonly openEndSeg: number;
  private readonly openEndOff: number;

  /** Opens (creating if needed) the backlog in `options.dir`: cuts a torn tail, reads the cursor, counts what is pending. */
  constructor(options: BacklogLogOptions) {
    this.dir = options.dir;
    this.name = options.downstreamName;
    this.codec = options.codec;
    this.maxBytes = options.maxBytes;
    this.segmentMaxBytes = options.segmentMaxBytes ?? 64 * 1024 * 1024;
    const bufferBytes = Math.max(options.bufferBytes ?? 1 << 20, 2 * TREC_MAX_BYTES);
    this.wbuf = new RecordBuffer(bufferBytes);
    this.rbuf = new RecordBuffer(bufferBytes);
    this.windowRecords = options.windowRecords ?? 65536;
    if ((this.windowRecords & (this.windowRecords - 1)) !== 0 || this.windowRecords > ORDINAL_MODULUS) {
      throw new RangeError(`windowRecords must be a power of two up to 2^30, got ${this.windowRecords}`);
    }
    this.winSeg = new Float64Array(this.windowRecords);
    this.winOff = new Float64Array(this.windowRecords);
    this.winDone = new Uint8Array(this.windowRecords);
    this.holds = new BacklogHolds(this.windowRecords);
    fs.mkdirSync(this.dir, { recursive: true });
    this.setAsideFiles = new SetAsideFiles(this.dir, this.name, (err) => this.noteWriteError(err));
    let segments = listSegments(this.dir);
    if (segments.length === 0) {
      const first = fs.openSync(path.join(this.dir, segmentFileName(1)), 'w+');
      writeFileHeader(first, BACKLOG_MAGIC, this.name, 1);
      fs.fdatasyncSync(first);
      fs.closeSync(first);
      syncDir(this.dir);
      segments = [1];
    }
    const last = segments[segments.length - 1]!;
    // Only the last segment can have a torn tail (earlier ones were closed after a flush).
    const lastFile = path.join(this.dir, segmentFileName(last));
    const fd = fs.openSync(lastFile, 'r+');
    if (fs.fstatSync(fd).size < FILE_HEADER_BYTES) {
      // Created by a run that stopped before its header was written: an empty segment.
      fs.ftruncateSync(fd, 0);
      writeFileHeader(fd, BACKLOG_MAGIC, this.name, last);
      fs.fdatasyncSync(fd);
    }
    checkFileHeader(fd, lastFile, BACKLOG_MAGIC, this.name);
    const size = fs.fstatSync(fd).size;
    const valid = scanRecords(fd, FILE_HEADER_BYTES, this.rbuf, null, size).validEnd;
    this.recoveredTornBytes = size - valid;
    if (valid !== size) {
      fs.ftruncateSync(fd, valid);
      fs.fdatasyncSync(fd);
    }
    this.writeSeg = last;
    this.writeFd = fd;
    this.openEndSeg = last;
    this.openEndOff = valid;
    for (const s of segments)
      this.setSegmentBytes(
        s,
        s === last ? valid : Math.max(FILE_HEADER_BYTES, fs.statSync(path.join(this.dir, segmentFileName(s))).size),
      );
    const read = readCursorFile(this.dir);
    this.cursorDamagedCopies = read.damagedCopies;
    // No valid copy of an existing cursor: read the log again from its start (re-delivery is what receivers
    // de-duplicate; skipping would lose). The owner logs it.
    this.cursorFallback = read.exists && read.cursor === null;
    let cursor = read.cursor ?? [segments[0]!, FILE_HEADER_BYTES];
    // A cursor one commit old may name a segment deleted since: its successors start where it ended.
    if (cursor[0] < segments[0]! || cursor[0] > last) cursor = [segments[0]!, FILE_HEADER_BYTES];
    cursor[1] = Math.min(Math.max(cursor[1], FILE_HEADER_BYTES), this.segmentBytes.get(cursor[0]) ?? FILE_HEADER_BYTES);
    this.readSeg = cursor[0];
    this.readOff = cursor[1];
    this.durableSeg = cursor[0];
    this.durableOff = cursor[1];
    this.commitNumber = read.commit;
    const cursorPath = path.join(this.dir, CURSOR_FILE);
    this.cursorFd = fs.openSync(cursorPath, read.exists ? 'r+' : 'w+');
    if (!read.exists || read.commit === 0 || read.damagedCopies > 0) {
      // Both copies valid from here on (a new file, the single-copy form, or a damaged copy): two commits of the
      // cursor in use, each fsynced.
      this.writeCursorFile(this.durableSeg, this.durableOff);
      this.writeCursorFile(this.durableSeg, this.durableOff);
      if (!read.exists) syncDir(this.dir);
    }
    // Segments wholly before the cursor are done.
    for (const s of segments) if (s < this.readSeg) this.deleteSegment(s);
    let pending = 0;
    let damaged = 0;
    const onPending = options.onPending ?? null;
    let marked = 0;
    for (const s of segments) {
      if (s < this.readSeg) continue;
      const file = path.join(this.dir, segmentFileName(s));
      const sfd = s === last ? this.writeFd : fs.openSync(file, 'r');
      try {
        if (s !== last && fs.fstatSync(sfd).size < FILE_HEADER_BYTES) continue;
        if (s !== last) checkFileHeader(sfd, file, BACKLOG_MAGIC, this.name);
        const scan = scanRecords(
          sfd,
          s === this.readSeg ? this.readOff : FILE_HEADER_BYTES,
          this.rbuf,
          onPending === null
            ? null
            : (buf, at, position, length) => {
                if (onPending(buf, at, position, length) === true) marked++;
              },
          this.segmentBytes.get(s)!,
        );
        this.segmentMarked.set(s, marked);
        marked = 0;
        this.segmentUnread.set(s, scan.records);
        pending += scan.records;
        damaged += scan.damagedSpans;
      } finally {
        if (s !== last) fs.closeSync(sfd);
      }
    }
    this.recovered = pending;
    this.unreadCount = pending;
    this.damagedAtOpen = damaged;
  }

  /** Records appended or recovered and not loaded yet. */
  get unread(): number {
    return this.unreadCount;
  }

  /** The load window: loaded records not yet done, at most (see BacklogLogOptions.windowRecords). */
  get windowSize(): number {
    return this.windowRecords;
  }

  /** Loaded records not yet done. */
  get loadedOutstanding(): number {
    return (this.loadOrd - this.doneOrd) & ORDINAL_MASK;
  }

  /** True when the loaded records not yet done fill half the load window or more (see `windowRecords`). */
  get loadWindowHalfFull(): boolean {
    return this.loadedOutstanding * 2 >= this.windowRecords;
  }

  /** Bytes of the live segments plus the write buffer, and of the set-aside files. */
  get liveBytes(): number {
    return this.segmentsTotalBytes + this.wlen + this.setAsideFiles.bytes;
  }

  /**
   * Set while the router drains: the cap no longer applies, so what the trigger rings still hold (a bounded amount)
   * is kept on disk rather than left in the rings when the process ends.
   */
  ignoreCap = false;

  /** True when an append would pass `maxBytes`, or writes are failing and the write buffer has no room left. */
  get isFull(): boolean {
    if (this.writeFailing && this.wlen + TREC_MAX_BYTES > this.wbuf.byteLength) return true;
    return !this.ignoreCap && this.liveBytes + TREC_MAX_BYTES > this.maxBytes;
  }

  /**
   * True when `append` can take a record now: the log is not full, and the write buffer has room for the longest
   * record (flushing it first when it has not: a flush that fails leaves the buffer as it was, and the answer false).
   */
  canAppend(): boolean {
    if (this.isFull) return false;
    if (this.wlen + TREC_MAX_BYTES <= this.wbuf.byteLength) return true;
    this.flush();
    return this.wlen + TREC_MAX_BYTES <= this.wbuf.byteLength;
  }

  /** Bytes waiting in the write buffer. */
  get buffered(): number {
    return this.wlen;
  }

  /** Records waiting in the write buffer. */
  get bufferedRecords(): number {
    return this.wcount;
  }

  /**
   * Of `bufferedRecords`, those not loaded yet (the write buffer holds the log's last records, and loading goes in
   * order): the others are in their owner's memory too.
   */
  get bufferedUnloaded(): number {
    return Math.min(this.wcount, this.segmentUnread.get(this.writeSeg) ?? 0);
  }

  /** True while the loaded record `ordinal` is in the write buffer only (no flush has put it on disk yet). */
  loadedUnflushed(ordinal: number): boolean {
    const w = ordinal & (this.windowRecords - 1);
    return this.unflushedAt(this.winSeg[w]!, this.winOff[w]!);
  }

  /** True while the held record `h` is in the write buffer only (see `loadedUnflushed`). */
  heldUnflushed(h: number): boolean {
    return this.unflushedAt(this.holds.segOf(h), this.holds.offOf(h));
  }

  /** Whether a record of the log at (seg, off) lies past the write segment's flushed end (set-aside places: no). */
  private unflushedAt(seg: number, off: number): boolean {
    return seg === this.writeSeg && off >= this.segmentBytes.get(seg)!;
  }

  /**
   * Appends the dispatch record at (f64, i32, baseF64, baseI32) (flushing first when the buffer is full). Returns
   * false, storing nothing, when the log is full. The record is durable after the next `flush`. Allocation-free.
   */
  append(f64: Float64Array, i32: Int32Array, baseF64: number, baseI32: number): boolean {
    if (this.isFull) return false;
    let n = this.codec.encode(f64, i32, baseF64, baseI32, this.wbuf, this.wlen, this.wbuf.byteLength, 0);
    if (n === 0) {
      this.flush();
      // A failed flush keeps the buffer: nothing is stored (the caller asked `canAppend`, so this is not reached).
      if (this.wlen > 0) return false;
      n = this.codec.encode(f64, i32, baseF64, baseI32, this.wbuf, 0, this.wbuf.byteLength, 0);
    }
    this.wlen += n;
    this.wcount++;
    this.appended++;
    this.unreadCount++;
    this.segmentUnread.set(this.writeSeg, (this.segmentUnread.get(this.writeSeg) ?? 0) + 1);
    return true;
  }

  /**
   * Writes the buffered records with one write and one fdatasync, then starts a new segment when this one is full.
   * Returns false when the write failed (disk full, I/O error: counted in `writeErrors`, the text in `lastError`): the
   * buffer keeps its records and the next flush writes them again at the same place.
   */
  flush(): boolean {
    if (this.wlen === 0) return true;
    const end = this.segmentBytes.get(this.writeSeg)!;
    try {
      writeFully(this.writeFd, this.wbuf.bytes, 0, this.wlen, end);
      fs.fdatasyncSync(this.writeFd);
    } catch (err) {
      this.noteWriteError(err);
      this.writeFailing = true;
      // Cut what part of the write landed, so the segment ends at its last whole flush (best effort).
      try {
        fs.ftruncateSync(this.writeFd, end);
      } catch {
        // The next flush writes over it from `end` anyway.
      }
      return false;
    }
    this.writeFailing = false;
    const size = end + this.wlen;
    this.setSegmentBytes(this.writeSeg, size);
    this.wlen = 0;
    this.wcount = 0;
    if (size >= this.segmentMaxBytes) this.rollSegment();
    return true;
  }

  /** True while the last flush failed (its records wait in the write buffer). */
  get failing(): boolean {
    return this.writeFailing;
  }

  /**
   * Loads the next record into the dispatch record at (f64, i32, baseF64, baseI32), setting its DREC_LOG_ORDINAL_F64.
   * Returns the device slot, LOAD_SKIPPED (a record this run cannot name: skipped and counted, its ordinal done), or
   * LOAD_NONE (nothing left, or the done window is full). Allocation-free for records of this run.
   */
  loadNext(
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    resolver: TriggerResolver | null,
  ): number {
    if (this.unreadCount === 0 || ((this.loadOrd - this.doneOrd) & ORDINAL_MASK) >= this.windowRecords)
      return LOAD_NONE;
    for (;;) {
      const segEnd = this.segmentBytes.get(this.readSeg)!;
      let buf = this.rbuf;
      let at: number;
      let end: number;
      if (this.readOff >= segEnd) {
        if (this.readSeg !== this.writeSeg) {
          this.settleUnloadable();
          this.readSeg++;
          this.readOff = FILE_HEADER_BYTES;
          continue;
        }
        // Not written yet: read it from the write buffer (its position is where the next flush puts it). Arriving at
        // the buffer, every record written to disk before it was passed: those still counted were damaged (settled).
        if (this.readOff === segEnd) this.settleUnloadable();
        at = this.readOff - segEnd;
        if (at >= this.wlen) return LOAD_NONE;
        buf = this.wbuf;
        end = this.wlen;
      } else {
        at = this.bufferRecordAt(this.readSeg, this.readOff, segEnd);
        end = this.rbufLen;
      }
      const length = at < 0 ? 0 : recordLength(buf, at, end);
      if (at < 0 || !recordIsValid(buf, at, length, end)) {
        // A damaged record inside a written segment (the write buffer is never damaged): go on at the next record
        // that verifies (see record-scan.ts). A span already damaged at open was never counted; records counted and
        // found damaged only now are settled as lost when the segment ends (`settleUnloadable`).
        const next = findNextRecord(this.fdFor(this.readSeg), this.readOff + 8, segEnd, this.rbuf);
        this.rbufSeg = -1;
        this.readOff = next < 0 ? segEnd : next;
        if (next < 0) this.settleUnloadable();
        continue;
      }
      const ord = this.loadOrd;
      this.loadOrd = (ord + 1) & ORDINAL_MASK;
      const w = ord & (this.windowRecords - 1);
      this.winSeg[w] = this.readSeg;
      this.winOff[w] = this.readOff;
      this.winDone[w] = 0;
      this.lastLoadedEarlier =
        this.readSeg < this.openEndSeg || (this.readSeg === this.openEndSeg && this.readOff < this.openEndOff);
      this.lastLoadedSeg = this.readSeg;
      this.readOff += length;
      this.unreadCount--;
      this.segmentUnread.set(this.readSeg, this.segmentUnread.get(this.readSeg)! - 1);
      const slot = this.codec.decode(buf, at, f64, i32, baseF64, baseI32, resolver);
      f64[baseF64 + DREC_LOG_ORDINAL_F64] = ord;
      if (slot < 0) {
        this.unresolvable++;
        this.markDone(ord);
        return LOAD_SKIPPED;
      }
      return slot;
    }
  }

  /**
   * Moves the loaded record `ordinal` (not done) out of the load window into a hold: it is done in the window, and the
   * durable cursor stays at or before its position until the hold is released (`reloadHeld`, `releaseHolds`), so a
   * crash gives it back. Loads of other records go on meanwhile: a hold bounds only the cursor, not the window. Returns
   * the hold (in [0, windowRecords)), or -1 when `windowRecords` records are held already (the record stays loaded).
   * Allocation-free.
   */
  hold(ordinal: number): number {
    const mask = this.windowRecords - 1;
    const h = this.holds.take(this.winSeg[ordinal & mask]!, this.winOff[ordinal & mask]!);
    if (h >= 0) this.markDone(ordinal);
    return h;
  }

  /** Records held (see `hold`). */
  get held(): number {
    return this.holds.count;
  }

  /**
   * Reads the held record `h` into the dispatch record at (f64, i32, baseF64, baseI32), with ordinal -1 (no longer the
   * log's), and releases the hold unless `keep`. Returns its device slot, or LOAD_SKIPPED (its device cannot be named:
   * counted in `unresolvable`) or LOAD_DAMAGED (it no longer verifies: counted in `reloadDamaged`); those are released
   * even with `keep`. Reads through a buffer of its own, so the sequential load keeps its read-ahead. Allocation-free
   * for records of this run, except when it releases the last record of a set-aside file (the file is removed).
   */
  reloadHeld(
    h: number,
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    resolver: TriggerResolver | null,
    keep = false,
  ): number {
    const seg = this.holds.segOf(h);
    const off = this.holds.offOf(h);
    const segEnd = seg > 0 ? this.segmentBytes.get(seg)! : 0;
    let buf = this.reloadBuf;
    let at = 0;
    let end: number;
    if (seg === DAMAGED_SEG) {
      end = 0;
    } else if (seg < 0) {
      end = this.setAsideFiles.read(-seg, off, buf);
      if (end < 0) {
        // Refused (I/O error): taken as damaged, as below.
        this.lastError = this.setAsideFiles.lastError;
        end = 0;
      }
    } else if (off >= segEnd) {
      // Loaded from the write buffer and not flushed since (a flush puts it at this very position).
      buf = this.wbuf;
      at = seg === this.writeSeg ? off - segEnd : this.wlen;
      end = this.wlen;
    } else {
      try {
        end = readRecordAt(this.reloadFdFor(seg), off, segEnd, buf);
      } catch (err) {
        // The disk refuses the read (I/O error): taken as damaged, or one bad sector would stop every device's loading.
        this.lastError = errorText(err);
        end = 0;
      }
    }
    const length = recordLength(buf, at, end);
    let slot: number;
    if (!recordIsValid(buf, at, length, end)) {
      // One found damaged when it was to be moved was counted then.
      if (seg !== DAMAGED_SEG) this.reloadDamaged++;
      slot = LOAD_DAMAGED;
    } else {
      slot = this.codec.decode(buf, at, f64, i32, baseF64, baseI32, resolver);
      f64[baseF64 + DREC_LOG_ORDINAL_F64] = -1;
      if (slot < 0) {
        // Its device cannot be named (not this run's id table): lost with the damaged ones, and counted with them.
        this.unresolvable++;
        this.reloadDamaged++;
        slot = LOAD_SKIPPED;
      }
    }
    if (!keep || slot < 0) {
      this.holds.release(h);
      if (seg < 0) this.setAsideFiles.release(-seg);
    }
    return slot;
  }

  private reloadFdFor(seg: number): number {
    if (seg === this.writeSeg) return this.writeFd;
    if (this.reloadFdSeg !== seg) {
      this.closeReloadFd();
      this.reloadFd = fs.openSync(path.join(this.dir, segmentFileName(seg)), 'r');
      this.reloadFdSeg = seg;
    }
    return this.reloadFd;
  }

  private closeReloadFd(): void {
    if (this.reloadFd >= 0) fs.closeSync(this.reloadFd);
    this.reloadFd = -1;
    this.reloadFdSeg = -1;
  }

  /**
   * The read position is past every written record of its segment: records still counted as unread there (beyond
   * those in the write buffer) were damaged on disk after they were counted. They are settled as lost (`corrupt`).
   */
  private settleUnloadable(): void {
    const buffered = this.readSeg === this.writeSeg ? this.wcount : 0;
    const left = (this.segmentUnread.get(this.readSeg) ?? 0) - buffered;
    if (left <= 0) return;
    this.corrupt += left;
    this.unreadCount -= left;
    this.segmentUnread.set(this.readSeg, buffered);
    // The marked records of this segment not loaded are among them (the write buffer holds none: this run's).
    this.markedLost += this.segmentMarked.get(this.readSeg) ?? 0;
    this.segmentMarked.set(this.readSeg, 0);
  }

  /** The record `loadNext` returned last was one that `onPending` marked at open (see BacklogLogOptions.onPending). */
  markedLoaded(): void {
    const left = this.segmentMarked.get(this.lastLoadedSeg) ?? 0;
    if (left > 0) this.segmentMarked.set(this.lastLoadedSeg, left - 1);
  }

  /** Marks a loaded record done (delivered, or now owned by another file). Allocation-free. */
  markDone(ordinal: number): void {
    const outstanding = (this.loadOrd - this.doneOrd) & ORDINAL_MASK;
    if (((ordinal - this.doneOrd) & ORDINAL_MASK) >= outstanding) return;
    const mask = this.windowRecords - 1;
    this.winDone[ordinal & mask] = 1;
    while (this.doneOrd !== this.loadOrd && this.winDone[this.doneOrd & mask] === 1) {
      this.winDone[this.doneOrd & mask] = 0;
      this.doneOrd = (this.doneOrd + 1) & ORDINAL_MASK;
    }
  }

  /**
   * Every loaded record is now owned by another file (the pending file written at close holds the ones still
   * undelivered): the cursor may pass them all. Call `commit` after it.
   */
  releaseLoaded(): void {
    this.holds.clear();
    this.setAsideFiles.releaseAll();
    const mask = this.windowRecords - 1;
    while (this.doneOrd !== this.loadOrd) {
      this.winDone[this.doneOrd & mask] = 0;
      this.doneOrd = (this.doneOrd + 1) & ORDINAL_MASK;
    }
  }

  /**
   * Makes the cursor durable when it moved (one 32-byte write and an fdatasync), then deletes the segments wholly
   * before it. Call after `flush` so the cursor never points past durable bytes. First, when held records alone keep
   * segments before the load window's, moves up to MOVE_BATCH_RECORDS of them into a set-aside file, and compacts
   * set-aside files mostly released: a read of each record moved, one file write and two fsyncs.
   */
  commit(): void {
    let seg: number;
    let off: number;
    if (this.doneOrd !== this.loadOrd) {
      const w = this.doneOrd & (this.windowRecords - 1);
      seg = this.winSeg[w]!;
      off = this.winOff[w]!;
    } else {
      seg = this.readSeg;
      off = this.readOff;
    }
    // Set-aside files whose removal the disk refused: tried again, waiting as moves do, on their own.
    if (this.removeBackoff > 0) this.removeBackoff--;
    else if (!this.setAsideFiles.retryRemovals()) this.removeBackoff = MOVE_BACKOFF_COMMITS;
    // Held records alone keep the segments before the window's: they go to a set-aside file, so those can go.
    if (this.moveBackoff > 0) this.moveBackoff--;
    else {
      if (this.holds.oldest() >= 0 && this.holds.segOf(this.holds.oldest()) < seg) this.moveHeldBefore(seg);
      if (this.moveBackoff === 0 && this.setAsideFiles.anySparse) this.compactSetAside();
    }
    const oldest = this.holds.oldest();
    if (oldest >= 0) {
      // The oldest held record bounds the cursor too.
      const hs = this.holds.segOf(oldest);
      const ho = this.holds.offOf(oldest);
      if (hs < seg || (hs === seg && ho < off)) {
        seg = hs;
        off = ho;
      }
    }
    if (seg === this.durableSeg && off === this.durableOff) return;
    try {
      this.writeCursorFile(seg, off);
    } catch (err) {
      // The durable cursor stays where it was: a crash re-delivers a little more, nothing is lost. Moves wait: the
      // log's copies of what they move stay past the cursor meanwhile.
      this.noteWriteError(err);
      this.moveBackoff = MOVE_BACKOFF_COMMITS;
      return;
    }
    const from = this.durableSeg;
    this.durableSeg = seg;
    this.durableOff = off;
    for (let s = from; s < seg; s++) if (s !== this.writeSeg) this.deleteSegment(s);
  }

  /** Moves the held records of the segments before `seg` (a batch at most), oldest first (see `copyHeld`). */
  private moveHeldBefore(seg: number): void {
    const cells = (this.moveCells ??= new Int32Array(MOVE_BATCH_RECORDS));
    this.copyHeld(this.holds.inOrderBefore(seg, cells), true);
  }

  /**
   * Copies the records still held in set-aside files due for compaction (a batch at most) into a new one, in the order
   * of their cells (the order within a file does not matter: a start sorts what it takes by seq).
   */
  private compactSetAside(): void {
    const cells = (this.moveCells ??= new Int32Array(MOVE_BATCH_RECORDS));
    let count = 0;
    for (let cell = 0; cell < this.windowRecords && count < MOVE_BATCH_RECORDS; cell++) {
      const seg = this.holds.segOf(cell);
      if (seg < 0 && this.holds.isHeld(cell) && this.setAsideFiles.isSparse(-seg)) cells[count++] = cell;
    }
    this.copyHeld(count, false);
  }

  /**
   * Copies the records held in the first `count` cells of moveCells (`fromLog`: in log segments; else in set-aside
   * files) into a new set-aside file, durably, and points their holds there, releasing their places in the files they
   * leave. One found damaged is not copied: its hold reads again as LOAD_DAMAGED, and it is counted in
   * `reloadDamaged` now (its segment may go before it is read again). A read the disk refuses ends the batch there.
   * When the file cannot be written nothing moves (counted in `writeErrors`). After either, moves wait
   * MOVE_BACKOFF_COMMITS commits.
   */
  private copyHeld(count: number, fromLog: boolean): void {
    const cells = this.moveCells!;
    const at = (this.moveAt ??= new Float64Array(MOVE_BATCH_RECORDS));
    const out = (this.moveBuf ??= new RecordBuffer(MOVE_BATCH_BYTES));
    const buf = this.reloadBuf;
    let length = FILE_HEADER_BYTES;
    let records = 0;
    let damaged = 0;
    for (let k = 0; k < count; k++) {
      const s = this.holds.segOf(cells[k]!);
      const o = this.holds.offOf(cells[k]!);
      let end: number;
      if (s > 0) {
        try {
          end = readRecordAt(this.reloadFdFor(s), o, this.segmentBytes.get(s)!, buf);
        } catch (err) {
          this.lastError = errorText(err);
          end = -1;
        }
      } else {
        end = this.setAsideFiles.read(-s, o, buf);
        if (end < 0) this.lastError = this.setAsideFiles.lastError;
      }
      if (end < 0) {
        // The disk refused the read (an I/O error; a short read is damage, below): this batch ends here, and moves
        // wait.
        this.moveBackoff = MOVE_BACKOFF_COMMITS;
        count = k;
        break;
      }
      const n = recordLength(buf, 0, end);
      if (!recordIsValid(buf, 0, n, end)) {
        at[k] = -1;
        damaged++;
        continue;
      }
      if (length + n > out.byteLength) {
        count = k;
        break;
      }
      out.bytes.set(buf.bytes.subarray(0, n), length);
      at[k] = length;
      length += n;
      records++;
    }
    let file = 0;
    if (records > 0) {
      file = this.setAsideFiles.write(out, length, records);
      if (file < 0) {
        this.moveBackoff = MOVE_BACKOFF_COMMITS;
        return;
      }
      if (fromLog) this.setAsideFiles.noteMoved(records);
    }
    this.reloadDamaged += damaged;
    for (let k = 0; k < count; k++) {
      const cell = cells[k]!;
      const left = this.holds.segOf(cell);
      if (at[k]! < 0) this.holds.move(cell, DAMAGED_SEG, 0);
      else this.holds.move(cell, -file, at[k]!);
      if (left < 0) this.setAsideFiles.release(-left);
    }
  }

  /** Flushes, commits and closes the files (a flush that fails leaves those records to the caller: see `buffered`). */
  close(): void {
    if (this.closed) return;
    this.flush();
    this.commit();
    this.closed = true;
    fs.closeSync(this.writeFd);
    this.closeReadFd();
    this.closeReloadFd();
    this.setAsideFiles.close();
    fs.closeSync(this.cursorFd);
  }

  /** Makes the record at (seg, off) readable in rbuf; returns its offset there (-1 when it cannot be read). */
  private bufferRecordAt(seg: number, off: number, segEnd: number): number {
    if (seg === this.rbufSeg && off >= this.rbufPos && off + 8 <= this.rbufPos + this.rbufLen) {
      const at = off - this.rbufPos;
      const length = recordLength(this.rbuf, at, this.rbufLen);
      if (length > 0 && at + length <= this.rbufLen) return at;
    }
    const fd = this.fdFor(seg);
    const want = Math.min(this.rbuf.byteLength, segEnd - off);
    this.rbufLen = readFully(fd, this.rbuf.bytes, 0, want, off);
    this.rbufSeg = seg;
    this.rbufPos = off;
    return this.rbufLen >= 8 ? 0 : -1;
  }

  private fdFor(seg: number): number {
    if (seg === this.writeSeg) return this.writeFd;
    if (this.readFdSeg !== seg) {
      this.closeReadFd();
      this.readFd = fs.openSync(path.join(this.dir, segmentFileName(seg)), 'r');
      this.readFdSeg = seg;
    }
    return this.readFd;
  }

  private closeReadFd(): void {
    if (this.readFd >= 0) fs.closeSync(this.readFd);
    this.readFd = -1;
    this.readFdSeg = -1;
  }

  /**
   * Starts segment `writeSeg + 1`. When it cannot be created (disk full) the current segment stays the write segment,
   * growing past its size, and the next flush tries again.
   */
  private rollSegment(): void {
    const n = this.writeSeg + 1;
    const file = path.join(this.dir, segmentFileName(n));
    let fd = -1;
    try {
      fd = fs.openSync(file, 'w+');
      writeFileHeader(fd, BACKLOG_MAGIC, this.name, n);
      fs.fdatasyncSync(fd);
      syncDir(this.dir);
    } catch (err) {
      this.noteWriteError(err);
      if (fd >= 0) fs.closeSync(fd);
      try {
        fs.unlinkSync(file);
      } catch {
        // Never created.
      }
      return;
    }
    fs.closeSync(this.writeFd);
    if (this.readFdSeg === this.writeSeg) this.closeReadFd();
    this.writeSeg = n;
    this.writeFd = fd;
    this.setSegmentBytes(n, FILE_HEADER_BYTES);
  }

  private noteWriteError(err: unknown): void {
    this.writeErrors++;
    this.lastError = errorText(err);
  }

  private setSegmentBytes(n: number, bytes: number): void {
    this.segmentsTotalBytes += bytes - (this.segmentBytes.get(n) ?? 0);
    this.segmentBytes.set(n, bytes);
  }

  private deleteSegment(n: number): void {
    if (this.readFdSeg === n) this.closeReadFd();
    if (this.reloadFdSeg === n) this.closeReloadFd();
    if (this.rbufSeg === n) this.rbufSeg = -1;
    this.segmentUnread.delete(n);
    this.segmentMarked.delete(n);
    this.segmentsTotalBytes -= this.segmentBytes.get(n) ?? 0;
    this.segmentBytes.delete(n);
    try {
      fs.unlinkSync(path.join(this.dir, segmentFileName(n)));
    } catch {
      // Already gone.
    }
  }

  /**
   * Writes the next commit of the cursor into the copy the previous commit did not use, and fsyncs it: a write torn
   * by a crash damages only that copy, and the other still holds the commit before.
   */
  private writeCursorFile(seg: number, off: number): void {
    const b = this.cursorBuf;
    const commit = this.commitNumber + 1;
    b.f64[CURSOR_SEGMENT_F64 >> 3] = seg;
    b.f64[CURSOR_OFFSET_F64 >> 3] = off;
    b.f64[CURSOR_COMMIT_F64 >> 3] = commit;
    b.i32[CURSOR_MAGIC_W] = CURSOR_MAGIC;
    b.i32[CURSOR_CHECKSUM_W] = checksumWords(b.i32, 0, CURSOR_CHECKSUM_W);
    writeFully(this.cursorFd, b.bytes, 0, CURSOR_BYTES, (commit % CURSOR_COPIES) * CURSOR_BYTES);
    fs.fdatasyncSync(this.cursorFd);
    this.commitNumber = commit;
  }
}
