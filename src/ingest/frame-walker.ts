/**
 * Structural walk over one MessagePack telemetry frame, without decoding it (ingest thread).
 *
 * The stream has no length prefix, so the frame's extent is found by walking its headers: the top-level map (or
 * msgpackr record), each key (must be a known telemetry key, once), each scalar value. The walk enforces the
 * frame-size limit from declared lengths before any byte of a large value is buffered or decoded, tells a frame
 * that needs more bytes from one that is structurally wrong, and records which keys the frame carries. A map whose
 * only faults are unknown or repeated keys, or maps, arrays or extensions as values, is walked to its end all the
 * same (`delimited`): it is rejected alone, and the stream goes on after it, so a sender whose every frame carries
 * an extra key has every frame counted, not one reject and then bytes skipped.
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

/**
 * Most entries walked in one frame (unknown keys included): a frame with more cannot be told from damaged bytes and
 * is a structural reject.
 */
const MAX_WALKED_ENTRIES = 64;
/**
 * Most values walked over inside the values (and non-string keys) of one frame: past it the frame is a structural
 * reject, so no walk, however its bytes are made, costs more than a few hundred steps.
 */
const MAX_SKIPPED_VALUES = 256;

/**
 * Walks frames. One instance per decoder; `walk` returns WALK_OK, WALK_NEED_MORE or a structural RejectReason
 * (CORRUPT_FRAME, OVERSIZED_FRAME, NOT_A_MAP, UNKNOWN_KEY, UNSUPPORTED_VALUE): UNKNOWN_KEY and UNSUPPORTED_VALUE with
 * `delimited` set when the frame was walked to its end all the same.
 */
export class FrameWalker {
  /** After WALK_OK: the index one past the frame's last byte. */
  frameEnd = 0;
  /** After WALK_OK: KeyBit mask of the keys the frame carries. */
  keyMask = 0;
  /** After WALK_OK: per key index (KeyBit order), the offset of its value's first byte (for the keys in `keyMask`). */
  readonly valueAt = new Int32Array(8);
  /**
   * After a walk that returned a RejectReason: true when the frame was walked to its end all the same (`frameEnd` set):
   * an unknown or repeated key, or a map, array or extension where a scalar is expected, in an otherwise well-formed
   * frame. Such a frame is rejected alone and the stream goes on right after it; false for a structural reject.
   */
  delimited = false;
  /**
   * The KeyBit of each entry in frame order (a map's keys, a record definition's, or a shared structure's); 0 for an
   * entry whose key is not a telemetry key (or repeats one).
   */
  private order: Int32Array = new Int32Array(MAX_WALKED_ENTRIES);
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
  /** Entries of the record `definedId`. */
  private definedCount = 0;
  /**
   * Records defined inside values of this frame (msgpackr's nested records), by id - 0x40: their entry counts, valid
   * where `nestedStamp` equals `walkStamp` (bumped per walk, so nothing is cleared per frame).
   */
  private readonly nestedCount = new Int32Array(64);
  private readonly nestedStamp = new Int32Array(64);
  private walkStamp = 0;
  private limit = 0;
  private end = 0;
  /** Position reached by the last `key` / `value` step. */
  private pos = 0;
  /** The first reject found in a frame whose walk goes on to its end (0: none yet). */
  private deferred = 0;
  /** Values walked over by `skip` in this frame (see MAX_SKIPPED_VALUES). */
  private skippedValues = 0;
  /**
   * When true, the first unknown key or nested value ends the walk (a structural reject, not `delimited`): for the
   * decoder's look for a whole frame inside a faulty one, where only a clean frame counts.
   */
  stopAtFault = false;

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
    this.walkStamp = (this.walkStamp + 1) | 0;
    if (this.walkStamp === 0) {
      // Wrapped: no stamp left from 2^32 walks ago may match.
      this.nestedStamp.fill(0);
      this.walkStamp = 1;
    }
    this.skippedValues = 0;
    this.keyMask = 0;
    this.keysWalked = 0;
    this.order = this.frameOrder;
    this.delimited = false;
    this.deferred = 0;
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
      if (count > MAX_WALKED_ENTRIES) return RejectReason.UNKNOWN_KEY;
      this.definedCount = count;
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
    if (count > MAX_WALKED_ENTRIES) return RejectReason.UNKNOWN_KEY;
    if (p > this.limit) return RejectReason.OVERSIZED_FRAME;
    for (let i = 0; i < count; i++) {
      // Records carry values only; maps alternate key and value.
      if (!valuesOnly) {
        const rk = this.key(buf, p);
        if (rk !== WALK_OK) return rk;
        p = this.pos;
      }
      const bit = this.order[i]!;
      if (bit !== 0) this.valueAt[31 - Math.clz32(bit)] = p;
      const rv = this.value(buf, p);
      if (rv !== WALK_OK) return rv;
      p = this.pos;
    }
    this.frameEnd = p;
    if (this.deferred === 0) return WALK_OK;
    this.delimited = true;
    return this.deferred;
  }

  /**
   * Whether a frame plausibly starts at `buf[i]` (bytes available up to `end`): 1 yes, 0 no, -1 cannot tell yet.
   * Plausible: a map (any map header) of 1 to MAX_WALKED_ENTRIES entries whose first key is a telemetry key (any
   * string encoding), an inline record definition (its key list in either array header) whose first key is a
   * telemetry key, or (shared-structure mode) a shared record reference.
   */
  plausibleStart(buf: Uint8Array, i: number, end: number): number {
    const b = buf[i]!;
    let k: number;
    if (b >= 0x81 && b <= 0x8f) {
      k = i + 1;
    } else if (b === 0xde) {
      if (i + 3 > end) return -1;
      if (buf[i + 1] !== 0 || buf[i + 2] === 0 || buf[i + 2]! > MAX_WALKED_ENTRIES) return 0;
      k = i + 3;
    } else if (b === 0xdf) {
      if (i + 5 > end) return -1;
      if ((buf[i + 1]! | buf[i + 2]! | buf[i + 3]!) !== 0 || buf[i + 4] === 0 || buf[i + 4]! > MAX_WALKED_ENTRIES)
        return 0;
      k = i + 5;
    } else if (b === 0xd4) {
      if (i + 4 > end) return -1;
      const idByte = buf[i + 2]!;
      const a = buf[i + 3]!;
      if (buf[i + 1] !== 0x72 || idByte < 0x40 || idByte > 0x7f) return 0;
      if (a >= 0x91 && a <= 0x9f) {
        k = i + 4;
      } else if (a === 0xdc) {
        if (i + 6 > end) return -1;
        if (buf[i + 4] !== 0 || buf[i + 5] === 0 || buf[i + 5]! > MAX_WALKED_ENTRIES) return 0;
        k = i + 6;
      } else {
        return 0;
      }
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

  /**
   * Walks one key at `p`; on WALK_OK `pos` is past it and its bit is in `keyMask`, or (an unknown, repeated or
   * non-string key) the frame's reject is deferred to its end and the entry's order is 0.
   */
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
      // A non-string key: walked over, the frame rejected at its end.
      if (this.stopAtFault) return RejectReason.UNKNOWN_KEY;
      const r = this.skip(buf, p);
      if (r !== WALK_OK) return r;
      this.defer(RejectReason.UNKNOWN_KEY);
      this.frameOrder[this.keysWalked++] = 0;
      return WALK_OK;
    }
    const q = p + hdr + len;
    if (q > this.limit) return RejectReason.OVERSIZED_FRAME;
    if (q > end) return WALK_NEED_MORE;
    const bit = matchKeyBytes(buf, p + hdr, len);
    // Unknown or repeated keys are both rejected, once the frame's end is found.
    if (bit === 0 || (this.keyMask & bit) !== 0) {
      if (this.stopAtFault) return RejectReason.UNKNOWN_KEY;
      this.defer(RejectReason.UNKNOWN_KEY);
      this.frameOrder[this.keysWalked++] = 0;
      this.pos = q;
      return WALK_OK;
    }
    this.keyMask |= bit;
    this.frameOrder[this.keysWalked++] = bit;
    this.pos = q;
    return WALK_OK;
  }

  /** Keeps the first reject of a frame that is walked on to its end. */
  private defer(reason: number): void {
    if (this.deferred === 0) this.deferred = reason;
  }

  /**
   * Walks over a map, array, extension or msgpackr record at `p` where a scalar is expected; on WALK_OK `pos` is past
   * it and the frame's reject (UNSUPPORTED_VALUE) is deferred to its end (kept apart from `value`, the hot path).
   */
  private nestedValue(buf: Uint8Array, p: number): number {
    if (this.stopAtFault) return RejectReason.UNSUPPORTED_VALUE;
    const r = this.skip(buf, p);
    if (r !== WALK_OK) return r;
    this.defer(RejectReason.UNSUPPORTED_VALUE);
    return WALK_OK;
  }

  /**
   * Entries of the msgpackr record that byte `b` refers to in this frame (the frame's own, a shared structure, or one
   * defined inside an earlier value), or -1 when `b` is no such reference.
   */
  private recordEntries(b: number): number {
    if (b < 0x40 || b > 0x7f) return -1;
    // The latest definition of an id wins (msgpackr's reading): one inside a value comes after the frame's own.
    if (this.nestedStamp[b - 0x40] === this.walkStamp) return this.nestedCount[b - 0x40]!;
    if (b === this.definedId) return this.definedCount;
    if (b < 0x40 + this.sharedCount) return this.sharedLengths[b - 0x40]!;
    return -1;
  }

  /**
   * Walks over one value of any MessagePack type at `p` (maps and arrays with everything in them, and msgpackr records:
   * an inline definition, or a reference to a record this frame knows); on WALK_OK `pos` is past it.
   */
  private skip(buf: Uint8Array, p: number): number {
    const end = this.end;
    // Values still to walk over; each takes at least one byte, so more than the frame's room left is oversized.
    let pending = 1;
    while (pending > 0) {
      if (p + pending > this.limit) return RejectReason.OVERSIZED_FRAME;
      if (++this.skippedValues > MAX_SKIPPED_VALUES) return RejectReason.UNSUPPORTED_VALUE;
      if (p >= end) return this.short(p + 1);
      const b = buf[p]!;
      pending--;
      let n = -1;
      let hdr = 1;
      let q = -1;
      if (b >= 0x80 && b <= 0x8f) n = (b & 0x0f) * 2;
      else if (b >= 0x90 && b <= 0x9f) n = b & 0x0f;
      else if (b === 0xdc || b === 0xde) {
        if (p + 3 > end) return this.short(p + 3);
        n = ((buf[p + 1]! << 8) | buf[p + 2]!) * (b === 0xde ? 2 : 1);
        hdr = 3;
      } else if (b === 0xdd || b === 0xdf) {
        if (p + 5 > end) return this.short(p + 5);
        n = readUint32(buf, p + 1) * (b === 0xdf ? 2 : 1);
        hdr = 5;
      } else if (b === 0xd4 && p + 1 < end && buf[p + 1] === 0x72) {
        // msgpackr's inline record definition: its id, its key list, then one value per key.
        if (p + 4 > end) return this.short(p + 4);
        const id = buf[p + 2]!;
        if (id < 0x40 || id > 0x7f) return RejectReason.CORRUPT_FRAME;
        const a = buf[p + 3]!;
        if (a >= 0x90 && a <= 0x9f) {
          n = a & 0x0f;
          hdr = 4;
        } else if (a === 0xdc) {
          if (p + 6 > end) return this.short(p + 6);
          n = (buf[p + 4]! << 8) | buf[p + 5]!;
          hdr = 6;
        } else {
          return RejectReason.CORRUPT_FRAME;
        }
        this.nestedCount[id - 0x40] = n;
        this.nestedStamp[id - 0x40] = this.walkStamp;
        n *= 2;
      } else if (b >= 0xd4 && b <= 0xd8) {
        if (p + 2 > end) return this.short(p + 2);
        // fixext 1/2/4/8/16
        q = p + 2 + (1 << (b - 0xd4));
      } else if (b === 0xc7) {
        if (p + 3 > end) return this.short(p + 3);
        q = p + 3 + buf[p + 1]!;
      } else if (b === 0xc8) {
        if (p + 4 > end) return this.short(p + 4);
        q = p + 4 + ((buf[p + 1]! << 8) | buf[p + 2]!);
      } else if (b === 0xc9) {
        if (p + 6 > end) return this.short(p + 6);
        q = p + 6 + readUint32(buf, p + 1);
      } else {
        n = this.recordEntries(b);
      }
      if (n >= 0) {
        pending += n;
        p += hdr;
        continue;
      }
      if (q >= 0) {
        if (q > this.limit) return RejectReason.OVERSIZED_FRAME;
        if (q > end) return WALK_NEED_MORE;
        p = q;
        continue;
      }
      // A scalar (everything else was taken above).
      const r = this.value(buf, p);
      if (r !== WALK_OK) return r;
      p = this.pos;
    }
    this.pos = p;
    return WALK_OK;
  }

  /**
   * Walks one value at `p` (nil, bool, number, str or bin: the rest go to `nestedValue`); on WALK_OK `pos` is past it.
   */
  private value(buf: Uint8Array, p: number): number {
    const end = this.end;
    if (p >= end) return this.short(p + 1);
    const b = buf[p]!;
    let q: number;
    if (b < 0x80) {
      // 0x40..0x7f start a record where this frame knows that record (msgpackr reads them so); elsewhere a fixint.
      if (b >= 0x40 && this.recordEntries(b) >= 0) return this.nestedValue(buf, p);
      q = p + 1;
    } else if (b < 0xa0) {
      return this.nestedValue(buf, p); // fixmap, fixarray
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
          return this.nestedValue(buf, p);
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
