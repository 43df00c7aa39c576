/**
 * The containment engine: candidates -> exact test -> per-device state machine -> trigger records.
 * One per worker thread (it owns preallocated scratch); runs a shard's batch on any worker because all state is in
 * the shared DeviceState. Allocation-free per ping.
 *
 * Per accepted ping of a device (time t, position p, previous accepted position p0):
 * - one index query for the box spanning p0 and p gives the candidates for both the point test and CROSS;
 * - entries (fences the device is inside or pending on) are updated first, in entry order:
 *   PENDING_ENTER: still inside and t - since >= minInsideMs -> ENTER (then DWELL if already due); outside -> dropped,
 *   no trigger. INSIDE: counts as inside while within exitBufferM of the fence; inside -> DWELL once per stay when
 *   t - since >= dwellMs; outside -> EXIT at once, or after minOutsideMs of continuous outside pings (PENDING_EXIT);
 * - fences p is inside with no entry get one: ENTER at once when minInsideMs is 0, else PENDING_ENTER. Entries beyond
 *   the device's inline ones come from the shared overflow pool; with none free (maxFencesPerDevice reached, pool
 *   empty) the fence is untracked: CNT_FENCE_OVERFLOW counts it, and nothing is written about it for the rest of that
 *   stay (no late ENTER while the device stays inside, no CROSS when it leaves: DEV_UNTRACKED_I32);
 * - CROSS: a candidate fence with no entry, p outside, and the segment p0-p touching it (both pings outside).
 * Pings older than the device's last accepted ping are ignored and counted (equal times are processed).
 *
 * An expiry record (lane TEL_LANE_EXPIRE, written by the ingest thread for a device idle too long) ends the device's
 * stays: one EXIT per fence it is inside, at its last position and time, marked expired (or none when the engine was
 * built with `exitOnExpiry` false); its pending entries are dropped; its state is cleared (its seq is kept); and a
 * retire marker (TRG_TYPE_RETIRE) follows its last trigger, so the dispatcher knows when it may free the slot. A record
 * whose device sent again since it was marked expired (its life word says so) ends nothing: only the marker is written.
 *
 * Trigger sequence (TRG_SEQ_F64): one counter per device, incremented for each of its triggers; so it is strictly
 * increasing per (device, fence) (gaps where the device triggered on other fences), starts at 1, survives EXIT and
 * reloads, and needs no memory per (device, fence) pair.
 */
import {
  CNT_BLOCK_F64,
  CNT_TRIGGERS_F64,
  TRIGGER_TYPE_COUNT,
  CNT_EXACT_TESTS_F64,
  CNT_CROSS_OVER_BUDGET_F64,
  CNT_EXPIRED_DEVICES_F64,
  CNT_EXPIRY_EXITS_F64,
  CNT_IMPLAUSIBLE_SEGMENTS_F64,
  CNT_FENCE_OVERFLOW_F64,
  CNT_GENERATION_MISMATCH_F64,
  CNT_INVALID_F64,
  CNT_PROCESSED_F64,
  CNT_STALE_F64,
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_CHUNK_COUNT_I32,
  DEV_CROSS_COUNT_I32,
  DEV_CROSS_WINDOW_MS_F64,
  DEV_HAS_LAST_I32,
  DEV_UNTRACKED_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  DEV_COMPLIANCE_COUNT_I32,
  ENTRY_FENCE_I32,
  ENTRY_PENDING_MS_F64,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  FENCE_DWELL_MS_F64,
  FENCE_EXIT_BUFFER_M_F64,
  FENCE_FLAG_COMPLIANCE,
  FENCE_FLAGS_I32,
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_INSIDE_MS_F64,
  FENCE_MIN_OUTSIDE_MS_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  FENCE_STRIDE_F64,
  FENCE_STRIDE_I32,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_EXPIRE_EPOCH_F64,
  TEL_LANE_EXPIRE,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  Lane,
  TRG_TYPE_RETIRE,
  TMARK_END_I32,
  TMARK_RING_I32,
  TMARK_STRIDE_I32,
  TriggerType,
  DEVICE_LIFE_EPOCH_SHIFT,
  DeviceLife,
  TRG_LANE_EXPIRED,
  WDG_HELD_DONE_I32,
  WDG_STRIDE_I32,
  WDG_PRE_SLOT_I32,
  WDG_PRE_TRIG_AT_I32,
  WDG_PRE_TRIG_RING_I32,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import { DeviceState, publishComplianceCount } from './device-state.js';
import type { DevicePreImages } from './pre-image.js';
import type { FenceStore } from './store.js';
import { M_PER_DEG, Q_MAX_X, Q_MAX_Y, Q_MIN_X, Q_MIN_Y, Q_X, Q_X0, Q_Y, Q_Y0, RAD_PER_DEG } from './geometry.js';
import {
  REC_ADMIT_TIME_NS,
  REC_CELLS,
  REC_EVENT_TIME_MS,
  REC_INSIDE_MS,
  REC_LAT,
  REC_LON,
  REC_SEQ,
  waitForTriggerRoom,
  writeTrigger,
} from './trigger-writer.js';

const LANE_COMPLIANCE = Lane.COMPLIANCE;
const LANE_TRANSITION = Lane.TRANSITION;

/** Engine settings. */
export interface ContainmentEngineOptions {
  /** A device that expires inside fences gets an EXIT for each, marked expired (true, the default), or none. */
  exitOnExpiry?: boolean;
  /** No CROSS for a move implying more than this speed, m/s (0: no limit; default 0). */
  crossMaxSpeedMps?: number;
  /** No CROSS across a gap between pings longer than this, ms (0: no limit; default 0). */
  crossMaxGapMs?: number;
  /** CROSS triggers per device per second at most, the rest dropped and counted (0: no limit; default 0). */
  crossMaxPerDevicePerSec?: number;
}

/** Cells of the engine's CROSS rules. */
const CROSS_MAX_SPEED_MPS = 0;
const CROSS_MAX_GAP_MS = 1;
const CROSS_MAX_PER_DEVICE_PER_SEC = 2;

/** Per-thread containment engine over a fence store generation and the shared device state. */
export class ContainmentEngine {
  private store: FenceStore;
  private readonly state: DeviceState;
  private readonly counters: Float64Array;
  private counterBase: number;
  /** Candidate fence indices of the current ping's query. */
  private candidates: Int32Array;
  /** Fences the current ping is inside, in candidate order. */
  private insideList: Int32Array;
  /** insideStamp[f] === stamp: the current ping is inside f. */
  private insideStamp: Int32Array;
  /** entryStamp[f] === stamp: the device had an entry on f at the start of the current ping. */
  private entryStamp: Int32Array;
  private stamp = 0;
  /** The current ping and the trigger being written (REC_* cells): doubles never cross a call as arguments. */
  private readonly rec = new Float64Array(REC_CELLS);
  private readonly exitOnExpiry: boolean;
  /** The device id table's life words (DeviceLife), once `watchLifeWords` gave them. */
  private lifeWords: Int32Array | null = null;
  /** CROSS_* cells (a typed array: no double field to box). */
  private readonly crossRules = new Float64Array(3);
  /** memory.triggerMarks, once `markTriggersIn` gave them: where each device's newest trigger was written. */
  private marks: Int32Array | null = null;
  /** Index (memory.triggerRings order) of the ring the batches write to now, or -1 (marks not written). */
  private triggerRing = -1;
  /** The PRE-IMAGE region and the watchdog cells, once `keepRecordsIn` gave them (see `useHeldBlock`). */
  private preImages: DevicePreImages | null = null;
  private heldCells: Int32Array | null = null;
  /** The group block of the current task: its first WDG_* cell and its pre-image block. */
  private heldBase = 0;
  private heldBlock = 0;
  /**
   * The current record's trigger counts (writeTrigger's cells of a counter block), added to the batch's block once the
   * record is done: a record that fails part way counts no trigger it never published. Its waits for ring room are
   * counted at once, in the batch's block (makeRoom: writeTrigger finds room).
   */
  private readonly recordCounts = new Float64Array(CNT_BLOCK_F64);
  /**
   * The device of the accounted record in progress while its cells are not kept yet, else -1: they are kept before the
   * record's first trigger or first change of an entry (`keepHead`), so a record that changes neither keeps nothing.
   */
  private keepSlot = -1;
  /** False while the accounted record in progress has not kept its device's entries (see `keepEntries`). */
  private entriesKept = true;
  /** Drill only: the device slot whose next trigger fires `drill` (after writing it), or -1. */
  private drillSlot = -1;
  private drill: (() => void) | null = null;

  /**
   * @param store fence store generation to test against (see `useStore` for a swap)
   * @param state shared per-device state
   * @param counters shared containment counter region (Float64, CNT_* cells)
   * @param counterBaseF64 first cell of the counter block of the shard being processed (see `useCounterBlock`)
   */
  constructor(
    store: FenceStore,
    state: DeviceState,
    counters: Float64Array,
    counterBaseF64: number,
    options: ContainmentEngineOptions = {},
  ) {
    this.exitOnExpiry = options.exitOnExpiry ?? true;
    this.crossRules[CROSS_MAX_SPEED_MPS] = options.crossMaxSpeedMps ?? 0;
    this.crossRules[CROSS_MAX_GAP_MS] = options.crossMaxGapMs ?? 0;
    this.crossRules[CROSS_MAX_PER_DEVICE_PER_SEC] = options.crossMaxPerDevicePerSec ?? 0;
    this.store = store;
    this.state = state;
    this.counters = counters;
    this.counterBase = counterBaseF64;
    const n = Math.max(1, store.fenceCount);
    this.candidates = new Int32Array(n);
    this.insideList = new Int32Array(n);
    this.insideStamp = new Int32Array(n);
    this.entryStamp = new Int32Array(n);
  }

  /** The store generation the engine tests against. */
  get currentStore(): FenceStore {
    return this.store;
  }

  /**
   * Switches to another store generation between batches (a batch in flight finishes on the one it started with).
   * Device state must have been carried over first (`reloadDeviceState`). Allocates only when the new store is larger.
   */
  useStore(store: FenceStore): void {
    this.store = store;
    if (store.fenceCount > this.candidates.length) {
      const n = store.fenceCount;
      this.candidates = new Int32Array(n);
      this.insideList = new Int32Array(n);
      this.insideStamp = new Int32Array(n);
      this.entryStamp = new Int32Array(n);
      this.stamp = 0;
    }
  }

  /**
   * Lets expiry records read their device's life word (the id table's, DeviceLife): a record whose device sent again
   * after it was marked expired (revived, so no longer RETIRING in the record's epoch) ends nothing; the device's
   * stays go on. With several ingest threads the ping that revived it may travel in another ring and be processed
   * before the record; without this check that device would get EXITs marked expired while it is live.
   */
  watchLifeWords(life: Int32Array): void {
    this.lifeWords = life;
  }

  /**
   * Makes every trigger written from now on note, in `marks` (memory.triggerMarks, TMARK_* cells), its ring (as set by
   * `useTriggerRing`) and the ring position just after it, so the ingest thread can tell when the dispatcher has taken
   * a device's triggers (see src/pipeline/compliance-path.ts).
   */
  markTriggersIn(marks: Int32Array): void {
    this.marks = marks;
  }

  /** The index among memory.triggerRings of the ring the next batches write to (for the trigger marks). */
  useTriggerRing(index: number): void {
    this.triggerRing = index;
  }

  /** Notes in the trigger marks that `slot`'s newest trigger is the one just written to `triggers`. */
  private markWritten(slot: number, triggers: SpscRing): void {
    const marks = this.marks;
    if (marks === null || this.triggerRing < 0) return;
    const m = slot * TMARK_STRIDE_I32;
    marks[m + TMARK_RING_I32] = this.triggerRing;
    marks[m + TMARK_END_I32] = (triggers.writeSeq() + triggers.pendingCount()) | 0;
  }

  /**
   * Makes batches account for each record as they go (src/pipeline/held-batch.ts): before a record's first trigger or
   * first change of its device's entries, the device's state is kept in the current group's pre-image block and the
   * watchdog cells name it (WDG_PRE_*); after the record, its triggers are published and WDG_HELD_DONE_I32 counts it.
   * A task that fails inside a batch then loses only the record it was in, and that device is put back as it was
   * before it.
   */
  keepRecordsIn(preImages: DevicePreImages, watchdog: Int32Array): void {
    this.preImages = preImages;
    this.heldCells = watchdog;
  }

  /** The group block (watchdog block index, which is its pre-image block) of the batches from now on. */
  useHeldBlock(block: number): void {
    this.heldBlock = block;
    this.heldBase = block * WDG_STRIDE_I32;
  }

  /**
   * Drill only: every trigger written for `slot` calls `fire` just after it is written, in the middle of the device's
   * record (its state part updated, the trigger claimed and not published). -1 disarms.
   */
  armDrill(slot: number, fire: (() => void) | null): void {
    this.drillSlot = slot;
    this.drill = fire;
  }

  /** Points the counters at another shard's block (the batch's shard). */
  useCounterBlock(counterBaseF64: number): void {
    this.counterBase = counterBaseF64;
  }

  /**
   * Processes `count` telemetry records of `telemetry` from absolute sequence `fromSeq` (consumer side; the caller
   * releases them), writing triggers into `triggers` and publishing them once at the end (unless `publish` is false:
   * the caller publishes). Blocks while the trigger ring is full. Returns the number of triggers written.
   * Allocation-free.
   */
  processBatch(telemetry: SpscRing, fromSeq: number, count: number, triggers: SpscRing, publish = true): number {
    const f64 = telemetry.f64;
    const i32 = telemetry.i32;
    let written = 0;
    // Records are accounted for one by one only when each one's triggers are published with it.
    const held = publish ? this.heldCells : null;
    const hb = this.heldBase;
    // What a record that failed in this engine's last batch had counted is not to be added to anything.
    this.recordCounts.fill(0);
    this.keepSlot = -1;
    this.entriesKept = true;
    if (held !== null) {
      held[hb + WDG_PRE_TRIG_RING_I32] = this.triggerRing;
      held[hb + WDG_HELD_DONE_I32] = 0;
    }
    for (let k = 0; k < count; k++) {
      const s = telemetry.slotOf((fromSeq + k) | 0);
      const bf = s * telemetry.strideF64;
      const bi = s * telemetry.strideI32;
      const rec = this.rec;
      rec[REC_LAT] = f64[bf + TEL_LAT_F64]!;
      rec[REC_LON] = f64[bf + TEL_LON_F64]!;
      rec[REC_EVENT_TIME_MS] = f64[bf + TEL_EVENT_TIME_MS_F64]!;
      rec[REC_ADMIT_TIME_NS] = f64[bf + TEL_ADMIT_TIME_NS_F64]!;
      const lane = i32[bi + TEL_LANE_I32]!;
      const slot = i32[bi + TEL_DEVICE_SLOT_I32]!;
      if (held !== null) {
        // Kept from the record's first change on (keepHead, keepEntries); nothing is kept for a slot out of range.
        this.keepSlot = slot >= 0 && slot < this.state.maxDevices ? slot : -1;
        this.entriesKept = this.keepSlot < 0;
      }
      let n: number;
      if (lane === TEL_LANE_EXPIRE) {
        // The epoch travels in a cell, like every double here.
        rec[REC_SEQ] = f64[bf + TEL_EXPIRE_EPOCH_F64]!;
        n = this.writeExpire(slot, triggers);
      } else {
        n = this.writeStep(slot, lane, triggers);
      }
      if (n > 0) this.addRecordCounts();
      written += n;
      // Why per record: a record's state update and its triggers go out together, so a task that fails later in the
      // batch has nothing of this record to undo (one store when the record wrote triggers, nothing otherwise).
      if (publish) triggers.publish();
      if (held !== null) {
        this.keepSlot = -1;
        this.entriesKept = true;
        // This order: a failure between the two stores finds no record in progress, never a finished one to undo.
        held[hb + WDG_PRE_SLOT_I32] = -1;
        held[hb + WDG_HELD_DONE_I32] = k + 1;
      }
    }
    return written;
  }

  /**
   * Before the accounted record's first trigger or first change of its device's entries (a no-op otherwise): keeps the
   * device's cells in the group's pre-image block, with where the record's triggers go, then names the slot in the
   * watchdog cells. Plain stores: a failure reaches the ingest thread through the pool's answer or the worker's exit,
   * both after every store of the worker (a terminated worker stops at a safepoint, never between two stores).
   */
  private keepHead(triggers: SpscRing): void {
    const slot = this.keepSlot;
    if (slot < 0) return;
    this.keepSlot = -1;
    this.preImages!.save(this.heldBlock, this.state, slot, this.marks);
    const held = this.heldCells!;
    held[this.heldBase + WDG_PRE_TRIG_AT_I32] = (triggers.writeSeq() + triggers.pendingCount()) | 0;
    held[this.heldBase + WDG_PRE_SLOT_I32] = slot;
  }

  /** Keeps the accounted record's device (cells, then entries) before the first change of one of its entries. */
  private keepEntries(slot: number, triggers: SpscRing): void {
    if (this.entriesKept) return;
    this.keepHead(triggers);
    this.entriesKept = true;
    this.preImages!.saveEntries(this.heldBlock, this.state, slot);
  }

  /** Processes one ping and publishes its triggers; returns how many were written. Allocation-free. */
  processPing(
    slot: number,
    lat: number,
    lon: number,
    eventTimeMs: number,
    admitTimeNs: number,
    lane: number,
    triggers: SpscRing,
  ): number {
    const rec = this.rec;
    rec[REC_LAT] = lat;
    rec[REC_LON] = lon;
    rec[REC_EVENT_TIME_MS] = eventTimeMs;
    rec[REC_ADMIT_TIME_NS] = admitTimeNs;
    this.recordCounts.fill(0);
    this.keepSlot = -1;
    this.entriesKept = true;
    const n = this.writeStep(slot, lane, triggers);
    if (n > 0) this.addRecordCounts();
    triggers.publish();
    return n;
  }

  /** Adds the record's counts (recordCounts) to the counter block and clears them. */
  private addRecordCounts(): void {
    const counts = this.recordCounts;
    const counters = this.counters;
    const cb = this.counterBase;
    for (let t = 0; t < TRIGGER_TYPE_COUNT; t++) {
      counters[cb + CNT_TRIGGERS_F64 + t]! += counts[CNT_TRIGGERS_F64 + t]!;
      counts[CNT_TRIGGERS_F64 + t] = 0;
    }
  }

  /**
   * `step` inside the device's write version (DEV_VERSION_I32), so that a checkpoint copying the state meanwhile sees
   * the update and copies the device again. A slot out of range is left to `step`, which counts it.
   */
  private writeStep(slot: number, lane: number, triggers: SpscRing): number {
    const state = this.state;
    if (!(slot >= 0 && slot < state.maxDevices)) return this.step(slot, lane, triggers);
    state.beginWrite(slot);
    // No try/finally (it keeps step from being inlined here): a throw leaves the version odd, which the device's next
    // update heals (beginWrite) and a checkpoint meanwhile treats as an update in progress.
    const n = this.step(slot, lane, triggers);
    state.endWrite(slot);
    return n;
  }

  /** `expire` inside the device's write version (see writeStep). */
  private writeExpire(slot: number, triggers: SpscRing): number {
    const state = this.state;
    if (!(slot >= 0 && slot < state.maxDevices)) return this.expire(slot, triggers);
    state.beginWrite(slot);
    const n = this.expire(slot, triggers);
    state.endWrite(slot);
    return n;
  }

  /**
   * An expiry record for `slot` (its life epoch in rec[REC_SEQ]): EXITs marked expired for the fences it is inside
   * (unless exitOnExpiry is off), state cleared (seq kept), then the retire marker; only the marker when the device
   * was revived since (see watchLifeWords). Returns the EXITs written.
   */
  private expire(slot: number, triggers: SpscRing): number {
    const rec = this.rec;
    const epoch = rec[REC_SEQ]! | 0;
    const counters = this.counters;
    const cb = this.counterBase;
    const state = this.state;
    if (!(slot >= 0 && slot < state.maxDevices)) {
      counters[cb + CNT_INVALID_F64]!++;
      return 0;
    }
    const store = this.store;
    const life = this.lifeWords;
    if (life !== null && Atomics.load(life, slot) !== ((epoch << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING)) {
      // Revived (or expired again, under a newer epoch whose record follows): nothing ends. The marker still goes to
      // the dispatcher, whose free of the slot then fails (the device is not RETIRING in this epoch).
      rec[REC_SEQ] = epoch;
      rec[REC_INSIDE_MS] = 0;
      this.makeRoom(triggers);
      writeTrigger(triggers, counters, cb, TRG_TYPE_RETIRE, store.generation, slot, 0, 0, rec);
      this.markWritten(slot, triggers);
      return 0;
    }
    const devF64 = state.devF64;
    const devI32 = state.devI32;
    const df = slot * DEV_STRIDE_F64;
    const di = slot * DEV_STRIDE_I32;
    const entryCount = devI32[di + DEV_ENTRY_COUNT_I32]!;
    let written = 0;
    // Entries of another generation name other fences (a reload that skipped the device): nothing to say about them.
    if (this.exitOnExpiry && entryCount > 0 && devI32[di + DEV_GENERATION_I32] === store.generation) {
      const lastMs = devF64[df + DEV_LAST_EVENT_MS_F64]!;
      rec[REC_LAT] = devF64[df + DEV_LAST_LAT_F64]!;
      rec[REC_LON] = devF64[df + DEV_LAST_LON_F64]!;
      rec[REC_EVENT_TIME_MS] = lastMs;
      const entryF64 = state.entryF64;
      const entryI32 = state.entryI32;
      for (let e = 0; e < entryCount; e++) {
        const ex = state.entryIndex(slot, e);
        // A pending ENTER never became a stay: no EXIT for it.
        if ((entryI32[ex * ENTRY_STRIDE_I32 + ENTRY_STATE_I32]! & EntryState.INSIDE) === 0) continue;
        rec[REC_INSIDE_MS] = lastMs - entryF64[ex * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64]!;
        this.emit(
          TriggerType.EXIT,
          slot,
          entryI32[ex * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!,
          TRG_LANE_EXPIRED,
          triggers,
        );
        written++;
      }
    }
    this.keepEntries(slot, triggers);
    devI32[di + DEV_ENTRY_COUNT_I32] = 0;
    Atomics.store(devI32, di + DEV_COMPLIANCE_COUNT_I32, 0);
    devI32[di + DEV_UNTRACKED_I32] = 0;
    devI32[di + DEV_HAS_LAST_I32] = 0;
    devF64[df + DEV_LAST_EVENT_MS_F64] = -Infinity;
    rec[REC_SEQ] = epoch;
    rec[REC_INSIDE_MS] = 0;
    this.makeRoom(triggers);
    writeTrigger(triggers, counters, cb, TRG_TYPE_RETIRE, store.generation, slot, 0, 0, rec);
    this.markWritten(slot, triggers);
    // Last, once nothing can wait any more: chunks given back before could be taken by another device before a
    // failure put this one back (src/pipeline/held-batch.ts), and counts of an expiry that did not happen.
    if (devI32[di + DEV_CHUNK_COUNT_I32] !== 0) state.trimEntryCapacity(slot, 0);
    counters[cb + CNT_EXPIRED_DEVICES_F64]!++;
    counters[cb + CNT_EXPIRY_EXITS_F64]! += written;
    return written;
  }

  /** One ping, read from this.rec; only integers and objects cross the call. */
  private step(slot: number, lane: number, triggers: SpscRing): number {
    const rec = this.rec;
    const lat = rec[REC_LAT]!;
    const lon = rec[REC_LON]!;
    const t = rec[REC_EVENT_TIME_MS]!;
    const counters = this.counters;
    const cb = this.counterBase;
    const state = this.state;
    // Range checks written so that NaN fails them.
    if (
      !(slot >= 0 && slot < state.maxDevices) ||
      !(lat >= -90 && lat <= 90) ||
      !(lon >= -180 && lon <= 180) ||
      !(t === t)
    ) {
      counters[cb + CNT_INVALID_F64]!++;
      return 0;
    }
    const devF64 = state.devF64;
    const devI32 = state.devI32;
    const df = slot * DEV_STRIDE_F64;
    const di = slot * DEV_STRIDE_I32;
    if (t < devF64[df + DEV_LAST_EVENT_MS_F64]!) {
      counters[cb + CNT_STALE_F64]!++;
      return 0;
    }
    const store = this.store;
    const generation = store.generation;
    if (devI32[di + DEV_GENERATION_I32] !== generation) {
      // Entries of another generation name other fence indices: a reload that skipped this device. Drop, count.
      if (devI32[di + DEV_ENTRY_COUNT_I32] !== 0) {
        counters[cb + CNT_GENERATION_MISMATCH_F64]!++;
        this.keepEntries(slot, triggers);
        // Its chunks are reused for the new entries, and the ones left over given back at the end of the record.
        devI32[di + DEV_ENTRY_COUNT_I32] = 0;
        Atomics.store(devI32, di + DEV_COMPLIANCE_COUNT_I32, 0);
      }
      devI32[di + DEV_UNTRACKED_I32] = 0;
      devI32[di + DEV_GENERATION_I32] = generation;
    }

    const stamp = this.nextStamp();
    const fenceF64 = store.fenceF64;
    const fenceI32 = store.fenceI32;
    const hasLast = devI32[di + DEV_HAS_LAST_I32] === 1;
    const lastLat = hasLast ? devF64[df + DEV_LAST_LAT_F64]! : lat;
    const lastLon = hasLast ? devF64[df + DEV_LAST_LON_F64]! : lon;

    // One query for the box spanning the previous and the current position serves both tests.
    const cands = this.candidates;
    const q = store.q;
    q[Q_X] = lon;
    q[Q_Y] = lat;
    q[Q_X0] = lastLon;
    q[Q_Y0] = lastLat;
    q[Q_MIN_X] = lon < lastLon ? lon : lastLon;
    q[Q_MIN_Y] = lat < lastLat ? lat : lastLat;
    q[Q_MAX_X] = lon > lastLon ? lon : lastLon;
    q[Q_MAX_Y] = lat > lastLat ? lat : lastLat;
    let n = store.candidatesInQueryBoxInto(cands);
    if (n > cands.length) n = cands.length;
    const insideStamp = this.insideStamp;
    const insideList = this.insideList;
    let insideCount = 0;
    for (let k = 0; k < n; k++) {
      const f = cands[k]!;
      const b = f * FENCE_STRIDE_F64;
      // Candidates from the segment box need not hold the point: a box test before the exact one.
      if (
        lon < fenceF64[b + FENCE_MIN_X_F64]! ||
        lon > fenceF64[b + FENCE_MAX_X_F64]! ||
        lat < fenceF64[b + FENCE_MIN_Y_F64]! ||
        lat > fenceF64[b + FENCE_MAX_Y_F64]!
      )
        continue;
      counters[cb + CNT_EXACT_TESTS_F64]!++;
      if (store.containsAt(f)) {
        insideStamp[f] = stamp;
        insideList[insideCount++] = f;
      }
    }

    // Existing entries first: their EXITs precede any ENTER of this ping.
    const entryF64 = state.entryF64;
    const entryI32 = state.entryI32;
    const entryStamp = this.entryStamp;
    let entryCount = devI32[di + DEV_ENTRY_COUNT_I32]!;
    const entryCountBefore = entryCount;
    let written = 0;
    for (let e = 0; e < entryCount;) {
      const ex = state.entryIndex(slot, e);
      const ei = ex * ENTRY_STRIDE_I32;
      const ef = ex * ENTRY_STRIDE_F64;
      const f = entryI32[ei + ENTRY_FENCE_I32]!;
      const b = f * FENCE_STRIDE_F64;
      entryStamp[f] = stamp;
      const stBefore = entryI32[ei + ENTRY_STATE_I32]!;
      let st = stBefore;
      let isIn = insideStamp[f] === stamp;
      let remove = false;
      if ((st & EntryState.INSIDE) !== 0) {
        const bufferM = fenceF64[b + FENCE_EXIT_BUFFER_M_F64]!;
        // Hysteresis in space: an inside device stays inside until it is more than bufferM out.
        if (!isIn && bufferM > 0) isIn = store.withinExitBufferAt(f);
        if (isIn) {
          st &= ~EntryState.PENDING_EXIT;
        } else {
          const minOutsideMs = fenceF64[b + FENCE_MIN_OUTSIDE_MS_F64]!;
          if (minOutsideMs > 0 && (st & EntryState.PENDING_EXIT) === 0) {
            st |= EntryState.PENDING_EXIT;
            this.keepEntries(slot, triggers);
            entryF64[ef + ENTRY_PENDING_MS_F64] = t;
          } else if (minOutsideMs <= 0 || t - entryF64[ef + ENTRY_PENDING_MS_F64]! >= minOutsideMs) {
            written++;
            rec[REC_INSIDE_MS] = t - entryF64[ef + ENTRY_SINCE_MS_F64]!;
            this.emit(TriggerType.EXIT, slot, f, lane, triggers);
            remove = true;
          }
        }
      } else if (!isIn) {
        // Left before minInsideMs elapsed: the stay never started, so no trigger (no EXIT without ENTER).
        remove = true;
      } else if (t - entryF64[ef + ENTRY_SINCE_MS_F64]! >= fenceF64[b + FENCE_MIN_INSIDE_MS_F64]!) {
        st = EntryState.INSIDE;
        written++;
        rec[REC_INSIDE_MS] = 0;
        this.emit(TriggerType.ENTER, slot, f, lane, triggers);
      }
      if (!remove && (st & (EntryState.INSIDE | EntryState.DWELL_FIRED)) === EntryState.INSIDE && isIn) {
        const insideMs = t - entryF64[ef + ENTRY_SINCE_MS_F64]!;
        // DWELL once per stay: the flag lives until the entry is removed at EXIT.
        if (insideMs >= fenceF64[b + FENCE_DWELL_MS_F64]!) {
          st |= EntryState.DWELL_FIRED;
          written++;
          rec[REC_INSIDE_MS] = insideMs;
          this.emit(TriggerType.DWELL, slot, f, lane, triggers);
        }
      }
      if (remove) {
        // Swap the last entry in; re-examine index e.
        this.keepEntries(slot, triggers);
        entryCount--;
        const lx = state.entryIndex(slot, entryCount);
        const li = lx * ENTRY_STRIDE_I32;
        const lf = lx * ENTRY_STRIDE_F64;
        entryI32[ei + ENTRY_FENCE_I32] = entryI32[li + ENTRY_FENCE_I32]!;
        entryI32[ei + ENTRY_STATE_I32] = entryI32[li + ENTRY_STATE_I32]!;
        entryF64[ef + ENTRY_SINCE_MS_F64] = entryF64[lf + ENTRY_SINCE_MS_F64]!;
        entryF64[ef + ENTRY_PENDING_MS_F64] = entryF64[lf + ENTRY_PENDING_MS_F64]!;
      } else {
        if (st !== stBefore) {
          this.keepEntries(slot, triggers);
          entryI32[ei + ENTRY_STATE_I32] = st;
        }
        e++;
      }
    }

    // New fences the ping is inside. A device that was inside fences it could not track (no free entry) takes none of
    // them up later while the stay goes on: an ENTER now would be late, and would be an ENTER the stay never had.
    const wasUntracked = hasLast && devI32[di + DEV_UNTRACKED_I32] === 1;
    let untracked = 0;
    for (let k = 0; k < insideCount; k++) {
      const f = insideList[k]!;
      if (entryStamp[f] === stamp) continue;
      if ((wasUntracked && store.containsPreviousAt(f)) || !state.ensureEntryCapacity(slot, entryCount + 1)) {
        counters[cb + CNT_FENCE_OVERFLOW_F64]!++;
        Atomics.add(store.untracked, f, 1);
        untracked = 1;
        continue;
      }
      const ex = state.entryIndex(slot, entryCount);
      const ei = ex * ENTRY_STRIDE_I32;
      const ef = ex * ENTRY_STRIDE_F64;
      entryCount++;
      entryI32[ei + ENTRY_FENCE_I32] = f;
      entryF64[ef + ENTRY_SINCE_MS_F64] = t;
      entryF64[ef + ENTRY_PENDING_MS_F64] = t;
      const b = f * FENCE_STRIDE_F64;
      if (fenceF64[b + FENCE_MIN_INSIDE_MS_F64]! > 0) {
        entryI32[ei + ENTRY_STATE_I32] = EntryState.PENDING_ENTER;
        continue;
      }
      let st: number = EntryState.INSIDE;
      written++;
      rec[REC_INSIDE_MS] = 0;
      this.emit(TriggerType.ENTER, slot, f, lane, triggers);
      if (fenceF64[b + FENCE_DWELL_MS_F64]! <= 0) {
        st |= EntryState.DWELL_FIRED;
        written++;
        rec[REC_INSIDE_MS] = 0;
        this.emit(TriggerType.DWELL, slot, f, lane, triggers);
      }
      entryI32[ei + ENTRY_STATE_I32] = st;
    }

    // CROSS: both pings outside a fence whose boundary the segment between them touches. The straight segment is a
    // guess at the path: not made when the move is implausible (faster than crossMaxSpeedMps, or a gap longer than
    // crossMaxGapMs), and at most crossMaxPerDevicePerSec CROSS triggers per device per second of its pings' own
    // times (not the router's clock: a stream read again, after a restart or a takeover, at whatever pace, gives the
    // same triggers under the same seqs).
    if (hasLast && (lat !== lastLat || lon !== lastLon)) {
      const gapMs = t - devF64[df + DEV_LAST_EVENT_MS_F64]!;
      const rules = this.crossRules;
      let plausible = true;
      if (rules[CROSS_MAX_GAP_MS]! > 0 && gapMs > rules[CROSS_MAX_GAP_MS]!) plausible = false;
      if (plausible && rules[CROSS_MAX_SPEED_MPS]! > 0) {
        // The local equirectangular projection every distance of the router uses.
        const dyM = (lat - lastLat) * M_PER_DEG;
        const dxM = (lon - lastLon) * M_PER_DEG * Math.cos(((lat + lastLat) / 2) * RAD_PER_DEG);
        const maxM = (rules[CROSS_MAX_SPEED_MPS]! * gapMs) / 1000;
        if (dxM * dxM + dyM * dyM > maxM * maxM) plausible = false;
      }
      if (!plausible) {
        counters[cb + CNT_IMPLAUSIBLE_SEGMENTS_F64]!++;
      } else {
        const budget = rules[CROSS_MAX_PER_DEVICE_PER_SEC]!;
        if (budget > 0 && !(t - devF64[df + DEV_CROSS_WINDOW_MS_F64]! < 1000)) {
          this.keepHead(triggers);
          devF64[df + DEV_CROSS_WINDOW_MS_F64] = t;
          devI32[di + DEV_CROSS_COUNT_I32] = 0;
        }
        for (let k = 0; k < n; k++) {
          const f = cands[k]!;
          // Inside now, or inside / pending at the previous ping: not a pass-through.
          if (insideStamp[f] === stamp || entryStamp[f] === stamp) continue;
          // Leaving a fence it was inside untracked: nothing is said about that fence.
          if (wasUntracked && store.containsPreviousAt(f)) continue;
          if (store.segmentTouchesAt(f)) {
            if (budget > 0 && devI32[di + DEV_CROSS_COUNT_I32]! >= budget) {
              counters[cb + CNT_CROSS_OVER_BUDGET_F64]!++;
              continue;
            }
            // Kept before the budget is spent: a record that fails at this CROSS is put back with its budget.
            this.keepHead(triggers);
            devI32[di + DEV_CROSS_COUNT_I32]!++;
            written++;
            rec[REC_INSIDE_MS] = 0;
            this.emit(TriggerType.CROSS, slot, f, lane, triggers);
          }
        }
      }
    }

    devI32[di + DEV_ENTRY_COUNT_I32] = entryCount;
    devI32[di + DEV_UNTRACKED_I32] = untracked;
    if (devI32[di + DEV_CHUNK_COUNT_I32] !== 0) state.trimEntryCapacity(slot, entryCount);
    if (entryCount !== 0 || entryCountBefore !== 0) {
      publishComplianceCount(state, slot, fenceI32, FENCE_STRIDE_I32, FENCE_FLAGS_I32, FENCE_FLAG_COMPLIANCE);
    }
    devF64[df + DEV_LAST_EVENT_MS_F64] = t;
    devF64[df + DEV_LAST_LAT_F64] = lat;
    devF64[df + DEV_LAST_LON_F64] = lon;
    devI32[di + DEV_HAS_LAST_I32] = 1;
    // Counted once done: a record that fails part way is counted lost instead (src/pipeline/held-batch.ts).
    counters[cb + CNT_PROCESSED_F64]!++;
    return written;
  }

  /**
   * Writes one trigger for the ping in this.rec (REC_INSIDE_MS set by the caller) with the device's next sequence.
   * The trigger's lane is its fence's class (COMPLIANCE for a compliance fence, TRANSITION otherwise), not the ping's:
   * every trigger of one (device, fence) then shares a dispatch priority, so none of them can overtake another in a
   * downstream queue (an ENTER from a TRANSITION ping and its EXIT from a COMPLIANCE ping would otherwise swap).
   * `pingLane`'s TRG_LANE_EXPIRED, set only by expire(), marks the trigger expired.
   */
  private emit(type: number, slot: number, fenceIndex: number, pingLane: number, triggers: SpscRing): void {
    this.keepHead(triggers);
    this.makeRoom(triggers);
    const rec = this.rec;
    rec[REC_SEQ] = ++this.state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!;
    const lane = this.store.isCompliance(fenceIndex) ? LANE_COMPLIANCE : LANE_TRANSITION;
    // A ping's lane is at most 2; TRG_LANE_EXPIRED comes only from expire().
    writeTrigger(
      triggers,
      this.recordCounts,
      0,
      type,
      this.store.generation,
      slot,
      fenceIndex,
      lane | (pingLane & TRG_LANE_EXPIRED),
      rec,
    );
    this.markWritten(slot, triggers);
    if (slot === this.drillSlot) this.drill!();
  }

  /**
   * Before a record writes into a full trigger ring: waits for the dispatcher to take published records, so the
   * record's own triggers stay unpublished until it is done (a record that fails part way must have published
   * nothing); only when they alone fill the ring are they published first (the record could not go on otherwise).
   * A scratch ring is left to writeTrigger.
   */
  private makeRoom(triggers: SpscRing): void {
    if (triggers.scratch || triggers.freeSlots(1) >= 1) return;
    if (triggers.depth() === 0) triggers.publish();
    waitForTriggerRoom(triggers, this.counters, this.counterBase);
  }

  private nextStamp(): number {
    if (this.stamp === 0x7fffffff) {
      // Wrap: clear both stamp arrays so no stale cell equals a reused stamp.
      this.insideStamp.fill(0);
      this.entryStamp.fill(0);
      this.stamp = 0;
    }
    return ++this.stamp;
  }
}
