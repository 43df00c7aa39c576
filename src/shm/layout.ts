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
export const CACHE_LINE_BYTES = 64;
/** Int32 cells per cache line. */
export const CACHE_LINE_I32 = CACHE_LINE_BYTES / 4;

/** Version of every layout in this file; bumped whenever any offset changes. */
export const LAYOUT_VERSION = 1;

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
} as const;
/** A RingKind value. */
export type RingKind = (typeof RingKind)[keyof typeof RingKind];

/** Largest ring capacity accepted: keeps (write - read) | 0 exact with 32-bit wrapping sequences. */
export const RING_MAX_CAPACITY_SLOTS = 1 << 24;

// ---------------------------------------------------------------------------------------------------------------
// Telemetry record: one decoded ping. Stride 64 bytes = 8 Float64 cells = 16 Int32 cells.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes per telemetry record. */
export const TELEMETRY_STRIDE_BYTES = 64;
/** Float64 cells per telemetry record. */
export const TELEMETRY_STRIDE_F64 = TELEMETRY_STRIDE_BYTES / 8;
/** Int32 cells per telemetry record. */
export const TELEMETRY_STRIDE_I32 = TELEMETRY_STRIDE_BYTES / 4;
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
/** Per (device, fence) sequence number, starting at 1, so receivers can order and de-duplicate. */
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
} as const;
/** A ShedReason value. */
export type ShedReason = (typeof ShedReason)[keyof typeof ShedReason];
/** Number of shed reasons. */
export const SHED_REASON_COUNT = 3;
/** Shed reason names indexed by value, for metric labels. */
export const SHED_REASON_NAMES = ['ring_full', 'rate_limited', 'draining'] as const;

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
// ---------------------------------------------------------------------------------------------------------------

/** Magic number at FSTORE_MAGIC_I32 identifying a fence store region ("GRFS"). */
export const FSTORE_MAGIC = 0x47524653;
/** Fence store header cells (Int32). */
export const FSTORE_MAGIC_I32 = 0;
/** Layout version the store was built with (LAYOUT_VERSION). */
export const FSTORE_VERSION_I32 = 1;
/** Generation number of the store (a reload builds generation + 1). */
export const FSTORE_GENERATION_I32 = 2;
/** Number of fences. */
export const FSTORE_FENCE_COUNT_I32 = 3;
/** Number of rings (outer rings and holes of every polygon part). */
export const FSTORE_RING_COUNT_I32 = 4;
/** Number of packed vertices (each ring stores its closing vertex). */
export const FSTORE_VERTEX_COUNT_I32 = 5;
/** Number of compliance fences. */
export const FSTORE_COMPLIANCE_COUNT_I32 = 6;
/** Byte length of the UTF-8 metadata blob (ids and tags as JSON) at the end of the region. */
export const FSTORE_META_BYTES_I32 = 7;
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

/** Computes the sections of a fence store region; every section starts on an 8-byte boundary. */
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
  return { fenceF64Byte, fenceI32Byte, ringOffsetsByte, verticesByte, metaByte, totalBytes: align8(metaByte + metaBytes) };
}

/** Magic number at DSTATE_MAGIC_I32 identifying a per-device state region ("GRDS"). */
export const DSTATE_MAGIC = 0x47524453;
/** Device state header cells (Int32). */
export const DSTATE_MAGIC_I32 = 0;
/** Layout version. */
export const DSTATE_VERSION_I32 = 1;
/** Number of device slots. */
export const DSTATE_MAX_DEVICES_I32 = 2;
/** Fence entries per device (simultaneous fences a device can be in or pending for). */
export const DSTATE_MAX_FENCES_I32 = 3;
/** Header bytes: one cache line. */
export const DSTATE_HEADER_BYTES = CACHE_LINE_BYTES;

/** Per-device Float64 record. */
export const DEV_STRIDE_F64 = 4;
/** Event time of the device's last accepted ping, epoch ms (-Infinity before the first). */
export const DEV_LAST_EVENT_MS_F64 = 0;
/** Latitude of the last accepted ping. */
export const DEV_LAST_LAT_F64 = 1;
/** Longitude of the last accepted ping. */
export const DEV_LAST_LON_F64 = 2;
/** Last trigger sequence number issued for the device (strictly increasing per device, hence per (device, fence)). */
export const DEV_TRIGGER_SEQ_F64 = 3;

/** Per-device Int32 record. */
export const DEV_STRIDE_I32 = 4;
/** Number of fence entries in use. */
export const DEV_ENTRY_COUNT_I32 = 0;
/** Fence-store generation the device's entries refer to. */
export const DEV_GENERATION_I32 = 1;
/** Entries on compliance fences (pending or inside); read by the ingest thread with Atomics.load. */
export const DEV_COMPLIANCE_COUNT_I32 = 2;
/** 1 once the device has an accepted ping (last position valid). */
export const DEV_HAS_LAST_I32 = 3;

/** Per-entry Float64 record (maxFences entries per device, contiguous). */
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
  /** Start of the per-entry Float64 records (device d's entries start at d * maxFences). */
  entryF64Byte: number;
  /** Start of the per-entry Int32 records. */
  entryI32Byte: number;
  /** Total bytes of the region. */
  totalBytes: number;
}

/** Computes the sections of a device state region. */
export function deviceStateSections(maxDevices: number, maxFencesPerDevice: number): DeviceStateSections {
  const entries = maxDevices * maxFencesPerDevice;
  const deviceF64Byte = DSTATE_HEADER_BYTES;
  const entryF64Byte = deviceF64Byte + maxDevices * DEV_STRIDE_F64 * 8;
  const deviceI32Byte = entryF64Byte + entries * ENTRY_STRIDE_F64 * 8;
  const entryI32Byte = deviceI32Byte + maxDevices * DEV_STRIDE_I32 * 4;
  const totalBytes = Math.ceil((entryI32Byte + entries * ENTRY_STRIDE_I32 * 4) / 8) * 8;
  return { deviceF64Byte, deviceI32Byte, entryF64Byte, entryI32Byte, totalBytes };
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
/** Times a device was inside a fence with no free entry (maxFencesPerDevice reached): not tracked that ping. */
export const CNT_FENCE_OVERFLOW_F64 = CNT_INVALID_F64 + 1;
/** Times a query had more candidates than the scratch array holds (the rest were not tested). */
export const CNT_CANDIDATE_OVERFLOW_F64 = CNT_FENCE_OVERFLOW_F64 + 1;
/** Devices whose state referred to another generation than the engine's store: entries dropped. */
export const CNT_GENERATION_MISMATCH_F64 = CNT_CANDIDATE_OVERFLOW_F64 + 1;
/** Exact containment tests run (candidates whose box held the point). */
export const CNT_EXACT_TESTS_F64 = CNT_GENERATION_MISMATCH_F64 + 1;
/** Times the trigger ring was full and the worker blocked for space. */
export const CNT_TRIGGER_RING_WAITS_F64 = CNT_EXACT_TESTS_F64 + 1;
/** Float64 cells used by one containment counter block. */
export const CNT_BLOCK_USED_F64 = CNT_TRIGGER_RING_WAITS_F64 + 1;
/** Float64 cells per block, rounded up to whole cache lines so shards never share a line. */
export const CNT_BLOCK_F64 = Math.ceil(CNT_BLOCK_USED_F64 / 8) * 8;

// ---------------------------------------------------------------------------------------------------------------
// Pipeline control and counters: owned by the pipeline (section filled in with the pipeline).
// ---------------------------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------------------------
// Dispatcher: dead-letter ring and per-downstream cells (section filled in with the dispatcher).
// ---------------------------------------------------------------------------------------------------------------
