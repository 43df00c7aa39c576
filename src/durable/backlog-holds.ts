/**
 * Positions of records a backlog log holds (BacklogLog.hold): at most `capacity` at once, each in a cell of its own
 * from taking to release (the cell number is the hold's name), and in the order they were taken, so the oldest one
 * still held (the lowest position: a log loads in file order) is known at once.
 *
 * The order is a ring of cell numbers, twice the capacity; a released hold leaves a gap in it, passed over once the
 * holds before it are released too. A ring full of gaps (one old hold kept while many later ones come and go) is
 * compacted in place, so `capacity` holds can always be taken, whatever the order of their release. A hold whose
 * record was copied elsewhere (`move`: a set-aside file) keeps its cell but leaves the ring: it no longer bounds the
 * log.
 *
 * Dispatcher thread only; allocation-free after construction.
 */

const GAP = -1;
const MOVED = -1;

/** Held positions of a backlog log (see the module comment). */
export class BacklogHolds {
  /** Holds taken and not released. */
  count = 0;
  readonly capacity: number;
  /** Per cell: the held record's segment and offset. */
  private readonly cellSeg: Float64Array;
  private readonly cellOff: Float64Array;
  /** Per cell: its place in the ring (a counter, not wrapped), or MOVED. */
  private readonly cellPlace: Float64Array;
  /** Per cell: 1 while held. */
  private readonly taken: Uint8Array;
  private readonly free: Int32Array;
  private freeTop: number;
  /** Cell numbers in the order taken, or GAP; places bottom .. top - 1 (counters, not wrapped) are in use. */
  private readonly ring: Int32Array;
  private readonly ringMask: number;
  private bottom = 0;
  private top = 0;

  /** `capacity`, a power of two: holds at most at once. */
  constructor(capacity: number) {
    this.capacity = capacity;
    this.cellSeg = new Float64Array(capacity);
    this.cellOff = new Float64Array(capacity);
    this.cellPlace = new Float64Array(capacity);
    this.taken = new Uint8Array(capacity);
    this.free = new Int32Array(capacity);
    for (let k = 0; k < capacity; k++) this.free[k] = capacity - 1 - k;
    this.freeTop = capacity;
    this.ring = new Int32Array(capacity * 2).fill(GAP);
    this.ringMask = capacity * 2 - 1;
  }

  /** Holds the record at (seg, off), at or after every position held before; returns its cell, or -1 when full. */
  take(seg: number, off: number): number {
    if (this.freeTop === 0) return -1;
    if (this.top - this.bottom > this.ringMask) this.compact();
    const cell = this.free[--this.freeTop]!;
    this.cellSeg[cell] = seg;
    this.cellOff[cell] = off;
    this.cellPlace[cell] = this.top;
    this.taken[cell] = 1;
    this.ring[this.top & this.ringMask] = cell;
    this.top++;
    this.count++;
    return cell;
  }

  /** Releases `cell` (held). */
  release(cell: number): void {
    const place = this.cellPlace[cell]!;
    if (place !== MOVED) this.ring[place & this.ringMask] = GAP;
    this.taken[cell] = 0;
    this.free[this.freeTop++] = cell;
    this.count--;
    this.passGaps();
  }

  /**
   * The record held in `cell` now lies at (seg, off) outside the log: `cell` stays held, but leaves the order (if it
   * was still there), so it no longer bounds the log (`oldest`).
   */
  move(cell: number, seg: number, off: number): void {
    const place = this.cellPlace[cell]!;
    if (place !== MOVED) this.ring[place & this.ringMask] = GAP;
    this.cellPlace[cell] = MOVED;
    this.cellSeg[cell] = seg;
    this.cellOff[cell] = off;
    this.passGaps();
  }

  /**
   * Writes into `out` the cells of the ring, oldest first, up to the first one whose segment is `beforeSeg` or later
   * (or `out` is full); returns how many.
   */
  inOrderBefore(beforeSeg: number, out: Int32Array): number {
    let n = 0;
    for (let p = this.bottom; p < this.top && n < out.length; p++) {
      const cell = this.ring[p & this.ringMask]!;
      if (cell === GAP) continue;
      if (this.cellSeg[cell]! >= beforeSeg) break;
      out[n++] = cell;
    }
    return n;
  }

  private passGaps(): void {
    while (this.bottom !== this.top && this.ring[this.bottom & this.ringMask] === GAP) this.bottom++;
  }

  /** Segment of the record held in `cell`. */
  segOf(cell: number): number {
    return this.cellSeg[cell]!;
  }

  /** Offset of the record held in `cell`. */
  offOf(cell: number): number {
    return this.cellOff[cell]!;
  }

  /** True while `cell` is held. */
  isHeld(cell: number): boolean {
    return this.taken[cell] === 1;
  }

  /** The cell of the oldest hold, or -1 when none is held. */
  oldest(): number {
    return this.bottom === this.top ? -1 : this.ring[this.bottom & this.ringMask]!;
  }

  /** Releases every hold (moved ones too). */
  clear(): void {
    for (let p = this.bottom; p < this.top; p++) this.ring[p & this.ringMask] = GAP;
    this.taken.fill(0);
    for (let k = 0; k < this.capacity; k++) this.free[k] = this.capacity - 1 - k;
    this.freeTop = this.capacity;
    this.bottom = this.top;
    this.count = 0;
  }

  /**
   * Moves the holds down over the gaps between them, keeping their order (the ring is full: top - bottom is twice the
   * capacity).
   */
  private compact(): void {
    let to = this.bottom;
    for (let p = this.bottom; p < this.top; p++) {
      const cell = this.ring[p & this.ringMask]!;
      if (cell === GAP) continue;
      this.ring[p & this.ringMask] = GAP;
      this.ring[to & this.ringMask] = cell;
      this.cellPlace[cell] = to;
      to++;
    }
    this.top = to;
  }
}
