/**
 * Allocation of shared-memory regions. Allocation is separate from wrapping: these functions create and describe a
 * SharedArrayBuffer once (on the main thread, or wherever the owner lives); every thread then wraps the same buffer
 * with its own views (`SpscRing`, counter readers, ...).
 */
import {
  ADM_BLOCK_F64,
  LAYOUT_VERSION,
  RING_CAPACITY_I32,
  RING_HEADER_BYTES,
  RING_KIND_I32,
  RING_MAGIC,
  RING_MAGIC_I32,
  RING_MAX_CAPACITY_SLOTS,
  RING_RESERVED_SLOTS_I32,
  RING_STRIDE_I32,
  RING_VERSION_I32,
  RingKind,
  TELEMETRY_STRIDE_BYTES,
} from './layout.js';

/** True when `n` is a positive power of two that fits in 31 bits. */
function isPowerOfTwo(n: number): boolean {
  return Number.isInteger(n) && n > 0 && n <= 0x40000000 && (n & (n - 1)) === 0;
}

/** Description of a ring region to allocate. */
export interface RingRegionSpec {
  /** Number of record slots; a power of two between 2 and RING_MAX_CAPACITY_SLOTS. */
  capacitySlots: number;
  /** Bytes per record; a positive multiple of 8. */
  strideBytes: number;
  /** What the records are. */
  kind: RingKind;
  /** Slots reserved for the COMPLIANCE lane (telemetry rings); 0 elsewhere. */
  reservedSlots?: number;
}

/**
 * Allocates and initialises one ring region: header (counters zero, description filled in) followed by
 * `capacitySlots * strideBytes` bytes of records. Throws a RangeError naming the field that is wrong.
 */
export function allocateRingRegion(spec: RingRegionSpec): SharedArrayBuffer {
  const { capacitySlots, strideBytes, kind } = spec;
  const reservedSlots = spec.reservedSlots ?? 0;
  if (!isPowerOfTwo(capacitySlots) || capacitySlots < 2 || capacitySlots > RING_MAX_CAPACITY_SLOTS) {
    throw new RangeError(
      `capacitySlots must be a power of two between 2 and ${RING_MAX_CAPACITY_SLOTS}, got ${String(capacitySlots)}`,
    );
  }
  if (!Number.isInteger(strideBytes) || strideBytes <= 0 || strideBytes % 8 !== 0) {
    throw new RangeError(`strideBytes must be a positive multiple of 8, got ${String(strideBytes)}`);
  }
  if (!Number.isInteger(reservedSlots) || reservedSlots < 0 || reservedSlots >= capacitySlots) {
    throw new RangeError(`reservedSlots must be an integer in [0, capacitySlots), got ${String(reservedSlots)}`);
  }
  const sab = new SharedArrayBuffer(RING_HEADER_BYTES + capacitySlots * strideBytes);
  const header = new Int32Array(sab, 0, RING_HEADER_BYTES / 4);
  header[RING_MAGIC_I32] = RING_MAGIC;
  header[RING_VERSION_I32] = LAYOUT_VERSION;
  header[RING_CAPACITY_I32] = capacitySlots;
  header[RING_STRIDE_I32] = strideBytes;
  header[RING_KIND_I32] = kind;
  header[RING_RESERVED_SLOTS_I32] = reservedSlots;
  return sab;
}

/** Allocates `blocks` zeroed Float64 counter blocks of `blockF64` cells each. */
export function allocateCounterRegion(blocks: number, blockF64: number): SharedArrayBuffer {
  if (!Number.isInteger(blocks) || blocks <= 0)
    throw new RangeError(`blocks must be a positive integer, got ${String(blocks)}`);
  if (!Number.isInteger(blockF64) || blockF64 <= 0) {
    throw new RangeError(`blockF64 must be a positive integer, got ${String(blockF64)}`);
  }
  return new SharedArrayBuffer(blocks * blockF64 * 8);
}

/**
 * Slots a telemetry ring of `capacitySlots` reserves for the COMPLIANCE lane: `ceil(capacitySlots * reservedFraction)`,
 * so any non-zero fraction reserves at least one slot. `reservedFraction` must be in [0, 0.5].
 */
export function reservedSlotsFor(capacitySlots: number, reservedFraction: number): number {
  if (typeof reservedFraction !== 'number' || !(reservedFraction >= 0 && reservedFraction <= 0.5)) {
    throw new RangeError(`reservedFraction must be a number in [0, 0.5], got ${String(reservedFraction)}`);
  }
  return Math.ceil(capacitySlots * reservedFraction);
}

/**
 * Allocates a telemetry ring (TELEMETRY_STRIDE_BYTES records) whose last `reservedSlotsFor(capacitySlots,
 * reservedFraction)` slots only the COMPLIANCE lane may fill. Wrap it with `SpscRing.wrap(buffer, RingKind.TELEMETRY)`.
 */
export function allocateTelemetryRing(capacitySlots: number, reservedFraction: number): SharedArrayBuffer {
  if (!isPowerOfTwo(capacitySlots) || capacitySlots < 2 || capacitySlots > RING_MAX_CAPACITY_SLOTS) {
    throw new RangeError(
      `capacitySlots must be a power of two between 2 and ${RING_MAX_CAPACITY_SLOTS}, got ${String(capacitySlots)}`,
    );
  }
  return allocateRingRegion({
    capacitySlots,
    strideBytes: TELEMETRY_STRIDE_BYTES,
    kind: RingKind.TELEMETRY,
    reservedSlots: reservedSlotsFor(capacitySlots, reservedFraction),
  });
}

/**
 * Allocates zeroed admission counter blocks (layout ADM_*), one per telemetry ring; ring r's block starts at
 * `r * ADM_BLOCK_F64`.
 */
export function allocateAdmissionCounters(ringCount: number): SharedArrayBuffer {
  if (!Number.isInteger(ringCount) || ringCount <= 0) {
    throw new RangeError(`ringCount must be a positive integer, got ${String(ringCount)}`);
  }
  return allocateCounterRegion(ringCount, ADM_BLOCK_F64);
}
