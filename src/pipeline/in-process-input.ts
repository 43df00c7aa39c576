/**
 * The embedding's input on the ingest thread: `router.ingest()` bytes and `router.push()` points arrive as messages,
 * in call order, and are fed to the edge as a pausable source, never shed: bytes through a PausableFeed (each call's
 * bytes end like one stream, so a partial frame at the end of a call counts as truncated), a point when the rings
 * have room for one ping. What waits is kept here in order; the main thread bounds it by telling its callers to wait
 * (see input-backlog.ts), and every byte and point fed is taken off the shared backlog.
 */
import type { PausableFeed, RingRoom, RoomWaiter } from '../ingest/backpressure.js';
import type { TelemetryPoint } from '../ingest/ping-fields.js';
import type { InputBacklog } from './input-backlog.js';
import type { AdmissionSink, PipelineEdge } from './ingest-wiring.js';
import type { ShardScheduler } from './shard-scheduler.js';

/** Calls handled per turn of the event loop at most, before other work (TCP reads, replies) runs. */
const CALLS_PER_TURN = 4096;

/** One queued call. */
type InProcessCall = { type: 'ingest'; bytes: Uint8Array } | { type: 'push'; point: TelemetryPoint };

/** What InProcessInput is wired to. */
export interface InProcessInputDeps {
  /** The pipeline's edge (points go through its `push`). */
  edge: PipelineEdge;
  /** The admission sink (points are offered as a pausable source's). */
  sink: AdmissionSink;
  /** Publishes after each point. */
  scheduler: ShardScheduler;
  /** The rings' room for pausable sources. */
  room: RingRoom;
  /** Retries a point that found no room. */
  waiter: RoomWaiter;
  /** The shared backlog the main thread counts calls into. */
  backlog: InputBacklog;
  /** Posts the 'input-drained' wake-up. */
  wake: () => void;
}

/** The in-process calls in flight on the ingest thread. Ingest thread only. */
export class InProcessInput {
  private readonly d: InProcessInputDeps;
  private readonly feed: PausableFeed;
  private readonly queue: InProcessCall[] = [];
  private head = 0;
  /** A retry is scheduled (room timer, feed resume or next turn): new calls only queue. */
  private scheduled = false;
  private idleWaiters: (() => void)[] = [];

  /** Opens the 'in-process' feed on the edge; calls are taken from then on. */
  constructor(d: InProcessInputDeps) {
    this.d = d;
    this.feed = d.edge.openFeed('in-process', {
      onFed: (bytes) => {
        if (d.backlog.fedInput(bytes, 0)) d.wake();
      },
      onResume: () => this.pump(),
    });
  }

  /** Calls waiting (queued, or bytes of one kept by the feed). */
  get pending(): number {
    return this.queue.length - this.head + (this.feed.keptBytes > 0 ? 1 : 0);
  }

  /** Takes one `ingest()` call's bytes. */
  ingest(bytes: Uint8Array): void {
    this.queue.push({ type: 'ingest', bytes });
    if (!this.scheduled) this.pump();
  }

  /** Takes one `push()` call's point. */
  push(point: TelemetryPoint): void {
    this.queue.push({ type: 'push', point });
    if (!this.scheduled) this.pump();
  }

  /** Resolves once every call so far has been fed (drain waits for it: what a caller handed over is not dropped). */
  idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private readonly pump = (): void => {
    this.scheduled = false;
    const d = this.d;
    // Bytes of an earlier call still kept: everything after them waits (call order), and the feed resumes us.
    if (this.feed.keptBytes > 0) {
      this.scheduled = true;
      return;
    }
    const queue = this.queue;
    let calls = 0;
    while (this.head < queue.length) {
      if (calls++ >= CALLS_PER_TURN) {
        this.scheduled = true;
        setImmediate(this.pump);
        return;
      }
      // A queue that never empties under steady calls would keep every call it took: drop the taken ones now and then.
      if (this.head >= 1024 && this.head * 2 >= queue.length) {
        queue.splice(0, this.head);
        this.head = 0;
      }
      const call = queue[this.head]!;
      if (call.type === 'ingest') {
        this.head++;
        if (!this.feed.write(call.bytes, true)) {
          this.scheduled = true;
          return;
        }
        continue;
      }
      if (d.room.pings() < 1) {
        this.scheduled = true;
        d.waiter.wait(this.pump);
        return;
      }
      this.head++;
      d.sink.tick();
      d.sink.pausable = true;
      try {
        d.edge.push(call.point);
      } finally {
        d.sink.pausable = false;
      }
      d.scheduler.flush();
      if (d.backlog.fedInput(0, 1)) d.wake();
    }
    queue.length = 0;
    this.head = 0;
    if (this.idleWaiters.length > 0) for (const w of this.idleWaiters.splice(0)) w();
  };
}
