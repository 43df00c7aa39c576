/**
 * What is left of a batch whose containment task failed inside it (ingest thread, after the pool's answer or the
 * worker's exit: the worker is out of the task). The engine accounts for each record as it goes (ContainmentEngine.
 * keepRecordsIn): a record's triggers are published with it and the watchdog cells count it done, and before a
 * record's first trigger or first change of an entry the device's state is kept in the group's pre-image block. So a
 * failed batch splits in three:
 * - the records done: processed, their triggers on their way (released, not lost);
 * - the record the task was in: lost, counted with its reason, and its device put back as it was before it (it may
 *   have taken up an entry, or spent a sequence number, for a trigger never published). When some of its triggers
 *   were published (possible only when they alone filled the trigger ring) they cannot be taken back: the device is
 *   left as the record left it, and the log says so. An expiry record (not a ping) is put back the same way and left
 *   in the ring to be run again, once; failing again, it is dropped and logged, and its device made active again as
 *   before the sweep retired it (a later sweep expires it anew, under a new epoch);
 * - the records after it: left in the ring for the group's next task.
 * A batch run without that accounting (WDG_HELD_DONE_I32 at -1: the stall drill's) is dropped whole.
 */
import { DeviceState, type DeviceStateDescriptor } from '../fences/device-state.js';
import { DevicePreImages } from '../fences/pre-image.js';
import { DeviceIdReader } from '../ingest/device-registry.js';
import {
  DEVICE_LIFE_EPOCH_MASK,
  DEVICE_LIFE_EPOCH_SHIFT,
  DeviceLife,
  RingKind,
  TEL_EXPIRE_EPOCH_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_LANE_EXPIRE,
  TEL_LANE_I32,
  WDG_HELD_COUNT_I32,
  WDG_HELD_DONE_I32,
  WDG_PRE_SLOT_I32,
  WDG_PRE_TRIG_AT_I32,
  WDG_PRE_TRIG_RING_I32,
  WDG_STRIDE_I32,
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';

/** How a failed task's held batch is settled. */
export interface HeldBatchOutcome {
  /** Records processed (their triggers published): released, not lost. */
  done: number;
  /** Pings dropped unprocessed and counted lost (0 or 1, or the whole batch when it was not accounted for). */
  lost: number;
  /** Expiry records dropped unprocessed (not pings: not counted lost), 0 or 1. */
  dropped: number;
  /** The device put back as it was before the lost record, or -1. */
  restoredSlot: number;
  /** The device of a lost record some of whose triggers were published: left as that record left it, or -1. */
  tornSlot: number;
  /** The device of an expiry record dropped after failing twice, or -1. */
  droppedExpirySlot: number;
  /** That device was made active again (false: a ping had revived it, or its state was left half expired). */
  expiryUndone: boolean;
  /** Fence stays of that device that found no room again (the overflow pool ran out meanwhile): left untracked. */
  untrackedStays: number;
}

/** Settles the held batches of failed containment tasks (see the module comment). */
export class HeldBatches {
  private readonly preImages: DevicePreImages;
  private readonly state: DeviceState;
  private readonly triggerRings: readonly SpscRing[];
  private readonly marks: Int32Array;
  /** The id table's life words (DeviceLife). */
  private readonly lifeWords: Int32Array;
  /** Per block: 1 while a failed expiry record is left to run again (at expiryRetryAt of ring expiryRetryRing). */
  private readonly expiryRetried: Uint8Array;
  private readonly expiryRetryAt: Int32Array;
  private readonly expiryRetryRing: Int32Array;

  /**
   * @param cells the watchdog cells (memory.watchdog)
   * @param preImages memory.preImages (one block per watchdog block)
   * @param deviceState memory.deviceState
   * @param triggerRings memory.triggerRings (read only: their published write sequences)
   * @param triggerMarks memory.triggerMarks
   * @param idTable memory.idTable (its life words)
   */
  constructor(
    private readonly cells: Int32Array,
    preImages: SharedArrayBuffer,
    deviceState: DeviceStateDescriptor,
    triggerRings: readonly SharedArrayBuffer[],
    triggerMarks: SharedArrayBuffer,
    idTable: SharedArrayBuffer,
  ) {
    const blocks = cells.length / WDG_STRIDE_I32;
    this.preImages = new DevicePreImages(preImages, blocks, deviceState.maxFencesPerDevice);
    this.state = DeviceState.open(deviceState);
    this.triggerRings = triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER));
    this.marks = new Int32Array(triggerMarks);
    this.lifeWords = new DeviceIdReader(idTable).lifeWords;
    this.expiryRetried = new Uint8Array(blocks);
    this.expiryRetryAt = new Int32Array(blocks);
    this.expiryRetryRing = new Int32Array(blocks);
  }

  /**
   * Settles the batch held by the failed task of watchdog block `block` (WDG_HELD_* name it; `telemetry` is the held
   * ring, `ringIndex` its index, its read sequence at the batch's first record): puts the device of the record it
   * failed in back as it was, and says which records count done, lost or dropped. The caller releases
   * `done + lost + dropped` records of the held ring; the rest stay for the next task.
   */
  settle(block: number, telemetry: SpscRing, ringIndex: number): HeldBatchOutcome {
    const cells = this.cells;
    const wb = block * WDG_STRIDE_I32;
    const held = cells[wb + WDG_HELD_COUNT_I32]!;
    const done = cells[wb + WDG_HELD_DONE_I32]!;
    const slot = cells[wb + WDG_PRE_SLOT_I32]!;
    cells[wb + WDG_PRE_SLOT_I32] = -1;
    const out: HeldBatchOutcome = {
      done: 0,
      lost: 0,
      dropped: 0,
      restoredSlot: -1,
      tornSlot: -1,
      droppedExpirySlot: -1,
      expiryUndone: false,
      untrackedStays: 0,
    };
    if (!(done >= 0 && done <= held)) {
      out.lost = held;
      return out;
    }
    out.done = done;
    if (done === held) return out;
    // The record the task was in.
    const at = (telemetry.readSeq() + done) | 0;
    const r = telemetry.slotOf(at) * telemetry.strideI32;
    const expiry = telemetry.i32[r + TEL_LANE_I32] === TEL_LANE_EXPIRE;
    // An update the record opened and nothing will close (its version odd: a checkpoint would wait on it).
    const recordSlot = telemetry.i32[r + TEL_DEVICE_SLOT_I32]!;
    if (recordSlot >= 0 && recordSlot < this.state.maxDevices && (this.state.writeVersion(recordSlot) & 1) === 1) {
      this.state.endWrite(recordSlot);
    }
    let torn = false;
    if (slot >= 0 && slot < this.state.maxDevices) {
      const ring = this.triggerRings[cells[wb + WDG_PRE_TRIG_RING_I32]!];
      if (ring !== undefined && ((ring.writeSeq() - cells[wb + WDG_PRE_TRIG_AT_I32]!) | 0) > 0) {
        // Triggers of the record reached the dispatcher: they cannot be taken back, so neither can its update.
        out.tornSlot = slot;
        torn = true;
      } else {
        out.untrackedStays = this.preImages.restore(block, this.state, slot, this.marks);
        out.restoredSlot = slot;
      }
    }
    if (!expiry) {
      out.lost = 1;
      return out;
    }
    // An expiry record is not a ping, and its device must still be retired: run it again, once.
    const again = this.expiryRetried[block] === 1 && this.expiryRetryAt[block] === at;
    if (!torn && !(again && this.expiryRetryRing[block] === ringIndex)) {
      this.expiryRetried[block] = 1;
      this.expiryRetryAt[block] = at;
      this.expiryRetryRing[block] = ringIndex;
      return out;
    }
    this.expiryRetried[block] = 0;
    out.dropped = 1;
    out.droppedExpirySlot = recordSlot;
    if (!torn && recordSlot >= 0 && recordSlot < this.state.maxDevices) {
      // Undo the sweep's step (ACTIVE under the epoch before to RETIRING under this one), unless a ping revived the
      // device meanwhile: no retire marker went out, so nothing else knows of this epoch.
      const epoch = telemetry.f64[telemetry.slotOf(at) * telemetry.strideF64 + TEL_EXPIRE_EPOCH_F64]! | 0;
      const retiring = (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING;
      const active = (((epoch - 1) & DEVICE_LIFE_EPOCH_MASK) << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.ACTIVE;
      out.expiryUndone = Atomics.compareExchange(this.lifeWords, recordSlot, retiring, active) === retiring;
    }
    return out;
  }
}
