/**
 * The ingest thread's wiring of the edge to admission and the rings: lane predicates over the current fence store and
 * the shared device state, the PingSink that admits and writes each ping, the room the rings offer pausable sources,
 * and an edge whose streams flush the shards' batches at the end of every read chunk.
 */
import type { DeviceState } from '../fences/device-state.js';
import { Q_LIMIT_M, Q_X, Q_Y } from '../fences/geometry.js';
import type { FenceStore } from '../fences/store.js';
import type { LaneAdmission } from '../ingest/admission.js';
import { PausableFeed, UNBOUNDED_ROOM, type PausableFeedHooks, type RingRoom } from '../ingest/backpressure.js';
import { IngestEdge, type IngestStream, type PingSink, type StreamPartition } from '../ingest/ingest-edge.js';
import type { StreamLimits } from '../ingest/stream-limits.js';
import type { LanePredicates } from '../ingest/lane-classifier.js';
import { PF_ADMIT_TIME_NS_F64, PF_LAT_F64, PF_LON_F64, type PingFields } from '../ingest/ping-fields.js';
import { writeTelemetryRecord } from '../ingest/telemetry-record.js';
import { nowNs } from '../shm/clock.js';
import { Lane } from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { InputForwarder } from './input-forwarding.js';
import { PATH_COMPLIANCE, type CompliancePaths } from './compliance-path.js';

/**
 * Publishes what the admission sink writes into this thread's telemetry rings (ShardScheduler on ingest thread 0,
 * which also submits containment tasks; the other ingest threads' publisher rings thread 0's doorbell).
 */
export interface RingPublisher {
  /** `shard`'s ring (this thread's) has a record claimed. */
  noteClaimed(shard: number, ring: SpscRing): void;
  /** This thread's COMPLIANCE ring has a record claimed: published at once (see compliance-path.ts). */
  noteComplianceClaimed(ring: SpscRing): void;
  /** Start of a read chunk: the pings it confirms are held until `flush`. */
  begin(): void;
  /** End of a read chunk: publish every ring with claimed records. */
  flush(): void;
}

const LANE_COMPLIANCE = Lane.COMPLIANCE;

/**
 * Lane predicates from the fence store in force (swapped on reload) and the shared device state. Allocation-free.
 *
 * The device state lags the ingest edge by the pings not yet processed, so "the device was inside a compliance fence"
 * is answered from two sources: the shared state (authoritative for every ping containment has processed) and, for a
 * device whose last COMPLIANCE ping containment has not processed yet, that pending ping itself: until it is
 * processed, the device may be inside, so its next pings travel in the COMPLIANCE lane too.
 */
export class StorePredicates implements LanePredicates {
  /** The store generation in force. */
  store: FenceStore;
  private readonly state: DeviceState;
  private readonly marginM: number;
  private readonly rings: readonly SpscRing[];
  private readonly shardOfSlot: Uint16Array;
  /** Per slot: ring sequence just after the device's last COMPLIANCE ping. */
  private readonly complianceSeqAfter: Int32Array;
  /** Per slot: 1 while complianceSeqAfter names a ping containment may not have processed. */
  private readonly compliancePending: Uint8Array;
  /** Per slot: 1 when that ping is in the COMPLIANCE ring (`complianceRing`), 0 in the device's shard ring. */
  private readonly complianceOnOwnRing: Uint8Array;
  /** This thread's COMPLIANCE ring, or null (the COMPLIANCE path off). */
  private readonly complianceRing: SpscRing | null;

  constructor(
    store: FenceStore,
    state: DeviceState,
    marginM: number,
    rings: readonly SpscRing[],
    shardOfSlot: Uint16Array,
    complianceRing: SpscRing | null = null,
  ) {
    this.store = store;
    this.state = state;
    this.marginM = marginM;
    this.rings = rings;
    this.shardOfSlot = shardOfSlot;
    this.complianceSeqAfter = new Int32Array(shardOfSlot.length);
    this.compliancePending = new Uint8Array(shardOfSlot.length);
    this.complianceOnOwnRing = new Uint8Array(shardOfSlot.length);
    this.complianceRing = complianceRing;
  }

  /** Forgets what was noted for `slot` (a freed slot taken by a new device). */
  forgetSlot(slot: number): void {
    this.compliancePending[slot] = 0;
  }

  /** Notes that the device's ping just claimed in `ring` (its shard's or the COMPLIANCE ring) is a COMPLIANCE one. */
  noteCompliance(slot: number, ring: SpscRing): void {
    this.complianceSeqAfter[slot] = (ring.writeSeq() + ring.pendingCount()) | 0;
    this.compliancePending[slot] = 1;
    this.complianceOnOwnRing[slot] = ring === this.complianceRing ? 1 : 0;
  }

  /** Inside or within the margin of a compliance fence's box (through the store's q cells: no double crosses a call). */
  nearCompliance(values: Float64Array): boolean {
    const store = this.store;
    if (store.complianceCount === 0) return false;
    const q = store.q;
    q[Q_X] = values[PF_LON_F64]!;
    q[Q_Y] = values[PF_LAT_F64]!;
    q[Q_LIMIT_M] = this.marginM;
    return store.nearComplianceAt();
  }

  /** The device has an entry on a compliance fence, or a COMPLIANCE ping containment has not processed yet. */
  deviceInsideCompliance(slot: number): boolean {
    if (this.state.insideCompliance(slot)) return true;
    if (this.compliancePending[slot] === 0) return false;
    // Not yet consumed while the ring's read sequence is still before the ping's end.
    const ring = this.complianceOnOwnRing[slot] !== 0 ? this.complianceRing! : this.rings[this.shardOfSlot[slot]!]!;
    if (((ring.readSeq() - this.complianceSeqAfter[slot]!) | 0) < 0) return true;
    this.compliancePending[slot] = 0;
    return this.state.insideCompliance(slot);
  }
}

/**
 * Admits each ping into its shard's ring and writes it; the scheduler publishes and batches. Allocation-free.
 * The admission time is read once per read chunk (`tick()`), not per ping: reading the clock boxes a double.
 */
export class AdmissionSink implements PingSink {
  /** Admission time of the chunk being decoded, ns on the cross-thread clock (set by `tick()`). */
  readonly clockNs = new Float64Array(1);
  /**
   * True while the pings offered come from a pausable source (set around each fed piece and pushed point): they are
   * admitted with `admitPausableAt` (never rate-limited; the feed sized the piece to fit).
   */
  pausable = false;
  private readonly admissions: readonly LaneAdmission[];
  private readonly scheduler: RingPublisher;
  private readonly predicates: StorePredicates;
  /** The COMPLIANCE path and its ring's admission, or null (off). */
  private readonly paths: CompliancePaths | null;
  private readonly complianceAdmission: LaneAdmission | null;
  /** Every admission (the shards', then the COMPLIANCE ring's): each one's queue-delay controller looks per chunk. */
  private readonly everyAdmission: readonly LaneAdmission[];

  /**
   * `admissions`: one per shard ring of this thread; `paths` and `complianceAdmission` (over `paths.ring`): the
   * COMPLIANCE path, or null for none.
   */
  constructor(
    admissions: readonly LaneAdmission[],
    scheduler: RingPublisher,
    predicates: StorePredicates,
    paths: CompliancePaths | null = null,
    complianceAdmission: LaneAdmission | null = null,
  ) {
    this.admissions = admissions;
    this.scheduler = scheduler;
    this.predicates = predicates;
    this.paths = paths;
    this.complianceAdmission = complianceAdmission;
    this.everyAdmission = complianceAdmission === null ? admissions : [...admissions, complianceAdmission];
  }

  /**
   * False when the COMPLIANCE ring is at least half full and deeper than `shardRing`: its worker is behind (a fleet
   * mostly inside compliance fences), and a settled device's COMPLIANCE ping goes to its shard ring instead, where
   * the shard's worker takes it (and the reserved slice still keeps it from being shed). Each ring's consumer position
   * is re-read only when its cached depth would decide. Allocation-free.
   */
  private complianceRingOpen(shardRing: SpscRing): boolean {
    const ring = this.complianceAdmission!.ring;
    const half = ring.capacitySlots >> 1;
    if (ring.producerDepth() < half) return true;
    const depth = ring.refreshDepth();
    return depth < half || shardRing.refreshDepth() >= depth;
  }

  /** Reads the clock for the pings of the next chunk (or pushed point), and lets each ring's queue-delay controller look. */
  tick(): void {
    this.clockNs[0] = nowNs();
    const admissions = this.everyAdmission;
    // The containment workers have run out of records when every ring is empty (published, not consumed).
    let idle = true;
    for (let s = 0; s < admissions.length && idle; s++) {
      const ring = admissions[s]!.ring;
      if (ring.writeSeq() !== ring.readSeq()) idle = false;
    }
    for (let s = 0; s < admissions.length; s++) admissions[s]!.observeQueueDelay(this.clockNs, 0, idle);
  }

  offer(fields: PingFields): void {
    const shard = fields.shard;
    const paths = this.paths;
    const onOwnRing =
      paths !== null &&
      paths.choose(
        fields.slot,
        fields.lane,
        fields.lane !== LANE_COMPLIANCE || this.complianceRingOpen(this.admissions[shard]!.ring),
      ) === PATH_COMPLIANCE;
    const admission = onOwnRing ? this.complianceAdmission! : this.admissions[shard]!;
    const values = fields.values;
    values[PF_ADMIT_TIME_NS_F64] = this.clockNs[0]!;
    const slot = this.pausable
      ? admission.admitPausableAt(fields.lane, values, PF_ADMIT_TIME_NS_F64)
      : admission.admitAt(fields.lane, values, PF_ADMIT_TIME_NS_F64);
    // Shed: admission counted it by lane and reason.
    if (slot < 0) return;
    const ring = admission.ring;
    writeTelemetryRecord(ring, slot, fields);
    if (fields.lane === LANE_COMPLIANCE) this.predicates.noteCompliance(fields.slot, ring);
    if (paths !== null) paths.noteClaimed(fields.slot, ring);
    if (onOwnRing) this.scheduler.noteComplianceClaimed(ring);
    else this.scheduler.noteClaimed(shard, ring);
  }
}

/**
 * The room the telemetry rings offer pausable sources (see src/ingest/backpressure.ts): none while the fullest ring
 * is at or above the admission watermark (the part above it stays for the live sources sharing the rings), else up to
 * the lower lanes' limit (capacity minus the COMPLIANCE reserve) of the fullest ring. Unlimited while draining:
 * admission sheds everything as DRAINING then, and a feed must not wait for room that draining makes irrelevant.
 * Reads each ring's consumer position (one atomic load per shard); allocation-free.
 */
export class AdmissionRoom implements RingRoom {
  private readonly admissions: readonly LaneAdmission[];
  /** Depth of the fullest ring at and above which pausable sources wait. */
  readonly pauseSlots: number;
  /** Depth no pausable ping may reach: the lower lanes' limit. */
  readonly limitSlots: number;
  private lastMaxDepth = 0;

  /** The room in front of `admissions` (one per shard, all over rings of one capacity). */
  constructor(admissions: readonly LaneAdmission[]) {
    if (admissions.length === 0) throw new RangeError('admissions must not be empty');
    this.admissions = admissions;
    const a = admissions[0]!;
    this.limitSlots = a.sharedSlots;
    // At least one slot: with a watermark of 0 (IDLE always needs a token, for live sources) a pausable source still
    // feeds whenever the rings are empty, instead of waiting for good.
    this.pauseSlots = Math.max(1, Math.min(a.watermarkSlots, a.sharedSlots));
  }

  /** See RingRoom.pings: 0 while the fullest ring is at or above the watermark, else the room to the lanes' limit. */
  pings(): number {
    const admissions = this.admissions;
    if (admissions[0]!.isDraining()) return Number.MAX_SAFE_INTEGER;
    let max = 0;
    for (let s = 0; s < admissions.length; s++) {
      const d = admissions[s]!.ring.refreshDepth();
      if (d > max) max = d;
    }
    this.lastMaxDepth = max;
    return max >= this.pauseSlots ? 0 : this.limitSlots - max;
  }

  /** See RingRoom.empty. */
  empty(): boolean {
    return this.lastMaxDepth === 0;
  }
}

/**
 * A stream that flushes the shards' batches after every chunk it is given; a pausable one offers its pings as a
 * pausable source's (see AdmissionSink.pausable).
 */
class FlushingStream implements IngestStream {
  readonly name: string;
  private readonly inner: IngestStream;
  private readonly scheduler: RingPublisher;
  private readonly sink: AdmissionSink;
  private readonly pausable: boolean;

  constructor(inner: IngestStream, scheduler: RingPublisher, sink: AdmissionSink, pausable: boolean) {
    this.inner = inner;
    this.name = inner.name;
    this.scheduler = scheduler;
    this.sink = sink;
    this.pausable = pausable;
  }

  get bufferedBytes(): number {
    return this.inner.bufferedBytes;
  }

  get heldBytes(): number {
    return this.inner.heldBytes;
  }

  write(chunk: Uint8Array): void {
    const sink = this.sink;
    this.scheduler.begin();
    sink.tick();
    sink.pausable = this.pausable;
    try {
      this.inner.write(chunk);
    } finally {
      sink.pausable = false;
    }
    this.scheduler.flush();
  }

  end(cutByStop = false): void {
    const sink = this.sink;
    this.scheduler.begin();
    sink.tick();
    sink.pausable = this.pausable;
    try {
      this.inner.end(cutByStop);
    } finally {
      sink.pausable = false;
    }
    this.scheduler.flush();
  }
}

/**
 * The ingest edge of the pipeline: every stream it opens flushes at the end of each read chunk, and its feeds (for
 * pausable sources) wait for room in the telemetry rings.
 */
export class PipelineEdge extends IngestEdge {
  private scheduler: RingPublisher | null = null;
  private admissionSink: AdmissionSink | null = null;
  private room: RingRoom = UNBOUNDED_ROOM;
  private forwarders: readonly InputForwarder[] = [];
  private nextConnection = 0;

  /** Attaches the scheduler, the sink and the rings' room (after construction: they are built around the registry). */
  attach(scheduler: RingPublisher, sink: AdmissionSink, room: RingRoom): void {
    this.scheduler = scheduler;
    this.admissionSink = sink;
    this.room = room;
  }

  /** The room pausable sources are fed by. */
  get ringRoom(): RingRoom {
    return this.room;
  }

  /**
   * Spreads live connections round-robin over this thread and the other ingest threads (`forwarders`, one per other
   * thread; see input-forwarding.ts). A connection's bytes all go to one thread, in order.
   */
  spreadConnections(forwarders: readonly InputForwarder[]): void {
    this.forwarders = forwarders;
  }

  override openConnection(name: string, limits: StreamLimits | null = null, address = ''): IngestStream {
    const n = this.forwarders.length;
    if (n === 0) return this.openStream(name, limits);
    // Round-robin, passing over a thread whose input ring is full (bytes wait for it): a new connection is not queued
    // behind a saturated thread while another can take it.
    let k = this.nextConnection;
    for (let tries = 0; tries < n && k !== 0 && this.forwarders[k - 1]!.waitingRecords > 0; tries++) {
      k = k === n ? 0 : k + 1;
    }
    this.nextConnection = k === n ? 0 : k + 1;
    // A forwarded connection's ping and new-device budgets are the receiving thread's (per connection, and per
    // address among that thread's connections); its count and held bytes are this thread's.
    return k === 0 ? this.openStream(name, limits) : this.forwarders[k - 1]!.open(name, address);
  }

  override openStream(
    name: string,
    limits: StreamLimits | null = null,
    partition: StreamPartition | null = null,
  ): IngestStream {
    return this.open(name, false, limits, partition);
  }

  override openFeed(
    name: string,
    hooks: PausableFeedHooks = {},
    limits: StreamLimits | null = null,
    partition: StreamPartition | null = null,
  ): PausableFeed {
    return new PausableFeed(this.open(name, true, limits, partition), this.room, this.feedWaiter, hooks);
  }

  private open(
    name: string,
    pausable: boolean,
    limits: StreamLimits | null,
    partition: StreamPartition | null,
  ): IngestStream {
    const inner = super.openStream(name, limits, partition);
    return this.scheduler === null || this.admissionSink === null
      ? inner
      : new FlushingStream(inner, this.scheduler, this.admissionSink, pausable);
  }
}
