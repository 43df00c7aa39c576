/**
 * The COMPLIANCE path (ingest thread): which ring each device's next ping goes to, so that COMPLIANCE pings pass the
 * other lanes' queue without a device's pings ever being processed, or its triggers taken, out of order.
 *
 * Under overload a shard ring holds a few milliseconds of pings of every lane, and its containment worker is busy all
 * the time, so a COMPLIANCE ping behind them waits for all of them and for every moment the busy worker is not
 * scheduled. With the path on, the ingest thread has a COMPLIANCE ring of its own, read by a containment task of its
 * own (the COMPLIANCE group), which is idle most of the time and so is woken at once by the ring's publish.
 *
 * A device is on one path at a time: its shard ring (path 0) or the COMPLIANCE ring (path 1). Each ping asks for the
 * path of its lane (COMPLIANCE: 1, others: 0) and gets it only when the device is settled on the path it is on: its
 * last ping there released by containment, and its newest trigger taken by the dispatcher (the TRIGGER MARKS region,
 * which the containment worker writes before it releases the ping). Until then the ping follows the device's earlier
 * ones. So one containment worker at a time touches a device's state, and a trigger ring holds a device's triggers
 * only once the other ring's are offered: the dispatcher sees them in seq order, whatever order it reads rings in
 * (a worker whose batch failed drops the triggers it had claimed and not published, so none of them turns up later).
 *
 * Allocation-free: per-slot typed arrays; a ping that asks for the other path reads its ring's consumer position and,
 * if the device has a trigger marked, that trigger ring's positions.
 */
import { Lane, TMARK_END_I32, TMARK_NONE, TMARK_RING_I32, TMARK_STRIDE_I32 } from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';

const LANE_COMPLIANCE = Lane.COMPLIANCE;

/** A device on its shard ring. */
export const PATH_SHARD = 0;
/** A device on the COMPLIANCE ring. */
export const PATH_COMPLIANCE = 1;

/** Which ring each device's pings go to (one ingest thread's view; see the module comment). */
export class CompliancePaths {
  /** This thread's COMPLIANCE ring (producer side). */
  readonly ring: SpscRing;
  private readonly shardRings: readonly SpscRing[];
  private readonly shardOfSlot: Uint16Array;
  private readonly triggerRings: readonly SpscRing[];
  private readonly marks: Int32Array;
  /** Per slot: PATH_SHARD or PATH_COMPLIANCE. */
  private readonly path: Uint8Array;
  /** Per slot: its ring's write sequence just after the device's last record there. */
  private readonly endSeq: Int32Array;
  /** Per slot: 1 while endSeq names a record containment may not have released. */
  private readonly pending: Uint8Array;
  /** Path changes to the COMPLIANCE ring and back (a counter for tests and benchmarks). */
  switches = 0;

  /**
   * @param ring this thread's COMPLIANCE ring
   * @param shardRings this thread's ring of each shard
   * @param shardOfSlot the registry's shard of each slot
   * @param triggerRings every trigger ring (memory.triggerRings order), consumer positions read only
   * @param triggerMarks memory.triggerMarks
   */
  constructor(
    ring: SpscRing,
    shardRings: readonly SpscRing[],
    shardOfSlot: Uint16Array,
    triggerRings: readonly SpscRing[],
    triggerMarks: SharedArrayBuffer,
  ) {
    this.ring = ring;
    this.shardRings = shardRings;
    this.shardOfSlot = shardOfSlot;
    this.triggerRings = triggerRings;
    this.marks = new Int32Array(triggerMarks);
    const slots = shardOfSlot.length;
    this.path = new Uint8Array(slots);
    this.endSeq = new Int32Array(slots);
    this.pending = new Uint8Array(slots);
  }

  /**
   * The path a ping of `lane` for `slot` takes: the lane's own once the device is settled, else the device's. With
   * `ringOpen` false (the COMPLIANCE ring half full and deeper than the device's shard ring: its worker is behind) a
   * settled device takes its shard ring whatever its lane, so a fleet that is mostly inside compliance fences spreads
   * over the shards' workers again.
   */
  choose(slot: number, lane: number, ringOpen: boolean): number {
    const current = this.path[slot]!;
    const wanted = lane === LANE_COMPLIANCE && ringOpen ? PATH_COMPLIANCE : PATH_SHARD;
    if (current === wanted || !this.settled(slot)) return current;
    this.path[slot] = wanted;
    this.switches++;
    return wanted;
  }

  /** The device's path now (PATH_SHARD or PATH_COMPLIANCE). */
  pathOf(slot: number): number {
    return this.path[slot]!;
  }

  /** Notes a record of `slot` just claimed in `ring` (the ring of the path `choose` gave). */
  noteClaimed(slot: number, ring: SpscRing): void {
    this.endSeq[slot] = (ring.writeSeq() + ring.pendingCount()) | 0;
    this.pending[slot] = 1;
  }

  /**
   * True when containment has released the device's last record on its path and the dispatcher has taken its newest
   * trigger: nothing of it is left in any ring, so its next record may go to either.
   */
  settled(slot: number): boolean {
    if (this.pending[slot] !== 0) {
      const ring = this.path[slot] === PATH_COMPLIANCE ? this.ring : this.shardRings[this.shardOfSlot[slot]!]!;
      if (((ring.readSeq() - this.endSeq[slot]!) | 0) < 0) return false;
      this.pending[slot] = 0;
    }
    const m = slot * TMARK_STRIDE_I32;
    const r = this.marks[m + TMARK_RING_I32]!;
    if (r === TMARK_NONE) return true;
    const ring = this.triggerRings[r]!;
    const end = this.marks[m + TMARK_END_I32]!;
    // Not taken yet, unless the mark is past what was ever published: the trigger of a batch whose task failed before
    // publishing (its records are released), which no one will take.
    if (((ring.readSeq() - end) | 0) < 0 && ((ring.writeSeq() - end) | 0) >= 0) return false;
    // No worker writes this slot's marks before this thread publishes the device's next record.
    this.marks[m + TMARK_RING_I32] = TMARK_NONE;
    return true;
  }

  /**
   * Moves a settled device back to its shard ring (an expiry record goes there); false when it is not settled on the
   * COMPLIANCE path yet.
   */
  toShardRing(slot: number): boolean {
    if (this.path[slot] === PATH_SHARD) return true;
    if (!this.settled(slot)) return false;
    this.path[slot] = PATH_SHARD;
    return true;
  }

  /**
   * Forgets `slot` (a freed slot taken by a new device): on its shard ring, nothing pending, no trigger marked (the
   * dispatcher frees a slot only after it has taken the old device's last record).
   */
  forgetSlot(slot: number): void {
    this.path[slot] = PATH_SHARD;
    this.pending[slot] = 0;
    this.marks[slot * TMARK_STRIDE_I32 + TMARK_RING_I32] = TMARK_NONE;
  }
}
