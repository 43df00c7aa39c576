/**
 * An ingest thread other than thread 0 (a worker_threads Worker that ingest thread 0 starts when `ingestThreads` > 1):
 * it decodes the bytes of the TCP connections thread 0 spreads to it (forwarded through its INPUT ring, see
 * input-forwarding.ts), registers the devices in the shared id table, classifies and admits the pings into telemetry
 * rings of its own (one per shard), and rings thread 0's doorbell when it publishes. Containment, the pool, expiry
 * and every other source stay with thread 0.
 *
 * Messages from thread 0: `fences` (a reload's new store, for lane classification; answered `fenced` once in use),
 * `stop` (read what is left, end every connection, publish, answer `stopped`). To thread 0: `ready` once built, `log`,
 * `failed`.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { FenceStore, type FenceStoreDescriptor } from '../fences/store.js';
import type { IngestStream } from '../ingest/ingest-edge.js';
import { FloodGuard, hasFloodLimits } from '../ingest/stream-limits.js';
import { ICTL_PEER_DEAD_I32, INP_CONN_BUFFERED_F64, INP_CONN_HELD_F64, INP_CONN_STRIDE_F64 } from '../shm/layout.js';
import type { IngestThreadData } from './ingest-thread.js';
import { buildPeerPath } from './ingest-path.js';
import { InputReader } from './input-forwarding.js';
import { LOOKUP_ONLY_STORE } from './store-views.js';
import { armThreadDrills, ingestPeerBlock, startThreadRuntimeReporter } from './thread-runtime.js';

/** What an ingest peer thread is given: ingest thread 0's data and its own number. */
export type IngestPeerData = IngestThreadData & {
  /** This thread's number among the ingest threads (1 .. ingestThreads - 1). */
  producer: number;
};

/** A message from ingest thread 0 to a peer. */
export type IngestPeerRequest = { type: 'fences'; fences: FenceStoreDescriptor } | { type: 'stop' };

/** A message from a peer to ingest thread 0. */
export type IngestPeerEvent =
  | { type: 'ready' }
  | { type: 'fenced' }
  | { type: 'stopped' }
  | { type: 'log'; line: string; level: 'error' | 'warn' }
  | { type: 'failed'; error: string };

/** How long the peer parks on an empty INPUT ring before looking again (a stop message wakes it sooner), ms. */
const PARK_MS = 100;
/** How often the peer drops cache entries of slots that changed hands, ms. */
const PURGE_INTERVAL_MS = 1000;

function post(event: IngestPeerEvent): void {
  parentPort!.postMessage(event);
}

/** Says in shared memory that this thread is gone, so ingest thread 0 stops waiting for room in its input ring. */
function sayDead(): void {
  const d = workerData as IngestPeerData;
  Atomics.store(new Int32Array(d.memory.ingestControl), ICTL_PEER_DEAD_I32 + d.producer - 1, 1);
}

function main(): void {
  const d = workerData as IngestPeerData;
  const m = d.memory;
  startThreadRuntimeReporter(m.threadRuntime, ingestPeerBlock(m.threadRuntime, d.producer));
  armThreadDrills(`ingest-${d.producer}`);
  const path = buildPeerPath(m, d, d.producer, {
    error: (line) => post({ type: 'log', line, level: 'error' }),
    warn: (line) => post({ type: 'log', line, level: 'warn' }),
  });
  const reader = new InputReader(m.inputRings[d.producer - 1]!);
  const streams = new Map<number, { stream: IngestStream; address: string }>();
  // The flood limits of the connections this thread decodes: per connection, and per address among them.
  const guard = hasFloodLimits(d.ingest) ? new FloodGuard(d.ingest, path.edge.clockNs) : null;
  // What each connection holds back, for ingest thread 0's frame deadline and held-bytes budget.
  const cells = new Float64Array(m.inputConnections[d.producer - 1]!);
  const say = (conn: number, stream: IngestStream | null): void => {
    cells[conn * INP_CONN_STRIDE_F64 + INP_CONN_BUFFERED_F64] = stream === null ? 0 : stream.bufferedBytes;
    cells[conn * INP_CONN_STRIDE_F64 + INP_CONN_HELD_F64] = stream === null ? 0 : stream.heldBytes;
  };
  const handlers = {
    open: (conn: number, name: string, address: string): void => {
      const limits = guard === null ? null : guard.open(address);
      streams.set(conn, { stream: path.edge.openStream(name, limits), address });
    },
    data: (conn: number, bytes: Buffer): void => {
      const c = streams.get(conn);
      if (c === undefined) return;
      c.stream.write(bytes);
      say(conn, c.stream);
    },
    end: (conn: number, cutByStop: boolean): void => {
      const c = streams.get(conn);
      if (c === undefined) return;
      c.stream.end(cutByStop);
      guard?.release(c.address);
      streams.delete(conn);
      say(conn, null);
    },
  };
  const purge = setInterval(() => path.registry.purgeStale(), PURGE_INTERVAL_MS);
  purge.unref();
  let stopping = false;
  const pump = async (): Promise<void> => {
    while (!stopping) {
      if (reader.drain(handlers, d.ingest.readChunkBytes) === 0) await reader.ring.waitForDataAsync(PARK_MS);
      // A ring that never empties (thread 0 waiting for room) must not starve this thread's messages (a reload's
      // fences, the stop) and timers: yield after every pass.
      else await new Promise((resolve) => setImmediate(resolve));
    }
  };
  parentPort!.on('message', (msg: IngestPeerRequest) => {
    switch (msg.type) {
      case 'fences':
        path.predicates.store = FenceStore.open(msg.fences, LOOKUP_ONLY_STORE);
        post({ type: 'fenced' });
        return;
      case 'stop':
        stopping = true;
        // Thread 0 has closed its connections (their ends are forwarded): read what is left, end what is open.
        while (reader.drain(handlers, d.ingest.readChunkBytes) > 0) {
          // Each pass reads what the ring holds.
        }
        for (const c of streams.values()) c.stream.end(true);
        streams.clear();
        path.publisher.flush();
        clearInterval(purge);
        post({ type: 'stopped' });
        return;
    }
  });
  pump().catch((err: unknown) => {
    sayDead();
    post({ type: 'failed', error: err instanceof Error ? err.message : String(err) });
  });
  process.on('exit', sayDead);
  post({ type: 'ready' });
}

if (parentPort !== null && workerData !== null && (workerData as Partial<IngestPeerData>).producer !== undefined) {
  try {
    main();
  } catch (err) {
    sayDead();
    post({ type: 'failed', error: err instanceof Error ? err.message : String(err) });
  }
}
