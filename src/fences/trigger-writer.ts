/**
 * Writes one trigger record into a trigger ring (producer side), blocking while the ring is full: internal hops
 * never drop. Used by the containment engine and by reloads. Allocation-free.
 */
import {
  CNT_TRIGGER_RING_WAITS_F64,
  CNT_TRIGGERS_F64,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_GENERATION_I32,
  TRG_INSIDE_MS_F64,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
  TRG_TYPE_RETIRE,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';

/** Record scratch cell: latitude of the ping. */
export const REC_LAT = 0;
/** Record scratch cell: longitude. */
export const REC_LON = 1;
/** Record scratch cell: event time, epoch ms. */
export const REC_EVENT_TIME_MS = 2;
/** Record scratch cell: admission time, ns. */
export const REC_ADMIT_TIME_NS = 3;
/** Record scratch cell: sequence number. */
export const REC_SEQ = 4;
/** Record scratch cell: ms inside. */
export const REC_INSIDE_MS = 5;
/** Cells of a record scratch array. */
export const REC_CELLS = 6;

/** How long one park waits for the dispatcher to free a slot before re-checking, ms. */
const TRIGGER_RING_WAIT_MS = 50;

/**
 * Claims a slot (publishing what is pending and waiting for space first when the ring is full), fills the record and
 * counts the trigger (a retire marker, TRG_TYPE_RETIRE, is not counted). `lane` may carry bit 2 (TRG_EXPIRED_FLAG
 * once shifted into the fence cell). The record becomes visible at the caller's next `publish()`. The double fields come from `rec`
 * (REC_* cells), not from arguments: doubles crossing a non-inlined call are boxed, an allocation per call.
 */
export function writeTrigger(
  triggers: SpscRing,
  counters: Float64Array,
  counterBase: number,
  type: number,
  generation: number,
  slot: number,
  fenceIndex: number,
  lane: number,
  rec: Float64Array,
): void {
  if (triggers.freeSlots(1) < 1) {
    // Publish first: the dispatcher can only free slots for records it can see.
    triggers.publish();
    if (triggers.scratch) {
      // Nobody reads a scratch ring: waiting would wait for ever (one warm-up batch of a dense city can write more
      // triggers than the ring holds). Drop what it holds; the records were never meant to be read.
      triggers.release(triggers.available());
    } else {
      waitForTriggerRoom(triggers, counters, counterBase);
    }
  }
  const s = triggers.claim();
  const f = s * triggers.strideF64;
  const i = s * triggers.strideI32;
  const f64 = triggers.f64;
  const i32 = triggers.i32;
  f64[f + TRG_LAT_F64] = rec[REC_LAT]!;
  f64[f + TRG_LON_F64] = rec[REC_LON]!;
  f64[f + TRG_EVENT_TIME_MS_F64] = rec[REC_EVENT_TIME_MS]!;
  f64[f + TRG_ADMIT_TIME_NS_F64] = rec[REC_ADMIT_TIME_NS]!;
  f64[f + TRG_SEQ_F64] = rec[REC_SEQ]!;
  f64[f + TRG_INSIDE_MS_F64] = rec[REC_INSIDE_MS]!;
  i32[i + TRG_GENERATION_I32] = generation;
  i32[i + TRG_TYPE_I32] = type;
  i32[i + TRG_DEVICE_SLOT_I32] = slot;
  i32[i + TRG_FENCE_INDEX_I32] = fenceIndex | (lane << TRG_LANE_SHIFT);
  // A retire marker is not a trigger: counted by the caller as an expiry.
  if (type !== TRG_TYPE_RETIRE) counters[counterBase + CNT_TRIGGERS_F64 + type]!++;
}

/**
 * Blocks until the consumer frees a slot of `triggers` (counted as a trigger ring wait in the counter block at
 * `counterBase`). The ring must hold published records, or the wait never ends. Allocation-free.
 */
export function waitForTriggerRoom(triggers: SpscRing, counters: Float64Array, counterBase: number): void {
  counters[counterBase + CNT_TRIGGER_RING_WAITS_F64]!++;
  while (triggers.waitForSpace(1, TRIGGER_RING_WAIT_MS) < 1) {
    // Keep waiting: a full trigger ring pauses containment by design.
  }
}
