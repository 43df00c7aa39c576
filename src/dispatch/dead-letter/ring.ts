/**
 * The dispatcher's dead-letter ring: preallocated dispatch records (DREC_* layout) holding dead letters of every
 * downstream, with their status (DeadLetterStatus) and, for a parked trigger, the memory slot it stays in, until the
 * next batched flush writes them to the downstreams' dead-letter files.
 *
 * `put` copies a trigger in and allocates nothing. A flush writes every entry it can and keeps the others (those of
 * a downstream whose dead-letter files refuse writes) at the front, in order (`move`, `keep`), so the ring is a bump
 * buffer between flushes. Dispatcher thread only.
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_DL_STATUS_I32,
  DREC_DOWNSTREAM_I32,
  DREC_LOG_ORDINAL_F64,
  DREC_REASON_I32,
  DREC_SLOT_REF_I32,
  DREC_STRIDE_BYTES,
  DREC_STRIDE_F64,
  DREC_STRIDE_I32,
  DREC_TIME_NS_F64,
} from '../../shm/layout.js';
import { copyTrigger } from '../record.js';
import { checkNumber } from '../validate.js';

/** Preallocated dead-letter ring (see the module comment). */
export class DeadLetterRing {
  /** Records the ring holds. */
  readonly capacityRecords: number;
  /** Float64 view over the records. */
  readonly f64: Float64Array;
  /** Int32 view over the records. */
  readonly i32: Int32Array;
  private count = 0;
  private firstPutNs = 0;

  /** `capacityRecords` in [1, 2^20]. */
  constructor(capacityRecords: number) {
    checkNumber('deadLetterCapacityRecords', capacityRecords, 1, 1 << 20, true);
    const b = new ArrayBuffer(capacityRecords * DREC_STRIDE_BYTES);
    this.capacityRecords = capacityRecords;
    this.f64 = new Float64Array(b);
    this.i32 = new Int32Array(b);
  }

  /** Records waiting for the next flush. */
  get depth(): number {
    return this.count;
  }

  /** Time of the oldest record waiting, ns (meaningless when empty). */
  get oldestPutNs(): number {
    return this.firstPutNs;
  }

  /**
   * Copies the dispatch record at (f64, i32, baseF64, baseI32) in with its downstream, status and memory slot
   * (-1: none), stamped `nowNs`. Returns its index, or -1 (nothing stored) when the ring is full: the caller flushes
   * and puts again.
   */
  put(
    f64: Float64Array,
    i32: Int32Array,
    baseF64: number,
    baseI32: number,
    downstreamIndex: number,
    status: number,
    slotRef: number,
    nowNs: number,
  ): number {
    if (this.count === this.capacityRecords) return -1;
    const index = this.count;
    const f = index * DREC_STRIDE_F64;
    const i = index * DREC_STRIDE_I32;
    // The trigger's cells (its fence handle in Int32 cell 12), then the reason and attempts its file record keeps.
    copyTrigger(f64, i32, baseF64, baseI32, this.f64, this.i32, f, i);
    this.i32[i + DREC_REASON_I32] = i32[baseI32 + DREC_REASON_I32]!;
    this.i32[i + DREC_ATTEMPTS_I32] = i32[baseI32 + DREC_ATTEMPTS_I32]!;
    // Its place in the downstream's backlog log (-1: none): the log keeps the record until the entry is written.
    this.f64[f + DREC_LOG_ORDINAL_F64] = f64[baseF64 + DREC_LOG_ORDINAL_F64]!;
    this.f64[f + DREC_TIME_NS_F64] = nowNs;
    this.i32[i + DREC_DOWNSTREAM_I32] = downstreamIndex;
    this.i32[i + DREC_DL_STATUS_I32] = status;
    this.i32[i + DREC_SLOT_REF_I32] = slotRef;
    if (this.count === 0) this.firstPutNs = nowNs;
    this.count++;
    return index;
  }

  /** Status of entry `index`. */
  status(index: number): number {
    return this.i32[index * DREC_STRIDE_I32 + DREC_DL_STATUS_I32]!;
  }

  /** Changes the status of entry `index`. */
  setStatus(index: number, status: number): void {
    this.i32[index * DREC_STRIDE_I32 + DREC_DL_STATUS_I32] = status;
  }

  /** Empties the ring (after a flush). */
  clear(): void {
    this.count = 0;
  }

  /** Copies entry `from` over entry `to` (to <= from), while the caller compacts the ring. Allocation-free. */
  move(from: number, to: number): void {
    if (from === to) return;
    this.f64.copyWithin(to * DREC_STRIDE_F64, from * DREC_STRIDE_F64, (from + 1) * DREC_STRIDE_F64);
  }

  /** Keeps the first `count` entries (the caller moved those to keep to the front, in order) and drops the rest. */
  keep(count: number): void {
    this.count = count;
    if (count > 0) this.firstPutNs = this.f64[DREC_TIME_NS_F64]!;
  }
}
