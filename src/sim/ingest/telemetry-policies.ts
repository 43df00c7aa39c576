/**
 * What happens to a live ping at the ingest edge, three ways, each in front of the same simulated drain:
 * - `UnboundedQueue`: one FIFO that keeps everything (memory grows while arrivals exceed the drain);
 * - `TailDropRings`: the production telemetry rings (one per shard, allocated with `allocateTelemetryRing`, no
 *   reserved slice), a ping dropped when its ring is full, whatever its lane;
 * - `LaneAdmissionRings`: the production rings with their reserved COMPLIANCE slice, each fronted by the production
 *   `LaneAdmission` (lane limits, IDLE token bucket at the watermark, queue-delay controller) and its shared counters.
 *
 * Pings arrive in read chunks (every ping of a chunk shares the chunk's admission time, as on the ingest thread);
 * the drain takes records oldest first, sharing its budget between the shards' rings. Held time is admission to the
 * drain taking the record. Single-threaded: the simulator plays producer and consumer in turn.
 */
import { LaneAdmission } from '../../ingest/admission.js';
import { allocateAdmissionCounters, allocateTelemetryRing } from '../../shm/regions.js';
import { ADM_BLOCK_F64, Lane, LANE_COUNT, RingKind, TEL_ADMIT_TIME_NS_F64, TEL_LANE_I32 } from '../../shm/layout.js';
import { SpscRing } from '../../shm/ring.js';
import type { AdmissionOptions } from '../../ingest/admission-options.js';
import { DurationHistogram } from '../stats/histogram.js';

/** An ingest-edge policy in front of a drain. */
export interface TelemetryPolicy {
  /** Pings offered per lane. */
  readonly offered: Float64Array;
  /** Pings shed per lane. */
  readonly shed: Float64Array;
  /** Held time (admission to drain) of every drained ping, per lane. */
  readonly held: readonly DurationHistogram[];
  /**
   * A read chunk at `nowNs` (the admission time of its pings): ping i of lane `lanes[i]` hashed to shard `shards[i]`,
   * admitted or shed in order; the admitted become visible to the drain at the chunk's end.
   */
  offerChunk(nowNs: number, lanes: Uint8Array, shards: Uint16Array, count: number): void;
  /** The drain takes up to `budget` records at `nowNs`; returns how many it took. */
  drain(budget: number, nowNs: number): number;
  /** Records held now. */
  depth(): number;
  /** Most records held at once (checked at the end of every chunk, when a queue is deepest). */
  readonly peakDepth: number;
}

function perLaneHistograms(): DurationHistogram[] {
  return Array.from({ length: LANE_COUNT }, () => new DurationHistogram());
}

/** One FIFO without a bound: a run of (admission time, pings per lane) per chunk, so millions held cost little. */
export class UnboundedQueue implements TelemetryPolicy {
  readonly offered = new Float64Array(LANE_COUNT);
  readonly shed = new Float64Array(LANE_COUNT);
  readonly held = perLaneHistograms();
  private timeNs = new Float64Array(1024);
  /** Pings per lane of each chunk, LANE_COUNT cells per chunk. */
  private counts = new Float64Array(1024 * LANE_COUNT);
  private head = 0;
  private tail = 0;
  private heldCount = 0;
  peakDepth = 0;
  private readonly takeScratch = new Float64Array(LANE_COUNT);

  offerChunk(nowNs: number, lanes: Uint8Array, _shards: Uint16Array, count: number): void {
    if (count === 0) return;
    if (this.tail === this.timeNs.length) this.compact();
    const base = this.tail * LANE_COUNT;
    this.counts.fill(0, base, base + LANE_COUNT);
    for (let i = 0; i < count; i++) this.counts[base + lanes[i]!]!++;
    for (let l = 0; l < LANE_COUNT; l++) this.offered[l] = this.offered[l]! + this.counts[base + l]!;
    this.timeNs[this.tail] = nowNs;
    this.heldCount += count;
    this.tail++;
    if (this.heldCount > this.peakDepth) this.peakDepth = this.heldCount;
  }

  drain(budget: number, nowNs: number): number {
    let left = budget;
    while (left > 0 && this.head < this.tail) {
      const base = this.head * LANE_COUNT;
      const waitNs = nowNs - this.timeNs[this.head]!;
      // Within a chunk the lanes are interleaved: take from each in proportion (whole pings), oldest chunk first.
      const inChunk = this.counts[base]! + this.counts[base + 1]! + this.counts[base + 2]!;
      const take = Math.min(left, inChunk);
      const k = this.takeScratch;
      let taken = 0;
      for (let l = 0; l < LANE_COUNT; l++) {
        k[l] = Math.floor((take * this.counts[base + l]!) / inChunk);
        taken += k[l]!;
      }
      // The rounding remainder goes to the first lanes that still have pings.
      for (let l = 0; l < LANE_COUNT && taken < take; l++) {
        const extra = Math.min(take - taken, this.counts[base + l]! - k[l]!);
        k[l] = k[l]! + extra;
        taken += extra;
      }
      for (let l = 0; l < LANE_COUNT; l++) {
        if (k[l]! === 0) continue;
        this.counts[base + l] = this.counts[base + l]! - k[l]!;
        this.held[l]!.add(waitNs, k[l]!);
      }
      left -= taken;
      this.heldCount -= taken;
      if (taken === inChunk) this.head++;
      if (taken === 0) break;
    }
    return budget - left;
  }

  depth(): number {
    return this.heldCount;
  }

  /** Moves the live chunks to the front, or doubles the arrays when most are live. */
  private compact(): void {
    const live = this.tail - this.head;
    const size = live * 2 > this.timeNs.length ? this.timeNs.length * 2 : this.timeNs.length;
    const t = new Float64Array(size);
    const c = new Float64Array(size * LANE_COUNT);
    t.set(this.timeNs.subarray(this.head, this.tail));
    c.set(this.counts.subarray(this.head * LANE_COUNT, this.tail * LANE_COUNT));
    this.timeNs = t;
    this.counts = c;
    this.head = 0;
    this.tail = live;
  }
}

/** Shared part of the ring-based policies: the production rings, the chunk's time cell, the sharing drain. */
abstract class RingPolicy implements TelemetryPolicy {
  readonly offered = new Float64Array(LANE_COUNT);
  readonly shed = new Float64Array(LANE_COUNT);
  readonly held = perLaneHistograms();
  /** The shards' telemetry rings. */
  readonly rings: SpscRing[];
  /** Admission time of the chunk, ns (a cell, as the ingest thread hands it on). */
  protected readonly timeCell = new Float64Array(1);
  private nextShard = 0;
  peakDepth = 0;
  /**
   * Records admitted and not yet drained, in all and per ring: the simulator plays producer and consumer on one
   * thread, so it counts them itself rather than reading every ring's counters (atomics) every chunk and tick.
   */
  protected heldCount = 0;
  private readonly ringHeld: Float64Array;

  private readonly availScratch: Float64Array;
  private readonly takeScratch: Float64Array;

  protected constructor(shards: number, capacitySlots: number, reservedFraction: number) {
    this.ringHeld = new Float64Array(shards);
    this.availScratch = new Float64Array(shards);
    this.takeScratch = new Float64Array(shards);
    this.rings = Array.from({ length: shards }, () =>
      SpscRing.wrap(allocateTelemetryRing(capacitySlots, reservedFraction), RingKind.TELEMETRY),
    );
  }

  /** Admits or sheds each ping of the chunk (the subclass's rule), then publishes every ring once. */
  offerChunk(nowNs: number, lanes: Uint8Array, shards: Uint16Array, count: number): void {
    this.timeCell[0] = nowNs;
    this.beforeChunk();
    const offered = this.offered;
    const shed = this.shed;
    const ringHeld = this.ringHeld;
    let admitted = 0;
    for (let i = 0; i < count; i++) {
      const lane = lanes[i]! as Lane;
      const shard = shards[i]!;
      offered[lane]!++;
      const slot = this.admit(lane, shard);
      if (slot < 0) {
        shed[lane]!++;
        continue;
      }
      const ring = this.rings[shard]!;
      ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = nowNs;
      ring.i32[slot * ring.strideI32 + TEL_LANE_I32] = lane;
      ringHeld[shard]!++;
      admitted++;
    }
    for (const ring of this.rings) if (ring.pendingCount() > 0) ring.publish();
    this.heldCount += admitted;
    if (this.heldCount > this.peakDepth) this.peakDepth = this.heldCount;
  }

  /** Called once per chunk before its pings, with the chunk's time in `timeCell`. */
  protected beforeChunk(): void {}

  /** Admits one ping into `shard`'s ring: the claimed slot, or a negative number when it is shed. */
  protected abstract admit(lane: Lane, shard: number): number;

  drain(budget: number, nowNs: number): number {
    const rings = this.rings;
    const n = rings.length;
    if (this.heldCount === 0) return 0;
    const avail = this.availScratch;
    const take = this.takeScratch;
    let total = 0;
    for (let k = 0; k < n; k++) {
      avail[k] = this.ringHeld[k]!;
      take[k] = 0;
      total += avail[k]!;
    }
    let left = budget < total ? budget : total;
    const drained = left;
    // Fair shares, repeated while some rings hold less than their share: the drain serves every shard alike.
    while (left > 0) {
      let open = 0;
      for (let k = 0; k < n; k++) if (take[k]! < avail[k]!) open++;
      const share = Math.max(1, Math.floor(left / open));
      for (let j = 0; j < n && left > 0; j++) {
        const k = (this.nextShard + j) % n;
        const t = Math.min(avail[k]! - take[k]!, share, left);
        if (t <= 0) continue;
        take[k] = take[k]! + t;
        left -= t;
      }
    }
    for (let k = 0; k < n; k++) {
      if (take[k]! === 0) continue;
      this.takeFrom(rings[k]!, take[k]!, nowNs);
      this.ringHeld[k] = this.ringHeld[k]! - take[k]!;
    }
    this.nextShard = (this.nextShard + 1) % n;
    this.heldCount -= drained;
    return drained;
  }

  /** Takes the `count` oldest records of `ring` at `nowNs`, noting each one's held time by lane. */
  private takeFrom(ring: SpscRing, count: number, nowNs: number): void {
    const first = ring.readSlot(0);
    const mask = ring.mask;
    const f64 = ring.f64;
    const i32 = ring.i32;
    const sf = ring.strideF64;
    const si = ring.strideI32;
    const held = this.held;
    // Records of one chunk and lane waited alike: each run of them is one weighted histogram entry.
    let runLane = -1;
    let runAdmitNs = 0;
    let runLength = 0;
    for (let i = 0; i < count; i++) {
      const slot = (first + i) & mask;
      const lane = i32[slot * si + TEL_LANE_I32]!;
      const admitNs = f64[slot * sf + TEL_ADMIT_TIME_NS_F64]!;
      if (lane === runLane && admitNs === runAdmitNs) {
        runLength++;
        continue;
      }
      if (runLength > 0) held[runLane]!.add(nowNs - runAdmitNs, runLength);
      runLane = lane;
      runAdmitNs = admitNs;
      runLength = 1;
    }
    if (runLength > 0) held[runLane]!.add(nowNs - runAdmitNs, runLength);
    ring.release(count);
  }

  depth(): number {
    return this.heldCount;
  }
}

/** The production rings with no lanes: a ping finding its ring full is dropped, whatever its lane. */
export class TailDropRings extends RingPolicy {
  constructor(shards: number, capacitySlots: number) {
    super(shards, capacitySlots, 0);
  }

  protected admit(_lane: Lane, shard: number): number {
    const ring = this.rings[shard]!;
    return ring.freeSlots(1) < 1 ? -1 : ring.claim();
  }
}

/** The production rings with their reserved slice, each behind the production LaneAdmission. */
export class LaneAdmissionRings extends RingPolicy {
  /** One admission per shard (the production class). */
  readonly admissions: LaneAdmission[];
  /** The shards' shared admission counters (layout ADM_* blocks). */
  readonly counters: Float64Array;

  /** `options` are the production admission options (validated by LaneAdmission); admission starts at `startNs`. */
  constructor(shards: number, capacitySlots: number, options: AdmissionOptions, startNs: number) {
    super(shards, capacitySlots, options.reservedFraction);
    this.counters = new Float64Array(allocateAdmissionCounters(shards));
    this.admissions = this.rings.map(
      (ring, s) => new LaneAdmission(ring, this.counters, s * ADM_BLOCK_F64, options, startNs),
    );
  }

  /** Lets each ring's queue-delay controller look, once per chunk, as the ingest thread does. */
  protected override beforeChunk(): void {
    // The consumer has run out of records when every ring is empty.
    const idle = this.heldCount === 0;
    for (const a of this.admissions) a.observeQueueDelay(this.timeCell, 0, idle);
  }

  protected admit(lane: Lane, shard: number): number {
    return this.admissions[shard]!.admitAt(lane, this.timeCell, 0);
  }
}
