/**
 * Set-aside files of a backlog log: `setaside-<n>.log`, each written once, whole (a temporary file fsynced, then
 * renamed into place), by one move (BacklogLog.commit), holding copies of held records (BacklogLog.hold) that were the
 * only thing keeping the log's oldest segments alive. A device parked for an hour with thousands of triggers set aside
 * would otherwise keep every segment since its first one, and with them every other device's delivered records, until
 * the log reaches its byte cap. A move copies the held records of those segments, in the order they were held (so per
 * device a prefix of its held records, in seq order), into a new file made durable before the log's cursor passes the
 * originals; the holds then point into the file. A file is removed once every one of its records is released; one
 * with fewer than a quarter of its records still held is compacted (those copied into a new file, then it is
 * removed), so the files hold at most about four times the records still set aside.
 *
 * After a crash the files are read at start like the pending file (`scanSetAsideFiles`): their records are carried
 * over in front of the log (sorted by seq per device, one copy of each), and the log's copies of them (a crash between
 * the file's write and the cursor's commit) are passed over by seq. The start then writes what it took over to the
 * pending file and removes them. A record released before the crash (delivered) but still in its file comes again,
 * under its id.
 *
 * Dispatcher thread (the main thread scans them at start).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkFileHeader, fillFileHeader } from './file-header.js';
import { FILE_HEADER_BYTES, SET_ASIDE_MAGIC, TREC_MAX_BYTES } from './file-layout.js';
import { errorText, listNumberedFiles, numberedFileName, removeDurably, replaceFileDurably } from './fs-util.js';
import { readRecordAt, scanRecords, type RecordVisitor } from './record-scan.js';
import { RecordBuffer } from './trigger-codec.js';

const PREFIX = 'setaside-';
const SUFFIX = '.log';

/** Numbers of the set-aside files in `dir`, ascending. */
export function listSetAsideFiles(dir: string): number[] {
  return listNumberedFiles(dir, PREFIX, SUFFIX);
}

/** What reading the set-aside files found. */
export interface SetAsideScan {
  /** Their numbers, ascending. */
  files: number[];
  /** Valid records visited. */
  records: number;
  /**
   * Damaged stretches skipped (each at least one record, lost): damage on disk, since a file appears under its name
   * only once written whole.
   */
  damagedSpans: number;
}

/**
 * Visits the records of every set-aside file in `dir`, file by file (`downstreamName` null: any downstream's). Throws
 * an Error naming a file whose header is not a set-aside file's of this downstream.
 */
export function scanSetAsideFiles(dir: string, downstreamName: string | null, visit: RecordVisitor): SetAsideScan {
  const files = listSetAsideFiles(dir);
  const buf = new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES));
  let records = 0;
  let damagedSpans = 0;
  for (const n of files) {
    const file = path.join(dir, numberedFileName(PREFIX, n, SUFFIX));
    const fd = fs.openSync(file, 'r');
    try {
      // A file whose creation a crash cut short holds nothing.
      if (fs.fstatSync(fd).size < FILE_HEADER_BYTES) continue;
      checkFileHeader(fd, file, SET_ASIDE_MAGIC, downstreamName);
      const size = fs.fstatSync(fd).size;
      const r = scanRecords(fd, FILE_HEADER_BYTES, buf, visit, size);
      records += r.records;
      damagedSpans += r.damagedSpans + (r.validEnd < size ? 1 : 0);
    } finally {
      fs.closeSync(fd);
    }
  }
  return { files, records, damagedSpans };
}

/** Removes the set-aside files numbered in `files` from `dir`, durably. */
export function removeSetAsideFiles(dir: string, files: readonly number[]): void {
  for (const n of files) removeDurably(path.join(dir, numberedFileName(PREFIX, n, SUFFIX)));
}

/** The set-aside files one run of a backlog log writes (see the module comment). */
export class SetAsideFiles {
  /** Bytes of the files this run wrote and still keeps. */
  bytes = 0;
  /** Records moved into files by this run (copies made by compaction not counted). */
  moved = 0;
  /** The last error writing, reading or removing a file, as text (null: none yet). */
  lastError: string | null = null;
  private readonly dir: string;
  private readonly name: string;
  private readonly onWriteError: (err: unknown) => void;
  private next: number;
  /** Per file this run keeps: records not released yet, records written, and its size. */
  private readonly live = new Map<number, number>();
  private readonly total = new Map<number, number>();
  private readonly sizes = new Map<number, number>();
  /** Files with fewer than a quarter of their records still held (see `isSparse`). */
  private readonly sparse = new Set<number>();
  /** Files whose removal the disk refused (see `retryRemovals`). */
  private readonly unremoved: number[] = [];
  private readFd = -1;
  private readFdFile = -1;

  /**
   * Files of `dir` for downstream `downstreamName`; numbering goes on after the files found there, and temporary files
   * a crash left mid-write are removed. `onWriteError` hears of every write or removal that failed.
   */
  constructor(dir: string, downstreamName: string, onWriteError: (err: unknown) => void = () => undefined) {
    this.dir = dir;
    this.name = downstreamName;
    this.onWriteError = onWriteError;
    const found = listSetAsideFiles(dir);
    this.next = found.length === 0 ? 1 : found[found.length - 1]! + 1;
    for (const n of listNumberedFiles(dir, PREFIX, `${SUFFIX}.tmp`)) {
      try {
        fs.unlinkSync(`${this.fileOf(n)}.tmp`);
      } catch {
        // Gone already.
      }
    }
  }

  /**
   * Writes a new file from `buf`: its first FILE_HEADER_BYTES are filled with the header here, then `length` bytes of
   * `records` records follow (record k at its offset in `buf`, which is its position in the file). Durable when it
   * returns (written, fsynced and renamed into place, the directory fsynced). Returns the file's number, or -1 when
   * the disk refused (the text in `lastError`; nothing was written).
   */
  write(buf: RecordBuffer, length: number, records: number): number {
    const n = this.next;
    fillFileHeader(buf, SET_ASIDE_MAGIC, this.name, n);
    try {
      replaceFileDurably(this.fileOf(n), buf.bytes.subarray(0, length));
    } catch (err) {
      this.noteError(err);
      try {
        fs.unlinkSync(`${this.fileOf(n)}.tmp`);
      } catch {
        // Never created.
      }
      return -1;
    }
    this.next++;
    this.live.set(n, records);
    this.total.set(n, records);
    this.sizes.set(n, length);
    this.bytes += length;
    return n;
  }

  /** `records` records were moved out of the backlog log by the last `write`. */
  noteMoved(records: number): void {
    this.moved += records;
  }

  /**
   * Reads the record at `offset` of file `n` (up to TREC_MAX_BYTES) into `buf` at 0; returns the bytes read (fewer
   * than the record when the file is shorter), or -1 when the disk refused (the text in `lastError`).
   */
  read(n: number, offset: number, buf: RecordBuffer): number {
    try {
      if (this.readFdFile !== n) {
        this.closeReadFd();
        this.readFd = fs.openSync(this.fileOf(n), 'r');
        this.readFdFile = n;
      }
      return readRecordAt(this.readFd, offset, this.sizes.get(n)!, buf);
    } catch (err) {
      this.lastError = errorText(err);
      return -1;
    }
  }

  /**
   * One record of file `n` is released: the file is removed with its last, and is due for compaction (`isSparse`)
   * once fewer than a quarter of its records are held.
   */
  release(n: number): void {
    const left = this.live.get(n)! - 1;
    if (left <= 0) {
      this.remove(n);
      return;
    }
    this.live.set(n, left);
    if (left * 4 < this.total.get(n)!) this.sparse.add(n);
  }

  /** True when some file is due for compaction. */
  get anySparse(): boolean {
    return this.sparse.size > 0;
  }

  /** True when file `n` is due for compaction: its held records are to be copied into a new file. */
  isSparse(n: number): boolean {
    return this.sparse.has(n);
  }

  /** Releases every record of every file this run wrote (their owner has written them elsewhere, durably). */
  releaseAll(): void {
    for (const n of [...this.live.keys()]) this.remove(n);
  }

  /** Closes the read descriptor (the files stay). */
  close(): void {
    this.closeReadFd();
  }

  /**
   * Tries again to remove the files whose removal the disk refused (left on disk, the next start would take their
   * records again, delivered ones included, under their ids). Returns true when none is left.
   */
  retryRemovals(): boolean {
    if (this.unremoved.length === 0) return true;
    for (const n of this.unremoved.splice(0)) this.remove(n);
    return this.unremoved.length === 0;
  }

  private remove(n: number): void {
    if (this.readFdFile === n) this.closeReadFd();
    this.live.delete(n);
    this.total.delete(n);
    this.sparse.delete(n);
    try {
      removeDurably(this.fileOf(n));
    } catch (err) {
      this.noteError(err);
      this.unremoved.push(n);
      return;
    }
    this.bytes -= this.sizes.get(n)!;
    this.sizes.delete(n);
  }

  private noteError(err: unknown): void {
    this.lastError = errorText(err);
    this.onWriteError(err);
  }

  private fileOf(n: number): string {
    return path.join(this.dir, numberedFileName(PREFIX, n, SUFFIX));
  }

  private closeReadFd(): void {
    if (this.readFd >= 0) fs.closeSync(this.readFd);
    this.readFd = -1;
    this.readFdFile = -1;
  }
}
