/**
 * Trigger records on disk (TREC_* in file-layout.ts): encoding a dispatch record (DREC_* in src/shm/layout.ts) with
 * the ids a receiver knows, and decoding one back into a dispatch record of this run.
 *
 * A record names its device by id (string or unsigned integer, as the device sent it) and its fence by id and tags,
 * so it means the same after a restart, a reordered fences file or a removed fence. It also carries the device slot
 * and fence handle of the run that wrote it: a record read back by the same run uses them and allocates nothing; a
 * record of an earlier run is resolved through `TriggerResolver` (a Map lookup and a catalog entry: allocates).
 *
 * Dispatcher thread (encode, decode) and main thread at start (`readTriggerIdentity`).
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_FENCE_HANDLE_I32,
  DREC_REASON_I32,
  DREC_TRIGGER_F64_COUNT,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_INSIDE_MS_F64,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
} from '../shm/layout.js';
import {
  align8,
  checksumWords,
  TREC_ADMIT_WALL_MS_F64,
  TREC_ATTEMPTS_W,
  TREC_CHECKSUM_FROM_W,
  TREC_CHECKSUM_W,
  TREC_DEVICE_ID_BYTES_U16,
  TREC_DEVICE_SLOT_W,
  TREC_EVENT_TIME_MS_F64,
  TREC_FENCE_HANDLE_W,
  TREC_FENCE_ID_BYTES_U16,
  TREC_HEAD_BYTES,
  TREC_ID_KIND_U8,
  TREC_ID_NUMBER,
  TREC_ID_STRING,
  TREC_INSIDE_MS_F64,
  TREC_LANE_U8,
  TREC_LAT_F64,
  TREC_LON_F64,
  TREC_MAX_BYTES,
  TREC_NO_REASON,
  TREC_NUMERIC_ID_F64,
  TREC_REASON_U8,
  TREC_RUN_ID_W,
  TREC_SEQ_F64,
  TREC_STATUS_W,
  TREC_TAGS_BYTES_W,
  TREC_TOTAL_BYTES_W,
  TREC_TYPE_U8,
} from './file-layout.js';

/** An aligned byte buffer with the views a record is read and written through. */
export class RecordBuffer {
  /** Bytes. */
  readonly bytes: Uint8Array;
  /** Int32 view (word w at byte 4w). */
  readonly i32: Int32Array;
  /** Uint16 view. */
  readonly u16: Uint16Array;
  /** Float64 view (cell c at byte 8c). */
  readonly f64: Float64Array;

  /** A zeroed buffer of `byteLength` bytes (a multiple of 8). */
  constructor(byteLength: number) {
    const buffer = new ArrayBuffer(align8(byteLength));
    this.bytes = new Uint8Array(buffer);
    this.i32 = new Int32Array(buffer);
    this.u16 = new Uint16Array(buffer);
    this.f64 = new Float64Array(buffer);
  }

  /** Byte capacity. */
  get byteLength(): number {
    return this.bytes.length;
  }
}

/** Where an encoder finds the ids of a dispatch record's device slot and fence handle (this run's). */
export interface TriggerIdentitySource {
  /** True when the device's id is an unsigned integer. */
  isNumeric(slot: number): boolean;
  /** Writes the numeric id into `dst[index]` (a double handed back from a call could be boxed). */
  copyNumericId(slot: number, dst: Float64Array, index: number): void;
  /** Copies the UTF-8 bytes of a string id to `dst` at `at`; returns the count. */
  copyIdBytes(slot: number, dst: Uint8Array, at: number): number;
  /** UTF-8 bytes of the fence's id. */
  fenceIdBytes(handle: number): Uint8Array;
  /** UTF-8 bytes of the fence's tags as a JSON array. */
  fenceTagsBytes(handle: number): Uint8Array;
}

/** Turns the ids of a record written by an earlier run into this run's device slot and fence handle. */
export interface TriggerResolver {
  /** Slot of the device (-1 when it has none: the record cannot be delivered by this run). */
  deviceSlot(id: string | number): number;
  /** Handle of the fence with this id and these tags (created when new). */
  fenceHandle(id: string, tags: readonly string[]): number;
}

/** The ids of a record, decoded (allocates; used at start and for records of earlier runs). */
export interface TriggerIdentity {
  /** Device id as sent: a string or an unsigned integer. */
  deviceId: string | number;
  /** Fence id. */
  fenceId: string;
  /** Fence tags. */
  tags: string[];
  /** The record's seq. */
  seq: number;
}

/** Bytes the record starting at `at` says it has (0 when fewer than 8 bytes are readable). */
export function recordLength(buf: RecordBuffer, at: number, end: number): number {
  if (end - at < 8) return 0;
  return buf.i32[(at >> 2) + TREC_TOTAL_BYTES_W]!;
}

/** True when the record at `at` (of `length` bytes) is whole and its checksum holds. */
export function recordIsValid(buf: RecordBuffer, at: number, length: number, end: number): boolean {
  if (length < TREC_HEAD_BYTES || length > TREC_MAX_BYTES || (length & 7) !== 0 || at + length > end) return false;
  const w = at >> 2;
  return checksumWords(buf.i32, w + TREC_CHECKSUM_FROM_W, w + (length >> 2)) === buf.i32[w + TREC_CHECKSUM_W];
}

/** Encodes and decodes trigger records (see the module comment). One per thread; allocation-free for this run's records. */
export class TriggerCodec {
  /** This run's id (written into every record). */
  readonly runId: number;
  private readonly ids: TriggerIdentitySource | null;
  /** Wall clock minus the monotonic clock, ms: turns admission times into wall times and back. */
  private readonly wallOffsetMs: number;

  /**
   * @param runId this run's id
   * @param ids where encode finds ids (null for a decode-only codec)
   * @param wallOffsetMs `Date.now() - nowNs() / 1e6` measured once at start
   */
  constructor(runId: number, ids: TriggerIdentitySource | null, wallOffsetMs: number) {
    this.runId = runId | 0;
    this.ids = ids;
    this.wallOffsetMs = wallOffsetMs;
  }

  /**
   * Writes the dispatch record at (f64, i32, baseF64, baseI32) into `dst` at byte `at` (a multiple of 8) with
   * `status`; returns the bytes written, or 0 when it does not fit before `limit`. Allocation-free.
   */
  encode(
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    dst: RecordBuffer,
    at: number,
    limit: number,
    status: number,
  ): number {
    const ids = this.ids!;
    const slot = i32[baseI32 + TRG_DEVICE_SLOT_I32]!;
    const handle = i32[baseI32 + DREC_FENCE_HANDLE_I32]!;
    const fenceId = ids.fenceIdBytes(handle);
    const tags = ids.fenceTagsBytes(handle);
    const numeric = ids.isNumeric(slot);
    // The device id is copied before its length is known; make sure the longest one fits.
    if (at + TREC_MAX_BYTES > limit) return 0;
    const bytes = dst.bytes;
    let p = at + TREC_HEAD_BYTES;
    const idBytes = numeric ? 0 : ids.copyIdBytes(slot, bytes, p);
    p += idBytes;
    for (let k = 0; k < fenceId.length; k++) bytes[p + k] = fenceId[k]!;
    p += fenceId.length;
    for (let k = 0; k < tags.length; k++) bytes[p + k] = tags[k]!;
    p += tags.length;
    const total = align8(p - at);
    // Parsing bounds ids and tags well inside the limit; a record past it would not read back.
    if (total > TREC_MAX_BYTES) throw new RangeError(`trigger record of ${total} bytes exceeds ${TREC_MAX_BYTES}`);
    // Zero the padding so the checksum is reproducible.
    for (let k = p; k < at + total; k++) bytes[k] = 0;
    const w = at >> 2;
    const d32 = dst.i32;
    const d64 = dst.f64;
    const c = at >> 3;
    d32[w + TREC_TOTAL_BYTES_W] = total;
    d32[w + TREC_STATUS_W] = status;
    bytes[at + TREC_TYPE_U8] = i32[baseI32 + TRG_TYPE_I32]!;
    bytes[at + TREC_LANE_U8] = (i32[baseI32 + TRG_FENCE_INDEX_I32]! >>> TRG_LANE_SHIFT) & 7;
    const reason = i32[baseI32 + DREC_REASON_I32]!;
    bytes[at + TREC_REASON_U8] = reason < 0 ? TREC_NO_REASON : reason;
    bytes[at + TREC_ID_KIND_U8] = numeric ? TREC_ID_NUMBER : TREC_ID_STRING;
    d32[w + TREC_ATTEMPTS_W] = i32[baseI32 + DREC_ATTEMPTS_I32]!;
    d32[w + TREC_RUN_ID_W] = this.runId;
    d32[w + TREC_DEVICE_SLOT_W] = slot;
    d32[w + TREC_FENCE_HANDLE_W] = handle;
    dst.u16[(at + TREC_DEVICE_ID_BYTES_U16) >> 1] = idBytes;
    dst.u16[(at + TREC_FENCE_ID_BYTES_U16) >> 1] = fenceId.length;
    d32[(at >> 2) + TREC_TAGS_BYTES_W] = tags.length;
    d64[c + (TREC_LAT_F64 >> 3)] = f64[baseF64 + TRG_LAT_F64]!;
    d64[c + (TREC_LON_F64 >> 3)] = f64[baseF64 + TRG_LON_F64]!;
    d64[c + (TREC_EVENT_TIME_MS_F64 >> 3)] = f64[baseF64 + TRG_EVENT_TIME_MS_F64]!;
    d64[c + (TREC_SEQ_F64 >> 3)] = f64[baseF64 + TRG_SEQ_F64]!;
    d64[c + (TREC_INSIDE_MS_F64 >> 3)] = f64[baseF64 + TRG_INSIDE_MS_F64]!;
    d64[c + (TREC_ADMIT_WALL_MS_F64 >> 3)] = f64[baseF64 + TRG_ADMIT_TIME_NS_F64]! / 1e6 + this.wallOffsetMs;
    if (numeric) ids.copyNumericId(slot, d64, c + (TREC_NUMERIC_ID_F64 >> 3));
    else d64[c + (TREC_NUMERIC_ID_F64 >> 3)] = -1;
    d32[w + TREC_CHECKSUM_W] = checksumWords(d32, w + TREC_CHECKSUM_FROM_W, w + (total >> 2));
    return total;
  }

  /**
   * Decodes the valid record at byte `at` of `src` into the dispatch record at (f64, i32, baseF64, baseI32): trigger
   * cells, fence handle, reason and attempts (the caller sets its own bookkeeping cells). Returns the device slot, or
   * -1 when the record's device cannot be resolved. Allocation-free for records of this run; `resolver` is asked
   * (and allocates) for records of earlier runs.
   */
  decode(
    src: RecordBuffer,
    at: number,
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    resolver: TriggerResolver | null,
  ): number {
    const w = at >> 2;
    const s32 = src.i32;
    const s64 = src.f64;
    const c = at >> 3;
    let slot: number;
    let handle: number;
    if (s32[w + TREC_RUN_ID_W] === this.runId) {
      slot = s32[w + TREC_DEVICE_SLOT_W]!;
      handle = s32[w + TREC_FENCE_HANDLE_W]!;
    } else {
      if (resolver === null) return -1;
      const who = readTriggerIdentity(src, at);
      slot = resolver.deviceSlot(who.deviceId);
      if (slot < 0) return -1;
      handle = resolver.fenceHandle(who.fenceId, who.tags);
    }
    for (let k = 0; k < DREC_TRIGGER_F64_COUNT; k++) f64[baseF64 + k] = 0;
    f64[baseF64 + TRG_LAT_F64] = s64[c + (TREC_LAT_F64 >> 3)]!;
    f64[baseF64 + TRG_LON_F64] = s64[c + (TREC_LON_F64 >> 3)]!;
    f64[baseF64 + TRG_EVENT_TIME_MS_F64] = s64[c + (TREC_EVENT_TIME_MS_F64 >> 3)]!;
    f64[baseF64 + TRG_SEQ_F64] = s64[c + (TREC_SEQ_F64 >> 3)]!;
    f64[baseF64 + TRG_INSIDE_MS_F64] = s64[c + (TREC_INSIDE_MS_F64 >> 3)]!;
    f64[baseF64 + TRG_ADMIT_TIME_NS_F64] = (s64[c + (TREC_ADMIT_WALL_MS_F64 >> 3)]! - this.wallOffsetMs) * 1e6;
    const bytes = src.bytes;
    i32[baseI32 + DREC_FENCE_HANDLE_I32] = handle;
    i32[baseI32 + TRG_TYPE_I32] = bytes[at + TREC_TYPE_U8]!;
    i32[baseI32 + TRG_DEVICE_SLOT_I32] = slot;
    i32[baseI32 + TRG_FENCE_INDEX_I32] = bytes[at + TREC_LANE_U8]! << TRG_LANE_SHIFT;
    const reason = bytes[at + TREC_REASON_U8]!;
    i32[baseI32 + DREC_REASON_I32] = reason === TREC_NO_REASON ? -1 : reason;
    i32[baseI32 + DREC_ATTEMPTS_I32] = s32[w + TREC_ATTEMPTS_W]!;
    return slot;
  }
}

/** The device and fence ids and the seq of the record at `at` (allocates). */
export function readTriggerIdentity(src: RecordBuffer, at: number): TriggerIdentity {
  const bytes = src.bytes;
  const idBytes = src.u16[(at + TREC_DEVICE_ID_BYTES_U16) >> 1]!;
  const fenceBytes = src.u16[(at + TREC_FENCE_ID_BYTES_U16) >> 1]!;
  const tagsBytes = src.i32[(at >> 2) + TREC_TAGS_BYTES_W]!;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  let p = at + TREC_HEAD_BYTES;
  const deviceId =
    bytes[at + TREC_ID_KIND_U8] === TREC_ID_NUMBER
      ? src.f64[(at >> 3) + (TREC_NUMERIC_ID_F64 >> 3)]!
      : buf.toString('utf8', p, p + idBytes);
  p += idBytes;
  const fenceId = buf.toString('utf8', p, p + fenceBytes);
  p += fenceBytes;
  const tags = tagsBytes === 0 ? [] : (JSON.parse(buf.toString('utf8', p, p + tagsBytes)) as string[]);
  return { deviceId, fenceId, tags, seq: src.f64[(at >> 3) + (TREC_SEQ_F64 >> 3)]! };
}

/** Byte offset of the status word of a record starting at `at` (rewritten in place in dead-letter files). */
export function statusByteOffset(at: number): number {
  return at + TREC_STATUS_W * 4;
}
