/**
 * Single-producer single-consumer ring of fixed-stride records over a SharedArrayBuffer.
 *
 * The region (see `allocateRingRegion`) starts with a header whose counters sit on separate cache lines: the write
 * sequence (producer only), the read sequence (consumer only) and one "sleeping" flag per side. Sequences increase
 * monotonically and wrap at 2^32; a slot is `seq & mask`, and the depth is `(write - read) | 0`, exact for any
 * capacity up to 2^24.
 *
 * Records are written in place through the `f64` / `i32` views (struct-of-views, never objects): the producer claims
 * slots, fills them, and publishes the whole batch with one `Atomics.store`. It notifies only when the consumer has
 * said it sleeps. The consumer mirrors that on the read side.
 *
 * Threads: any thread may wrap a region, but at any moment exactly one thread acts as producer and one as consumer.
 * The producer role may move between threads only with a happens-before edge between them (a message or an atomic
 * handoff); the same holds for the consumer role (the containment pool hands a shard's ring from worker to worker this
 * way: at most one task per shard is in flight).
 *
 * Nothing here allocates after construction.
 */
import {
  LAYOUT_VERSION,
  RING_CAPACITY_I32,
  RING_CONSUMER_SLEEPING_I32,
  RING_HEADER_BYTES,
  RING_KIND_I32,
  RING_MAGIC,
  RING_MAGIC_I32,
  RING_PRODUCER_SLEEPING_I32,
  RING_READ_SEQ_I32,
  RING_RESERVED_SLOTS_I32,
  RING_STRIDE_I32,
  RING_VERSION_I32,
  RING_WRITE_SEQ_I32,
  type RingKind,
} from './layout.js';

/** Atomics.waitAsync (ES2024; Node has it, the ES2023 typings do not). */
export const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      cells: Int32Array,
      index: number,
      value: number,
      timeoutMs: number,
    ): { async: false; value: string } | { async: true; value: Promise<string> };
  }
).waitAsync.bind(Atomics);

/** Busy-poll iterations before a waiting side parks in Atomics.wait. */
const DEFAULT_SPIN_ITERATIONS = 200;

/** A view of one ring region; construct one per thread with `SpscRing.wrap(buffer)`. */
export class SpscRing {
  /** The shared region. */
  readonly buffer: SharedArrayBuffer;
  /** Number of record slots (a power of two). */
  readonly capacitySlots: number;
  /** `capacitySlots - 1`: slot = seq & mask. */
  readonly mask: number;
  /** Bytes per record. */
  readonly strideBytes: number;
  /** Float64 cells per record. */
  readonly strideF64: number;
  /** Int32 cells per record. */
  readonly strideI32: number;
  /** Slots at the end reachable only by the COMPLIANCE lane (0 when the ring has no reserved slice). */
  readonly reservedSlots: number;
  /** What the records are. */
  readonly kind: RingKind;
  /** Float64 view over the records (record r starts at `slot * strideF64`). */
  readonly f64: Float64Array;
  /** Int32 view over the records (record r starts at `slot * strideI32`). */
  readonly i32: Int32Array;
  /** Int32 view over the header (counters and description). */
  readonly header: Int32Array;

  /** Producer side: last read sequence seen; re-read only when the ring looks full (Disruptor's cached gate). */
  private cachedReadSeq: number;
  /** Producer side: records claimed but not yet published. */
  private pendingSlots = 0;
  /**
   * True for a ring with no consumer (a worker's warm-up writes triggers nobody reads): a producer that finds it full
   * empties it instead of waiting for a consumer that does not exist. Set with `markScratch()`.
   */
  scratch = false;

  private constructor(buffer: SharedArrayBuffer, expectedKind?: RingKind) {
    if (!(buffer instanceof SharedArrayBuffer)) throw new TypeError('ring buffer must be a SharedArrayBuffer');
    if (buffer.byteLength < RING_HEADER_BYTES) throw new RangeError('ring buffer is smaller than a ring header');
    const header = new Int32Array(buffer, 0, RING_HEADER_BYTES / 4);
    if (header[RING_MAGIC_I32] !== RING_MAGIC) throw new RangeError('ring buffer has no ring header (bad magic)');
    if (header[RING_VERSION_I32] !== LAYOUT_VERSION) {
      throw new RangeError(`ring layout version ${String(header[RING_VERSION_I32])} != ${LAYOUT_VERSION}`);
    }
    const capacitySlots = header[RING_CAPACITY_I32]!;
    const strideBytes = header[RING_STRIDE_I32]!;
    const kind = header[RING_KIND_I32]! as RingKind;
    if (expectedKind !== undefined && kind !== expectedKind) {
      throw new RangeError(`ring holds kind ${String(kind)}, expected ${String(expectedKind)}`);
    }
    if (capacitySlots <= 0 || (capacitySlots & (capacitySlots - 1)) !== 0) {
      throw new RangeError(`ring capacity ${String(capacitySlots)} is not a power of two`);
    }
    if (buffer.byteLength !== RING_HEADER_BYTES + capacitySlots * strideBytes) {
      throw new RangeError('ring buffer size does not match its header');
    }
    this.buffer = buffer;
    this.header = header;
    this.capacitySlots = capacitySlots;
    this.mask = capacitySlots - 1;
    this.strideBytes = strideBytes;
    this.strideF64 = strideBytes / 8;
    this.strideI32 = strideBytes / 4;
    this.reservedSlots = header[RING_RESERVED_SLOTS_I32]!;
    this.kind = kind;
    this.f64 = new Float64Array(buffer, RING_HEADER_BYTES, capacitySlots * this.strideF64);
    this.i32 = new Int32Array(buffer, RING_HEADER_BYTES, capacitySlots * this.strideI32);
    this.cachedReadSeq = Atomics.load(header, RING_READ_SEQ_I32);
  }

  /** Wraps an allocated ring region; checks magic, version, size and (optionally) the record kind. */
  static wrap(buffer: SharedArrayBuffer, expectedKind?: RingKind): SpscRing {
    return new SpscRing(buffer, expectedKind);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Either side
  // ------------------------------------------------------------------------------------------------------------

  /** Published depth (records written and not yet released): two atomic loads. */
  depth(): number {
    return (Atomics.load(this.header, RING_WRITE_SEQ_I32) - Atomics.load(this.header, RING_READ_SEQ_I32)) | 0;
  }

  /** Fill fraction in [0, 1]: published depth / capacity, two atomic loads. */
  fill(): number {
    return this.depth() / this.capacitySlots;
  }

  /** The published write sequence. */
  writeSeq(): number {
    return Atomics.load(this.header, RING_WRITE_SEQ_I32);
  }

  /** The released read sequence. */
  readSeq(): number {
    return Atomics.load(this.header, RING_READ_SEQ_I32);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Producer side
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Depth as the producer sees it, claimed-but-unpublished slots included, against the cached read sequence.
   * May overstate the depth (the consumer may have released since); `refreshDepth()` re-reads the read sequence.
   */
  producerDepth(): number {
    return (this.header[RING_WRITE_SEQ_I32]! + this.pendingSlots - this.cachedReadSeq) | 0;
  }

  /** Re-reads the consumer's read sequence and returns the producer's exact depth. */
  refreshDepth(): number {
    this.cachedReadSeq = Atomics.load(this.header, RING_READ_SEQ_I32);
    return this.producerDepth();
  }

  /** Makes this a scratch ring (see `scratch`): a full ring is emptied by its producer, never waited on. */
  markScratch(): this {
    this.scratch = true;
    return this;
  }

  /** Free slots for the producer, re-reading the consumer only when the cached view says fewer than `wantedSlots`. */
  freeSlots(wantedSlots = 1): number {
    let free = this.capacitySlots - this.producerDepth();
    if (free < wantedSlots) free = this.capacitySlots - this.refreshDepth();
    return free;
  }

  /**
   * Claims the next slot and returns its index (multiply by `strideF64` / `strideI32` for the record's base).
   * The caller must have checked `freeSlots()`; claiming into a full ring overwrites unread records.
   */
  claim(): number {
    const slot = (this.header[RING_WRITE_SEQ_I32]! + this.pendingSlots) & this.mask;
    this.pendingSlots++;
    return slot;
  }

  /** Records claimed and not yet published. */
  pendingCount(): number {
    return this.pendingSlots;
  }

  /** Wakes a consumer parked in `waitForData` without publishing anything (it then reads whatever told it to stop). */
  wakeConsumer(): void {
    Atomics.notify(this.header, RING_WRITE_SEQ_I32);
  }

  /**
   * Forgets every claimed, unpublished slot (producer side): what a producer whose batch failed part-way must do, so
   * that its next publish does not expose records it abandoned. Returns how many were dropped.
   */
  discardPending(): number {
    const n = this.pendingSlots;
    this.pendingSlots = 0;
    return n;
  }

  /**
   * Publishes every claimed slot with one `Atomics.store`, then wakes the consumer if it said it sleeps.
   * Returns the number of records published.
   */
  publish(): number {
    const n = this.pendingSlots;
    if (n === 0) return 0;
    const w = (this.header[RING_WRITE_SEQ_I32]! + n) | 0;
    this.pendingSlots = 0;
    // The store is sequentially consistent: a consumer that set its flag before our flag load below will see it.
    Atomics.store(this.header, RING_WRITE_SEQ_I32, w);
    if (Atomics.load(this.header, RING_CONSUMER_SLEEPING_I32) !== 0) {
      Atomics.notify(this.header, RING_WRITE_SEQ_I32);
    }
    return n;
  }

  /**
   * Blocks the producer until at least `wantedSlots` are free or `timeoutMs` passes; returns the free slot count.
   * Spins `spinIterations` times first. Only for hops allowed to block (never the ingest edge).
   */
  waitForSpace(wantedSlots: number, timeoutMs: number, spinIterations = DEFAULT_SPIN_ITERATIONS): number {
    let free = this.freeSlots(wantedSlots);
    for (let i = 0; free < wantedSlots && i < spinIterations; i++) free = this.freeSlots(wantedSlots);
    if (free >= wantedSlots) return free;
    const observed = Atomics.load(this.header, RING_READ_SEQ_I32);
    Atomics.store(this.header, RING_PRODUCER_SLEEPING_I32, 1);
    // Re-check after raising the flag: a release between the check above and the flag would otherwise be missed.
    free = this.freeSlots(wantedSlots);
    if (free < wantedSlots) Atomics.wait(this.header, RING_READ_SEQ_I32, observed, timeoutMs);
    Atomics.store(this.header, RING_PRODUCER_SLEEPING_I32, 0);
    return this.freeSlots(wantedSlots);
  }

  /**
   * Resolves once at least `wantedSlots` are free or `timeoutMs` passes, without blocking the thread (Atomics.waitAsync:
   * the event loop keeps running meanwhile); resolves to the free slot count. Publish what is claimed first.
   */
  async waitForSpaceAsync(wantedSlots: number, timeoutMs: number): Promise<number> {
    let free = this.freeSlots(wantedSlots);
    if (free >= wantedSlots) return free;
    const observed = Atomics.load(this.header, RING_READ_SEQ_I32);
    Atomics.store(this.header, RING_PRODUCER_SLEEPING_I32, 1);
    // Re-check after raising the flag (see waitForSpace).
    free = this.freeSlots(wantedSlots);
    if (free < wantedSlots) {
      const waited = waitAsync(this.header, RING_READ_SEQ_I32, observed, timeoutMs);
      if (waited.async) await waited.value;
    }
    Atomics.store(this.header, RING_PRODUCER_SLEEPING_I32, 0);
    return this.freeSlots(wantedSlots);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Consumer side
  // ------------------------------------------------------------------------------------------------------------

  /** Records published and not yet released. */
  available(): number {
    return this.depth();
  }

  /** Slot index of the record `offset` places after the read sequence. */
  readSlot(offset: number): number {
    return (this.header[RING_READ_SEQ_I32]! + offset) & this.mask;
  }

  /** Slot index of an absolute sequence number (for tasks that carry ring positions). */
  slotOf(seq: number): number {
    return seq & this.mask;
  }

  /** Releases `count` records to the producer with one `Atomics.store`, waking it if it said it sleeps. */
  release(count: number): void {
    if (count <= 0) return;
    const r = (this.header[RING_READ_SEQ_I32]! + count) | 0;
    Atomics.store(this.header, RING_READ_SEQ_I32, r);
    if (Atomics.load(this.header, RING_PRODUCER_SLEEPING_I32) !== 0) {
      Atomics.notify(this.header, RING_READ_SEQ_I32);
    }
  }

  /**
   * Resolves once a record is available or `timeoutMs` passes, without blocking the thread (Atomics.waitAsync: the
   * event loop keeps running meanwhile); resolves to the available count.
   */
  async waitForDataAsync(timeoutMs: number): Promise<number> {
    const n = this.available();
    if (n > 0) return n;
    const observed = Atomics.load(this.header, RING_WRITE_SEQ_I32);
    Atomics.store(this.header, RING_CONSUMER_SLEEPING_I32, 1);
    // Re-check after raising the flag (see publish()).
    if (((observed - Atomics.load(this.header, RING_READ_SEQ_I32)) | 0) === 0) {
      const waited = waitAsync(this.header, RING_WRITE_SEQ_I32, observed, timeoutMs);
      if (waited.async) await waited.value;
    }
    Atomics.store(this.header, RING_CONSUMER_SLEEPING_I32, 0);
    return this.available();
  }

  /**
   * Blocks the consumer until a record is available or `timeoutMs` passes; returns the available count, which may be
   * 0 before the time is up (a wake the producer meant for an earlier wait): callers that need a record wait again.
   * Spins `spinIterations` times, then parks in `Atomics.wait` on the write sequence.
   */
  waitForData(timeoutMs: number, spinIterations = DEFAULT_SPIN_ITERATIONS): number {
    let n = this.available();
    for (let i = 0; n === 0 && i < spinIterations; i++) n = this.available();
    if (n > 0) return n;
    const observed = Atomics.load(this.header, RING_WRITE_SEQ_I32);
    Atomics.store(this.header, RING_CONSUMER_SLEEPING_I32, 1);
    // Re-check after raising the flag (see publish()).
    if (((observed - Atomics.load(this.header, RING_READ_SEQ_I32)) | 0) === 0) {
      Atomics.wait(this.header, RING_WRITE_SEQ_I32, observed, timeoutMs);
    }
    Atomics.store(this.header, RING_CONSUMER_SLEEPING_I32, 0);
    return this.available();
  }
}
