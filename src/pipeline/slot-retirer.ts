/**
 * The dispatcher thread's half of device expiry: it takes the retire markers containment writes behind an expired
 * device's last trigger, and frees the device's slot (RETIRING -> FREE, see DeviceLife in shm/layout.ts) once every
 * downstream has settled that device's triggers: nothing queued, parked, in flight or in a backlog log, and no dead
 * letter of it waiting in the dead-letter ring (encoded under the slot's id only when the ring is flushed). Until then
 * the slot keeps its id, so a trigger still waiting is always named after the device that produced it.
 * Allocation-free after construction, except reading the id of a slot it frees.
 */
import type { DeviceIdReader } from '../ingest/device-registry.js';

/** Retire markers waiting for their device's triggers to settle (dispatcher thread). */
export class SlotRetirer {
  /** Per slot: the life epoch its newest marker retires, or -1. */
  private readonly pendingEpoch: Int32Array;
  /** Slots with a marker waiting (the first `count`). */
  private readonly pending: Int32Array;
  private count = 0;
  private readonly ids: DeviceIdReader;
  /** Slots freed so far. */
  freed = 0;
  /** Markers whose device was revived (or expired again) before it could be freed. */
  superseded = 0;

  /** Over `maxDevices` slots of the id table `ids` reads. */
  constructor(maxDevices: number, ids: DeviceIdReader) {
    this.pendingEpoch = new Int32Array(maxDevices).fill(-1);
    this.pending = new Int32Array(maxDevices);
    this.ids = ids;
  }

  /** Markers waiting. */
  get waiting(): number {
    return this.count;
  }

  /** A retire marker for `slot` and life epoch `epoch` (a newer one replaces an older one still waiting). */
  note(slot: number, epoch: number): void {
    if (!(slot >= 0 && slot < this.pendingEpoch.length)) return;
    if (this.pendingEpoch[slot]! < 0) this.pending[this.count++] = slot;
    else this.superseded++;
    this.pendingEpoch[slot] = epoch;
  }

  /**
   * Frees every waiting slot whose device `settled` says has nothing left at any downstream; `onFreed(id)` gets the id
   * the freed slot held (read before the free: the ingest thread may reuse the slot at once after it). A device
   * revived since its marker keeps its slot (the free fails).
   */
  pass(settled: (slot: number) => boolean, onFreed: (id: string | number | undefined) => void): void {
    for (let k = 0; k < this.count;) {
      const slot = this.pending[k]!;
      if (!settled(slot)) {
        k++;
        continue;
      }
      const epoch = this.pendingEpoch[slot]!;
      const id = this.ids.deviceIdOf(slot);
      if (this.ids.free(slot, epoch)) {
        this.freed++;
        onFreed(id);
      } else {
        this.superseded++;
      }
      this.pendingEpoch[slot] = -1;
      this.pending[k] = this.pending[--this.count]!;
    }
  }
}
