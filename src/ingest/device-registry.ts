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
  DEVID_EXPIRED_I32,
  DEVID_FREE_TOP_I32,
  DEVID_FREED_I32,
  DEVID_FREED_SEQ_HIGH_F64,
  DEVID_MEMBERS_I32,
  DEVID_OCCUPIED_I32,
  DEVID_REUSED_I32,
  DEVID_REVIVED_I32,
  DEVID_TICK_I32,
  DEVID_VERSION_I32,
  DEVICE_LIFE_EPOCH_MASK,
  DEVICE_LIFE_EPOCH_SHIFT,
  DEVICE_LIFE_STATE_MASK,
  DeviceLife,
  LAYOUT_VERSION,
  devIdBytesByteOffset,
  devIdFreeStackByteOffset,
  devIdIndexBuckets,
  devIdIndexHashesByteOffset,
  devIdIndexSlotsByteOffset,
  devIdSeenByteOffset,
  devIdGenerationByteOffset,
  devIdLifeByteOffset,
  devIdMetaByteOffset,
  devIdNumbersByteOffset,
  devIdRegionBytes,
  devIdSeqFloorsByteOffset,
} from '../shm/layout.js';
import { MAX_PARTITIONS, partitionOfNumericId, partitionOfTokenBytes } from './sources/partitions.js';
import { fnv1a32, IdBytesIndex } from './id-bytes-index.js';
import { RegistrationLock, SharedIdIndex } from './shared-id-index.js';
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

/**
 * Allocates a zeroed device id table for `maxDevices` slots of `idBytesPerSlot` UTF-8 bytes each, with a seq floor per
 * partition of a source split into `partitionCount` partitions (1: one floor for every device).
 */
export function allocateDeviceIdTable(
  maxDevices: number,
  idBytesPerSlot: number,
  partitionCount = 1,
): SharedArrayBuffer {
  if (!Number.isInteger(maxDevices) || maxDevices < 1 || maxDevices > MAX_DEVICES_LIMIT) {
    throw new RangeError(`maxDevices must be an integer in [1, ${MAX_DEVICES_LIMIT}], got ${String(maxDevices)}`);
  }
  if (!Number.isInteger(idBytesPerSlot) || idBytesPerSlot < 1 || idBytesPerSlot > DEVID_MAX_ID_BYTES) {
    throw new RangeError(
      `idBytesPerSlot must be an integer in [1, ${DEVID_MAX_ID_BYTES}], got ${String(idBytesPerSlot)}`,
    );
  }
  if (!Number.isInteger(partitionCount) || partitionCount < 1 || partitionCount > MAX_PARTITIONS) {
    throw new RangeError(`partitionCount must be an integer in [1, ${MAX_PARTITIONS}], got ${String(partitionCount)}`);
  }
  const sab = new SharedArrayBuffer(devIdRegionBytes(maxDevices, idBytesPerSlot, partitionCount));
  const header = new Int32Array(sab, 0, DEVID_HEADER_BYTES / 4);
  header[DEVID_MAGIC_I32] = DEVID_MAGIC;
  header[DEVID_VERSION_I32] = LAYOUT_VERSION;
  header[DEVID_MAX_DEVICES_I32] = maxDevices;
  header[DEVID_ID_BYTES_I32] = idBytesPerSlot;
  new Float64Array(sab, 0, DEVID_HEADER_BYTES / 8)[DEVID_FREED_SEQ_HIGH_F64] = -Infinity;
  return sab;
}

/** Views over a device id table region, checked against its header. */
class IdTableViews {
  readonly header: Int32Array;
  /** The header's Float64 cells. */
  readonly headerF64: Float64Array;
  /** Per slot: the sweep tick of the device's last ping. */
  readonly seen: Int32Array;
  /** The shared free stack (DEVID_FREE_TOP_I32 entries). */
  readonly freeStack: Int32Array;
  /** The shared index's buckets: slot + 1 (0 empty), and the id's hash. */
  readonly indexSlots: Int32Array;
  readonly indexHashes: Int32Array;
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
  /** Per partition (one cell without partitions): the seq a device registered now starts at (see seqFloorsOf). */
  readonly seqFloors: Float64Array;

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
    const floorsAt = devIdSeqFloorsByteOffset(this.maxDevices, this.idBytesPerSlot);
    const floorCells = (sab.byteLength - floorsAt) / 8;
    if (!Number.isInteger(floorCells) || floorCells < 1 || floorCells > MAX_PARTITIONS) {
      throw new RangeError('device id table size does not match its header');
    }
    this.seqFloors = new Float64Array(sab, floorsAt, floorCells);
    this.numbers = new Float64Array(sab, devIdNumbersByteOffset(), this.maxDevices);
    this.meta = new Int32Array(sab, devIdMetaByteOffset(this.maxDevices), this.maxDevices);
    this.generation = new Int32Array(sab, devIdGenerationByteOffset(this.maxDevices), this.maxDevices);
    this.life = new Int32Array(sab, devIdLifeByteOffset(this.maxDevices), this.maxDevices);
    this.headerF64 = new Float64Array(sab, 0, DEVID_HEADER_BYTES / 8);
    this.seen = new Int32Array(sab, devIdSeenByteOffset(this.maxDevices), this.maxDevices);
    this.freeStack = new Int32Array(sab, devIdFreeStackByteOffset(this.maxDevices), this.maxDevices);
    const buckets = devIdIndexBuckets(this.maxDevices);
    this.indexSlots = new Int32Array(sab, devIdIndexSlotsByteOffset(this.maxDevices), buckets);
    this.indexHashes = new Int32Array(sab, devIdIndexHashesByteOffset(this.maxDevices), buckets);
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
 * The highest final seq of any device whose slot was taken back so far in the table `sab` (-Infinity before any):
 * read from the table itself, under whose lock it is raised before the slot is free, so a checkpoint that reads it
 * after copying the devices covers every device the copy left out for being freed.
 */
export function freedSeqHighOf(sab: SharedArrayBuffer): number {
  return new Float64Array(sab, 0, DEVID_HEADER_BYTES / 8)[DEVID_FREED_SEQ_HIGH_F64]!;
}

/**
 * The seq floors of the id table `sab`, one per partition of its partitioned source (one cell without partitions): a
 * device registered now starts its seq at its partition's floor, and a device whose slot is taken back raises its
 * partition's floor to its final seq. The state keeper sets them before any thread starts (from the partitions'
 * checkpoints) and stores each partition's with its checkpoint, so a device first seen after a partition's checkpoint
 * starts at the same seq whichever router reads the partition, whatever other partitions' devices did meanwhile.
 */
export function seqFloorsOf(sab: SharedArrayBuffer): Float64Array {
  return new IdTableViews(sab).seqFloors;
}

/**
 * The partition of the device in each of slots 0 .. count - 1 of the id table `sab`, as its seq floor is chosen (every
 * 0 with one floor cell; see seqFloorsOf).
 */
export function partitionsOfSlots(sab: SharedArrayBuffer, count: number): Int32Array {
  const v = new IdTableViews(sab);
  const out = new Int32Array(count);
  for (let slot = 0; slot < count; slot++) out[slot] = partitionOfSlot(v, slot);
  return out;
}

/** The partition of the device in `slot` of `v` (0 with one floor cell), from its id as registered (partitionOf). */
function partitionOfSlot(v: IdTableViews, slot: number): number {
  return partitionOfId(v, v.numbers[slot]!, slot, Atomics.load(v.meta, slot));
}

/**
 * The partition (0 with one floor cell) of id `id` in `slot` of `v`, whose meta word is `meta` (a string id's bytes
 * are read from the slot, so they must be written there).
 */
function partitionOfId(v: IdTableViews, id: string | number, slot: number, meta: number): number {
  const count = v.seqFloors.length;
  if (count === 1) return 0;
  if ((meta & ~DEVID_LENGTH_MASK) === DEVID_KIND_NUMBER) return partitionOfNumericId(id as number, count);
  const at = slot * v.idBytesPerSlot;
  return partitionOfTokenBytes(v.bytes, at, at + (meta & DEVID_LENGTH_MASK), count);
}

/**
 * Registers `ids` in slots 0 .. ids.length - 1 of an unused id table (main thread, before any thread wraps it): the
 * devices a restart restores. Throws a RangeError naming the problem (a duplicate, an id too long, too many).
 */
export function preregisterDevices(idTable: SharedArrayBuffer, ids: readonly (string | number)[]): void {
  const v = new IdTableViews(idTable);
  if (Atomics.load(v.header, DEVID_COUNT_I32) !== 0 || Atomics.load(v.header, DEVID_MEMBERS_I32) !== 0) {
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
  const index = new SharedIdIndex(v.indexSlots, v.indexHashes, {
    meta: v.meta,
    numbers: v.numbers,
    bytes: v.bytes,
    stride: v.idBytesPerSlot,
  });
  for (let slot = 0; slot < ids.length; slot++) index.insert(slot, hashOfSlot(v, slot));
  Atomics.store(v.header, DEVID_OCCUPIED_I32, ids.length);
  Atomics.store(v.header, DEVID_COUNT_I32, ids.length);
}

/** 32-bit hash of a device id (the registry's: FNV-1a of a string's UTF-8 bytes, fmix of a number). */
function hashOfId(id: string | number): number {
  if (typeof id === 'number') return hashNumericId(id);
  const bytes = Buffer.from(id, 'utf8');
  return fnv1a32(bytes, 0, bytes.length);
}

/** The hash of the id published in `slot`. */
function hashOfSlot(v: IdTableViews, slot: number): number {
  if (Atomics.load(v.meta, slot) === DEVID_KIND_NUMBER) return hashNumericId(v.numbers[slot]!);
  return fnv1a32(idBytesView(v, slot), 0, idBytesOf(v, slot));
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

/** What a registry needs to hand a taken-back slot to a new device (every ingest thread's registry). */
export interface ReusePort {
  /** The last trigger seq of the device that held the freed `slot` (read when the slot is taken back). */
  finalSeqOf(slot: number): number;
  /**
   * `slot` now holds a new device (a reused slot or a fresh one): reset what the ingest path keeps per slot; its seq
   * starts at `seqFloor` (its partition's floor, see seqFloorsOf).
   */
  reused(slot: number, seqFloor: number): void;
}

/** What the registry's sweep asks of the ingest path (ingest thread 0; see DeviceRegistry.sweep). */
export interface ExpiryPort extends ReusePort {
  /**
   * Writes an expiry record for `slot` (shard `shard`, new life epoch `epoch`) into its shard's ring; false when the
   * ring has no room (the sweep tries again next time).
   */
  expire(slot: number, shard: number, epoch: number): boolean;
  /** A sweep with tick `tick` begins (several ingest threads: note how far every telemetry ring is written). */
  markSweep?(tick: number): void;
  /**
   * True once containment has consumed, in every ingest thread's ring of `shard`, what was written when the sweep of
   * `tick` began (a device freed then may still have had a ping in another thread's ring). Absent: always true.
   */
  consumedSince?(tick: number, shard: number): boolean;
}

/** Counts of the registry's lifecycle, for the ingest counters (every ingest thread's together). */
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
 * One ingest thread's registry over the shared id table: id -> slot through a private cache (string ids found from
 * their bytes or in a Map, numeric ids in a NumericIdIndex) in front of the table's shared index, the shard per slot,
 * the per-slot motion anchor the lane classifier uses, and the slots' lifecycle. Several ingest threads each have
 * one over the same table (`member` 0, 1, ...), so a device keeps one slot whichever connection its pings arrive on.
 *
 * A ping of a device this thread has cached costs no lock: the cached slot is confirmed by its generation (unchanged
 * since it was cached), its life word (ACTIVE, or revived from RETIRING / FREE by a compare-exchange) and the
 * generation again, after the ping's sweep tick is stamped. A device not cached here takes the registration lock, is
 * found in the shared index or registered (a fresh slot, else one from the shared free stack), and cached. Only member
 * 0 sweeps: it expires idle devices (ACTIVE -> RETIRING by a compare-exchange, undone when another thread stamped the
 * device meanwhile) and takes back freed slots (FREE -> RECLAIMED under the lock; with several ingest threads only
 * once every ring of the shard has been consumed past the sweep that first saw it free). Each member drops the cache
 * entries of slots that changed hands (`purgeStale`).
 */
export class DeviceRegistry {
  /** Number of shards devices are spread over. */
  readonly shards: number;
  /** Capacity in devices. */
  readonly maxDevices: number;
  /** UTF-8 bytes per slot in the id table (longest string id). */
  readonly idBytesPerSlot: number;
  /** This registry's ingest thread (its bit in the table's members). */
  readonly member: number;
  /** True when this is the only ingest thread (`threads` 1): no other registry touches the table. */
  private readonly solo: boolean;
  /** Shard per slot (set for each slot this registry has cached). */
  readonly shardOfSlot: Uint16Array;
  /** Latitude where the device was last seen to move (NaN before its first ping); see lane-classifier.ts. */
  readonly anchorLat: Float64Array;
  /** Longitude of the motion anchor. */
  readonly anchorLon: Float64Array;
  private readonly stringIds = new Map<string, number>();
  /** The same string ids, found from their bytes (a frame reader's id, with no string made). */
  private readonly bytesIndex: IdBytesIndex;
  private readonly numericIds = new NumericIdIndex();
  /** One cell to look a numeric id up from `lookup` (the index reads ids from cells). */
  private readonly lookupCell = new Float64Array(1);
  private readonly table: IdTableViews;
  private readonly lock: RegistrationLock;
  private readonly index: SharedIdIndex;
  /** Per slot: 1 while this registry's cache holds the slot, and what it cached (to confirm and to drop it). */
  private readonly mapped: Uint8Array;
  private readonly cachedGen: Int32Array;
  private readonly cachedHash: Int32Array;
  private readonly cachedNumber: Float64Array;
  private readonly cachedKey: (string | undefined)[];
  /** Per slot (member 0's sweep): the tick of the sweep that first saw it FREE, 0 while not FREE. */
  private readonly freeSince: Int32Array;
  /** Per slot (member 0's sweep, several ingest threads): the tick of the sweep that made it RETIRING, until its record. */
  private readonly expiringSince: Int32Array;
  private readonly lifeCounts: RegistryLifeCounts = {
    occupied: 0,
    expired: 0,
    revived: 0,
    freed: 0,
    reused: 0,
    freedSeqHigh: -Infinity,
  };
  private port: ExpiryPort | null = null;
  private reusePort: ReusePort | null = null;

  /**
   * Wraps an allocated id table for ingest thread `member` of `threads` (default: the only one); `shards` in
   * [1, 65535].
   */
  constructor(idTable: SharedArrayBuffer, shards: number, member = 0, threads = 1) {
    if (!Number.isInteger(shards) || shards < 1 || shards > 0xffff) {
      throw new RangeError(`shards must be an integer in [1, 65535], got ${String(shards)}`);
    }
    if (!Number.isInteger(threads) || threads < 1 || threads > 31) {
      throw new RangeError(`threads must be an integer in [1, 31], got ${String(threads)}`);
    }
    if (!Number.isInteger(member) || member < 0 || member >= threads) {
      throw new RangeError(`member must be an integer in [0, ${threads - 1}], got ${String(member)}`);
    }
    this.solo = threads === 1;
    this.table = new IdTableViews(idTable);
    const t = this.table;
    this.bytesIndex = new IdBytesIndex(t.bytes, t.idBytesPerSlot, t.meta);
    this.lock = new RegistrationLock(t.header);
    this.index = new SharedIdIndex(t.indexSlots, t.indexHashes, {
      meta: t.meta,
      numbers: t.numbers,
      bytes: t.bytes,
      stride: t.idBytesPerSlot,
    });
    this.shards = shards;
    this.member = member;
    this.maxDevices = t.maxDevices;
    this.idBytesPerSlot = t.idBytesPerSlot;
    this.shardOfSlot = new Uint16Array(this.maxDevices);
    this.anchorLat = new Float64Array(this.maxDevices).fill(Number.NaN);
    this.anchorLon = new Float64Array(this.maxDevices).fill(Number.NaN);
    this.mapped = new Uint8Array(this.maxDevices);
    this.cachedGen = new Int32Array(this.maxDevices);
    this.cachedHash = new Int32Array(this.maxDevices);
    this.cachedNumber = new Float64Array(this.maxDevices);
    this.cachedKey = new Array<string | undefined>(this.maxDevices);
    this.freeSince = new Int32Array(member === 0 ? this.maxDevices : 0);
    this.expiringSince = new Int32Array(member === 0 ? this.maxDevices : 0);
    const bit = 1 << member;
    if ((Atomics.or(t.header, DEVID_MEMBERS_I32, bit) & bit) !== 0) {
      throw new RangeError(`device id table is already in use by another registry of ingest thread ${member}`);
    }
  }

  /** Slots holding a device (registered and not freed), over every ingest thread. */
  get size(): number {
    // A plain read (an Int32 cell never tears): the edge reads it for every ping.
    return this.table.header[DEVID_OCCUPIED_I32]!;
  }

  /** Slots ever published (the high-water mark: slots 0 .. this - 1 have held a device). */
  get slotsUsed(): number {
    return Atomics.load(this.table.header, DEVID_COUNT_I32);
  }

  /** Lifecycle counts over every ingest thread (one object, refreshed by each read). */
  get life(): RegistryLifeCounts {
    const h = this.table.header;
    const c = this.lifeCounts;
    c.occupied = Atomics.load(h, DEVID_OCCUPIED_I32);
    c.expired = Atomics.load(h, DEVID_EXPIRED_I32);
    c.revived = Atomics.load(h, DEVID_REVIVED_I32);
    c.freed = Atomics.load(h, DEVID_FREED_I32);
    c.reused = Atomics.load(h, DEVID_REUSED_I32);
    c.freedSeqHigh = this.table.headerF64[DEVID_FREED_SEQ_HIGH_F64]!;
    return c;
  }

  /** Slot of a known id, or -1 (no registration). */
  lookup(id: string | number): number {
    let slot: number;
    if (typeof id === 'string') slot = this.stringIds.get(id) ?? -1;
    else {
      this.lookupCell[0] = id;
      slot = this.numericIds.find(this.lookupCell, 0);
    }
    if (slot >= 0 && this.cachedGen[slot] === Atomics.load(this.table.generation, slot)) return slot;
    this.lock.acquire();
    try {
      return this.findShared(id, hashOfId(id));
    } finally {
      this.lock.release();
    }
  }

  /**
   * Slot of the ping's device, registering it when new (after taking one from `budget`, when given). Returns the slot,
   * SLOT_REGISTRY_FULL, SLOT_ID_TOO_LONG or SLOT_NEW_DEVICE_DENIED. Allocation-free for devices this thread has
   * cached; a device new to this thread takes the registration lock (and a registration adds a cache entry).
   */
  slotOf(fields: PingFields, budget: NewDeviceBudget | null = null): number {
    let slot: number;
    if (fields.idIsNumber) {
      // Looked up from its cell: the id stays an unboxed double all the way.
      slot = this.numericIds.find(fields.values, PF_NUMERIC_ID_F64);
    } else if (fields.idInBytes) {
      // Found from the frame's bytes: a string is made only for a device not cached yet.
      const buf = fields.idBuf!;
      const at = fields.idAt;
      const len = fields.idLen;
      slot = this.bytesIndex.find(buf, at, len, fnv1a32(buf, at, at + len));
    } else {
      slot = this.stringIds.get(fields.idKey) ?? -1;
    }
    if (slot >= 0) {
      const t = this.table;
      if (this.solo) {
        // The only ingest thread (written out here, the path of every ping): only this thread registers and takes
        // back, so plain reads and stores do.
        if (t.generation[slot] === this.cachedGen[slot]) {
          t.seen[slot] = t.header[DEVID_TICK_I32]!;
          if ((Atomics.load(t.life, slot) & DEVICE_LIFE_STATE_MASK) === DeviceLife.ACTIVE || this.revive(slot))
            return slot;
        }
      } else if (this.confirm(slot)) return slot;
      // The slot changed hands (or is being taken back): look the id up again.
      this.forget(slot);
    }
    return this.resolve(fields, budget);
  }

  /**
   * Sets the expiry machinery (ingest thread 0): `port` writes expiry records and resets reused slots. Without it
   * (the default) devices never expire and slots are never reused.
   */
  setExpiryPort(port: ExpiryPort): void {
    if (this.member !== 0) throw new RangeError('only ingest thread 0 expires devices');
    this.port = port;
    this.reusePort = port;
  }

  /** Sets what resets a reused slot on this thread (every ingest thread but the one with the expiry port). */
  setReusePort(port: ReusePort): void {
    this.reusePort = port;
  }

  /**
   * One expiry pass (member 0, every `tickMs`): advances the shared tick; expires every ACTIVE device whose last ping
   * is `idleTicks` ticks old or older (its expiry record written through the port; one whose ring is full waits for the
   * next pass; with several ingest threads the record waits until every ring of the shard has been read past this
   * pass, see `expiringSince`); takes back every slot the dispatcher has freed (off the shared index, onto the free
   * stack); drops cache entries of slots that changed hands. Returns the expiry records written by this pass.
   */
  sweep(idleTicks: number): number {
    const port = this.port;
    if (port === null) return 0;
    const t = this.table;
    // 0 marks "not set" in freeSince and expiringSince: the tick skips it when it wraps.
    const tick = (Atomics.load(t.header, DEVID_TICK_I32) + 1) | 0 || 1;
    Atomics.store(t.header, DEVID_TICK_I32, tick);
    port.markSweep?.(tick);
    const lifeWords = t.life;
    const count = Atomics.load(t.header, DEVID_COUNT_I32);
    let written = 0;
    for (let slot = 0; slot < count; slot++) {
      const word = Atomics.load(lifeWords, slot);
      const state = word & DEVICE_LIFE_STATE_MASK;
      if (state === DeviceLife.FREE) {
        if (port.consumedSince !== undefined) {
          if (this.freeSince[slot] === 0) this.freeSince[slot] = tick;
          if (!port.consumedSince(this.freeSince[slot]!, this.shardOf(slot))) continue;
        }
        this.takeBack(slot, word);
        continue;
      }
      this.freeSince[slot] = 0;
      if (this.mapped[slot] !== 0 && this.cachedGen[slot] !== Atomics.load(t.generation, slot)) this.forget(slot);
      if (state === DeviceLife.RETIRING && this.expiringSince[slot] !== 0) {
        // Several ingest threads, second step: the expiry record goes in once every ring of the shard has been read
        // past what was written when the device went RETIRING, so it follows every ping of the device in every
        // ring (a ping written since revived the device: it is ACTIVE then, not here).
        if (port.consumedSince !== undefined && !port.consumedSince(this.expiringSince[slot]!, this.shardOf(slot)))
          continue;
        if (!port.expire(slot, this.shardOf(slot), (word >>> DEVICE_LIFE_EPOCH_SHIFT) & DEVICE_LIFE_EPOCH_MASK))
          continue;
        this.expiringSince[slot] = 0;
        written++;
        continue;
      }
      this.expiringSince[slot] = 0;
      if (state !== DeviceLife.ACTIVE || ((tick - Atomics.load(t.seen, slot)) | 0) < idleTicks) continue;
      const epoch = ((word >>> DEVICE_LIFE_EPOCH_SHIFT) + 1) & DEVICE_LIFE_EPOCH_MASK;
      const retiring = (epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING;
      // The dispatcher acts on RETIRING only once it has the marker the expiry record leads to, so the word may move
      // first. Another ingest thread stamps a ping's tick before it reads the life word: either it sees RETIRING (and
      // revives the device), or the stamp is seen here and the expiry is undone.
      if (Atomics.compareExchange(lifeWords, slot, word, retiring) !== word) continue;
      if (((tick - Atomics.load(t.seen, slot)) | 0) < idleTicks) {
        // Undone; when the other thread revived it first, it went through RETIRING all the same (counted so).
        if (Atomics.compareExchange(lifeWords, slot, retiring, word) !== retiring)
          Atomics.add(t.header, DEVID_EXPIRED_I32, 1);
        continue;
      }
      if (!this.solo) {
        // First step: RETIRING now, the record once the rings are read past this sweep (above).
        this.expiringSince[slot] = tick;
        Atomics.add(t.header, DEVID_EXPIRED_I32, 1);
        continue;
      }
      if (!port.expire(slot, this.shardOf(slot), epoch)) {
        Atomics.compareExchange(lifeWords, slot, retiring, word);
        continue;
      }
      Atomics.add(t.header, DEVID_EXPIRED_I32, 1);
      written++;
    }
    return written;
  }

  /**
   * Puts back to ACTIVE every device marked RETIRING whose expiry record is not written yet (several ingest threads, at
   * the drain, when no sweep will write it): it stays in the checkpoint with its state, as a device not expired.
   * Returns the devices put back.
   */
  cancelPendingExpiries(): number {
    const lifeWords = this.table.life;
    let n = 0;
    for (let slot = 0; slot < this.expiringSince.length; slot++) {
      if (this.expiringSince[slot] === 0) continue;
      this.expiringSince[slot] = 0;
      const word = Atomics.load(lifeWords, slot);
      if ((word & DEVICE_LIFE_STATE_MASK) !== DeviceLife.RETIRING) continue;
      const active = (word & ~DEVICE_LIFE_STATE_MASK) | DeviceLife.ACTIVE;
      if (Atomics.compareExchange(lifeWords, slot, word, active) === word) {
        Atomics.sub(this.table.header, DEVID_EXPIRED_I32, 1);
        n++;
      }
    }
    return n;
  }

  /** Drops the cache entries of slots that changed hands or were taken back (each ingest thread, now and then). */
  purgeStale(): number {
    const t = this.table;
    const count = Atomics.load(t.header, DEVID_COUNT_I32);
    let dropped = 0;
    for (let slot = 0; slot < count; slot++) {
      if (this.mapped[slot] === 0) continue;
      if (
        this.cachedGen[slot] !== Atomics.load(t.generation, slot) ||
        (Atomics.load(t.life, slot) & DEVICE_LIFE_STATE_MASK) === DeviceLife.RECLAIMED
      ) {
        this.forget(slot);
        dropped++;
      }
    }
    return dropped;
  }

  /**
   * The cached `slot` still holds the device it was cached for and is live (revived if it was expired): generation
   * unchanged, the ping's tick stamped, the life word ACTIVE (or moved there), generation still unchanged.
   */
  private confirm(slot: number): boolean {
    const t = this.table;
    if (this.solo) {
      if (t.generation[slot] !== this.cachedGen[slot]) return false;
      t.seen[slot] = t.header[DEVID_TICK_I32]!;
      return (Atomics.load(t.life, slot) & DEVICE_LIFE_STATE_MASK) === DeviceLife.ACTIVE || this.revive(slot);
    }
    const generation = Atomics.load(t.generation, slot);
    if (generation !== this.cachedGen[slot]) return false;
    Atomics.store(t.seen, slot, t.header[DEVID_TICK_I32]!);
    if ((Atomics.load(t.life, slot) & DEVICE_LIFE_STATE_MASK) !== DeviceLife.ACTIVE && !this.revive(slot)) return false;
    return Atomics.load(t.generation, slot) === generation;
  }

  /**
   * Moves an expired slot back to ACTIVE (RETIRING or FREE, by a compare-exchange that races the dispatcher's
   * RETIRING -> FREE and the sweep's FREE -> RECLAIMED); false once it is RECLAIMED.
   */
  private revive(slot: number): boolean {
    const lifeWords = this.table.life;
    for (;;) {
      const word = Atomics.load(lifeWords, slot);
      const state = word & DEVICE_LIFE_STATE_MASK;
      if (state === DeviceLife.ACTIVE) return true;
      if (state === DeviceLife.RECLAIMED) return false;
      if (
        Atomics.compareExchange(lifeWords, slot, word, (word & ~DEVICE_LIFE_STATE_MASK) | DeviceLife.ACTIVE) === word
      ) {
        Atomics.add(this.table.header, DEVID_REVIVED_I32, 1);
        return true;
      }
    }
  }

  /** The lock path: the device is found in the shared index or registered, then cached and confirmed. */
  private resolve(fields: PingFields, budget: NewDeviceBudget | null): number {
    const id: string | number = fields.idIsNumber
      ? fields.values[PF_NUMERIC_ID_F64]!
      : fields.idInBytes
        ? fields.idString()
        : fields.idKey;
    if (typeof id === 'string' && Buffer.byteLength(id, 'utf8') > this.idBytesPerSlot) return SLOT_ID_TOO_LONG;
    const hash = hashOfId(id);
    for (;;) {
      let slot: number;
      let generation: number;
      this.lock.acquire();
      try {
        slot = this.findShared(id, hash);
        if (slot < 0) {
          if (budget !== null && !budget.takeNewDevice()) return SLOT_NEW_DEVICE_DENIED;
          slot = this.register(id, hash);
          if (slot < 0) return slot;
        }
        // Read under the lock: once it is let go the slot may be taken back and given to another device, whose
        // generation must not be cached for this id.
        generation = Atomics.load(this.table.generation, slot);
      } finally {
        this.lock.release();
      }
      this.cache(slot, id, hash, generation);
      // A slot found free may be taken back between the lock and here: then the id is looked up again.
      if (this.confirm(slot)) return slot;
      this.forget(slot);
    }
  }

  /** Slot of `id` in the shared index, or -1 (lock held). */
  private findShared(id: string | number, hash: number): number {
    if (typeof id === 'number') return this.index.findNumber(id, hash);
    const bytes = Buffer.from(id, 'utf8');
    return this.index.findBytes(bytes, 0, bytes.length, hash);
  }

  /** Adds `slot` (holding `id` under `generation`, read with the lock held) to this thread's cache. */
  private cache(slot: number, id: string | number, hash: number, generation: number): void {
    if (this.mapped[slot] !== 0) this.forget(slot);
    this.cachedGen[slot] = generation;
    this.cachedHash[slot] = hash;
    if (typeof id === 'number') {
      this.cachedNumber[slot] = id;
      this.numericIds.insert(id, slot);
    } else {
      this.cachedKey[slot] = id;
      this.stringIds.set(id, slot);
      this.bytesIndex.insert(slot, hash);
    }
    this.mapped[slot] = 1;
    this.shardOfSlot[slot] = shardOfHash(hash, this.shards);
    this.anchorLat[slot] = Number.NaN;
    this.anchorLon[slot] = Number.NaN;
  }

  /** Drops `slot` from this thread's cache. */
  private forget(slot: number): void {
    if (this.mapped[slot] === 0) return;
    this.mapped[slot] = 0;
    const key = this.cachedKey[slot];
    if (key === undefined) {
      this.numericIds.remove(this.cachedNumber[slot]!);
    } else {
      // The Map may map the id to a newer slot already (the device registered again elsewhere): keep that.
      if (this.stringIds.get(key) === slot) this.stringIds.delete(key);
      this.bytesIndex.remove(slot, this.cachedHash[slot]!);
      this.cachedKey[slot] = undefined;
    }
  }

  /** Shard of the device in `slot`, from its id in the table. */
  private shardOf(slot: number): number {
    if (this.mapped[slot] !== 0) return this.shardOfSlot[slot]!;
    return shardOfHash(hashOfSlot(this.table, slot), this.shards);
  }

  /** A freed slot leaves the shared index and joins the free stack (member 0's sweep), unless it was revived. */
  private takeBack(slot: number, word: number): void {
    const t = this.table;
    this.lock.acquire();
    try {
      const reclaimed = (word & ~DEVICE_LIFE_STATE_MASK) | DeviceLife.RECLAIMED;
      if (Atomics.compareExchange(t.life, slot, word, reclaimed) !== word) return;
      this.index.remove(slot, hashOfSlot(t, slot));
      const seq = this.reusePort!.finalSeqOf(slot);
      if (seq > t.headerF64[DEVID_FREED_SEQ_HIGH_F64]!) t.headerF64[DEVID_FREED_SEQ_HIGH_F64] = seq;
      const part = partitionOfSlot(t, slot);
      if (seq > t.seqFloors[part]!) t.seqFloors[part] = seq;
      const top = Atomics.load(t.header, DEVID_FREE_TOP_I32);
      t.freeStack[top] = slot;
      Atomics.store(t.header, DEVID_FREE_TOP_I32, top + 1);
      Atomics.add(t.header, DEVID_FREED_I32, 1);
      Atomics.sub(t.header, DEVID_OCCUPIED_I32, 1);
    } finally {
      this.lock.release();
    }
    this.freeSince[slot] = 0;
    this.forget(slot);
  }

  /** Registers a new id (lock held; the caller found it unknown): a fresh slot, else a freed one. */
  private register(id: string | number, hash: number): number {
    const t = this.table;
    const count = Atomics.load(t.header, DEVID_COUNT_I32);
    const top = Atomics.load(t.header, DEVID_FREE_TOP_I32);
    const fresh = count < t.maxDevices;
    if (!fresh && top === 0) return SLOT_REGISTRY_FULL;
    const slot = fresh ? count : t.freeStack[top - 1]!;
    if (!fresh) Atomics.store(t.header, DEVID_FREE_TOP_I32, top - 1);
    // The generation moves first: a reader that copies the id and sees the same generation before and after the copy
    // (a checkpoint) has the bytes of one device, and a cached name of the old device is stale from here on.
    Atomics.add(t.generation, slot, 1);
    let meta: number;
    if (typeof id === 'number') {
      t.numbers[slot] = id;
      meta = DEVID_KIND_NUMBER;
    } else {
      const byteLength = t.bytes.write(id, slot * t.idBytesPerSlot, t.idBytesPerSlot, 'utf8');
      t.numbers[slot] = -1;
      meta = DEVID_KIND_STRING | byteLength;
    }
    Atomics.store(t.seen, slot, t.header[DEVID_TICK_I32]!);
    // A new device starts at its partition's floor, above every seq a freed device of the partition had (it may be one
    // of them, come back), in an old slot and in a fresh one alike.
    this.reusePort?.reused(slot, t.seqFloors[partitionOfId(t, id, slot, meta)]!);
    if (!fresh) Atomics.add(t.header, DEVID_REUSED_I32, 1);
    // Publish: the meta store releases the id bytes written above; the life word makes it ACTIVE (same epoch); the
    // count store releases the meta word.
    Atomics.store(t.meta, slot, meta);
    Atomics.store(t.life, slot, Atomics.load(t.life, slot) & ~DEVICE_LIFE_STATE_MASK);
    Atomics.add(t.header, DEVID_OCCUPIED_I32, 1);
    if (fresh) Atomics.store(t.header, DEVID_COUNT_I32, slot + 1);
    this.index.insert(slot, hash);
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

  /** The table's life words, one per slot (DeviceLife state and epoch, see shm/layout.ts); read them atomically. */
  get lifeWords(): Int32Array {
    return this.table.life;
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
