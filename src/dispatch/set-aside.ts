/**
 * Backlog records set aside: those a downstream loaded from its backlog log while their device was parked at a dead
 * letter (or already had records set aside). Held in memory behind the parked trigger, they would let one device the
 * downstream keeps refusing fill the memory every device shares, and stop the log's loading for all of them. Instead
 * each is held in the log (BacklogLog.hold: the durable cursor stays at or before it, so a crash gives it back) and
 * read again once its device goes on, in the order it was first loaded, a few at a time (Downstream.reloadSetAside), so
 * a device refused again is parked again with the rest still in the log. When the log holds as many as it can, the
 * next record waits in memory and the loading with it (Downstream.stashedSlot).
 *
 * Per device, a chain of the log's holds (each hold a cell of its own until released), linked by hold.
 *
 * Dispatcher thread only; allocation-free after construction.
 */

const NONE = -1;

/** Per-device chains of set-aside backlog holds (see the module comment). */
export class SetAsideChains {
  /** Records set aside, all devices. */
  count = 0;
  private readonly first: Int32Array;
  private readonly last: Int32Array;
  /** By hold: the next hold of its chain, or NONE. */
  private readonly next: Int32Array;
  private readonly cellMask: number;
  /** Devices with a chain, the first `waitingCount` cells; `waitingAt[device]` is a device's index there, or NONE. */
  private readonly waiting: Int32Array;
  private readonly waitingAt: Int32Array;
  private waitingCount = 0;

  /** `maxDevices` device slots; `holds`, a power of two, is how many the backlog log holds at most. */
  constructor(maxDevices: number, holds: number) {
    this.first = new Int32Array(maxDevices).fill(NONE);
    this.last = new Int32Array(maxDevices).fill(NONE);
    this.next = new Int32Array(holds).fill(NONE);
    this.cellMask = holds - 1;
    this.waiting = new Int32Array(maxDevices);
    this.waitingAt = new Int32Array(maxDevices).fill(NONE);
  }

  /** True when `device` has records set aside. */
  has(device: number): boolean {
    return this.first[device]! !== NONE;
  }

  /** Sets aside the record held as `hold` (BacklogLog.hold), behind `device`'s others. */
  add(device: number, hold: number): void {
    this.next[hold & this.cellMask] = NONE;
    const tail = this.last[device]!;
    if (tail === NONE) {
      this.first[device] = hold;
      this.waitingAt[device] = this.waitingCount;
      this.waiting[this.waitingCount++] = device;
    } else {
      this.next[tail & this.cellMask] = hold;
    }
    this.last[device] = hold;
    this.count++;
  }

  /** The first hold set aside for `device`, or -1. */
  peek(device: number): number {
    return this.first[device]!;
  }

  /** The hold set aside after `hold` in its device's chain, or -1. */
  after(hold: number): number {
    return this.next[hold & this.cellMask]!;
  }

  /** Takes the first hold of `device`'s chain (it has one). */
  shift(device: number): number {
    const hold = this.first[device]!;
    const next = this.next[hold & this.cellMask]!;
    this.first[device] = next;
    this.count--;
    if (next === NONE) {
      this.last[device] = NONE;
      // Out of the waiting list: the last device listed takes its cell.
      const at = this.waitingAt[device]!;
      const moved = this.waiting[--this.waitingCount]!;
      this.waiting[at] = moved;
      this.waitingAt[moved] = at;
      this.waitingAt[device] = NONE;
    }
    return hold;
  }

  /** Devices with records set aside. */
  get devices(): number {
    return this.waitingCount;
  }

  /**
   * The `k`th device with records set aside (k < devices). Taking a device's last record moves the last device listed
   * into its place, so a caller that may do so walks k from the end down.
   */
  deviceAt(k: number): number {
    return this.waiting[k]!;
  }
}
