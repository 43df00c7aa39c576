/**
 * Replay lane of one downstream: re-injects dead-lettered triggers from its durable file, in file order, behind live
 * traffic (the downstream asks only when its live queue is empty), through the same limiter and breaker.
 *
 * A window of up to `windowRecords` records past the durable cursor is loaded into preallocated slots; each is
 * PENDING, SENDING or DONE. The cursor advances over the DONE prefix and is committed durably (batched), so every
 * dead-lettered record is re-delivered once: a failed send puts the record back to PENDING, never into the file again.
 * Dispatcher thread only.
 */
import { DREC_STRIDE_BYTES, DREC_STRIDE_F64, DREC_STRIDE_I32 } from '../../shm/layout.js';
import type { DeadLetterFile } from './file.js';
import { checkNumber } from '../validate.js';

const EMPTY = 0;
const PENDING = 1;
const SENDING = 2;
const DONE = 3;

/** Replay lane (see the module comment). */
export class ReplayLane {
  /** The downstream's dead-letter file. */
  readonly file: DeadLetterFile;
  /** Records held in the window. */
  readonly windowRecords: number;
  /** Float64 view over the window's records. */
  readonly f64: Float64Array;
  /** Int32 view over the window's records. */
  readonly i32: Int32Array;
  private readonly bytes: Uint8Array;
  private readonly status: Uint8Array;
  private cursor: number;
  private loadedEnd: number;
  private sendFrom: number;
  /** Commit the cursor after it advanced this many records (and always on `commit(true)`). */
  private readonly commitEvery: number;

  /** `windowRecords` in [1, 65536]. */
  constructor(file: DeadLetterFile, windowRecords: number) {
    checkNumber('replayWindowRecords', windowRecords, 1, 65536, true);
    this.file = file;
    this.windowRecords = windowRecords;
    const buf = new ArrayBuffer(windowRecords * DREC_STRIDE_BYTES);
    this.f64 = new Float64Array(buf);
    this.i32 = new Int32Array(buf);
    this.bytes = new Uint8Array(buf);
    this.status = new Uint8Array(windowRecords);
    this.cursor = file.replayCursor;
    this.loadedEnd = this.cursor;
    this.sendFrom = this.cursor;
    this.commitEvery = Math.max(1, windowRecords >> 2);
  }

  /** Dead-lettered records not yet re-delivered (file records past the in-memory cursor). */
  get depth(): number {
    return this.file.recordCount - this.cursor;
  }

  /** Records past the durable cursor (what a restart would replay). */
  get durableDepth(): number {
    return this.file.recordCount - this.file.replayCursor;
  }

  /** Slot of file record `index` in the window. */
  slotOf(index: number): number {
    return index % this.windowRecords;
  }

  /** Float64 base of file record `index` in the window. */
  baseF64(index: number): number {
    return (index % this.windowRecords) * DREC_STRIDE_F64;
  }

  /** Int32 base of file record `index` in the window. */
  baseI32(index: number): number {
    return (index % this.windowRecords) * DREC_STRIDE_I32;
  }

  /** File index of the next PENDING record (loading more from the file if the window has room), or -1. */
  nextPending(): number {
    this.load();
    for (let idx = this.sendFrom; idx < this.loadedEnd; idx++) {
      // Records ahead of sendFrom are SENDING or DONE; the first PENDING one is next.
      if (this.status[idx % this.windowRecords] === PENDING) {
        this.sendFrom = idx;
        return idx;
      }
    }
    this.sendFrom = this.loadedEnd;
    return -1;
  }

  /** Marks a record as being sent. */
  markSending(index: number): void {
    this.status[index % this.windowRecords] = SENDING;
    if (index === this.sendFrom) this.sendFrom = index + 1;
  }

  /** Marks a record re-delivered (or given up for good) and advances the cursor over the done prefix. */
  markDone(index: number): void {
    this.status[index % this.windowRecords] = DONE;
    while (this.cursor < this.loadedEnd && this.status[this.cursor % this.windowRecords] === DONE) {
      this.status[this.cursor % this.windowRecords] = EMPTY;
      this.cursor++;
    }
    if (this.sendFrom < this.cursor) this.sendFrom = this.cursor;
    this.commit(false);
  }

  /** Puts a record back to PENDING after a failed send. */
  markFailed(index: number): void {
    this.status[index % this.windowRecords] = PENDING;
    if (index < this.sendFrom) this.sendFrom = index;
  }

  /** Writes the cursor durably when it moved (always when `force`, else after `commitEvery` records). */
  commit(force: boolean): void {
    const moved = this.cursor - this.file.replayCursor;
    if (moved > 0 && (force || moved >= this.commitEvery)) this.file.writeCursor(this.cursor);
  }

  private load(): void {
    const w = this.windowRecords;
    const total = this.file.recordCount;
    while (this.loadedEnd < total && this.loadedEnd - this.cursor < w) {
      const slot = this.loadedEnd % w;
      // Read up to the end of the window's storage (no wrap inside one read).
      const want = Math.min(total - this.loadedEnd, w - (this.loadedEnd - this.cursor), w - slot);
      const got = this.file.read(this.loadedEnd, want, this.bytes, slot * DREC_STRIDE_BYTES);
      if (got === 0) return;
      for (let k = 0; k < got; k++) this.status[slot + k] = PENDING;
      this.loadedEnd += got;
    }
  }
}
