/**
 * The validated fields of one ping, in one preallocated object reused for every ping (ingest thread), and the
 * validation of a decoded telemetry value into it.
 */
import { Lane, RejectReason } from '../shm/layout.js';
import { KeyBit, LANE_WIRE_NAMES, REQUIRED_KEY_MASK, keyBitOf } from './wire-format.js';

/** Validation result: the ping is valid and its fields are filled in. */
export const PING_VALID = -1;

/** Limits applied by validation. */
export interface PingLimits {
  /** Longest string id accepted, in UTF-16 code units (the registry checks the UTF-8 byte length). */
  maxIdLength: number;
  /** Smallest accepted `ts`, epoch ms. */
  minTsMs: number;
  /** Largest accepted `ts`, epoch ms. */
  maxTsMs: number;
}

/** Cell of `PingFields.values`: latitude, WGS84 degrees. Position cells come first (see LanePredicates). */
export const PF_LAT_F64 = 0;
/** Cell of `PingFields.values`: longitude, WGS84 degrees. */
export const PF_LON_F64 = 1;
/** Cell of `PingFields.values`: device event time, epoch ms. */
export const PF_TS_MS_F64 = 2;
/** Cell of `PingFields.values`: speed over ground, m/s; NaN when absent. */
export const PF_SPEED_MPS_F64 = 3;
/** Cell of `PingFields.values`: heading, degrees clockwise from north; NaN when absent. */
export const PF_HEADING_DEG_F64 = 4;
/** Cell of `PingFields.values`: horizontal accuracy, metres; NaN when absent. */
export const PF_ACCURACY_M_F64 = 5;
/** Cell of `PingFields.values`: admission time, ns on the cross-thread clock (set by the admission step). */
export const PF_ADMIT_TIME_NS_F64 = 6;
/** Cell of `PingFields.values`: the numeric device id, an integer in [0, 2^53 - 1] (when `idIsNumber`). */
export const PF_NUMERIC_ID_F64 = 7;
/** Cells in `PingFields.values`. */
const PF_VALUE_COUNT = 8;

/**
 * One ping's fields. The ingest edge owns one instance and overwrites it for every ping: consumers must copy what
 * they keep before returning.
 *
 * Every double of the ping lives in a cell of `values` (PF_* indices), never in an object field or a call argument:
 * optimised code reads and writes those cells unboxed whatever V8 decides to inline, whereas a double passed to (or
 * returned from) a call that is not inlined is boxed into a new heap number, an allocation per ping. The accessors
 * (`lat`, `lon`, ...) are for tests and cold code; per-ping code indexes `values` itself.
 */
export class PingFields {
  /** The ping's doubles, by PF_* cell. */
  readonly values = new Float64Array(PF_VALUE_COUNT).fill(Number.NaN);
  /** True when the id is an unsigned integer (at most 2^53 - 1, in `values[PF_NUMERIC_ID_F64]`), false for a string. */
  idIsNumber = false;
  /**
   * The string id exactly as decoded (meaningful when `idIsNumber` is false). A numeric id lives in its cell instead:
   * a decoder that only ever sees ids past the small-integer range stores them in a double field of the decoded
   * object, and reading one into a tagged field or a Map key would box it into a new heap number per ping.
   */
  idKey = '';
  /**
   * True when the string id was left where it is in the frame (the frame reader: ASCII, `idLen` bytes at
   * `idBuf[idAt]`, valid until the next frame is decoded) instead of made into `idKey`: the registry finds a known
   * device from those bytes, and `idString()` makes the string when one is needed.
   */
  idInBytes = false;
  idBuf: Uint8Array | null = null;
  idAt = 0;
  idLen = 0;
  /** Lane the device asked for (a Lane value), or -1 when absent. */
  explicitLane = -1;
  /** Dense device slot (set by the registry step). */
  slot = -1;
  /** Shard of the device (set by the registry step). */
  shard = -1;
  /** Lane decided by classification (set by the classification step). */
  lane: Lane = Lane.TRANSITION;

  /** The device id: the string, or the number (boxes it: tests and cold code). */
  id(): string | number {
    return this.idIsNumber ? this.values[PF_NUMERIC_ID_F64]! : this.idString();
  }

  /** The string id (made from the frame's bytes when it was left there). */
  idString(): string {
    if (!this.idInBytes) return this.idKey;
    const b = this.idBuf!;
    return Buffer.from(b.buffer, b.byteOffset + this.idAt, this.idLen).toString('latin1');
  }

  /** Latitude, WGS84 degrees. */
  get lat(): number {
    return this.values[PF_LAT_F64]!;
  }

  /** Longitude, WGS84 degrees. */
  get lon(): number {
    return this.values[PF_LON_F64]!;
  }

  /** Device event time, epoch ms. */
  get tsMs(): number {
    return this.values[PF_TS_MS_F64]!;
  }

  /** Speed over ground, m/s; NaN when absent. */
  get speedMps(): number {
    return this.values[PF_SPEED_MPS_F64]!;
  }

  /** Heading, degrees clockwise from north; NaN when absent. */
  get headingDeg(): number {
    return this.values[PF_HEADING_DEG_F64]!;
  }

  /** Horizontal accuracy, metres; NaN when absent. */
  get accuracyM(): number {
    return this.values[PF_ACCURACY_M_F64]!;
  }
}

/** A ping as an embedding application pushes it (same keys and meaning as on the wire). */
export interface TelemetryPoint {
  /** Device id: non-empty string or unsigned integer, at most 2^53 - 1 (Number.MAX_SAFE_INTEGER). */
  id: string | number;
  /** Latitude, WGS84 degrees. */
  lat: number;
  /** Longitude, WGS84 degrees. */
  lon: number;
  /** Event time, epoch ms. */
  ts: number;
  /** Speed over ground, m/s. */
  speed?: number | null;
  /** Heading, degrees clockwise from north. */
  heading?: number | null;
  /** Horizontal accuracy, metres. */
  accuracy?: number | null;
  /** Lane: "idle" | "transition" | "compliance" or 0-2. */
  lane?: string | number | null;
}

/** Decoded telemetry as msgpackr returns it (any of the keys may hold anything). */
interface LooseTelemetry {
  id?: unknown;
  lat?: unknown;
  lon?: unknown;
  ts?: unknown;
  speed?: unknown;
  heading?: unknown;
  accuracy?: unknown;
  lane?: unknown;
}

/**
 * Key mask of a plain object's own enumerable keys, or -1 when it has a key that is not a telemetry key.
 * For `push()`; frames get their mask from the walker.
 */
export function keyMaskOfObject(value: object): number {
  let mask = 0;
  for (const k in value) {
    if (!Object.prototype.hasOwnProperty.call(value, k)) continue;
    const bit = keyBitOf(k);
    if (bit === 0) return -1;
    mask |= bit;
  }
  return mask;
}

/** String.prototype.isWellFormed (ES2024, in Node 20; this project's type library is ES2023). */
interface WellFormedCheck {
  isWellFormed(): boolean;
}

/**
 * False for a string holding a lone surrogate: its UTF-8 bytes would be EF BF BD (U+FFFD) like any other lone
 * surrogate's, so `"\ud800A"` and `"\udc00A"` pushed in-process would be one device in the registry. Allocation-free.
 */
function isWellFormed(s: string): boolean {
  return (s as unknown as WellFormedCheck).isWellFormed();
}

/** A key's value as validation sees it: absent or nil. */
export const VALUE_NIL = 0;
/** A key's value: a number (any MessagePack width). */
export const VALUE_NUMBER = 1;
/** A key's value: a string (kept for `id` and `lane` only). */
const VALUE_STRING = 2;
/** A key's value: anything else (boolean, binary). */
export const VALUE_OTHER = 3;
/** The id's value: an ASCII string left in the frame (DecodedValues.idBuf / idAt / idLen). */
export const VALUE_ID_BYTES = 4;

/**
 * The values of one frame by key index (KeyBit order: id, lat, lon, ts, speed, heading, accuracy, lane): each one's
 * kind (VALUE_*), its number, and for `id` and `lane` its string. Reused frame after frame: what validation reads.
 */
export class DecodedValues {
  readonly kinds = new Uint8Array(8);
  readonly nums = new Float64Array(8);
  readonly strs: string[] = ['', '', '', '', '', '', '', ''];
  /** With VALUE_ID_BYTES: where the id's bytes are. */
  idBuf: Uint8Array | null = null;
  idAt = 0;
  idLen = 0;

  /** Sets key `k` from a decoded JS value. */
  set(k: number, x: unknown): void {
    if (typeof x === 'number') {
      this.kinds[k] = VALUE_NUMBER;
      this.nums[k] = x;
    } else if (typeof x === 'string') {
      this.kinds[k] = VALUE_STRING;
      this.strs[k] = x;
    } else {
      this.kinds[k] = x == null ? VALUE_NIL : VALUE_OTHER;
    }
  }
}

/** The values validatePingInto takes from a decoded object (one per thread; validation is not re-entered). */
const fromObject = new DecodedValues();

/**
 * Validates a decoded telemetry object whose keys are `keyMask` into `out`. Returns PING_VALID or the RejectReason.
 * Allocation-free: the doubles go straight from the decoded object into `out.values`. Optional keys holding `null` /
 * `undefined` count as absent.
 *
 * Numbers are taken whatever MessagePack type carried them (any integer width, float32, float64): the frame decoder
 * hands every one over as a JS number, so only the value is checked here, never its encoding.
 */
export function validatePingInto(value: object, keyMask: number, limits: PingLimits, out: PingFields): number {
  const v = value as LooseTelemetry;
  const d = fromObject;
  d.set(0, v.id);
  d.set(1, v.lat);
  d.set(2, v.lon);
  d.set(3, v.ts);
  if ((keyMask & ~REQUIRED_KEY_MASK) !== 0) {
    d.set(4, v.speed);
    d.set(5, v.heading);
    d.set(6, v.accuracy);
    d.set(7, v.lane);
  }
  return validateValuesInto(d, keyMask, limits, out);
}

/**
 * Validates the values `d` of a frame whose keys are `keyMask` into `out` (what validatePingInto does for an object;
 * the frame reader fills `d` from the bytes). Returns PING_VALID or the RejectReason. Allocation-free.
 */
export function validateValuesInto(d: DecodedValues, keyMask: number, limits: PingLimits, out: PingFields): number {
  const kinds = d.kinds;
  const nums = d.nums;
  if ((keyMask & KeyBit.ID) === 0) return RejectReason.MISSING_ID;
  if (kinds[0] === VALUE_STRING) {
    const id = d.strs[0]!;
    if (id.length === 0 || !isWellFormed(id)) return RejectReason.INVALID_ID;
    if (id.length > limits.maxIdLength) return RejectReason.ID_TOO_LONG;
    out.idIsNumber = false;
    out.idInBytes = false;
    out.idKey = id;
  } else if (kinds[0] === VALUE_ID_BYTES) {
    // ASCII: its byte length is its length in UTF-16 code units.
    if (d.idLen === 0) return RejectReason.INVALID_ID;
    if (d.idLen > limits.maxIdLength) return RejectReason.ID_TOO_LONG;
    out.idIsNumber = false;
    out.idInBytes = true;
    out.idBuf = d.idBuf;
    out.idAt = d.idAt;
    out.idLen = d.idLen;
  } else if (kinds[0] === VALUE_NUMBER) {
    const id = nums[0]!;
    // A uint64 id above 2^53 - 1 arrives rounded to 2^53 or more (see FrameDecoder), never to a smaller neighbour,
    // so this one test rejects it rather than merging it with another device; negative and fractional ids too.
    if (!Number.isSafeInteger(id) || id < 0) return RejectReason.INVALID_ID;
    out.idIsNumber = true;
    out.idInBytes = false;
    out.values[PF_NUMERIC_ID_F64] = id;
  } else {
    return RejectReason.INVALID_ID;
  }
  if ((keyMask & REQUIRED_KEY_MASK) !== REQUIRED_KEY_MASK) {
    if ((keyMask & KeyBit.LAT) === 0) return RejectReason.INVALID_LAT;
    if ((keyMask & KeyBit.LON) === 0) return RejectReason.INVALID_LON;
    return RejectReason.INVALID_TS;
  }
  const lat = nums[1]!;
  // The comparisons are false for NaN, so NaN is rejected with the range.
  if (kinds[1] !== VALUE_NUMBER || !(lat >= -90 && lat <= 90)) return RejectReason.INVALID_LAT;
  const lon = nums[2]!;
  if (kinds[2] !== VALUE_NUMBER || !(lon >= -180 && lon <= 180)) return RejectReason.INVALID_LON;
  const ts = nums[3]!;
  if (kinds[3] !== VALUE_NUMBER || !(ts >= limits.minTsMs && ts <= limits.maxTsMs)) return RejectReason.INVALID_TS;
  const values = out.values;
  values[PF_LAT_F64] = lat;
  values[PF_LON_F64] = lon;
  values[PF_TS_MS_F64] = ts;
  values[PF_SPEED_MPS_F64] = Number.NaN;
  values[PF_HEADING_DEG_F64] = Number.NaN;
  values[PF_ACCURACY_M_F64] = Number.NaN;
  out.explicitLane = -1;
  if ((keyMask & ~REQUIRED_KEY_MASK) === 0) return PING_VALID;
  if ((keyMask & KeyBit.SPEED) !== 0 && kinds[4] !== VALUE_NIL) {
    const s = nums[4]!;
    if (kinds[4] !== VALUE_NUMBER || !(s >= 0 && s < Number.POSITIVE_INFINITY)) return RejectReason.INVALID_SPEED;
    values[PF_SPEED_MPS_F64] = s;
  }
  if ((keyMask & KeyBit.HEADING) !== 0 && kinds[5] !== VALUE_NIL) {
    const h = nums[5]!;
    if (kinds[5] !== VALUE_NUMBER || !(h >= 0 && h <= 360)) return RejectReason.INVALID_HEADING;
    values[PF_HEADING_DEG_F64] = h;
  }
  if ((keyMask & KeyBit.ACCURACY) !== 0 && kinds[6] !== VALUE_NIL) {
    const a = nums[6]!;
    if (kinds[6] !== VALUE_NUMBER || !(a >= 0 && a < Number.POSITIVE_INFINITY)) return RejectReason.INVALID_ACCURACY;
    values[PF_ACCURACY_M_F64] = a;
  }
  if ((keyMask & KeyBit.LANE) !== 0 && kinds[7] !== VALUE_NIL) {
    const lane = laneOf(kinds[7]!, nums[7]!, d.strs[7]!);
    if (lane < 0) return RejectReason.INVALID_LANE;
    out.explicitLane = lane;
  }
  return PING_VALID;
}

/** Lane value of a wire `lane` field (its kind, number and string), or -1 when it is not one. */
function laneOf(kind: number, num: number, str: string): number {
  if (kind === VALUE_NUMBER) return num === 0 || num === 1 || num === 2 ? num : -1;
  if (kind === VALUE_STRING) {
    for (let i = 0; i < LANE_WIRE_NAMES.length; i++) if (LANE_WIRE_NAMES[i] === str) return i;
  }
  return -1;
}
