/**
 * The dispatcher thread (a worker_threads Worker): reads every trigger ring (one per shard, the main thread's control
 * ring for reload EXITs, and the COMPLIANCE ring's worker's, read first in each pass), offers each record to the
 * Dispatcher, pumps, and releases the records.
 *
 * It waits on the dispatcher doorbell with Atomics.waitAsync (it needs its event loop for HTTP and the callback
 * bridge): the loop reads the doorbell, scans the rings, and when it found nothing raises the sleeping flag, re-checks
 * the doorbell, and waits for it to change or for a short timeout (the control loop's timers: expiry, flushes,
 * Retry-After pauses). Producers notify only when the flag is up.
 *
 * The loop never stops on an error: the durable files report their own failures (counted, alarmed by the
 * Dispatcher), and anything else thrown by a pass is logged as an error (at most one line every ERROR_LOG_INTERVAL_MS,
 * with the count) and the loop goes on. A drain or close waits for the trigger rings to empty at most its deadline.
 */
import { LOOKUP_ONLY_STORE } from './store-views.js';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { Dispatcher, OFFER_BLOCKED } from '../dispatch/dispatcher.js';
import { DeviceIdReader } from '../ingest/device-registry.js';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { nowNs } from '../shm/clock.js';
import {
  TRG_DEVICE_SLOT_I32,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
  TRG_TYPE_RETIRE,
  complianceTriggerRingIndex,
  CTL_DISPATCH_DOORBELL_I32,
  CTL_DISPATCH_SLEEPING_I32,
  DISP_TRIGGERS_OFFERED_F64,
  DISP_TRIGGERS_UNROUTED_F64,
  PST_HELD_BASE_F64,
  PST_REPLAY_HELD_BASE_F64,
  PST_TAKEN_BASE_F64,
  RingKind,
  RT_THREAD_DISPATCHER,
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import {
  buildDownstreams,
  CallbackBridge,
  heldTimeRecorder,
  PipelineNamer,
  takenTimeRecorder,
  type DownstreamSpec,
  type NamesOnlyGeneration,
} from './dispatch-wiring.js';
import type { PipelineMemory } from './memory.js';
import { armThreadDrills, startThreadRuntimeReporter } from './thread-runtime.js';
import { SlotRetirer } from './slot-retirer.js';
import type { DispatcherRequest, ThreadEvent } from './messages.js';

/** What the dispatcher thread needs (structured-clone safe; the bridge port is transferred). */
export interface DispatcherThreadData {
  /** The router's shared regions. */
  memory: PipelineMemory;
  /** The first fence-store generation. */
  fences: FenceStoreDescriptor;
  /** Downstreams. */
  downstreams: DownstreamSpec[];
  /** Directory of the downstreams' durable files (backlog logs, dead-letter files, pending files). */
  downstreamsDir: string;
  /** Device slots. */
  maxDevices: number;
  /** Dead-letter ring records. */
  deadLetterCapacityRecords: number;
  /** Fences a restored checkpoint named that the fences file no longer has (their EXITs name them). */
  namesOnly: NamesOnlyGeneration | null;
  /** See DispatcherOptions.replayFloors (null: none). */
  replayFloors: Float64Array | null;
  /** This run's id in durable trigger records (different from every earlier run's on the same state directory). */
  runId: number;
  /** Port of the callback bridge (null when no downstream is a callback). */
  bridgePort: MessagePort | null;
}

/** Atomics.waitAsync (Node >= 16; typed in lib es2024, newer than this project's lib setting). */
type WaitAsync = (
  typedArray: Int32Array,
  index: number,
  value: number,
  timeoutMs: number,
) => { async: false; value: 'not-equal' | 'timed-out' } | { async: true; value: Promise<'ok' | 'timed-out'> };
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

/** Wait when the dispatcher has work pending (timers of the control loop), ms. */
const BUSY_WAIT_MS = 2;
/** Wait when idle, ms (the doorbell wakes it sooner). */
const IDLE_WAIT_MS = 50;
/** At most one line about a failed pass this often, ms. */
const ERROR_LOG_INTERVAL_MS = 10_000;
/** Store generations kept for naming (the current one and the ones triggers in flight may still name). */
const KEPT_GENERATIONS = 8;
/** Retire markers are checked at most this often while triggers flow, ns. */
const RETIRE_PASS_NS = 20e6;

function post(event: ThreadEvent): void {
  parentPort!.postMessage(event);
}

async function main(): Promise<void> {
  const d = workerData as DispatcherThreadData;
  const m = d.memory;
  startThreadRuntimeReporter(m.threadRuntime, RT_THREAD_DISPATCHER);
  armThreadDrills('dispatcher');
  const pipeline = PipelineRegion.wrap(m.pipeline);
  const rings = m.triggerRings.map((b) => SpscRing.wrap(b, RingKind.TRIGGER));
  // Read only, by 'handed-on': how far containment has processed (and published the triggers of) each ring's pings.
  const telemetry = [...m.telemetryRings, ...m.complianceRings].map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  // The order a pass reads the rings in: the COMPLIANCE group's first (its triggers reach the sinks at the pass's
  // pump, not after the shards' backlog is offered). Safe in any order: a device's triggers are in one ring at a time
  // (see src/pipeline/compliance-path.ts).
  const scanOrder = rings.map((_, r) => r);
  if (m.complianceRings.length > 0) {
    const c = complianceTriggerRingIndex(m.shards);
    scanOrder.splice(c, 1);
    scanOrder.unshift(c);
  }
  const statsCells = new Float64Array(m.stats);
  const namer = new PipelineNamer(m.idTable);
  let currentGeneration = d.fences.generation;
  namer.stores.set(currentGeneration, FenceStore.open(d.fences, LOOKUP_ONLY_STORE));
  if (d.namesOnly !== null) namer.namesOnly.set(d.namesOnly.generation, d.namesOnly);
  const bridge = d.bridgePort === null ? null : new CallbackBridge(d.bridgePort);
  const metrics = new Float64Array(m.dispatchMetrics);
  // Devices of earlier runs were registered before this thread started: their slots by id, for durable records.
  const ids = new DeviceIdReader(m.idTable);
  const slotById = new Map<string | number, number>();
  for (let slot = 0, n = ids.deviceCount(); slot < n; slot++) slotById.set(ids.deviceIdOf(slot)!, slot);
  const dispatcher =
    d.downstreams.length === 0
      ? null
      : new Dispatcher({
          downstreams: buildDownstreams(d.downstreams, bridge),
          stateDir: d.downstreamsDir,
          namer,
          maxDevices: d.maxDevices,
          deviceSlotOf: (id) => slotById.get(id) ?? -1,
          runId: d.runId,
          deadLetterCapacityRecords: d.deadLetterCapacityRecords,
          flushBatchRecords: Math.min(256, d.deadLetterCapacityRecords),
          metricsBuffer: m.dispatchMetrics,
          leaseGate: m.leaseGate,
          ...(d.replayFloors === null ? {} : { replayFloors: d.replayFloors }),
          onHeld: heldTimeRecorder(statsCells, PST_HELD_BASE_F64, PST_REPLAY_HELD_BASE_F64, metrics),
          onTaken: takenTimeRecorder(statsCells, PST_TAKEN_BASE_F64),
          log: (line) => post({ type: 'log', line }),
          alarm: (line) => post({ type: 'log', line, level: 'error' }),
        });
  // With no downstream every trigger is unrouted: count it in the dispatcher-wide cells (block 0).
  let unrouted = 0;

  /** Set by a scan that left records in a ring because a downstream could take nothing more. */
  let blocked = false;

  // Expired devices: their slots are freed once every downstream has settled their triggers (see slot-retirer.ts).
  const retirer = new SlotRetirer(d.maxDevices, ids);
  const settled = (slot: number): boolean => dispatcher === null || dispatcher.deviceSettled(slot);
  const forget = (id: string | number | undefined): void => {
    if (id !== undefined) slotById.delete(id);
  };
  /** Last retire pass, ns (a cell: no double is boxed per pass). */
  const lastRetireNs = new Float64Array(1);

  /** True once the drain's lifting of the backlog logs' caps was done (see scan). */
  let drainBegun = false;

  /** Offers every published record of every ring and releases them; returns how many. */
  const scan = (): number => {
    let total = 0;
    blocked = false;
    // The router began draining (the main thread's flag, set before the ingest thread's drain): the logs take what the
    // trigger rings hold whatever their cap now, or a containment task blocked on a full trigger ring would keep the
    // telemetry rings from emptying, and the ingest thread's drain (which comes before this thread's) from ending.
    if (!drainBegun && dispatcher !== null && pipeline.isDraining()) {
      drainBegun = true;
      dispatcher.beginDrain();
    }
    if (dispatcher !== null) dispatcher.passTime[0] = nowNs();
    for (let o = 0; o < scanOrder.length; o++) {
      const ring = rings[scanOrder[o]!]!;
      const n = ring.available();
      if (n === 0) continue;
      let k = 0;
      for (; k < n; k++) {
        const slot = ring.readSlot(k);
        const bi = slot * ring.strideI32;
        if (ring.i32[bi + TRG_TYPE_I32] === TRG_TYPE_RETIRE) {
          // Every trigger of the expired device is ahead of its marker: offered already.
          retirer.note(ring.i32[bi + TRG_DEVICE_SLOT_I32]!, ring.f64[slot * ring.strideF64 + TRG_SEQ_F64]! | 0);
          continue;
        }
        if (dispatcher === null) {
          unrouted++;
          continue;
        }
        // A downstream that can take nothing more (memory and backlog log full): leave the rest in the ring.
        if (dispatcher.offer(ring.f64, ring.i32, slot * ring.strideF64, bi) === OFFER_BLOCKED) break;
      }
      ring.release(k);
      total += k;
      if (k < n) blocked = true;
    }
    if (retirer.waiting > 0) {
      const t = dispatcher === null ? nowNs() : dispatcher.passTime[0]!;
      if (dispatcher === null || t - lastRetireNs[0]! >= RETIRE_PASS_NS) {
        lastRetireNs[0] = t;
        dispatcher?.noteRingHeldDevices();
        retirer.pass(settled, forget);
      }
    }
    if (dispatcher === null && total > 0) {
      metrics[DISP_TRIGGERS_OFFERED_F64] = unrouted;
      metrics[DISP_TRIGGERS_UNROUTED_F64] = unrouted;
    }
    return total;
  };

  const ringsEmpty = (): boolean => {
    for (const r of rings) if (r.available() > 0) return false;
    return true;
  };

  /**
   * Drops stores of old generations once nothing can name them (idle and the rings empty), or past the cap. The
   * generation before the current one is kept while idle: the reload that replaced it writes its EXITs (naming its
   * fences) after this thread has switched to the new generation.
   */
  const pruneGenerations = (): void => {
    if (namer.stores.size <= 2) return;
    const idle = (dispatcher === null || dispatcher.isIdle) && ringsEmpty();
    for (const g of [...namer.stores.keys()]) {
      if (g < currentGeneration - 1 && (idle || namer.stores.size > KEPT_GENERATIONS)) {
        namer.stores.delete(g);
        dispatcher?.catalog.forgetGeneration(g);
      }
    }
  };

  let stopping = false;
  let stopped: () => void = () => undefined;
  const loopDone = new Promise<void>((r) => (stopped = r));
  const i32 = pipeline.i32;

  let passErrors = 0;
  let lastErrorLogMs = -Infinity;
  /** Logs an error thrown by a pass (rate-limited, with the count) instead of letting it end the loop. */
  const passFailed = (err: unknown): void => {
    passErrors++;
    const now = Date.now();
    if (now - lastErrorLogMs < ERROR_LOG_INTERVAL_MS) return;
    lastErrorLogMs = now;
    const text = err instanceof Error ? (err.stack ?? err.message) : String(err);
    post({
      type: 'log',
      line: `dispatcher thread: a pass failed (${passErrors} so far), the loop goes on: ${text}`,
      level: 'error',
    });
  };

  /** How often a 'handed-on' request looks again, ms. */
  const HAND_OFF_POLL_MS = 10;
  /** This thread's time when the last 'handed-on' request without `delivered` found its triggers taken, or -1. */
  let handOffCutNs = -1;

  const loop = async (): Promise<void> => {
    try {
      await loopPasses();
    } finally {
      stopped();
    }
  };

  const loopPasses = async (): Promise<void> => {
    let passes = 0;
    while (!stopping) {
      const seen = Atomics.load(i32, CTL_DISPATCH_DOORBELL_I32);
      let n: number;
      try {
        n = scan();
        dispatcher?.pump(nowNs());
      } catch (err) {
        passFailed(err);
        await new Promise((r) => setTimeout(r, BUSY_WAIT_MS));
        continue;
      }
      if (blocked) {
        // Held back: let deliveries complete (and free memory) before looking at the rings again.
        await new Promise((r) => setTimeout(r, BUSY_WAIT_MS));
        continue;
      }
      if (n > 0) {
        // Yield to the event loop now and then (sink completions, HTTP sockets, messages) even under steady load.
        if (++passes % 8 === 0) await new Promise((r) => setImmediate(r));
        continue;
      }
      passes = 0;
      pruneGenerations();
      Atomics.store(i32, CTL_DISPATCH_SLEEPING_I32, 1);
      // Re-check after raising the flag: a producer that rang before it saw the flag down and did not notify.
      if (Atomics.load(i32, CTL_DISPATCH_DOORBELL_I32) === seen && ringsEmpty()) {
        const busy = dispatcher !== null && !(dispatcher.isIdle && dispatcher.deadLetterRing.depth === 0);
        const w = waitAsync(i32, CTL_DISPATCH_DOORBELL_I32, seen, busy ? BUSY_WAIT_MS : IDLE_WAIT_MS);
        if (w.async) await w.value;
      }
      Atomics.store(i32, CTL_DISPATCH_SLEEPING_I32, 0);
      // Let completions and messages run between waits.
      await new Promise((r) => setImmediate(r));
    }
  };

  /**
   * Waits for the trigger rings to empty, at most `deadlineMs` (a downstream whose memory and backlog log can take
   * nothing, e.g. its disk is full, must not hold a shutdown forever): what is left is logged as not dispatched.
   */
  const waitRingsEmpty = async (deadlineMs: number): Promise<void> => {
    const end = Date.now() + deadlineMs;
    while (!ringsEmpty()) {
      if (Date.now() >= end) {
        let left = 0;
        for (const r of rings) left += r.available();
        post({
          type: 'log',
          line: `dispatcher thread: ${left} triggers left in the trigger rings at the drain deadline (no downstream could take them): not delivered`,
          level: 'error',
        });
        return;
      }
      // The loop may be held back by a full downstream; pumping here lets its deliveries make room.
      try {
        dispatcher?.pump(nowNs());
      } catch (err) {
        passFailed(err);
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  };

  parentPort!.on('message', (msg: DispatcherRequest) => {
    const reply = (p: Promise<void>): void => {
      p.then(
        () => post({ type: 'reply', id: msg.id }),
        (err: unknown) => post({ type: 'reply', id: msg.id, error: err instanceof Error ? err.message : String(err) }),
      );
    };
    switch (msg.type) {
      case 'fences':
        reply(
          (async () => {
            namer.stores.set(msg.fences.generation, FenceStore.open(msg.fences, LOOKUP_ONLY_STORE));
            currentGeneration = msg.fences.generation;
          })(),
        );
        return;
      case 'drain':
        reply(
          (async () => {
            dispatcher?.beginDrain();
            await waitRingsEmpty(msg.deadlineMs);
            if (dispatcher !== null) await dispatcher.drain(msg.deadlineMs);
          })(),
        );
        return;
      case 'handed-on':
        reply(
          (async () => {
            const until = Date.now() + msg.withinMs;
            let cutNs = -1;
            let takenTo: number[] | null = null;
            if (msg.delivered && handOffCutNs >= 0) {
              // The request after a hand-off that held: judged on the same triggers.
              cutNs = handOffCutNs;
              takenTo = [];
            } else {
              handOffCutNs = -1;
            }
            // The request follows a state copy, which may hold device updates of a containment batch whose triggers
            // are not published yet (a batch publishes them at its end, then releases its pings): a batch in progress
            // starts at its ring's read position and holds at most `batchRecords` records, so the pings up to there
            // (or all published ones, when fewer) are to be processed first. Then every trigger published by then is
            // to be taken, and what the dispatcher had taken by then (this thread's clock: the ingest thread's
            // admission stamps need not agree with the main thread's after a wall-clock step) handed on.
            const processedTo = telemetry.map((r) => {
              const end = (r.readSeq() + msg.batchRecords) | 0;
              const published = r.writeSeq();
              return ((end - published) | 0) > 0 ? published : end;
            });
            let held: number;
            for (;;) {
              if (takenTo === null && telemetry.every((r, i) => ((r.readSeq() - processedTo[i]!) | 0) >= 0))
                takenTo = rings.map((r) => r.writeSeq());
              if (cutNs < 0 && takenTo !== null && rings.every((r, i) => ((r.readSeq() - takenTo![i]!) | 0) >= 0))
                cutNs = nowNs();
              held =
                takenTo === null
                  ? -2
                  : cutNs < 0
                    ? -1
                    : dispatcher === null
                      ? 0
                      : msg.delivered
                        ? dispatcher.undeliveredTakenBy(cutNs)
                        : dispatcher.memoryOnlyTakenBy(cutNs);
              if (held === 0) {
                if (!msg.delivered) handOffCutNs = cutNs;
                return;
              }
              if (Date.now() >= until) break;
              await new Promise((r) => setTimeout(r, HAND_OFF_POLL_MS));
            }
            throw new Error(
              held === -2
                ? 'containment had not processed the pings before the copy in time'
                : held === -1
                  ? 'the trigger rings were not read that far in time'
                  : `${held} triggers of those pings are still ${msg.delivered ? 'undelivered' : 'held only in memory'}`,
            );
          })(),
        );
        return;
      case 'close':
        reply(
          (async () => {
            dispatcher?.beginDrain();
            await waitRingsEmpty(msg.deadlineMs);
            stopping = true;
            Atomics.notify(i32, CTL_DISPATCH_DOORBELL_I32);
            await loopDone;
            if (dispatcher !== null) {
              scan();
              await dispatcher.close(msg.deadlineMs);
            }
            bridge?.close();
          })(),
        );
        return;
    }
  });

  post({ type: 'started', port: 0 });
  await loop();
}

if (parentPort !== null && workerData !== null && (workerData as Partial<DispatcherThreadData>).memory !== undefined) {
  main().catch((err: unknown) =>
    post({ type: 'failed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
}
