/**
 * Durable append-only dead-letter file of one downstream, plus its replay cursor.
 *
 * Format (binary, little-endian): a 64-byte header — Int32 cells: magic 0x4c444647 ("GFDL"), format version 1,
 * record stride (96), FNV-1a hash of the downstream's name — followed by fixed 96-byte dispatch records (DREC_*
 * layout of src/shm/layout.ts: the trigger's cells, dead-letter time, ordinal = index in this file, downstream index,
 * reason, attempts, and an FNV-1a checksum of Int32 cells 0..22 in cell 23). Records are only appended, one
 * `writeSync` + `fsyncSync` per batch.
 *
 * The replay cursor lives beside it in `<file>.cursor`: 16 bytes, the number of records already re-delivered as a
 * Float64 and its bit pattern's checksum; rewritten in place and fsynced. Opening recovers: a torn tail (a partial
 * record or a bad checksum from a crash mid-write) is cut off, and replay resumes at the cursor.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DREC_CHECKSUM_I32, DREC_STRIDE_BYTES, DREC_STRIDE_I32 } from '../../shm/layout.js';
import { checksumI32, hashName } from '../record.js';

/** "GFDL" read as a little-endian Int32. */
export const DEAD_LETTER_FILE_MAGIC = 0x4c444647;
/** Format version of the dead-letter file. */
export const DEAD_LETTER_FILE_VERSION = 1;
/** Header bytes before the first record. */
export const DEAD_LETTER_FILE_HEADER_BYTES = 64;
/** Records read per chunk while verifying on open. */
const VERIFY_CHUNK_RECORDS = 1024;

/** One downstream's dead-letter file (see the module comment). Dispatcher thread only. */
export class DeadLetterFile {
  /** Path of the record file. */
  readonly filePath: string;
  private readonly fd: number;
  private readonly cursorFd: number;
  private records: number;
  private cursor: number;
  /** Bytes cut from a torn tail when the file was opened. */
  readonly recoveredTornBytes: number;
  private readonly cursorBuf = new ArrayBuffer(16);
  private readonly cursorF64 = new Float64Array(this.cursorBuf, 0, 1);
  private readonly cursorI32 = new Int32Array(this.cursorBuf);
  private readonly cursorBytes = new Uint8Array(this.cursorBuf);

  /** Opens (creating if needed) `<dir>/<name>.dlq` and recovers it. Throws when the file belongs to another name. */
  constructor(dir: string, downstreamName: string) {
    fs.mkdirSync(dir, { recursive: true });
    const safe = downstreamName.replace(/[^A-Za-z0-9._-]/g, '_');
    this.filePath = path.join(dir, `${safe}.dlq`);
    const nameHash = hashName(downstreamName);
    const existed = fs.existsSync(this.filePath);
    this.fd = fs.openSync(this.filePath, existed ? 'r+' : 'w+');
    const header = new Int32Array(DEAD_LETTER_FILE_HEADER_BYTES / 4);
    const headerBytes = new Uint8Array(header.buffer);
    let size = fs.fstatSync(this.fd).size;
    if (size < DEAD_LETTER_FILE_HEADER_BYTES) {
      header[0] = DEAD_LETTER_FILE_MAGIC;
      header[1] = DEAD_LETTER_FILE_VERSION;
      header[2] = DREC_STRIDE_BYTES;
      header[3] = nameHash;
      fs.ftruncateSync(this.fd, 0);
      fs.writeSync(this.fd, headerBytes, 0, headerBytes.length, 0);
      fs.fsyncSync(this.fd);
      syncDir(dir);
      size = DEAD_LETTER_FILE_HEADER_BYTES;
    } else {
      fs.readSync(this.fd, headerBytes, 0, headerBytes.length, 0);
      if (header[0] !== DEAD_LETTER_FILE_MAGIC) throw new Error(`${this.filePath}: not a dead-letter file (bad magic)`);
      if (header[1] !== DEAD_LETTER_FILE_VERSION || header[2] !== DREC_STRIDE_BYTES) {
        throw new Error(`${this.filePath}: unsupported version ${String(header[1])} / stride ${String(header[2])}`);
      }
      if (header[3] !== nameHash) throw new Error(`${this.filePath}: belongs to another downstream than ${downstreamName}`);
    }
    const whole = Math.floor((size - DEAD_LETTER_FILE_HEADER_BYTES) / DREC_STRIDE_BYTES);
    const valid = this.verify(whole);
    const validBytes = DEAD_LETTER_FILE_HEADER_BYTES + valid * DREC_STRIDE_BYTES;
    this.recoveredTornBytes = size - validBytes;
    if (validBytes !== size) {
      fs.ftruncateSync(this.fd, validBytes);
      fs.fsyncSync(this.fd);
    }
    this.records = valid;
    const cursorPath = `${this.filePath}.cursor`;
    const cursorExisted = fs.existsSync(cursorPath);
    this.cursorFd = fs.openSync(cursorPath, cursorExisted ? 'r+' : 'w+');
    this.cursor = 0;
    if (cursorExisted && fs.readSync(this.cursorFd, this.cursorBytes, 0, 16, 0) === 16) {
      const c = this.cursorF64[0]!;
      if (checksumI32(this.cursorI32, 0, 2) === this.cursorI32[2] && Number.isInteger(c) && c >= 0) {
        this.cursor = Math.min(c, valid);
      }
    }
    if (!cursorExisted) {
      this.writeCursor(0);
      syncDir(dir);
    }
  }

  /** Durable records in the file. */
  get recordCount(): number {
    return this.records;
  }

  /** Records already re-delivered (durable replay progress). */
  get replayCursor(): number {
    return this.cursor;
  }

  /** Appends `count` records from `bytes` (record k at k * stride), then fsyncs. Their ordinals must be set. */
  append(bytes: Uint8Array, count: number): void {
    const len = count * DREC_STRIDE_BYTES;
    let written = 0;
    const pos = DEAD_LETTER_FILE_HEADER_BYTES + this.records * DREC_STRIDE_BYTES;
    // writeSync may write less than asked; loop until the batch is all down.
    while (written < len) written += fs.writeSync(this.fd, bytes, written, len - written, pos + written);
    fs.fsyncSync(this.fd);
    this.records += count;
  }

  /** Reads records [fromIndex, fromIndex + count) into `dst` at byte offset `dstOffset`; returns records read. */
  read(fromIndex: number, count: number, dst: Uint8Array, dstOffset: number): number {
    const n = Math.max(0, Math.min(count, this.records - fromIndex));
    if (n === 0) return 0;
    const len = n * DREC_STRIDE_BYTES;
    const pos = DEAD_LETTER_FILE_HEADER_BYTES + fromIndex * DREC_STRIDE_BYTES;
    let got = 0;
    while (got < len) {
      const r = fs.readSync(this.fd, dst, dstOffset + got, len - got, pos + got);
      if (r === 0) break;
      got += r;
    }
    return Math.floor(got / DREC_STRIDE_BYTES);
  }

  /** Durably records that the first `cursor` records have been re-delivered. */
  writeCursor(cursor: number): void {
    this.cursorF64[0] = cursor;
    this.cursorI32[2] = checksumI32(this.cursorI32, 0, 2);
    this.cursorI32[3] = 0;
    fs.writeSync(this.cursorFd, this.cursorBytes, 0, 16, 0);
    fs.fsyncSync(this.cursorFd);
    this.cursor = cursor;
  }

  /** Closes both files. */
  close(): void {
    fs.closeSync(this.fd);
    fs.closeSync(this.cursorFd);
  }

  /** Returns how many of the first `whole` records carry a valid checksum (stops at the first bad one). */
  private verify(whole: number): number {
    if (whole === 0) return 0;
    const buf = new ArrayBuffer(VERIFY_CHUNK_RECORDS * DREC_STRIDE_BYTES);
    const bytes = new Uint8Array(buf);
    const i32 = new Int32Array(buf);
    let index = 0;
    while (index < whole) {
      const want = Math.min(VERIFY_CHUNK_RECORDS, whole - index);
      const len = want * DREC_STRIDE_BYTES;
      const got = fs.readSync(this.fd, bytes, 0, len, DEAD_LETTER_FILE_HEADER_BYTES + index * DREC_STRIDE_BYTES);
      const n = Math.floor(got / DREC_STRIDE_BYTES);
      for (let k = 0; k < n; k++) {
        // A torn or corrupt record ends the valid prefix.
        const base = k * DREC_STRIDE_I32;
        if (checksumI32(i32, base, DREC_CHECKSUM_I32) !== i32[base + DREC_CHECKSUM_I32]) return index + k;
      }
      index += n;
      if (n < want) break;
    }
    return index;
  }
}

/** fsyncs a directory so a newly created file's entry is durable (best effort where unsupported). */
function syncDir(dir: string): void {
  try {
    const fd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    // Some platforms cannot fsync a directory; the file's own fsync still holds its data.
  }
}
