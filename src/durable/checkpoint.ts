/**
 * Device-state checkpoints (CKPT_* in file-layout.ts): a copy of the per-device containment state, taken while
 * containment is paused, written by device id and fence id so a restart with other slots, a reordered fences file or
 * removed fences restores the same stays.
 *
 * What a checkpoint holds per device: the last accepted ping (time and position), the last trigger seq, and each
 * fence entry (fence id, EntryState bits: pending / inside / dwell fired, stay start, pending start). What it holds
 * overall: when it was captured, its number, the seq floor, and the pings and triggers the writing run had
 * processed and produced by then.
 *
 * The seq floor: every trigger issued after a checkpoint has a seq above the floor the checkpoint records. After a
 * clean stop the floor stays and each device continues from its own last seq. After an unclean stop the restart
 * raises the floor to `max(floor, highest seq in the checkpoint) + SEQ_EPOCH`, and every device continues from the
 * floor: a device can issue at most SEQ_EPOCH - 1 triggers between two checkpoints (about 4.3 billion), so no seq
 * issued after the checkpoint that was lost can come again. The restart writes a checkpoint with the new floor
 * before any trigger is issued.
 *
 * Main thread. Capturing allocates nothing per device once the scratch exists; encoding and decoding allocate.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { DeviceIdReader } from '../ingest/device-registry.js';
import type { DeviceState } from '../fences/device-state.js';
import type { FenceStore } from '../fences/store.js';
import {
  DeviceLife,
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_HAS_LAST_I32,
  DEV_UNTRACKED_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  ENTRY_FENCE_I32,
  ENTRY_PENDING_MS_F64,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
} from '../shm/layout.js';
import {
  align8,
  CHECKPOINT_MAGIC,
  checksumWords,
  CKPT_CAPTURED_MS_F64,
  CKPT_CHECKSUM_W,
  CKPT_DEV_ENTRIES_U16,
  CKPT_DEV_EXPIRING,
  CKPT_DEV_UNTRACKED,
  CKPT_DEV_FLAGS_U8,
  CKPT_DEV_HAS_LAST_U8,
  CKPT_DEV_ID_BYTES_U16,
  CKPT_DEV_KIND_U8,
  CKPT_DEV_LAST_EVENT_MS_F64,
  CKPT_DEV_LAST_LAT_F64,
  CKPT_DEV_LAST_LON_F64,
  CKPT_DEV_NUMERIC_ID_F64,
  CKPT_DEV_SEQ_F64,
  CKPT_DEVICE_COUNT_W,
  CKPT_DEVICE_HEAD_BYTES,
  CKPT_ENTRY_BYTES,
  CKPT_ENTRY_FENCE_U32,
  CKPT_ENTRY_PENDING_MS_F64,
  CKPT_ENTRY_SINCE_MS_F64,
  CKPT_ENTRY_STATE_U32,
  CKPT_FENCE_COMPLIANCE,
  CKPT_FENCE_COUNT_W,
  CKPT_FENCE_HEAD_BYTES,
  CKPT_FLAG_CLEAN,
  CKPT_FLAGS_W,
  CKPT_HEADER_BYTES,
  CKPT_MAGIC_W,
  CKPT_NUMBER_F64,
  CKPT_PINGS_PROCESSED_F64,
  CKPT_SEQ_FLOOR_F64,
  CKPT_TOTAL_BYTES_W,
  CKPT_TRIGGERS_PRODUCED_F64,
  CKPT_VERSION_W,
  FILE_LAYOUT_VERSION,
  TREC_ID_NUMBER,
  TREC_ID_STRING,
} from './file-layout.js';
import { nowNs } from '../shm/clock.js';
import { readFully, replaceFileDurablyAsync, syncDirAsync } from './fs-util.js';
import { RecordBuffer } from './trigger-codec.js';

/** The gap an unclean stop puts between the seqs before and after it (see the module comment). */
export const SEQ_EPOCH = 2 ** 32;

/** File name of the current checkpoint in the state directory. */
export const CHECKPOINT_FILE = 'checkpoint.bin';
/** File name of the previous checkpoint (kept in case the current one is unreadable). */
const PREVIOUS_CHECKPOINT_FILE = 'checkpoint.prev';
/** DeviceStateCopy.live while the copy is taken: RETIRING when it began, decided from its copied cells at the end. */
const RETIRING_AT_BEGIN = 2;

/** Per-device state copied out of shared memory while containment was paused (slots 0 .. count-1). */
export class DeviceStateCopy {
  /** Devices copied. */
  count = 0;
  /** Fence-store generation the entries refer to (the store in force at the capture). */
  generation = 0;
  /** Wall time of the capture, epoch ms. */
  capturedMs = 0;
  /** Per-device Float64 records (DEV_*_F64). */
  devF64: Float64Array;
  /** Per-device Int32 records (DEV_*_I32). */
  devI32: Int32Array;
  /** Entries of device d are [entryStart[d], entryStart[d + 1]) of the compact entry arrays. */
  entryStart: Int32Array;
  /** Compact entries (ENTRY_*_F64). */
  entryF64: Float64Array;
  /** Compact entries (ENTRY_*_I32). */
  entryI32: Int32Array;
  /**
   * Per device: 1 when it is in the copy. A device ACTIVE at the capture is; so is one RETIRING whose expiry record
   * containment had not processed when its cells were copied (its stays are still in them: see `expiring`); one whose
   * expiry was processed (its state cleared: its EXITs were published before the copy) or that was freed is not.
   */
  live: Uint8Array;
  /**
   * Per device: 1 when it is in the copy with its expiry decided but not processed (RETIRING, stays still in its
   * cells). Its expiry EXITs, unless a ping revives it first, come after the copy: a restore from it ends its stays
   * with the EXITs that expiry makes (restoreDevices in pipeline/state-keeper.ts), where, left out, they would be lost
   * with the process. Whether a ping revived it is decided after the copy, so the copy of a partition with such a device
   * is never its delivered checkpoint (PartitionCheckpoints.store), and a restore without a raised seq floor raises
   * that device's seq (restoreDevices).
   */
  expiring: Uint8Array;
  /** Per device: its slot's registration generation at the capture (a slot reused since is left out; -1: unchecked). */
  slotGeneration: Int32Array;

  /** Devices the last captureLive copied more than once (an update met in progress or made during the copy). */
  lastRetries = 0;
  /** A private cell captureLive waits on (nothing notifies it: a short sleep). */
  private readonly nap = new Int32Array(new SharedArrayBuffer(4));

  /** Scratch for up to `maxDevices` devices (grows its entry arrays when needed). */
  constructor(maxDevices: number) {
    this.devF64 = new Float64Array(maxDevices * DEV_STRIDE_F64);
    this.devI32 = new Int32Array(maxDevices * DEV_STRIDE_I32);
    this.entryStart = new Int32Array(maxDevices + 1);
    this.entryF64 = new Float64Array(Math.max(1024, maxDevices) * ENTRY_STRIDE_F64);
    this.entryI32 = new Int32Array(Math.max(1024, maxDevices) * ENTRY_STRIDE_I32);
    this.live = new Uint8Array(maxDevices).fill(1);
    this.expiring = new Uint8Array(maxDevices);
    this.slotGeneration = new Int32Array(maxDevices).fill(-1);
  }

  /**
   * Copies slots [0, count) of `state` (call while no worker writes it: containment paused or stopped), with each
   * slot's life and generation from `ids` (without it every slot counts as live). Allocates only to grow the entry
   * arrays.
   */
  capture(state: DeviceState, count: number, generation: number, ids: DeviceIdReader | null = null): void {
    this.begin(state, count, generation, ids);
    // Nothing writes meanwhile: the cells go over in two bulk copies, then each device's entries.
    this.devF64.set(state.devF64.subarray(0, count * DEV_STRIDE_F64));
    this.devI32.set(state.devI32.subarray(0, count * DEV_STRIDE_I32));
    let e = 0;
    for (let d = 0; d < count; d++) e = this.copyEntries(state, d, e);
    this.entryStart[count] = e;
    this.settleRetiring(count);
  }

  /**
   * Copies slots [0, count) of `state` like `capture`, while containment runs: each device between two equal even
   * reads of its write version (DEV_VERSION_I32), so an update in progress or made during the copy makes it copy that
   * device again. Returns false, leaving the copy unusable, when that has not settled by `deadlineNs` (nowNs clock):
   * a device's update held up (its worker waits for room in a full trigger ring, or ended mid-record); the caller
   * then pauses containment and uses `capture`.
   */
  captureLive(
    state: DeviceState,
    count: number,
    generation: number,
    ids: DeviceIdReader | null,
    deadlineNs: number,
  ): boolean {
    this.begin(state, count, generation, ids);
    this.lastRetries = 0;
    let e = 0;
    for (let d = 0; d < count; d++) {
      for (let tries = 1; ; tries++) {
        if (tries === 2) this.lastRetries++;
        const before = state.writeVersion(d);
        if ((before & 1) === 0) {
          const next = this.copyDevice(state, d, e);
          // Why this is enough: the version is read with Atomics.load after the copy's plain reads, and the writer
          // stores it with Atomics.store before and after its writes (the ordering DISP_PUBLISH_VERSION_F64 relies on).
          if (next >= 0 && state.writeVersion(d) === before) {
            e = next;
            break;
          }
        }
        if (nowNs() > deadlineNs) return false;
        // An update takes microseconds; one that does not is waiting for its thread to be scheduled.
        if (tries % 64 === 0) Atomics.wait(this.nap, 0, 0, 0.05);
      }
    }
    this.entryStart[count] = e;
    this.settleRetiring(count);
    return true;
  }

  /** Records what the copy is of: count, store generation, time, and each slot's life and generation. */
  private begin(state: DeviceState, count: number, generation: number, ids: DeviceIdReader | null): void {
    if (count > state.maxDevices) throw new RangeError(`count ${count} is above the state's ${state.maxDevices} slots`);
    this.count = count;
    for (let d = 0; d < count; d++) {
      this.slotGeneration[d] = ids === null ? -1 : ids.generationOf(d);
      const life = ids === null ? DeviceLife.ACTIVE : ids.lifeStateOf(d);
      this.live[d] = life === DeviceLife.ACTIVE ? 1 : life === DeviceLife.RETIRING ? RETIRING_AT_BEGIN : 0;
      this.expiring[d] = 0;
    }
    this.generation = generation;
    this.capturedMs = Date.now();
  }

  /**
   * Decides, from the copied cells, each device that was RETIRING when the copy began: in the copy while it still has
   * a last ping or a stay (containment had not processed its expiry record when it was copied), left out once its
   * state was cleared. The life word alone cannot tell: it stays RETIRING from the sweep that marks the device until
   * the dispatcher frees it, on both sides of the record.
   */
  private settleRetiring(count: number): void {
    for (let d = 0; d < count; d++) {
      if (this.live[d] !== RETIRING_AT_BEGIN) continue;
      const si = d * DEV_STRIDE_I32;
      const pending = this.devI32[si + DEV_HAS_LAST_I32] === 1 || this.devI32[si + DEV_ENTRY_COUNT_I32]! > 0 ? 1 : 0;
      this.live[d] = pending;
      this.expiring[d] = pending;
    }
  }

  /**
   * Copies device `d`'s cells and its entries from compact entry `e` on; returns the next free compact entry, or -1
   * when its entry count is out of range (read mid-update by captureLive).
   */
  private copyDevice(state: DeviceState, d: number, e: number): number {
    const sf = d * DEV_STRIDE_F64;
    for (let c = 0; c < DEV_STRIDE_F64; c++) this.devF64[sf + c] = state.devF64[sf + c]!;
    const si = d * DEV_STRIDE_I32;
    for (let c = 0; c < DEV_STRIDE_I32; c++) this.devI32[si + c] = state.devI32[si + c]!;
    return this.copyEntries(state, d, e);
  }

  /**
   * Copies device `d`'s entries (their count from this copy's cells) from compact entry `e` on; returns the next
   * free compact entry, or -1 when the count is out of range.
   */
  private copyEntries(state: DeviceState, d: number, e: number): number {
    const si = d * DEV_STRIDE_I32;
    this.entryStart[d] = e;
    const n = this.devI32[si + DEV_ENTRY_COUNT_I32]!;
    if (n === 0) return e;
    if (!(n > 0 && n <= state.maxFences)) return -1;
    if ((e + n) * ENTRY_STRIDE_I32 > this.entryI32.length) this.grow(e + n);
    // A few cells per entry: a plain loop beats making subarray views to copy them.
    const srcF64 = state.entryF64;
    const srcI32 = state.entryI32;
    const dstF = this.entryF64;
    const dstI = this.entryI32;
    for (let k = 0; k < n; k++, e++) {
      const x = state.entryIndex(d, k);
      for (let c = 0; c < ENTRY_STRIDE_F64; c++) dstF[e * ENTRY_STRIDE_F64 + c] = srcF64[x * ENTRY_STRIDE_F64 + c]!;
      for (let c = 0; c < ENTRY_STRIDE_I32; c++) dstI[e * ENTRY_STRIDE_I32 + c] = srcI32[x * ENTRY_STRIDE_I32 + c]!;
    }
    return e;
  }

  private grow(entries: number): void {
    const n = Math.max(entries, (this.entryI32.length / ENTRY_STRIDE_I32) * 2);
    const f = new Float64Array(n * ENTRY_STRIDE_F64);
    f.set(this.entryF64);
    const i = new Int32Array(n * ENTRY_STRIDE_I32);
    i.set(this.entryI32);
    this.entryF64 = f;
    this.entryI32 = i;
  }
}

/** What a checkpoint says besides the devices. */
export interface CheckpointMeta {
  /** Floor of every seq issued after it. */
  seqFloor: number;
  /** Its number (one more than the previous checkpoint of the directory). */
  number: number;
  /** Pings processed by the writing run at the capture. */
  pingsProcessed: number;
  /** Triggers produced by the writing run at the capture. */
  triggersProduced: number;
  /** Written at a clean stop. */
  clean: boolean;
}

/** A fence named by a checkpoint. */
export interface CheckpointFence {
  /** Id. */
  id: string;
  /** Tags. */
  tags: string[];
  /** A compliance fence. */
  compliance: boolean;
}

/** One fence entry of a device. */
export interface CheckpointEntry {
  /** Index into the checkpoint's fence table. */
  fence: number;
  /** EntryState bits. */
  state: number;
  /** Stay start, epoch ms. */
  sinceMs: number;
  /** Pending-transition start, epoch ms. */
  pendingMs: number;
}

/** One device of a checkpoint. */
export interface CheckpointDevice {
  /** Device id as it sent it. */
  id: string | number;
  /** It had an accepted ping. */
  hasLast: boolean;
  /** Last accepted ping's event time, epoch ms. */
  lastEventMs: number;
  /** Last latitude. */
  lastLat: number;
  /** Last longitude. */
  lastLon: number;
  /** Last trigger seq issued. */
  seq: number;
  /** Its expiry was decided but not processed when copied (DeviceStateCopy.expiring): a restore ends its stays. */
  expiring: boolean;
  /** Its last ping found it inside a fence it could not track (DEV_UNTRACKED_I32). */
  untracked: boolean;
  /** Fence entries. */
  entries: CheckpointEntry[];
}

/** A decoded checkpoint. */
export interface Checkpoint extends CheckpointMeta {
  /** Wall time of the capture, epoch ms. */
  capturedMs: number;
  /** Fences the entries name. */
  fences: CheckpointFence[];
  /** Devices. */
  devices: CheckpointDevice[];
  /** Bytes of the file. */
  byteLength: number;
}

/**
 * Encodes a captured copy: devices by id (read from `ids`), entries by fence id (read from `store`, which must be
 * the generation the copy was captured on; entries of a device still on another generation are left out). Devices that
 * were not ACTIVE at the capture (expired), or whose slot took a new device since, are left out, and the seq floor
 * written is raised above their seqs. `keep` (per captured slot, 1 to encode) narrows it to a subset of the devices
 * (one partition's).
 */
export function encodeCheckpoint(
  copy: DeviceStateCopy,
  ids: DeviceIdReader,
  store: FenceStore,
  meta: CheckpointMeta,
  keep: Uint8Array | null = null,
): Uint8Array {
  const steps = encodeSteps(copy, ids, store, meta, keep);
  for (;;) {
    const step = steps.next();
    if (step.done === true) return step.value;
  }
}

/** How long `encodeCheckpointSliced` works before it lets the event loop run, ms. */
const ENCODE_SLICE_MS = 4;
/** Devices encoded between two looks at the clock. */
const DEVICES_PER_STEP = 1024;

/** Options of `encodeCheckpointSliced`. */
export interface SlicedEncodeOptions {
  /** Per captured slot, 1 to encode (one partition's devices); all when absent. */
  keep?: Uint8Array | null;
  /** Counts the slices (set by the call). */
  slices?: { count: number };
  /** Work between two turns of the event loop, ms (0: a turn after every DEVICES_PER_STEP devices). */
  sliceMs?: number;
}

/**
 * `encodeCheckpoint` in slices of about ENCODE_SLICE_MS, the event loop running between them: the main thread, which
 * also hands triggers to in-process callbacks and runs the embedding application, is never held for the whole encoding
 * (about 40 ms at 100,000 devices). Same bytes as `encodeCheckpoint`.
 */
export async function encodeCheckpointSliced(
  copy: DeviceStateCopy,
  ids: DeviceIdReader,
  store: FenceStore,
  meta: CheckpointMeta,
  options: SlicedEncodeOptions = {},
): Promise<Uint8Array> {
  const steps = encodeSteps(copy, ids, store, meta, options.keep ?? null);
  const sliceMs = options.sliceMs ?? ENCODE_SLICE_MS;
  const slices = options.slices ?? { count: 0 };
  let sliceStart = performance.now();
  slices.count = 1;
  for (;;) {
    const step = steps.next();
    if (step.done === true) return step.value;
    if (performance.now() - sliceStart >= sliceMs) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      slices.count++;
      sliceStart = performance.now();
    }
  }
}

/** The encoding, pausing (a yield) after every DEVICES_PER_STEP devices of each pass; returns the bytes. */
function* encodeSteps(
  copy: DeviceStateCopy,
  ids: DeviceIdReader,
  store: FenceStore,
  meta: CheckpointMeta,
  keep: Uint8Array | null,
): Generator<void, Uint8Array, void> {
  const fenceTable = new Int32Array(Math.max(1, store.fenceCount)).fill(-1);
  const fences: number[] = [];
  let size = CKPT_HEADER_BYTES;
  const idBytes = new Int32Array(copy.count);
  const entryCounts = new Int32Array(copy.count);
  // Ids are copied once, then checked against the slot's generation: a slot freed and reused by another device
  // after the capture (its bytes may be rewritten meanwhile) leaves its device out.
  const numericIds = new Float64Array(copy.count);
  const idOffsets = new Int32Array(copy.count + 1);
  let idScratch = new Uint8Array(4096);
  let devices = 0;
  // An entry is kept when its device is on the captured generation and it names a fence of the store.
  const kept = (d: number, e: number): boolean => {
    const f = copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
    return copy.devI32[d * DEV_STRIDE_I32 + DEV_GENERATION_I32] === copy.generation && f >= 0 && f < store.fenceCount;
  };
  const live = new Uint8Array(copy.count);
  // An expired device left out may come back after a restart as a new registration: the floor stays above its seq.
  let seqFloor = meta.seqFloor;
  const leftOut = (d: number): void => {
    const seq = copy.devF64[d * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!;
    if (seq > seqFloor) seqFloor = seq;
  };
  for (let d = 0; d < copy.count; d++) {
    if ((d & (DEVICES_PER_STEP - 1)) === DEVICES_PER_STEP - 1) yield;
    idOffsets[d + 1] = idOffsets[d]!;
    if (keep !== null && keep[d] === 0) continue;
    if (copy.live[d] === 0) {
      leftOut(d);
      continue;
    }
    if (idScratch.length - idOffsets[d]! < 1024) {
      const grown = new Uint8Array(idScratch.length * 2);
      grown.set(idScratch);
      idScratch = grown;
    }
    const numeric = ids.isNumeric(d);
    numericIds[d] = numeric ? ids.numericId(d) : -1;
    idBytes[d] = numeric ? 0 : ids.copyIdBytes(d, idScratch, idOffsets[d]!);
    if (copy.slotGeneration[d] !== -1 && ids.generationOf(d) !== copy.slotGeneration[d]) {
      leftOut(d);
      continue;
    }
    idOffsets[d + 1] = idOffsets[d]! + idBytes[d]!;
    live[d] = 1;
    devices++;
    for (let e = copy.entryStart[d]!; e < copy.entryStart[d + 1]!; e++) {
      if (!kept(d, e)) continue;
      entryCounts[d]!++;
      const f = copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
      if (fenceTable[f] === -1) {
        fenceTable[f] = fences.length;
        fences.push(f);
      }
    }
    size += CKPT_DEVICE_HEAD_BYTES + align8(idBytes[d]!) + entryCounts[d]! * CKPT_ENTRY_BYTES;
  }
  const encoder = new TextEncoder();
  const fenceBytes = fences.map((f) => ({
    id: encoder.encode(store.fenceId(f)),
    tags: encoder.encode(JSON.stringify(store.tags(f))),
    compliance: store.isCompliance(f),
  }));
  for (const fb of fenceBytes) size += CKPT_FENCE_HEAD_BYTES + align8(fb.id.length + fb.tags.length);
  const out = new RecordBuffer(size);
  const b = out.bytes;
  const u16 = out.u16;
  const i32 = out.i32;
  const f64 = out.f64;
  i32[CKPT_MAGIC_W] = CHECKPOINT_MAGIC;
  i32[CKPT_VERSION_W] = FILE_LAYOUT_VERSION;
  i32[CKPT_FLAGS_W] = meta.clean ? CKPT_FLAG_CLEAN : 0;
  f64[CKPT_CAPTURED_MS_F64 >> 3] = copy.capturedMs;
  f64[CKPT_SEQ_FLOOR_F64 >> 3] = seqFloor;
  f64[CKPT_NUMBER_F64 >> 3] = meta.number;
  f64[CKPT_PINGS_PROCESSED_F64 >> 3] = meta.pingsProcessed;
  f64[CKPT_TRIGGERS_PRODUCED_F64 >> 3] = meta.triggersProduced;
  i32[CKPT_DEVICE_COUNT_W] = devices;
  i32[CKPT_FENCE_COUNT_W] = fences.length;
  i32[CKPT_TOTAL_BYTES_W] = size;
  let p = CKPT_HEADER_BYTES;
  for (const fb of fenceBytes) {
    u16[p >> 1] = fb.id.length;
    u16[(p >> 1) + 1] = fb.compliance ? CKPT_FENCE_COMPLIANCE : 0;
    i32[(p >> 2) + 1] = fb.tags.length;
    b.set(fb.id, p + CKPT_FENCE_HEAD_BYTES);
    b.set(fb.tags, p + CKPT_FENCE_HEAD_BYTES + fb.id.length);
    p += CKPT_FENCE_HEAD_BYTES + align8(fb.id.length + fb.tags.length);
  }
  for (let d = 0; d < copy.count; d++) {
    if ((d & (DEVICES_PER_STEP - 1)) === DEVICES_PER_STEP - 1) yield;
    if (live[d] === 0) continue;
    const df = d * DEV_STRIDE_F64;
    const di = d * DEV_STRIDE_I32;
    const numeric = numericIds[d]! >= 0;
    b[p + CKPT_DEV_KIND_U8] = numeric ? TREC_ID_NUMBER : TREC_ID_STRING;
    b[p + CKPT_DEV_HAS_LAST_U8] = copy.devI32[di + DEV_HAS_LAST_I32] === 1 ? 1 : 0;
    b[p + CKPT_DEV_FLAGS_U8] =
      (copy.expiring[d] === 1 ? CKPT_DEV_EXPIRING : 0) |
      (copy.devI32[di + DEV_UNTRACKED_I32] === 1 ? CKPT_DEV_UNTRACKED : 0);
    u16[(p + CKPT_DEV_ID_BYTES_U16) >> 1] = idBytes[d]!;
    u16[(p + CKPT_DEV_ENTRIES_U16) >> 1] = entryCounts[d]!;
    f64[(p + CKPT_DEV_NUMERIC_ID_F64) >> 3] = numericIds[d]!;
    f64[(p + CKPT_DEV_LAST_EVENT_MS_F64) >> 3] = copy.devF64[df + DEV_LAST_EVENT_MS_F64]!;
    f64[(p + CKPT_DEV_LAST_LAT_F64) >> 3] = copy.devF64[df + DEV_LAST_LAT_F64]!;
    f64[(p + CKPT_DEV_LAST_LON_F64) >> 3] = copy.devF64[df + DEV_LAST_LON_F64]!;
    f64[(p + CKPT_DEV_SEQ_F64) >> 3] = copy.devF64[df + DEV_TRIGGER_SEQ_F64]!;
    p += CKPT_DEVICE_HEAD_BYTES;
    if (!numeric) b.set(idScratch.subarray(idOffsets[d]!, idOffsets[d]! + idBytes[d]!), p);
    p += align8(idBytes[d]!);
    for (let e = copy.entryStart[d]!; e < copy.entryStart[d + 1]!; e++) {
      if (!kept(d, e)) continue;
      const f = copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
      i32[(p + CKPT_ENTRY_FENCE_U32) >> 2] = fenceTable[f]!;
      i32[(p + CKPT_ENTRY_STATE_U32) >> 2] = copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_STATE_I32]!;
      f64[(p + CKPT_ENTRY_SINCE_MS_F64) >> 3] = copy.entryF64[e * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64]!;
      f64[(p + CKPT_ENTRY_PENDING_MS_F64) >> 3] = copy.entryF64[e * ENTRY_STRIDE_F64 + ENTRY_PENDING_MS_F64]!;
      p += CKPT_ENTRY_BYTES;
    }
  }
  i32[CKPT_TOTAL_BYTES_W] = p;
  i32[CKPT_CHECKSUM_W] = checksumWords(i32, 4, p >> 2);
  return b.subarray(0, p);
}

/** Decodes a checkpoint file's bytes; throws an Error naming `file` when they are not a whole, valid checkpoint. */
export function decodeCheckpoint(bytes: Uint8Array, file: string): Checkpoint {
  if (bytes.length < CKPT_HEADER_BYTES || (bytes.length & 7) !== 0)
    throw new Error(`${file}: not a checkpoint (size ${bytes.length})`);
  const buf = new RecordBuffer(bytes.length);
  buf.bytes.set(bytes);
  const { i32, f64, u16 } = buf;
  const b = buf.bytes;
  if (i32[CKPT_MAGIC_W] !== CHECKPOINT_MAGIC) throw new Error(`${file}: not a checkpoint (bad magic)`);
  if (i32[CKPT_VERSION_W] !== FILE_LAYOUT_VERSION)
    throw new Error(
      `${file}: checkpoint layout version ${String(i32[CKPT_VERSION_W])}, this router reads ${FILE_LAYOUT_VERSION}`,
    );
  if (i32[CKPT_TOTAL_BYTES_W] !== bytes.length || checksumWords(i32, 4, bytes.length >> 2) !== i32[CKPT_CHECKSUM_W]) {
    throw new Error(`${file}: checkpoint is damaged (length or checksum)`);
  }
  const text = Buffer.from(b.buffer, b.byteOffset, b.length);
  const fences: CheckpointFence[] = [];
  let p = CKPT_HEADER_BYTES;
  for (let k = 0; k < i32[CKPT_FENCE_COUNT_W]!; k++) {
    const idLen = u16[p >> 1]!;
    const flags = u16[(p >> 1) + 1]!;
    const tagsLen = i32[(p >> 2) + 1]!;
    const at = p + CKPT_FENCE_HEAD_BYTES;
    fences.push({
      id: text.toString('utf8', at, at + idLen),
      tags: tagsLen === 0 ? [] : (JSON.parse(text.toString('utf8', at + idLen, at + idLen + tagsLen)) as string[]),
      compliance: (flags & CKPT_FENCE_COMPLIANCE) !== 0,
    });
    p += CKPT_FENCE_HEAD_BYTES + align8(idLen + tagsLen);
  }
  const devices: CheckpointDevice[] = [];
  for (let k = 0; k < i32[CKPT_DEVICE_COUNT_W]!; k++) {
    const idLen = u16[(p + CKPT_DEV_ID_BYTES_U16) >> 1]!;
    const n = u16[(p + CKPT_DEV_ENTRIES_U16) >> 1]!;
    const numeric = b[p + CKPT_DEV_KIND_U8] === TREC_ID_NUMBER;
    const dev: CheckpointDevice = {
      id: numeric
        ? f64[(p + CKPT_DEV_NUMERIC_ID_F64) >> 3]!
        : text.toString('utf8', p + CKPT_DEVICE_HEAD_BYTES, p + CKPT_DEVICE_HEAD_BYTES + idLen),
      hasLast: b[p + CKPT_DEV_HAS_LAST_U8] === 1,
      lastEventMs: f64[(p + CKPT_DEV_LAST_EVENT_MS_F64) >> 3]!,
      lastLat: f64[(p + CKPT_DEV_LAST_LAT_F64) >> 3]!,
      lastLon: f64[(p + CKPT_DEV_LAST_LON_F64) >> 3]!,
      seq: f64[(p + CKPT_DEV_SEQ_F64) >> 3]!,
      expiring: (b[p + CKPT_DEV_FLAGS_U8]! & CKPT_DEV_EXPIRING) !== 0,
      untracked: (b[p + CKPT_DEV_FLAGS_U8]! & CKPT_DEV_UNTRACKED) !== 0,
      entries: [],
    };
    p += CKPT_DEVICE_HEAD_BYTES + align8(idLen);
    for (let e = 0; e < n; e++) {
      dev.entries.push({
        fence: i32[(p + CKPT_ENTRY_FENCE_U32) >> 2]!,
        state: i32[(p + CKPT_ENTRY_STATE_U32) >> 2]!,
        sinceMs: f64[(p + CKPT_ENTRY_SINCE_MS_F64) >> 3]!,
        pendingMs: f64[(p + CKPT_ENTRY_PENDING_MS_F64) >> 3]!,
      });
      p += CKPT_ENTRY_BYTES;
    }
    devices.push(dev);
  }
  return {
    capturedMs: f64[CKPT_CAPTURED_MS_F64 >> 3]!,
    seqFloor: f64[CKPT_SEQ_FLOOR_F64 >> 3]!,
    number: f64[CKPT_NUMBER_F64 >> 3]!,
    pingsProcessed: f64[CKPT_PINGS_PROCESSED_F64 >> 3]!,
    triggersProduced: f64[CKPT_TRIGGERS_PRODUCED_F64 >> 3]!,
    clean: (i32[CKPT_FLAGS_W]! & CKPT_FLAG_CLEAN) !== 0,
    fences,
    devices,
    byteLength: bytes.length,
  };
}

/**
 * Reads the newest readable checkpoint of `dir` (the current one, else the previous one). Returns null when there is
 * none; `problems` collects why a file was passed over.
 */
export function readLatestCheckpoint(dir: string, problems: string[] = []): Checkpoint | null {
  for (const name of [CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE]) {
    const file = path.join(dir, name);
    if (!fs.existsSync(file)) continue;
    try {
      const fd = fs.openSync(file, 'r');
      let bytes: Uint8Array;
      try {
        const size = fs.fstatSync(fd).size;
        bytes = new Uint8Array(size);
        readFully(fd, bytes, 0, size, 0);
      } finally {
        fs.closeSync(fd);
      }
      return decodeCheckpoint(bytes, file);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  return null;
}

/**
 * Makes `bytes` the current checkpoint of `dir` (the current one becomes the previous one); durable once resolved. The
 * writes and fsyncs run off the event loop (libuv's pool).
 */
export async function writeCheckpointFile(dir: string, bytes: Uint8Array): Promise<void> {
  const current = path.join(dir, CHECKPOINT_FILE);
  if (fs.existsSync(current)) {
    await fs.promises.rename(current, path.join(dir, PREVIOUS_CHECKPOINT_FILE));
    await syncDirAsync(dir);
  }
  await replaceFileDurablyAsync(current, bytes);
}
