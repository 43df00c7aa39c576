/**
 * The telemetry wire contract of the ingest edge (runs on the ingest thread).
 *
 * A telemetry stream is a sequence of concatenated MessagePack values with no length prefix; each value (a "frame")
 * is one ping. Two encodings of a frame are accepted:
 *
 * 1. A plain map (fixmap, map16 or map32) whose keys are strings (fixstr, str8/16/32) from TELEMETRY_KEYS, each at
 *    most once. What each key accepts, in a map or a record alike ("a number" is any MessagePack integer: positive /
 *    negative fixint, uint8/16/32/64, int8/16/32/64, or a float32 / float64; its value counts, never the width its
 *    encoder chose, so every conforming encoder in its default settings is understood):
 *
 *    | key        | accepted MessagePack types         | range / units                          | otherwise          |
 *    |------------|------------------------------------|----------------------------------------|--------------------|
 *    | `id`       | str (non-empty, valid UTF-8, at    | device id; `42` and `"42"` are         | invalid_id,        |
 *    |            | most `idBytesPerSlot` bytes), or   | different devices                      | id_too_long,       |
 *    |            | a number that is an integer in     |                                        | missing_id         |
 *    |            | [0, 2^53 - 1]                      |                                        |                    |
 *    | `lat`      | a number                           | WGS84 degrees, [-90, 90]               | invalid_lat        |
 *    | `lon`      | a number                           | WGS84 degrees, [-180, 180]             | invalid_lon        |
 *    | `ts`       | a number                           | epoch ms, [minTsMs, maxTsMs]           | invalid_ts         |
 *    | `speed`    | a number, or nil / absent          | m/s, finite, >= 0                      | invalid_speed      |
 *    | `heading`  | a number, or nil / absent          | degrees clockwise from north, [0, 360] | invalid_heading    |
 *    | `accuracy` | a number, or nil / absent          | metres, finite, >= 0                   | invalid_accuracy   |
 *    | `lane`     | str, a number, or nil / absent     | "idle" / "transition" / "compliance"   | invalid_lane       |
 *    |            |                                    | or 0 / 1 / 2                           |                    |
 *
 *    `lat`, `lon` and `ts` are required. A numeric id above 2^53 - 1 (an encoder may write one as uint64) is rejected
 *    rather than rounded onto another device's id; the reject log line quotes it exactly. A `nil` optional value
 *    counts as absent. Values are scalars: a map, array or extension value is rejected (unsupported_value); bool,
 *    bin and str where a number is expected fail the key's own check.
 * 2. A msgpackr record (`useRecords`), self-contained in the frame: an inline record definition
 *    (fixext1 type 0x72, structure id 0x40-0x7f, then the array of keys, then the values), as
 *    `new Packr({ useRecords: true }).pack(ping)` writes for every ping it packs separately.
 *    Optionally (decoder option `sharedStructures`), records may also refer to the published shared structure table
 *    TELEMETRY_SHARED_STRUCTURES by a one-byte reference (0x40 + index), as a sender constructed with
 *    `new Packr({ structures: telemetrySharedStructures(), maxSharedStructures: TELEMETRY_SHARED_STRUCTURES.length })`
 *    writes. This mode is exclusive: with it on, the bytes 0x40..0x43 start records, so a plain-map sender that
 *    writes small integers 64..67 as positive fixints would be misread. Enable it only when every sender uses it.
 *
 * Not accepted: structures defined in one frame and referenced in a later one (msgpackr `sequential` streams), which
 * would make every frame depend on its predecessors and defeat resynchronisation; bundled strings; 16-bit record ids.
 */

/** Bit of each telemetry key in a key mask. */
export const KeyBit = {
  ID: 1,
  LAT: 2,
  LON: 4,
  TS: 8,
  SPEED: 16,
  HEADING: 32,
  ACCURACY: 64,
  LANE: 128,
} as const;

/** Keys every ping must carry. */
export const REQUIRED_KEY_MASK = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS;

/** The telemetry keys, in KeyBit order. */
export const TELEMETRY_KEYS = ['id', 'lat', 'lon', 'ts', 'speed', 'heading', 'accuracy', 'lane'] as const;
/** A telemetry key. */
export type TelemetryKey = (typeof TELEMETRY_KEYS)[number];

/** Lane names accepted in the `lane` field, indexed by Lane value. */
export const LANE_WIRE_NAMES = ['idle', 'transition', 'compliance'] as const;

/**
 * The shared record structures of the `sharedStructures` mode, by index (reference byte 0x40 + index).
 * Append only: changing an entry changes the meaning of frames already on the wire.
 */
export const TELEMETRY_SHARED_STRUCTURES: readonly (readonly TelemetryKey[])[] = [
  ['id', 'lat', 'lon', 'ts'],
  ['id', 'lat', 'lon', 'ts', 'speed'],
  ['id', 'lat', 'lon', 'ts', 'speed', 'heading', 'accuracy'],
  ['id', 'lat', 'lon', 'ts', 'speed', 'heading', 'accuracy', 'lane'],
];

/**
 * A fresh mutable copy of the shared structures, as msgpackr's `structures` option wants (it annotates the array).
 * Each is marked shared (`isShared`, as msgpackr marks structures it loads): a frame whose inline record definition
 * takes a shared id then changes that id for its own read only, and msgpackr puts the shared one back after it.
 * Unmarked, one such frame would change the structure for every later frame of every sender (read with other keys,
 * or refused).
 */
export function telemetrySharedStructures(): string[][] {
  return TELEMETRY_SHARED_STRUCTURES.map((keys) => Object.assign(keys.slice(), { isShared: true }));
}

/** Key bit of a key name, or 0 when it is not a telemetry key. */
export function keyBitOf(name: string): number {
  const i = (TELEMETRY_KEYS as readonly string[]).indexOf(name);
  return i < 0 ? 0 : 1 << i;
}

/**
 * Key bit of the UTF-8 key of `len` bytes at `buf[pos]`, or 0 when it is not a telemetry key. Allocation-free.
 */
export function matchKeyBytes(buf: Uint8Array, pos: number, len: number): number {
  const c0 = buf[pos]!;
  switch (len) {
    case 2:
      if (c0 === 0x69 && buf[pos + 1] === 0x64) return KeyBit.ID; // id
      if (c0 === 0x74 && buf[pos + 1] === 0x73) return KeyBit.TS; // ts
      return 0;
    case 3:
      if (c0 !== 0x6c) return 0; // l
      if (buf[pos + 1] === 0x61 && buf[pos + 2] === 0x74) return KeyBit.LAT; // lat
      if (buf[pos + 1] === 0x6f && buf[pos + 2] === 0x6e) return KeyBit.LON; // lon
      return 0;
    case 4:
      return c0 === 0x6c && buf[pos + 1] === 0x61 && buf[pos + 2] === 0x6e && buf[pos + 3] === 0x65 ? KeyBit.LANE : 0;
    case 5:
      return c0 === 0x73 && sameBytes(buf, pos, SPEED_BYTES) ? KeyBit.SPEED : 0;
    case 7:
      return c0 === 0x68 && sameBytes(buf, pos, HEADING_BYTES) ? KeyBit.HEADING : 0;
    case 8:
      return c0 === 0x61 && sameBytes(buf, pos, ACCURACY_BYTES) ? KeyBit.ACCURACY : 0;
    default:
      return 0;
  }
}

const SPEED_BYTES = new TextEncoder().encode('speed');
const HEADING_BYTES = new TextEncoder().encode('heading');
const ACCURACY_BYTES = new TextEncoder().encode('accuracy');

function sameBytes(buf: Uint8Array, pos: number, expected: Uint8Array): boolean {
  for (let i = 1; i < expected.length; i++) if (buf[pos + i] !== expected[i]) return false;
  return true;
}

const LANE_NAME_BYTES = LANE_WIRE_NAMES.map((name) => new TextEncoder().encode(name));

/** Lane value of the lane name whose UTF-8 bytes are `buf[pos, pos + len)`, or -1 when it names none. Allocation-free. */
export function laneOfNameBytes(buf: Uint8Array, pos: number, len: number): number {
  for (let lane = 0; lane < LANE_NAME_BYTES.length; lane++) {
    const name = LANE_NAME_BYTES[lane]!;
    if (name.length === len && buf[pos] === name[0] && sameBytes(buf, pos, name)) return lane;
  }
  return -1;
}
