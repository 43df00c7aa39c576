/**
 * One downstream's dead-letter storage: every trigger it dead-lettered, with its ids, reason and attempts (trigger
 * records, see trigger-codec.ts), in append-only segments `dead-letters-<n>.dlq`, each behind a file header. The one
 * thing rewritten in place is each record's status word (DeadLetterStatus, encoded with its own check, see
 * file-layout.ts): PENDING while the trigger waits in the replay lane, RESOLVED once re-delivered, FINAL for a trigger
 * never to be sent (refused for good, expired).
 *
 * What it keeps, and for how long:
 * - Compaction: a segment whose records are all RESOLVED has nothing left to give; it is deleted (the segment being
 *   written is cut back to its header instead). FINAL records are the dead letters proper and stay, inside the budgets.
 * - Budgets: at most `maxBytes` on disk and nothing older than `maxAgeMs` (by the time it was written). What falls
 *   outside is dropped oldest first, a whole segment at a time (segments roll at `segmentMaxBytes` and after an
 *   eighth of `maxAgeMs`, so a drop is a small part of the budget), and counted by reason (DeadLetterDropReason).
 *   Dropping a segment that still holds PENDING records first tells the owner (`onDrop`), which gives those triggers
 *   up. `ensureRoom` enforces the size budget before each append; `maintain` the age budget and compaction.
 * - Damage: at open each segment is scanned with resynchronisation (record-scan.ts): a damaged record is skipped and
 *   counted (`damagedAtOpen`), the records after it are kept; only a torn tail after the last valid record is cut. A
 *   damaged status word is read as PENDING (re-delivered; receivers de-duplicate by seq) and counted.
 * - Disk errors: a failed write, fsync or segment creation is counted (`writeErrors`, `lastError`) and answered with
 *   a failure (`append` returns -1, `ensureRoom` false); nothing throws, so the caller keeps the records and goes on.
 *
 * A record's position (DREC_DLQ_POS_F64) is `slot * POSITION_SLOT_UNITS + offset / 8`: the segment's slot in this
 * store's table and the record's byte offset in it, in 8-byte units. It stays below 2^31 (a small integer in V8, never
 * a boxed double) and names the record until its segment is dropped or compacted, which only happens once no PENDING
 * record (the only kind a position is kept for) is left in it or its owner was told.
 *
 * A single-file dead-letter store an earlier layout wrote (`dead-letters.dlq`) is moved into segments at open.
 *
 * Dispatcher thread (the main thread reads the files at start with `scanDeadLetters`).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DeadLetterDropReason, DEAD_LETTER_DROP_REASON_COUNT, DeadLetterStatus } from '../shm/layout.js';
import { checkFileHeader, writeFileHeader } from './file-header.js';
import {
  DEAD_LETTER_MAGIC,
  decodeDeadLetterStatus,
  encodeDeadLetterStatus,
  FH_CREATED_MS_F64,
  FILE_HEADER_BYTES,
  TREC_MAX_BYTES,
  TREC_STATUS_W,
} from './file-layout.js';
import { errorText, listNumberedFiles, numberedFileName, readFully, syncDir, writeFully } from './fs-util.js';
import { scanRecords, type RecordVisitor, type ScanResult } from './record-scan.js';
import { RecordBuffer, statusByteOffset } from './trigger-codec.js';

/** File name of the single-file dead-letter store of an earlier layout (moved into segments at open). */
export const DEAD_LETTER_FILE = 'dead-letters.dlq';
const SEGMENT_PREFIX = 'dead-letters-';
const SEGMENT_SUFFIX = '.dlq';

/** Default size budget of one downstream's dead letters, bytes (256 MiB). */
export const DEFAULT_DEAD_LETTER_MAX_BYTES = 256 * 1024 * 1024;
/** Default age budget of one downstream's dead letters, ms (7 days). */
export const DEFAULT_DEAD_LETTER_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
/** Smallest size budget, bytes (1 MiB: eight segments of 128 KiB). */
export const MIN_DEAD_LETTER_MAX_BYTES = 1024 * 1024;
/** Largest segment, bytes (its offsets in 8-byte units fit the position's low 24 bits with room to spare). */
const MAX_DEAD_LETTER_SEGMENT_BYTES = 64 * 1024 * 1024;
/** Smallest segment, bytes (room for several appends of the longest record). */
const MIN_DEAD_LETTER_SEGMENT_BYTES = 128 * 1024;
/** Position units per segment slot (offsets in 8-byte units below this). */
const POSITION_SLOT_UNITS = 1 << 24;
/** Segments a store holds at most (slots); past it the oldest is dropped as over budget. */
export const MAX_DEAD_LETTER_SEGMENTS = 128;
/** Room an append needs at least: the longest record (the encoder stops a buffer that far from its limit). */
const MIN_APPEND_BYTES = TREC_MAX_BYTES;

/** Name of segment `n`. */
export function deadLetterSegmentName(n: number): string {
  return numberedFileName(SEGMENT_PREFIX, n, SEGMENT_SUFFIX);
}

/** Segment numbers of the dead-letter segments in `dir`, ascending. */
export function listDeadLetterSegments(dir: string): number[] {
  return listNumberedFiles(dir, SEGMENT_PREFIX, SEGMENT_SUFFIX);
}

/** Slot of the segment a position names. */
export function positionSlot(position: number): number {
  return (position / POSITION_SLOT_UNITS) | 0;
}

/** Byte offset in its segment of the record a position names. */
export function positionOffset(position: number): number {
  return (position % POSITION_SLOT_UNITS) * 8;
}

/** True when a status word counts as PENDING: PENDING itself, or damaged (re-delivery is the safe reading). */
function pendingWord(word: number): boolean {
  const s = decodeDeadLetterStatus(word);
  return s === DeadLetterStatus.PENDING || s < 0;
}

/**
 * Visits the PENDING records (and those whose status word is damaged) of the dead-letter files in `dir` (read-only;
 * damaged records skipped, torn tails ignored; `downstreamName` null: any downstream's files). Returns how many.
 */
export function scanDeadLetters(dir: string, downstreamName: string | null, visit: RecordVisitor): number {
  const files = listDeadLetterSegments(dir).map((n) => path.join(dir, deadLetterSegmentName(n)));
  if (fs.existsSync(path.join(dir, DEAD_LETTER_FILE))) files.unshift(path.join(dir, DEAD_LETTER_FILE));
  const buf = new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES));
  let pending = 0;
  for (const file of files) {
    const fd = fs.openSync(file, 'r');
    try {
      if (fs.fstatSync(fd).size < FILE_HEADER_BYTES) continue;
      checkFileHeader(fd, file, DEAD_LETTER_MAGIC, downstreamName);
      scanRecords(fd, FILE_HEADER_BYTES, buf, (b, at, pos, length) => {
        if (!pendingWord(b.i32[(at >> 2) + TREC_STATUS_W]!)) return;
        pending++;
        visit(b, at, pos, length);
      });
    } finally {
      fs.closeSync(fd);
    }
  }
  return pending;
}

/** Options of DeadLetterFile. */
export interface DeadLetterFileOptions {
  /** Size budget, bytes, >= MIN_DEAD_LETTER_MAX_BYTES (default 256 MiB). */
  maxBytes?: number;
  /** Age budget, ms, >= 1 (default 7 days). */
  maxAgeMs?: number;
  /** Segment size, bytes (default an eighth of `maxBytes`, within [128 KiB, 64 MiB]; at most half of `maxBytes`). */
  segmentMaxBytes?: number;
  /** Wall clock, epoch ms (default Date.now). */
  wallClockMs?: () => number;
}

/**
 * Told when a segment that still held PENDING records was dropped: `slot` is the segment's slot (compare with
 * `positionSlot` of a kept position), `reason` a DeadLetterDropReason. The owner gives those triggers up at its next
 * safe point, then calls `releaseSlot(slot)`; until then the slot is not reused, so no kept position can name
 * another record, and a status rewrite at such a position is ignored.
 */
export type DropListener = (slot: number, reason: number) => void;

/** A downstream's dead-letter storage (see the module comment). */
export class DeadLetterFile {
  /** The downstream's directory. */
  readonly dir: string;
  /** Size budget, bytes. */
  readonly maxBytes: number;
  /** Age budget, ms. */
  readonly maxAgeMs: number;
  /** Segment size, bytes. */
  readonly segmentMaxBytes: number;
  /** Bytes cut from torn tails at open. */
  readonly recoveredTornBytes: number;
  /** Damaged spans skipped at open (each at least one record, lost). */
  readonly damagedAtOpen: number;
  /** Records whose status word was found damaged at open (read as PENDING). */
  readonly damagedStatuses: number;
  /** Records in the live segments. */
  recordCount = 0;
  /** Dead-letter records dropped, by DeadLetterDropReason (the dispatcher adds those its ring had to drop). */
  readonly droppedRecords = new Float64Array(DEAD_LETTER_DROP_REASON_COUNT);
  /** Of the records dropped from the files, those that waited for replay (their triggers are given up). */
  droppedPending = 0;
  /** Segments removed (or the write segment cut back) because every record in them was re-delivered. */
  compactedSegments = 0;
  /** Failed writes, fsyncs, truncations and segment creations. */
  writeErrors = 0;
  /** The last write error, as text (null: none yet). */
  lastError: string | null = null;
  /** True while the last append (or segment creation) failed. */
  failing = false;
  /** Told before a segment holding PENDING records is dropped (set by the owner). */
  onDrop: DropListener | null = null;

  private readonly name: string;
  private readonly wallClockMs: () => number;
  private readonly rollAfterMs: number;
  /** Per slot: segment number (-1: free), fd, bytes, records, PENDING records, FINAL records, times, dirty flag. */
  private readonly slotSeg = new Float64Array(MAX_DEAD_LETTER_SEGMENTS).fill(-1);
  private readonly slotFd = new Int32Array(MAX_DEAD_LETTER_SEGMENTS).fill(-1);
  private readonly slotBytes = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  private readonly slotRecords = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  private readonly slotPending = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  private readonly slotFinal = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  /** Wall time the segment was created (its header), epoch ms: it rolls after `rollAfterMs`. */
  private readonly slotCreatedMs = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  /** Wall time of its newest record, epoch ms: it is too old once this is. */
  private readonly slotNewestMs = new Float64Array(MAX_DEAD_LETTER_SEGMENTS);
  private readonly slotDirty = new Uint8Array(MAX_DEAD_LETTER_SEGMENTS);
  /** Slots of dropped segments whose owner has not released them yet (see DropListener). */
  private readonly slotRetired = new Uint8Array(MAX_DEAD_LETTER_SEGMENTS);
  /** Slots of the live segments, oldest first; the last is the segment being written. */
  private readonly order = new Int32Array(MAX_DEAD_LETTER_SEGMENTS);
  private orderCount = 0;
  private totalBytes = 0;
  private lastSegment = 0;
  private readonly statusBuf = new RecordBuffer(8);
  private statusDirty = false;
  private closed = false;

  /**
   * Opens (creating if needed) the dead-letter segments of `dir`: moves an earlier layout's single file into
   * segments, drops what is outside the budgets, cuts torn tails, deletes segments with nothing left to replay or keep,
   * and calls `onPending` for every PENDING record (with its position). Throws an Error naming the file when one
   * belongs to another downstream, and the option when an option is out of range.
   */
  constructor(
    dir: string,
    downstreamName: string,
    onPending: RecordVisitor | null,
    options: DeadLetterFileOptions = {},
  ) {
    this.dir = dir;
    this.name = downstreamName;
    this.maxBytes = checkOption(
      'deadLetter.maxBytesPerDownstream',
      options.maxBytes ?? DEFAULT_DEAD_LETTER_MAX_BYTES,
      MIN_DEAD_LETTER_MAX_BYTES,
      Number.MAX_SAFE_INTEGER,
    );
    this.maxAgeMs = checkOption(
      'deadLetter.maxAgeMs',
      options.maxAgeMs ?? DEFAULT_DEAD_LETTER_MAX_AGE_MS,
      1,
      Number.MAX_SAFE_INTEGER,
    );
    const segDefault = Math.min(
      MAX_DEAD_LETTER_SEGMENT_BYTES,
      Math.max(MIN_DEAD_LETTER_SEGMENT_BYTES, Math.floor(this.maxBytes / 8)),
    );
    this.segmentMaxBytes = checkOption(
      'deadLetter segmentMaxBytes',
      options.segmentMaxBytes ?? segDefault,
      MIN_DEAD_LETTER_SEGMENT_BYTES,
      Math.min(MAX_DEAD_LETTER_SEGMENT_BYTES, Math.floor(this.maxBytes / 2)),
    );
    this.wallClockMs = options.wallClockMs ?? Date.now;
    this.rollAfterMs = Math.max(1, this.maxAgeMs / 8);
    fs.mkdirSync(dir, { recursive: true });
    const buf = new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES));
    this.moveLegacyFile(buf);
    const now = this.wallClockMs();
    const segments = listDeadLetterSegments(dir);
    // The budgets first, before any record is reported (a record handed to the owner stays): oldest first, until the
    // rest fits them and leaves slots for new segments.
    let bytes = 0;
    const sizes = segments.map((n) => {
      const st = fs.statSync(this.segmentPath(n));
      bytes += st.size;
      return { n, size: st.size, mtimeMs: st.mtimeMs };
    });
    let keepFrom = 0;
    for (; keepFrom < sizes.length; keepFrom++) {
      const x = sizes[keepFrom]!;
      const tooOld = now - x.mtimeMs > this.maxAgeMs;
      const overBudget = bytes > this.maxBytes || sizes.length - keepFrom > MAX_DEAD_LETTER_SEGMENTS - 1;
      if (!tooOld && !overBudget) break;
      this.dropClosedFile(x.n, tooOld ? DeadLetterDropReason.TOO_OLD : DeadLetterDropReason.OVER_BUDGET, buf);
      bytes -= x.size;
    }
    const kept = sizes.slice(keepFrom);
    let torn = 0;
    let damaged = 0;
    let damagedStatuses = 0;
    for (const x of kept) {
      const slot = this.openSegment(x.n, x.mtimeMs);
      const fd = this.slotFd[slot]!;
      let pending = 0;
      let final = 0;
      const base = slot * POSITION_SLOT_UNITS;
      const scan: ScanResult = scanRecords(
        fd,
        FILE_HEADER_BYTES,
        buf,
        (b, at, pos, length) => {
          const s = decodeDeadLetterStatus(b.i32[(at >> 2) + TREC_STATUS_W]!);
          if (s === DeadLetterStatus.FINAL) final++;
          if (s !== DeadLetterStatus.PENDING && s >= 0) return;
          if (s < 0) damagedStatuses++;
          pending++;
          onPending?.(b, at, base + pos / 8, length);
        },
        Math.max(FILE_HEADER_BYTES, x.size),
      );
      torn += Math.max(0, x.size - scan.validEnd);
      damaged += scan.damagedSpans;
      if (scan.validEnd < x.size) {
        fs.ftruncateSync(fd, scan.validEnd);
        fs.fdatasyncSync(fd);
      }
      this.slotBytes[slot] = scan.validEnd;
      this.slotRecords[slot] = scan.records;
      this.slotPending[slot] = pending;
      this.slotFinal[slot] = final;
      this.totalBytes += scan.validEnd;
      this.recordCount += scan.records;
    }
    this.recoveredTornBytes = torn;
    this.damagedAtOpen = damaged;
    this.damagedStatuses = damagedStatuses;
    if (this.orderCount === 0) this.createSegment(this.lastSegment + 1, true);
    // Segments with nothing left to replay or keep (every record re-delivered) go now.
    this.compact();
  }

  /** Bytes of every segment on disk. */
  get byteLength(): number {
    return this.totalBytes;
  }

  /** Live segments. */
  get segmentCount(): number {
    return this.orderCount;
  }

  /** Path of the segment being written. */
  get filePath(): string {
    return this.segmentPath(this.slotSeg[this.writeSlot]!);
  }

  /** PENDING records in the live segments. */
  get pendingRecords(): number {
    let n = 0;
    for (let k = 0; k < this.orderCount; k++) n += this.slotPending[this.order[k]!]!;
    return n;
  }

  /** FINAL records in the live segments. */
  get finalRecords(): number {
    let n = 0;
    for (let k = 0; k < this.orderCount; k++) n += this.slotFinal[this.order[k]!]!;
    return n;
  }

  private get writeSlot(): number {
    return this.order[this.orderCount - 1]!;
  }

  /**
   * Makes room for an append of at least the longest record: drops segments past the age budget, rolls the write
   * segment when full or old, and drops the oldest segments while the size budget has no room. Returns false (counted)
   * when a new segment could not be created.
   */
  ensureRoom(): boolean {
    const now = this.wallClockMs();
    this.dropTooOld(now);
    const w = this.writeSlot;
    const full = this.slotBytes[w]! + MIN_APPEND_BYTES > this.segmentMaxBytes;
    if (full || (this.slotRecords[w]! > 0 && now - this.slotCreatedMs[w]! > this.rollAfterMs)) {
      if (this.orderCount === MAX_DEAD_LETTER_SEGMENTS)
        this.dropSegment(this.order[0]!, DeadLetterDropReason.OVER_BUDGET);
      // A segment rolled for its age that cannot be replaced still takes appends.
      if (!this.createSegment(this.lastSegment + 1, false) && full) return false;
    }
    while (this.totalBytes + MIN_APPEND_BYTES > this.maxBytes) {
      // The write segment alone past the budget (a smaller budget than the run that wrote it): a new one replaces it.
      if (
        this.orderCount === 1 &&
        (this.slotRecords[this.writeSlot] === 0 || !this.createSegment(this.lastSegment + 1, false))
      )
        break;
      this.dropSegment(this.order[0]!, DeadLetterDropReason.OVER_BUDGET);
    }
    return this.room >= MIN_APPEND_BYTES;
  }

  /** Bytes the next append may hold (within the write segment and the size budget); call `ensureRoom` first. */
  get room(): number {
    const w = this.writeSlot;
    return Math.max(0, Math.min(this.segmentMaxBytes - this.slotBytes[w]!, this.maxBytes - this.totalBytes));
  }

  /**
   * Appends `length` bytes (at most `room`) of encoded records from `buf`, holding `records` records of which
   * `pending` are PENDING and `final` FINAL, with one write and one fdatasync. Returns the position of the first
   * (later ones follow at their byte offsets / 8), or -1 when the write failed (counted; nothing is kept: the caller
   * still holds the records).
   */
  append(buf: RecordBuffer, length: number, records: number, pending: number, final: number): number {
    const w = this.writeSlot;
    const at = this.slotBytes[w]!;
    if (length > this.room)
      throw new RangeError(`dead-letter append of ${length} bytes exceeds the room of ${this.room}`);
    try {
      writeFully(this.slotFd[w]!, buf.bytes, 0, length, at);
      fs.fdatasyncSync(this.slotFd[w]!);
    } catch (err) {
      this.noteError(err);
      this.failing = true;
      // Cut whatever part landed, so no stray copy of these records is read at the next start (best effort).
      try {
        fs.ftruncateSync(this.slotFd[w]!, at);
      } catch {
        // The next append writes over it from the same offset.
      }
      return -1;
    }
    this.failing = false;
    this.slotBytes[w] = at + length;
    this.totalBytes += length;
    this.slotRecords[w] = this.slotRecords[w]! + records;
    this.slotPending[w] = this.slotPending[w]! + pending;
    this.slotFinal[w] = this.slotFinal[w]! + final;
    this.slotNewestMs[w] = this.wallClockMs();
    this.recordCount += records;
    return w * POSITION_SLOT_UNITS + at / 8;
  }

  /**
   * Rewrites the status of the PENDING record at `position` to `status` (RESOLVED or FINAL; durable at the next
   * `sync`). A position whose segment was dropped is ignored. Allocation-free.
   */
  setStatus(position: number, status: number): void {
    const slot = positionSlot(position);
    if (slot < 0 || slot >= MAX_DEAD_LETTER_SEGMENTS || this.slotSeg[slot]! < 0) return;
    this.statusBuf.i32[0] = encodeDeadLetterStatus(status);
    try {
      writeFully(this.slotFd[slot]!, this.statusBuf.bytes, 0, 4, statusByteOffset(positionOffset(position)));
    } catch (err) {
      // The status stays PENDING on disk: the next start re-delivers it (receivers de-duplicate by seq).
      this.noteError(err);
    }
    if (this.slotPending[slot]! > 0) this.slotPending[slot] = this.slotPending[slot]! - 1;
    if (status === DeadLetterStatus.FINAL) this.slotFinal[slot] = this.slotFinal[slot]! + 1;
    this.slotDirty[slot] = 1;
    this.statusDirty = true;
  }

  /** Makes the status rewrites durable (an fdatasync per segment touched, when there were any). */
  sync(): void {
    if (!this.statusDirty) return;
    this.statusDirty = false;
    for (let k = 0; k < this.orderCount; k++) {
      const slot = this.order[k]!;
      if (this.slotDirty[slot] === 0) continue;
      this.slotDirty[slot] = 0;
      try {
        fs.fdatasyncSync(this.slotFd[slot]!);
      } catch (err) {
        this.noteError(err);
      }
    }
  }

  /**
   * Periodic upkeep: makes status rewrites durable, drops segments past the age budget and gives back the space of
   * segments whose records were all re-delivered.
   */
  maintain(): void {
    this.sync();
    this.dropTooOld(this.wallClockMs());
    this.compact();
  }

  /** Syncs and closes. */
  close(): void {
    if (this.closed) return;
    this.sync();
    this.closed = true;
    for (let k = 0; k < this.orderCount; k++) {
      const slot = this.order[k]!;
      try {
        fs.closeSync(this.slotFd[slot]!);
      } catch {
        // Closing cannot lose anything synced.
      }
    }
  }

  private segmentPath(n: number): string {
    return path.join(this.dir, deadLetterSegmentName(n));
  }

  /** The owner has given up the triggers of dropped segment slot `slot` (see DropListener): the slot may be reused. */
  releaseSlot(slot: number): void {
    this.slotRetired[slot] = 0;
  }

  /**
   * Deletes (or, for the write segment, cuts back) segments with no PENDING and no FINAL record left, and closed
   * segments with no record at all.
   */
  private compact(): void {
    for (let k = 0; k < this.orderCount; k++) {
      const slot = this.order[k]!;
      const empty = this.slotRecords[slot] === 0;
      if (empty && slot === this.writeSlot) continue;
      if (!empty && (this.slotPending[slot]! > 0 || this.slotFinal[slot]! > 0)) continue;
      if (!empty) this.compactedSegments++;
      if (this.removeSegment(slot)) k--;
    }
  }

  /** Drops every segment whose newest record is older than the age budget (oldest first). */
  private dropTooOld(nowMs: number): void {
    let k = 0;
    while (k < this.orderCount) {
      const slot = this.order[k]!;
      if (this.slotRecords[slot] === 0) {
        k++;
        continue;
      }
      if (nowMs - this.slotNewestMs[slot]! <= this.maxAgeMs) return;
      if (!this.dropSegment(slot, DeadLetterDropReason.TOO_OLD)) return;
    }
  }

  /**
   * Drops a segment's records for `reason` (counted; the owner told when some were PENDING). The write segment is
   * cut back when nothing refers to it, else replaced by a new one first (when that fails, nothing is dropped and
   * false is returned). Returns true when the segment left the table.
   */
  private dropSegment(slot: number, reason: number): boolean {
    const pending = this.slotPending[slot]!;
    if (slot === this.writeSlot) {
      if (pending === 0) {
        this.droppedRecords[reason] = this.droppedRecords[reason]! + this.slotFinal[slot]!;
        this.removeSegment(slot);
        return false;
      }
      // Positions of its PENDING records are held: the offsets must not be written again. A new segment takes over.
      if (!this.createSegment(this.lastSegment + 1, false)) return false;
    }
    this.droppedRecords[reason] = this.droppedRecords[reason]! + pending + this.slotFinal[slot]!;
    this.droppedPending += pending;
    this.removeSegment(slot);
    if (pending > 0 && this.onDrop !== null) {
      this.slotRetired[slot] = 1;
      this.onDrop(slot, reason);
    }
    return true;
  }

  /**
   * Removes a segment: deleted, or cut back to a fresh header when it is the one being written. Returns true when it
   * left the table (deleted).
   */
  private removeSegment(slot: number): boolean {
    this.recordCount -= this.slotRecords[slot]!;
    if (slot === this.writeSlot) {
      const fd = this.slotFd[slot]!;
      this.totalBytes -= this.slotBytes[slot]! - FILE_HEADER_BYTES;
      this.slotBytes[slot] = FILE_HEADER_BYTES;
      this.slotRecords[slot] = 0;
      this.slotPending[slot] = 0;
      this.slotFinal[slot] = 0;
      const now = this.wallClockMs();
      this.slotCreatedMs[slot] = now;
      this.slotNewestMs[slot] = now;
      try {
        fs.ftruncateSync(fd, FILE_HEADER_BYTES);
        writeFileHeader(fd, DEAD_LETTER_MAGIC, this.name, this.slotSeg[slot]!);
        fs.fdatasyncSync(fd);
      } catch (err) {
        this.noteError(err);
      }
      return false;
    }
    const n = this.slotSeg[slot]!;
    try {
      fs.closeSync(this.slotFd[slot]!);
    } catch {
      // Nothing of it is needed any more.
    }
    try {
      fs.unlinkSync(this.segmentPath(n));
      syncDir(this.dir);
    } catch (err) {
      this.noteError(err);
    }
    this.totalBytes -= this.slotBytes[slot]!;
    this.slotSeg[slot] = -1;
    this.slotFd[slot] = -1;
    this.slotDirty[slot] = 0;
    let k = 0;
    while (this.order[k] !== slot) k++;
    this.order.copyWithin(k, k + 1, this.orderCount);
    this.orderCount--;
    return true;
  }

  /** Opens existing segment `n` into a free slot (its header checked); returns the slot. */
  private openSegment(n: number, mtimeMs: number): number {
    const slot = this.freeSlot();
    const file = this.segmentPath(n);
    const fd = fs.openSync(file, 'r+');
    try {
      if (fs.fstatSync(fd).size < FILE_HEADER_BYTES) {
        // Created by a run that stopped before its header was written: an empty segment.
        fs.ftruncateSync(fd, 0);
        writeFileHeader(fd, DEAD_LETTER_MAGIC, this.name, n);
        fs.fdatasyncSync(fd);
      }
      checkFileHeader(fd, file, DEAD_LETTER_MAGIC, this.name);
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
    const h = new RecordBuffer(FILE_HEADER_BYTES);
    readFully(fd, h.bytes, 0, FILE_HEADER_BYTES, 0);
    this.slotSeg[slot] = n;
    this.slotFd[slot] = fd;
    this.slotCreatedMs[slot] = h.f64[FH_CREATED_MS_F64 >> 3]!;
    this.slotNewestMs[slot] = mtimeMs;
    this.order[this.orderCount++] = slot;
    this.lastSegment = Math.max(this.lastSegment, n);
    return slot;
  }

  /**
   * Creates segment `n` as the new write segment. At open (`atOpen`) a failure throws; later it is counted and
   * answered false (the file is left for the next attempt, which opens it again).
   */
  private createSegment(n: number, atOpen: boolean): boolean {
    const file = this.segmentPath(n);
    let fd = -1;
    try {
      fd = fs.openSync(file, 'w+');
      writeFileHeader(fd, DEAD_LETTER_MAGIC, this.name, n);
      fs.fdatasyncSync(fd);
      syncDir(this.dir);
    } catch (err) {
      if (fd >= 0) fs.closeSync(fd);
      if (atOpen) throw err;
      this.noteError(err);
      this.failing = true;
      return false;
    }
    const slot = this.freeSlot();
    const now = this.wallClockMs();
    this.slotSeg[slot] = n;
    this.slotFd[slot] = fd;
    this.slotBytes[slot] = FILE_HEADER_BYTES;
    this.slotRecords[slot] = 0;
    this.slotPending[slot] = 0;
    this.slotFinal[slot] = 0;
    this.slotCreatedMs[slot] = now;
    this.slotNewestMs[slot] = now;
    this.slotDirty[slot] = 0;
    this.order[this.orderCount++] = slot;
    this.totalBytes += FILE_HEADER_BYTES;
    this.lastSegment = n;
    return true;
  }

  private freeSlot(): number {
    for (let s = 0; s < MAX_DEAD_LETTER_SEGMENTS; s++) if (this.slotSeg[s]! < 0 && this.slotRetired[s] === 0) return s;
    throw new Error(`${this.dir}: more than ${MAX_DEAD_LETTER_SEGMENTS} dead-letter segments`);
  }

  /** Deletes closed segment file `n` at open (outside the budgets), counting its PENDING and FINAL records. */
  private dropClosedFile(n: number, reason: number, buf: RecordBuffer): void {
    const file = this.segmentPath(n);
    const fd = fs.openSync(file, 'r');
    let live = 0;
    try {
      if (fs.fstatSync(fd).size >= FILE_HEADER_BYTES) {
        checkFileHeader(fd, file, DEAD_LETTER_MAGIC, this.name);
        scanRecords(fd, FILE_HEADER_BYTES, buf, (b, at) => {
          const s = decodeDeadLetterStatus(b.i32[(at >> 2) + TREC_STATUS_W]!);
          if (s === DeadLetterStatus.RESOLVED) return;
          live++;
          if (s !== DeadLetterStatus.FINAL) this.droppedPending++;
        });
      }
    } finally {
      fs.closeSync(fd);
    }
    fs.unlinkSync(file);
    syncDir(this.dir);
    this.droppedRecords[reason] = this.droppedRecords[reason]! + live;
    this.lastSegment = Math.max(this.lastSegment, n);
  }

  /**
   * Moves the single file of an earlier layout into segments: its PENDING and FINAL records (RESOLVED ones have
   * nothing left to give), in order, into segments of at most `segmentMaxBytes`, made durable before the old file
   * is removed. A crash between the two leaves both; the next open moves it again, and the start's take-over keeps
   * one copy of each trigger.
   */
  private moveLegacyFile(buf: RecordBuffer): void {
    const file = path.join(this.dir, DEAD_LETTER_FILE);
    if (!fs.existsSync(file)) return;
    const src = fs.openSync(file, 'r');
    try {
      if (fs.fstatSync(src).size >= FILE_HEADER_BYTES) {
        checkFileHeader(src, file, DEAD_LETTER_MAGIC, this.name);
        let n = Math.max(0, ...listDeadLetterSegments(this.dir));
        let fd = -1;
        let size = 0;
        const out = new RecordBuffer(TREC_MAX_BYTES);
        scanRecords(src, FILE_HEADER_BYTES, buf, (b, at, _pos, length) => {
          if (decodeDeadLetterStatus(b.i32[(at >> 2) + TREC_STATUS_W]!) === DeadLetterStatus.RESOLVED) return;
          if (fd < 0 || size + length > this.segmentMaxBytes) {
            if (fd >= 0) {
              fs.fdatasyncSync(fd);
              fs.closeSync(fd);
            }
            fd = fs.openSync(this.segmentPath(++n), 'w+');
            writeFileHeader(fd, DEAD_LETTER_MAGIC, this.name, n);
            size = FILE_HEADER_BYTES;
          }
          out.bytes.set(b.bytes.subarray(at, at + length));
          writeFully(fd, out.bytes, 0, length, size);
          size += length;
        });
        if (fd >= 0) {
          fs.fdatasyncSync(fd);
          fs.closeSync(fd);
        }
        syncDir(this.dir);
      }
    } finally {
      fs.closeSync(src);
    }
    fs.unlinkSync(file);
    syncDir(this.dir);
  }

  private noteError(err: unknown): void {
    this.writeErrors++;
    this.lastError = errorText(err);
  }
}

function checkOption(name: string, v: number, lo: number, hi: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new RangeError(`${name} must be an integer in [${lo}, ${hi}], got ${String(v)}`);
  }
  return v;
}
