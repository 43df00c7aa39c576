/**
 * Queries about what is where, answered from the shared device state while the pipeline runs: which fences a device
 * is inside now (with the time each stay began), which devices are inside a fence now, and a device's last accepted
 * position. Each device is read under its write version (the seqlock the checkpoint uses), so an answer never mixes
 * two updates of one device; devices are read one after another, so an answer about many devices is a sequence of
 * per-device snapshots, not one instant.
 *
 * Main thread. A query scans the device slots (up to `maxDevices`): fine for an operator or an application asking now
 * and then, not meant for a hot path.
 */
import type { FenceStore } from '../fences/store.js';
import type { DeviceState } from '../fences/device-state.js';
import type { DeviceIdReader } from '../ingest/device-registry.js';
import {
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DeviceLife,
  ENTRY_FENCE_I32,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
} from '../shm/layout.js';

/** One stay of a device in a fence. */
export interface FenceStay {
  /** The fence's id. */
  fenceId: string;
  /** When the stay began (event time of the first ping inside), epoch ms. */
  sinceMs: number;
  /** Whether its DWELL has been sent. */
  dwellFired: boolean;
}

/** What the router knows about a device now. */
export interface DeviceNow {
  /** The device's id, as it sent it. */
  deviceId: string | number;
  /** Event time of its last accepted ping, epoch ms. */
  lastEventMs: number;
  /** Position of that ping. */
  lat: number;
  lon: number;
  /** The fences it is inside (ENTER sent, no EXIT yet), by fence id. */
  inside: FenceStay[];
}

/** A device inside a fence, with when its stay began. */
export interface FenceOccupant {
  deviceId: string | number;
  sinceMs: number;
}

/** Reads devices' state for queries (see the module comment). */
export class StateQueries {
  private readonly state: DeviceState;
  private readonly ids: DeviceIdReader;
  private readonly store: () => FenceStore;

  constructor(state: DeviceState, ids: DeviceIdReader, store: () => FenceStore) {
    this.state = state;
    this.ids = ids;
    this.store = store;
  }

  /** The device's state now, or null when the router does not know it. */
  device(deviceId: string | number): DeviceNow | null {
    const slot = this.slotOf(deviceId);
    if (slot < 0) return null;
    const store = this.store();
    let out: DeviceNow | null = null;
    this.consistently(slot, () => {
      const f = slot * DEV_STRIDE_F64;
      const stays: FenceStay[] = [];
      this.eachInside(slot, store, (fenceId, sinceMs, state) =>
        stays.push({ fenceId, sinceMs, dwellFired: (state & EntryState.DWELL_FIRED) !== 0 }),
      );
      out = {
        deviceId,
        lastEventMs: this.state.devF64[f + DEV_LAST_EVENT_MS_F64]!,
        lat: this.state.devF64[f + DEV_LAST_LAT_F64]!,
        lon: this.state.devF64[f + DEV_LAST_LON_F64]!,
        inside: stays,
      };
    });
    return out;
  }

  /** The devices inside fence `fenceId` now (null when no fence has that id), in slot order. */
  occupants(fenceId: string): FenceOccupant[] | null {
    const store = this.store();
    if (store.indexOfId(fenceId) < 0) return null;
    const out: FenceOccupant[] = [];
    const n = this.ids.deviceCount();
    for (let slot = 0; slot < n; slot++) {
      if (this.ids.lifeStateOf(slot) !== DeviceLife.ACTIVE || this.state.entryCount(slot) === 0) continue;
      let since = Number.NaN;
      this.consistently(slot, () => {
        since = Number.NaN;
        this.eachInside(slot, store, (id, sinceMs) => {
          if (id === fenceId) since = sinceMs;
        });
      });
      if (!Number.isNaN(since)) {
        const id = this.ids.deviceIdOf(slot);
        if (id !== undefined) out.push({ deviceId: id, sinceMs: since });
      }
    }
    return out;
  }

  /** Slot of an active device with this id (42 and "42" apart), or -1. */
  private slotOf(deviceId: string | number): number {
    const n = this.ids.deviceCount();
    for (let slot = 0; slot < n; slot++) {
      if (this.ids.lifeStateOf(slot) !== DeviceLife.ACTIVE) continue;
      if (this.ids.deviceIdOf(slot) === deviceId) return slot;
    }
    return -1;
  }

  /** Calls `read` until it ran with no update of the device open or made meanwhile (a few tries at most). */
  private consistently(slot: number, read: () => void): void {
    for (let tries = 0; tries < 1000; tries++) {
      const before = this.state.writeVersion(slot);
      if ((before & 1) !== 0) continue;
      read();
      if (this.state.writeVersion(slot) === before) return;
    }
    // A device whose update stays open (its worker waits for room in a full trigger ring): the last read stands.
    read();
  }

  /** Calls `visit` for each of the device's entries that is a stay (ENTER sent), with the fence's id. */
  private eachInside(
    slot: number,
    store: FenceStore,
    visit: (fenceId: string, sinceMs: number, state: number) => void,
  ): void {
    // Entries refer to the device's store generation; during a reload's swap a device may be on the other one: skipped.
    if (this.state.generationOf(slot) !== store.generation) return;
    const n = this.state.entryCount(slot);
    for (let e = 0; e < n; e++) {
      const idx = this.state.entryIndex(slot, e);
      const st = this.state.entryI32[idx * ENTRY_STRIDE_I32 + ENTRY_STATE_I32]!;
      if ((st & EntryState.INSIDE) === 0) continue;
      const fence = this.state.entryI32[idx * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
      if (fence < 0 || fence >= store.fenceCount) continue;
      visit(store.fenceId(fence), this.state.entryF64[idx * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64]!, st);
    }
  }
}
