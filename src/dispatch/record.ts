/**
 * Copying trigger records from the trigger rings into the dispatcher's 128-byte dispatch records (memory slots, the
 * dead-letter ring). Copies Float64 cells 0..5 as doubles and Int32 cells 12..15 as integers: the
 * integer cells are never moved through a double (that could canonicalise a NaN bit pattern). Allocation-free.
 */
import {
  DREC_TRIGGER_F64_COUNT,
  DREC_TRIGGER_I32_COUNT,
  DREC_TRIGGER_I32_FIRST,
  TRG_FENCE_INDEX_I32,
  TRG_LANE_SHIFT,
} from '../shm/layout.js';

/** Copies one trigger record from (srcF64, srcI32) at the given bases to (dstF64, dstI32) at theirs. */
export function copyTrigger(
  srcF64: Float64Array,
  srcI32: Int32Array,
  srcBaseF64: number,
  srcBaseI32: number,
  dstF64: Float64Array,
  dstI32: Int32Array,
  dstBaseF64: number,
  dstBaseI32: number,
): void {
  for (let k = 0; k < DREC_TRIGGER_F64_COUNT; k++) dstF64[dstBaseF64 + k] = srcF64[srcBaseF64 + k]!;
  for (let k = DREC_TRIGGER_I32_FIRST; k < DREC_TRIGGER_I32_FIRST + DREC_TRIGGER_I32_COUNT; k++) {
    dstI32[dstBaseI32 + k] = srcI32[srcBaseI32 + k]!;
  }
}

/** Lane (bits 28..29 of the fence cell) of the trigger record whose Int32 base is `baseI32`. */
export function laneOf(i32: Int32Array, baseI32: number): number {
  return (i32[baseI32 + TRG_FENCE_INDEX_I32]! >>> TRG_LANE_SHIFT) & 3;
}
