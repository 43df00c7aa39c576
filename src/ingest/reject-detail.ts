/**
 * Why a well-delimited frame was rejected, in words: "id 9007199254740993 is above 2^53-1", "lat 91 is outside
 * [-90, 90]" (ingest thread, cold path: only when the reject log writes a line).
 *
 * The frame is decoded again here with its own Unpackr that keeps 64-bit integers as BigInt, so the value quoted is
 * exactly what the sender wrote even where the hot-path decoder rounded it to a double (a uint64 id above 2^53 - 1).
 * Allocates freely; never called per ping.
 */
import { Unpackr } from 'msgpackr/unpack';
import { RejectReason } from '../shm/layout.js';
import { stringAtIsUtf8 } from './frame-decoder.js';
import { FrameWalker, WALK_OK } from './frame-walker.js';
import {
  KeyBit,
  LANE_WIRE_NAMES,
  TELEMETRY_KEYS,
  telemetrySharedStructures,
  type TelemetryKey,
} from './wire-format.js';

/** Longest string value quoted in a detail, in UTF-16 code units (the rest is elided). */
const MAX_QUOTED_CHARS = 40;

/** Largest numeric id accepted, as a BigInt (2^53 - 1). */
const MAX_ID_BIG = BigInt(Number.MAX_SAFE_INTEGER);

/** The telemetry key each value reject is about. */
const KEY_OF_REASON: ReadonlyMap<number, TelemetryKey> = new Map<number, TelemetryKey>([
  [RejectReason.MISSING_ID, 'id'],
  [RejectReason.INVALID_ID, 'id'],
  [RejectReason.ID_TOO_LONG, 'id'],
  [RejectReason.INVALID_LAT, 'lat'],
  [RejectReason.INVALID_LON, 'lon'],
  [RejectReason.INVALID_TS, 'ts'],
  [RejectReason.INVALID_SPEED, 'speed'],
  [RejectReason.INVALID_HEADING, 'heading'],
  [RejectReason.INVALID_ACCURACY, 'accuracy'],
  [RejectReason.INVALID_LANE, 'lane'],
]);

let plainUnpackr: Unpackr | null = null;
let sharedUnpackr: Unpackr | null = null;

/**
 * The reason a value reject of the frame `buf[start, end)` names, as "<key> <value as sent> <why>"; for a frame with
 * unknown keys or a nested value (walked to its end), which keys or values; null when the reason is not about the
 * frame's keys or values (structural rejects, a full registry) or the bytes are not that whole frame.
 */
export function describeValueReject(reason: number, buf: Uint8Array, start: number, end: number): string | null {
  const key = KEY_OF_REASON.get(reason);
  const shape = reason === RejectReason.UNKNOWN_KEY || reason === RejectReason.UNSUPPORTED_VALUE;
  if ((key === undefined && !shape) || end <= start) return null;
  let decoded: unknown;
  try {
    decoded = unpackrFor(buf[start]!).unpack(buf, { start, end });
  } catch {
    return null;
  }
  if (decoded === null || typeof decoded !== 'object') return null;
  if (key === undefined) return describeShape(decoded as Record<string, unknown>);
  const value = (decoded as Record<string, unknown>)[key];
  if (key === 'id' && typeof value === 'string' && value.includes('\ufffd') && !idBytesAreUtf8(buf, start, end))
    return `id ${shown(value)} is not valid UTF-8 (shown with U+FFFD for each bad sequence): two such ids could not be told apart`;
  return describeValue(key, value);
}

/** Whether the id string of the frame `buf[start, end)` is valid UTF-8 as sent (true when it cannot tell). */
function idBytesAreUtf8(buf: Uint8Array, start: number, end: number): boolean {
  const walker = new FrameWalker(buf[start]! >= 0x40 && buf[start]! <= 0x7f);
  if (walker.walk(buf, start, end, end - start) !== WALK_OK || (walker.keyMask & KeyBit.ID) === 0) return true;
  return stringAtIsUtf8(buf, walker.valueAt[0]!);
}

/**
 * Why `value` is not an acceptable `key` (the detail of describeValueReject, for a value already decoded; 64-bit
 * integers as BigInt keep their exact value in the text).
 */
function describeValue(key: TelemetryKey, value: unknown): string {
  if (value === undefined) return `${key} is missing`;
  if (key === 'id') return describeId(value);
  if (key === 'lane')
    return `lane ${shown(value)} is not one of ${LANE_WIRE_NAMES.map((n) => JSON.stringify(n)).join(', ')}, 0, 1, 2`;
  if (typeof value !== 'number' && typeof value !== 'bigint') return `${key} is ${kindOf(value)}, not a number`;
  const n = Number(value);
  if (Number.isNaN(n)) return `${key} is NaN`;
  switch (key) {
    case 'lat':
      return `lat ${shown(value)} is outside [-90, 90]`;
    case 'lon':
      return `lon ${shown(value)} is outside [-180, 180]`;
    case 'ts':
      return `ts ${shown(value)} is outside the accepted epoch-ms range`;
    case 'heading':
      return `heading ${shown(value)} is outside [0, 360]`;
    default:
      // speed, accuracy: finite and >= 0.
      return n < 0 ? `${key} ${shown(value)} is negative` : `${key} ${shown(value)} is not finite`;
  }
}

/** Why an id value is not a non-empty string of a slot's bytes nor an unsigned integer up to 2^53 - 1. */
function describeId(value: unknown): string {
  if (typeof value === 'string') {
    if (value.length === 0) return 'id is an empty string';
    return `id ${shown(value)} is ${Buffer.byteLength(value, 'utf8')} UTF-8 bytes, more than a device id table slot holds (idBytesPerSlot)`;
  }
  if (typeof value === 'bigint') {
    if (value < 0n) return `id ${value.toString()} is negative`;
    if (value > MAX_ID_BIG) return `id ${value.toString()} is above 2^53-1`;
    return `id ${value.toString()} is not accepted`;
  }
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) return `id ${shown(value)} is not an integer`;
    if (value < 0) return `id ${shown(value)} is negative`;
    if (value > Number.MAX_SAFE_INTEGER) return `id ${shown(value)} is above 2^53-1`;
    return `id ${shown(value)} is not accepted`;
  }
  return `id is ${kindOf(value)}, not a string or an unsigned integer`;
}

/** A value as it appears in a detail: integers in full, strings quoted and cut to MAX_QUOTED_CHARS. */
function shown(value: unknown): string {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') {
    if (Object.is(value, -0)) return '-0';
    // String() gives the shortest text that reads back as the same double ("1152921504606847000" for 2^60); an
    // integral double past 2^53 is printed as the integer it holds, as a uint64 sender of that value would write it.
    if (Number.isInteger(value) && Math.abs(value) > Number.MAX_SAFE_INTEGER) return BigInt(value).toString();
    return String(value);
  }
  if (typeof value === 'string') {
    return JSON.stringify(value.length > MAX_QUOTED_CHARS ? `${value.slice(0, MAX_QUOTED_CHARS)}...` : value);
  }
  return kindOf(value);
}

/** MessagePack kind of a decoded scalar, in words. */
function kindOf(value: unknown): string {
  if (value === null) return 'nil';
  if (typeof value === 'boolean') return `a boolean (${String(value)})`;
  if (typeof value === 'string') return 'a string';
  if (value instanceof Uint8Array) return 'binary';
  if (typeof value === 'number' || typeof value === 'bigint') return 'a number';
  return 'not a scalar';
}

/**
 * What makes a decoded frame other than a flat map of telemetry keys: the keys the wire format does not have, or
 * else the first telemetry key whose value is not a scalar (null when neither shows, e.g. a repeated key).
 */
function describeShape(frame: Record<string, unknown>): string | null {
  const known = new Set<string>(TELEMETRY_KEYS);
  const unknown = Object.keys(frame).filter((k) => !known.has(k));
  if (unknown.length > 0) {
    const listed = unknown.slice(0, 4).map((k) => shown(k));
    return `key${unknown.length === 1 ? '' : 's'} ${listed.join(', ')}${unknown.length > 4 ? ', ...' : ''} not in the wire format (${TELEMETRY_KEYS.join(', ')})`;
  }
  for (const k of TELEMETRY_KEYS) {
    const v = frame[k];
    if (v instanceof Date) return `${k} is a timestamp extension, not a number (epoch ms)`;
    if (Array.isArray(v)) return `${k} is an array, not a scalar`;
    if (v !== null && typeof v === 'object' && !(v instanceof Uint8Array))
      return `${k} is a map or an extension, not a scalar`;
  }
  return null;
}

/**
 * The Unpackr for a frame starting with `firstByte`: 0x40..0x7f can only start a frame that got as far as value
 * validation when it is a shared-structure record, so those use the shared table; everything else is a map or an
 * inline record.
 */
function unpackrFor(firstByte: number): Unpackr {
  if (firstByte >= 0x40 && firstByte <= 0x7f) {
    sharedUnpackr ??= new Unpackr({
      structures: telemetrySharedStructures(),
      mapsAsObjects: true,
      int64AsType: 'bigint',
    });
    return sharedUnpackr;
  }
  plainUnpackr ??= new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint' });
  return plainUnpackr;
}
