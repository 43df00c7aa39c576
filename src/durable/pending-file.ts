/**
 * One downstream's pending file, `pending.bin`: the triggers that were still in its memory when the dispatcher
 * closed (past the drain deadline), in per-device order, as trigger records behind a file header. The next start
 * puts them in front of everything else of that downstream (they are older than its backlog log), and removes the
 * file once they are all settled; a crash before that re-delivers them at the following start.
 *
 * Dispatcher thread (the main thread reads it at start with `scanPendingFile`).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkFileHeader } from './file-header.js';
import {
  FH_CREATED_MS_F64,
  FH_MAGIC_W,
  FH_NAME_HASH_W,
  FH_VERSION_W,
  FILE_HEADER_BYTES,
  FILE_LAYOUT_VERSION,
  hashName,
  PENDING_MAGIC,
  TREC_MAX_BYTES,
} from './file-layout.js';
import { removeDurably, replaceFileDurably } from './fs-util.js';
import { scanRecords, type RecordVisitor } from './record-scan.js';
import { RecordBuffer } from './trigger-codec.js';

/** File name of the pending file in a downstream's directory. */
const PENDING_FILE = 'pending.bin';

/** What reading a pending file found. */
export interface PendingScan {
  /** Valid records visited. */
  records: number;
  /**
   * Damaged stretches skipped (each at least one record, lost): spans with valid records after them, and a damaged
   * end (the file is written whole and renamed into place, so either is damage on disk, not a torn write).
   */
  damagedSpans: number;
}

/** Visits the records of the pending file in `dir` (none when absent; `downstreamName` null: any downstream's). */
export function scanPendingFile(dir: string, downstreamName: string | null, visit: RecordVisitor): PendingScan {
  const file = path.join(dir, PENDING_FILE);
  if (!fs.existsSync(file)) return { records: 0, damagedSpans: 0 };
  const fd = fs.openSync(file, 'r');
  try {
    checkFileHeader(fd, file, PENDING_MAGIC, downstreamName);
    const size = fs.fstatSync(fd).size;
    const r = scanRecords(fd, FILE_HEADER_BYTES, new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES)), visit, size);
    return { records: r.records, damagedSpans: r.damagedSpans + (r.validEnd < size ? 1 : 0) };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Replaces the pending file of `dir` with `length` bytes of encoded records from `buf` (a crash leaves the old file
 * or the new one); removes it when `length` is 0.
 */
export function writePendingFile(dir: string, downstreamName: string, buf: RecordBuffer, length: number): void {
  const file = path.join(dir, PENDING_FILE);
  if (length === 0) {
    removeDurably(file);
    return;
  }
  const out = new RecordBuffer(FILE_HEADER_BYTES + length);
  out.i32[FH_MAGIC_W] = PENDING_MAGIC;
  out.i32[FH_VERSION_W] = FILE_LAYOUT_VERSION;
  out.i32[FH_NAME_HASH_W] = hashName(downstreamName);
  out.f64[FH_CREATED_MS_F64 >> 3] = Date.now();
  out.bytes.set(buf.bytes.subarray(0, length), FILE_HEADER_BYTES);
  replaceFileDurably(file, out.bytes.subarray(0, FILE_HEADER_BYTES + length));
}

/** Removes the pending file of `dir` (its triggers are all settled). */
export function removePendingFile(dir: string): void {
  removeDurably(path.join(dir, PENDING_FILE));
}
