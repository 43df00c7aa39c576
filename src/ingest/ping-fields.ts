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

/**
 * One ping's fields. The ingest edge owns one instance and overwrites it for every ping: consumers must copy what
 * they keep before returning.
 */
export class PingFields {
  /** True when the id is an unsigned integer (`idNumber`), false when a string (`idString`). */
  idIsNumber = false;
  /** String id ('' when numeric). */
  idString = '';
  /** Numeric id (-1 when a string). */
  idNumber = -1;
  /** Latitude, WGS84 degrees. */
  lat = 0;
  /** Longitude, WGS84 degrees. */
  lon = 0;
  /** Device event time, epoch ms. */
  tsMs = 0;
  /** Speed over ground, m/s; NaN when absent. */
  speedMps = Number.NaN;
  /** Heading, degrees clockwise from north; NaN when absent. */
  headingDeg = Number.NaN;
  /** Horizontal accuracy, metres; NaN when absent. */
  accuracyM = Number.NaN;
  /** Lane the device asked for (a Lane value), or -1 when absent. */
  explicitLane = -1;
  /** Dense device slot (set by the registry step). */
  slot = -1;
  /** Shard of the device (set by the registry step). */
  shard = -1;
  /** Lane decided by classification (set by the classification step). */
  lane: Lane = Lane.TRANSITION;

  /** The id as a registry key. */
  id(): string | number {
    return this.idIsNumber ? this.idNumber : this.idString;
  }
}

/** A ping as an embedding application pushes it (same keys and meaning as on the wire). */
export interface TelemetryPoint {
  /** Device id: non-empty string or unsigned safe integer. */
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

/**
 * Validates a decoded telemetry object whose keys are `keyMask` into `out`. Returns PING_VALID or the RejectReason.
 * Allocation-free. Optional keys holding `null` / `undefined` count as absent.
 */
export function validatePingInto(value: object, keyMask: number, limits: PingLimits, out: PingFields): number {
  const v = value as LooseTelemetry;
  if ((keyMask & KeyBit.ID) === 0) return RejectReason.MISSING_ID;
  const id = v.id;
  if (typeof id === 'string') {
    if (id.length === 0) return RejectReason.INVALID_ID;
    if (id.length > limits.maxIdLength) return RejectReason.ID_TOO_LONG;
    out.idIsNumber = false;
    out.idString = id;
    out.idNumber = -1;
  } else if (typeof id === 'number') {
    if (!Number.isSafeInteger(id) || id < 0) return RejectReason.INVALID_ID;
    out.idIsNumber = true;
    out.idString = '';
    out.idNumber = id;
  } else {
    return RejectReason.INVALID_ID;
  }
  if ((keyMask & REQUIRED_KEY_MASK) !== REQUIRED_KEY_MASK) {
    if ((keyMask & KeyBit.LAT) === 0) return RejectReason.INVALID_LAT;
    if ((keyMask & KeyBit.LON) === 0) return RejectReason.INVALID_LON;
    return RejectReason.INVALID_TS;
  }
  const lat = v.lat;
  // The comparisons are false for NaN, so NaN is rejected with the range.
  if (typeof lat !== 'number' || !(lat >= -90 && lat <= 90)) return RejectReason.INVALID_LAT;
  const lon = v.lon;
  if (typeof lon !== 'number' || !(lon >= -180 && lon <= 180)) return RejectReason.INVALID_LON;
  const ts = v.ts;
  if (typeof ts !== 'number' || !(ts >= limits.minTsMs && ts <= limits.maxTsMs)) return RejectReason.INVALID_TS;
  out.lat = lat;
  out.lon = lon;
  out.tsMs = ts;
  out.speedMps = Number.NaN;
  out.headingDeg = Number.NaN;
  out.accuracyM = Number.NaN;
  out.explicitLane = -1;
  if ((keyMask & ~REQUIRED_KEY_MASK) === 0) return PING_VALID;
  if ((keyMask & KeyBit.SPEED) !== 0 && v.speed != null) {
    const s = v.speed;
    if (typeof s !== 'number' || !(s >= 0 && s < Number.POSITIVE_INFINITY)) return RejectReason.INVALID_SPEED;
    out.speedMps = s;
  }
  if ((keyMask & KeyBit.HEADING) !== 0 && v.heading != null) {
    const h = v.heading;
    if (typeof h !== 'number' || !(h >= 0 && h <= 360)) return RejectReason.INVALID_HEADING;
    out.headingDeg = h;
  }
  if ((keyMask & KeyBit.ACCURACY) !== 0 && v.accuracy != null) {
    const a = v.accuracy;
    if (typeof a !== 'number' || !(a >= 0 && a < Number.POSITIVE_INFINITY)) return RejectReason.INVALID_ACCURACY;
    out.accuracyM = a;
  }
  if ((keyMask & KeyBit.LANE) !== 0 && v.lane != null) {
    const lane = laneOf(v.lane);
    if (lane < 0) return RejectReason.INVALID_LANE;
    out.explicitLane = lane;
  }
  return PING_VALID;
}

/** Lane value of a wire `lane` field, or -1 when it is not one. */
export function laneOf(value: unknown): number {
  if (typeof value === 'number') return value === 0 || value === 1 || value === 2 ? value : -1;
  if (typeof value === 'string') {
    for (let i = 0; i < LANE_WIRE_NAMES.length; i++) if (LANE_WIRE_NAMES[i] === value) return i;
  }
  return -1;
}
