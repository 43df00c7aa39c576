/**
 * Partitions of a partitioned telemetry log (JetStream): which partition a device's pings go to, and which partitions
 * a router consumes.
 *
 * A device's partition is FNV-1a (32-bit) over the UTF-8 bytes of its id as a subject token, modulo the partition
 * count: the decimal digits for a numeric id, the string itself for a string id. It is the function NATS applies in a
 * subject mapping `{{partition(<count>,<token>)}}`, so an ingest tier can compute the partition itself (publishing to
 * `<prefix>.<partition>.<deviceId>`) or publish to `<prefix>.<deviceId>` and let the server map it; both give the same
 * partition. Every ping of a device must go through one partition: that is what keeps its order.
 */

/** Largest partition count a stream may be split into. */
export const MAX_PARTITIONS = 4096;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const encoder = new TextEncoder();

/** The subject token of a device id: its decimal digits (an integer id) or the string itself. */
export function deviceIdToken(deviceId: string | number): string {
  if (typeof deviceId === 'number') {
    if (!Number.isSafeInteger(deviceId) || deviceId < 0) {
      throw new RangeError(`a numeric device id must be a non-negative integer up to 2^53 - 1, got ${deviceId}`);
    }
    return String(deviceId);
  }
  if (deviceId.length === 0 || /[\s.*>]/.test(deviceId)) {
    throw new RangeError(
      `device id ${JSON.stringify(deviceId)} cannot be a subject token (it must be non-empty, without whitespace, '.', '*' or '>')`,
    );
  }
  return deviceId;
}

/** The partition (0 .. partitionCount - 1) of a device id: FNV-1a 32 of its subject token, modulo partitionCount. */
export function partitionOf(deviceId: string | number, partitionCount: number): number {
  if (!Number.isInteger(partitionCount) || partitionCount < 1 || partitionCount > MAX_PARTITIONS) {
    throw new RangeError(`partitionCount must be an integer in [1, ${MAX_PARTITIONS}], got ${partitionCount}`);
  }
  const bytes = encoder.encode(deviceIdToken(deviceId));
  return partitionOfTokenBytes(bytes, 0, bytes.length, partitionCount);
}

/**
 * The partition of a device id given as its subject token's UTF-8 bytes `bytes[start, end)` (no check of the token or
 * of `partitionCount`: see partitionOf).
 */
export function partitionOfTokenBytes(bytes: Uint8Array, start: number, end: number, partitionCount: number): number {
  let h = FNV_OFFSET;
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i]!, FNV_PRIME) >>> 0;
  return h % partitionCount;
}

/** Decimal digits of a numeric id, written by partitionOfNumericCell (least significant last). */
const digitScratch = new Uint8Array(24);
/** Cell 0: the id partitionOfNumericId was given. */
const idCell = new Float64Array(1);

/**
 * The partition of a numeric device id `id` (a non-negative safe integer, not checked), as partitionOf gives it, without
 * allocating: FNV-1a 32 over its decimal digits, modulo `partitionCount`.
 */
export function partitionOfNumericId(id: number, partitionCount: number): number {
  idCell[0] = id;
  return partitionOfNumericCell(idCell, 0, partitionCount);
}

/**
 * partitionOfNumericId of the id in `cells[index]`: the id stays an unboxed double (the ingest edge's per-ping path).
 */
export function partitionOfNumericCell(cells: Float64Array, index: number, partitionCount: number): number {
  let at = digitScratch.length;
  let n = cells[index]!;
  do {
    const q = Math.floor(n / 10);
    digitScratch[--at] = 0x30 + (n - q * 10);
    n = q;
  } while (n > 0);
  return partitionOfTokenBytes(digitScratch, at, digitScratch.length, partitionCount);
}

/** The subject a ping of `deviceId` is published to: `<prefix>.<partition>.<token>`. */
export function partitionSubject(prefix: string, deviceId: string | number, partitionCount: number): string {
  return `${prefix}.${partitionOf(deviceId, partitionCount)}.${deviceIdToken(deviceId)}`;
}

/**
 * Parses a partition list: "all", or comma-separated numbers and ranges ("0-3,8,10-11"), each below
 * `partitionCount`. Returns the partitions in increasing order, each once. Throws a RangeError naming what was wrong.
 */
export function parsePartitionList(text: string, partitionCount: number, name = 'partitions'): number[] {
  const t = text.trim();
  if (t === 'all') return Array.from({ length: partitionCount }, (_, i) => i);
  const seen = new Set<number>();
  for (const part of t.split(',')) {
    const m = /^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$/.exec(part);
    if (m === null) {
      throw new RangeError(`${name} must be "all" or numbers and ranges like "0-3,8", got ${JSON.stringify(text)}`);
    }
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw new RangeError(`${name}: the range ${part.trim()} runs backwards`);
    if (hi >= partitionCount) {
      throw new RangeError(`${name}: partition ${hi} is not below the partition count ${partitionCount}`);
    }
    for (let p = lo; p <= hi; p++) seen.add(p);
  }
  return [...seen].sort((a, b) => a - b);
}
