/**
 * String device id -> slot, found from the id's bytes (ingest thread): the frame reader leaves a known device's id
 * where it is in the frame, and this index finds its slot by hashing and comparing those bytes with the shared id
 * table's, so no string is made for a device the registry knows. Open addressing with linear probing over slot
 * numbers (-1: empty) and their ids' hashes, kept at most half full; the bytes compared are the id table's own.
 */
import { DEVID_LENGTH_MASK } from '../shm/layout.js';

const INITIAL_BUCKETS = 64;

/**
 * FNV-1a 32 of `bytes[start, end)` (the registry's hash of a string id's UTF-8 bytes), as a signed 32-bit integer
 * (`>>> 0` gives the unsigned value): a signed one is a small integer to V8, so a caller it is not inlined into gets it
 * without a heap number made for every hash.
 */
export function fnv1a32(bytes: Uint8Array, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193);
  return h | 0;
}

/** The index (see the module comment). */
export class IdBytesIndex {
  private slots = new Int32Array(INITIAL_BUCKETS).fill(-1);
  private hashes = new Int32Array(INITIAL_BUCKETS);
  private mask = INITIAL_BUCKETS - 1;
  private count = 0;

  /**
   * `table`: the id table's bytes (slot k's id at `k * stride`); `meta`: its meta words (the id's byte length in
   * DEVID_LENGTH_MASK).
   */
  constructor(
    private readonly table: Uint8Array,
    private readonly stride: number,
    private readonly meta: Int32Array,
  ) {}

  /** Slot of the string id whose UTF-8 bytes are `buf[at, at + len)` (FNV-1a `hash`), or -1. Allocation-free. */
  find(buf: Uint8Array, at: number, len: number, hash: number): number {
    const slots = this.slots;
    const hashes = this.hashes;
    const mask = this.mask;
    const h = hash | 0;
    for (let b = h & mask; ; b = (b + 1) & mask) {
      const slot = slots[b]!;
      // Never full (at most half), so an empty bucket ends every probe.
      if (slot < 0) return -1;
      if (hashes[b] === h && (this.meta[slot]! & DEVID_LENGTH_MASK) === len && this.same(buf, at, len, slot))
        return slot;
    }
  }

  /** Adds the string id of `slot` (published in the table, not in the index yet); may allocate to grow. */
  insert(slot: number, hash: number): void {
    if ((this.count + 1) * 2 > this.slots.length) this.grow();
    this.place(slot, hash | 0);
    this.count++;
  }

  /** Removes `slot` (its id hashing to `hash`). Backward-shift deletion keeps every probe chain unbroken. */
  remove(slot: number, hash: number): void {
    const mask = this.mask;
    let b = (hash | 0) & mask;
    for (; ; b = (b + 1) & mask) {
      if (this.slots[b]! < 0) return;
      if (this.slots[b] === slot) break;
    }
    this.slots[b] = -1;
    this.count--;
    let hole = b;
    for (let j = (b + 1) & mask; this.slots[j]! >= 0; j = (j + 1) & mask) {
      const home = this.hashes[j]! & mask;
      // The entry at j may fill the hole when the hole lies on its probe path (from its home bucket to j).
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        this.slots[hole] = this.slots[j]!;
        this.hashes[hole] = this.hashes[j]!;
        this.slots[j] = -1;
        hole = j;
      }
    }
  }

  private same(buf: Uint8Array, at: number, len: number, slot: number): boolean {
    const table = this.table;
    const base = slot * this.stride;
    for (let i = 0; i < len; i++) if (buf[at + i] !== table[base + i]) return false;
    return true;
  }

  private place(slot: number, h: number): void {
    const mask = this.mask;
    for (let b = h & mask; ; b = (b + 1) & mask) {
      if (this.slots[b]! < 0) {
        this.slots[b] = slot;
        this.hashes[b] = h;
        return;
      }
    }
  }

  private grow(): void {
    const oldSlots = this.slots;
    const oldHashes = this.hashes;
    this.slots = new Int32Array(oldSlots.length * 2).fill(-1);
    this.hashes = new Int32Array(oldSlots.length * 2);
    this.mask = oldSlots.length * 2 - 1;
    for (let b = 0; b < oldSlots.length; b++) if (oldSlots[b]! >= 0) this.place(oldSlots[b]!, oldHashes[b]!);
  }
}
