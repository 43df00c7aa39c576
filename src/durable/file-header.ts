/**
 * The 64-byte header of the backlog segments, dead-letter files and pending files (FH_* in file-layout.ts): what the
 * file is, which layout version, and which downstream it belongs to.
 */
import { readFully, writeFully } from './fs-util.js';
import {
  FH_CREATED_MS_F64,
  FH_MAGIC_W,
  FH_NAME_HASH_W,
  FH_SEGMENT_F64,
  FH_VERSION_W,
  FILE_HEADER_BYTES,
  FILE_LAYOUT_VERSION,
  hashName,
} from './file-layout.js';
import { RecordBuffer } from './trigger-codec.js';

/** Writes a header at position 0 of `fd`. */
export function writeFileHeader(fd: number, magic: number, downstreamName: string, segment: number): void {
  const h = new RecordBuffer(FILE_HEADER_BYTES);
  fillFileHeader(h, magic, downstreamName, segment);
  writeFully(fd, h.bytes, 0, FILE_HEADER_BYTES, 0);
}

/** Fills the first FILE_HEADER_BYTES of `buf` with a header. */
export function fillFileHeader(buf: RecordBuffer, magic: number, downstreamName: string, segment: number): void {
  buf.bytes.fill(0, 0, FILE_HEADER_BYTES);
  buf.i32[FH_MAGIC_W] = magic;
  buf.i32[FH_VERSION_W] = FILE_LAYOUT_VERSION;
  buf.i32[FH_NAME_HASH_W] = hashName(downstreamName);
  buf.f64[FH_SEGMENT_F64 >> 3] = segment;
  buf.f64[FH_CREATED_MS_F64 >> 3] = Date.now();
}

/**
 * Checks the header of `fd` (read at position 0): throws an Error naming `file` and what is wrong (not such a file,
 * another layout version, another downstream; `downstreamName` null: any downstream). Returns the segment number it
 * holds.
 */
export function checkFileHeader(fd: number, file: string, magic: number, downstreamName: string | null): number {
  const h = new RecordBuffer(FILE_HEADER_BYTES);
  if (readFully(fd, h.bytes, 0, FILE_HEADER_BYTES, 0) < FILE_HEADER_BYTES || h.i32[FH_MAGIC_W] !== magic) {
    throw new Error(`${file}: not a file of this kind (bad header)`);
  }
  if (h.i32[FH_VERSION_W] !== FILE_LAYOUT_VERSION) {
    throw new Error(
      `${file}: file layout version ${String(h.i32[FH_VERSION_W])}, this router reads ${FILE_LAYOUT_VERSION}`,
    );
  }
  if (downstreamName !== null && h.i32[FH_NAME_HASH_W] !== hashName(downstreamName)) {
    throw new Error(`${file}: belongs to another downstream than "${downstreamName}" (two names map to one file name)`);
  }
  return h.f64[FH_SEGMENT_F64 >> 3]!;
}
