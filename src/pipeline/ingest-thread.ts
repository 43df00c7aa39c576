/**
 * The ingest thread (a worker_threads Worker): sources (TCP listener, replay files, and the embedding's `ingest` /
 * `push` / stdin forwarded by message), the ingest edge, lane admission into the shards' telemetry rings, and the
 * containment pool.
 *
 * This thread owns the Piscina pool: it is the one that knows when a shard has data (it just wrote it), and the pool's
 * answers arrive on its own event loop, so the per-group "one task in flight" state lives in one thread with no
 * cross-thread hand-off. The main thread stays free for the admin server and the embedding's callbacks.
 */
import { LOOKUP_ONLY_STORE } from './store-views.js';
import { Piscina } from 'piscina';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import { DeviceExpiry, slotReusePort } from './device-expiry.js';
import { readFileSync } from 'node:fs';
import type { IngestTlsConfig, ThreadOptions } from '../config/options.js';
import { PipelineRegion } from '../shm/pipeline-region.js';
import { fileSource, type ReadableSource } from '../ingest/sources/stream-source.js';
import { TcpSource } from '../ingest/sources/tcp-source.js';
import { JetStreamSource } from '../ingest/sources/jetstream-source.js';
import {
  FENCE_MAX_X_F64,
  FENCE_MAX_Y_F64,
  FENCE_MIN_X_F64,
  FENCE_MIN_Y_F64,
  ICTL_DOORBELL_I32,
  ING_FOLDED_CELLS,
  IngestState,
  PST_INPUT_ERRORS_F64,
  RT_THREAD_INGEST,
} from '../shm/layout.js';
import { errorText } from '../durable/fs-util.js';
import type { ContainmentTask, ContainmentWorkerData } from './containment-task.js';
import { buildIngestPath } from './ingest-path.js';
import { InProcessInput } from './in-process-input.js';
import { InputBacklog } from './input-backlog.js';
import { COMPLIANCE_ALARM_INTERVAL_MS, ComplianceShedAlarm } from '../ingest/shed-alarm.js';
import type { PausableFeed } from '../ingest/backpressure.js';
import { allocatePipelineMemory, type PipelineMemory } from './memory.js';
import { armThreadDrills, startThreadRuntimeReporter } from './thread-runtime.js';
import { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from '../ingest/ping-encoder.js';
import { Fleet, type FleetPing } from '../fences/synthetic-fleet.js';
import type { IngestRequest, ThreadEvent } from './messages.js';
import { WATCHDOG_INTERVAL_MS } from './shard-scheduler.js';
import type { WarmUpTask } from './warm-up.js';
import { InputForwarder } from './input-forwarding.js';
import type { IngestPeerData, IngestPeerEvent, IngestPeerRequest } from './ingest-peer-thread.js';
import { waitAsync } from '../shm/ring.js';

/**
 * What the ingest thread needs (structured-clone safe): the router options tagged for this thread, the shared memory,
 * the first fence generation and where its inputs come from.
 */
export type IngestThreadData = ThreadOptions<'ingest'> & {
  /** The router's shared regions. */
  memory: PipelineMemory;
  /** The first fence-store generation. */
  fences: FenceStoreDescriptor;
  /** True when the main thread forwards stdin as stream-data messages (the `inputs` entry "-"). */
  stdinForwarded: boolean;
  /** When the main thread started the thread, epoch ms (its start-up is reported from it). */
  startedAtEpochMs: number;
};

/** Synthetic pings each pool worker runs before the router starts (see warm-up.ts). */
const WARM_UP_PINGS = 100_000;
/** Synthetic pings per encoding the ingest path runs before the router starts, over this many scratch devices. */
const WARM_UP_INGEST_PINGS = 20_000;
const WARM_UP_DEVICES = 2048;
/** Pings per synthetic read chunk. */
const WARM_UP_CHUNK_PINGS = 512;
/** Longest a worker's warm-up runs, ms; the ingest path's too (a busy host cuts it short, a restart waits less). */
const WARM_UP_MAX_MS = 250;

function post(event: ThreadEvent): void {
  parentPort!.postMessage(event);
}

/**
 * Runs the ingest path (decode, registry, classification, admission, record write, publish) over synthetic frames
 * in every encoding the edge accepts, on scratch regions of its own with the scheduler paused (no task is submitted:
 * the records are dropped after each chunk), so the first real read chunk runs on compiled code. Touches no device,
 * ring or counter of the router. Returns the pings the scratch edge accepted.
 */
function warmIngestPath(d: IngestThreadData, pool: Piscina<ContainmentTask, number>, store: FenceStore): number {
  const scratch = allocatePipelineMemory({
    shards: d.memory.shards,
    ringCapacitySlots: 4096,
    reservedFraction: d.admission.reservedFraction,
    maxDevices: WARM_UP_DEVICES,
    idBytesPerSlot: 32,
    maxFencesPerDevice: 16,
    downstreams: 1,
    complianceWorker: d.memory.complianceRings.length > 0,
  });
  const quiet = (): void => undefined;
  const path = buildIngestPath(scratch, d, pool, { error: quiet, warn: quiet }, false);
  void path.scheduler.pause();
  const rings = path.paths === null ? path.scheduler.rings : [...path.scheduler.rings, path.paths.ring];
  // The fleet walks around the first fence, so classification meets fences and the compliance boxes.
  const f = store.fenceF64;
  const fleet = new Fleet({
    devices: WARM_UP_DEVICES,
    seed: 11,
    centreLat: store.fenceCount > 0 ? (f[FENCE_MIN_Y_F64]! + f[FENCE_MAX_Y_F64]!) / 2 : 0,
    centreLon: store.fenceCount > 0 ? (f[FENCE_MIN_X_F64]! + f[FENCE_MAX_X_F64]!) / 2 : 0,
  });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  const encodings: LoadEncoding[] = d.ingest.sharedStructures ? ['maps', 'records', 'shared'] : ['maps', 'records'];
  const buf = Buffer.allocUnsafe(WARM_UP_CHUNK_PINGS * MAX_PING_BYTES);
  const t0 = Date.now();
  const streams = encodings.map((encoding) => path.edge.openStream(`warm-up-${encoding}`));
  // The encodings take turns a chunk at a time, so a warm-up cut short by its time limit has warmed each of them.
  const startedMs = performance.now();
  let n = 0;
  for (let sent = 0; sent < WARM_UP_INGEST_PINGS; sent += WARM_UP_CHUNK_PINGS) {
    for (let e = 0; e < encodings.length; e++) {
      let len = 0;
      for (let k = 0; k < WARM_UP_CHUNK_PINGS; k++) {
        fleet.next(ping, t0 + n++);
        len = encodePingInto(buf, len, ping, encodings[e]!);
      }
      streams[e]!.write(buf.subarray(0, len));
      // Why drop the records: nothing consumes the scratch rings, and admission must not start shedding.
      for (const r of rings) r.release(r.available());
    }
    if (performance.now() - startedMs > WARM_UP_MAX_MS) break;
  }
  for (const stream of streams) stream.end();
  let accepted = 0;
  for (const r of rings) accepted += r.readSeq();
  return accepted;
}

async function main(): Promise<void> {
  const d = workerData as IngestThreadData;
  // Since the main thread started this one: the thread's start and the loading of its modules.
  const loadedMs = performance.now();
  const startedMs = loadedMs - (Date.now() - d.startedAtEpochMs);
  const m = d.memory;
  startThreadRuntimeReporter(m.threadRuntime, RT_THREAD_INGEST);
  armThreadDrills('ingest');
  const pipeline = PipelineRegion.wrap(m.pipeline);
  pipeline.setIngestState(IngestState.STARTING);
  const poolData: ContainmentWorkerData = {
    memory: m,
    fences: d.fences,
    engine: {
      exitOnExpiry: d.deviceExpiry === 'exit',
      crossMaxSpeedMps: d.crossMaxSpeedMps,
      crossMaxGapMs: d.crossMaxGapMs,
      crossMaxPerDevicePerSec: d.crossMaxPerDevicePerSec,
    },
  };
  // One more worker with a COMPLIANCE path: its group's task waits on the COMPLIANCE ring, idle most of the time.
  const poolThreads = d.poolSize + (m.complianceRings.length > 0 ? 1 : 0);
  const pool = new Piscina<ContainmentTask, number>({
    filename: new URL('./containment-thread.js', import.meta.url).href,
    minThreads: poolThreads,
    maxThreads: poolThreads,
    idleTimeout: 2 ** 31 - 1,
    // One task per shard group and one group per worker: tasks never queue, FIFO order is kept anyway.
    stricterFIFO: true,
    workerData: poolData,
  });
  const logError = (line: string): void => post({ type: 'log', line, level: 'error' });
  const logWarning = (line: string): void => post({ type: 'log', line, level: 'warn' });
  // Why listen: Piscina emits 'error' for a worker that fails with no task on it; unheard, it would end this thread.
  pool.on('error', (err: unknown) => logError(`containment pool: ${err instanceof Error ? err.message : String(err)}`));
  const { scheduler, admissions, complianceAdmission, paths, predicates, sink, edge, room, registry, state } =
    buildIngestPath(m, d, pool, { error: logError, warn: logWarning }, true);
  const expiry =
    d.deviceIdleTimeoutMs > 0
      ? new DeviceExpiry(
          {
            registry,
            admissions,
            scheduler,
            state,
            predicates,
            paths,
            counters: new Float64Array(m.pipeline),
            allRings: scheduler.allRings,
            shards: m.shards,
            ingestControl: m.ingestControl,
          },
          d.deviceIdleTimeoutMs,
        )
      : null;
  // Without expiry no slot is reused, but a new device still starts at its partition's seq floor.
  if (expiry === null) registry.setReusePort(slotReusePort(state, predicates));
  const watchdogTimer = setInterval(() => scheduler.checkStalls(Date.now()), WATCHDOG_INTERVAL_MS);
  watchdogTimer.unref();
  const peers = startPeers(d, logError);
  if (peers.length > 0) {
    edge.spreadConnections(peers.map((p) => p.forwarder));
    listenToDoorbell(new Int32Array(m.ingestControl), () => scheduler.submitWaiting());
  }
  const folder = new CounterFolder(new Float64Array(m.pipeline), m.ingestCounters);
  const foldTimer = peers.length > 0 ? setInterval(() => folder.fold(), COUNTER_FOLD_INTERVAL_MS) : null;
  foldTimer?.unref();
  const rings = scheduler.rings;
  const backlog = new InputBacklog(pipeline, {
    bytes: d.ingest.inputHighWaterBytes,
    points: d.ingest.inputHighWaterPoints,
  });
  const inProcess = new InProcessInput({
    edge,
    sink,
    scheduler,
    room,
    waiter: edge.feedWaiter,
    backlog,
    wake: () => post({ type: 'input-drained', which: 'input' }),
  });
  const alarm = new ComplianceShedAlarm({
    admissionCounters: new Float64Array(m.admissionCounters),
    blocks: m.telemetryRings.length + m.complianceRings.length,
    nowMs: () => Date.now(),
    write: (line) => post({ type: 'log', line, level: 'error' }),
  });
  const alarmTimer = setInterval(() => alarm.check(), COMPLIANCE_ALARM_INTERVAL_MS);
  alarmTimer.unref();

  const tcp =
    d.listenHost === null
      ? null
      : new TcpSource({
          host: d.listenHost,
          port: d.listenPort,
          maxConnections: d.ingest.maxConnections,
          idleTimeoutMs: d.ingest.idleTimeoutMs,
          frameDeadlineMs: d.ingest.frameDeadlineMs,
          maxHeldBytes: d.ingest.maxHeldBytes,
          overload: d.ingest.overload,
          flood: d.ingest,
          tls: readTls(d.ingest.tls),
          authToken: d.ingest.authToken,
        });
  const jetstreamSource =
    d.jetstreamSource === null
      ? null
      : new JetStreamSource(
          d.jetstreamSource,
          new Float64Array(m.sourcePartitions),
          // A message's pings may be in the COMPLIANCE ring too: it is processed once every ring is read past it.
          paths === null ? rings : [...rings, paths.ring],
          (level, line) => post({ type: 'log', line, level }),
          new Float64Array(m.leaseGate),
        );
  const pipelineStats = new Float64Array(m.stats);
  const files: ReadableSource[] = d.inputs
    .filter((p) => p !== '-')
    .map((p) =>
      fileSource(p, d.ingest.readChunkBytes, (err) => {
        pipelineStats[PST_INPUT_ERRORS_F64]!++;
        post({
          type: 'log',
          line: `input file ${p}: reading failed (${errorText(err)}): what was read before is processed, the rest of the file is not read`,
          level: 'error',
        });
      }),
    );
  // Stdin is read on the main thread, which pauses it on the shared backlog (see input-backlog.ts); here its bytes
  // are fed as a pausable source's, and every byte fed is taken off the backlog.
  let stdinFeed: PausableFeed | null = d.stdinForwarded
    ? edge.openFeed('stdin', {
        onFed: (bytes) => {
          if (backlog.fedStdin(bytes)) post({ type: 'input-drained', which: 'stdin' });
        },
      })
    : null;
  let stdinDone: Promise<void> = Promise.resolve();
  let stdinEnded: () => void = () => undefined;
  if (stdinFeed !== null) stdinDone = new Promise((r) => (stdinEnded = r));
  const endStdin = async (cutByStop: boolean): Promise<void> => {
    const feed = stdinFeed;
    if (feed === null) return;
    stdinFeed = null;
    await feed.end(cutByStop);
    stdinEnded();
  };

  const drain = async (): Promise<void> => {
    pipeline.setIngestState(IngestState.DRAINING);
    // No device expires while the pipeline empties (its state stays in the checkpoint).
    expiry?.stop();
    // Stop taking input: partial frames of the connections closed now count as cut_at_stop. What pausable sources have
    // read (and what the embedding handed over) is fed first, as the rings make room: it is not dropped.
    if (tcp !== null) await tcp.stop();
    // What waits for room in the other threads' input rings goes in first; then they read what their connections
    // sent before they closed, and publish it.
    await Promise.all(peers.map((p) => p.forwarder.handedOnAll()));
    await Promise.all(peers.map((p) => p.request({ type: 'stop' }, 'stopped')));
    folder.fold();
    await jetstreamSource?.stop();
    await Promise.all(files.map((f) => f.stop()));
    // Still open at the drain: the router stops reading it (a partial frame left counts as cut_at_stop).
    await endStdin(true);
    await inProcess.idle();
    for (const a of admissions) a.setDraining(true);
    complianceAdmission?.setDraining(true);
    scheduler.setDraining();
    // Empty the rings: publish what is claimed and keep submitting until nothing is left or in flight.
    for (;;) {
      scheduler.flush();
      scheduler.submitWaiting();
      if (scheduler.isEmpty()) break;
      await scheduler.idle();
      await new Promise((r) => setImmediate(r));
    }
    folder.fold();
    pipeline.setIngestState(IngestState.STOPPED);
    // Anything shed in COMPLIANCE up to the end is reported before the router's summary.
    alarm.check();
  };

  let begin: () => void = () => undefined;
  const begun = new Promise<void>((resolve) => (begin = resolve));
  parentPort!.on('message', (msg: IngestRequest) => {
    switch (msg.type) {
      case 'begin':
        begin();
        return;
      case 'ingest':
        inProcess.ingest(msg.bytes);
        return;
      case 'push':
        inProcess.push(msg.point);
        return;
      case 'stream-data':
        // The feed keeps what the rings cannot take yet; the main thread stops reading stdin on the backlog.
        stdinFeed?.write(msg.bytes);
        return;
      case 'stream-end':
        void endStdin(false);
        return;
      case 'pause':
        scheduler.pause().then(() => post({ type: 'reply', id: msg.id }));
        return;
      case 'resume':
        try {
          predicates.store = FenceStore.open(msg.fences, LOOKUP_ONLY_STORE);
          scheduler.resume(msg.fences);
        } catch (err) {
          post({ type: 'reply', id: msg.id, error: (err as Error).message });
          return;
        }
        // The reload is done once every ingest thread classifies against the new fences.
        Promise.all(peers.map((p) => p.request({ type: 'fences', fences: msg.fences }, 'fenced'))).then(
          () => post({ type: 'reply', id: msg.id }),
          (err: unknown) => post({ type: 'reply', id: msg.id, error: (err as Error).message }),
        );
        return;
      case 'drain':
        drain().then(
          () => post({ type: 'reply', id: msg.id }),
          (err: unknown) => post({ type: 'reply', id: msg.id, error: (err as Error).message }),
        );
        return;
      case 'close':
        clearInterval(alarmTimer);
        clearInterval(watchdogTimer);
        if (foldTimer !== null) clearInterval(foldTimer);
        doorbellOpen = false;
        closingPeers = true;
        for (const p of peers) void p.worker.terminate();
        edge.feedWaiter.close();
        pool.destroy().then(
          () => {
            post({ type: 'reply', id: msg.id });
            parentPort!.close();
          },
          (err: unknown) => post({ type: 'reply', id: msg.id, error: (err as Error).message }),
        );
        return;
    }
  });

  // The stream's connection and consumers are made while the thread warms up (nothing is fetched before the start).
  const sourcePrepared = jetstreamSource?.prepare();
  sourcePrepared?.catch(() => undefined);
  // Every pool worker loaded, its first store opened and its engine compiled before the first real ping.
  const warm = { pings: WARM_UP_PINGS, maxMs: WARM_UP_MAX_MS, seed: 7 };
  // The pool is typed for containment tasks; the named export takes a WarmUpTask.
  const warmTasks = Array.from({ length: poolThreads }, (_, i): WarmUpTask => ({ ...warm, seed: warm.seed + i }));
  const warmed = Promise.all(warmTasks.map((t) => pool.run(t as unknown as ContainmentTask, { name: 'warmUp' })));
  const setUpMs = performance.now();
  // The edge warms on this thread while the workers warm on theirs.
  warmIngestPath(d, pool, predicates.store);
  const edgeWarmedMs = performance.now();
  await warmed;
  const workersWarmedMs = performance.now();
  await sourcePrepared;
  const sourcesMs = performance.now();
  await Promise.all(peers.map((p) => p.ready));
  const readyMs = performance.now();
  const since = (a: number, b: number): number => Math.round(b - a);
  post({
    type: 'log',
    line:
      `ingest thread ready in ${since(startedMs, readyMs)} ms: starting and loading ${since(startedMs, loadedMs)} ms, ` +
      `set-up ${since(loadedMs, setUpMs)} ms, warming the ingest path ${since(setUpMs, edgeWarmedMs)} ms, ` +
      `then waiting for the containment workers' warm-up ${since(edgeWarmedMs, workersWarmedMs)} ms, ` +
      `the sources ${since(workersWarmedMs, sourcesMs)} ms and the other ingest threads ${since(sourcesMs, readyMs)} ms`,
    level: 'debug',
  });
  // The main thread says when to start taking input: after the dispatcher runs and has what the restore left for it.
  post({ type: 'ready' });
  await begun;
  if (tcp !== null) await tcp.start(edge);
  if (jetstreamSource !== null) await jetstreamSource.start(edge);
  for (const f of files) await f.start(edge);
  pipeline.setIngestPort(tcp?.port ?? 0);
  pipeline.setIngestState(IngestState.RUNNING);
  expiry?.start();
  post({ type: 'started', port: tcp?.port ?? 0 });
  Promise.all([...files.map((f) => f.finished()), stdinDone]).then(() => post({ type: 'inputs-done' }));
}

/** Reads the listener's TLS files (an unreadable one fails the start, naming the option and the file's name). */
function readTls(
  tls: IngestTlsConfig | null,
): { cert: Buffer; key: Buffer; ca: Buffer | null; requireClientCert: boolean } | null {
  if (tls === null) return null;
  const read = (name: string, path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new Error(
        `options.ingest.tls.${name}: cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        { cause: err },
      );
    }
  };
  return {
    cert: read('certFile', tls.certFile),
    key: read('keyFile', tls.keyFile),
    ca: tls.caFile === null ? null : read('caFile', tls.caFile),
    requireClientCert: tls.requireClientCert,
  };
}

/** How often ingest thread 0 adds the other ingest threads' counters into the router's, ms (and at the drain). */
const COUNTER_FOLD_INTERVAL_MS = 100;
/** Longest one wait on the doorbell before it is armed again, ms. */
const DOORBELL_WAIT_MS = 1000;

/** False once the thread closes: the doorbell loop stops. */
let doorbellOpen = true;

/**
 * Submits containment tasks when another ingest thread publishes: waits on the doorbell cell without blocking this
 * thread's event loop, and calls `ring` each time it moves (at least once per DOORBELL_WAIT_MS).
 */
function listenToDoorbell(cells: Int32Array, ring: () => void): void {
  const listen = (): void => {
    if (!doorbellOpen) return;
    const seen = Atomics.load(cells, ICTL_DOORBELL_I32);
    ring();
    const waited = waitAsync(cells, ICTL_DOORBELL_I32, seen, DOORBELL_WAIT_MS);
    if (waited.async) void waited.value.then(listen);
    else setImmediate(listen);
  };
  listen();
}

/** Adds the other ingest threads' counters (ING_FOLDED_CELLS of their pipeline regions) into the router's. */
class CounterFolder {
  private readonly into: Float64Array;
  private readonly from: Float64Array[];
  private readonly last: Float64Array[];

  constructor(into: Float64Array, regions: readonly SharedArrayBuffer[]) {
    this.into = into;
    this.from = regions.map((b) => new Float64Array(b));
    this.last = regions.map((b) => new Float64Array(b.byteLength / 8));
  }

  /** Adds what each thread counted since the last fold. */
  fold(): void {
    for (let k = 0; k < this.from.length; k++) {
      const from = this.from[k]!;
      const last = this.last[k]!;
      for (const cell of ING_FOLDED_CELLS) {
        const now = from[cell]!;
        this.into[cell]! += now - last[cell]!;
        last[cell] = now;
      }
    }
  }
}

/** One other ingest thread, as ingest thread 0 drives it. */
interface Peer {
  worker: Worker;
  /** Thread 0's end of its forwarded-input ring. */
  forwarder: InputForwarder;
  /** Resolves when it has built its path. */
  ready: Promise<void>;
  /** Posts `request` and resolves when the thread answers with `answer`. */
  request(request: IngestPeerRequest, answer: IngestPeerEvent['type']): Promise<void>;
}

/** Set before the peers are terminated on close: their exits are expected then. */
let closingPeers = false;

/**
 * Starts ingest threads 1 .. ingestThreads - 1 (none with one ingest thread). One that fails or exits while the router
 * runs takes this thread with it (its connections' bytes can go nowhere): the router fails as for the death of this
 * thread, named in the log.
 */
function startPeers(d: IngestThreadData, logError: (line: string) => void): Peer[] {
  const peers: Peer[] = [];
  for (let producer = 1; producer < d.memory.ingestThreads; producer++) {
    const data: IngestPeerData = { ...d, producer };
    const worker = new Worker(new URL('./ingest-peer-thread.js', import.meta.url), { workerData: data });
    const forwarder = new InputForwarder(
      d.memory.inputRings[producer - 1]!,
      d.memory.inputConnections[producer - 1]!,
      d.memory.ingestControl,
      producer,
    );
    const waiting = new Map<string, () => void>();
    let ready: () => void = () => undefined;
    const readyPromise = new Promise<void>((resolve) => (ready = resolve));
    let died = false;
    const die = (why: string): void => {
      forwarder.dead();
      if (closingPeers || died) return;
      died = true;
      logError(`ingest thread ${producer} ${why}: ingest thread 0 ends too, the router fails`);
      post({ type: 'failed', error: `ingest thread ${producer} ${why}` });
      setImmediate(() => process.exit(1));
    };
    worker.on('message', (event: IngestPeerEvent) => {
      switch (event.type) {
        case 'ready':
          ready();
          return;
        case 'log':
          post({ type: 'log', line: `ingest thread ${producer}: ${event.line}`, level: event.level });
          return;
        case 'failed':
          die(`failed: ${event.error}`);
          return;
        default: {
          const w = waiting.get(event.type);
          waiting.delete(event.type);
          w?.();
        }
      }
    });
    worker.on('error', (err) => die(`failed: ${err.message}`));
    worker.on('exit', (code) => die(`exited (code ${code})`));
    peers.push({
      worker,
      forwarder,
      ready: readyPromise,
      request: (request, answer) =>
        new Promise<void>((resolve) => {
          waiting.set(answer, resolve);
          worker.postMessage(request);
        }),
    });
  }
  return peers;
}

// Last: main() runs synchronously up to its first await, and uses the declarations above.
if (parentPort !== null && workerData !== null && (workerData as Partial<IngestThreadData>).memory !== undefined) {
  main().catch((err: unknown) => post({ type: 'failed', error: err instanceof Error ? err.message : String(err) }));
}
