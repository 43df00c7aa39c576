/**
 * Reading a run of trigger records from a file: chunked reads into one aligned buffer, each record's length and
 * checksum checked. A damaged record does not end the run: the scan resynchronises on the next 8-byte-aligned
 * position where a whole record verifies (plausible length, checksum over its words), counts the bytes in between as
 * one damaged span, and goes on. Only what follows the last valid record (a torn tail: what a crash mid-write leaves)
 * ends the run.
 *
 * Why resynchronising is sound: every record starts at a multiple of 8 bytes of the file, carries its length, and its
 * 32-bit checksum covers all its words but the in-place status; a position inside damaged bytes passes for a record
 * only if a plausible length and a checksum over up to 16 KiB agree by chance (about 2^-32 per candidate).
 *
 * Main thread at start and dispatcher thread.
 */
import * as fs from 'node:fs';
import { TREC_HEAD_BYTES, TREC_MAX_BYTES } from './file-layout.js';
import { readFully } from './fs-util.js';
import { recordIsValid, recordLength, type RecordBuffer } from './trigger-codec.js';

/** What a scan found. */
export interface ScanResult {
  /** File position just past the last valid record (what follows is a torn tail). */
  validEnd: number;
  /** Valid records seen. */
  records: number;
  /** Damaged spans skipped between valid records (each held at least one record that is lost). */
  damagedSpans: number;
  /** Bytes of those spans. */
  damagedBytes: number;
}

/** Called for each valid record: the buffer, the record's offset in it, its file position and its length. */
export type RecordVisitor = (buf: RecordBuffer, at: number, position: number, length: number) => void;

/** True when `length` could be a record's length (whether the record is whole is checked apart). */
function plausibleLength(length: number): boolean {
  return length >= TREC_HEAD_BYTES && length <= TREC_MAX_BYTES && (length & 7) === 0;
}

/**
 * Visits the valid records of `fd` from `start` up to `end` (default: the file's size) in order, reading through
 * `buf` (at least 2 * TREC_MAX_BYTES long), skipping damaged spans (see the module comment).
 */
export function scanRecords(
  fd: number,
  start: number,
  buf: RecordBuffer,
  visit: RecordVisitor | null,
  end = fs.fstatSync(fd).size,
): ScanResult {
  let pos = start;
  let records = 0;
  let validEnd = start;
  let damagedSpans = 0;
  let damagedBytes = 0;
  while (pos < end) {
    const got = readFully(fd, buf.bytes, 0, Math.min(buf.byteLength, end - pos), pos);
    let at = 0;
    let damagedAt = -1;
    while (at < got) {
      const length = recordLength(buf, at, got);
      // A record that is whole in the file but runs past this chunk: read on from its start.
      if (plausibleLength(length) && at + length > got && pos + at + length <= end && at > 0) break;
      if (!recordIsValid(buf, at, length, got)) {
        damagedAt = pos + at;
        break;
      }
      visit?.(buf, at, pos + at, length);
      records++;
      at += length;
      validEnd = pos + at;
    }
    if (damagedAt < 0) {
      if (got === 0) break;
      pos += at;
      continue;
    }
    const next = findNextRecord(fd, damagedAt + 8, end, buf);
    if (next < 0) break;
    damagedSpans++;
    damagedBytes += next - damagedAt;
    pos = next;
  }
  return { validEnd, records, damagedSpans, damagedBytes };
}

/**
 * File position of the first whole, valid record at an 8-byte-aligned position in [from, end) of `fd` (reading
 * through `buf`, whose contents it overwrites), or -1 when there is none.
 */
export function findNextRecord(fd: number, from: number, end: number, buf: RecordBuffer): number {
  let p = from;
  while (p + TREC_HEAD_BYTES <= end) {
    const got = readFully(fd, buf.bytes, 0, Math.min(buf.byteLength, end - p), p);
    let at = 0;
    let reread = false;
    for (; at + TREC_HEAD_BYTES <= got; at += 8) {
      const length = buf.i32[at >> 2]!;
      if (!plausibleLength(length)) continue;
      if (at + length > got) {
        // It would run past this chunk; whole in the file: read again from it.
        if (p + at + length <= end && at > 0) {
          reread = true;
          break;
        }
        continue;
      }
      if (recordIsValid(buf, at, length, got)) return p + at;
    }
    if (!reread && p + got >= end) return -1;
    p += at > 0 ? at : 8;
  }
  return -1;
}

/** Bytes read first for one record (most are shorter; a longer one is read on from there). */
const RECORD_FIRST_READ_BYTES = 512;

/**
 * Reads the record at `offset` of `fd` (a file of `size` bytes) into `buf` at 0: its first 512 bytes, then the rest
 * when its length says it is longer (up to `buf`'s size). Returns the bytes read (the caller checks the record).
 */
export function readRecordAt(fd: number, offset: number, size: number, buf: RecordBuffer): number {
  let end = readFully(fd, buf.bytes, 0, Math.min(RECORD_FIRST_READ_BYTES, buf.byteLength, size - offset), offset);
  const length = recordLength(buf, 0, end);
  if (length > end && length <= buf.byteLength && offset + length <= size)
    end += readFully(fd, buf.bytes, end, length - end, offset + end);
  return end;
}
