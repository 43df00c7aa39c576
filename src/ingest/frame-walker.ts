/**
 * Structural walk over one MessagePack telemetry frame, without decoding it (ingest thread).
 *
 * The stream has no length prefix, so the frame's extent is found by walking its headers: the top-level map (or
 * msgpackr record), each key (must be a known telemetry key, once), each scalar value. The walk enforces the
 * frame-size limit from declared lengths before any byte of a large value is buffered or decoded, tells a frame
 * that needs more bytes from one that is structurally wrong, and records which keys the frame carries.
 *
 * Allocation-free: results are left in fields (`frameEnd`, `keyMask`, and `valueAt`: where each key's value starts,
 * for the frame reader).
 */
import { RejectReason } from '../shm/layout.js';
import { TELEMETRY_SHARED_STRUCTURES, keyBitOf, matchKeyBytes } from './wire-format.js';

/** Walk result: the frame is complete and structurally valid; `frameEnd` and `keyMask` are set. */
export const WALK_OK = -1;
/** Walk result: the frame continues past the bytes available (and stays within the frame-size limit). */
export const WALK_NEED_MORE = -2;

/** Largest number of entries a telemetry map can have (one per key). */
const MAX_ENTRIES = 8;

/**
 * Walks frames. One instance per decoder; `walk` returns WALK_OK, WALK_NEED_MORE or a structural RejectReason
 * (CORRUPT_FRAME, OVERSIZED_FRAME, NOT_A_MAP, UNKNOWN_KEY, UNSUPPORTED_VALUE).
 */
export class FrameWalker {
  /** After WALK_OK: the index one past the frame's last byte. */
  frameEnd = 0;
  /** After WALK_OK: KeyBit mask of the keys the frame carries. */
  keyMask = 0;
  /** After WALK_OK: per key index (KeyBit order), the offset of its value's first byte (for the keys in `keyMask`). */
  readonly valueAt = new Int32Array(8);
  /** The KeyBit of each entry in frame order (a map's keys, a record definition's, or a shared structure's). */
  private order: Int32Array = new Int32Array(MAX_ENTRIES);
  private readonly frameOrder: Int32Array = this.order;
  private readonly sharedOrders: Int32Array[];
  /** Keys walked so far in this frame. */
  private keysWalked = 0;
  /** Whether shared-structure record references (0x40 + index) are recognised. */
  readonly sharedStructures: boolean;
  private readonly sharedCount: number;
  private readonly sharedLengths: Int32Array;
  private readonly sharedMasks: Int32Array;
  /** Frame-local record id defined by an inline definition (-1 when none). */
  private definedId = -1;
  private limit = 0;
  private end = 0;
  /** Position reached by the last `key` / `value` step. */
  private pos = 0;

  constructor(sharedStructures: boolean) {
    this.sharedStructures = sharedStructures;
    this.sharedCount = sharedStructures ? TELEMETRY_SHARED_STRUCTURES.length : 0;
    this.sharedLengths = new Int32Array(TELEMETRY_SHARED_STRUCTURES.length);
    this.sharedMasks = new Int32Array(TELEMETRY_SHARED_STRUCTURES.length);
    TELEMETRY_SHARED_STRUCTURES.forEach((keys, i) => {
      this.sharedLengths[i] = keys.length;
      for (const k of keys) this.sharedMasks[i]! |= keyBitOf(k);
    });
    this.sharedOrders = TELEMETRY_SHARED_STRUCTURES.map((keys) => Int32Array.from(keys, (k) => keyBitOf(k)));
  }

  /**
   * Walks the frame starting at `buf[start]`, with bytes available up to `end` (exclusive) and at most
   * `maxFrameBytes` bytes allowed for the whole frame.
   */
  walk(buf: Uint8Array, start: number, end: number, maxFrameBytes: number): number {
    this.limit = start + maxFrameBytes;
    this.end = end;
    this.definedId = -1;
    this.keyMask = 0;
    this.keysWalked = 0;
    this.order = this.frameOrder;
    let p = start;
    if (p >= end) return WALK_NEED_MORE;
    const b = buf[p]!;
    let count: number;
    let valuesOnly = false;
    if (b >= 0x80 && b <= 0x8f) {
      count = b & 0x0f;
      p += 1;
    } else if (b === 0xde) {
      if (p + 3 > end) return this.short(p + 3);
      count = (buf[p + 1]! << 8) | buf[p + 2]!;
      p += 3;
    } else if (b === 0xdf) {
      if (p + 5 > end) return this.short(p + 5);
      count = readUint32(buf, p + 1);
      p += 5;
    } else if (b === 0xd4) {
      // fixext1: only msgpackr's inline record definition (type 0x72) is a frame.
      if (p + 2 > end) return this.short(p + 2);
      if (buf[p + 1] !== 0x72) return RejectReason.NOT_A_MAP;
      if (p + 4 > end) return this.short(p + 4);
      const idByte = buf[p + 2]!;
      if (idByte < 0x40 || idByte > 0x7f) return RejectReason.CORRUPT_FRAME;
      this.definedId = idByte;
      p += 3;
      const a = buf[p]!;
      if (a >= 0x90 && a <= 0x9f) {
        count = a & 0x0f;
        p += 1;
      } else if (a === 0xdc) {
        if (p + 3 > end) return this.short(p + 3);
        count = (buf[p + 1]! << 8) | buf[p + 2]!;
        p += 3;
      } else {
        return RejectReason.CORRUPT_FRAME;
      }
      if (count > MAX_ENTRIES) return RejectReason.UNKNOWN_KEY;
      // The definition lists the keys, then the values follow in that order.
      for (let i = 0; i < count; i++) {
        const r = this.key(buf, p);
        if (r !== WALK_OK) return r;
        p = this.pos;
      }
      valuesOnly = true;
    } else if (b >= 0x40 && b < 0x40 + this.sharedCount) {
      count = this.sharedLengths[b - 0x40]!;
      this.keyMask = this.sharedMasks[b - 0x40]!;
      this.order = this.sharedOrders[b - 0x40]!;
      p += 1;
      valuesOnly = true;
    } else if (b === 0xc1) {
      return RejectReason.CORRUPT_FRAME;
    } else {
      return RejectReason.NOT_A_MAP;
    }
    if (count > MAX_ENTRIES) return RejectReason.UNKNOWN_KEY;
    if (p > this.limit) return RejectReason.OVERSIZED_FRAME;
    for (let i = 0; i < count; i++) {
      // Records carry values only; maps alternate key and value.
      if (!valuesOnly) {
        const rk = this.key(buf, p);
        if (rk !== WALK_OK) return rk;
        p = this.pos;
      }
      this.valueAt[31 - Math.clz32(this.order[i]!)] = p;
      const rv = this.value(buf, p);
      if (rv !== WALK_OK) return rv;
      p = this.pos;
    }
    this.frameEnd = p;
    return WALK_OK;
  }

  /**
   * Whether a frame plausibly starts at `buf[i]` (bytes available up to `end`): 1 yes, 0 no, -1 cannot tell yet.
   * Plausible: a map of 1-8 entries whose first key is a telemetry key (any string encoding), an inline record
   * definition whose first key is a telemetry key, or (shared-structure mode) a shared record reference.
   */
  plausibleStart(buf: Uint8Array, i: number, end: number): number {
    const b = buf[i]!;
    let k: number;
    if (b >= 0x81 && b <= 0x88) {
      k = i + 1;
    } else if (b === 0xde) {
      if (i + 3 > end) return -1;
      if (buf[i + 1] !== 0 || buf[i + 2] === 0 || buf[i + 2]! > MAX_ENTRIES) return 0;
      k = i + 3;
    } else if (b === 0xd4) {
      if (i + 4 > end) return -1;
      const idByte = buf[i + 2]!;
      const a = buf[i + 3]!;
      if (buf[i + 1] !== 0x72 || idByte < 0x40 || idByte > 0x7f || a < 0x91 || a > 0x98) return 0;
      k = i + 4;
    } else if (b >= 0x40 && b < 0x40 + this.sharedCount) {
      return 1;
    } else {
      return 0;
    }
    // The first key, in any string encoding the walker accepts (fixstr, str8/16/32): a telemetry key of 2-8 bytes.
    if (k + 1 > end) return -1;
    const kb = buf[k]!;
    let len: number;
    let at: number;
    if (kb >= 0xa0 && kb <= 0xbf) {
      len = kb & 0x1f;
      at = k + 1;
    } else if (kb === 0xd9) {
      if (k + 2 > end) return -1;
      len = buf[k + 1]!;
      at = k + 2;
    } else if (kb === 0xda) {
      if (k + 3 > end) return -1;
      len = (buf[k + 1]! << 8) | buf[k + 2]!;
      at = k + 3;
    } else if (kb === 0xdb) {
      if (k + 5 > end) return -1;
      len = readUint32(buf, k + 1);
      at = k + 5;
    } else {
      return 0;
    }
    if (len < 2 || len > 8) return 0;
    if (at + len > end) return -1;
    return matchKeyBytes(buf, at, len) !== 0 ? 1 : 0;
  }

  /** NEED_MORE when `needed` is within the limit, else OVERSIZED. */
  private short(needed: number): number {
    return needed > this.limit ? RejectReason.OVERSIZED_FRAME : WALK_NEED_MORE;
  }

  /** Walks one key at `p`; on WALK_OK `pos` is past it and its bit is in `keyMask`. */
  private key(buf: Uint8Array, p: number): number {
    const end = this.end;
    if (p >= end) return this.short(p + 1);
    const b = buf[p]!;
    let len: number;
    let hdr: number;
    if (b >= 0xa0 && b <= 0xbf) {
      len = b & 0x1f;
      hdr = 1;
    } else if (b === 0xd9) {
      if (p + 2 > end) return this.short(p + 2);
      len = buf[p + 1]!;
      hdr = 2;
    } else if (b === 0xda) {
      if (p + 3 > end) return this.short(p + 3);
      len = (buf[p + 1]! << 8) | buf[p + 2]!;
      hdr = 3;
    } else if (b === 0xdb) {
      if (p + 5 > end) return this.short(p + 5);
      len = readUint32(buf, p + 1);
      hdr = 5;
    } else if (b === 0xc1) {
      return RejectReason.CORRUPT_FRAME;
    } else {
      // A non-string key.
      return RejectReason.UNKNOWN_KEY;
    }
    const q = p + hdr + len;
    if (q > this.limit) return RejectReason.OVERSIZED_FRAME;
    if (q > end) return WALK_NEED_MORE;
    const bit = matchKeyBytes(buf, p + hdr, len);
    // Unknown or repeated keys are both rejected.
    if (bit === 0 || (this.keyMask & bit) !== 0) return RejectReason.UNKNOWN_KEY;
    this.keyMask |= bit;
    this.frameOrder[this.keysWalked++] = bit;
    this.pos = q;
    return WALK_OK;
  }

  /** Walks one scalar value at `p`; on WALK_OK `pos` is past it. */
  private value(buf: Uint8Array, p: number): number {
    const end = this.end;
    if (p >= end) return this.short(p + 1);
    const b = buf[p]!;
    let q: number;
    if (b < 0x80) {
      // 0x40..0x7f start a record where a record id is defined (msgpackr reads them so); elsewhere a fixint.
      if (b >= 0x40 && (b === this.definedId || b < 0x40 + this.sharedCount)) return RejectReason.UNSUPPORTED_VALUE;
      q = p + 1;
    } else if (b < 0xa0) {
      return RejectReason.UNSUPPORTED_VALUE; // fixmap, fixarray
    } else if (b < 0xc0) {
      q = p + 1 + (b & 0x1f);
    } else if (b >= 0xe0) {
      q = p + 1;
    } else {
      switch (b) {
        case 0xc0:
        case 0xc2:
        case 0xc3:
          q = p + 1;
          break;
        case 0xc1:
          return RejectReason.CORRUPT_FRAME;
        case 0xcc:
        case 0xd0:
          q = p + 2;
          break;
        case 0xcd:
        case 0xd1:
          q = p + 3;
          break;
        case 0xca:
        case 0xce:
        case 0xd2:
          q = p + 5;
          break;
        case 0xcb:
        case 0xcf:
        case 0xd3:
          q = p + 9;
          break;
        case 0xc4:
        case 0xd9:
          if (p + 2 > end) return this.short(p + 2);
          q = p + 2 + buf[p + 1]!;
          break;
        case 0xc5:
        case 0xda:
          if (p + 3 > end) return this.short(p + 3);
          q = p + 3 + ((buf[p + 1]! << 8) | buf[p + 2]!);
          break;
        case 0xc6:
        case 0xdb:
          if (p + 5 > end) return this.short(p + 5);
          q = p + 5 + readUint32(buf, p + 1);
          break;
        default:
          // ext8/16/32, fixext*, array16/32, map16/32
          return RejectReason.UNSUPPORTED_VALUE;
      }
    }
    if (q > this.limit) return RejectReason.OVERSIZED_FRAME;
    if (q > end) return WALK_NEED_MORE;
    this.pos = q;
    return WALK_OK;
  }
}

/** Big-endian uint32 at `buf[p]` as a non-negative number. */
export function readUint32(buf: Uint8Array, p: number): number {
  return buf[p]! * 0x1000000 + ((buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!);
}
