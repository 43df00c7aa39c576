/**
 * Reads a walked telemetry frame's values straight from its bytes (ingest thread): the walker has already found
 * every key and where its value starts (FrameWalker.valueAt), so no object is built and no string is made but a lane
 * name's: an ASCII string id stays where it is in the frame (PingFields.idInBytes) and the registry finds a known
 * device from its bytes. Numbers of every MessagePack width are read as msgpackr reads them with
 * `int64AsType: 'number'` (a 64-bit integer as hi x 2^32 + lo, one rounding). What it does not take on itself (a
 * string id or lane with non-ASCII bytes, or longer than it keeps) is left to msgpackr (READ_FALLBACK), so the two can
 * never disagree on what a frame means: a seeded fuzz test holds them to the same result on every frame, valid or
 * not (test/ingest/frame-reader-fuzz.test.ts).
 *
 * Allocation-free apart from a lane name's string.
 */
import type { FrameWalker } from './frame-walker.js';
import {
  DecodedValues,
  VALUE_ID_BYTES,
  VALUE_NIL,
  VALUE_NUMBER,
  VALUE_OTHER,
  VALUE_STRING,
  validateValuesInto,
  type PingFields,
  type PingLimits,
} from './ping-fields.js';

/** read() result: the frame holds something the reader leaves to msgpackr. */
export const READ_FALLBACK = -3;

/** Longest string the reader makes itself (longer ids go through msgpackr), bytes. */
const MAX_STRING_BYTES = 64;
/** Strings up to this many bytes are made with one String.fromCharCode call of that many arguments. */
const SHORT_STRING_BYTES = 12;
/** Key indices (KeyBit order) whose strings matter: id and lane. */
const ID_KEY = 0;
const LANE_KEY = 7;

/** Reads walked frames (one per decoder). */
export class FrameReader {
  private readonly values = new DecodedValues();
  /** A view of the last buffer read (made again only when another buffer comes: once per chunk, not per frame). */
  private view: DataView = new DataView(new ArrayBuffer(8));
  private viewOf: Uint8Array | null = null;
  /** Per length, a reused array of char codes for String.fromCharCode.apply (ids longer than SHORT_STRING_BYTES). */
  private readonly codes: number[][] = Array.from({ length: MAX_STRING_BYTES + 1 }, (_, n) =>
    new Array<number>(n).fill(0),
  );

  /**
   * Reads and validates the frame `walker` just walked in `buf` into `out`: PING_VALID, a RejectReason, or
   * READ_FALLBACK (nothing set; decode it with msgpackr).
   */
  read(buf: Uint8Array, walker: FrameWalker, limits: PingLimits, out: PingFields): number {
    const mask = walker.keyMask;
    const at = walker.valueAt;
    const d = this.values;
    if (buf !== this.viewOf) {
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
      this.viewOf = buf;
    }
    for (let k = 0; k < 8; k++) {
      if ((mask & (1 << k)) === 0) continue;
      if (!this.readValue(buf, at[k]!, k, d)) return READ_FALLBACK;
    }
    return validateValuesInto(d, mask, limits, out);
  }

  /** Reads the value at `buf[p]` (walked: complete and scalar) into key `k` of `d`; false to leave it to msgpackr. */
  private readValue(buf: Uint8Array, p: number, k: number, d: DecodedValues): boolean {
    const b = buf[p]!;
    let n: number;
    if (b < 0x80) {
      n = b;
    } else if (b >= 0xe0) {
      n = b - 0x100;
    } else if (b >= 0xa0 && b < 0xc0) {
      return this.readString(buf, p + 1, b & 0x1f, k, d);
    } else {
      switch (b) {
        case 0xc0:
          d.kinds[k] = VALUE_NIL;
          return true;
        case 0xc2:
        case 0xc3:
        case 0xc4:
        case 0xc5:
        case 0xc6:
          // Booleans and binary: never a valid telemetry value.
          d.kinds[k] = VALUE_OTHER;
          return true;
        case 0xca:
          n = this.view.getFloat32(p + 1);
          break;
        case 0xcb:
          n = this.view.getFloat64(p + 1);
          break;
        case 0xcc:
          n = buf[p + 1]!;
          break;
        case 0xcd:
          n = (buf[p + 1]! << 8) | buf[p + 2]!;
          break;
        case 0xce:
          n = uint32(buf, p + 1);
          break;
        case 0xcf:
          n = uint32(buf, p + 1) * 0x100000000 + uint32(buf, p + 5);
          break;
        case 0xd0:
          n = (buf[p + 1]! << 24) >> 24;
          break;
        case 0xd1:
          n = (((buf[p + 1]! << 8) | buf[p + 2]!) << 16) >> 16;
          break;
        case 0xd2:
          n = uint32(buf, p + 1) | 0;
          break;
        case 0xd3:
          n = (uint32(buf, p + 1) | 0) * 0x100000000 + uint32(buf, p + 5);
          break;
        case 0xd9:
          return this.readString(buf, p + 2, buf[p + 1]!, k, d);
        case 0xda:
          return this.readString(buf, p + 3, (buf[p + 1]! << 8) | buf[p + 2]!, k, d);
        default:
          return false;
      }
    }
    d.kinds[k] = VALUE_NUMBER;
    d.nums[k] = n;
    return true;
  }

  /** A string value of `len` bytes at `buf[p]`: made for id and lane when ASCII and short, else left to msgpackr. */
  private readString(buf: Uint8Array, p: number, len: number, k: number, d: DecodedValues): boolean {
    if (k !== ID_KEY && k !== LANE_KEY) {
      // Its text does not matter: a string is no valid value of the other keys.
      d.kinds[k] = VALUE_OTHER;
      return true;
    }
    if (len > MAX_STRING_BYTES) return false;
    let ascii = 0;
    for (let i = 0; i < len; i++) ascii |= buf[p + i]!;
    if (ascii >= 0x80) return false;
    if (k === ID_KEY) {
      // Left in the frame: the registry finds a known device from these bytes, with no string made.
      d.kinds[k] = VALUE_ID_BYTES;
      d.idBuf = buf;
      d.idAt = p;
      d.idLen = len;
      return true;
    }
    d.kinds[k] = VALUE_STRING;
    d.strs[k] = len <= SHORT_STRING_BYTES ? shortAscii(buf, p, len) : this.longerAscii(buf, p, len);
    return true;
  }

  private longerAscii(buf: Uint8Array, p: number, len: number): string {
    const codes = this.codes[len]!;
    for (let i = 0; i < len; i++) codes[i] = buf[p + i]!;
    return String.fromCharCode.apply(null, codes);
  }
}

/** Big-endian uint32 at `buf[p]` as a non-negative number. */
function uint32(buf: Uint8Array, p: number): number {
  return buf[p]! * 0x1000000 + ((buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!);
}

/** The ASCII string of `len` (0-12) bytes at `buf[p]`, made by one call (no array). */
function shortAscii(buf: Uint8Array, p: number, len: number): string {
  const f = String.fromCharCode;
  switch (len) {
    case 0:
      return '';
    case 1:
      return f(buf[p]!);
    case 2:
      return f(buf[p]!, buf[p + 1]!);
    case 3:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!);
    case 4:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!, buf[p + 3]!);
    case 5:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!, buf[p + 3]!, buf[p + 4]!);
    case 6:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!, buf[p + 3]!, buf[p + 4]!, buf[p + 5]!);
    case 7:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!, buf[p + 3]!, buf[p + 4]!, buf[p + 5]!, buf[p + 6]!);
    case 8:
      return f(buf[p]!, buf[p + 1]!, buf[p + 2]!, buf[p + 3]!, buf[p + 4]!, buf[p + 5]!, buf[p + 6]!, buf[p + 7]!);
    case 9:
      return f(
        buf[p]!,
        buf[p + 1]!,
        buf[p + 2]!,
        buf[p + 3]!,
        buf[p + 4]!,
        buf[p + 5]!,
        buf[p + 6]!,
        buf[p + 7]!,
        buf[p + 8]!,
      );
    case 10:
      return f(
        buf[p]!,
        buf[p + 1]!,
        buf[p + 2]!,
        buf[p + 3]!,
        buf[p + 4]!,
        buf[p + 5]!,
        buf[p + 6]!,
        buf[p + 7]!,
        buf[p + 8]!,
        buf[p + 9]!,
      );
    case 11:
      return f(
        buf[p]!,
        buf[p + 1]!,
        buf[p + 2]!,
        buf[p + 3]!,
        buf[p + 4]!,
        buf[p + 5]!,
        buf[p + 6]!,
        buf[p + 7]!,
        buf[p + 8]!,
        buf[p + 9]!,
        buf[p + 10]!,
      );
    default:
      return f(
        buf[p]!,
        buf[p + 1]!,
        buf[p + 2]!,
        buf[p + 3]!,
        buf[p + 4]!,
        buf[p + 5]!,
        buf[p + 6]!,
        buf[p + 7]!,
        buf[p + 8]!,
        buf[p + 9]!,
        buf[p + 10]!,
        buf[p + 11]!,
      );
  }
}
