/**
 * Containment pool worker (a Piscina worker, one of `poolSize`): runs one task = the shards of one shard group.
 *
 * A task carries ring positions, never records: (rings, fromSeqs, batch size, time limits, generation, and the
 * store only when this worker asked for it). At most one task per group is in flight (the ingest thread guarantees
 * it), so this worker is the consumer of those shards' telemetry rings (one per ingest thread) and the producer of their trigger rings for
 * the task's duration; the hand-over between workers goes through the pool's messages. Being the consumer, the worker
 * takes the records published while the task runs and, when its shards are empty, waits for more (up to the task's
 * linger), so under steady load a group's task does not end at all and a shard's records never wait for a round trip
 * through the ingest thread's event loop; the task answers with the number of records it consumed, early when the
 * task's control cell says so (pause for a reload, drain).
 * Before the router starts, each worker runs `warmUp` (warm-up.ts): the engine over synthetic pings on scratch state.
 * The worker opens the rings, counters and device state once (from workerData) and each fence-store generation once
 * (cached), runs ContainmentEngine.processBatch, releases the telemetry records and rings the dispatcher's doorbell.
 * Before each batch it publishes a heartbeat in its group's watchdog cells (WDG_*: the batch it holds, then a batch
 * count), which the ingest thread's watchdog reads to tell a hung task from a busy one (ShardScheduler.checkStalls).
 */
import { threadId, workerData } from 'node:worker_threads';
import { ContainmentEngine } from '../fences/engine.js';
import { DeviceState } from '../fences/device-state.js';
import { DevicePreImages } from '../fences/pre-image.js';
import { FenceStore } from '../fences/store.js';
import { DeviceIdReader } from '../ingest/device-registry.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import {
  CNT_BLOCK_F64,
  CNT_PARKED_NS_F64,
  complianceCounterBlock,
  complianceTriggerRingIndex,
  RingKind,
  TEL_DEVICE_SLOT_I32,
  WDG_DRILL_TRIGGERS_I32,
  WDG_HELD_COUNT_I32,
  WDG_HELD_DONE_I32,
  WDG_HELD_RING_I32,
  WDG_PROGRESS_I32,
  WDG_STRIDE_I32,
  WDG_THREAD_ID_I32,
} from '../shm/layout.js';
import { nowNs } from '../shm/clock.js';
import { SpscRing } from '../shm/ring.js';
import { warmContainment, type WarmUpTask } from './warm-up.js';
import { BatchSizer } from './batch-sizing.js';
import {
  CONTROL_RETURN_NOW,
  CONTROL_RETURN_WHEN_EMPTY,
  NEEDS_STORE,
  type ContainmentTask,
  type ContainmentWorkerData,
} from './containment-task.js';
import {
  claimPoolBlock,
  startThreadRuntimeReporter,
  THREAD_RUNTIME_INTERVAL_MS,
  type ThreadRuntimeReporter,
} from './thread-runtime.js';

/** Generations kept open per worker (the current one and the one a reload replaced). */
const KEPT_GENERATIONS = 2;

const data = workerData as ContainmentWorkerData | null;
/** Every ring a task may name: the shard rings (telemetryRingIndex order), then the COMPLIANCE rings. */
let telemetry: SpscRing[] = [];
/** Shards of the router (the telemetry ring of index r serves shard r % shardCount). */
let shardCount = 1;
let triggers: SpscRing[] = [];
let pipeline: PipelineRegion | null = null;
let counters: Float64Array = new Float64Array(0);
let state: DeviceState | null = null;
let watchdog: Int32Array = new Int32Array(0);
/** memory.triggerMarks: where each device's newest trigger went (the engine writes them; compliance-path.ts reads). */
let triggerMarks: Int32Array | null = null;
let idReader: DeviceIdReader | null = null;
/** memory.preImages: each group's device pre-image (see ContainmentEngine.keepRecordsIn). */
let preImages: DevicePreImages | null = null;
/** This worker's runtime reports: on its interval between tasks, and from the task loop while a task runs long. */
let runtime: ThreadRuntimeReporter | null = null;
/** When the task loop reports next, ns (a cell: no double is boxed per pass). */
const nextReportNs = new Float64Array(1);
if (data !== null && data !== undefined && data.memory !== undefined) {
  const m = data.memory;
  telemetry = [...m.telemetryRings, ...m.complianceRings].map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  shardCount = m.shards;
  triggers = m.triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER));
  pipeline = PipelineRegion.wrap(m.pipeline);
  counters = new Float64Array(m.containmentCounters);
  state = DeviceState.open(m.deviceState);
  triggerMarks = new Int32Array(m.triggerMarks);
  watchdog = new Int32Array(m.watchdog);
  preImages = new DevicePreImages(m.preImages, m.shards + 1, m.deviceState.maxFencesPerDevice);
  idReader = new DeviceIdReader(m.idTable);
  const block = claimPoolBlock(m.threadRuntime, Date.now());
  if (block >= 0) runtime = startThreadRuntimeReporter(m.threadRuntime, block);
}

/** Environment variable of the drill hook (see `parseFaultInjection`). */
const FAULT_INJECT_ENV = 'GEOFENCE_FAULT_INJECT';
/** Drill hook mode: off (the production case). */
const FAULT_NONE = 0;
/** Hang for ever (parked, no CPU burnt): a hung task, for the watchdog drill. */
const FAULT_HANG = 1;
/** Throw (a failed task, for the failure-path drill). */
const FAULT_THROW = 2;
/** End the worker thread mid-batch (`process.exit` in a worker ends that thread only): a worker lost mid-task. */
const FAULT_EXIT = 3;
/**
 * Process the whole batch (device state updated, triggers written) and wait before publishing its triggers: a worker
 * descheduled between a batch's state updates and their publish, for the checkpoint hand-off drill.
 */
const FAULT_STALL = 4;

/** The drill hook's setting (see `parseFaultInjection`). */
interface FaultInjection {
  mode: number;
  /** The armed device: its numeric id, or its string id. */
  deviceId: number | string;
  /** FAULT_STALL: how long the batch's triggers wait, ms. */
  stallMs: number;
  /** The others: which of the device's triggers (1: its first) the drill fires at. */
  nth: number;
}

/**
 * Parses the drill hook's value: `hang-on-device:<id>`, `throw-on-device:<id>`, `exit-on-device:<id>` or
 * `stall-on-device:<id>:<ms>` (an id of digits names a numeric device id, any other a string id). Returns null when
 * the value is absent or empty (the production case); throws on anything else, so a mistyped drill does not pass
 * silently.
 */
function parseFaultInjection(value: string | undefined): FaultInjection | null {
  if (value === undefined || value === '') return null;
  const m = /^(?:(hang|throw|exit)-on-device:([^:#]+)(?:#([1-9]\d*))?|stall-on-device:([^:]+):(\d+))$/.exec(value);
  if (m === null) {
    throw new Error(
      `${FAULT_INJECT_ENV} must be hang-on-device:<id>[#<n>], throw-on-device:<id>[#<n>], exit-on-device:<id>[#<n>] or stall-on-device:<id>:<ms>, got ${JSON.stringify(value)}`,
    );
  }
  const id = m[2] ?? m[4]!;
  return {
    mode: m[1] === undefined ? FAULT_STALL : m[1] === 'hang' ? FAULT_HANG : m[1] === 'throw' ? FAULT_THROW : FAULT_EXIT,
    deviceId: /^-?\d+$/.test(id) ? Number(id) : id,
    stallMs: m[5] === undefined ? 0 : Number(m[5]),
    nth: m[3] === undefined ? 1 : Number(m[3]),
  };
}

/**
 * DRILL HOOK, off by default. `GEOFENCE_FAULT_INJECT` (read once, when the worker starts; pool workers inherit the
 * process environment) makes the first trigger of that device (or its nth, with `#<n>`), counted over the pool, hang
 * (until the worker is terminated), throw, or end the worker thread, in the middle of the device's record (the trigger
 * written, not published, the device's state part updated): a real hang or failure inside a real pool worker, for the
 * watchdog and failure-path tests. It fires once per router (a cell of the watchdog region counts the device's
 * triggers). The ingest thread keeps the records of the batch done before it, drops that record and puts its device
 * back (held-batch.ts), and leaves the records after it to the next task. The stall processes the whole batch and
 * holds its triggers back for the time given before publishing them (those the trigger ring has room for; nothing is lost unless the stall reaches
 * `containmentStallMs`, when the watchdog drops the batch). Unset, the hot path pays one integer test per batch.
 */
const fault = parseFaultInjection(process.env[FAULT_INJECT_ENV]);
let faultMode = fault === null ? FAULT_NONE : fault.mode;
const faultDeviceId = fault === null ? 0 : fault.deviceId;

/** Drill only: index in the batch of the armed device's first ping, or -1. Reads the id table per record. */
function faultIndexIn(tel: SpscRing, fromSeq: number, count: number): number {
  const reader = idReader!;
  for (let k = 0; k < count; k++) {
    const slot = tel.i32[tel.slotOf((fromSeq + k) | 0) * tel.strideI32 + TEL_DEVICE_SLOT_I32]!;
    if (slot < 0) continue;
    if (typeof faultDeviceId === 'number') {
      if (reader.isNumeric(slot) && reader.numericId(slot) === faultDeviceId) return k;
    } else if (reader.deviceIdOf(slot) === faultDeviceId) return k;
  }
  return -1;
}

/**
 * Drill only: arms the engine to hang, throw or end the thread at the armed device's nth trigger, counted over the
 * pool (the device's record half done: the trigger written and not published; the batch then runs as usual and fails
 * there), and returns -1; until then, the device's later batches arm it again. The stall processes the whole
 * batch unaccounted for (WDG_HELD_DONE_I32 at -1: a failure drops it whole), waits, publishes its triggers and
 * returns how many there were.
 */
function armFault(
  e: ContainmentEngine,
  tel: SpscRing,
  fromSeq: number,
  at: number,
  count: number,
  trig: SpscRing,
  wb: number,
): number {
  const mode = faultMode;
  // Why Atomics.wait on a private cell: a wait that burns no CPU (for ever: only worker termination ends it).
  const never = new Int32Array(new SharedArrayBuffer(4));
  if (mode === FAULT_STALL) {
    faultMode = FAULT_NONE;
    watchdog[wb + WDG_HELD_DONE_I32] = -1;
    const written = e.processBatch(tel, fromSeq, count, trig, false);
    Atomics.wait(never, 0, 0, fault!.stallMs);
    trig.publish();
    return written;
  }
  const slot = tel.i32[tel.slotOf((fromSeq + at) | 0) * tel.strideI32 + TEL_DEVICE_SLOT_I32]!;
  e.armDrill(slot, () => {
    // Once per router, at the device's nth trigger counted over every worker (a replacement worker reads the
    // variable again, and the device may send again).
    const n = Atomics.add(watchdog, WDG_DRILL_TRIGGERS_I32, 1) + 1;
    if (n !== fault!.nth) return;
    faultMode = FAULT_NONE;
    if (mode === FAULT_THROW) throw new Error(`drill: ${FAULT_INJECT_ENV} threw on device ${faultDeviceId}`);
    if (mode === FAULT_EXIT) process.exit(1);
    for (;;) Atomics.wait(never, 0, 0);
  });
  return -1;
}
/** Sizes this worker's batches by time from its measured cost per ping (see batch-sizing.ts). */
const sizer = new BatchSizer();
/** Within a pass, the dispatcher is rung after a batch with triggers once this long has passed since the last ring, ns. */
const RING_EVERY_NS = 1e6;

const stores = new Map<number, FenceStore>();
let engine: ContainmentEngine | null = null;
if (state !== null && data !== null && data !== undefined && data.fences !== undefined) {
  // Open the first generation now: the first batch should not pay for it.
  const first = FenceStore.open(data.fences);
  stores.set(first.generation, first);
  engine = newEngine(first);
}

/** An engine over `store` whose expiry records read the devices' life words. */
function newEngine(store: FenceStore): ContainmentEngine {
  const e = new ContainmentEngine(store, state!, counters, 0, data?.engine ?? {});
  if (idReader !== null) e.watchLifeWords(idReader.lifeWords);
  if (triggerMarks !== null) e.markTriggersIn(triggerMarks);
  if (preImages !== null) e.keepRecordsIn(preImages, watchdog);
  return e;
}

function storeOf(task: ContainmentTask): FenceStore | null {
  let store = stores.get(task.generation);
  if (store === undefined) {
    if (task.fences === null) return null;
    store = FenceStore.open(task.fences);
    stores.set(task.generation, store);
    // Drop the oldest generations: a batch never runs on one older than the store a reload replaced.
    while (stores.size > KEPT_GENERATIONS) {
      let oldest = Infinity;
      for (const g of stores.keys()) if (g < oldest) oldest = g;
      stores.delete(oldest);
    }
  }
  return store;
}

/**
 * Runs one task: passes over the group's rings round-robin, a batch of at most `batchRecords` per ring per pass.
 * When a pass finds every shard empty it waits for more (parked on one ring at a time, `parkStepMs` each) for up to
 * `lingerMs`, so a steady stream keeps one task running instead of paying a round trip through the ingest thread per
 * read chunk; it returns after that, or once `maxTaskMs` has passed. Returns the telemetry records consumed
 * (released), or NEEDS_STORE (having consumed nothing) when it needs the generation's store sent along.
 */
// Piscina calls it by the module's default export.
// ts-unused-exports:disable-next-line
export default function runContainmentTask(task: ContainmentTask): number {
  if (state === null || pipeline === null) throw new Error('containment worker started without workerData');
  const store = storeOf(task);
  if (store === null) return NEEDS_STORE;
  if (engine === null) engine = newEngine(store);
  else if (engine.currentStore !== store) engine.useStore(store);
  const rings = task.rings;
  // A task starts with nothing claimed: a batch of this worker that threw left its trigger claims unpublished, and a
  // later batch must never publish them (they would reach the dispatcher after a device's newer triggers).
  for (let t = 0; t < triggers.length; t++) triggers[t]!.discardPending();
  // Nor is a drill armed by a batch that threw still armed.
  engine.armDrill(-1, null);
  for (let i = 0; i < rings.length; i++) {
    const tel = telemetry[rings[i]!]!;
    if (tel.readSeq() !== task.fromSeqs[i]) {
      throw new Error(
        `telemetry ring ${rings[i]}: task starts at ${task.fromSeqs[i]} but the ring's read sequence is ${tel.readSeq()}`,
      );
    }
  }
  // Group g's cells are in shard g's block, and ring g (ingest thread 0's ring of shard g) is the group's first ring
  // (ShardScheduler's grouping); the COMPLIANCE group's are its own blocks.
  const compliance = task.compliance;
  const wb = (compliance ? shardCount : rings[0]! % shardCount) * WDG_STRIDE_I32;
  const ownBlock = compliance ? complianceCounterBlock(shardCount) : rings[0]! % shardCount;
  const parkedCell = ownBlock * CNT_BLOCK_F64 + CNT_PARKED_NS_F64;
  const complianceTriggers = compliance ? complianceTriggerRingIndex(shardCount) : -1;
  Atomics.store(watchdog, wb + WDG_THREAD_ID_I32, threadId);
  engine.useHeldBlock(wb / WDG_STRIDE_I32);
  const startNs = nowNs();
  const deadlineNs = startNs + task.maxTaskMs * 1e6;
  const lingerNs = task.lingerMs * 1e6;
  const control = new Int32Array(task.control);
  let idleSinceNs = -1;
  let parkOn = 0;
  let consumed = 0;
  let lastRingNs = startNs;
  // Triggers written since the dispatcher was last rung.
  let unrung = 0;
  for (;;) {
    let pass = 0;
    // One clock read a batch: a batch's end is the next one's start, and the last one's end is the pass's.
    let clockNs = nowNs();
    for (let i = 0; i < rings.length; i++) {
      const r = rings[i]!;
      const tel = telemetry[r]!;
      const available = tel.available();
      // Why per ring: records published since the last pass are taken here, not after a round trip to the ingest thread.
      if (available === 0) continue;
      // One ring per (ingest thread, shard): each ring is in its producer's order, and a device whose pings reach
      // two ingest threads (two connections) has the older ones recognised as stale by event time (the engine).
      // The COMPLIANCE group's pings are of any shard: one counter block and one trigger ring of its own.
      const block = compliance ? ownBlock : r % shardCount;
      const trig = compliance ? complianceTriggers : r % shardCount;
      // Why sized by time: with 8 shards of 512 records at 40 µs a ping (a dense city), one pass took 160 ms, and a
      // record published just after its shard's turn waited for all of it, COMPLIANCE pings too.
      const count = sizer.count(available, task.batchRecords, task.batchBudgetNs);
      engine.useCounterBlock(block * CNT_BLOCK_F64);
      engine.useTriggerRing(trig);
      // Heartbeat: say which batch is held before touching it, then count the batch (the store the watchdog reads).
      watchdog[wb + WDG_HELD_RING_I32] = r;
      watchdog[wb + WDG_HELD_COUNT_I32] = count;
      watchdog[wb + WDG_HELD_DONE_I32] = 0;
      Atomics.store(watchdog, wb + WDG_PROGRESS_I32, (watchdog[wb + WDG_PROGRESS_I32]! + 1) | 0);
      let drilled = -1;
      if (faultMode !== FAULT_NONE) {
        const at = faultIndexIn(tel, tel.readSeq(), count);
        if (at >= 0) drilled = armFault(engine, tel, tel.readSeq(), at, count, triggers[trig]!, wb);
      }
      const batchStartNs = clockNs;
      // A throw ends the task: the ingest thread keeps the records done, drops the one it was in (counted lost, its
      // device put back as before it) and leaves the rest for the next task, which drops this one's claims.
      const written = drilled >= 0 ? drilled : engine.processBatch(tel, tel.readSeq(), count, triggers[trig]!);
      engine.armDrill(-1, null);
      tel.release(count);
      watchdog[wb + WDG_HELD_RING_I32] = -1;
      const batchEndNs = nowNs();
      clockNs = batchEndNs;
      sizer.note(batchEndNs - batchStartNs, count);
      pass += count;
      unrung += written;
      // Ring at most once a millisecond within a pass (each ring may be a futex wake of the dispatcher).
      if (unrung > 0 && batchEndNs - lastRingNs >= RING_EVERY_NS) {
        pipeline.ringDispatcher();
        lastRingNs = batchEndNs;
        unrung = 0;
      }
    }
    const now = clockNs;
    if (unrung > 0) {
      pipeline.ringDispatcher();
      lastRingNs = now;
      unrung = 0;
    }
    consumed += pass;
    if (now >= deadlineNs) return consumed;
    // A task can run for seconds under load; the interval cannot fire inside it.
    if (now >= nextReportNs[0]! && runtime !== null) {
      nextReportNs[0] = now + THREAD_RUNTIME_INTERVAL_MS * 1e6;
      runtime.report();
    }
    const say = Atomics.load(control, 0);
    // Why a control cell: pause and drain must not wait out the linger, and must not go through a message.
    if (say === CONTROL_RETURN_NOW || (say === CONTROL_RETURN_WHEN_EMPTY && pass === 0)) return consumed;
    if (pass > 0) {
      idleSinceNs = -1;
      continue;
    }
    if (idleSinceNs < 0) idleSinceNs = now;
    if (now - idleSinceNs >= lingerNs) return consumed;
    // Park on the rings in turn: with devices spread by hash, the next read chunk publishes to each of them.
    telemetry[rings[parkOn]!]!.waitForData(task.parkStepMs, 0);
    // The time parked (CNT_PARKED_NS_F64 in the group's counter block: /metrics shows how much the workers wait).
    counters[parkedCell] = counters[parkedCell]! + (nowNs() - now);
    parkOn = parkOn + 1 === rings.length ? 0 : parkOn + 1;
  }
}

/**
 * Warms this worker before the router starts (a named task, `{ name: 'warmUp' }`): runs the containment engine over
 * synthetic pings on scratch device state and rings (warm-up.ts), against the first fence generation, which the
 * worker opened when it loaded. Returns the pings processed.
 */
// Piscina calls it by name (`{ name: 'warmUp' }`).
// ts-unused-exports:disable-next-line
export function warmUp(task: WarmUpTask): number {
  let first: FenceStore | undefined;
  for (const s of stores.values()) if (first === undefined || s.generation < first.generation) first = s;
  return first === undefined ? 0 : warmContainment(first, task);
}
