/**
 * Bounded per-downstream queue that serves COMPLIANCE triggers before all others.
 *
 * Triggers are stored by copy in preallocated dispatch-record slots (one ArrayBuffer, Float64 and Int32 views, the
 * DREC_* layout); two deques of slot indices, one per class, share the slots. The last `reservedSlots` slots are
 * reachable only by COMPLIANCE triggers, so a compliance trigger finds room while other traffic fills the rest.
 * Within a class the order is FIFO; a failed batch may be put back at the front. Nothing allocates after construction.
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_ORDINAL_F64,
  DREC_REASON_I32,
  DREC_STRIDE_BYTES,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DREC_TIME_NS_F64,
  Lane,
} from '../shm/layout.js';
import { copyTrigger, laneOf } from './record.js';
import { checkNumber } from './validate.js';

/** Queue classes: index 0 serves first. */
const CLASS_COMPLIANCE = 0;
const CLASS_OTHER = 1;

/** A bounded two-class queue of trigger records (see the module comment). */
export class TriggerQueue {
  /** Slots in all. */
  readonly capacitySlots: number;
  /** Slots only COMPLIANCE triggers may use. */
  readonly reservedSlots: number;
  /** Float64 view over the slots (slot s starts at s * DREC_STRIDE_F64). */
  readonly f64: Float64Array;
  /** Int32 view over the slots (slot s starts at s * DREC_STRIDE_I32). */
  readonly i32: Int32Array;
  private readonly freeSlots: Int32Array;
  private freeTop: number;
  /** Per class: ring of slot indices. */
  private readonly rings: [Int32Array, Int32Array];
  private readonly heads = new Int32Array(2);
  private readonly sizes = new Int32Array(2);

  /** `capacitySlots` in [1, 2^22]; `reservedSlots` in [0, capacitySlots). */
  constructor(capacitySlots: number, reservedSlots: number) {
    checkNumber('queueCapacitySlots', capacitySlots, 1, 1 << 22, true);
    checkNumber('reservedComplianceSlots', reservedSlots, 0, capacitySlots - 1, true);
    this.capacitySlots = capacitySlots;
    this.reservedSlots = reservedSlots;
    const buffer = new ArrayBuffer(capacitySlots * DREC_STRIDE_BYTES);
    this.f64 = new Float64Array(buffer);
    this.i32 = new Int32Array(buffer);
    this.freeSlots = new Int32Array(capacitySlots);
    for (let i = 0; i < capacitySlots; i++) this.freeSlots[i] = capacitySlots - 1 - i;
    this.freeTop = capacitySlots;
    this.rings = [new Int32Array(capacitySlots), new Int32Array(capacitySlots)];
  }

  /** Triggers queued. */
  get size(): number {
    return this.sizes[0]! + this.sizes[1]!;
  }

  /** COMPLIANCE triggers queued. */
  get complianceSize(): number {
    return this.sizes[CLASS_COMPLIANCE]!;
  }

  /** True when a trigger of `lane` would find a slot. */
  hasRoom(lane: number): boolean {
    const used = this.capacitySlots - this.freeTop;
    return lane === Lane.COMPLIANCE ? this.freeTop > 0 : used < this.capacitySlots - this.reservedSlots;
  }

  /**
   * Copies a trigger record in at the back of its class. `timeNs` is stored as the enqueue time, `attempts` as the
   * delivery attempts so far. Returns false (nothing stored) when its class has no room.
   */
  push(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    timeNs: number,
    attempts: number,
  ): boolean {
    return this.insert(srcF64, srcI32, baseF64, baseI32, timeNs, attempts, false);
  }

  /** Like `push`, at the front of its class (a failed batch going back, in reverse order). */
  pushFront(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    timeNs: number,
    attempts: number,
  ): boolean {
    return this.insert(srcF64, srcI32, baseF64, baseI32, timeNs, attempts, true);
  }

  /** Slot of the next trigger to serve (COMPLIANCE first), or -1 when empty. */
  peekSlot(): number {
    for (let c = 0; c < 2; c++) {
      // COMPLIANCE (class 0) is looked at first.
      if (this.sizes[c]! > 0) return this.rings[c]![this.heads[c]!]!;
    }
    return -1;
  }

  /** Enqueue time of the oldest trigger at the head of either class, ns (Infinity when empty). */
  oldestTimeNs(): number {
    let t = Infinity;
    for (let c = 0; c < 2; c++) {
      if (this.sizes[c]! === 0) continue;
      const v = this.f64[this.rings[c]![this.heads[c]!]! * DREC_STRIDE_F64 + DREC_TIME_NS_F64]!;
      if (v < t) t = v;
    }
    return t;
  }

  /** Removes the head of class `c` (0 compliance, 1 other) if its enqueue time is at or before `cutoffNs`. */
  popExpiredSlot(c: number, cutoffNs: number): number {
    if (this.sizes[c]! === 0) return -1;
    const slot = this.rings[c]![this.heads[c]!]!;
    if (this.f64[slot * DREC_STRIDE_F64 + DREC_TIME_NS_F64]! > cutoffNs) return -1;
    this.unlinkHead(c);
    return slot;
  }

  /** Removes the next trigger to serve and returns its slot (valid until `freeSlot`), or -1 when empty. */
  popSlot(): number {
    for (let c = 0; c < 2; c++) {
      if (this.sizes[c]! === 0) continue;
      const slot = this.rings[c]![this.heads[c]!]!;
      this.unlinkHead(c);
      return slot;
    }
    return -1;
  }

  /** Returns a popped slot to the free list. */
  freeSlot(slot: number): void {
    this.freeSlots[this.freeTop++] = slot;
  }

  private unlinkHead(c: number): void {
    this.heads[c] = (this.heads[c]! + 1) % this.capacitySlots;
    this.sizes[c] = this.sizes[c]! - 1;
  }

  private insert(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    timeNs: number,
    attempts: number,
    front: boolean,
  ): boolean {
    const lane = laneOf(srcI32, baseI32);
    if (!this.hasRoom(lane)) return false;
    const slot = this.freeSlots[--this.freeTop]!;
    const f = slot * DREC_STRIDE_F64;
    const i = slot * DREC_STRIDE_I32;
    copyTrigger(srcF64, srcI32, baseF64, baseI32, this.f64, this.i32, f, i);
    this.f64[f + DREC_TIME_NS_F64] = timeNs;
    this.f64[f + DREC_ORDINAL_F64] = -1;
    this.i32[i + DREC_ATTEMPTS_I32] = attempts;
    this.i32[i + DREC_REASON_I32] = -1;
    const c = lane === Lane.COMPLIANCE ? CLASS_COMPLIANCE : CLASS_OTHER;
    const ring = this.rings[c]!;
    const n = this.capacitySlots;
    if (front) {
      this.heads[c] = (this.heads[c]! - 1 + n) % n;
      ring[this.heads[c]!] = slot;
    } else {
      ring[(this.heads[c]! + this.sizes[c]!) % n] = slot;
    }
    this.sizes[c] = this.sizes[c]! + 1;
    return true;
  }
}
