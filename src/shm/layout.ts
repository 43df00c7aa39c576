/**
 * Every shared-memory layout of the router, in one place.
 *
 * Nothing else in the code base computes a byte offset or an Int32/Float64 index into a SharedArrayBuffer: it asks
 * this module. Each section below owns one kind of region; regions are allocated in `regions.ts` and wrapped by
 * whichever thread uses them.
 *
 * Conventions:
 * - `*_I32` constants are indices into an `Int32Array` over the region, `*_F64` into a `Float64Array`.
 * - Record strides are in bytes (`*_STRIDE_BYTES`) with the matching per-view strides derived from them.
 * - Hot counters live on their own 64-byte cache line so two threads never write the same line.
 */

/** Size of one cache line; producer and consumer counters never share one. */
const CACHE_LINE_BYTES = 64;
/** Int32 cells per cache line. */
const CACHE_LINE_I32 = CACHE_LINE_BYTES / 4;

/** Version of every layout in this file; bumped whenever any offset changes. */
export const LAYOUT_VERSION = 7;

// ---------------------------------------------------------------------------------------------------------------
// Ring header: the first RING_HEADER_BYTES of every ring region (telemetry and trigger rings alike).
// ---------------------------------------------------------------------------------------------------------------

/** Magic number at RING_MAGIC_I32 identifying a ring region ("GRRN"). */
export const RING_MAGIC = 0x4752524e;

/** Producer's published write sequence (monotonic, wraps at 2^32). Line 0: written by the producer only. */
export const RING_WRITE_SEQ_I32 = 0;
/** Consumer's released read sequence (monotonic, wraps at 2^32). Line 1: written by the consumer only. */
export const RING_READ_SEQ_I32 = CACHE_LINE_I32 * 1;
/** 1 while the consumer is (about to be) parked in Atomics.wait on RING_WRITE_SEQ_I32. Line 2. */
export const RING_CONSUMER_SLEEPING_I32 = CACHE_LINE_I32 * 2;
/** 1 while the producer is (about to be) parked in Atomics.wait on RING_READ_SEQ_I32. Line 3. */
export const RING_PRODUCER_SLEEPING_I32 = CACHE_LINE_I32 * 3;
/** Line 4 holds the read-only description written once at allocation. */
export const RING_MAGIC_I32 = CACHE_LINE_I32 * 4;
/** Layout version the region was allocated with. */
export const RING_VERSION_I32 = RING_MAGIC_I32 + 1;
/** Capacity in slots (a power of two). */
export const RING_CAPACITY_I32 = RING_MAGIC_I32 + 2;
/** Record stride in bytes. */
export const RING_STRIDE_I32 = RING_MAGIC_I32 + 3;
/** Record kind (one of RingKind). */
export const RING_KIND_I32 = RING_MAGIC_I32 + 4;
/** Slots at the end of the ring reachable only by the COMPLIANCE lane (telemetry rings; 0 elsewhere). */
export const RING_RESERVED_SLOTS_I32 = RING_MAGIC_I32 + 5;

/** Bytes before the first record: five cache lines, a multiple of 64 and of 8. */
export const RING_HEADER_BYTES = CACHE_LINE_BYTES * 5;

/** What the records of a ring are. */
export const RingKind = {
  /** Decoded telemetry pings, ingest thread -> containment workers. */
  TELEMETRY: 1,
  /** Triggers, containment workers -> dispatcher thread. */
  TRIGGER: 2,
  /** Free-form records for tests and benchmarks. */
  RAW: 3,
  /** Connection bytes forwarded by ingest thread 0 to another ingest thread (INP_* records). */
  INPUT: 4,
} as const;
/** A RingKind value. */
export type RingKind = (typeof RingKind)[keyof typeof RingKind];

/** Largest ring capacity accepted: keeps (write - read) | 0 exact with 32-bit wrapping sequences. */
export const RING_MAX_CAPACITY_SLOTS = 1 << 24;

/** Most ingest threads a router runs (each is the producer of one telemetry ring per shard). */
export const MAX_INGEST_THREADS = 16;

// ---------------------------------------------------------------------------------------------------------------
// Forwarded input: ingest thread 0 accepts every TCP connection and forwards the bytes of those it spreads to
// ingest thread k (k >= 1) through an INPUT ring of its own (one producer, one consumer). Records of INP_STRIDE_BYTES:
// a kind, the connection's number, the payload's length, then the payload (a longer chunk takes several records).
// ---------------------------------------------------------------------------------------------------------------

/** Bytes per forwarded-input record. */
export const INP_STRIDE_BYTES = 4096;
/** Slots of a forwarded-input ring (4 MiB of connection bytes in flight per ingest thread). */
export const INP_RING_SLOTS = 1024;
/** Int32 cell: the record's kind (InputRecordKind). */
export const INP_KIND_I32 = 0;
/** Int32 cell: the connection's number (unique among ingest thread 0's open connections). */
export const INP_CONN_I32 = 1;
/** Int32 cell: payload bytes in this record. */
export const INP_LENGTH_I32 = 2;
/** Byte offset of the payload in a record. */
export const INP_PAYLOAD_BYTE = 16;
/** Payload bytes a record holds at most. */
export const INP_PAYLOAD_MAX_BYTES = INP_STRIDE_BYTES - INP_PAYLOAD_BYTE;
/**
 * Per forwarded connection (its number indexes them, one block per connection the listener allows), Float64 cells the
 * receiving ingest thread writes after each chunk and ingest thread 0 reads for its connection limits: the bytes of a
 * partial frame held back (bufferedBytes) and the memory held for it (heldBytes).
 */
export const INP_CONN_BUFFERED_F64 = 0;
/** See INP_CONN_BUFFERED_F64. */
export const INP_CONN_HELD_F64 = 1;
/** Float64 cells per forwarded connection. */
export const INP_CONN_STRIDE_F64 = 2;

/** What a forwarded-input record says. */
export const InputRecordKind = {
  /** A connection opened; the payload is its name (UTF-8). */
  OPEN: 1,
  /** Bytes the connection received. */
  DATA: 2,
  /** The connection closed (its partial frame, if any, counts as truncated). */
  END: 3,
  /** The router closed the connection as it stopped (its partial frame, if any, counts as cut_at_stop). */
  END_AT_STOP: 4,
} as const;

/**
 * The INGEST CONTROL region (Int32 cells, one cache line each): the doorbell the other ingest threads ring when they
 * publish telemetry (ingest thread 0 submits containment tasks for every shard; it waits on this cell).
 */
export const ICTL_DOORBELL_I32 = 0;
/**
 * Cell ICTL_PEER_DEAD_I32 + k - 1: 1 once ingest thread k (k >= 1) has failed or is exiting (set by that thread), so
 * ingest thread 0 stops waiting for room in its forwarded-input ring (it cannot hear the thread's exit while it waits).
 */
export const ICTL_PEER_DEAD_I32 = 1;
/**
 * Cell ICTL_BUSY_SINCE_TICK_I32 + k - 1: while ingest thread k (k >= 1) holds pings it has not published yet (a read
 * chunk in progress), the expiry sweep's tick (DEVID_TICK_I32, 1 for 0) when it began holding them; 0 when it holds
 * none. A device's expiry record waits until every ping held from before the device was marked expired is published
 * and read (DeviceExpiry.consumedSince), so no ping of a device stamped long before can follow its expiry.
 */
export const ICTL_BUSY_SINCE_TICK_I32 = 16;
/** Int32 cells of the ingest control region (the doorbell, then per ingest thread after 0 a dead flag and a busy tick). */
export const ICTL_REGION_I32 = 32;

/**
 * Index of the telemetry ring that ingest thread `producer` writes for `shard`, among `shards` shards: producer-major
 * (producer 0's rings are 0 .. shards - 1, and so on), so the ring of index r serves shard `r % shards`. Every ring
 * has one producer (its ingest thread) and one consumer (the containment task of its shard's group): SPSC. The
 * admission counter blocks follow the same order (one block per ring).
 */
export function telemetryRingIndex(producer: number, shard: number, shards: number): number {
  return producer * shards + shard;
}

/**
 * Index, among every telemetry ring a containment task can name, of ingest thread `producer`'s COMPLIANCE ring: after
 * the `ingestThreads * shards` shard rings. A COMPLIANCE ring holds the pings of devices on the COMPLIANCE path (see
 * the TRIGGER MARKS region): any shard's, consumed by the COMPLIANCE group's task alone, whose triggers go to the
 * COMPLIANCE trigger ring.
 */
export function complianceRingIndex(producer: number, shards: number, ingestThreads: number): number {
  return ingestThreads * shards + producer;
}

/** Index of the COMPLIANCE trigger ring among memory.triggerRings: after the shards' rings and the control ring. */
export function complianceTriggerRingIndex(shards: number): number {
  return shards + 1;
}

/**
 * Containment counter block of the COMPLIANCE group's task (after the shards' blocks and the control block); its
 * watchdog block is `shards` (after the shards' blocks).
 */
export function complianceCounterBlock(shards: number): number {
  return shards + 1;
}

/**
 * The TRIGGER MARKS region (Int32 cells, TMARK_STRIDE_I32 per device slot): where the device's newest trigger was
 * written, so that an ingest thread can tell when the dispatcher has taken every trigger of a device. A device's pings
 * travel on one path at a time, its shard ring or its ingest thread's COMPLIANCE ring; an ingest thread moves it to
 * the other path only once its last ping there has been released by containment and its last trigger taken by the
 * dispatcher (its ring's read sequence at or past TMARK_END_I32), so neither two containment workers nor two trigger
 * rings ever hold the device's records at once, and its triggers reach the dispatcher in seq order. Written by the
 * containment worker that holds the device's records (after writing its trigger, before releasing the ping); read,
 * and reset to TMARK_NONE once taken (or never to be published: its batch failed), by the ingest thread that routes
 * the device's next ping, and when a freed slot takes a new device.
 */
/** Trigger ring (index among memory.triggerRings) of the device's newest trigger, or TMARK_NONE. */
export const TMARK_RING_I32 = 0;
/** That ring's write sequence just after the trigger (taken once the ring's read sequence is at or past it). */
export const TMARK_END_I32 = 1;
/** Int32 cells per device slot. */
export const TMARK_STRIDE_I32 = 2;
/** TMARK_RING_I32 of a device with no trigger the dispatcher may not have taken. */
export const TMARK_NONE = -1;

// ---------------------------------------------------------------------------------------------------------------
// Telemetry record: one decoded ping. Stride 64 bytes = 8 Float64 cells = 16 Int32 cells.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes per telemetry record. */
export const TELEMETRY_STRIDE_BYTES = 64;
/** Latitude, WGS84 degrees. */
export const TEL_LAT_F64 = 0;
/** Longitude, WGS84 degrees. */
export const TEL_LON_F64 = 1;
/** Event time reported by the device, epoch ms. */
export const TEL_EVENT_TIME_MS_F64 = 2;
/** Admission time on the router's monotonic clock, ns (see `clock.ts`). */
export const TEL_ADMIT_TIME_NS_F64 = 3;
/** Speed over ground, m/s (NaN when not reported). */
export const TEL_SPEED_MPS_F64 = 4;
/** Heading, degrees clockwise from north (NaN when not reported). */
export const TEL_HEADING_DEG_F64 = 5;
/** Horizontal accuracy, metres (NaN when not reported). */
export const TEL_ACCURACY_M_F64 = 6;
/** Dense device slot (index into the device registry and per-device state). Int32 cell 14 = bytes 56..59. */
export const TEL_DEVICE_SLOT_I32 = 14;
/** Lane the ping was admitted in (one of Lane). Int32 cell 15 = bytes 60..63. */
export const TEL_LANE_I32 = 15;

/**
 * TEL_LANE_I32 of an expiry record (not a ping): the ingest thread expired the device in TEL_DEVICE_SLOT_I32, whose
 * life epoch is in TEL_EXPIRE_EPOCH_F64. Containment writes its EXITs (or none), clears it, and writes a retire marker.
 */
export const TEL_LANE_EXPIRE = 7;
/** Cell of an expiry record holding the slot's new life epoch (the speed cell of a ping). */
export const TEL_EXPIRE_EPOCH_F64 = 4;

/** Priority lanes, lowest first: shedding starts at IDLE and never reaches COMPLIANCE while its slice has room. */
export const Lane = {
  /** Stationary or otherwise low-value pings: shed first. */
  IDLE: 0,
  /** Moving devices that may cross an ordinary fence. */
  TRANSITION: 1,
  /** Pings that could produce a trigger on a compliance fence: never shed while the reserved slice has room. */
  COMPLIANCE: 2,
} as const;
/** A Lane value. */
export type Lane = (typeof Lane)[keyof typeof Lane];
/** Number of lanes. */
export const LANE_COUNT = 3;
/** Lane names indexed by Lane value, for logs and metric labels. */
export const LANE_NAMES = ['idle', 'transition', 'compliance'] as const;

// ---------------------------------------------------------------------------------------------------------------
// Trigger record: one ENTER / EXIT / DWELL / CROSS. Stride 64 bytes.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes per trigger record. */
export const TRIGGER_STRIDE_BYTES = 64;
/** Float64 cells per trigger record. */
export const TRIGGER_STRIDE_F64 = TRIGGER_STRIDE_BYTES / 8;
/** Int32 cells per trigger record. */
export const TRIGGER_STRIDE_I32 = TRIGGER_STRIDE_BYTES / 4;
/** Latitude of the ping that produced the trigger. */
export const TRG_LAT_F64 = 0;
/** Longitude of the ping that produced the trigger. */
export const TRG_LON_F64 = 1;
/** Event time of that ping, epoch ms. */
export const TRG_EVENT_TIME_MS_F64 = 2;
/** Admission time of that ping on the router's monotonic clock, ns. */
export const TRG_ADMIT_TIME_NS_F64 = 3;
/**
 * Trigger sequence number of the device: one counter per device, starting at 1, so it is strictly increasing per
 * (device, fence) (with gaps). Receivers order and de-duplicate on (device, seq).
 */
export const TRG_SEQ_F64 = 4;
/** Milliseconds the device had been inside the fence (DWELL and EXIT; 0 otherwise). */
export const TRG_INSIDE_MS_F64 = 5;
/** Fence-store generation the fence index refers to. Int32 cell 12. */
export const TRG_GENERATION_I32 = 12;
/** Trigger type (one of TriggerType). Int32 cell 13. */
export const TRG_TYPE_I32 = 13;
/** Dense device slot. Int32 cell 14. */
export const TRG_DEVICE_SLOT_I32 = 14;
/** Fence index within its generation. Int32 cell 15; the lane is packed in TRG_LANE_SHIFT bits above it. */
export const TRG_FENCE_INDEX_I32 = 15;
/** Lane of the trigger is stored in bits 28..29 of the fence cell; fence indices stay below 2^28. */
export const TRG_LANE_SHIFT = 28;
/** Bit 30 of the fence cell: an EXIT written because the device expired (its JSON says `"reason":"expired"`). */
export const TRG_EXPIRED_FLAG = 1 << 30;
/** Added to a lane given to writeTrigger: once shifted into the fence cell it is TRG_EXPIRED_FLAG. */
export const TRG_LANE_EXPIRED = TRG_EXPIRED_FLAG >>> TRG_LANE_SHIFT;
/**
 * TRG_TYPE_I32 of a retire marker (not a trigger): every trigger of the expired device in TRG_DEVICE_SLOT_I32 is
 * ahead of it in the ring; TRG_SEQ_F64 holds the life epoch it retires. The dispatcher consumes it; no sink sees it.
 */
export const TRG_TYPE_RETIRE = 15;
/** Mask extracting the fence index from TRG_FENCE_INDEX_I32. */
export const TRG_FENCE_INDEX_MASK = (1 << TRG_LANE_SHIFT) - 1;

/** Trigger types. */
export const TriggerType = {
  ENTER: 0,
  EXIT: 1,
  DWELL: 2,
  CROSS: 3,
} as const;
/** A TriggerType value. */
export type TriggerType = (typeof TriggerType)[keyof typeof TriggerType];
/** Number of trigger types. */
export const TRIGGER_TYPE_COUNT = 4;
/** Trigger type names indexed by value, for payloads and metric labels. */
export const TRIGGER_TYPE_NAMES = ['ENTER', 'EXIT', 'DWELL', 'CROSS'] as const;

// ---------------------------------------------------------------------------------------------------------------
// Admission counters: one block per shard, written only by the ingest thread, read at scrape time.
// Float64 cells (exact integers up to 2^53).
// ---------------------------------------------------------------------------------------------------------------

/** Why a ping was shed at admission. */
export const ShedReason = {
  /** The ring (or the part of it the lane may reach) had no free slot. */
  RING_FULL: 0,
  /** Above the watermark, the IDLE lane's token bucket had no token. */
  RATE_LIMITED: 1,
  /** The router is draining and no longer admits. */
  DRAINING: 2,
  /**
   * IDLE or TRANSITION ping of a live source while the ring's oldest record had waited longer than the queue-delay
   * target for at least the interval (see LaneAdmission.observeQueueDelay): a queue kept short in time.
   */
  QUEUE_DELAY: 3,
} as const;
/** A ShedReason value. */
export type ShedReason = (typeof ShedReason)[keyof typeof ShedReason];
/** Number of shed reasons. */
export const SHED_REASON_COUNT = 4;
/** Shed reason names indexed by value, for metric labels. */
export const SHED_REASON_NAMES = ['ring_full', 'rate_limited', 'draining', 'queue_delay'] as const;

/** Offered pings per lane: cells [ADM_OFFERED_F64 + lane]. */
export const ADM_OFFERED_F64 = 0;
/** Admitted pings per lane: cells [ADM_ADMITTED_F64 + lane]. */
export const ADM_ADMITTED_F64 = ADM_OFFERED_F64 + LANE_COUNT;
/** Shed pings per lane and reason: cells [ADM_SHED_F64 + lane * SHED_REASON_COUNT + reason]. */
export const ADM_SHED_F64 = ADM_ADMITTED_F64 + LANE_COUNT;
/** Float64 cells used by one admission counter block. */
export const ADM_BLOCK_USED_F64 = ADM_SHED_F64 + LANE_COUNT * SHED_REASON_COUNT;
/** Float64 cells per block, rounded up to whole cache lines so shards never share a line. */
export const ADM_BLOCK_F64 = Math.ceil(ADM_BLOCK_USED_F64 / 8) * 8;

// ---------------------------------------------------------------------------------------------------------------
// Fence store and per-device state: owned by src/fences.
//
// A fence store generation is three SharedArrayBuffers: the store region below, a flatbush index over every fence's
// bounding box (its own self-describing format) and, when any fence is a compliance fence, a second flatbush index over
// the compliance fences only. Coordinates are stored x = longitude, y = latitude, in degrees.
//
// The region is built with headroom (the *_CAPACITY cells): a live edit appends the new fence's record, rings and
// vertices past the counts of the generation it edits and publishes a new generation that covers them, while older
// generations never read past their own counts. The header's counts are those of the full build (the "base"); an edit
// generation's counts travel in its descriptor.
// ---------------------------------------------------------------------------------------------------------------

/** Magic number at FSTORE_MAGIC_I32 identifying a fence store region ("GRFS"). */
export const FSTORE_MAGIC = 0x47524653;
/** Fence store header cells (Int32). */
export const FSTORE_MAGIC_I32 = 0;
/** Layout version the store was built with (LAYOUT_VERSION). */
export const FSTORE_VERSION_I32 = 1;
/** Generation number of the full build (a reload builds generation + 1; edits publish later generations over it). */
export const FSTORE_GENERATION_I32 = 2;
/** Number of fences of the full build. */
export const FSTORE_FENCE_COUNT_I32 = 3;
/** Number of rings of the full build (outer rings and holes of every polygon part). */
export const FSTORE_RING_COUNT_I32 = 4;
/** Number of packed vertices of the full build (each ring stores its closing vertex). */
export const FSTORE_VERTEX_COUNT_I32 = 5;
/** Number of compliance fences of the full build. */
export const FSTORE_COMPLIANCE_COUNT_I32 = 6;
/** Byte length of the UTF-8 metadata blob (ids, tags and expiry times as JSON) at the end of the region. */
export const FSTORE_META_BYTES_I32 = 7;
/** Fence records the region has room for (full build plus edit headroom). */
export const FSTORE_FENCE_CAPACITY_I32 = 8;
/** Rings the region has room for. */
export const FSTORE_RING_CAPACITY_I32 = 9;
/** Vertices the region has room for. */
export const FSTORE_VERTEX_CAPACITY_I32 = 10;
/** Low 31 bits of the region's random identity (threads reuse what they derived from a region they already opened). */
export const FSTORE_BASE_ID_LO_I32 = 11;
/** High bits of the region's identity. */
export const FSTORE_BASE_ID_HI_I32 = 12;
/** Header bytes: one cache line. */
export const FSTORE_HEADER_BYTES = CACHE_LINE_BYTES;

/** Per-fence Float64 record (array of structs, one record per fence): bounding box, options, circle. */
export const FENCE_STRIDE_F64 = 12;
/** Bounding box west edge, degrees longitude. */
export const FENCE_MIN_X_F64 = 0;
/** Bounding box south edge, degrees latitude. */
export const FENCE_MIN_Y_F64 = 1;
/** Bounding box east edge, degrees longitude. */
export const FENCE_MAX_X_F64 = 2;
/** Bounding box north edge, degrees latitude. */
export const FENCE_MAX_Y_F64 = 3;
/** DWELL threshold, ms inside before DWELL fires; Infinity when the fence has no DWELL. */
export const FENCE_DWELL_MS_F64 = 4;
/** Exit buffer: a device inside stays inside until it is more than this many metres outside (0 = none). */
export const FENCE_EXIT_BUFFER_M_F64 = 5;
/** Time a device must be seen inside before ENTER fires (0 = at once). */
export const FENCE_MIN_INSIDE_MS_F64 = 6;
/** Time a device must be seen outside (beyond the exit buffer) before EXIT fires (0 = at once). */
export const FENCE_MIN_OUTSIDE_MS_F64 = 7;
/** Circle centre longitude, degrees (circles only). */
export const FENCE_CENTER_X_F64 = 8;
/** Circle centre latitude, degrees (circles only). */
export const FENCE_CENTER_Y_F64 = 9;
/** Circle radius, metres (circles only). */
export const FENCE_RADIUS_M_F64 = 10;
/** Metres per degree of longitude at the circle's centre latitude (circles only). */
export const FENCE_M_PER_DEG_X_F64 = 11;

/** Per-fence Int32 record. */
export const FENCE_STRIDE_I32 = 4;
/** Flags: FENCE_FLAG_*. */
export const FENCE_FLAGS_I32 = 0;
/** First ring of the fence (index into the ring offsets); polygons only. */
export const FENCE_FIRST_RING_I32 = 1;
/** Number of rings of the fence (every part's outer ring and holes); polygons only. */
export const FENCE_RING_COUNT_I32 = 2;
/** Flag bit: the fence is a circle (centre and radius), not polygon rings. */
export const FENCE_FLAG_CIRCLE = 1;
/** Flag bit: the fence is a compliance fence. */
export const FENCE_FLAG_COMPLIANCE = 2;

/** Packed vertices: Float64 pairs (x = longitude, y = latitude); ring r spans pairs [offset[r], offset[r + 1]). */
export const VERTEX_STRIDE_F64 = 2;

/** Byte offsets of the sections of a fence store region, from its counts. */
export interface FenceStoreSections {
  /** Start of the per-fence Float64 records. */
  fenceF64Byte: number;
  /** Start of the per-fence Int32 records. */
  fenceI32Byte: number;
  /** Start of the ring offsets (Int32, ringCount + 1 cells). */
  ringOffsetsByte: number;
  /** Start of the packed vertices (Float64 pairs). */
  verticesByte: number;
  /** Start of the UTF-8 metadata blob. */
  metaByte: number;
  /** Total bytes of the region. */
  totalBytes: number;
}

/**
 * Computes the sections of a fence store region from its capacities (fence records, rings, vertices) and metadata
 * size; every section starts on an 8-byte boundary.
 */
export function fenceStoreSections(
  fenceCount: number,
  ringCount: number,
  vertexCount: number,
  metaBytes: number,
): FenceStoreSections {
  const align8 = (n: number): number => Math.ceil(n / 8) * 8;
  const fenceF64Byte = FSTORE_HEADER_BYTES;
  const fenceI32Byte = fenceF64Byte + fenceCount * FENCE_STRIDE_F64 * 8;
  const ringOffsetsByte = align8(fenceI32Byte + fenceCount * FENCE_STRIDE_I32 * 4);
  const verticesByte = align8(ringOffsetsByte + (ringCount + 1) * 4);
  const metaByte = verticesByte + vertexCount * VERTEX_STRIDE_F64 * 8;
  return {
    fenceF64Byte,
    fenceI32Byte,
    ringOffsetsByte,
    verticesByte,
    metaByte,
    totalBytes: align8(metaByte + metaBytes),
  };
}

/** Magic number at DSTATE_MAGIC_I32 identifying a per-device state region ("GRDS"). */
export const DSTATE_MAGIC = 0x47524453;
/** Device state header cells (Int32). */
export const DSTATE_MAGIC_I32 = 0;
/** Layout version. */
export const DSTATE_VERSION_I32 = 1;
/** Number of device slots. */
export const DSTATE_MAX_DEVICES_I32 = 2;
/** Fence entries per device at most (simultaneous fences a device can be in or pending for): inline plus pool. */
export const DSTATE_MAX_FENCES_I32 = 3;
/** Entries each device holds inline (its own, always there). */
export const DSTATE_INLINE_FENCES_I32 = 4;
/** Chunks of ENTRY_CHUNK_ENTRIES entries in the shared overflow pool. */
export const DSTATE_POOL_CHUNKS_I32 = 5;
/** Overflow pool lock: 0 free, 1 held (Atomics.compareExchange; held for a few array writes). */
export const DSTATE_POOL_LOCK_I32 = 6;
/** Overflow pool free list head: chunk id + 1, 0 when the pool is exhausted. Under the lock. */
export const DSTATE_POOL_FREE_HEAD_I32 = 7;
/** Overflow pool chunks in use (read by metrics with Atomics.load). Under the lock. */
export const DSTATE_POOL_USED_I32 = 8;
/** Header bytes: one cache line. */
export const DSTATE_HEADER_BYTES = CACHE_LINE_BYTES;
/** Entries per overflow pool chunk. */
export const ENTRY_CHUNK_ENTRIES = 8;

/** Per-device Float64 record. */
export const DEV_STRIDE_F64 = 5;
/** Event time of the device's last accepted ping, epoch ms (-Infinity before the first). */
export const DEV_LAST_EVENT_MS_F64 = 0;
/** Latitude of the last accepted ping. */
export const DEV_LAST_LAT_F64 = 1;
/** Longitude of the last accepted ping. */
export const DEV_LAST_LON_F64 = 2;
/** Last trigger sequence number issued for the device (strictly increasing per device, hence per (device, fence)). */
export const DEV_TRIGGER_SEQ_F64 = 3;
/** Event time (of the device's ping) its current CROSS budget window began, epoch ms (the per-device CROSS budget). */
export const DEV_CROSS_WINDOW_MS_F64 = 4;

/** Per-device Int32 record. */
export const DEV_STRIDE_I32 = 8;
/** Number of fence entries in use. */
export const DEV_ENTRY_COUNT_I32 = 0;
/** Fence-store generation the device's entries refer to. */
export const DEV_GENERATION_I32 = 1;
/** Entries on compliance fences (pending or inside); read by the ingest thread with Atomics.load. */
export const DEV_COMPLIANCE_COUNT_I32 = 2;
/** 1 once the device has an accepted ping (last position valid). */
export const DEV_HAS_LAST_I32 = 3;
/**
 * 1 when the device's last ping was inside a fence it had no free entry for (untracked): its next ping must not take
 * such a fence for a new stay (no late ENTER) nor its leaving for a CROSS.
 */
export const DEV_UNTRACKED_I32 = 4;
/** Overflow pool chunks the device holds (their ids in the chunk table, in entry order). */
export const DEV_CHUNK_COUNT_I32 = 5;
/** CROSS triggers written in the device's current budget window. */
export const DEV_CROSS_COUNT_I32 = 6;
/**
 * The device's write version (a per-device seqlock): odd while the thread running its shard updates its state, even
 * otherwise (Atomics.store at both ends of each update, DeviceState.beginWrite / endWrite). A checkpoint copies the
 * device's cells and entries between two equal even reads, so it captures state without pausing containment.
 */
export const DEV_VERSION_I32 = 7;

/**
 * Per-entry Float64 record. Device d's entries 0 .. inline-1 are entries d * inline + e; its entry e >= inline lives
 * in overflow chunk table[d][(e - inline) / ENTRY_CHUNK_ENTRIES] at maxDevices * inline + chunk * ENTRY_CHUNK_ENTRIES +
 * (e - inline) % ENTRY_CHUNK_ENTRIES (see DeviceState.entryIndex).
 */
export const ENTRY_STRIDE_F64 = 2;
/** Time the stay began, epoch ms: first ping seen inside (also while ENTER is pending). */
export const ENTRY_SINCE_MS_F64 = 0;
/** Time the pending transition began (first ping seen outside while inside), epoch ms. */
export const ENTRY_PENDING_MS_F64 = 1;

/** Per-entry Int32 record. */
export const ENTRY_STRIDE_I32 = 2;
/** Fence index within DEV_GENERATION_I32's store. */
export const ENTRY_FENCE_I32 = 0;
/** Entry state: EntryState bits. */
export const ENTRY_STATE_I32 = 1;

/** Entry state bits. */
export const EntryState = {
  /** Seen inside; ENTER waits for minInsideMs. */
  PENDING_ENTER: 1,
  /** ENTER emitted. */
  INSIDE: 2,
  /** Inside, and seen outside (beyond the exit buffer) since ENTRY_PENDING_MS; EXIT waits for minOutsideMs. */
  PENDING_EXIT: 4,
  /** DWELL emitted for this stay. */
  DWELL_FIRED: 8,
} as const;

/** Byte offsets of the sections of a device state region. */
export interface DeviceStateSections {
  /** Start of the per-device Float64 records. */
  deviceF64Byte: number;
  /** Start of the per-device Int32 records. */
  deviceI32Byte: number;
  /** Start of the per-entry Float64 records (inline entries of every device, then the pool's chunks). */
  entryF64Byte: number;
  /** Start of the per-entry Int32 records. */
  entryI32Byte: number;
  /** Start of the chunk table: chunksPerDevice Int32 chunk ids per device. */
  chunkTableByte: number;
  /** Start of the pool's free-list links: one Int32 per chunk (next free chunk id + 1, 0 at the end). */
  poolNextByte: number;
  /** Overflow chunks a device can hold: ceil((maxFences - inline) / ENTRY_CHUNK_ENTRIES). */
  chunksPerDevice: number;
  /** Entries in all: maxDevices * inline + poolChunks * ENTRY_CHUNK_ENTRIES. */
  entries: number;
  /** Total bytes of the region. */
  totalBytes: number;
}

/** Computes the sections of a device state region. */
export function deviceStateSections(
  maxDevices: number,
  maxFencesPerDevice: number,
  inlineFences: number,
  poolChunks: number,
): DeviceStateSections {
  const entries = maxDevices * inlineFences + poolChunks * ENTRY_CHUNK_ENTRIES;
  const chunksPerDevice = Math.ceil(Math.max(0, maxFencesPerDevice - inlineFences) / ENTRY_CHUNK_ENTRIES);
  const deviceF64Byte = DSTATE_HEADER_BYTES;
  const entryF64Byte = deviceF64Byte + maxDevices * DEV_STRIDE_F64 * 8;
  const deviceI32Byte = entryF64Byte + entries * ENTRY_STRIDE_F64 * 8;
  const entryI32Byte = deviceI32Byte + maxDevices * DEV_STRIDE_I32 * 4;
  const chunkTableByte = entryI32Byte + entries * ENTRY_STRIDE_I32 * 4;
  const poolNextByte = chunkTableByte + maxDevices * chunksPerDevice * 4;
  const totalBytes = Math.ceil((poolNextByte + poolChunks * 4) / 8) * 8;
  return {
    deviceF64Byte,
    deviceI32Byte,
    entryF64Byte,
    entryI32Byte,
    chunkTableByte,
    poolNextByte,
    chunksPerDevice,
    entries,
    totalBytes,
  };
}

// Containment counters: one block per shard, written by the worker running that shard's batch (at most one at a time),
// read at scrape time. Float64 cells.

/** Pings processed (accepted by the state machine). */
export const CNT_PROCESSED_F64 = 0;
/** Triggers written per type: cells [CNT_TRIGGERS_F64 + TriggerType]. */
export const CNT_TRIGGERS_F64 = 1;
/** Pings older than the device's last ping: ignored. */
export const CNT_STALE_F64 = CNT_TRIGGERS_F64 + TRIGGER_TYPE_COUNT;
/** Pings with an out-of-range slot or coordinate: ignored. */
export const CNT_INVALID_F64 = CNT_STALE_F64 + 1;
/**
 * Pings that found the device inside a fence it had no free entry for (maxFencesPerDevice reached or the overflow
 * pool empty): that fence is not tracked for the stay, and no trigger is written about it.
 */
export const CNT_FENCE_OVERFLOW_F64 = CNT_INVALID_F64 + 1;
/** Times a query had more candidates than the scratch array holds (the rest were not tested). */
export const CNT_CANDIDATE_OVERFLOW_F64 = CNT_FENCE_OVERFLOW_F64 + 1;
/** Devices whose state referred to another generation than the engine's store: entries dropped. */
export const CNT_GENERATION_MISMATCH_F64 = CNT_CANDIDATE_OVERFLOW_F64 + 1;
/** Exact containment tests run (candidates whose box held the point). */
export const CNT_EXACT_TESTS_F64 = CNT_GENERATION_MISMATCH_F64 + 1;
/** Times the trigger ring was full and the worker blocked for space. */
export const CNT_TRIGGER_RING_WAITS_F64 = CNT_EXACT_TESTS_F64 + 1;
/** Expiry records processed: devices expired (their state cleared, their slot handed back for reuse). */
export const CNT_EXPIRED_DEVICES_F64 = CNT_TRIGGER_RING_WAITS_F64 + 1;
/** EXIT triggers written because their device expired (counted under EXIT triggers too). */
export const CNT_EXPIRY_EXITS_F64 = CNT_EXPIRED_DEVICES_F64 + 1;
/** Moves judged implausible (too fast, or too long a gap): no CROSS was looked for along them. */
export const CNT_IMPLAUSIBLE_SEGMENTS_F64 = CNT_EXPIRY_EXITS_F64 + 1;
/** CROSS triggers not written because their device had used its CROSS budget for the second. */
export const CNT_CROSS_OVER_BUDGET_F64 = CNT_IMPLAUSIBLE_SEGMENTS_F64 + 1;
/**
 * Time the containment task of a shard group spent parked waiting for records, ns (in the block of the group's first
 * shard, shard g for group g; written by the task holding the group). Near the elapsed time: the group idles; near 0:
 * it works flat out (or its task is between submissions, which this does not count).
 */
export const CNT_PARKED_NS_F64 = CNT_CROSS_OVER_BUDGET_F64 + 1;
/** Float64 cells used by one containment counter block. */
const CNT_BLOCK_USED_F64 = CNT_PARKED_NS_F64 + 1;
/** Float64 cells per block, rounded up to whole cache lines so shards never share a line. */
export const CNT_BLOCK_F64 = Math.ceil(CNT_BLOCK_USED_F64 / 8) * 8;

// ---------------------------------------------------------------------------------------------------------------
// Pipeline control and counters: owned by the pipeline.
//
// Two regions. The PIPELINE region holds control cells (Int32, one cache line each because different threads write
// them) followed by the ingest counter block (Float64, written only by the ingest thread, read at scrape time).
// The DEVICE ID TABLE region lets any thread name a device from its dense slot: per slot a meta word (Int32), a
// numeric id (Float64), a generation, a life word and a fixed run of UTF-8 bytes (a freed slot is reused by a new
// device under a new generation), then one seq floor per partition of the partitioned source.
// ---------------------------------------------------------------------------------------------------------------

/** Magic number at PIPE_MAGIC_I32 identifying the pipeline region ("GRPL"). */
export const PIPE_MAGIC = 0x4752504c;
/** Line 0: magic, written once at allocation. */
export const PIPE_MAGIC_I32 = 0;
/** Layout version the region was allocated with. */
export const PIPE_VERSION_I32 = 1;
/** Shard count the region was allocated for (read-only). */
export const PIPE_SHARDS_I32 = 2;
/** Current fence-store generation (written by the main thread on reload, read at scrape time; tasks carry their own). Line 1. */
export const CTL_FENCE_GENERATION_I32 = CACHE_LINE_I32 * 1;
/** 1 once the router drains: the ingest edge stops admitting (written by the main thread). Line 2. */
export const CTL_DRAINING_I32 = CACHE_LINE_I32 * 2;
/** Dispatcher doorbell: producers of triggers `Atomics.add` then `Atomics.notify`; the dispatcher waits on it. Line 3. */
export const CTL_DISPATCH_DOORBELL_I32 = CACHE_LINE_I32 * 3;
/**
 * 1 while the dispatcher is (about to be) parked on the doorbell, so producers notify only then. Same line 3 as the
 * doorbell on purpose: a producer reads both right after ringing, and the dispatcher writes it only around a park.
 */
export const CTL_DISPATCH_SLEEPING_I32 = CTL_DISPATCH_DOORBELL_I32 + 1;
/** Ingest thread state (one of IngestState); written by the ingest thread. Line 4. */
export const CTL_INGEST_STATE_I32 = CACHE_LINE_I32 * 4;
/** Bound TCP port of the ingest listener (0 until bound); written by the ingest thread. Same line 4. */
export const CTL_INGEST_PORT_I32 = CTL_INGEST_STATE_I32 + 1;
/**
 * Bytes of `ingest()` calls posted to the ingest thread and not yet fed to the edge: the main thread `Atomics.add`s
 * when it posts, the ingest thread `Atomics.sub`s as it feeds (see src/pipeline/input-backlog.ts). Line 5, with the
 * other input backlog cells: each is touched once per message or read piece, never per ping.
 */
export const CTL_INPUT_BYTES_I32 = CACHE_LINE_I32 * 5;
/** Points of `push()` calls posted to the ingest thread and not yet offered to admission. Same line 5. */
export const CTL_INPUT_POINTS_I32 = CTL_INPUT_BYTES_I32 + 1;
/** 1 while the main thread waits for the in-process backlog to fall to its low-water mark. Same line 5. */
export const CTL_INPUT_WAITING_I32 = CTL_INPUT_BYTES_I32 + 2;
/** Bytes of stdin forwarded to the ingest thread and not yet fed to the edge. Same line 5. */
export const CTL_STDIN_BYTES_I32 = CTL_INPUT_BYTES_I32 + 3;
/** 1 while stdin is paused, waiting for its forwarded backlog to fall to its low-water mark. Same line 5. */
export const CTL_STDIN_WAITING_I32 = CTL_INPUT_BYTES_I32 + 4;
/** Bytes of control lines before the ingest counter block. */
const PIPE_CONTROL_BYTES = CACHE_LINE_BYTES * 6;

/** Lifecycle of the ingest thread as published in CTL_INGEST_STATE_I32. */
export const IngestState = {
  STARTING: 0,
  RUNNING: 1,
  DRAINING: 2,
  STOPPED: 3,
} as const;
/** An IngestState value. */
export type IngestState = (typeof IngestState)[keyof typeof IngestState];

/** Why the ingest edge rejected a frame or a ping (before admission). */
export const RejectReason = {
  /** Bytes that are not MessagePack, or that msgpackr could not decode (0xc1, bad record definition, ...). */
  CORRUPT_FRAME: 0,
  /** The stream ended (connection closed, file ended, `ingest()` call ended) inside a frame. */
  TRUNCATED_FRAME: 1,
  /** The frame would exceed the frame-size limit. */
  OVERSIZED_FRAME: 2,
  /** The top-level value is not a map (or a msgpackr record). */
  NOT_A_MAP: 3,
  /** A key that is not one of the telemetry keys, not a string, or repeated. */
  UNKNOWN_KEY: 4,
  /** A map, array, record or extension where a scalar value is expected. */
  UNSUPPORTED_VALUE: 5,
  /** No `id`. */
  MISSING_ID: 6,
  /** `id` is neither a non-empty string nor an unsigned safe integer. */
  INVALID_ID: 7,
  /** `id` is a string longer than the id table's bytes per slot (UTF-8). */
  ID_TOO_LONG: 8,
  /** `lat` missing, not a number, NaN, or outside [-90, 90]. */
  INVALID_LAT: 9,
  /** `lon` missing, not a number, NaN, or outside [-180, 180]. */
  INVALID_LON: 10,
  /** `ts` missing, not a finite number, or outside the accepted epoch-ms range. */
  INVALID_TS: 11,
  /** `speed` present but not a finite number >= 0. */
  INVALID_SPEED: 12,
  /** `heading` present but not a finite number in [0, 360]. */
  INVALID_HEADING: 13,
  /** `accuracy` present but not a finite number >= 0. */
  INVALID_ACCURACY: 14,
  /** `lane` present but not one of "idle" / "transition" / "compliance" / 0 / 1 / 2. */
  INVALID_LANE: 15,
  /** A new device while every device slot is taken. */
  REGISTRY_FULL: 16,
  /** A ping over its connection's or source address's pings-per-second budget (ingest flood limits). */
  CONNECTION_RATE: 17,
  /** A new device over its connection's or source address's new-devices-per-second budget (ingest flood limits). */
  NEW_DEVICE_RATE: 18,
  /** A ping read from a partition of a partitioned log (JetStream) that its device's id does not map to. */
  WRONG_PARTITION: 19,
  /**
   * The router stopped while a frame of an open connection (or of a replay it stopped reading) was partly received:
   * the stop cut the frame, not its sender.
   */
  CUT_AT_STOP: 20,
} as const;
/** A RejectReason value. */
export type RejectReason = (typeof RejectReason)[keyof typeof RejectReason];
/** Number of reject reasons. */
export const REJECT_REASON_COUNT = 21;
/** Reject reason names indexed by value, for logs and metric labels. */
export const REJECT_REASON_NAMES = [
  'corrupt_frame',
  'truncated_frame',
  'oversized_frame',
  'not_a_map',
  'unknown_key',
  'unsupported_value',
  'missing_id',
  'invalid_id',
  'id_too_long',
  'invalid_lat',
  'invalid_lon',
  'invalid_ts',
  'invalid_speed',
  'invalid_heading',
  'invalid_accuracy',
  'invalid_lane',
  'registry_full',
  'connection_rate',
  'new_device_rate',
  'wrong_partition',
  'cut_at_stop',
] as const;

/** First Float64 cell of the ingest counter block (PIPE_CONTROL_BYTES / 8). */
const ING_BASE_F64 = PIPE_CONTROL_BYTES / 8;
/** Bytes received from every source. */
export const ING_BYTES_F64 = ING_BASE_F64 + 0;
/** Frames delimited and looked at (accepted + rejected, resynchronisation candidates that failed excluded). */
export const ING_FRAMES_F64 = ING_BASE_F64 + 1;
/** Pings that passed validation and the registry and were handed to admission. */
export const ING_ACCEPTED_F64 = ING_BASE_F64 + 2;
/** Bytes skipped while resynchronising after a structural reject. */
export const ING_RESYNC_SKIPPED_BYTES_F64 = ING_BASE_F64 + 3;
/** Resynchronisations started (one per structural reject at a frame boundary). */
export const ING_RESYNCS_F64 = ING_BASE_F64 + 4;
/** TCP connections accepted. */
export const ING_CONNECTIONS_OPENED_F64 = ING_BASE_F64 + 5;
/** TCP connections closed (open = opened - closed). */
export const ING_CONNECTIONS_CLOSED_F64 = ING_BASE_F64 + 6;
/** TCP connections refused because the connection limit was reached. */
export const ING_CONNECTIONS_REFUSED_F64 = ING_BASE_F64 + 7;
/** Device slots in use (a gauge): registered devices not yet expired and freed. */
export const ING_DEVICES_F64 = ING_BASE_F64 + 8;
/** Devices expired for idleness (an expiry record written for each). */
export const ING_DEVICES_EXPIRED_F64 = ING_BASE_F64 + 9;
/** Expired devices that sent again before their slot was freed (they keep their slot and seq). */
export const ING_DEVICES_REVIVED_F64 = ING_BASE_F64 + 10;
/** Slots freed after an expiry (every thread done with the old device). */
export const ING_SLOTS_FREED_F64 = ING_BASE_F64 + 11;
/** Registrations that reused a freed slot. */
export const ING_SLOTS_REUSED_F64 = ING_BASE_F64 + 12;
/**
 * Highest trigger seq any freed slot's device had (a gauge): a device registered into a reused slot starts above it,
 * and checkpoints keep the seq floor at or above it, so a device that comes back never reuses a (deviceId, seq).
 */
export const ING_FREED_SEQ_HIGH_F64 = ING_BASE_F64 + 13;
/** Bytes the TCP connections hold for partial frames, summed (a gauge, within ingest.maxHeldBytes). */
export const ING_HELD_BYTES_F64 = ING_BASE_F64 + 14;
/**
 * Times ingest thread 0 paused a telemetry connection because the ingest thread it was spread to had no room in its
 * input ring (that thread is saturated): the connection's bytes waited, in order, and TCP slowed its sender.
 */
export const ING_FORWARD_PAUSES_F64 = ING_BASE_F64 + 15;
/** Why the router closed a telemetry connection (not the client): cells [ING_CONNECTIONS_DROPPED_F64 + reason]. */
export const ConnectionDropReason = {
  /** Nothing received for ingest.idleTimeoutMs. */
  IDLE: 0,
  /** A frame begun and not completed within ingest.frameDeadlineMs (a trickling client). */
  FRAME_DEADLINE: 1,
  /** The partial frames of all connections held more than ingest.maxHeldBytes: the oldest partial frame's goes. */
  HELD_BYTES: 2,
  /** ingest.authToken is set and the connection did not open with the line `AUTH <token>` carrying it. */
  UNAUTHENTICATED: 3,
  /** The TLS handshake failed (a plain-TCP client, a client certificate refused, a protocol error). */
  TLS_HANDSHAKE: 4,
} as const;
/** Number of connection drop reasons. */
export const CONNECTION_DROP_REASON_COUNT = 5;
/** Connection drop reason names indexed by value, for metric labels. */
export const CONNECTION_DROP_REASON_NAMES = [
  'idle',
  'frame_deadline',
  'held_bytes',
  'unauthenticated',
  'tls_handshake',
] as const;
/** Telemetry connections the router closed, by ConnectionDropReason. */
export const ING_CONNECTIONS_DROPPED_F64 = ING_BASE_F64 + 16;
/** Rejected frames and pings per reason: cells [ING_REJECTED_F64 + reason]. */
export const ING_REJECTED_F64 = ING_CONNECTIONS_DROPPED_F64 + CONNECTION_DROP_REASON_COUNT;
/**
 * Ingest counter cells another ingest thread writes into a pipeline region of its own and ingest thread 0 adds into
 * the router's (counters only: gauges and connection counts are ingest thread 0's, or shared already).
 */
export const ING_FOLDED_CELLS: readonly number[] = [
  ING_BYTES_F64,
  ING_FRAMES_F64,
  ING_ACCEPTED_F64,
  ING_RESYNC_SKIPPED_BYTES_F64,
  ING_RESYNCS_F64,
  ...Array.from({ length: REJECT_REASON_COUNT }, (_, r) => ING_REJECTED_F64 + r),
];
/** Float64 cells in the ingest counter block, rounded up to whole cache lines. */
const ING_BLOCK_F64 = Math.ceil((ING_REJECTED_F64 - ING_BASE_F64 + REJECT_REASON_COUNT) / 8) * 8;
/** Total bytes of the pipeline region. */
export const PIPE_REGION_BYTES = PIPE_CONTROL_BYTES + ING_BLOCK_F64 * 8;

/**
 * The PIPELINE STATS region (Float64 cells): the batching counters of the ingest thread on line 0, the reload and
 * checkpoint counters of the main thread on line 1, then two held-time histograms (admission -> handed to a
 * downstream: triggers delivered without a dead letter, then dead letters re-delivered by the replay lane) written by
 * the dispatcher thread. Read at scrape time and by `Router.stats()`.
 */
/** Containment tasks submitted to the pool (ingest thread). */
export const PST_TASKS_SUBMITTED_F64 = 0;
/** Containment tasks completed (ingest thread, when the pool answers). */
export const PST_TASKS_COMPLETED_F64 = 1;
/** Pings carried by completed tasks (ingest thread). */
export const PST_BATCHED_PINGS_F64 = 2;
/** Containment tasks that failed (the worker threw or exited; watchdog aborts count in PST_TASKS_ABORTED_F64); their lost pings in PST_LOST_PINGS_F64. */
export const PST_TASKS_FAILED_F64 = 3;
/** Pings of failed or aborted tasks, released unprocessed (ingest thread); the watchdog's share is PST_LOST_PINGS_HUNG_F64. */
export const PST_LOST_PINGS_F64 = 4;
/** Containment tasks aborted by the watchdog because they made no progress (ingest thread). Same line 0. */
export const PST_TASKS_ABORTED_F64 = 5;
/** Shard groups currently declared hung by the watchdog (a gauge; ingest thread). Same line 0. */
export const PST_STALLED_GROUPS_F64 = 6;
/** Pings a hung task was processing, dropped (reason "hung"), included in PST_LOST_PINGS_F64 (ingest thread). */
export const PST_LOST_PINGS_HUNG_F64 = 7;
/** Fence reloads completed (main thread). Line 1. */
export const PST_RELOADS_F64 = 8;
/** Fence reloads refused (bad GeoJSON; the old store kept serving). Same line 1. */
export const PST_RELOADS_FAILED_F64 = 9;
/** Checkpoints of the device state written (main thread). Line 1. */
export const PST_CHECKPOINTS_F64 = 10;
/** Checkpoints that failed (the previous one stays in force). */
export const PST_CHECKPOINT_FAILURES_F64 = 11;
/** Duration of the last checkpoint (pause, copy, encode, write, fsync), ns. */
export const PST_CHECKPOINT_LAST_NS_F64 = 12;
/** How long the last checkpoint paused containment (pause request to resumption, the copy included), ns. */
export const PST_CHECKPOINT_PAUSE_NS_F64 = 13;
/** Bytes of the last checkpoint file. */
export const PST_CHECKPOINT_BYTES_F64 = 14;
/** Devices in the last checkpoint. */
export const PST_CHECKPOINT_DEVICES_F64 = 15;
/**
 * Checkpoints that paused containment to copy the device state: the copy taken while it runs (DEV_VERSION_I32) did not
 * settle within its budget (a device's update held up, e.g. by a full trigger ring), so the pausing copy was used.
 */
export const PST_CHECKPOINTS_PAUSED_F64 = 16;
/** Live fence edits applied (upserts and removals, expiries included; main thread). */
export const PST_FENCE_EDITS_F64 = 17;
/** Live fence edits refused (invalid fence) or failed. */
export const PST_FENCE_EDITS_FAILED_F64 = 18;
/** Duration of the last live fence edit (call to the new generation in force), ns. */
export const PST_FENCE_EDIT_LAST_NS_F64 = 19;
/**
 * Input files (ingest thread) or stdin (main thread) whose reading ended with an error: what followed the error was not
 * read, a loss the drain reports (exit 3).
 */
export const PST_INPUT_ERRORS_F64 = 20;
/**
 * Checkpoints not written because the triggers of the pings their copy held were not handed on in time (a JetStream
 * source whose device state stays in the state directory: see PipelineRouter.checkpointNow; main thread).
 */
export const PST_CHECKPOINTS_DEFERRED_F64 = 21;
/** First cell of the held-time block (line 3): written by the dispatcher thread only. */
export const PST_HELD_BASE_F64 = 24;
/** Held-time samples (triggers delivered, timed to the hand-over of the attempt that succeeded). */
export const HELD_COUNT_F64 = 0;
/** Sum of the held times, ns. */
export const HELD_SUM_NS_F64 = 1;
/** Longest held time, ns. */
export const HELD_MAX_NS_F64 = 2;
/** Histogram cells start here (relative to PST_HELD_BASE_F64): bucket i counts samples in (bound(i-1), bound(i)]. */
export const HELD_BUCKETS_F64 = 8;
/** Upper bound of held-time bucket 0, ns; bucket i's bound is HELD_FIRST_BOUND_NS * HELD_BOUND_GROWTH^i. */
export const HELD_FIRST_BOUND_NS = 10_000;
/** Growth factor between consecutive bucket bounds (quantiles are exact to within this ratio). */
export const HELD_BOUND_GROWTH = 1.25;
/** Bounded buckets (the last bound is about 12.7 s); one more bucket counts everything above. */
export const HELD_BOUNDED_BUCKETS = 64;
/** Histogram cells: the bounded buckets plus the overflow bucket. */
export const HELD_BUCKET_COUNT = HELD_BOUNDED_BUCKETS + 1;
/** Float64 cells of the held-time block, whole cache lines. */
export const HELD_BLOCK_F64 = Math.ceil((HELD_BUCKETS_F64 + HELD_BUCKET_COUNT) / 8) * 8;
/** First cell of the replay held-time block: dead letters re-delivered by the replay lane (same layout). */
export const PST_REPLAY_HELD_BASE_F64 = PST_HELD_BASE_F64 + HELD_BLOCK_F64;
/**
 * First of LANE_COUNT blocks (same layout; block l at PST_TAKEN_BASE_F64 + l * HELD_BLOCK_F64): per trigger lane, the
 * time from admission to the start of the dispatcher's pass over the trigger rings that took the trigger, for each trigger routed to a
 * downstream (the pipeline's part of the held time). Written by the dispatcher thread only.
 */
export const PST_TAKEN_BASE_F64 = PST_REPLAY_HELD_BASE_F64 + HELD_BLOCK_F64;
/** Float64 cells of the pipeline stats region. */
export const PST_REGION_F64 = PST_TAKEN_BASE_F64 + LANE_COUNT * HELD_BLOCK_F64;

/** Magic number at DEVID_MAGIC_I32 identifying a device id table ("GRDV"). */
export const DEVID_MAGIC = 0x47524456;
/** Header cells (Int32): magic, version, max devices, id bytes per slot, published slot count. */
export const DEVID_MAGIC_I32 = 0;
/** Layout version. */
export const DEVID_VERSION_I32 = 1;
/** Number of slots (max devices). */
export const DEVID_MAX_DEVICES_I32 = 2;
/** UTF-8 bytes reserved per slot (the longest string id accepted). */
export const DEVID_ID_BYTES_I32 = 3;
/** Slots published so far (slots 0 .. count-1 are valid); stored after the slot's meta word. */
export const DEVID_COUNT_I32 = 4;
/** Bit k set once ingest thread k's registry has joined the table (a second registry for one thread is refused). */
export const DEVID_MEMBERS_I32 = 5;
/**
 * The registration lock: 0 free, 1 held, 2 held with a waiter. Every change of the shared index, the free stack and
 * the counts below happens under it (a registration, or the expiry sweep taking a slot back); pings of known devices
 * never take it.
 */
export const DEVID_LOCK_I32 = 6;
/** Slots on the shared free stack (freed by expiry, taken back, ready for new devices). */
export const DEVID_FREE_TOP_I32 = 7;
/** The expiry sweep's tick (ingest thread 0 advances it; every registry stamps a device's ping with it). */
export const DEVID_TICK_I32 = 8;
/** Slots holding a device (registered, not taken back). */
export const DEVID_OCCUPIED_I32 = 9;
/** Devices expired (ACTIVE -> RETIRING). */
export const DEVID_EXPIRED_I32 = 10;
/** Expired devices that sent again before their slot was taken back. */
export const DEVID_REVIVED_I32 = 11;
/** Slots taken back. */
export const DEVID_FREED_I32 = 12;
/** Registrations into a taken-back slot. */
export const DEVID_REUSED_I32 = 13;
/** Float64 cell (Int32 cells 14-15): the highest final seq of a taken-back slot's device (-Infinity before any). */
export const DEVID_FREED_SEQ_HIGH_F64 = 7;
/** Bytes of the header (one cache line). */
export const DEVID_HEADER_BYTES = CACHE_LINE_BYTES;
/** Meta word of a slot: 0 = empty; DEVID_KIND_STRING | byteLength; or DEVID_KIND_NUMBER. */
const DEVID_KIND_SHIFT = 24;
/** Kind bits for a string id (byte length in the low 24 bits). */
export const DEVID_KIND_STRING = 1 << DEVID_KIND_SHIFT;
/** Kind bits for an unsigned-integer id (value in the numeric column). */
export const DEVID_KIND_NUMBER = 2 << DEVID_KIND_SHIFT;
/** Mask of the byte length in a string meta word. */
export const DEVID_LENGTH_MASK = (1 << DEVID_KIND_SHIFT) - 1;
/** Largest accepted `idBytesPerSlot`. */
export const DEVID_MAX_ID_BYTES = 1024;

/** Byte offset of the numeric column (Float64 per slot), right after the header. */
export function devIdNumbersByteOffset(): number {
  return DEVID_HEADER_BYTES;
}
/** Byte offset of the meta column (Int32 per slot), after the numeric column. */
export function devIdMetaByteOffset(maxDevices: number): number {
  return DEVID_HEADER_BYTES + maxDevices * 8;
}
/** Byte offset of the generation column (Int32 per slot): bumped by each registration into the slot. */
export function devIdGenerationByteOffset(maxDevices: number): number {
  return devIdMetaByteOffset(maxDevices) + Math.ceil((maxDevices * 4) / 8) * 8;
}
/** Byte offset of the life column (Int32 per slot, a DeviceLife word), after the generation column. */
export function devIdLifeByteOffset(maxDevices: number): number {
  return devIdGenerationByteOffset(maxDevices) + Math.ceil((maxDevices * 4) / 8) * 8;
}
/** Byte offset of the seen column (Int32 per slot: the sweep tick of the device's last ping), after the life column. */
export function devIdSeenByteOffset(maxDevices: number): number {
  return devIdLifeByteOffset(maxDevices) + Math.ceil((maxDevices * 4) / 8) * 8;
}
/** Byte offset of the shared free stack (Int32 per slot), after the seen column. */
export function devIdFreeStackByteOffset(maxDevices: number): number {
  return devIdSeenByteOffset(maxDevices) + Math.ceil((maxDevices * 4) / 8) * 8;
}
/** Buckets of the shared id index: a power of two at least twice the slots (it is never more than half full). */
export function devIdIndexBuckets(maxDevices: number): number {
  let n = 64;
  while (n < maxDevices * 2) n *= 2;
  return n;
}
/** Byte offset of the shared id index's slot column (Int32 per bucket: slot + 1, 0 empty), after the free stack. */
export function devIdIndexSlotsByteOffset(maxDevices: number): number {
  return devIdFreeStackByteOffset(maxDevices) + Math.ceil((maxDevices * 4) / 8) * 8;
}
/** Byte offset of the shared id index's hash column (Int32 per bucket: the id's 32-bit hash). */
export function devIdIndexHashesByteOffset(maxDevices: number): number {
  return devIdIndexSlotsByteOffset(maxDevices) + devIdIndexBuckets(maxDevices) * 4;
}
/** Byte offset of the id bytes (idBytesPerSlot per slot), after the index. */
export function devIdBytesByteOffset(maxDevices: number): number {
  return devIdIndexHashesByteOffset(maxDevices) + devIdIndexBuckets(maxDevices) * 4;
}

/**
 * Life of a device slot, in its life word: `epoch << DEVICE_LIFE_EPOCH_SHIFT | state`. The ingest thread expires an
 * idle ACTIVE device (RETIRING, epoch + 1) by writing an expiry record into its shard's ring; containment clears its
 * state and writes a retire marker behind its last triggers; the dispatcher, once every downstream has settled that
 * device's triggers, moves RETIRING(epoch) to FREE(epoch) with a compare-exchange; the sweep then takes the slot
 * back (FREE -> RECLAIMED with a compare-exchange, under the registration lock: off the shared index, onto the free
 * stack) and a later registration reuses it. A device that sends while RETIRING or FREE is revived (ACTIVE, same
 * epoch, same slot and seq, by a compare-exchange that the dispatcher's and the sweep's then lose); every ingest
 * thread's registry may revive, only ingest thread 0's sweep expires and takes back.
 */
export const DeviceLife = {
  /** Registered and in use. */
  ACTIVE: 0,
  /** Expired: its expiry record and retire marker are on their way. */
  RETIRING: 1,
  /** Every thread is done with the expired device: the ingest thread may reuse the slot. */
  FREE: 2,
  /** Taken back by the expiry sweep (off the index, on the free stack): no ping may revive it any more. */
  RECLAIMED: 3,
} as const;
/** Mask of the state bits of a life word. */
export const DEVICE_LIFE_STATE_MASK = 3;
/** Shift of the epoch in a life word (the epoch counts the slot's expiries, modulo 2^29). */
export const DEVICE_LIFE_EPOCH_SHIFT = 2;
/** Largest epoch before it wraps to 0. */
export const DEVICE_LIFE_EPOCH_MASK = (1 << 29) - 1;
/**
 * Byte offset of the seq floors (Float64 per partition of the partitioned source, one cell without one), after the id
 * bytes: a device registered in a slot starts its seq at its partition's floor, which rises to the final seq of every
 * device of that partition whose slot is taken back (it may be that device, come back). Per partition, so a device's
 * first seq depends only on its partition's history, which the partition's checkpoint carries to its next reader.
 */
export function devIdSeqFloorsByteOffset(maxDevices: number, idBytesPerSlot: number): number {
  return Math.ceil((devIdBytesByteOffset(maxDevices) + maxDevices * idBytesPerSlot) / 8) * 8;
}
/** Total bytes of a device id table with `floorCells` seq floors (see devIdSeqFloorsByteOffset). */
export function devIdRegionBytes(maxDevices: number, idBytesPerSlot: number, floorCells: number): number {
  return devIdSeqFloorsByteOffset(maxDevices, idBytesPerSlot) + floorCells * 8;
}

// ---------------------------------------------------------------------------------------------------------------
// Dispatcher: per-downstream record slots, the dead-letter ring and the per-downstream metric cells.
// ---------------------------------------------------------------------------------------------------------------

/**
 * Dispatch record: a trigger record plus the dispatcher's bookkeeping. One 128-byte stride is used for the
 * per-downstream record slots (queued, being sent, or waiting for a replay) and the dead-letter ring, so a trigger
 * moves between them by copying cells. Float64 cells 0..5 and Int32 cells 13..15 hold the trigger record's cells at
 * the same indices as TRG_*; Int32 cell 12 holds the dispatcher's fence handle instead of the store generation, so a
 * queued trigger names its fence whatever reloads happen before it is delivered.
 */
export const DREC_STRIDE_BYTES = 128;
/** Float64 cells per dispatch record. */
export const DREC_STRIDE_F64 = DREC_STRIDE_BYTES / 8;
/** Int32 cells per dispatch record. */
export const DREC_STRIDE_I32 = DREC_STRIDE_BYTES / 4;
/** Float64 trigger cells copied (TRG_LAT_F64 .. TRG_INSIDE_MS_F64). */
export const DREC_TRIGGER_F64_COUNT = 6;
/** First Int32 trigger cell copied (TRG_GENERATION_I32); cells 12..15 are copied, then cell 12 is replaced. */
export const DREC_TRIGGER_I32_FIRST = 12;
/** Int32 trigger cells copied. */
export const DREC_TRIGGER_I32_COUNT = 4;
/** The fence's handle in the dispatcher's fence catalog (stable for the dispatcher's lifetime). Int32 cell 12. */
export const DREC_FENCE_HANDLE_I32 = 12;
/**
 * Time the record entered its current place, monotonic ns (slot: taken from the trigger rings or carried over,
 * -Infinity when loaded from the backlog log; dead-letter ring: dead-lettered).
 */
export const DREC_TIME_NS_F64 = 8;
/** Ordinal of the record in its downstream's backlog log when it was loaded from there; -1 otherwise. */
export const DREC_LOG_ORDINAL_F64 = 9;
/**
 * Where the record's dead-letter copy is: its position in the downstream's dead-letter storage (segment slot and
 * offset, see src/durable/dead-letter-file.ts), -1 when it has none, or `-2 - i` while the copy waits at index i of
 * the dead-letter ring for the next flush.
 */
export const DREC_DLQ_POS_F64 = 10;
/** Dead-letter reason (one of DeadLetterReason) once dead-lettered; -1 otherwise. Int32 cell 22. */
export const DREC_REASON_I32 = 22;
/** Delivery attempts made so far. Int32 cell 23. */
export const DREC_ATTEMPTS_I32 = 23;
/** DrecFlag bits. Int32 cell 24. */
export const DREC_FLAGS_I32 = 24;
/** Downstream index within the dispatcher (dead-letter ring entries). Int32 cell 25. */
export const DREC_DOWNSTREAM_I32 = 25;
/** Dead-letter ring entries: the slot of the parked record they copy (-1 for a final dead letter). Int32 cell 26. */
export const DREC_SLOT_REF_I32 = 26;
/** Dead-letter ring entries: one of DeadLetterStatus. Int32 cell 27. */
export const DREC_DL_STATUS_I32 = 27;
/** Dead-letter ring entries, during a flush: the entry's byte offset in the flush buffer. Float64 cell 14. */
export const DREC_FLUSH_OFFSET_F64 = 14;
/**
 * Memory slots of parked triggers: when its current run of definite failures alone began (this thread's clock, ns;
 * NaN: none), see DownstreamOptions.replayGiveUpMs. Float64 cell 15.
 */
export const DREC_FIRST_ALONE_FAILURE_NS_F64 = 15;

/** Bits of DREC_FLAGS_I32. */
export const DrecFlag = {
  /** Carried over from an earlier run (a pending file or a dead letter awaiting replay): its file is kept until done. */
  FRONT: 1,
  /** A parked trigger inside a sink call when its dead-letter copy was dropped (budgets): given up if the call fails. */
  GIVE_UP: 2,
  /**
   * A parked trigger whose dead-letter copy still waits in the ring, taken from the backlog log or a pending file: that
   * file still holds it (the log's cursor and the pending file's removal wait while the ring holds the downstream's
   * records), so it is not held in memory only.
   */
  COVERED: 4,
  /** Its last attempt that counted failed with the whole batch (an answer that named no trigger): see `goesAlone`. */
  FAILED_WITH_BATCH: 8,
  /** It failed when sent alone (see Downstream.goesAlone): a replay of it goes alone too. */
  FAILED_ALONE: 16,
} as const;

/** Why a trigger was dead-lettered. */
export const DeadLetterReason = {
  /** The downstream refused it for good (a 4xx other than 429): kept in the dead-letter files (within their budgets), never re-sent. */
  REJECTED: 0,
  /** It waited longer than the downstream's maximum age (`maxQueueAgeMs`): kept in the files (within their budgets), never sent. */
  EXPIRED: 1,
  /**
   * Every allowed attempt failed (loss, timeout, refused connection): it waits in the replay lane, behind live
   * traffic, and its device's later triggers wait behind it; re-delivered when the downstream takes it.
   */
  UNDELIVERABLE: 2,
} as const;
/** A DeadLetterReason value. */
export type DeadLetterReason = (typeof DeadLetterReason)[keyof typeof DeadLetterReason];
/** Number of dead-letter reasons. */
export const DEAD_LETTER_REASON_COUNT = 3;
/** Dead-letter reason names indexed by value, for metric labels and files. */
export const DEAD_LETTER_REASON_NAMES = ['rejected', 'expired', 'undeliverable'] as const;

/**
 * Why dead-letter records were dropped from a downstream's dead-letter storage (oldest first), each counted: the
 * storage reached its size budget, the records outlived its age budget, or the disk refused them (the ring had to
 * make room while writes failed). A dropped record that waited for replay takes its trigger with it.
 */
export const DeadLetterDropReason = {
  /** The storage reached `deadLetter.maxBytesPerDownstream`. */
  OVER_BUDGET: 0,
  /** Older than `deadLetter.maxAgeMs`. */
  TOO_OLD: 1,
  /** Could not be written (disk full, I/O error) and the dead-letter ring needed the room. */
  DISK_ERROR: 2,
} as const;
/** Number of drop reasons. */
export const DEAD_LETTER_DROP_REASON_COUNT = 3;
/** Drop reason names indexed by value, for metric labels and the summary. */
export const DEAD_LETTER_DROP_REASON_NAMES = ['over_budget', 'too_old', 'disk_error'] as const;

/** State of a dead letter (ring entries and file records). */
export const DeadLetterStatus = {
  /** Waiting in the replay lane. */
  PENDING: 0,
  /** Re-delivered. */
  RESOLVED: 1,
  /** Final: never re-sent (rejected, expired). */
  FINAL: 2,
} as const;

/** Upper bounds (ms) of the per-downstream RTT histogram buckets; one more bucket counts everything above. */
export const DS_RTT_BUCKET_BOUNDS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] as const;
/** Number of RTT histogram cells (the bounds plus the overflow bucket). */
export const DS_RTT_BUCKET_COUNT = DS_RTT_BUCKET_BOUNDS_MS.length + 1;

/**
 * Per-downstream metric cells: one Float64 block per downstream, written only by the dispatcher thread (at each
 * pump) and read by the main thread at scrape time.
 */
/** Current concurrency limit (after the static safety cap). */
export const DS_LIMIT_F64 = 0;
/** Requests (permits) in flight. */
export const DS_INFLIGHT_F64 = 1;
/** The limit's reference (minimum) RTT, ns; NaN when unknown. */
export const DS_RTT_MIN_NS_F64 = 2;
/** Triggers routed to this downstream by this run. */
export const DS_OFFERED_F64 = 3;
/** Triggers delivered that were never dead-lettered (first try, retries, spilled or carried over). */
export const DS_DELIVERED_F64 = 4;
/** Times a trigger was dead-lettered (every reason; DS_DEAD_LETTERED_BY_REASON_F64 splits them). */
export const DS_DEAD_LETTERED_F64 = 5;
/** Triggers not yet settled: queued, spilled, being sent, or waiting in the replay lane. */
export const DS_IN_FLIGHT_TRIGGERS_F64 = 6;
/** Triggers held in memory (queued or loaded from the backlog, not being sent). */
export const DS_QUEUE_DEPTH_F64 = 7;
/** Acquire attempts refused by the limiter. */
export const DS_REJECTED_F64 = 8;
/** Permits released as dropped (loss). */
export const DS_DROPPED_F64 = 9;
/** Permits released as ignored (no sample). */
export const DS_IGNORED_F64 = 10;
/** Permits released as success. */
export const DS_SUCCEEDED_F64 = 11;
/** Times the limit went up. */
export const DS_LIMIT_INCREASES_F64 = 12;
/** Times the limit went down. */
export const DS_LIMIT_DECREASES_F64 = 13;
/** Credits remaining; NaN when the downstream has no credit window. */
export const DS_CREDITS_F64 = 14;
/** Breaker state (one of BreakerState: 0 closed, 1 open, 2 half-open). */
export const DS_BREAKER_STATE_F64 = 15;
/** Times the breaker opened. */
export const DS_BREAKER_OPENS_F64 = 16;
/** Dead letters waiting in the replay lane. */
export const DS_DEAD_LETTER_DEPTH_F64 = 17;
/** Dead letters re-delivered by the replay lane. */
export const DS_REPLAYED_F64 = 18;
/** Retry-After pauses honoured. */
export const DS_PAUSES_F64 = 19;
/** Sum of RTT samples, ns. */
export const DS_RTT_SUM_NS_F64 = 20;
/** Count of RTT samples. */
export const DS_RTT_COUNT_F64 = 21;
/** RTT histogram: cells [DS_RTT_BUCKETS_F64 + i] count samples in bucket i (not cumulative). */
export const DS_RTT_BUCKETS_F64 = 22;
/** Dead-lettered by reason: cell DS_DEAD_LETTERED_BY_REASON_F64 + reason. */
export const DS_DEAD_LETTERED_BY_REASON_F64 = DS_RTT_BUCKETS_F64 + DS_RTT_BUCKET_COUNT;
/** Triggers written to the backlog log (spilled past the memory queue, in per-device order). */
export const DS_SPILLED_F64 = DS_DEAD_LETTERED_BY_REASON_F64 + DEAD_LETTER_REASON_COUNT;
/** Records in the backlog log not yet delivered. */
export const DS_BACKLOG_RECORDS_F64 = DS_SPILLED_F64 + 1;
/** Bytes of the backlog log's live segments. */
export const DS_BACKLOG_BYTES_F64 = DS_SPILLED_F64 + 2;
/** Triggers carried over from earlier runs at start (pending file, replay lane, backlog). */
export const DS_RECOVERED_F64 = DS_SPILLED_F64 + 3;
/** Triggers left durably for the next start when the dispatcher closed. */
export const DS_CARRIED_OVER_F64 = DS_SPILLED_F64 + 4;
/** Triggers inside sink calls. */
export const DS_SENDING_F64 = DS_SPILLED_F64 + 5;
/** Trigger records the dispatcher could not take because the backlog log was full (back-pressure waits). */
export const DS_BACKPRESSURE_WAITS_F64 = DS_SPILLED_F64 + 6;
/** Dead-lettered triggers the replay lane found refused for good (counted under `rejected` too). */
export const DS_REPLAY_REJECTED_F64 = DS_SPILLED_F64 + 7;
/** Triggers settled without delivery: final dead letters (refused, expired, undeliverable with replay off). */
export const DS_FINAL_F64 = DS_SPILLED_F64 + 8;
/**
 * Triggers that no durable file holds (what a crash would lose of this downstream): in memory, or in the backlog log's
 * write buffer not yet flushed to disk.
 */
export const DS_MEMORY_ONLY_F64 = DS_SPILLED_F64 + 9;
/** Dead-letter records dropped, by DeadLetterDropReason: cell DS_DEAD_LETTER_DROPPED_F64 + reason. */
export const DS_DEAD_LETTER_DROPPED_F64 = DS_MEMORY_ONLY_F64 + 1;
/** Bytes of the dead-letter files on disk. */
export const DS_DEAD_LETTER_BYTES_F64 = DS_DEAD_LETTER_DROPPED_F64 + DEAD_LETTER_DROP_REASON_COUNT;
/** Failed writes, fsyncs and file creations of the downstream's durable files (dead letters and backlog log). */
export const DS_DURABLE_WRITE_ERRORS_F64 = DS_DEAD_LETTER_BYTES_F64 + 1;
/** Damaged records skipped in the downstream's durable files (each a span of at least one record). */
export const DS_DAMAGED_RECORDS_F64 = DS_DEAD_LETTER_BYTES_F64 + 2;
/** Backlog cursor copies found damaged at start (the other copy, one commit older, served). */
export const DS_CURSOR_DAMAGED_COPIES_F64 = DS_DEAD_LETTER_BYTES_F64 + 3;
/** Backlog cursors with no valid copy at start: the log was read again from its oldest segment (re-delivery). */
export const DS_CURSOR_FALLBACKS_F64 = DS_DEAD_LETTER_BYTES_F64 + 4;
/** 1 while the downstream's last durable write failed (its dead letters wait in the ring), else 0. */
export const DS_DURABLE_FAILING_F64 = DS_DEAD_LETTER_BYTES_F64 + 5;
/** Time the dispatcher's own event loop stalled during requests, taken out of the limiter's samples, ns. */
export const DS_LOCAL_STALL_NS_F64 = DS_DEAD_LETTER_BYTES_F64 + 6;
/** Samples a local stall was taken out of. */
export const DS_STALL_CORRECTED_F64 = DS_DEAD_LETTER_BYTES_F64 + 7;
/** Times the downstream as a whole was backed off after a failed batch (not one answered in part). */
export const DS_BACKOFFS_F64 = DS_STALL_CORRECTED_F64 + 1;
/**
 * Times a device alone was held back: the downstream refused its trigger for the moment and answered the rest of the
 * batch.
 */
export const DS_DEVICE_HOLDS_F64 = DS_STALL_CORRECTED_F64 + 2;
/**
 * Dead letters re-delivered by the replay lane, by the DeadLetterReason they were dead-lettered with: cell
 * DS_REPLAYED_BY_REASON_F64 + reason (they sum to DS_REPLAYED_F64).
 */
export const DS_REPLAYED_BY_REASON_F64 = DS_STALL_CORRECTED_F64 + 3;
/**
 * Dead letters the replay lane found refused for good, by the DeadLetterReason they were dead-lettered with first:
 * cell DS_REPLAY_REJECTED_BY_REASON_F64 + reason (they sum to DS_REPLAY_REJECTED_F64).
 */
export const DS_REPLAY_REJECTED_BY_REASON_F64 = DS_REPLAYED_BY_REASON_F64 + DEAD_LETTER_REASON_COUNT;
/**
 * Of DS_DAMAGED_RECORDS_F64, the damaged spans whose triggers this run lost: the pending file's and the backlog log's
 * (a damaged span of a dead-letter file is found again at every start while its segment lives, and may hold only dead
 * letters already settled: it is counted there only).
 */
export const DS_DAMAGED_LOST_F64 = DS_REPLAY_REJECTED_BY_REASON_F64 + DEAD_LETTER_REASON_COUNT;
/** Triggers of parked devices set aside in the backlog log (a gauge; see src/dispatch/set-aside.ts). */
export const DS_SET_ASIDE_F64 = DS_DAMAGED_LOST_F64 + 1;
/**
 * 1 while the backlog log's loading waits because it holds as many set-aside triggers as it can (a gauge: see
 * Downstream.stashedSlot), else 0.
 */
export const DS_LOAD_WAITING_F64 = DS_DAMAGED_LOST_F64 + 2;
/**
 * Set-aside triggers moved out of the backlog log's older segments into set-aside files (a counter; see
 * src/durable/set-aside-files.ts), so those segments could be removed.
 */
export const DS_SET_ASIDE_MOVED_F64 = DS_DAMAGED_LOST_F64 + 3;
/**
 * Held-time histograms of the downstream by lane (admission -> the hand-over of the attempt that delivered it, per
 * trigger delivered without a dead letter): LANE_COUNT blocks of HELD_BLOCK_F64 cells (HELD_* layout), lane `l` at
 * DS_LANE_HELD_BASE_F64 + l * HELD_BLOCK_F64. Written by the dispatcher thread at each delivery, not at the publish.
 */
export const DS_LANE_HELD_BASE_F64 = Math.ceil((DS_SET_ASIDE_MOVED_F64 + 1) / 8) * 8;
/** Float64 cells used by one downstream block. */
const DS_BLOCK_USED_F64 = DS_LANE_HELD_BASE_F64 + LANE_COUNT * HELD_BLOCK_F64;
/** Float64 cells per downstream block, whole cache lines. */
export const DS_BLOCK_F64 = Math.ceil(DS_BLOCK_USED_F64 / 8) * 8;

/** Dispatcher-wide cells: one block after the downstream blocks. */
/** Trigger records offered to the dispatcher. */
export const DISP_TRIGGERS_OFFERED_F64 = 0;
/** Offered records routed to no downstream. */
export const DISP_TRIGGERS_UNROUTED_F64 = 1;
/** Offered records refused as malformed. */
export const DISP_BAD_RECORDS_F64 = 2;
/** Records waiting in the dead-letter ring for the next flush. */
export const DISP_DEAD_LETTER_RING_DEPTH_F64 = 3;
/** Dead-letter flushes (one write + fsync per file touched). */
export const DISP_DEAD_LETTER_FLUSHES_F64 = 4;
/** Records written by dead-letter flushes. */
export const DISP_DEAD_LETTER_FLUSHED_F64 = 5;
/** Sum of dead-letter flush durations, ns. */
export const DISP_FLUSH_SUM_NS_F64 = 6;
/** Longest dead-letter flush, ns. */
export const DISP_FLUSH_MAX_NS_F64 = 7;
/** Downstreams whose last durable write failed (0 when every downstream's files take writes). */
export const DISP_DURABLE_FAILING_F64 = 8;
/**
 * Publish version of the dispatch metric cells (a sequence lock): the dispatcher makes it odd before it rewrites the
 * DS_* and DISP_* cells and even after, through an Int32 view of the same buffer (Int32 index = 2 x the Float64 cell,
 * Atomics.store); a reader copies the cells between two equal even reads, so the counters it sees were published
 * together and the delivery identity holds in every copy.
 */
export const DISP_PUBLISH_VERSION_F64 = 9;
/** Float64 cells of the dispatcher-wide block. */
export const DISP_BLOCK_F64 = 10;

/**
 * The CONTAINMENT WATCHDOG region (Int32 cells): one 64-byte block per shard, then one for the COMPLIANCE group (block
 * `shards`). Shard g is always in group g (shard s belongs to group s % groups, and groups <= shards), so the cells of
 * group g's running task live in block g; the STALLED cell is per shard (and the COMPLIANCE group's in its block).
 * Written by the pool worker running the group's task (progress, held batch, thread id) and by the ingest thread
 * (stalled flags, reset of the held batch at submit); read by the ingest thread's watchdog and by the main thread's
 * /healthz.
 */
/** Int32 cells per shard block (one cache line, so two groups' heartbeats never share a line). */
export const WDG_STRIDE_I32 = 16;
/** Batches begun by the group's tasks, wrapping (one Atomics.store per batch): the heartbeat the watchdog reads. */
export const WDG_PROGRESS_I32 = 0;
/**
 * Ring whose batch the group's task holds (read, not released), or -1 between batches: a telemetryRingIndex, or for
 * the COMPLIANCE group a complianceRingIndex.
 */
export const WDG_HELD_RING_I32 = 1;
/** Records of that held batch. */
export const WDG_HELD_COUNT_I32 = 2;
/** threadId of the pool worker running the group's task (stored at task start). */
export const WDG_THREAD_ID_I32 = 3;
/** 1 while this shard's group is declared hung (detection until its replacement task begins a batch), else 0. */
export const WDG_STALLED_I32 = 4;
/**
 * Records of the held batch done (processed, their triggers published), written after each one; -1 for a batch run
 * without that record (the whole batch is then dropped if its task fails). What a failed task's batch keeps.
 */
export const WDG_HELD_DONE_I32 = 5;
/**
 * Device slot whose record (the held batch's record number WDG_HELD_DONE_I32) is being processed and has begun to
 * change it, its state before that record kept in the group's PRE-IMAGE block; else -1.
 */
export const WDG_PRE_SLOT_I32 = 6;
/** The trigger ring (index among memory.triggerRings) that record writes to. */
export const WDG_PRE_TRIG_RING_I32 = 7;
/** That trigger ring's position where the record's first trigger goes (its write sequence plus pending claims). */
export const WDG_PRE_TRIG_AT_I32 = 8;
/** Drill only, block 0's: triggers of the drill hook's device (containment-thread.ts) written, all pool workers. */
export const WDG_DRILL_TRIGGERS_I32 = 9;

/** Bytes of a watchdog region of `blocks` blocks (a router's: one per shard and the COMPLIANCE group's). */
export function watchdogRegionBytes(blocks: number): number {
  return blocks * WDG_STRIDE_I32 * 4;
}

/**
 * The PRE-IMAGE region: per containment group (the watchdog's blocks), the state of the device whose record the
 * group's task is processing, as it was before that record (src/pipeline/held-batch.ts): so that a task that fails part
 * way through a record (a throw, a hang, a worker that ends) leaves that device as if the record never came, not half
 * updated with its triggers unpublished. Float64 blocks first (PRE_F64_STRIDE each), then Int32 blocks
 * (PRE_I32_STRIDE each); both strides depend on maxFencesPerDevice (`preImageStrides`). Written by the pool worker
 * before a record's first trigger or first change of an entry (a record that changes neither keeps nothing); read by
 * the ingest thread after the task failed (the worker gone or out of it).
 */
/** Float64 cells at the start of a pre-image block: the device's DEV_* doubles (DEV_STRIDE_F64), then entries. */
export const PRE_DEV_F64 = 0;
/** Int32 cells at the start of a pre-image block: the device's DEV_* ints (DEV_STRIDE_I32). */
export const PRE_DEV_I32 = 0;
/** Int32 cell: the device's trigger mark (TMARK_STRIDE_I32 cells from here). */
export const PRE_MARK_I32 = DEV_STRIDE_I32;
/**
 * Int32 cell: 1 when the block holds the device's entries too, 0 when the record had not changed any of them yet (they
 * are kept only before the first change: most records change none).
 */
export const PRE_ENTRIES_KEPT_I32 = DEV_STRIDE_I32 + TMARK_STRIDE_I32;
/** Int32 cells before a block's entries (the device's ints, its trigger mark, the entries-kept flag). */
export const PRE_HEAD_I32 = PRE_ENTRIES_KEPT_I32 + 1;
/** Float64 cells before a block's entries (the device's doubles). */
export const PRE_HEAD_F64 = DEV_STRIDE_F64;

/** Per-block strides of the PRE-IMAGE region for devices of up to `maxFencesPerDevice` entries. */
export function preImageStrides(maxFencesPerDevice: number): { f64: number; i32: number } {
  return {
    f64: PRE_HEAD_F64 + maxFencesPerDevice * ENTRY_STRIDE_F64,
    i32: PRE_HEAD_I32 + maxFencesPerDevice * ENTRY_STRIDE_I32,
  };
}

/** Bytes of a PRE-IMAGE region of `blocks` blocks. */
export function preImageRegionBytes(blocks: number, maxFencesPerDevice: number): number {
  const s = preImageStrides(maxFencesPerDevice);
  return blocks * (s.f64 * 8 + s.i32 * 4);
}

/**
 * The THREAD RUNTIME region (Float64 cells): one block per router thread, written by that thread once per report
 * interval and read by the main thread's /metrics (each cell is an independent gauge or counter, so no seqlock).
 * Blocks: the main thread, the ingest thread, the dispatcher thread, then threadRuntimePoolSlots(poolSize) blocks the pool's
 * workers claim (a replaced worker's block is taken over once its reports have stopped).
 */
/** Float64 cells per thread block (one 128-byte line pair, so two threads' reports never share a line). */
export const RT_STRIDE_F64 = 16;
/** Int32 cell (index 2 x block start, the low half of Float64 cell 0): threadId + 1 of the block's owner, 0 when free. */
export const RT_OWNER_I32 = 0;
/** Wall-clock time of the owner's last report, ms since the epoch (0: never reported). */
export const RT_REPORTED_AT_MS_F64 = 1;
/** V8 heap in use, bytes (the isolate's used_heap_size). */
export const RT_HEAP_USED_BYTES_F64 = 2;
/** V8 heap reserved, bytes (total_heap_size). */
export const RT_HEAP_TOTAL_BYTES_F64 = 3;
/** Heap in use right after the latest full (mark-compact) collection, bytes: the live heap, the figure a leak grows. */
export const RT_HEAP_LIVE_BYTES_F64 = 4;
/** Memory outside the V8 heap held by this isolate's objects (external_memory), bytes. */
export const RT_EXTERNAL_BYTES_F64 = 5;
/** Event-loop utilisation over the last report interval, 0..1. */
export const RT_LOOP_UTILIZATION_F64 = 6;
/** P99 of the event-loop delay over the last report interval, ns. */
export const RT_LOOP_DELAY_P99_NS_F64 = 7;
/** Full (mark-compact) collections so far. */
export const RT_MAJOR_GCS_F64 = 8;
/** Collections of any kind so far. */
export const RT_GCS_F64 = 9;
/** Time in collections so far, ns. */
export const RT_GC_NS_F64 = 10;
/**
 * The reporting thread's operating-system thread id (Linux: the tid /proc/thread-self names; 0 elsewhere), so the main
 * thread can read that thread's CPU time from /proc at scrape time. (Cell 11 of the main thread's block is
 * RT_POOL_SLOTS_F64.)
 */
export const RT_OS_THREAD_ID_F64 = 12;
/** Block of the main thread. */
export const RT_THREAD_MAIN = 0;
/** Block of the ingest thread. */
export const RT_THREAD_INGEST = 1;
/** Block of the dispatcher thread. */
export const RT_THREAD_DISPATCHER = 2;
/** First block of the containment pool. */
export const RT_THREAD_POOL_FIRST = 3;

/** Pool blocks for a pool of `poolSize` workers: room for as many replacements as workers before takeover. */
export function threadRuntimePoolSlots(poolSize: number): number {
  return 2 * poolSize;
}

/** Float64 cell of the main thread's block: the pool blocks the region holds (written once, at allocation). */
export const RT_POOL_SLOTS_F64 = 11;

/** Block of ingest thread k (k >= 1): after the pool's blocks. */
export function rtIngestPeerBlock(poolSlots: number, k: number): number {
  return RT_THREAD_POOL_FIRST + poolSlots + k - 1;
}

/**
 * Float64 cells of the thread runtime region for a pool of `poolSize` workers and `ingestThreads` ingest threads
 * (blocks: main, ingest thread 0, dispatcher, the pool's, then ingest threads 1 ..).
 */
export function threadRuntimeRegionF64(poolSize: number, ingestThreads = 1): number {
  return (RT_THREAD_POOL_FIRST + threadRuntimePoolSlots(poolSize) + ingestThreads - 1) * RT_STRIDE_F64;
}

// ---------------------------------------------------------------------------------------------------------------
// Source partitions: one block per partition of a partitioned telemetry source (a JetStream stream), written by the
// ingest thread as it consumes, read by the metrics collectors and the status line.
// ---------------------------------------------------------------------------------------------------------------

/** Float64 cells per partition block. */
export const SRC_STRIDE_F64 = 13;
/** 1 while this router consumes the partition, else 0. */
export const SRC_OWNED_F64 = 0;
/** Messages taken from the partition so far (fed: redeliveries of messages this run took already are not). */
export const SRC_MESSAGES_F64 = 1;
/**
 * Messages the server delivered again (an acknowledgement it did not get in time, or a restart); those this run took
 * already are not fed again.
 */
export const SRC_REDELIVERED_F64 = 2;
/** Stream sequence of the last message acknowledged (every message up to it processed and checkpointed). */
export const SRC_ACKED_STREAM_SEQ_F64 = 3;
/** Messages in the partition not yet delivered to this router, as of the last message taken (consumer lag). */
export const SRC_LAG_MESSAGES_F64 = 4;
/** Age of the last message taken when it was taken (now minus its publish time), ms: the lag in time. */
export const SRC_LAG_AGE_MS_F64 = 5;
/** Messages older than the backlog age limit, fed as live traffic (lane shedding applies to them). */
export const SRC_AGED_MESSAGES_F64 = 6;
/** Bytes taken from the partition so far. */
export const SRC_BYTES_F64 = 7;
/**
 * Stream sequence of the newest message every ping of which containment has processed (ingest thread): a checkpoint
 * captured after it was written covers that message and every one before it.
 */
export const SRC_PROCESSED_STREAM_SEQ_F64 = 8;
/**
 * Stream sequence the partition's consumer starts from (main thread, before the ingest thread starts: one past what
 * the partition's restored checkpoint covers; 1 with exact replay and none, the stream's first message; 0 otherwise
 * with none, the consumer's own position applies).
 */
export const SRC_START_STREAM_SEQ_F64 = 9;
/** Stream sequence the last partition checkpoint stored in JetStream covers (main thread; 0: none yet). */
export const SRC_CHECKPOINT_STREAM_SEQ_F64 = 10;
/** Capture time of the last partition checkpoint stored in JetStream, epoch ms (main thread; 0: none yet). */
export const SRC_CHECKPOINT_CAPTURED_MS_F64 = 11;
/**
 * Times the partition's consumer was made again after deliveries were lost on the way (a fetch that failed part way):
 * read on from the message after the last one taken (see the JetStream source's module comment).
 */
export const SRC_REWINDS_F64 = 12;

/**
 * The lease gate (one Float64 cell, shared by every thread of a router whose partitions are leased): until when this
 * router's partition leases are known to hold, as `performance.timeOrigin + performance.now()` ms (0: no leases, the
 * gate is always open). Written by the main thread after each renewal; past it, the source fetches nothing, the
 * dispatcher sends nothing and no partition checkpoint is stored, until a renewal moves it on or the router is
 * abandoned (a paused process whose leases expired meanwhile cannot act on them when it resumes).
 */
export const LEASE_VALID_UNTIL_MS_F64 = 0;
/** Routers the partition group has started (main thread; read by each router's metrics). */
export const LEASE_ROUTERS_STARTED_F64 = 1;
/** Partitions the group member has taken. */
export const LEASE_PARTITIONS_TAKEN_F64 = 2;
/** Partitions the group member has released to other members. */
export const LEASE_PARTITIONS_RELEASED_F64 = 3;
/** Leases the group member has lost. */
export const LEASE_LOST_F64 = 4;
/** Float64 cells of the lease gate. */
export const LEASE_GATE_F64 = 5;

/** True while the lease gate `gate` is open (no leases, or within their validity). */
export function leaseGateOpen(gate: Float64Array): boolean {
  const until = gate[LEASE_VALID_UNTIL_MS_F64]!;
  return until === 0 || performance.timeOrigin + performance.now() < until;
}

/**
 * Float64 cells of the source partition region for `partitionCount` partitions: a block per partition, then one
 * block whose first cell is SRC_CHECKPOINT_CAPTURE_MS (see sourceCheckpointCell).
 */
export function sourcePartitionRegionF64(partitionCount: number): number {
  return (partitionCount + 1) * SRC_STRIDE_F64;
}

/**
 * Index of the cell after the partition blocks holding when the capture of the latest durable checkpoint began, epoch
 * ms (0: none yet). Written by the main thread once a checkpoint is on disk; the source acknowledges a message only
 * when every ping of it was processed before that time.
 */
export function sourceCheckpointCell(partitionCount: number): number {
  return partitionCount * SRC_STRIDE_F64;
}
