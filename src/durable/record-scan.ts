/**
 * Reading a run of trigger records from a file: chunked reads into one aligned buffer, each record's length and
 * checksum checked, stopping at the first record that is torn or corrupt (what a crash mid-write leaves).
 */
import * as fs from 'node:fs';
import { readFully } from './fs-util.js';
import { recordIsValid, recordLength, type RecordBuffer } from './trigger-codec.js';

/** What a scan found. */
export interface ScanResult {
  /** File position just past the last valid record. */
  validEnd: number;
  /** Valid records seen. */
  records: number;
}

/** Called for each valid record: the buffer, the record's offset in it, its file position and its length. */
export type RecordVisitor = (buf: RecordBuffer, at: number, position: number, length: number) => void;

/**
 * Visits the valid records of `fd` from `start` up to `end` (default: the file's size) in order, reading through
 * `buf` (at least TREC_MAX_BYTES long). Stops at the first torn or corrupt record.
 */
export function scanRecords(fd: number, start: number, buf: RecordBuffer, visit: RecordVisitor | null, end = fs.fstatSync(fd).size): ScanResult {
  let pos = start;
  let records = 0;
  while (pos < end) {
    const got = readFully(fd, buf.bytes, 0, Math.min(buf.byteLength, end - pos), pos);
    let at = 0;
    let progressed = false;
    while (at < got) {
      const length = recordLength(buf, at, got);
      if (length <= 0 || at + length > got) break;
      if (!recordIsValid(buf, at, length, got)) return { validEnd: pos + at, records };
      visit?.(buf, at, pos + at, length);
      records++;
      at += length;
      progressed = true;
    }
    if (!progressed) {
      // The record at `pos` does not fit what could be read: it is torn (or larger than any record may be).
      return { validEnd: pos, records };
    }
    pos += at;
  }
  return { validEnd: pos, records };
}
