/**
 * The ingest edge (ingest thread): bytes or points in, validated and classified pings out to a PingSink (admission
 * and the ring write, wired by the pipeline), every rejection counted by reason in the shared ingest counters.
 *
 *   bytes -> FrameStream (framing, size limit, resync) -> FrameDecoder (walker + msgpackr + validation)
 *         -> DeviceRegistry (slot, shard) -> classifyLane -> PingSink.offer(fields)
 *
 * Per ping nothing is allocated beyond what msgpackr allocates while decoding (the map object and its strings). No
 * double crosses a call on the per-ping path (they stay in `PingFields.values`), so that holds whatever V8 inlines.
 */
import {
  ING_ACCEPTED_F64,
  ING_BYTES_F64,
  ING_DEVICES_F64,
  ING_FRAMES_F64,
  ING_REJECTED_F64,
  ING_RESYNCS_F64,
  ING_RESYNC_SKIPPED_BYTES_F64,
  RejectReason,
} from '../shm/layout.js';
import { DeviceRegistry, SLOT_ID_TOO_LONG, SLOT_NEW_DEVICE_DENIED } from './device-registry.js';
import type { StreamLimits } from './stream-limits.js';
import { nowNs } from '../shm/clock.js';
import { FrameDecoder, FrameStream, PING_VALID, type FrameSink } from './frame-decoder.js';
import {
  advanceMotionAnchor,
  classifyLane,
  type LanePredicates,
  type StationaryThresholds,
} from './lane-classifier.js';
import {
  PF_NUMERIC_ID_F64,
  PingFields,
  keyMaskOfObject,
  validatePingInto,
  type TelemetryPoint,
} from './ping-fields.js';
import { partitionOfNumericCell, partitionOfTokenBytes } from './sources/partitions.js';
import type { PipelineRegion } from '../shm/pipeline-region.js';
import type { RejectLog } from './reject-log.js';
import { PausableFeed, RoomWaiter, UNBOUNDED_ROOM, type PausableFeedHooks } from './backpressure.js';

/** Receives every accepted ping (slot, shard and lane filled in). `fields` is reused: copy before returning. */
export interface PingSink {
  /** Offers one ping to admission. */
  offer(fields: PingFields): void;
}

/** Options of the ingest edge. */
export interface IngestEdgeOptions extends StationaryThresholds {
  /** Largest frame accepted, bytes. */
  maxFrameBytes: number;
  /** Bytes a stream copies per step (its accumulation buffer is maxFrameBytes + this). */
  readChunkBytes: number;
  /** Accept msgpackr shared-structure records (exclusive mode, see wire-format.ts). */
  sharedStructures: boolean;
  /** Smallest accepted `ts`, epoch ms. */
  minTsMs: number;
  /** Largest accepted `ts`, epoch ms. */
  maxTsMs: number;
  /** Read frames' values in place (FrameReader; default true); false decodes every frame with msgpackr. */
  frameReader?: boolean;
}

/** Defaults of the ingest edge options. */
const INGEST_EDGE_DEFAULTS: Readonly<IngestEdgeOptions> = {
  maxFrameBytes: 1024,
  readChunkBytes: 64 * 1024,
  sharedStructures: false,
  minTsMs: Date.UTC(2000, 0, 1),
  maxTsMs: Date.UTC(2100, 0, 1),
  stationarySpeedMps: 0.5,
  stationaryRadiusM: 10,
};

/** Validates ingest edge options; throws a RangeError naming the option and its allowed range. */
function validateIngestEdgeOptions(o: IngestEdgeOptions, prefix = 'options'): void {
  const intIn = (name: keyof IngestEdgeOptions, lo: number, hi: number): void => {
    const v = o[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
      throw new RangeError(`${prefix}.${name} must be an integer in [${lo}, ${hi}], got ${String(v)}`);
    }
  };
  intIn('maxFrameBytes', 16, 16 * 1024 * 1024);
  intIn('readChunkBytes', 256, 16 * 1024 * 1024);
  if (typeof o.sharedStructures !== 'boolean') {
    throw new RangeError(`${prefix}.sharedStructures must be a boolean, got ${String(o.sharedStructures)}`);
  }
  if (!Number.isFinite(o.minTsMs) || !Number.isFinite(o.maxTsMs) || o.minTsMs < 0 || o.minTsMs >= o.maxTsMs) {
    throw new RangeError(
      `${prefix}.minTsMs and ${prefix}.maxTsMs must be finite with 0 <= minTsMs < maxTsMs, got ${String(o.minTsMs)} and ${String(o.maxTsMs)}`,
    );
  }
  if (!(o.stationarySpeedMps >= 0 && o.stationarySpeedMps <= 100)) {
    throw new RangeError(
      `${prefix}.stationarySpeedMps must be a number in [0, 100], got ${String(o.stationarySpeedMps)}`,
    );
  }
  if (!(o.stationaryRadiusM >= 0 && o.stationaryRadiusM <= 10_000)) {
    throw new RangeError(
      `${prefix}.stationaryRadiusM must be a number in [0, 10000], got ${String(o.stationaryRadiusM)}`,
    );
  }
}

/**
 * The partition of a partitioned log (JetStream) a stream reads: each of its pings must be of a device whose id maps to
 * it (see partitions.ts), or two routers would each track the device. Others are rejected (`wrong_partition`).
 */
export interface StreamPartition {
  /** The partition read. */
  partition: number;
  /** Partitions of the log. */
  partitionCount: number;
}

/** The partition of the device of `fields` among `count` (partitionOf), allocation-free for ids read in place. */
function partitionOfPing(fields: PingFields, count: number): number {
  if (fields.idIsNumber) return partitionOfNumericCell(fields.values, PF_NUMERIC_ID_F64, count);
  if (fields.idInBytes) return partitionOfTokenBytes(fields.idBuf!, fields.idAt, fields.idAt + fields.idLen, count);
  // Decoded by msgpackr (it allocates there already): its UTF-8 bytes, as an id read in place.
  const bytes = utf8.encode(fields.idKey);
  return partitionOfTokenBytes(bytes, 0, bytes.length, count);
}

const utf8 = new TextEncoder();

/** A named byte stream opened on the edge (one per connection, file, stdin). */
export interface IngestStream {
  /** Where the bytes come from (for log lines). */
  readonly name: string;
  /** Feeds the next bytes. */
  write(chunk: Uint8Array): void;
  /**
   * Ends the stream: a partial frame left is counted as truncated, or as cut_at_stop with `cutByStop` (the router
   * stopped reading the stream, its sender did not end it).
   */
  end(cutByStop?: boolean): void;
  /** Bytes held back waiting for the rest of a frame. */
  readonly bufferedBytes: number;
  /** Memory the stream holds for its partial frame, bytes (0 without one). */
  readonly heldBytes: number;
  /**
   * Optional: true after a write whose bytes could not all be handed on at once (they are kept, in order); the source
   * should then stop reading until `whenHandedOn` calls back. A stream without it takes every write at once.
   */
  holdsBack?(): boolean;
  /** With `holdsBack`: calls `resume` once every byte written so far has been handed on (at once if it has). */
  whenHandedOn?(resume: () => void): void;
  /**
   * Optional: true while the bytes written have not all reached the thread that decodes them, so `bufferedBytes` and
   * `heldBytes` are behind; the source does not age the stream's partial frame meanwhile.
   */
  inTransit?(): boolean;
}

/** Stream bound to the edge: counts bytes and tags rejections with its name. */
class EdgeStream implements IngestStream, FrameSink {
  readonly name: string;
  private readonly edge: IngestEdge;
  private readonly frames: FrameStream;
  private readonly limits: StreamLimits | null;
  /** The partition its pings must map to (StreamPartition), or -1. */
  private readonly partition: number;
  private readonly partitionCount: number;

  constructor(
    edge: IngestEdge,
    name: string,
    decoder: FrameDecoder,
    limits: StreamLimits | null,
    partition: StreamPartition | null,
  ) {
    this.edge = edge;
    this.name = name;
    this.limits = limits;
    this.partition = partition === null ? -1 : partition.partition;
    this.partitionCount = partition === null ? 0 : partition.partitionCount;
    this.frames = new FrameStream(decoder, this);
  }

  get bufferedBytes(): number {
    return this.frames.bufferedBytes;
  }

  get heldBytes(): number {
    return this.frames.heldBytes;
  }

  write(chunk: Uint8Array): void {
    this.edge.counters[ING_BYTES_F64]! += chunk.length;
    // The flood budgets are taken at the time of the chunk (one clock read per chunk, into a cell).
    if (this.limits !== null) this.edge.clockNs[0] = nowNs();
    this.frames.push(chunk);
  }

  end(cutByStop = false): void {
    this.frames.end(cutByStop);
  }

  onPing(fields: PingFields): void {
    this.edge.counters[ING_FRAMES_F64]!++;
    if (this.partition >= 0 && partitionOfPing(fields, this.partitionCount) !== this.partition) {
      this.edge.reject(RejectReason.WRONG_PARTITION, this.name, null, 0, 0);
      return;
    }
    const limits = this.limits;
    if (limits !== null && !limits.takePing()) {
      this.edge.reject(RejectReason.CONNECTION_RATE, this.name, null, 0, 0);
      return;
    }
    this.edge.accept(fields, this.name, limits);
  }

  onReject(reason: RejectReason, buf: Uint8Array, start: number, end: number): void {
    this.edge.counters[ING_FRAMES_F64]!++;
    this.edge.reject(reason, this.name, buf, start, end);
  }

  onSkipped(bytes: number): void {
    this.edge.counters[ING_RESYNC_SKIPPED_BYTES_F64]! += bytes;
  }

  onResync(): void {
    this.edge.counters[ING_RESYNCS_F64]!++;
  }
}

/**
 * The ingest edge. One per ingest thread; sources open streams on it, embedders call `ingest` / `push`.
 * Single-threaded (the ingest thread).
 */
export class IngestEdge {
  /** Shared ingest counters (Float64 view of the pipeline region; ING_* indices). */
  readonly counters: Float64Array;
  /** The device registry. */
  readonly registry: DeviceRegistry;
  private readonly options: Readonly<IngestEdgeOptions>;
  private readonly decoder: FrameDecoder;
  private readonly predicates: LanePredicates;
  private readonly sink: PingSink;
  private readonly log: RejectLog;
  private readonly inProcess: EdgeStream;
  private readonly pushFields = new PingFields();
  /** Retries the waiting feeds of this edge (one timer for all of them). */
  readonly feedWaiter = new RoomWaiter();
  /** The time flood budgets are taken at, ns (set per read chunk of a limited stream). */
  readonly clockNs = new Float64Array(1);

  constructor(
    options: Partial<IngestEdgeOptions>,
    deps: {
      pipeline: PipelineRegion;
      registry: DeviceRegistry;
      predicates: LanePredicates;
      sink: PingSink;
      log: RejectLog;
    },
  ) {
    const o: IngestEdgeOptions = { ...INGEST_EDGE_DEFAULTS, ...options };
    validateIngestEdgeOptions(o);
    this.options = o;
    this.counters = deps.pipeline.f64;
    this.registry = deps.registry;
    this.predicates = deps.predicates;
    this.sink = deps.sink;
    this.log = deps.log;
    this.decoder = new FrameDecoder({
      maxFrameBytes: o.maxFrameBytes,
      sharedStructures: o.sharedStructures,
      limits: { maxIdLength: deps.registry.idBytesPerSlot, minTsMs: o.minTsMs, maxTsMs: o.maxTsMs },
      reader: o.frameReader !== false,
    });
    this.inProcess = new EdgeStream(this, 'in-process', this.decoder, null, null);
    this.clockNs[0] = nowNs();
  }

  /**
   * Opens the stream of a live TCP connection from `address`: here the same as `openStream`; the pipeline's edge may
   * hand the connection to another ingest thread (its bytes forwarded, decoded there, under that thread's flood
   * limits for the address).
   */
  openConnection(name: string, limits: StreamLimits | null = null, _address = ''): IngestStream {
    return this.openStream(name, limits);
  }

  /**
   * Opens a byte stream (one per TCP connection, file or stdin, partition of a log); `name` appears in reject log
   * lines; `limits` (a connection's flood budgets, see stream-limits.ts) rejects what exceeds them, and `partition`
   * every ping of a device another partition holds.
   */
  openStream(name: string, limits: StreamLimits | null = null, partition: StreamPartition | null = null): IngestStream {
    return new EdgeStream(this, name, this.decoder, limits, partition);
  }

  /**
   * Opens a byte stream for a pausable source (file, stdin, a TCP connection that waits, a partition of a log): a
   * PausableFeed that hands the edge only what the rings behind it can take and tells the source when to pause and
   * resume (see backpressure.ts). This edge has no rings behind it, so its feeds never wait; the pipeline's edge
   * overrides this.
   */
  openFeed(
    name: string,
    hooks: PausableFeedHooks = {},
    limits: StreamLimits | null = null,
    partition: StreamPartition | null = null,
  ): PausableFeed {
    return new PausableFeed(this.openStream(name, limits, partition), UNBOUNDED_ROOM, this.feedWaiter, hooks);
  }

  /**
   * Ingests a buffer of complete concatenated frames (in-process embedding, or one message of a partitioned log).
   * A partial frame at the end is counted as truncated.
   */
  ingest(bytes: Uint8Array): void {
    this.inProcess.write(bytes);
    this.inProcess.end();
  }

  /** Validates and offers one point pushed in-process. Returns -1 when accepted, else the RejectReason. */
  push(point: TelemetryPoint): number {
    this.counters[ING_FRAMES_F64]!++;
    const mask = point !== null && typeof point === 'object' ? keyMaskOfObject(point) : -2;
    let r: number;
    if (mask === -2) r = RejectReason.NOT_A_MAP;
    else if (mask === -1) r = RejectReason.UNKNOWN_KEY;
    else {
      r = validatePingInto(point, mask, this.decoderLimits(), this.pushFields);
      if (r === PING_VALID) return this.accept(this.pushFields, 'push');
    }
    this.reject(r as RejectReason, 'push', null, 0, 0);
    return r;
  }

  /** Registry, classification and hand-off of a valid ping. Returns -1 when offered, else the RejectReason. */
  accept(fields: PingFields, source: string, limits: StreamLimits | null = null): number {
    const registry = this.registry;
    const slot = registry.slotOf(fields, limits);
    if (slot < 0) {
      const reason =
        slot === SLOT_ID_TOO_LONG
          ? RejectReason.ID_TOO_LONG
          : slot === SLOT_NEW_DEVICE_DENIED
            ? RejectReason.NEW_DEVICE_RATE
            : RejectReason.REGISTRY_FULL;
      this.reject(reason, source, null, 0, 0);
      return reason;
    }
    this.counters[ING_DEVICES_F64] = registry.size;
    fields.slot = slot;
    fields.shard = registry.shardOfSlot[slot]!;
    // Every double stays in fields.values or the anchor arrays: none crosses these calls (see PingFields).
    fields.lane = classifyLane(slot, fields, registry.anchorLat, registry.anchorLon, this.predicates, this.options);
    advanceMotionAnchor(slot, fields.values, registry.anchorLat, registry.anchorLon, this.options);
    this.counters[ING_ACCEPTED_F64]!++;
    this.sink.offer(fields);
    return PING_VALID;
  }

  /** Counts and logs one rejection. */
  reject(reason: RejectReason, source: string, buf: Uint8Array | null, start: number, end: number): void {
    this.counters[ING_REJECTED_F64 + reason]!++;
    this.log.note(reason, source, buf, start, end);
  }

  private decoderLimits(): { maxIdLength: number; minTsMs: number; maxTsMs: number } {
    return this.decoder.options.limits;
  }
}
