/**
 * A batch of triggers handed to a sink: a view over preallocated dispatch records (DREC_* layout). The dispatcher
 * reuses each batch object for the permit slot it belongs to; a batch's contents stay valid until the promise
 * returned by `Sink.deliver` settles.
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_ORDINAL_F64,
  DREC_REASON_I32,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DREC_TIME_NS_F64,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_FENCE_INDEX_MASK,
  TRG_GENERATION_I32,
  TRG_INSIDE_MS_F64,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
} from '../../shm/layout.js';

/** A batch of trigger records (see the module comment). */
export class TriggerBatch {
  /** Float64 view over the batch's records. */
  readonly f64: Float64Array;
  /** Int32 view over the batch's records. */
  readonly i32: Int32Array;
  /** Float64 index where record 0 starts. */
  readonly baseF64: number;
  /** Int32 index where record 0 starts. */
  readonly baseI32: number;
  /** Records the batch can hold. */
  readonly capacity: number;
  /** Records in the batch. */
  count = 0;
  /** True when the batch comes from the replay lane (dead-lettered triggers re-delivered). */
  replay = false;
  /** Index of the downstream the batch is for. */
  downstreamIndex = 0;
  /** When the sink call started (the permit's clock), ns: `nowNs - sentAtNs` in a delivered hook is the RTT. */
  sentAtNs = 0;

  /** Wraps `capacity` records starting at record `firstRecord` of the views. */
  constructor(f64: Float64Array, i32: Int32Array, firstRecord: number, capacity: number) {
    this.f64 = f64;
    this.i32 = i32;
    this.baseF64 = firstRecord * DREC_STRIDE_F64;
    this.baseI32 = firstRecord * DREC_STRIDE_I32;
    this.capacity = capacity;
  }

  /** Float64 base of record `i`. */
  recordF64(i: number): number {
    return this.baseF64 + i * DREC_STRIDE_F64;
  }

  /** Int32 base of record `i`. */
  recordI32(i: number): number {
    return this.baseI32 + i * DREC_STRIDE_I32;
  }

  /** Trigger type (TriggerType) of record `i`. */
  type(i: number): number {
    return this.i32[this.recordI32(i) + TRG_TYPE_I32]!;
  }

  /** Device slot of record `i`. */
  deviceSlot(i: number): number {
    return this.i32[this.recordI32(i) + TRG_DEVICE_SLOT_I32]!;
  }

  /** Fence-store generation of record `i`. */
  generation(i: number): number {
    return this.i32[this.recordI32(i) + TRG_GENERATION_I32]!;
  }

  /** Fence index of record `i` (lane bits removed). */
  fenceIndex(i: number): number {
    return this.i32[this.recordI32(i) + TRG_FENCE_INDEX_I32]! & TRG_FENCE_INDEX_MASK;
  }

  /** Lane of record `i`. */
  lane(i: number): number {
    return (this.i32[this.recordI32(i) + TRG_FENCE_INDEX_I32]! >>> TRG_LANE_SHIFT) & 3;
  }

  /** Latitude of record `i`. */
  lat(i: number): number {
    return this.f64[this.recordF64(i) + TRG_LAT_F64]!;
  }

  /** Longitude of record `i`. */
  lon(i: number): number {
    return this.f64[this.recordF64(i) + TRG_LON_F64]!;
  }

  /** Event time of record `i`, epoch ms. */
  eventTimeMs(i: number): number {
    return this.f64[this.recordF64(i) + TRG_EVENT_TIME_MS_F64]!;
  }

  /** Admission time of record `i` on the router's monotonic clock, ns. */
  admitTimeNs(i: number): number {
    return this.f64[this.recordF64(i) + TRG_ADMIT_TIME_NS_F64]!;
  }

  /** Per (device, fence) sequence number of record `i`. */
  seq(i: number): number {
    return this.f64[this.recordF64(i) + TRG_SEQ_F64]!;
  }

  /** Milliseconds inside the fence of record `i`. */
  insideMs(i: number): number {
    return this.f64[this.recordF64(i) + TRG_INSIDE_MS_F64]!;
  }

  /** Time record `i` was queued (live) or dead-lettered (replay), ns. */
  timeNs(i: number): number {
    return this.f64[this.recordF64(i) + DREC_TIME_NS_F64]!;
  }

  /** Replay: index of record `i` in the dead-letter file; live: -1. */
  ordinal(i: number): number {
    return this.f64[this.recordF64(i) + DREC_ORDINAL_F64]!;
  }

  /** Replay: dead-letter reason of record `i`; live: -1. */
  reason(i: number): number {
    return this.i32[this.recordI32(i) + DREC_REASON_I32]!;
  }

  /** Delivery attempts of record `i`, this one included. */
  attempts(i: number): number {
    return this.i32[this.recordI32(i) + DREC_ATTEMPTS_I32]!;
  }
}
