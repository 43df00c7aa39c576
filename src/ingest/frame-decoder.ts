/**
 * Frame decoding for the ingest edge (ingest thread): one shared msgpackr Unpackr behind a structural walker, and a
 * per-connection FrameStream that handles frames split across reads, the frame-size limit and resynchronisation.
 *
 * Resynchronisation (a byte stream has no frame markers): after a structural reject at a frame boundary (corrupt,
 * oversized, not a map, unknown key, unsupported value), the stream scans forward from the rejected frame's first
 * byte + 1 for a plausible frame start (see `FrameWalker.plausibleStart`) and tries it. Candidates that fail the
 * walk are skipped silently (their bytes are counted as skipped, not as further rejects), so one damaged region costs
 * one reject, or a few where damaged bytes happen to walk as a map with unknown keys (taken as a frame and
 * rejected). A frame that is well delimited but carries a bad value (out-of-range lat, bad id, ...), an unknown or
 * repeated key, or a map, array or extension as a value, is rejected and the stream continues right after it. A
 * frame truncated inside the stream swallows the bytes that follow it; the walk usually fails on them, or walks to
 * an end with a valid ping inside (then taken as damage too), and the scan then finds the next frame inside the
 * swallowed bytes. The scan is best-effort: bytes that happen to form a plausible, well-formed telemetry frame are
 * decoded as one (and validated like any other).
 */
import { isUtf8 } from 'node:buffer';
import { Unpackr } from 'msgpackr/unpack';
import { RejectReason } from '../shm/layout.js';
import { FrameReader, READ_FALLBACK } from './frame-reader.js';
import { FrameWalker, WALK_NEED_MORE, WALK_OK, readUint32 } from './frame-walker.js';
import { PING_VALID, PingFields, validatePingInto, type PingLimits } from './ping-fields.js';
import { KeyBit, telemetrySharedStructures } from './wire-format.js';

export { PING_VALID } from './ping-fields.js';

/**
 * False when the MessagePack value at `buf[p]` (walked: complete) is a string whose bytes are not valid UTF-8; true
 * for a valid string and for any other type. Allocates one view.
 */
export function stringAtIsUtf8(buf: Uint8Array, p: number): boolean {
  const b = buf[p]!;
  let len: number;
  if (b >= 0xa0 && b < 0xc0) {
    len = b & 0x1f;
    p += 1;
  } else if (b === 0xd9) {
    len = buf[p + 1]!;
    p += 2;
  } else if (b === 0xda) {
    len = (buf[p + 1]! << 8) | buf[p + 2]!;
    p += 3;
  } else if (b === 0xdb) {
    len = readUint32(buf, p + 1);
    p += 5;
  } else {
    return true;
  }
  return isUtf8(buf.subarray(p, p + len));
}

/** Options of the frame decoder. */
export interface FrameDecoderOptions {
  /** Largest frame accepted, bytes. */
  maxFrameBytes: number;
  /** Recognise msgpackr shared-structure record references (see wire-format.ts; exclusive mode). */
  sharedStructures: boolean;
  /** Validation limits. */
  limits: PingLimits;
  /**
   * Read the walked frame's values from its bytes (FrameReader) instead of decoding an object with msgpackr, which
   * then takes only what the reader leaves to it. Default true.
   */
  reader?: boolean;
}

/** validPingWithin: no valid ping inside the frame. */
const PROBE_NONE = 0;
/** validPingWithin: a valid ping starts inside the frame. */
const PROBE_FOUND = 1;
/** validPingWithin: a candidate inside the frame needs bytes not there yet. */
const PROBE_MORE = 2;

/**
 * True for the reject reasons that make a frame's extent untrustworthy (the stream resynchronises after them), unless
 * the decoder found the frame `delimited`.
 */
function isStructuralReject(reason: number): boolean {
  return (
    reason === RejectReason.CORRUPT_FRAME ||
    reason === RejectReason.OVERSIZED_FRAME ||
    reason === RejectReason.NOT_A_MAP ||
    reason === RejectReason.UNKNOWN_KEY ||
    reason === RejectReason.UNSUPPORTED_VALUE
  );
}

/**
 * Decodes single frames. One per ingest thread (it owns the one Unpackr); shared by every FrameStream.
 * `decode` allocates nothing beyond what msgpackr allocates for the decoded value.
 */
export class FrameDecoder {
  /** The validated fields of the last frame decoded with PING_VALID (reused). */
  readonly fields = new PingFields();
  /** After PING_VALID or a non-structural reject: one past the frame's last byte. */
  frameEnd = 0;
  /**
   * After a reject whose reason is one of the structural ones: true when the frame was walked to its end all the same
   * (see FrameWalker.delimited; `frameEnd` set), so the stream goes on after it.
   */
  delimited = false;
  /** Options in force. */
  readonly options: Readonly<FrameDecoderOptions>;
  private readonly walker: FrameWalker;
  private readonly reader = new FrameReader();
  private readonly useReader: boolean;
  private readonly unpackr: Unpackr;
  /** Frames read by the frame reader, and frames it left to msgpackr. */
  readFrames = 0;
  unpackedFrames = 0;
  /** Reused `{ start, end }` argument of `unpack` (msgpackr reads it; an object literal per call would allocate). */
  private readonly range = { start: 0, end: 0 };

  constructor(options: FrameDecoderOptions) {
    this.options = options;
    this.walker = new FrameWalker(options.sharedStructures);
    this.useReader = options.reader !== false;
    // uint64 / int64 values come back as numbers, not msgpackr's default BigInt: encoders other than msgpackr
    // (Python's, Go's, C's, @msgpack/msgpack) write an epoch-ms `ts` or an IMEI-like id wider than 32 bits that way,
    // and a BigInt would both fail validation and allocate. The conversion rounds once (hi * 2^32 + lo), so every
    // value up to 2^53 - 1 is exact and every larger one becomes >= 2^53, which id validation rejects.
    this.unpackr = options.sharedStructures
      ? new Unpackr({ structures: telemetrySharedStructures(), mapsAsObjects: true, int64AsType: 'number' })
      : new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: 'number' });
  }

  /**
   * Decodes and validates the frame at `buf[start]` with bytes available up to `end`. Returns PING_VALID (`fields`
   * and `frameEnd` set), WALK_NEED_MORE, or a RejectReason (`frameEnd` set unless the reason is structural and the
   * frame not `delimited`). `probe`: look inside a frame walked to its end with a fault for a valid ping (see
   * validPingWithin); `final`: no bytes will follow `end`.
   */
  decode(buf: Uint8Array, start: number, end: number, probe = true, final = false): number {
    const w = this.walker.walk(buf, start, end, this.options.maxFrameBytes);
    this.delimited = this.walker.delimited;
    if (w !== WALK_OK) {
      if (!this.delimited) return w;
      const frameEnd = this.walker.frameEnd;
      if (probe) {
        // A valid ping inside it: more likely a frame cut short that ran on into the next one than a sender's extra
        // key; a structural reject then, and the stream resynchronises and finds that ping. A candidate that needs
        // more bytes leaves the answer to when they have come (the same answer, however the bytes are split), or
        // (`final`: the stream has ended) takes it as no ping.
        const inside = this.validPingWithin(buf, start + 1, frameEnd, end);
        if (inside === PROBE_MORE && !final) return WALK_NEED_MORE;
        this.delimited = inside !== PROBE_FOUND;
      }
      this.frameEnd = frameEnd;
      return w;
    }
    const frameEnd = this.walker.frameEnd;
    if (this.useReader) {
      const r = this.reader.read(buf, this.walker, this.options.limits, this.fields);
      if (r !== READ_FALLBACK) {
        this.readFrames++;
        this.frameEnd = frameEnd;
        return r;
      }
    }
    this.unpackedFrames++;
    this.range.start = start;
    this.range.end = frameEnd;
    let value: unknown;
    try {
      value = this.unpackr.unpack(buf, this.range);
    } catch {
      return RejectReason.CORRUPT_FRAME;
    }
    if (value === null || typeof value !== 'object') return RejectReason.CORRUPT_FRAME;
    this.frameEnd = frameEnd;
    if (!this.idBytesAreUtf8(buf)) return RejectReason.INVALID_ID;
    return validatePingInto(value, this.walker.keyMask, this.options.limits, this.fields);
  }

  /**
   * Whether a complete, valid ping starts at any of `buf[from, to)` (bytes available up to `end`): PROBE_FOUND,
   * PROBE_NONE, or PROBE_MORE when a candidate needs bytes not there yet. Cold path (only after a frame walked to its
   * end with an unknown key or a nested value). `fields` is left overwritten; the counts of frames read stay as
   * they were.
   */
  private validPingWithin(buf: Uint8Array, from: number, to: number, end: number): number {
    const readFrames = this.readFrames;
    const unpackedFrames = this.unpackedFrames;
    // Each candidate's walk ends at its first unknown key or nested value: only a clean frame counts, and the look
    // costs no more per candidate than the walk of a telemetry map.
    this.walker.stopAtFault = true;
    let found = PROBE_NONE;
    for (let i = from; i < to && found === PROBE_NONE; i++) {
      const start = this.walker.plausibleStart(buf, i, end);
      if (start === -1) found = PROBE_MORE;
      else if (start === 1) {
        const r = this.decode(buf, i, end, false);
        if (r === PING_VALID) found = PROBE_FOUND;
        else if (r === WALK_NEED_MORE) found = PROBE_MORE;
      }
    }
    this.walker.stopAtFault = false;
    this.readFrames = readFrames;
    this.unpackedFrames = unpackedFrames;
    return found;
  }

  /**
   * False when the walked frame's `id` is a string whose bytes are not valid UTF-8. msgpackr decodes every bad
   * sequence to U+FFFD, so `"\xff" + "A"`, `"\xfe" + "A"` and a real `"\ufffdA"` would otherwise be one device, each
   * sender's pings moving the others' fence state. Only frames left to msgpackr get here: the frame reader takes
   * ASCII ids itself (always valid) and leaves every other string id to this path.
   */
  private idBytesAreUtf8(buf: Uint8Array): boolean {
    return (this.walker.keyMask & KeyBit.ID) === 0 || stringAtIsUtf8(buf, this.walker.valueAt[0]!);
  }

  /** Whether a frame plausibly starts at `buf[i]`: 1 yes, 0 no, -1 cannot tell with bytes up to `end`. */
  plausibleStart(buf: Uint8Array, i: number, end: number): number {
    return this.walker.plausibleStart(buf, i, end);
  }
}

/** Receives what a FrameStream finds. */
export interface FrameSink {
  /** A valid ping; `fields` is the decoder's reused object. */
  onPing(fields: PingFields): void;
  /** A rejected frame; `buf[start, end)` holds its first bytes (at most the frame), for a log line. */
  onReject(reason: RejectReason, buf: Uint8Array, start: number, end: number): void;
  /** Bytes skipped while resynchronising. */
  onSkipped(bytes: number): void;
  /** A resynchronisation started. */
  onResync(): void;
}

/** Smallest buffer a partial frame is kept in (it grows by doubling, to at most `maxFrameBytes`). */
const MIN_HELD_BYTES = 256;
/** A held-frame buffer larger than this is given back once its frame completes. */
const KEEP_HELD_BYTES = 64 * 1024;
const NO_BYTES = new Uint8Array(0);

/**
 * Framing state of one byte stream (a TCP connection, a file, stdin). Frames are decoded in place in each chunk;
 * only an incomplete frame at a chunk's end is copied, into a buffer that grows on demand to at most
 * `maxFrameBytes` (the frame walker refuses a frame as oversized before it needs more) and is given back once large
 * and no longer needed. A stream without a partial frame holds no buffer: memory per stream is bounded by the frame
 * it is waiting to complete, and `heldBytes` says how much that is.
 *
 * Single-threaded; allocates only when a partial frame outgrows its buffer, plus a subarray view per chunk piece
 * appended to a partial frame.
 */
export class FrameStream {
  private readonly decoder: FrameDecoder;
  private readonly sink: FrameSink;
  private readonly maxFrameBytes: number;
  private acc: Uint8Array = NO_BYTES;
  private accLen = 0;
  private resyncing = false;
  /** True while `end` decodes the held bytes a last time: no more bytes will come. */
  private final = false;

  constructor(decoder: FrameDecoder, sink: FrameSink) {
    this.decoder = decoder;
    this.sink = sink;
    this.maxFrameBytes = decoder.options.maxFrameBytes;
  }

  /** Bytes held back waiting for the rest of a frame. */
  get bufferedBytes(): number {
    return this.accLen;
  }

  /**
   * Bytes of memory the stream holds for its partial frame (its buffer's size; 0 while it holds none: a buffer kept
   * for reuse between frames is at most KEEP_HELD_BYTES and belongs to no slow sender).
   */
  get heldBytes(): number {
    return this.accLen > 0 ? this.acc.length : 0;
  }

  /** Whether the stream is scanning for a frame start after a structural reject. */
  get isResynchronising(): boolean {
    return this.resyncing;
  }

  /** Feeds the next bytes of the stream. */
  push(chunk: Uint8Array): void {
    const len = chunk.length;
    let off = 0;
    // Complete the frame an earlier chunk began: append to it until its frame completes or the chunk runs out.
    while (this.accLen > 0 && off < len) {
      const held = this.accLen;
      const n = Math.min(len - off, this.roomFor(len - off));
      if (n === 0) {
        // Cannot happen (the walker refuses a frame as oversized before it needs more than maxFrameBytes); if it
        // did, the held bytes are refused rather than looping.
        this.sink.onReject(RejectReason.OVERSIZED_FRAME, this.acc, 0, Math.min(held, 32));
        this.accLen = 0;
        break;
      }
      this.acc.set(off === 0 && n === len ? chunk : chunk.subarray(off, off + n), held);
      this.accLen = held + n;
      const consumed = this.scan(this.acc, 0, this.accLen);
      if (consumed >= held) {
        // The held bytes are consumed: go on in the chunk itself, after what this scan took of it.
        off += consumed - held;
        this.accLen = 0;
        if (this.acc.length > KEEP_HELD_BYTES) this.acc = NO_BYTES;
        break;
      }
      // Still incomplete (or only skipped bytes): keep the rest at the front.
      if (consumed > 0) {
        this.acc.copyWithin(0, consumed, this.accLen);
        this.accLen -= consumed;
      }
      off += n;
    }
    if (off < len) {
      const consumed = this.scan(chunk, off, len);
      if (consumed < len) this.hold(chunk, consumed, len);
    }
  }

  /**
   * Ends the stream: a partial frame left over is TRUNCATED_FRAME, or CUT_AT_STOP with `cutByStop` (the router's stop
   * ended it, not its sender), or skipped bytes while resynchronising.
   */
  end(cutByStop = false): void {
    if (this.accLen > 0 && !this.resyncing) {
      // A frame walked to its end whose look inside waited for bytes past it is decided now: none will come.
      this.final = true;
      const used = this.scan(this.acc, 0, this.accLen);
      this.final = false;
      this.acc.copyWithin(0, used, this.accLen);
      this.accLen -= used;
    }
    if (this.accLen > 0) {
      if (this.resyncing) this.sink.onSkipped(this.accLen);
      else
        this.sink.onReject(
          cutByStop ? RejectReason.CUT_AT_STOP : RejectReason.TRUNCATED_FRAME,
          this.acc,
          0,
          this.accLen,
        );
    }
    this.accLen = 0;
    this.acc = NO_BYTES;
    this.resyncing = false;
  }

  /** Copies the incomplete frame `chunk[from, to)` into the (empty) held buffer. */
  private hold(chunk: Uint8Array, from: number, to: number): void {
    const n = to - from;
    if (this.acc.length < n) this.acc = new Uint8Array(Math.min(this.maxFrameBytes, Math.max(MIN_HELD_BYTES, n * 2)));
    this.acc.set(chunk.subarray(from, to), 0);
    this.accLen = n;
  }

  /** Free bytes after the held frame, growing the buffer (to at most maxFrameBytes) when fewer than `wanted`. */
  private roomFor(wanted: number): number {
    const free = this.acc.length - this.accLen;
    if (free >= wanted || this.acc.length >= this.maxFrameBytes) return free;
    const grown = new Uint8Array(Math.min(this.maxFrameBytes, Math.max(this.acc.length * 2, this.accLen + wanted)));
    grown.set(this.acc.subarray(0, this.accLen), 0);
    this.acc = grown;
    return grown.length - this.accLen;
  }

  /** Decodes every complete frame in `buf[start, end)`; returns the index of the first byte not consumed. */
  private scan(buf: Uint8Array, start: number, end: number): number {
    const decoder = this.decoder;
    const sink = this.sink;
    let pos = start;
    while (pos < end) {
      if (this.resyncing) {
        let i = pos;
        let found = false;
        // Look for the next plausible frame start; stop early when the bytes run out mid-probe.
        for (; i < end; i++) {
          const p = decoder.plausibleStart(buf, i, end);
          if (p === 1) {
            found = true;
            break;
          }
          if (p === -1) break;
        }
        if (i > pos) {
          sink.onSkipped(i - pos);
          pos = i;
        }
        if (!found) return pos;
      }
      // While resynchronising, a candidate walked to its end is taken as the next frame without looking inside it
      // (a look per candidate would cost the scan a walk per byte of each).
      const r = decoder.decode(buf, pos, end, !this.resyncing, this.final);
      if (r === WALK_NEED_MORE) return pos;
      if (r === PING_VALID) {
        this.resyncing = false;
        pos = decoder.frameEnd;
        sink.onPing(decoder.fields);
        continue;
      }
      if (isStructuralReject(r) && !decoder.delimited) {
        // A failed candidate while resynchronising is skipped silently: one damaged region, one reject.
        if (!this.resyncing) {
          sink.onReject(r as RejectReason, buf, pos, Math.min(end, pos + 32));
          sink.onResync();
          this.resyncing = true;
        }
        sink.onSkipped(1);
        pos += 1;
        continue;
      }
      this.resyncing = false;
      sink.onReject(r as RejectReason, buf, pos, decoder.frameEnd);
      pos = decoder.frameEnd;
    }
    return pos;
  }
}
