/**
 * Device pre-images (the PRE-IMAGE region of shm/layout.ts): before a containment worker processes a device's record,
 * it keeps the device's state as it was (its cells, its fence entries, its trigger mark) in its group's block. When
 * the task fails part way through that record (a throw, a hang the watchdog ends, a worker that ends), the ingest
 * thread puts the kept state back (src/pipeline/held-batch.ts): the device is as if the record never came, instead of
 * half updated with the triggers of that half never published (an entry taken up without its ENTER, a sequence
 * number spent on nothing).
 *
 * Allocation-free; the worker saves, the ingest thread restores once the worker is out of the task.
 */
import {
  DEV_CHUNK_COUNT_I32,
  DEV_COMPLIANCE_COUNT_I32,
  DEV_ENTRY_COUNT_I32,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_UNTRACKED_I32,
  DEV_VERSION_I32,
  ENTRY_CHUNK_ENTRIES,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  PRE_DEV_F64,
  PRE_DEV_I32,
  PRE_ENTRIES_KEPT_I32,
  PRE_HEAD_F64,
  PRE_HEAD_I32,
  PRE_MARK_I32,
  preImageStrides,
  TMARK_STRIDE_I32,
} from '../shm/layout.js';
import type { DeviceState } from './device-state.js';

// `save` copies the cells written out one by one: it must change with these strides.
if (DEV_STRIDE_F64 !== 5 || DEV_STRIDE_I32 !== 8 || TMARK_STRIDE_I32 !== 2) {
  throw new Error('pre-image.ts copies 5 + 8 device cells and 2 mark cells: update it to the layout');
}
if (ENTRY_STRIDE_F64 !== 2 || ENTRY_STRIDE_I32 !== 2) {
  throw new Error('pre-image.ts copies 2 + 2 cells per entry: update it to the layout');
}

/** A view over a PRE-IMAGE region: one block per containment group. */
export class DevicePreImages {
  private readonly f64: Float64Array;
  private readonly i32: Int32Array;
  private readonly strideF64: number;
  private readonly strideI32: number;
  private readonly maxFences: number;

  /**
   * @param buffer a region of `preImageRegionBytes(blocks, maxFencesPerDevice)` bytes
   * @param blocks containment groups (shards and the COMPLIANCE group)
   * @param maxFencesPerDevice the device state's
   */
  constructor(buffer: SharedArrayBuffer, blocks: number, maxFencesPerDevice: number) {
    const s = preImageStrides(maxFencesPerDevice);
    if (buffer.byteLength !== blocks * (s.f64 * 8 + s.i32 * 4)) {
      throw new RangeError(`pre-image region holds ${buffer.byteLength} bytes, not ${blocks} blocks`);
    }
    this.strideF64 = s.f64;
    this.strideI32 = s.i32;
    this.maxFences = maxFencesPerDevice;
    this.f64 = new Float64Array(buffer, 0, blocks * s.f64);
    this.i32 = new Int32Array(buffer, blocks * s.f64 * 8, blocks * s.i32);
  }

  /**
   * Keeps `slot`'s cells (and its trigger mark from `marks`, when given) in block `block`, not its entries: call
   * `saveEntries` before the first change of any of them. Allocation-free.
   */
  save(block: number, state: DeviceState, slot: number, marks: Int32Array | null): void {
    const f64 = this.f64;
    const i32 = this.i32;
    const bf = block * this.strideF64;
    const bi = block * this.strideI32;
    const devF64 = state.devF64;
    const devI32 = state.devI32;
    const df = slot * DEV_STRIDE_F64;
    const di = slot * DEV_STRIDE_I32;
    // Written out cell by cell: the copy runs once per record that changes its device.
    const pf = bf + PRE_DEV_F64;
    f64[pf] = devF64[df]!;
    f64[pf + 1] = devF64[df + 1]!;
    f64[pf + 2] = devF64[df + 2]!;
    f64[pf + 3] = devF64[df + 3]!;
    f64[pf + 4] = devF64[df + 4]!;
    const pi = bi + PRE_DEV_I32;
    i32[pi] = devI32[di]!;
    i32[pi + 1] = devI32[di + 1]!;
    i32[pi + 2] = devI32[di + 2]!;
    i32[pi + 3] = devI32[di + 3]!;
    i32[pi + 4] = devI32[di + 4]!;
    i32[pi + 5] = devI32[di + 5]!;
    i32[pi + 6] = devI32[di + 6]!;
    i32[pi + 7] = devI32[di + 7]!;
    if (marks !== null) {
      const m = slot * TMARK_STRIDE_I32;
      i32[bi + PRE_MARK_I32] = marks[m]!;
      i32[bi + PRE_MARK_I32 + 1] = marks[m + 1]!;
    }
    i32[bi + PRE_ENTRIES_KEPT_I32] = 0;
  }

  /**
   * Keeps `slot`'s entries in block `block`, which `save` filled for the same record: before the record's first
   * change of an entry (in place, removed, or its chunk given back). Allocation-free.
   */
  saveEntries(block: number, state: DeviceState, slot: number): void {
    const f64 = this.f64;
    const i32 = this.i32;
    const bf = block * this.strideF64;
    const bi = block * this.strideI32;
    const n = state.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
    const entryF64 = state.entryF64;
    const entryI32 = state.entryI32;
    for (let e = 0; e < n; e++) {
      const x = state.entryIndex(slot, e);
      const sf = x * ENTRY_STRIDE_F64;
      const si = x * ENTRY_STRIDE_I32;
      const tf = bf + PRE_HEAD_F64 + e * ENTRY_STRIDE_F64;
      const ti = bi + PRE_HEAD_I32 + e * ENTRY_STRIDE_I32;
      f64[tf] = entryF64[sf]!;
      f64[tf + 1] = entryF64[sf + 1]!;
      i32[ti] = entryI32[si]!;
      i32[ti + 1] = entryI32[si + 1]!;
    }
    i32[bi + PRE_ENTRIES_KEPT_I32] = 1;
  }

  /**
   * Puts the state kept in block `block` back into `slot` (its trigger mark too, when `marks` is given), as one update
   * of the device (its write version, so a checkpoint copying it meanwhile copies it again). Returns the entries that
   * found no room (the overflow pool gave the chunks away meanwhile; those stays are marked untracked), normally 0.
   * Allocation-free.
   */
  restore(block: number, state: DeviceState, slot: number, marks: Int32Array | null): number {
    const f64 = this.f64;
    const i32 = this.i32;
    const bf = block * this.strideF64;
    const bi = block * this.strideI32;
    const devF64 = state.devF64;
    const devI32 = state.devI32;
    const df = slot * DEV_STRIDE_F64;
    const di = slot * DEV_STRIDE_I32;
    state.beginWrite(slot);
    const wanted = Math.min(i32[bi + PRE_DEV_I32 + DEV_ENTRY_COUNT_I32]!, this.maxFences);
    let n = wanted;
    if (!state.ensureEntryCapacity(slot, n)) {
      n = Math.min(n, state.inlineFences + devI32[di + DEV_CHUNK_COUNT_I32]! * ENTRY_CHUNK_ENTRIES);
    }
    const entryF64 = state.entryF64;
    const entryI32 = state.entryI32;
    // Entries not kept were not changed: they are as they were.
    const kept = i32[bi + PRE_ENTRIES_KEPT_I32] === 1 ? n : 0;
    for (let e = 0; e < kept; e++) {
      const x = state.entryIndex(slot, e);
      const tf = x * ENTRY_STRIDE_F64;
      const ti = x * ENTRY_STRIDE_I32;
      const sf = bf + PRE_HEAD_F64 + e * ENTRY_STRIDE_F64;
      const si = bi + PRE_HEAD_I32 + e * ENTRY_STRIDE_I32;
      for (let c = 0; c < ENTRY_STRIDE_F64; c++) entryF64[tf + c] = f64[sf + c]!;
      for (let c = 0; c < ENTRY_STRIDE_I32; c++) entryI32[ti + c] = i32[si + c]!;
    }
    for (let c = 0; c < DEV_STRIDE_F64; c++) devF64[df + c] = f64[bf + PRE_DEV_F64 + c]!;
    for (let c = 0; c < DEV_STRIDE_I32; c++) {
      // The chunks are what the device holds now, and the version is this update's.
      if (c === DEV_CHUNK_COUNT_I32 || c === DEV_VERSION_I32) continue;
      if (c === DEV_COMPLIANCE_COUNT_I32) Atomics.store(devI32, di + c, i32[bi + PRE_DEV_I32 + c]!);
      else devI32[di + c] = i32[bi + PRE_DEV_I32 + c]!;
    }
    devI32[di + DEV_ENTRY_COUNT_I32] = n;
    if (n < wanted) devI32[di + DEV_UNTRACKED_I32] = 1;
    state.trimEntryCapacity(slot, n);
    if (marks !== null) {
      const m = slot * TMARK_STRIDE_I32;
      for (let c = 0; c < TMARK_STRIDE_I32; c++) marks[m + c] = i32[bi + PRE_MARK_I32 + c]!;
    }
    state.endWrite(slot);
    return wanted - n;
  }
}
