/**
 * Per-device containment state in one SharedArrayBuffer, indexed by dense device slot (see "per-device state" in
 * shm/layout.ts): last accepted ping, trigger sequence, and a bounded list of fence entries (pending or inside): a few
 * inline per device, more from a shared preallocated overflow pool while a device is inside many fences at once.
 *
 * Allocated once (main thread, `allocateDeviceState`); wrapped by every worker (`DeviceState.open`), which writes
 * only the slots of the shard batch it runs (at most one batch per shard in flight), and by the ingest thread,
 * which only reads `insideCompliance` (an Atomics.load of a cell the worker updates with Atomics.store).
 */
import {
  DEV_CHUNK_COUNT_I32,
  DEV_COMPLIANCE_COUNT_I32,
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_VERSION_I32,
  deviceStateSections,
  DSTATE_HEADER_BYTES,
  DSTATE_INLINE_FENCES_I32,
  DSTATE_MAGIC,
  DSTATE_MAGIC_I32,
  DSTATE_MAX_DEVICES_I32,
  DSTATE_MAX_FENCES_I32,
  DSTATE_POOL_CHUNKS_I32,
  DSTATE_POOL_FREE_HEAD_I32,
  DSTATE_POOL_LOCK_I32,
  DSTATE_POOL_USED_I32,
  DSTATE_VERSION_I32,
  ENTRY_CHUNK_ENTRIES,
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
  /** Fence entries per device at most (inline plus overflow chunks). */
  readonly maxFencesPerDevice: number;
  /** Entries each device holds inline. */
  readonly inlineFencesPerDevice: number;
  /** Chunks of ENTRY_CHUNK_ENTRIES entries in the shared overflow pool. */
  readonly overflowPoolChunks: number;
}

/** Largest fence entry count per device accepted. */
const MAX_FENCES_PER_DEVICE = 256;
/** Inline entries per device unless told otherwise: most devices are inside a few fences at a time. */
const DEFAULT_INLINE_FENCES_PER_DEVICE = 8;
/** Entries provisioned per device on average unless told otherwise (inline plus a share of the pool). */
const DEFAULT_FENCE_ENTRIES_PER_DEVICE = 32;

/** How the per-device fence entries are held: see allocateDeviceState. */
export interface DeviceStateSizing {
  /** Entries each device holds inline (default min(8, maxFencesPerDevice)). */
  inlineFencesPerDevice?: number;
  /**
   * Entries provisioned per device on average (default DEFAULT_FENCE_ENTRIES_PER_DEVICE): the pool holds
   * maxDevices * (this - inline) entries, while any one device can hold up to maxFencesPerDevice.
   */
  entriesPerDevice?: number;
  /** Overflow entries shared by all devices, rounded up to whole chunks (overrides entriesPerDevice). */
  overflowPoolEntries?: number;
}

/**
 * Allocates and initialises the per-device state region (main thread). A device holds `inline` entries of its own and
 * takes chunks of ENTRY_CHUNK_ENTRIES more from a shared, preallocated pool while it is inside more fences than that,
 * up to maxFencesPerDevice; chunks go back to the pool as it leaves them.
 */
export function allocateDeviceState(
  maxDevices: number,
  maxFencesPerDevice: number,
  sizing: DeviceStateSizing = {},
): DeviceStateDescriptor {
  if (!Number.isInteger(maxDevices) || maxDevices <= 0 || maxDevices > 1 << 26) {
    throw new RangeError(`maxDevices must be an integer in [1, 2^26], got ${String(maxDevices)}`);
  }
  if (!Number.isInteger(maxFencesPerDevice) || maxFencesPerDevice <= 0 || maxFencesPerDevice > MAX_FENCES_PER_DEVICE) {
    throw new RangeError(
      `maxFencesPerDevice must be an integer in [1, ${MAX_FENCES_PER_DEVICE}], got ${String(maxFencesPerDevice)}`,
    );
  }
  const inline = sizing.inlineFencesPerDevice ?? Math.min(DEFAULT_INLINE_FENCES_PER_DEVICE, maxFencesPerDevice);
  if (!Number.isInteger(inline) || inline <= 0 || inline > maxFencesPerDevice) {
    throw new RangeError(
      `inlineFencesPerDevice must be an integer in [1, maxFencesPerDevice (${maxFencesPerDevice})], got ${String(inline)}`,
    );
  }
  const perDevice = Math.min(maxFencesPerDevice, sizing.entriesPerDevice ?? DEFAULT_FENCE_ENTRIES_PER_DEVICE);
  const poolEntries =
    inline === maxFencesPerDevice ? 0 : (sizing.overflowPoolEntries ?? maxDevices * Math.max(0, perDevice - inline));
  if (!Number.isInteger(poolEntries) || poolEntries < 0 || poolEntries > 1 << 28) {
    throw new RangeError(`overflowPoolEntries must be an integer in [0, 2^28], got ${String(poolEntries)}`);
  }
  const poolChunks = Math.ceil(poolEntries / ENTRY_CHUNK_ENTRIES);
  const s = deviceStateSections(maxDevices, maxFencesPerDevice, inline, poolChunks);
  const buffer = new SharedArrayBuffer(s.totalBytes);
  const devF64 = new Float64Array(buffer, s.deviceF64Byte, maxDevices * DEV_STRIDE_F64);
  for (let d = 0; d < maxDevices; d++) devF64[d * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64] = -Infinity;
  // Free list: every chunk, in order (links are id + 1; 0 ends the list).
  const next = new Int32Array(buffer, s.poolNextByte, poolChunks);
  for (let c = 0; c < poolChunks; c++) next[c] = c + 1 < poolChunks ? c + 2 : 0;
  const header = new Int32Array(buffer, 0, DSTATE_HEADER_BYTES / 4);
  header[DSTATE_VERSION_I32] = LAYOUT_VERSION;
  header[DSTATE_MAX_DEVICES_I32] = maxDevices;
  header[DSTATE_MAX_FENCES_I32] = maxFencesPerDevice;
  header[DSTATE_INLINE_FENCES_I32] = inline;
  header[DSTATE_POOL_CHUNKS_I32] = poolChunks;
  header[DSTATE_POOL_FREE_HEAD_I32] = poolChunks > 0 ? 1 : 0;
  Atomics.store(header, DSTATE_MAGIC_I32, DSTATE_MAGIC);
  return { buffer, maxDevices, maxFencesPerDevice, inlineFencesPerDevice: inline, overflowPoolChunks: poolChunks };
}

/** One thread's view of the per-device state region. */
export class DeviceState {
  /** Device slots. */
  readonly maxDevices: number;
  /** Fence entries per device at most. */
  readonly maxFences: number;
  /** Entries each device holds inline. */
  readonly inlineFences: number;
  /** Overflow chunks a device can hold. */
  readonly chunksPerDevice: number;
  /** Chunks in the shared overflow pool. */
  readonly poolChunks: number;
  /** Per-device Float64 records (DEV_*_F64). */
  readonly devF64: Float64Array;
  /** Per-device Int32 records (DEV_*_I32). */
  readonly devI32: Int32Array;
  /** Per-entry Float64 records (ENTRY_*_F64), indexed by `entryIndex(slot, e)`. */
  readonly entryF64: Float64Array;
  /** Per-entry Int32 records (ENTRY_*_I32), indexed by `entryIndex(slot, e)`. */
  readonly entryI32: Int32Array;
  /** Per device, the ids of the overflow chunks it holds (chunksPerDevice cells each). */
  private readonly chunkTable: Int32Array;
  /** Free-list links of the pool (next free chunk id + 1; 0 ends the list). */
  private readonly poolNext: Int32Array;
  private readonly header: Int32Array;
  /** First entry index of the pool's chunks. */
  private readonly poolBase: number;

  private constructor(d: DeviceStateDescriptor) {
    if (!(d.buffer instanceof SharedArrayBuffer))
      throw new TypeError('device state buffer must be a SharedArrayBuffer');
    const header = new Int32Array(d.buffer, 0, DSTATE_HEADER_BYTES / 4);
    if (Atomics.load(header, DSTATE_MAGIC_I32) !== DSTATE_MAGIC)
      throw new RangeError('not a device state region (bad magic)');
    if (header[DSTATE_VERSION_I32] !== LAYOUT_VERSION)
      throw new RangeError('device state region has another layout version');
    if (
      header[DSTATE_MAX_DEVICES_I32] !== d.maxDevices ||
      header[DSTATE_MAX_FENCES_I32] !== d.maxFencesPerDevice ||
      header[DSTATE_INLINE_FENCES_I32] !== d.inlineFencesPerDevice ||
      header[DSTATE_POOL_CHUNKS_I32] !== d.overflowPoolChunks
    ) {
      throw new RangeError('device state descriptor does not match its region');
    }
    const s = deviceStateSections(d.maxDevices, d.maxFencesPerDevice, d.inlineFencesPerDevice, d.overflowPoolChunks);
    if (s.totalBytes !== d.buffer.byteLength)
      throw new RangeError('device state region size does not match its header');
    this.maxDevices = d.maxDevices;
    this.maxFences = d.maxFencesPerDevice;
    this.inlineFences = d.inlineFencesPerDevice;
    this.chunksPerDevice = s.chunksPerDevice;
    this.poolChunks = d.overflowPoolChunks;
    this.poolBase = d.maxDevices * d.inlineFencesPerDevice;
    this.header = header;
    this.devF64 = new Float64Array(d.buffer, s.deviceF64Byte, d.maxDevices * DEV_STRIDE_F64);
    this.devI32 = new Int32Array(d.buffer, s.deviceI32Byte, d.maxDevices * DEV_STRIDE_I32);
    this.entryF64 = new Float64Array(d.buffer, s.entryF64Byte, s.entries * ENTRY_STRIDE_F64);
    this.entryI32 = new Int32Array(d.buffer, s.entryI32Byte, s.entries * ENTRY_STRIDE_I32);
    this.chunkTable = new Int32Array(d.buffer, s.chunkTableByte, d.maxDevices * s.chunksPerDevice);
    this.poolNext = new Int32Array(d.buffer, s.poolNextByte, d.overflowPoolChunks);
  }

  /** Wraps the region described by `d` (checks magic, version and size). */
  static open(d: DeviceStateDescriptor): DeviceState {
    return new DeviceState(d);
  }

  /**
   * Index (into entryF64 / entryI32 records) of the device's entry `e`, which must be below its capacity
   * (`ensureEntryCapacity`). Allocation-free.
   */
  entryIndex(slot: number, e: number): number {
    const inline = this.inlineFences;
    if (e < inline) return slot * inline + e;
    const k = e - inline;
    const chunk = this.chunkTable[slot * this.chunksPerDevice + ((k / ENTRY_CHUNK_ENTRIES) | 0)]!;
    return this.poolBase + chunk * ENTRY_CHUNK_ENTRIES + (k % ENTRY_CHUNK_ENTRIES);
  }

  /**
   * Makes room for `entries` entries of the device, taking pool chunks as needed. False when that is more than
   * maxFences or the pool has no free chunk (the device keeps what it had). Allocation-free; safe from any thread
   * (the pool is shared under a short lock; the device's own cells are written only by the thread running its shard).
   */
  ensureEntryCapacity(slot: number, entries: number): boolean {
    if (entries <= this.inlineFences) return true;
    if (entries > this.maxFences) return false;
    const needed = Math.ceil((entries - this.inlineFences) / ENTRY_CHUNK_ENTRIES);
    const di = slot * DEV_STRIDE_I32 + DEV_CHUNK_COUNT_I32;
    let held = this.devI32[di]!;
    while (held < needed) {
      const chunk = this.takeChunk();
      if (chunk < 0) return false;
      this.chunkTable[slot * this.chunksPerDevice + held] = chunk;
      held++;
      this.devI32[di] = held;
    }
    return true;
  }

  /** Gives the device's chunks beyond what `entries` entries need back to the pool. Allocation-free. */
  trimEntryCapacity(slot: number, entries: number): void {
    const di = slot * DEV_STRIDE_I32 + DEV_CHUNK_COUNT_I32;
    let held = this.devI32[di]!;
    if (held === 0) return;
    const needed = entries <= this.inlineFences ? 0 : Math.ceil((entries - this.inlineFences) / ENTRY_CHUNK_ENTRIES);
    while (held > needed) {
      held--;
      this.giveChunk(this.chunkTable[slot * this.chunksPerDevice + held]!);
      this.devI32[di] = held;
    }
  }

  /** Overflow pool chunks in use (any thread). */
  poolChunksInUse(): number {
    return Atomics.load(this.header, DSTATE_POOL_USED_I32);
  }

  private lock(): void {
    // Held for a few array writes: spinning is cheaper than parking.
    while (Atomics.compareExchange(this.header, DSTATE_POOL_LOCK_I32, 0, 1) !== 0) {
      // spin
    }
  }

  private unlock(): void {
    Atomics.store(this.header, DSTATE_POOL_LOCK_I32, 0);
  }

  private takeChunk(): number {
    this.lock();
    const head = this.header[DSTATE_POOL_FREE_HEAD_I32]!;
    if (head === 0) {
      this.unlock();
      return -1;
    }
    const chunk = head - 1;
    this.header[DSTATE_POOL_FREE_HEAD_I32] = this.poolNext[chunk]!;
    this.header[DSTATE_POOL_USED_I32]!++;
    this.unlock();
    return chunk;
  }

  private giveChunk(chunk: number): void {
    this.lock();
    this.poolNext[chunk] = this.header[DSTATE_POOL_FREE_HEAD_I32]!;
    this.header[DSTATE_POOL_FREE_HEAD_I32] = chunk + 1;
    this.header[DSTATE_POOL_USED_I32]!--;
    this.unlock();
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
    for (let e = 0; e < n; e++) {
      const b = this.entryIndex(slot, e) * ENTRY_STRIDE_I32;
      if (this.entryI32[b + ENTRY_FENCE_I32] === fenceIndex) return this.entryI32[b + ENTRY_STATE_I32]!;
    }
    return 0;
  }

  /**
   * Opens an update of the device's state (its write version turns odd: DEV_VERSION_I32). Only the thread running the
   * device's shard calls it, once per record, before its first write; `endWrite` closes it. Allocation-free.
   */
  beginWrite(slot: number): void {
    const cell = slot * DEV_STRIDE_I32 + DEV_VERSION_I32;
    // `| 1`, not `+ 1`: an update that never closed (its worker ended mid-record) leaves the version odd; the next one
    // keeps it odd and closes it, so the parity heals instead of inverting.
    Atomics.store(this.devI32, cell, this.devI32[cell]! | 1);
  }

  /** Closes the update `beginWrite` opened (the write version turns even, and new). Allocation-free. */
  endWrite(slot: number): void {
    const cell = slot * DEV_STRIDE_I32 + DEV_VERSION_I32;
    Atomics.store(this.devI32, cell, ((this.devI32[cell]! | 1) + 1) | 0);
  }

  /** The device's write version (DEV_VERSION_I32): odd while an update is open. One Atomics.load. */
  writeVersion(slot: number): number {
    return Atomics.load(this.devI32, slot * DEV_STRIDE_I32 + DEV_VERSION_I32);
  }

  /** Event time of the device's last accepted ping (-Infinity before the first). */
  lastEventMs(slot: number): number {
    return this.devF64[slot * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64]!;
  }
}

/** Recomputes the device's compliance entry count and publishes it with Atomics.store when it changed. */
export function publishComplianceCount(
  state: DeviceState,
  slot: number,
  fenceI32: Int32Array,
  fenceStrideI32: number,
  flagsI32: number,
  complianceFlag: number,
): void {
  const n = state.devI32[slot * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
  let c = 0;
  for (let e = 0; e < n; e++) {
    const f = state.entryI32[state.entryIndex(slot, e) * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!;
    // Pending and inside entries both count: the device's next pings could produce a compliance trigger.
    if ((fenceI32[f * fenceStrideI32 + flagsI32]! & complianceFlag) !== 0) c++;
  }
  const cell = slot * DEV_STRIDE_I32 + DEV_COMPLIANCE_COUNT_I32;
  if (state.devI32[cell] !== c) Atomics.store(state.devI32, cell, c);
}
