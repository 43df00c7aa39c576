/**
 * The part of the device id table every ingest thread's registry shares: the registration lock, and an id -> slot
 * index over the table's own ids (open addressing with linear probing over `slot + 1` and the id's hash, never more
 * than half full). Each registry keeps a private cache in front of it (device-registry.ts); the index is read and
 * changed only under the lock, by a registration (a device no cache knows yet) or by the sweep taking a slot back.
 */
import { DEVID_KIND_NUMBER, DEVID_LENGTH_MASK, DEVID_LOCK_I32 } from '../shm/layout.js';

/** Spins on a held lock before parking, iterations. */
const LOCK_SPINS = 64;
/** Longest park on a held lock before looking again, ms (a holder never parks: its wake is only a nudge). */
const LOCK_PARK_MS = 1;

/** The id table's columns the index reads (views over one table). */
export interface IdColumns {
  /** Meta words (kind and byte length). */
  readonly meta: Int32Array;
  /** Numeric ids. */
  readonly numbers: Float64Array;
  /** UTF-8 id bytes, `stride` per slot. */
  readonly bytes: Uint8Array;
  /** Bytes per slot. */
  readonly stride: number;
}

/** The registration lock over the id table's header (Int32 cell DEVID_LOCK_I32). Usable on any thread. */
export class RegistrationLock {
  constructor(private readonly header: Int32Array) {}

  /** Takes the lock: spins a little, then parks until the holder lets go. */
  acquire(): void {
    const h = this.header;
    if (Atomics.compareExchange(h, DEVID_LOCK_I32, 0, 1) === 0) return;
    for (let i = 0; i < LOCK_SPINS; i++) {
      if (Atomics.load(h, DEVID_LOCK_I32) === 0 && Atomics.compareExchange(h, DEVID_LOCK_I32, 0, 1) === 0) return;
    }
    // Mark the lock contended (2) and park until it is released; a release of a contended lock wakes one waiter.
    while (Atomics.exchange(h, DEVID_LOCK_I32, 2) !== 0) Atomics.wait(h, DEVID_LOCK_I32, 2, LOCK_PARK_MS);
  }

  /** Lets the lock go (the caller holds it). */
  release(): void {
    if (Atomics.exchange(this.header, DEVID_LOCK_I32, 0) === 2) Atomics.notify(this.header, DEVID_LOCK_I32, 1);
  }
}

/** The shared id -> slot index (see the module comment). Call every method with the registration lock held. */
export class SharedIdIndex {
  private readonly mask: number;

  /** `slots` and `hashes`: the table's index columns (same power-of-two length); `ids`: its id columns. */
  constructor(
    private readonly slots: Int32Array,
    private readonly hashes: Int32Array,
    private readonly ids: IdColumns,
  ) {
    this.mask = slots.length - 1;
  }

  /** Slot of the numeric id `id` (hash `hash`), or -1. */
  findNumber(id: number, hash: number): number {
    const { meta, numbers } = this.ids;
    const mask = this.mask;
    for (let b = hash & mask; ; b = (b + 1) & mask) {
      const cell = this.slots[b]!;
      if (cell === 0) return -1;
      const slot = cell - 1;
      if (this.hashes[b] === (hash | 0) && meta[slot] === DEVID_KIND_NUMBER && numbers[slot] === id) return slot;
    }
  }

  /** Slot of the string id whose UTF-8 bytes are `buf[at, at + len)` (hash `hash`), or -1. */
  findBytes(buf: Uint8Array, at: number, len: number, hash: number): number {
    const { meta, bytes, stride } = this.ids;
    const mask = this.mask;
    for (let b = hash & mask; ; b = (b + 1) & mask) {
      const cell = this.slots[b]!;
      if (cell === 0) return -1;
      const slot = cell - 1;
      if (this.hashes[b] !== (hash | 0) || meta[slot] === DEVID_KIND_NUMBER) continue;
      if ((meta[slot]! & DEVID_LENGTH_MASK) !== len) continue;
      const base = slot * stride;
      let same = true;
      for (let i = 0; i < len && same; i++) same = buf[at + i] === bytes[base + i];
      if (same) return slot;
    }
  }

  /** Adds `slot` (its id published in the table, hashing to `hash`). The index never fills: it has twice the slots. */
  insert(slot: number, hash: number): void {
    const mask = this.mask;
    for (let b = hash & mask; ; b = (b + 1) & mask) {
      if (this.slots[b] === 0) {
        this.hashes[b] = hash | 0;
        this.slots[b] = slot + 1;
        return;
      }
    }
  }

  /** Removes `slot` (its id hashing to `hash`). Backward-shift deletion keeps every probe chain unbroken. */
  remove(slot: number, hash: number): void {
    const mask = this.mask;
    const slots = this.slots;
    const hashes = this.hashes;
    let b = hash & mask;
    for (; ; b = (b + 1) & mask) {
      if (slots[b] === 0) return;
      if (slots[b] === slot + 1) break;
    }
    slots[b] = 0;
    let hole = b;
    for (let j = (b + 1) & mask; slots[j] !== 0; j = (j + 1) & mask) {
      const home = hashes[j]! & mask;
      // The entry at j may fill the hole when the hole lies on its probe path (from its home bucket to j).
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        slots[hole] = slots[j]!;
        hashes[hole] = hashes[j]!;
        slots[j] = 0;
        hole = j;
      }
    }
  }
}
