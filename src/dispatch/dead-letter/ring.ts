/**
 * The dispatcher's dead-letter ring: preallocated dispatch records (DREC_* layout) holding triggers that were
 * refused, expired or undeliverable, with the reason, until the next batched flush to the durable files.
 *
 * `put` copies a trigger in and allocates nothing. A flush empties the ring completely (see `DeadLetterStore`), so
 * the ring is a bump buffer between flushes. Runs on the dispatcher thread.
 */
import {
  DREC_ATTEMPTS_I32,
  DREC_DOWNSTREAM_I32,
  DREC_ORDINAL_F64,
  DREC_REASON_I32,
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
  /** Byte view over the records. */
  readonly bytes: Uint8Array;
  private count = 0;
  private firstPutNs = 0;

  /** `capacityRecords` in [1, 2^20]. `buffer` may be supplied (e.g. a SharedArrayBuffer) of the right size. */
  constructor(capacityRecords: number, buffer?: ArrayBufferLike) {
    checkNumber('deadLetterCapacityRecords', capacityRecords, 1, 1 << 20, true);
    const bytes = capacityRecords * DREC_STRIDE_BYTES;
    const b = buffer ?? new ArrayBuffer(bytes);
    if (b.byteLength !== bytes) throw new RangeError(`dead-letter buffer must be ${bytes} bytes, got ${b.byteLength}`);
    this.capacityRecords = capacityRecords;
    this.f64 = new Float64Array(b);
    this.i32 = new Int32Array(b);
    this.bytes = new Uint8Array(b);
  }

  /** Records waiting for the next flush. */
  get depth(): number {
    return this.count;
  }

  /** True when no record fits until the next flush. */
  get isFull(): boolean {
    return this.count === this.capacityRecords;
  }

  /** Time of the oldest record waiting, ns (meaningless when empty). */
  get oldestPutNs(): number {
    return this.firstPutNs;
  }

  /**
   * Copies a trigger record in with its downstream, reason and attempts, stamped `nowNs`. Returns false (nothing
   * stored) when the ring is full: the caller flushes and puts again.
   */
  put(
    srcF64: Float64Array,
    srcI32: Int32Array,
    baseF64: number,
    baseI32: number,
    downstreamIndex: number,
    reason: number,
    attempts: number,
    nowNs: number,
  ): boolean {
    if (this.count === this.capacityRecords) return false;
    const f = this.count * DREC_STRIDE_F64;
    const i = this.count * DREC_STRIDE_I32;
    copyTrigger(srcF64, srcI32, baseF64, baseI32, this.f64, this.i32, f, i);
    this.f64[f + DREC_TIME_NS_F64] = nowNs;
    this.f64[f + DREC_ORDINAL_F64] = -1;
    this.i32[i + DREC_DOWNSTREAM_I32] = downstreamIndex;
    this.i32[i + DREC_REASON_I32] = reason;
    this.i32[i + DREC_ATTEMPTS_I32] = attempts;
    if (this.count === 0) this.firstPutNs = nowNs;
    this.count++;
    return true;
  }

  /** Empties the ring (after a successful flush). */
  clear(): void {
    this.count = 0;
  }
}
