/**
 * One downstream's dead-letter file, `dead-letters.dlq`: every trigger it dead-lettered, with its ids, reason and
 * attempts (trigger records, see trigger-codec.ts), behind a file header. Append-only; the one thing rewritten in
 * place is each record's status word (DeadLetterStatus): PENDING while the trigger waits in the replay lane, RESOLVED
 * once re-delivered, FINAL for a trigger never to be sent (refused for good, expired).
 *
 * At open a torn tail is cut and every PENDING record is reported: those are the dead letters a restart must still
 * replay. A status rewrite is made durable by the next `sync` (a crash before it re-delivers the trigger at the next
 * start: the same trigger, with the same seq).
 *
 * Dispatcher thread (the main thread reads it at start with `scanDeadLetters`).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DeadLetterStatus } from '../shm/layout.js';
import { checkFileHeader, writeFileHeader } from './file-header.js';
import { DEAD_LETTER_MAGIC, FILE_HEADER_BYTES, TREC_MAX_BYTES } from './file-layout.js';
import { syncDir, writeFully } from './fs-util.js';
import { scanRecords, type RecordVisitor } from './record-scan.js';
import { RecordBuffer, recordStatus, statusByteOffset } from './trigger-codec.js';

/** File name of the dead-letter file in a downstream's directory. */
export const DEAD_LETTER_FILE = 'dead-letters.dlq';

/**
 * Visits the PENDING records of the dead-letter file in `dir` (read-only; stops at a torn tail). Returns how many.
 */
export function scanDeadLetters(dir: string, downstreamName: string, visit: RecordVisitor): number {
  const file = path.join(dir, DEAD_LETTER_FILE);
  if (!fs.existsSync(file)) return 0;
  const fd = fs.openSync(file, 'r');
  let pending = 0;
  try {
    checkFileHeader(fd, file, DEAD_LETTER_MAGIC, downstreamName);
    scanRecords(fd, FILE_HEADER_BYTES, new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES)), (buf, at, pos, length) => {
      if (recordStatus(buf, at) !== DeadLetterStatus.PENDING) return;
      pending++;
      visit(buf, at, pos, length);
    });
  } finally {
    fs.closeSync(fd);
  }
  return pending;
}

/** A downstream's dead-letter file (see the module comment). */
export class DeadLetterFile {
  /** Path of the file. */
  readonly filePath: string;
  /** Bytes cut from a torn tail at open. */
  readonly recoveredTornBytes: number;
  /** Records in the file. */
  recordCount: number;
  private readonly fd: number;
  private end: number;
  private readonly statusBuf = new RecordBuffer(8);
  private statusDirty = false;
  private closed = false;

  /**
   * Opens (creating if needed) `<dir>/dead-letters.dlq`, cuts a torn tail, and calls `onPending` for every PENDING
   * record (with its file position). Throws an Error naming the file when it belongs to another downstream.
   */
  constructor(dir: string, downstreamName: string, onPending: RecordVisitor | null) {
    fs.mkdirSync(dir, { recursive: true });
    this.filePath = path.join(dir, DEAD_LETTER_FILE);
    const existed = fs.existsSync(this.filePath);
    this.fd = fs.openSync(this.filePath, existed ? 'r+' : 'w+');
    let size = fs.fstatSync(this.fd).size;
    if (size < FILE_HEADER_BYTES) {
      fs.ftruncateSync(this.fd, 0);
      writeFileHeader(this.fd, DEAD_LETTER_MAGIC, downstreamName, 0);
      fs.fsyncSync(this.fd);
      syncDir(dir);
      size = FILE_HEADER_BYTES;
    } else {
      checkFileHeader(this.fd, this.filePath, DEAD_LETTER_MAGIC, downstreamName);
    }
    const scan = scanRecords(this.fd, FILE_HEADER_BYTES, new RecordBuffer(Math.max(1 << 20, 2 * TREC_MAX_BYTES)), (buf, at, pos, length) => {
      if (onPending !== null && recordStatus(buf, at) === DeadLetterStatus.PENDING) onPending(buf, at, pos, length);
    });
    this.recoveredTornBytes = size - scan.validEnd;
    if (scan.validEnd !== size) {
      fs.ftruncateSync(this.fd, scan.validEnd);
      fs.fsyncSync(this.fd);
    }
    this.end = scan.validEnd;
    this.recordCount = scan.records;
  }

  /** Bytes in the file. */
  get byteLength(): number {
    return this.end;
  }

  /**
   * Appends `length` bytes of encoded records from `buf` (holding `records` records) with one write and one
   * fdatasync; returns the file position of the first. Records are dead-lettered durably once this returns.
   */
  append(buf: RecordBuffer, length: number, records: number): number {
    const at = this.end;
    writeFully(this.fd, buf.bytes, 0, length, at);
    fs.fdatasyncSync(this.fd);
    this.end += length;
    this.recordCount += records;
    return at;
  }

  /** Rewrites the status of the record at file position `position` (durable at the next `sync`). Allocation-free. */
  setStatus(position: number, status: number): void {
    this.statusBuf.i32[0] = status;
    writeFully(this.fd, this.statusBuf.bytes, 0, 4, statusByteOffset(position));
    this.statusDirty = true;
  }

  /** Makes the status rewrites durable (an fdatasync when there were any). */
  sync(): void {
    if (!this.statusDirty) return;
    fs.fdatasyncSync(this.fd);
    this.statusDirty = false;
  }

  /** Syncs and closes. */
  close(): void {
    if (this.closed) return;
    this.sync();
    this.closed = true;
    fs.closeSync(this.fd);
  }
}
