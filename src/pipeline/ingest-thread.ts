/**
 * The ingest thread (a worker_threads Worker): sources (TCP listener, replay files, and the embedding's `ingest` /
 * `push` / stdin forwarded by message), the ingest edge, lane admission into the shards' telemetry rings, and the
 * containment pool.
 *
 * This thread owns the Piscina pool: it is the one that knows when a shard has data (it just wrote it), and the pool's
 * answers arrive on its own event loop, so the per-shard "one task in flight" state lives in one thread with no
 * cross-thread hand-off. The main thread stays free for the admin server and the embedding's callbacks.
 */
import { LOOKUP_ONLY_STORE } from './store-views.js';
import { Piscina } from 'piscina';
import { parentPort, workerData } from 'node:worker_threads';
import { DeviceState } from '../fences/device-state.js';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import { LaneAdmission } from '../ingest/admission.js';
import { DeviceRegistry } from '../ingest/device-registry.js';
import type { IngestStream } from '../ingest/ingest-edge.js';
import { PipelineRegion } from '../ingest/pipeline-region.js';
import { RejectLog } from '../ingest/reject-log.js';
import { fileSource, type ReadableSource } from '../ingest/sources/stream-source.js';
import { TcpSource } from '../ingest/sources/tcp-source.js';
import { nowNs } from '../shm/clock.js';
import { ADM_BLOCK_F64, IngestState, RingKind } from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import type { ContainmentTask, ContainmentWorkerData } from './containment-thread.js';
import { AdmissionSink, PipelineEdge, StorePredicates } from './ingest-wiring.js';
import type { PipelineMemory } from './memory.js';
import type { IngestRequest, ThreadEvent } from './messages.js';
import { ShardScheduler } from './shard-scheduler.js';
import type { WarmUpTask } from './warm-up.js';

/** What the ingest thread needs (structured-clone safe). */
export interface IngestThreadData {
  /** The router's shared regions. */
  memory: PipelineMemory;
  /** The first fence-store generation. */
  fences: FenceStoreDescriptor;
  /** TCP listener address (host null: none). */
  listenHost: string | null;
  /** TCP listener port (0: any). */
  listenPort: number;
  /** Edge options. */
  ingest: {
    maxFrameBytes: number;
    readChunkBytes: number;
    sharedStructures: boolean;
    maxConnections: number;
    idleTimeoutMs: number;
    stationarySpeedMps: number;
    stationaryRadiusM: number;
    rejectLogIntervalMs: number;
  };
  /** Admission options (LaneAdmission's names). */
  admission: { reservedFraction: number; watermarkFraction: number; idleBucketCapacity: number; idleBucketRatePerSecond: number };
  /** Compliance margin, m. */
  complianceMarginM: number;
  /** Records per containment task. */
  batchSize: number;
  /** Containment worker threads. */
  poolSize: number;
  /** Replay files (stdin is forwarded by the main thread). */
  inputFiles: string[];
  /** True when the main thread forwards stdin as stream-data messages. */
  stdinForwarded: boolean;
}

/** Synthetic pings each pool worker runs before the router starts (see warm-up.ts). */
const WARM_UP_PINGS = 100_000;
/** Longest a worker's warm-up runs, ms. */
const WARM_UP_MAX_MS = 250;

function post(event: ThreadEvent): void {
  parentPort!.postMessage(event);
}

async function main(): Promise<void> {
  const d = workerData as IngestThreadData;
  const m = d.memory;
  const pipeline = PipelineRegion.wrap(m.pipeline);
  pipeline.setIngestState(IngestState.STARTING);
  const stats = new Float64Array(m.stats);
  const state = DeviceState.open(m.deviceState);
  const rings = m.telemetryRings.map((b) => SpscRing.wrap(b, RingKind.TELEMETRY));
  const poolData: ContainmentWorkerData = { memory: m, fences: d.fences };
  const pool = new Piscina<ContainmentTask, number>({
    filename: new URL('./containment-thread.js', import.meta.url).href,
    minThreads: d.poolSize,
    maxThreads: d.poolSize,
    idleTimeout: 2 ** 31 - 1,
    // One task per shard group and one group per worker: tasks never queue, FIFO order is kept anyway.
    stricterFIFO: true,
    workerData: poolData,
  });
  const log = (line: string): void => post({ type: 'log', line });
  const scheduler = new ShardScheduler(pool, rings, d.batchSize, d.poolSize, stats, d.fences, log);
  const admissionCounters = new Float64Array(m.admissionCounters);
  const t0 = nowNs();
  const admissions = rings.map((ring, s) => new LaneAdmission(ring, admissionCounters, s * ADM_BLOCK_F64, d.admission, t0));
  const registry = new DeviceRegistry(m.idTable, m.shards);
  const predicates = new StorePredicates(FenceStore.open(d.fences, LOOKUP_ONLY_STORE), state, d.complianceMarginM, rings, registry.shardOfSlot);
  const rejectLog = new RejectLog({ intervalMs: d.ingest.rejectLogIntervalMs, nowMs: () => Date.now(), write: log });
  const sink = new AdmissionSink(admissions, scheduler, predicates);
  const edge = new PipelineEdge(
    {
      maxFrameBytes: d.ingest.maxFrameBytes,
      readChunkBytes: d.ingest.readChunkBytes,
      sharedStructures: d.ingest.sharedStructures,
      stationarySpeedMps: d.ingest.stationarySpeedMps,
      stationaryRadiusM: d.ingest.stationaryRadiusM,
    },
    { pipeline, registry, predicates, sink, log: rejectLog },
  );
  edge.attach(scheduler, sink);

  const tcp =
    d.listenHost === null
      ? null
      : new TcpSource({ host: d.listenHost, port: d.listenPort, maxConnections: d.ingest.maxConnections, idleTimeoutMs: d.ingest.idleTimeoutMs });
  const files: ReadableSource[] = d.inputFiles.map((p) => fileSource(p, d.ingest.readChunkBytes));
  let stdinStream: IngestStream | null = d.stdinForwarded ? edge.openStream('stdin') : null;
  let stdinDone: Promise<void> = Promise.resolve();
  let stdinEnded: () => void = () => undefined;
  if (stdinStream !== null) stdinDone = new Promise((r) => (stdinEnded = r));

  const drain = async (): Promise<void> => {
    pipeline.setIngestState(IngestState.DRAINING);
    // Stop taking input: partial frames of closed connections count as truncated.
    if (tcp !== null) await tcp.stop();
    await Promise.all(files.map((f) => f.stop()));
    if (stdinStream !== null) {
      stdinStream.end();
      stdinStream = null;
      stdinEnded();
    }
    for (const a of admissions) a.setDraining(true);
    scheduler.setDraining();
    // Empty the rings: publish what is claimed and keep submitting until nothing is left or in flight.
    for (;;) {
      scheduler.flush();
      for (let s = 0; s < rings.length; s++) scheduler.trySubmit(s);
      if (scheduler.isEmpty()) break;
      await scheduler.idle();
      await new Promise((r) => setImmediate(r));
    }
    pipeline.setIngestState(IngestState.STOPPED);
  };

  parentPort!.on('message', (msg: IngestRequest) => {
    switch (msg.type) {
      case 'ingest':
        sink.tick();
        edge.ingest(msg.bytes);
        scheduler.flush();
        return;
      case 'push':
        sink.tick();
        edge.push(msg.point);
        scheduler.flush();
        return;
      case 'stream-data':
        stdinStream?.write(msg.bytes);
        return;
      case 'stream-end':
        stdinStream?.end();
        stdinStream = null;
        stdinEnded();
        return;
      case 'pause':
        scheduler.pause().then(() => post({ type: 'reply', id: msg.id }));
        return;
      case 'resume':
        try {
          predicates.store = FenceStore.open(msg.fences, LOOKUP_ONLY_STORE);
          scheduler.resume(msg.fences);
          post({ type: 'reply', id: msg.id });
        } catch (err) {
          post({ type: 'reply', id: msg.id, error: (err as Error).message });
        }
        return;
      case 'drain':
        drain().then(
          () => post({ type: 'reply', id: msg.id }),
          (err: unknown) => post({ type: 'reply', id: msg.id, error: (err as Error).message }),
        );
        return;
      case 'close':
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

  // Every pool worker loaded, its first store opened and its engine compiled before the first real ping.
  const warm = { pings: WARM_UP_PINGS, maxMs: WARM_UP_MAX_MS, seed: 7 };
  // The pool is typed for containment tasks; the named export takes a WarmUpTask.
  const warmTasks = Array.from({ length: d.poolSize }, (_, i): WarmUpTask => ({ ...warm, seed: warm.seed + i }));
  await Promise.all(warmTasks.map((t) => pool.run(t as unknown as ContainmentTask, { name: 'warmUp' })));
  if (tcp !== null) await tcp.start(edge);
  for (const f of files) await f.start(edge);
  pipeline.setIngestPort(tcp?.port ?? 0);
  pipeline.setIngestState(IngestState.RUNNING);
  post({ type: 'started', port: tcp?.port ?? 0 });
  Promise.all([...files.map((f) => f.finished()), stdinDone]).then(() => post({ type: 'inputs-done' }));
}

if (parentPort !== null && workerData !== null && (workerData as Partial<IngestThreadData>).memory !== undefined) {
  main().catch((err: unknown) => post({ type: 'failed', error: err instanceof Error ? err.message : String(err) }));
}
