/**
 * Per-device containment state in one SharedArrayBuffer, indexed by dense device slot (see "per-device state" in
 * shm/layout.ts): last accepted ping, trigger sequence, and a bounded list of fence entries (pending or inside).
 *
 * Allocated once (main thread, `allocateDeviceState`); wrapped by every worker (`DeviceState.open`), which writes
 * only the slots of the shard batch it runs (at most one batch per shard in flight), and by the ingest thread,
 * which only reads `insideCompliance` (an Atomics.load of a cell the worker updates with Atomics.store).
 */
import {
  DEV_COMPLIANCE_COUNT_I32,
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  deviceStateSections,
  DSTATE_HEADER_BYTES,
  DSTATE_MAGIC,
  DSTATE_MAGIC_I32,
  DSTATE_MAX_DEVICES_I32,
  DSTATE_MAX_FENCES_I32,
  DSTATE_VERSION_I32,
  ENTRY_FENCE_I32,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  LAYOUT_VERSION,
} from '../shm/layout.js';

/** Everything a thread needs to wrap the device state region (structured-clone safe). */
export interface DeviceStateDescriptor {
  /** The region. */
  readonly buffer: SharedArrayBuffer;
  /** Device slots. */
  readonly maxDevices: number;
  /** Fence entries per device. */
  readonly maxFencesPerDevice: number;
}

/** Largest fence entry count per device accepted. */
export const MAX_FENCES_PER_DEVICE = 256;

/** Allocates and initialises the per-device state region (main thread). */
export function allocateDeviceState(maxDevices: number, maxFencesPerDevice: number): DeviceStateDescriptor {
  if (!Number.isInteger(maxDevices) || maxDevices <= 0 || maxDevices > 1 << 26) {
    throw new RangeError(`maxDevices must be an integer in [1, 2^26], got ${String(maxDevices)}`);
  }
  if (!Number.isInteger(maxFencesPerDevice) || maxFencesPerDevice <= 0 || maxFencesPerDevice > MAX_FENCES_PER_DEVICE) {
    throw new RangeError(`maxFencesPerDevice must be an integer in [1, ${MAX_FENCES_PER_DEVICE}], got ${String(maxFencesPerDevice)}`);
  }
  const s = deviceStateSections(maxDevices, maxFencesPerDevice);
  const buffer = new SharedArrayBuffer(s.totalBytes);
  const devF64 = new Float64Array(buffer, s.deviceF64Byte, maxDevices * DEV_STRIDE_F64);
  for (let d = 0; d < maxDevices; d++) devF64[d * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64] = -Infinity;
  const header = new Int32Array(buffer, 0, DSTATE_HEADER_BYTES / 4);
  header[DSTATE_VERSION_I32] = LAYOUT_VERSION;
  header[DSTATE_MAX_DEVICES_I32] = maxDevices;
  header[DSTATE_MAX_FENCES_I32] = maxFencesPerDevice;
  Atomics.store(header, DSTATE_MAGIC_I32, DSTATE_MAGIC);
  return { buffer, maxDevices, maxFencesPerDevice };
}

/** One thread's view of the per-device state region. */
export class DeviceState {
  /** Device slots. */
  readonly maxDevices: number;
  /** Fence entries per device. */
  readonly maxFences: number;
  /** Per-device Float64 records (DEV_*_F64). */
  readonly devF64: Float64Array;
  /** Per-device Int32 records (DEV_*_I32). */
  readonly devI32: Int32Array;
  /** Per-entry Float64 records (ENTRY_*_F64); device d's entries start at entry d * maxFences. */
  readonly entryF64: Float64Array;
  /** Per-entry Int32 records (ENTRY_*_I32). */
  readonly entryI32: Int32Array;

  private constructor(d: DeviceStateDescriptor) {
    if (!(d.buffer instanceof SharedArrayBuffer)) throw new TypeError('device state buffer must be a SharedArrayBuffer');
    const header = new Int32Array(d.buffer, 0, DSTATE_HEADER_BYTES / 4);
    if (Atomics.load(header, DSTATE_MAGIC_I32) !== DSTATE_MAGIC) throw new RangeError('not a device state region (bad magic)');
    if (header[DSTATE_VERSION_I32] !== LAYOUT_VERSION) throw new RangeError('device state region has another layout version');
    if (header[DSTATE_MAX_DEVICES_I32] !== d.maxDevices || header[DSTATE_MAX_FENCES_I32] !== d.maxFencesPerDevice) {
      throw new RangeError('device state descriptor does not match its region');
    }
    const s = deviceStateSections(d.maxDevices, d.maxFencesPerDevice);
    if (s.totalBytes !== d.buffer.byteLength) throw new RangeError('device state region size does not match its header');
    this.maxDevices = d.maxDevices;
    this.maxFences = d.maxFencesPerDevice;
    const entries = d.maxDevices * d.maxFencesPerDevice;
    this.devF64 = new Float64Array(d.buffer, s.deviceF64Byte, d.maxDevices * DEV_STRIDE_F64);
    this.devI32 = new Int32Array(d.buffer, s.deviceI32Byte, d.maxDevices * DEV_STRIDE_I32);
    this.entryF64 = new Float64Array(d.buffer, s.entryF64Byte, entries * ENTRY_STRIDE_F64);
    this.entryI32 = new Int32Array(d.buffer, s.entryI32Byte, entries * ENTRY_STRIDE_I32);
  }

  /** Wraps the region described by `d` (checks magic, version and size). */
  static open(d: DeviceStateDescriptor): DeviceState {
    return new DeviceState(d);
  }

  /**
   * True while the device has an entry (pending or inside) on a compliance fence: its pings must travel in the
   * COMPLIANCE lane. Any thread; one Atomics.load; allocation-free.
   */
  insideCompliance(slot: number): boolean {
    return Atomics.load(this.devI32, slot * DEV_STRIDE_I32 + DEV_COMPLIANCE_COUNT_I32) > 0;
  }

  /** Number of fence entries (pending or inside) of the device. */
  entryCount(slot: number): number {
    return this.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
  }

  /** Store generation the device's entries refer to. */
  generationOf(slot: number): number {
    return this.devI32[slot * DEV_STRIDE_I32 + DEV_GENERATION_I32]!;
  }

  /** True when the device is inside fence `fenceIndex` (ENTER emitted, no EXIT yet). Allocation-free. */
  isInside(slot: number, fenceIndex: number): boolean {
    return (this.entryStateOf(slot, fenceIndex) & EntryState.INSIDE) !== 0;
  }

  /** EntryState bits of the device's entry on `fenceIndex`, or 0 when it has none. Allocation-free. */
  entryStateOf(slot: number, fenceIndex: number): number {
    const n = this.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
    const base = slot * this.maxFences;
    for (let e = 0; e < n; e++) {
      const b = (base + e) * ENTRY_STRIDE_I32;
      if (this.entryI32[b + ENTRY_FENCE_I32] === fenceIndex) return this.entryI32[b + ENTRY_STATE_I32]!;
    }
    return 0;
  }

  /** Event time of the device's last accepted ping (-Infinity before the first). */
  lastEventMs(slot: number): number {
    return this.devF64[slot * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64]!;
  }
}

/** Recomputes the device's compliance entry count and publishes it with Atomics.store when it changed. */
export function publishComplianceCount(state: DeviceState, slot: number, fenceI32: Int32Array, fenceStrideI32: number, flagsI32: number, complianceFlag: number): void {
  const n = state.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
  const base = slot * state.maxFences;
  let c = 0;
  for (let e = 0; e < n; e++) {
    const f = state.entryI32[(base + e) * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
    // Pending and inside entries both count: the device's next pings could produce a compliance trigger.
    if ((fenceI32[f * fenceStrideI32 + flagsI32]! & complianceFlag) !== 0) c++;
  }
  const cell = slot * DEV_STRIDE_I32 + DEV_COMPLIANCE_COUNT_I32;
  if (state.devI32[cell] !== c) Atomics.store(state.devI32, cell, c);
}
