/**
 * Reads a walked telemetry frame's values straight from its bytes (ingest thread): the walker has already found
 * every key and where its value starts (FrameWalker.valueAt), so no object is built and no string is made: an ASCII
 * string id stays where it is in the frame (PingFields.idInBytes) and the registry finds a known device from its
 * bytes; a lane name is matched byte for byte. Numbers of every MessagePack width are read as msgpackr reads them with
 * `int64AsType: 'number'` (a 64-bit integer as hi x 2^32 + lo, one rounding). What it does not take on itself (a
 * string id with non-ASCII bytes, a str32) is left to msgpackr (READ_FALLBACK), so the two can never disagree on what
 * a frame means: a seeded fuzz test holds them to the same result on every frame, valid or not
 * (test/ingest/frame-reader-fuzz.test.ts).
 *
 * Allocation-free.
 */
import { readUint32, type FrameWalker } from './frame-walker.js';
import { laneOfNameBytes } from './wire-format.js';
import {
  DecodedValues,
  VALUE_ID_BYTES,
  VALUE_NIL,
  VALUE_NUMBER,
  VALUE_OTHER,
  validateValuesInto,
  type PingFields,
  type PingLimits,
} from './ping-fields.js';

/** read() result: the frame holds something the reader leaves to msgpackr. */
export const READ_FALLBACK = -3;

/** Key indices (KeyBit order) whose strings matter: id and lane. */
const ID_KEY = 0;
const LANE_KEY = 7;

/** Reads walked frames (one per decoder). */
export class FrameReader {
  private readonly values = new DecodedValues();
  /** A view of the last buffer read (made again only when another buffer comes: once per chunk, not per frame). */
  private view: DataView = new DataView(new ArrayBuffer(8));
  private viewOf: Uint8Array | null = null;

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
          n = readUint32(buf, p + 1);
          break;
        case 0xcf:
          n = readUint32(buf, p + 1) * 0x100000000 + readUint32(buf, p + 5);
          break;
        case 0xd0:
          n = (buf[p + 1]! << 24) >> 24;
          break;
        case 0xd1:
          n = (((buf[p + 1]! << 8) | buf[p + 2]!) << 16) >> 16;
          break;
        case 0xd2:
          n = readUint32(buf, p + 1) | 0;
          break;
        case 0xd3:
          n = (readUint32(buf, p + 1) | 0) * 0x100000000 + readUint32(buf, p + 5);
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

  /**
   * A string value of `len` bytes at `buf[p]`: an ASCII id left in the frame, a lane name matched (its lane, as a
   * number would give it), any other string is no valid value; a non-ASCII id is left to msgpackr.
   */
  private readString(buf: Uint8Array, p: number, len: number, k: number, d: DecodedValues): boolean {
    if (k === LANE_KEY) {
      const lane = laneOfNameBytes(buf, p, len);
      d.kinds[k] = lane < 0 ? VALUE_OTHER : VALUE_NUMBER;
      d.nums[k] = lane;
      return true;
    }
    if (k !== ID_KEY) {
      d.kinds[k] = VALUE_OTHER;
      return true;
    }
    let ascii = 0;
    for (let i = 0; i < len; i++) ascii |= buf[p + i]!;
    if (ascii >= 0x80) return false;
    // Left in the frame: the registry finds a known device from these bytes, with no string made.
    d.kinds[k] = VALUE_ID_BYTES;
    d.idBuf = buf;
    d.idAt = p;
    d.idLen = len;
    return true;
  }
}
