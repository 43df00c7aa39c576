/**
 * A batch of triggers handed to a sink: a list of record slots of the downstream's memory (DREC_* layout) and the
 * names of their devices and fences. The dispatcher reuses each batch object for the permit slot it belongs to; a
 * batch's contents stay valid until the promise returned by `Sink.deliver` settles.
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_FENCE_HANDLE_I32,
  DREC_REASON_I32,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_INSIDE_MS_F64,
  TRG_EXPIRED_FLAG,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
} from '../../shm/layout.js';

/** Names of the devices and fences a batch refers to (the dispatcher's device ids and fence catalog). */
export interface BatchNames {
  /** The device's id as it sent it: a string, or an unsigned integer. */
  deviceId(slot: number): string | number;
  /** The fence's id. */
  fenceId(handle: number): string;
  /** The fence's tags. */
  fenceTags(handle: number): readonly string[];
  /** The JSON members `"fenceId":...,"tags":[...]` of the fence. */
  fenceJson(handle: number): string;
}

/** A batch of trigger records (see the module comment). */
export class TriggerBatch {
  /** Float64 view over the downstream's record slots. */
  readonly f64: Float64Array;
  /** Int32 view over the downstream's record slots. */
  readonly i32: Int32Array;
  /** Slots of the records, in delivery order. */
  readonly slots: Int32Array;
  /** Records the batch can hold. */
  readonly capacity: number;
  /** Names of devices and fences. */
  readonly names: BatchNames;
  /** Records in the batch. */
  count = 0;
  /** Index of the downstream the batch is for. */
  downstreamIndex = 0;
  /** When the sink call started (the permit's clock), ns: `nowNs - sentAtNs` in a delivered hook is the RTT. */
  sentAtNs = 0;

  /** A batch of up to `capacity` records over the views of a downstream's memory. */
  constructor(f64: Float64Array, i32: Int32Array, capacity: number, names: BatchNames) {
    this.f64 = f64;
    this.i32 = i32;
    this.capacity = capacity;
    this.slots = new Int32Array(capacity);
    this.names = names;
  }

  /** Appends the record in `slot`. */
  add(slot: number): void {
    this.slots[this.count++] = slot;
  }

  /** Float64 base of record `i`. */
  recordF64(i: number): number {
    return this.slots[i]! * DREC_STRIDE_F64;
  }

  /** Int32 base of record `i`. */
  recordI32(i: number): number {
    return this.slots[i]! * DREC_STRIDE_I32;
  }

  /** Trigger type (TriggerType) of record `i`. */
  type(i: number): number {
    return this.i32[this.recordI32(i) + TRG_TYPE_I32]!;
  }

  /** Device slot of record `i` (this process's; not an identity). */
  deviceSlot(i: number): number {
    return this.i32[this.recordI32(i) + TRG_DEVICE_SLOT_I32]!;
  }

  /** The device id of record `i`, as the device sent it. */
  deviceId(i: number): string | number {
    return this.names.deviceId(this.deviceSlot(i));
  }

  /** Fence-catalog handle of record `i` (this process's; not an identity). */
  fenceHandle(i: number): number {
    return this.i32[this.recordI32(i) + DREC_FENCE_HANDLE_I32]!;
  }

  /** The fence id of record `i`. */
  fenceId(i: number): string {
    return this.names.fenceId(this.fenceHandle(i));
  }

  /** The fence tags of record `i`. */
  tags(i: number): readonly string[] {
    return this.names.fenceTags(this.fenceHandle(i));
  }

  /** Lane of record `i`. */
  lane(i: number): number {
    return (this.i32[this.recordI32(i) + TRG_FENCE_INDEX_I32]! >>> TRG_LANE_SHIFT) & 3;
  }

  /** True when record `i` is an EXIT written because its device expired (TRG_EXPIRED_FLAG). */
  expired(i: number): boolean {
    return (this.i32[this.recordI32(i) + TRG_FENCE_INDEX_I32]! & TRG_EXPIRED_FLAG) !== 0;
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

  /** The device's trigger sequence number of record `i`. */
  seq(i: number): number {
    return this.f64[this.recordF64(i) + TRG_SEQ_F64]!;
  }

  /** Milliseconds inside the fence of record `i`. */
  insideMs(i: number): number {
    return this.f64[this.recordF64(i) + TRG_INSIDE_MS_F64]!;
  }

  /** Dead-letter reason of record `i` (-1 when it was never dead-lettered). */
  reason(i: number): number {
    return this.i32[this.recordI32(i) + DREC_REASON_I32]!;
  }

  /** True when record `i` is a dead letter being re-delivered by the replay lane. */
  replay(i: number): boolean {
    return this.reason(i) >= 0;
  }

  /** Delivery attempts of record `i`, this one included. */
  attempts(i: number): number {
    return this.i32[this.recordI32(i) + DREC_ATTEMPTS_I32]!;
  }
}
