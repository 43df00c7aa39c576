/**
 * One downstream's memory: preallocated dispatch-record slots (DREC_* layout), one FIFO of slots per device, and the
 * ready lists that say which device is served next.
 *
 * Order: a device's triggers leave in the order they entered (failed ones go back to the front, in order), and a
 * device is never handed out while it is busy (a batch with its triggers is in flight). So two requests in flight to
 * one downstream never carry triggers of the same device, and a receiver sees each device's triggers in seq order.
 *
 * Who goes next: a device with queued triggers and nothing in flight is on exactly one ready list, served in order
 * COMPLIANCE (it has a compliance trigger queued: the device moves up as a whole, its earlier triggers first), NEW (it
 * had nothing pending, in memory, in flight or in the backlog log, for at least `newDeviceIdleNs` before its latest
 * trigger arrived: a device without a backlog never waits behind devices that have one), OLD (every other device:
 * round robin among devices that keep the downstream busy), and REPLAY (its first trigger is a dead letter waiting
 * for re-delivery: behind live traffic, but one turn in REPLAY_TURN_EVERY is the replay lane's first, so a downstream
 * that always has live work waiting still re-delivers, and what a parked trigger holds back behind it, a COMPLIANCE
 * trigger of its device included, does not wait for ever). A device whose triggers come faster than it is served is
 * never NEW, so a backlog cannot pass itself off as new traffic by emptying its queue at each turn.
 *
 * Held back: a device whose trigger the downstream refused for the moment while it took the rest of the batch (a
 * subject full for the moment, say) waits off the ready lists for a time of its own (`holdBack`, `releaseHeld`): 10 ms,
 * doubling with each such hold in a row (its streak, ended by `endHoldStreak` once one of its triggers is taken, and
 * when it has nothing pending), at most 1 s. The devices that were not refused go on at once, and the one that was is
 * not sent again straight away.
 *
 * The last `reservedSlots` free slots are kept for COMPLIANCE triggers. Nothing allocates after construction.
 * Dispatcher thread only; the caller owns the record cells other than the links (see Downstream).
 */
import {
  DREC_REASON_I32,
  DREC_STRIDE_BYTES,
  DREC_STRIDE_I32,
  Lane,
  TRG_FENCE_INDEX_I32,
  TRG_LANE_SHIFT,
} from '../shm/layout.js';
import { checkNumber } from './validate.js';

/** Ready lists, in the order they are served. */
export const ReadyList = {
  /** Devices with a COMPLIANCE trigger queued. */
  COMPLIANCE: 0,
  /** Devices whose queue was empty until their latest trigger. */
  NEW: 1,
  /** Devices that still had triggers after their last batch. */
  OLD: 2,
  /**
   * Devices whose first trigger is a dead letter awaiting re-delivery: served when no other device is ready, and first
   * at one turn in REPLAY_TURN_EVERY.
   */
  REPLAY: 3,
} as const;
/**
 * One turn of nextReady in this many takes a REPLAY device first when one is ready: the replay lane's share while
 * live devices are always ready (a power of two).
 */
export const REPLAY_TURN_EVERY = 16;
/** Number of ready lists. */
const READY_LIST_COUNT = 4;

const NIL = -1;
/** First hold of a device (holdBack), ns; each further one in a row doubles it, up to HOLD_MAX_NS. */
const HOLD_FIRST_NS = 10e6;
/** Longest hold, ns. */
const HOLD_MAX_NS = 1e9;
/** Held devices are looked at no more often than this, ns: a release is at most this late. */
const HOLD_SCAN_NS = 1e6;
/** busy[] values: nothing in flight, a batch in flight, held back (see holdBack). */
const IDLE = 0;
const IN_FLIGHT = 1;
const HELD = 2;

/** Per-device FIFOs over preallocated record slots (see the module comment). */
export class DeviceQueues {
  /** Record slots in all. */
  readonly capacitySlots: number;
  /** Free slots only COMPLIANCE triggers may take. */
  readonly reservedSlots: number;
  /** Device slots the queues are indexed by. */
  readonly maxDevices: number;
  /** Float64 view over the record slots (slot s starts at s * DREC_STRIDE_F64). */
  readonly f64: Float64Array;
  /** Int32 view over the record slots (slot s starts at s * DREC_STRIDE_I32). */
  readonly i32: Int32Array;
  /** Triggers of each device in the downstream's backlog log, not loaded yet (kept by the owner). */
  readonly fileOnly: Int32Array;

  private readonly slotNext: Int32Array;
  private readonly freeSlots: Int32Array;
  private freeTop: number;
  private readonly head: Int32Array;
  private readonly tail: Int32Array;
  private readonly queued: Int32Array;
  private readonly complianceQueued: Int32Array;
  /** IDLE, IN_FLIGHT or HELD per device. */
  private readonly busy: Uint8Array;
  /** Holds of each device in a row (holdBack), up to 255; 0 once it went on (endHoldStreak). */
  private readonly holdStreak: Uint8Array;
  /** Devices held back (holdBack), the first `heldCount` cells, each with the time it goes back on a list, ns. */
  private readonly heldDevices: Int32Array;
  private readonly heldUntilNs: Float64Array;
  private heldCount = 0;
  /** The earliest of heldUntilNs (Infinity: none held). */
  private heldNextNs = Infinity;
  private readonly listOf: Int8Array;
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  /** Time each device last had nothing pending (its queue emptied with nothing in flight), ns; -Infinity: never seen. */
  private readonly idleSinceNs: Float64Array;
  /** Cell 0: the current time, ns (the owner keeps it current; a double passed in a call would be boxed). */
  private readonly now: Float64Array;
  /** How long a device must have had nothing pending for its next trigger to make it NEW, ns. */
  private readonly newDeviceIdleNs: number;
  private readonly listHead = new Int32Array(READY_LIST_COUNT).fill(NIL);
  private readonly listTail = new Int32Array(READY_LIST_COUNT).fill(NIL);
  private readonly listSize = new Int32Array(READY_LIST_COUNT);
  /** The list the device last returned by `nextReady` was on. */
  lastTakenList: number = ReadyList.OLD;
  /** Calls of nextReady so far, modulo REPLAY_TURN_EVERY (the replay lane's turn comes at 0). */
  private turns = 0;
  /** A device `nextReady` returns first (see `leadNext`), or NIL. */
  private leader = NIL;

  /**
   * `capacitySlots` in [1, 2^22], `reservedSlots` in [0, capacitySlots), `maxDevices` in [1, 2^26]; `now` a cell the
   * owner keeps at the current time (ns); `newDeviceIdleNs` (default 1 s) see the module comment.
   */
  constructor(
    capacitySlots: number,
    reservedSlots: number,
    maxDevices: number,
    now: Float64Array = new Float64Array(1),
    newDeviceIdleNs = 1e9,
  ) {
    checkNumber('queueCapacitySlots', capacitySlots, 1, 1 << 22, true);
    checkNumber('reservedComplianceSlots', reservedSlots, 0, capacitySlots - 1, true);
    checkNumber('maxDevices', maxDevices, 1, 1 << 26, true);
    this.capacitySlots = capacitySlots;
    this.reservedSlots = reservedSlots;
    this.maxDevices = maxDevices;
    const buffer = new ArrayBuffer(capacitySlots * DREC_STRIDE_BYTES);
    this.f64 = new Float64Array(buffer);
    this.i32 = new Int32Array(buffer);
    this.slotNext = new Int32Array(capacitySlots).fill(NIL);
    this.freeSlots = new Int32Array(capacitySlots);
    for (let i = 0; i < capacitySlots; i++) this.freeSlots[i] = capacitySlots - 1 - i;
    this.freeTop = capacitySlots;
    this.head = new Int32Array(maxDevices).fill(NIL);
    this.tail = new Int32Array(maxDevices).fill(NIL);
    this.fileOnly = new Int32Array(maxDevices);
    this.queued = new Int32Array(maxDevices);
    this.complianceQueued = new Int32Array(maxDevices);
    this.busy = new Uint8Array(maxDevices);
    this.holdStreak = new Uint8Array(maxDevices);
    // A device is held with a trigger queued, and keeps it until released: at most this many are held at once.
    const holdCells = Math.min(capacitySlots, maxDevices);
    this.heldDevices = new Int32Array(holdCells);
    this.heldUntilNs = new Float64Array(holdCells);
    this.listOf = new Int8Array(maxDevices).fill(NIL);
    this.prev = new Int32Array(maxDevices).fill(NIL);
    this.next = new Int32Array(maxDevices).fill(NIL);
    this.idleSinceNs = new Float64Array(maxDevices).fill(-Infinity);
    this.now = now;
    this.newDeviceIdleNs = newDeviceIdleNs;
  }

  /** Slots in use (queued, in flight, or waiting for a replay). */
  get used(): number {
    return this.capacitySlots - this.freeTop;
  }

  /** True when a trigger of `lane` would find a slot. */
  hasRoom(lane: number): boolean {
    return lane === Lane.COMPLIANCE ? this.freeTop > 0 : this.freeTop > this.reservedSlots;
  }

  /** Takes a free slot for a trigger of `lane`, or -1 when its part of the memory is full. */
  allocate(lane: number): number {
    if (!this.hasRoom(lane)) return NIL;
    return this.freeSlots[--this.freeTop]!;
  }

  /** Sets `out[slot]` to 1 for every slot in use and 0 for every free one (`out` holds capacitySlots cells). */
  markUsed(out: Uint8Array): void {
    out.fill(1, 0, this.capacitySlots);
    for (let k = 0; k < this.freeTop; k++) out[this.freeSlots[k]!] = 0;
  }

  /** Gives a slot back (its trigger left memory). */
  release(slot: number): void {
    this.freeSlots[this.freeTop++] = slot;
  }

  /** Triggers of `device` queued (in memory and not in flight). */
  queuedOf(device: number): number {
    return this.queued[device]!;
  }

  /** Slot of the first queued trigger of `device`, or -1. */
  headOf(device: number): number {
    return this.head[device]!;
  }

  /** Slot after `slot` in its device's FIFO, or -1. */
  nextInFifo(slot: number): number {
    return this.slotNext[slot]!;
  }

  /** True while a batch with triggers of `device` is in flight, or while it is held back (holdBack). */
  isBusy(device: number): boolean {
    return this.busy[device] !== IDLE;
  }

  /** True while `device` is held back (holdBack). */
  isHeld(device: number): boolean {
    return this.busy[device] === HELD;
  }

  /** Devices held back now. */
  get heldDevicesCount(): number {
    return this.heldCount;
  }

  /** Ready list `device` is on, or -1. */
  listOfDevice(device: number): number {
    return this.listOf[device]!;
  }

  /** Devices on ready list `list`. */
  readyCount(list: number): number {
    return this.listSize[list]!;
  }

  /** True when some device is ready on any list. */
  get anyReady(): boolean {
    return this.readyDevices > 0;
  }

  /** Devices ready on all lists together. */
  get readyDevices(): number {
    return this.listSize[0]! + this.listSize[1]! + this.listSize[2]! + this.listSize[3]!;
  }

  /**
   * Queues `slot` (a trigger of `device`) at the back of the device's FIFO and lists the device if it is idle.
   * `arriving`: a trigger that just arrived (not one loaded back from the backlog log); it makes a device that has had
   * nothing pending for `newDeviceIdleNs` NEW.
   */
  append(device: number, slot: number, arriving = true): void {
    const fresh =
      arriving &&
      this.queued[device] === 0 &&
      this.fileOnly[device] === 0 &&
      this.busy[device] === IDLE &&
      this.now[0]! - this.idleSinceNs[device]! >= this.newDeviceIdleNs;
    this.slotNext[slot] = NIL;
    if (this.tail[device] === NIL) this.head[device] = slot;
    else this.slotNext[this.tail[device]!] = slot;
    this.tail[device] = slot;
    this.count(device, slot, 1);
    this.relist(device, fresh);
  }

  /** Puts `slot` back at the front of the device's FIFO (a failed batch, its triggers in reverse order). */
  prepend(device: number, slot: number): void {
    this.slotNext[slot] = this.head[device]!;
    if (this.head[device] === NIL) this.tail[device] = slot;
    this.head[device] = slot;
    this.count(device, slot, 1);
    this.relist(device, false);
  }

  /** Removes and returns the first queued slot of `device` (-1 when none); the slot stays in use. */
  popHead(device: number): number {
    const slot = this.head[device]!;
    if (slot === NIL) return NIL;
    this.head[device] = this.slotNext[slot]!;
    if (this.head[device] === NIL) this.tail[device] = NIL;
    this.slotNext[slot] = NIL;
    this.count(device, slot, -1);
    return slot;
  }

  /**
   * Takes `slot` out of `device`'s FIFO wherever it is (the slot stays in use) and relists the device; false when it
   * is not there. Walks the FIFO: for rare events (a dead letter given up), not for the delivery path.
   */
  remove(device: number, slot: number): boolean {
    let prev = NIL;
    let s = this.head[device]!;
    while (s !== NIL && s !== slot) {
      prev = s;
      s = this.slotNext[s]!;
    }
    if (s === NIL) return false;
    const next = this.slotNext[s]!;
    if (prev === NIL) this.head[device] = next;
    else this.slotNext[prev] = next;
    if (this.tail[device] === s) this.tail[device] = prev;
    this.slotNext[s] = NIL;
    this.count(device, s, -1);
    this.relist(device, false);
    return true;
  }

  /** Marks `device` busy (a batch with its triggers is in flight) or idle again, and relists it. */
  setBusy(device: number, busy: boolean): void {
    this.busy[device] = busy ? IN_FLIGHT : IDLE;
    // Nothing left pending: from now on it is idle (and its run of holds, if any, is over).
    if (!busy && this.queued[device] === 0 && this.fileOnly[device] === 0) {
      this.idleSinceNs[device] = this.now[0]!;
      this.holdStreak[device] = 0;
    }
    this.relist(device, false);
  }

  /**
   * Keeps `device` (in flight until now, with a trigger queued) off the ready lists for its hold: 10 ms doubling with
   * each hold in a row, at most 1 s, from the time in the `now` cell. It counts as busy meanwhile; releaseHeld puts it
   * back. False (and the device released at once) where the hold cells are all taken: there are as many as record
   * slots, and a held device keeps its refused trigger but in the rare case its parked copy is given up meanwhile.
   * Allocation-free.
   */
  holdBack(device: number): boolean {
    if (this.heldCount === this.heldDevices.length) {
      this.setBusy(device, false);
      return false;
    }
    const streak = this.holdStreak[device]!;
    if (streak < 255) this.holdStreak[device] = streak + 1;
    const untilNs = this.now[0]! + Math.min(HOLD_MAX_NS, HOLD_FIRST_NS * 2 ** Math.min(20, streak));
    this.busy[device] = HELD;
    this.unlink(device);
    this.heldDevices[this.heldCount] = device;
    this.heldUntilNs[this.heldCount] = untilNs;
    this.heldCount++;
    if (untilNs < this.heldNextNs) this.heldNextNs = untilNs;
    return true;
  }

  /** Holds of `device` in a row so far (0: none since one of its triggers was taken or it had nothing pending). */
  holdStreakOf(device: number): number {
    return this.holdStreak[device]!;
  }

  /** Ends `device`'s run of holds (the downstream took its trigger): its next hold is the first again. */
  endHoldStreak(device: number): void {
    this.holdStreak[device] = 0;
  }

  /**
   * Puts the held devices whose time has come (at or before the `now` cell) back on their lists; returns how many. The
   * held devices are looked at once a millisecond at most (HOLD_SCAN_NS). Allocation-free.
   */
  releaseHeld(): number {
    const nowNs = this.now[0]!;
    if (nowNs < this.heldNextNs) return 0;
    let kept = 0;
    let released = 0;
    let next = Infinity;
    for (let k = 0; k < this.heldCount; k++) {
      const device = this.heldDevices[k]!;
      const until = this.heldUntilNs[k]!;
      if (until <= nowNs) {
        // Only a device still held (nothing else released it meanwhile) goes back.
        if (this.busy[device] === HELD) this.setBusy(device, false);
        released++;
        continue;
      }
      this.heldDevices[kept] = device;
      this.heldUntilNs[kept] = until;
      kept++;
      if (until < next) next = until;
    }
    this.heldCount = kept;
    this.heldNextNs = next === Infinity ? next : Math.max(next, nowNs + HOLD_SCAN_NS);
    return released;
  }

  /**
   * Takes the next ready device off its list (COMPLIANCE, NEW, OLD, then REPLAY; REPLAY first at one turn in
   * REPLAY_TURN_EVERY), or -1 when none is ready. The caller takes triggers from it and marks it busy, or relists it.
   */
  nextReady(): number {
    const lead = this.leader;
    if (lead !== NIL) {
      this.leader = NIL;
      const list = this.listOf[lead]!;
      if (list !== NIL) {
        this.unlink(lead);
        this.lastTakenList = list;
        return lead;
      }
    }
    this.turns = (this.turns + 1) & (REPLAY_TURN_EVERY - 1);
    if (this.turns === 0) {
      const d = this.listHead[ReadyList.REPLAY]!;
      if (d !== NIL) {
        this.unlink(d);
        this.lastTakenList = ReadyList.REPLAY;
        return d;
      }
    }
    for (let l = 0; l < READY_LIST_COUNT; l++) {
      const d = this.listHead[l]!;
      if (d !== NIL) {
        this.unlink(d);
        this.lastTakenList = l;
        return d;
      }
    }
    return NIL;
  }

  /**
   * Gives back `device`, just returned by `nextReady` and not taken (its first trigger goes in a batch of its own and a
   * batch had begun): it is listed again, and the next `nextReady` returns it first. Allocation-free.
   */
  leadNext(device: number): void {
    this.relist(device, false);
    this.leader = device;
  }

  /**
   * Puts `device` on the list its state calls for (or takes it off when it is busy or has nothing queued). `fresh`:
   * its queue was empty until now (NEW rather than OLD). Keeps its place when its list does not change.
   */
  relist(device: number, fresh: boolean): void {
    if (this.busy[device] !== IDLE || this.queued[device] === 0) {
      this.unlink(device);
      return;
    }
    const current = this.listOf[device]!;
    let want: number;
    if (this.i32[this.head[device]! * DREC_STRIDE_I32 + DREC_REASON_I32]! >= 0) want = ReadyList.REPLAY;
    else if (this.complianceQueued[device]! > 0) want = ReadyList.COMPLIANCE;
    else if (fresh || current === ReadyList.NEW) want = ReadyList.NEW;
    else want = ReadyList.OLD;
    if (current === want) return;
    this.unlink(device);
    this.link(device, want);
  }

  private count(device: number, slot: number, delta: number): void {
    this.queued[device] = this.queued[device]! + delta;
    if (((this.i32[slot * DREC_STRIDE_I32 + TRG_FENCE_INDEX_I32]! >>> TRG_LANE_SHIFT) & 3) === Lane.COMPLIANCE) {
      this.complianceQueued[device] = this.complianceQueued[device]! + delta;
    }
  }

  private link(device: number, list: number): void {
    const t = this.listTail[list]!;
    this.prev[device] = t;
    this.next[device] = NIL;
    if (t === NIL) this.listHead[list] = device;
    else this.next[t] = device;
    this.listTail[list] = device;
    this.listOf[device] = list;
    this.listSize[list] = this.listSize[list]! + 1;
  }

  private unlink(device: number): void {
    const list = this.listOf[device]!;
    if (list === NIL) return;
    const p = this.prev[device]!;
    const n = this.next[device]!;
    if (p === NIL) this.listHead[list] = n;
    else this.next[p] = n;
    if (n === NIL) this.listTail[list] = p;
    else this.prev[n] = p;
    this.prev[device] = NIL;
    this.next[device] = NIL;
    this.listOf[device] = NIL;
    this.listSize[list] = this.listSize[list]! - 1;
  }
}
