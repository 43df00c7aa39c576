/**
 * Dense device registry: device id -> slot on the ingest thread, and a shared id table so any thread can name a
 * device from its slot.
 *
 * Slots are assigned in order of first appearance, 0, 1, 2, ...; devices restored from the state directory take the
 * first slots before the ingest thread starts (`preregisterDevices`). A device idle for longer than the expiry time is
 * expired (`sweep`) and, once every thread is done with it (see DeviceLife in shm/layout.ts), its slot is freed and
 * reused by the next new device: the slot's generation is bumped, so a name cached for the old device is never taken
 * for the new one. When every slot is taken and none is free, a new device is rejected (REGISTRY_FULL, counted by the
 * caller); devices already known keep working.
 *
 * Shard of a device (so each device's pings stay in one ring, in order): a 32-bit hash of the id, computed once at
 * registration, scaled to the shard count: `shard = floor(hash * shards / 2^32)`. The hash is FNV-1a over the UTF-8
 * bytes of a string id, and murmur3's fmix32 of `lo ^ imul(hi, 0x9e3779b1)` for a numeric id (lo / hi: its low and
 * high 32 bits). It depends only on the id and the shard count, so it is the same in every process and run.
 */
import {
  DEVID_COUNT_I32,
  DEVID_HEADER_BYTES,
  DEVID_ID_BYTES_I32,
  DEVID_KIND_NUMBER,
  DEVID_KIND_STRING,
  DEVID_LENGTH_MASK,
  DEVID_MAGIC,
  DEVID_MAGIC_I32,
  DEVID_MAX_DEVICES_I32,
  DEVID_MAX_ID_BYTES,
  DEVID_OWNER_I32,
  DEVID_VERSION_I32,
  DEVICE_LIFE_EPOCH_MASK,
  DEVICE_LIFE_EPOCH_SHIFT,
  DEVICE_LIFE_STATE_MASK,
  DeviceLife,
  LAYOUT_VERSION,
  devIdBytesByteOffset,
  devIdGenerationByteOffset,
  devIdLifeByteOffset,
  devIdMetaByteOffset,
  devIdNumbersByteOffset,
  devIdRegionBytes,
} from '../shm/layout.js';
import { fnv1a32, IdBytesIndex } from './id-bytes-index.js';
import { PF_NUMERIC_ID_F64, type PingFields } from './ping-fields.js';

/** Largest `maxDevices` accepted (Int32 slots, and a region that stays allocatable). */
const MAX_DEVICES_LIMIT = 1 << 24;

/** `slotOf` result: every slot is taken. */
const SLOT_REGISTRY_FULL = -1;
/** `slotOf` result: the string id does not fit the id table's bytes per slot. */
export const SLOT_ID_TOO_LONG = -2;
/** `slotOf` result: a new device over its source's new-devices-per-second budget. */
export const SLOT_NEW_DEVICE_DENIED = -3;

/** A source's budget of new devices (see stream-limits.ts). */
export interface NewDeviceBudget {
  /** Takes one new device; false when the budget is spent. */
  takeNewDevice(): boolean;
}

/** Allocates a zeroed device id table for `maxDevices` slots of `idBytesPerSlot` UTF-8 bytes each. */
export function allocateDeviceIdTable(maxDevices: number, idBytesPerSlot: number): SharedArrayBuffer {
  if (!Number.isInteger(maxDevices) || maxDevices < 1 || maxDevices > MAX_DEVICES_LIMIT) {
    throw new RangeError(`maxDevices must be an integer in [1, ${MAX_DEVICES_LIMIT}], got ${String(maxDevices)}`);
  }
  if (!Number.isInteger(idBytesPerSlot) || idBytesPerSlot < 1 || idBytesPerSlot > DEVID_MAX_ID_BYTES) {
    throw new RangeError(
      `idBytesPerSlot must be an integer in [1, ${DEVID_MAX_ID_BYTES}], got ${String(idBytesPerSlot)}`,
    );
  }
  const sab = new SharedArrayBuffer(devIdRegionBytes(maxDevices, idBytesPerSlot));
  const header = new Int32Array(sab, 0, DEVID_HEADER_BYTES / 4);
  header[DEVID_MAGIC_I32] = DEVID_MAGIC;
  header[DEVID_VERSION_I32] = LAYOUT_VERSION;
  header[DEVID_MAX_DEVICES_I32] = maxDevices;
  header[DEVID_ID_BYTES_I32] = idBytesPerSlot;
  return sab;
}

/** Views over a device id table region, checked against its header. */
class IdTableViews {
  readonly header: Int32Array;
  readonly numbers: Float64Array;
  readonly meta: Int32Array;
  /** Per slot: registrations into it so far (bumped before the meta word publishes a new id). */
  readonly generation: Int32Array;
  /** Per slot: its DeviceLife word. */
  readonly life: Int32Array;
  readonly bytes: Buffer;
  readonly bytesOffset: number;
  readonly maxDevices: number;
  readonly idBytesPerSlot: number;

  constructor(sab: SharedArrayBuffer) {
    if (!(sab instanceof SharedArrayBuffer)) throw new TypeError('device id table must be a SharedArrayBuffer');
    this.header = new Int32Array(sab, 0, DEVID_HEADER_BYTES / 4);
    if (this.header[DEVID_MAGIC_I32] !== DEVID_MAGIC) throw new RangeError('not a device id table (bad magic)');
    if (this.header[DEVID_VERSION_I32] !== LAYOUT_VERSION) {
      throw new RangeError(
        `device id table layout version ${String(this.header[DEVID_VERSION_I32])} != ${LAYOUT_VERSION}`,
      );
    }
    this.maxDevices = this.header[DEVID_MAX_DEVICES_I32]!;
    this.idBytesPerSlot = this.header[DEVID_ID_BYTES_I32]!;
    if (sab.byteLength !== devIdRegionBytes(this.maxDevices, this.idBytesPerSlot)) {
      throw new RangeError('device id table size does not match its header');
    }
    this.numbers = new Float64Array(sab, devIdNumbersByteOffset(), this.maxDevices);
    this.meta = new Int32Array(sab, devIdMetaByteOffset(this.maxDevices), this.maxDevices);
    this.generation = new Int32Array(sab, devIdGenerationByteOffset(this.maxDevices), this.maxDevices);
    this.life = new Int32Array(sab, devIdLifeByteOffset(this.maxDevices), this.maxDevices);
    this.bytesOffset = devIdBytesByteOffset(this.maxDevices);
    this.bytes = Buffer.from(sab, this.bytesOffset, this.maxDevices * this.idBytesPerSlot);
  }
}

/** The id bytes of a string slot, as a view starting at the slot (its length is idBytesOf). */
function idBytesView(v: IdTableViews, slot: number): Uint8Array {
  return v.bytes.subarray(slot * v.idBytesPerSlot, (slot + 1) * v.idBytesPerSlot);
}

/** UTF-8 byte length of a string slot's id (0 for a numeric or empty slot). */
function idBytesOf(v: IdTableViews, slot: number): number {
  const meta = Atomics.load(v.meta, slot);
  return (meta & ~DEVID_LENGTH_MASK) === DEVID_KIND_STRING ? meta & DEVID_LENGTH_MASK : 0;
}

/**
 * Registers `ids` in slots 0 .. ids.length - 1 of an unused id table (main thread, before any thread wraps it): the
 * devices a restart restores. Throws a RangeError naming the problem (a duplicate, an id too long, too many).
 */
export function preregisterDevices(idTable: SharedArrayBuffer, ids: readonly (string | number)[]): void {
  const v = new IdTableViews(idTable);
  if (Atomics.load(v.header, DEVID_COUNT_I32) !== 0 || Atomics.load(v.header, DEVID_OWNER_I32) !== 0) {
    throw new RangeError('device id table is already in use');
  }
  if (ids.length > v.maxDevices) {
    throw new RangeError(`the state directory holds ${ids.length} devices but options.maxDevices is ${v.maxDevices}`);
  }
  const seen = new Set<string | number>();
  ids.forEach((id, slot) => {
    if (seen.has(id)) throw new RangeError(`device id ${JSON.stringify(id)} is listed twice`);
    seen.add(id);
    if (typeof id === 'number') {
      if (!(Number.isSafeInteger(id) && id >= 0))
        throw new RangeError(`device id ${id} is not an unsigned safe integer`);
      v.numbers[slot] = id;
      Atomics.store(v.meta, slot, DEVID_KIND_NUMBER);
    } else {
      const byteLength = Buffer.byteLength(id, 'utf8');
      if (byteLength === 0 || byteLength > v.idBytesPerSlot) {
        throw new RangeError(
          `device id ${JSON.stringify(id)} does not fit options.idBytesPerSlot (${v.idBytesPerSlot} bytes)`,
        );
      }
      v.bytes.write(id, slot * v.idBytesPerSlot, byteLength, 'utf8');
      v.numbers[slot] = -1;
      Atomics.store(v.meta, slot, DEVID_KIND_STRING | byteLength);
    }
  });
  Atomics.store(v.header, DEVID_COUNT_I32, ids.length);
}

/** murmur3 fmix32 finaliser. */
function fmix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/** 32-bit hash of an unsigned safe-integer id. */
function hashNumericId(id: number): number {
  const lo = id % 0x100000000;
  const hi = Math.floor(id / 0x100000000);
  return fmix32(lo ^ Math.imul(hi, 0x9e3779b1));
}

/** Shard in [0, shards) of a 32-bit hash. */
function shardOfHash(hash: number, shards: number): number {
  return Math.floor(((hash >>> 0) * shards) / 0x100000000);
}

/** Shard of a device id (the same function the registry applies at registration; allocates for string ids). */
export function shardOfId(id: string | number, shards: number): number {
  if (typeof id === 'number') return shardOfHash(hashNumericId(id), shards);
  const bytes = Buffer.from(id, 'utf8');
  return shardOfHash(fnv1a32(bytes, 0, bytes.length), shards);
}

/** Buckets a NumericIdIndex starts with (a power of two). */
const NUMERIC_INDEX_INITIAL_BUCKETS = 64;

/**
 * Numeric id -> slot (ingest thread): open addressing with linear probing over a Float64Array of ids and an Int32Array
 * of slots (-1: empty), kept at most half full. The lookup reads the id from a Float64Array cell and compares doubles,
 * so an id never becomes a tagged value on the way: a Map keyed by numbers needs the id boxed into a heap number
 * whenever it comes from a double field (a decoded object whose ids were all past the small-integer range).
 * Ids are integers in [0, 2^53 - 1], compared exactly.
 */
class NumericIdIndex {
  private keys = new Float64Array(NUMERIC_INDEX_INITIAL_BUCKETS);
  private slots = new Int32Array(NUMERIC_INDEX_INITIAL_BUCKETS).fill(-1);
  private mask = NUMERIC_INDEX_INITIAL_BUCKETS - 1;
  private count = 0;

  /** Slot of the id in `cells[cell]`, or -1. Allocation-free. */
  find(cells: Float64Array, cell: number): number {
    const id = cells[cell]!;
    const keys = this.keys;
    const slots = this.slots;
    const mask = this.mask;
    // hashNumericId's mixing, written out here so the id never crosses a call as an argument (which could box it).
    let h = (id % 0x100000000) ^ Math.imul(Math.floor(id / 0x100000000), 0x9e3779b1);
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    for (let b = h & mask; ; b = (b + 1) & mask) {
      const slot = slots[b]!;
      // Never full (at most half), so an empty bucket ends every probe.
      if (slot < 0) return -1;
      if (keys[b] === id) return slot;
    }
  }

  /** Adds an id that is not in the index yet (registration: may allocate to grow). */
  insert(id: number, slot: number): void {
    if ((this.count + 1) * 2 > this.keys.length) this.grow();
    this.place(id, slot);
    this.count++;
  }

  /** Removes an id (a freed slot's; not a hot path). Backward-shift deletion keeps every probe chain unbroken. */
  remove(id: number): void {
    const mask = this.mask;
    let b = hashNumericId(id) & mask;
    for (; ; b = (b + 1) & mask) {
      if (this.slots[b]! < 0) return;
      if (this.keys[b] === id) break;
    }
    this.slots[b] = -1;
    this.count--;
    let hole = b;
    for (let j = (b + 1) & mask; this.slots[j]! >= 0; j = (j + 1) & mask) {
      const home = hashNumericId(this.keys[j]!) & mask;
      // The entry at j may fill the hole when the hole lies on its probe path (from its home bucket to j).
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        this.keys[hole] = this.keys[j]!;
        this.slots[hole] = this.slots[j]!;
        this.slots[j] = -1;
        hole = j;
      }
    }
  }

  private place(id: number, slot: number): void {
    const mask = this.mask;
    for (let b = hashNumericId(id) & mask; ; b = (b + 1) & mask) {
      if (this.slots[b]! < 0) {
        this.keys[b] = id;
        this.slots[b] = slot;
        return;
      }
    }
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldSlots = this.slots;
    this.keys = new Float64Array(oldKeys.length * 2);
    this.slots = new Int32Array(oldKeys.length * 2).fill(-1);
    this.mask = oldKeys.length * 2 - 1;
    for (let b = 0; b < oldKeys.length; b++) if (oldSlots[b]! >= 0) this.place(oldKeys[b]!, oldSlots[b]!);
  }
}

/** What the registry's sweep asks of the ingest path (see DeviceRegistry.sweep). */
export interface ExpiryPort {
  /**
   * Writes an expiry record for `slot` (shard `shard`, new life epoch `epoch`) into its shard's ring; false when the
   * ring has no room (the sweep tries again next time).
   */
  expire(slot: number, shard: number, epoch: number): boolean;
  /** The last trigger seq of the device that held the freed `slot` (read before the slot is reused). */
  finalSeqOf(slot: number): number;
  /** `slot` now holds a new device (reused): reset what the ingest path keeps per slot; `seqFloor` starts its seq. */
  reused(slot: number, seqFloor: number): void;
}

/** Counts of the registry's lifecycle, for the ingest counters. */
export interface RegistryLifeCounts {
  /** Slots holding a device (not freed). */
  occupied: number;
  /** Devices expired. */
  expired: number;
  /** Expired devices that sent again before their slot was freed. */
  revived: number;
  /** Slots freed. */
  freed: number;
  /** Registrations into a freed slot. */
  reused: number;
  /** Highest final seq of a freed slot's device. */
  freedSeqHigh: number;
}

/**
 * Ingest-side registry (ingest thread only): id -> slot maps (string ids in a Map, numeric ids in a NumericIdIndex),
 * shard per slot, the per-slot motion anchor the lane classifier uses, and the slots' lifecycle (expiry by idleness,
 * reuse of freed slots). Publishes each new slot to the shared id table before its first ping leaves the thread.
 */
export class DeviceRegistry {
  /** Number of shards devices are spread over. */
  readonly shards: number;
  /** Capacity in devices. */
  readonly maxDevices: number;
  /** UTF-8 bytes per slot in the id table (longest string id). */
  readonly idBytesPerSlot: number;
  /** Shard per slot. */
  readonly shardOfSlot: Uint16Array;
  /** Latitude where the device was last seen to move (NaN before its first ping); see lane-classifier.ts. */
  readonly anchorLat: Float64Array;
  /** Longitude of the motion anchor. */
  readonly anchorLon: Float64Array;
  /** Lifecycle counts (read into the ingest counters). */
  readonly life: RegistryLifeCounts = {
    occupied: 0,
    expired: 0,
    revived: 0,
    freed: 0,
    reused: 0,
    freedSeqHigh: -Infinity,
  };
  private readonly stringIds = new Map<string, number>();
  /** The same string ids, found from their bytes (a frame reader's id, with no string made). */
  private readonly bytesIndex: IdBytesIndex;
  private readonly numericIds = new NumericIdIndex();
  /** One cell to look a numeric id up from `lookup` (the index reads ids from cells). */
  private readonly lookupCell = new Float64Array(1);
  private readonly table: IdTableViews;
  private readonly reader: DeviceIdReader;
  /** Per slot: the sweep tick of the device's last ping. */
  private readonly seenTick: Int32Array;
  /** Per slot: 1 while the slot's id is in the maps (cleared when a freed slot is taken back). */
  private readonly mapped: Uint8Array;
  /** Freed slots taken back, ready for new devices (a stack). */
  private readonly freeSlots: Int32Array;
  private freeTop = 0;
  private tick = 0;
  private port: ExpiryPort | null = null;
  private count = 0;

  /** Wraps an allocated id table for the ingest thread; `shards` in [1, 65535]. */
  constructor(idTable: SharedArrayBuffer, shards: number) {
    if (!Number.isInteger(shards) || shards < 1 || shards > 0xffff) {
      throw new RangeError(`shards must be an integer in [1, 65535], got ${String(shards)}`);
    }
    this.table = new IdTableViews(idTable);
    this.bytesIndex = new IdBytesIndex(this.table.bytes, this.table.idBytesPerSlot, this.table.meta);
    this.shards = shards;
    this.maxDevices = this.table.maxDevices;
    this.idBytesPerSlot = this.table.idBytesPerSlot;
    this.shardOfSlot = new Uint16Array(this.maxDevices);
    this.anchorLat = new Float64Array(this.maxDevices).fill(Number.NaN);
    this.anchorLon = new Float64Array(this.maxDevices).fill(Number.NaN);
    this.seenTick = new Int32Array(this.maxDevices);
    this.mapped = new Uint8Array(this.maxDevices);
    this.freeSlots = new Int32Array(this.maxDevices);
    if (Atomics.compareExchange(this.table.header, DEVID_OWNER_I32, 0, 1) !== 0) {
      throw new RangeError('device id table is already in use by another registry');
    }
    // Devices registered before the ingest thread started (restored from the state directory) keep their slots.
    this.count = Atomics.load(this.table.header, DEVID_COUNT_I32);
    this.reader = new DeviceIdReader(idTable);
    for (let slot = 0; slot < this.count; slot++) {
      const id = this.reader.deviceIdOf(slot)!;
      const hash =
        typeof id === 'number'
          ? hashNumericId(id)
          : fnv1a32(idBytesView(this.table, slot), 0, idBytesOf(this.table, slot));
      if (typeof id === 'number') this.numericIds.insert(id, slot);
      else {
        this.stringIds.set(id, slot);
        this.bytesIndex.insert(slot, hash);
      }
      this.mapped[slot] = 1;
      this.shardOfSlot[slot] = shardOfHash(hash, shards);
    }
    this.life.occupied = this.count;
  }

  /** Slots holding a device (registered and not freed). */
  get size(): number {
    return this.life.occupied;
  }

  /** Slots ever published (the high-water mark: slots 0 .. this - 1 have held a device). */
  get slotsUsed(): number {
    return this.count;
  }

  /** Slot of a known id, or -1. */
  lookup(id: string | number): number {
    if (typeof id === 'string') return this.stringIds.get(id) ?? -1;
    this.lookupCell[0] = id;
    return this.numericIds.find(this.lookupCell, 0);
  }

  /**
   * Slot of the ping's device, registering it when new (after taking one from `budget`, when given). Returns the slot,
   * SLOT_REGISTRY_FULL, SLOT_ID_TOO_LONG or SLOT_NEW_DEVICE_DENIED. Allocation-free for known devices; a registration
   * adds one entry to a map or the numeric index.
   */
  slotOf(fields: PingFields, budget: NewDeviceBudget | null = null): number {
    let slot: number;
    if (fields.idIsNumber) {
      // Looked up from its cell: the id stays an unboxed double all the way.
      slot = this.numericIds.find(fields.values, PF_NUMERIC_ID_F64);
      if (slot < 0)
        return budget !== null && !budget.takeNewDevice()
          ? SLOT_NEW_DEVICE_DENIED
          : this.register(fields.values[PF_NUMERIC_ID_F64]!);
    } else if (fields.idInBytes) {
      // Found from the frame's bytes: a string is made only for a device not known yet.
      const buf = fields.idBuf!;
      const at = fields.idAt;
      const len = fields.idLen;
      slot = this.bytesIndex.find(buf, at, len, fnv1a32(buf, at, at + len));
      if (slot < 0)
        return budget !== null && !budget.takeNewDevice() ? SLOT_NEW_DEVICE_DENIED : this.register(fields.idString());
    } else {
      const known = this.stringIds.get(fields.idKey);
      if (known === undefined)
        return budget !== null && !budget.takeNewDevice() ? SLOT_NEW_DEVICE_DENIED : this.register(fields.idKey);
      slot = known;
    }
    this.seenTick[slot] = this.tick;
    if ((Atomics.load(this.table.life, slot) & DEVICE_LIFE_STATE_MASK) !== DeviceLife.ACTIVE) this.revive(slot);
    return slot;
  }

  /**
   * Sets the expiry machinery: `port` writes expiry records and resets reused slots. Without it (the default) devices
   * never expire and slots are never reused.
   */
  setExpiryPort(port: ExpiryPort): void {
    this.port = port;
  }

  /**
   * One expiry pass (call it every `tickMs`): advances the tick; expires every ACTIVE device whose last ping is
   * `idleTicks` ticks old or older (its expiry record written through the port; one whose ring is full waits for the
   * next pass); takes back every slot the dispatcher has freed (the id leaves the maps, the slot joins the free
   * list). Returns the devices expired by this pass.
   */
  sweep(idleTicks: number): number {
    const port = this.port;
    if (port === null) return 0;
    const tick = ++this.tick;
    const lifeWords = this.table.life;
    let expired = 0;
    for (let slot = 0; slot < this.count; slot++) {
      if (this.mapped[slot] === 0) continue;
      const word = Atomics.load(lifeWords, slot);
      const state = word & DEVICE_LIFE_STATE_MASK;
      if (state === DeviceLife.FREE) {
        this.takeBack(slot);
      } else if (state === DeviceLife.ACTIVE && tick - this.seenTick[slot]! >= idleTicks) {
        const epoch = ((word >>> DEVICE_LIFE_EPOCH_SHIFT) + 1) & DEVICE_LIFE_EPOCH_MASK;
        if (!port.expire(slot, this.shardOfSlot[slot]!, epoch)) continue;
        // Only this thread moves a slot out of ACTIVE, and the dispatcher acts on RETIRING only once it has the
        // marker the record above leads to: a plain store is enough.
        Atomics.store(lifeWords, slot, (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING);
        this.life.expired++;
        expired++;
      }
    }
    return expired;
  }

  /** A known device sent while RETIRING or FREE: it keeps its slot (and its seq), ACTIVE again. */
  private revive(slot: number): void {
    const lifeWords = this.table.life;
    const word = Atomics.load(lifeWords, slot);
    const epochBits = word & ~DEVICE_LIFE_STATE_MASK;
    if ((word & DEVICE_LIFE_STATE_MASK) === DeviceLife.RETIRING) {
      // Races the dispatcher's RETIRING -> FREE: whoever moves the word first wins; either way the slot is ours.
      Atomics.compareExchange(lifeWords, slot, word, epochBits | DeviceLife.ACTIVE);
    }
    Atomics.store(lifeWords, slot, epochBits | DeviceLife.ACTIVE);
    this.life.revived++;
  }

  /** A freed slot leaves the maps and joins the free list; the highest freed seq remembers its device's last seq. */
  private takeBack(slot: number): void {
    const id = this.reader.deviceIdOf(slot)!;
    if (typeof id === 'number') this.numericIds.remove(id);
    else {
      this.stringIds.delete(id);
      this.bytesIndex.remove(slot, fnv1a32(idBytesView(this.table, slot), 0, idBytesOf(this.table, slot)));
    }
    this.mapped[slot] = 0;
    const seq = this.port!.finalSeqOf(slot);
    if (seq > this.life.freedSeqHigh) this.life.freedSeqHigh = seq;
    this.freeSlots[this.freeTop++] = slot;
    this.life.freed++;
    this.life.occupied--;
  }

  /** Registers a new id (the caller has checked it is unknown): a fresh slot, else a freed one. */
  private register(id: string | number): number {
    const t = this.table;
    const fresh = this.count < t.maxDevices;
    if (!fresh && this.freeTop === 0) return SLOT_REGISTRY_FULL;
    let byteLength = 0;
    if (typeof id !== 'number') {
      byteLength = Buffer.byteLength(id, 'utf8');
      if (byteLength > t.idBytesPerSlot) return SLOT_ID_TOO_LONG;
    }
    const slot = fresh ? this.count : this.freeSlots[--this.freeTop]!;
    // The generation moves first: a reader that copies the id and sees the same generation before and after the copy
    // (a checkpoint) has the bytes of one device, and a cached name of the old device is stale from here on.
    Atomics.add(t.generation, slot, 1);
    let hash: number;
    let meta: number;
    if (typeof id === 'number') {
      t.numbers[slot] = id;
      hash = hashNumericId(id);
      meta = DEVID_KIND_NUMBER;
    } else {
      const at = slot * t.idBytesPerSlot;
      t.bytes.write(id, at, byteLength, 'utf8');
      hash = fnv1a32(t.bytes, at, at + byteLength);
      t.numbers[slot] = -1;
      meta = DEVID_KIND_STRING | byteLength;
    }
    this.shardOfSlot[slot] = shardOfHash(hash, this.shards);
    this.anchorLat[slot] = Number.NaN;
    this.anchorLon[slot] = Number.NaN;
    this.seenTick[slot] = this.tick;
    this.mapped[slot] = 1;
    if (!fresh) {
      // A new device in an old slot starts above every seq a freed device had (it may be one of them, come back).
      const floor = this.port!.finalSeqOf(slot);
      this.port!.reused(slot, this.life.freedSeqHigh > floor ? this.life.freedSeqHigh : floor);
      this.life.reused++;
    }
    // Publish: the meta store releases the id bytes written above; the life word makes it ACTIVE (same epoch); the
    // count store releases the meta word.
    Atomics.store(t.meta, slot, meta);
    Atomics.store(t.life, slot, Atomics.load(t.life, slot) & ~DEVICE_LIFE_STATE_MASK);
    this.life.occupied++;
    if (fresh) {
      this.count = slot + 1;
      Atomics.store(t.header, DEVID_COUNT_I32, this.count);
    }
    if (typeof id === 'number') this.numericIds.insert(id, slot);
    else {
      this.stringIds.set(id, slot);
      this.bytesIndex.insert(slot, hash);
    }
    return slot;
  }
}

/** Size of the reader's direct-mapped cache (a power of two). */
const READER_CACHE_SLOTS = 4096;

/**
 * Names devices from their slots on any thread (dispatcher, main). Reads the shared id table; a small
 * direct-mapped cache avoids decoding the same slot's bytes again, checked against the slot's generation (a reused
 * slot names its new device at once).
 */
export class DeviceIdReader {
  private readonly table: IdTableViews;
  private readonly cachedSlot = new Int32Array(READER_CACHE_SLOTS).fill(-1);
  private readonly cachedGeneration = new Int32Array(READER_CACHE_SLOTS);
  private readonly cachedId: (string | number)[] = new Array<string | number>(READER_CACHE_SLOTS).fill(0);

  /** Wraps a device id table allocated elsewhere. */
  constructor(idTable: SharedArrayBuffer) {
    this.table = new IdTableViews(idTable);
  }

  /** Slots published so far. */
  deviceCount(): number {
    return Atomics.load(this.table.header, DEVID_COUNT_I32);
  }

  /** True when the device in `slot` has a numeric id (an unsigned integer). */
  isNumeric(slot: number): boolean {
    return Atomics.load(this.table.meta, slot) === DEVID_KIND_NUMBER;
  }

  /** The numeric id of the device in `slot` (meaningful when `isNumeric`). */
  numericId(slot: number): number {
    return this.table.numbers[slot]!;
  }

  /** Writes the numeric id of the device in `slot` into `dst[index]`. Allocation-free (no double crosses a call). */
  copyNumericId(slot: number, dst: Float64Array, index: number): void {
    dst[index] = this.table.numbers[slot]!;
  }

  /**
   * Copies the UTF-8 bytes of the string id of the device in `slot` to `dst` at `at`; returns the byte count (0 for a
   * numeric id or an unpublished slot). Allocation-free: encoders of durable records use it.
   */
  copyIdBytes(slot: number, dst: Uint8Array, at: number): number {
    const t = this.table;
    const n = idBytesOf(t, slot);
    const from = slot * t.idBytesPerSlot;
    for (let k = 0; k < n; k++) dst[at + k] = t.bytes[from + k]!;
    return n;
  }

  /** The id of the device in `slot`, or undefined when the slot is not (yet) published. */
  deviceIdOf(slot: number): string | number | undefined {
    const t = this.table;
    if (!(slot >= 0 && slot < t.maxDevices)) return undefined;
    const c = slot & (READER_CACHE_SLOTS - 1);
    const generation = Atomics.load(t.generation, slot);
    if (this.cachedSlot[c] === slot && this.cachedGeneration[c] === generation) return this.cachedId[c];
    const meta = Atomics.load(t.meta, slot);
    if (meta === 0) return undefined;
    let id: string | number;
    if (meta === DEVID_KIND_NUMBER) {
      id = t.numbers[slot]!;
    } else {
      const at = slot * t.idBytesPerSlot;
      id = t.bytes.toString('utf8', at, at + (meta & DEVID_LENGTH_MASK));
    }
    this.cachedSlot[c] = slot;
    this.cachedGeneration[c] = generation;
    this.cachedId[c] = id;
    return id;
  }

  /** Registrations into `slot` so far (changes when a freed slot takes a new device). */
  generationOf(slot: number): number {
    return Atomics.load(this.table.generation, slot);
  }

  /** The DeviceLife state of `slot` (ACTIVE, RETIRING or FREE). */
  lifeStateOf(slot: number): number {
    return Atomics.load(this.table.life, slot) & DEVICE_LIFE_STATE_MASK;
  }

  /**
   * Frees `slot` after its expiry with life epoch `epoch` (dispatcher thread, once every downstream has settled the
   * device's triggers): RETIRING(epoch) -> FREE(epoch). False when the device was revived (or expired again) since.
   */
  free(slot: number, epoch: number): boolean {
    const retiring = (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING;
    return (
      Atomics.compareExchange(this.table.life, slot, retiring, (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.FREE) ===
      retiring
    );
  }
}
