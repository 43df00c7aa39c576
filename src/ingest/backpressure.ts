/**
 * Backpressure for pausable sources (ingest thread): files, stdin, the embedding's `ingest()` / `push()`, and TCP
 * connections whose listener is configured to wait. Such a source is never shed: a frame is handed to the edge only
 * when its telemetry ring has room for it, and otherwise the source stops reading and keeps the bytes it has not fed.
 *
 * The decoder turns a read chunk into pings synchronously, so "room for the frame" is decided before the bytes are
 * fed: a piece of a chunk is fed only when every ping it can complete fits. A valid ping frame is at least
 * MIN_PING_FRAME_BYTES long and the pings of a stream occupy disjoint bytes, so `held + piece` bytes (the stream's
 * held partial frame and the new piece) complete at most `(held + piece) / MIN_PING_FRAME_BYTES` pings; the piece is
 * sized so that this never exceeds the room of the fullest ring (wherever the pings go). Pieces go on while the
 * fullest ring is below the pause depth (the admission watermark: live sources sharing the rings keep the part above
 * it), and up to the lanes' limit; a waiting feed retries on a short timer shared by every feed of the thread, so a
 * paused source costs nothing between polls and the thread's event loop keeps serving the live sources.
 *
 * Only pieces are allocated (a subarray view each), never per ping.
 */
import type { IngestStream } from './ingest-edge.js';

/**
 * Fewest bytes a valid ping frame takes: a map or record header and the four required values (id, lat, lon, ts), one
 * byte each at the least (a msgpackr shared-structure record carries no keys). What bounds the pings a piece can hold.
 */
export const MIN_PING_FRAME_BYTES = 5;

/** How often a waiting feed looks at the rings again, ms. */
const ROOM_POLL_MS = 1;

/** Bytes one feed hands to the edge per turn of the event loop at most, before it lets other work run. */
const FEED_BYTES_PER_TURN = 256 * 1024;

/** How much the telemetry rings can take now from a pausable source. */
export interface RingRoom {
  /**
   * Pings that can be admitted now whichever rings they go to, without any admission limit being reached: 0 while the
   * fullest ring is at or above the pause depth (the source waits).
   */
  pings(): number;
  /** True when the last `pings()` found every ring empty (nothing more will be freed by waiting). */
  empty(): boolean;
}

/** A RingRoom that always has room (an edge with no rings behind it, e.g. in unit tests). */
export const UNBOUNDED_ROOM: RingRoom = {
  pings: () => Number.MAX_SAFE_INTEGER,
  empty: () => true,
};

/**
 * Bytes of `available` a stream may take now: as many as keep every ping they and its held partial frame can complete
 * within the room. 0 means wait. When the rings are empty and the held partial frame alone exceeds what the room
 * allows (a frame far longer than the rings are deep), one minimum frame's worth is fed: bytes that short can
 * complete only the held frame.
 */
function feedableBytes(room: RingRoom, stream: IngestStream, available: number): number {
  const pings = room.pings();
  if (pings <= 0) return 0;
  let bytes = pings * MIN_PING_FRAME_BYTES - stream.bufferedBytes;
  if (bytes <= 0) {
    if (!room.empty()) return 0;
    bytes = MIN_PING_FRAME_BYTES;
  }
  return bytes < available ? bytes : available;
}

/**
 * Retries waiting feeds on one short timer (ingest thread). A feed that found no room registers its retry; the timer
 * runs every registered retry once, in registration order, and a retry that still finds no room registers again.
 */
export class RoomWaiter {
  /** Poll period, ms. */
  readonly pollMs: number;
  private waiting: (() => void)[] = [];
  private spare: (() => void)[] = [];
  private timer: NodeJS.Timeout | null = null;

  /** A waiter polling every `pollMs` (an integer >= 1) while some feed waits. */
  constructor(pollMs = ROOM_POLL_MS) {
    if (!(Number.isInteger(pollMs) && pollMs >= 1))
      throw new RangeError(`pollMs must be an integer >= 1, got ${String(pollMs)}`);
    this.pollMs = pollMs;
  }

  /** Runs `retry` at the next poll. */
  wait(retry: () => void): void {
    this.waiting.push(retry);
    if (this.timer === null) this.timer = setTimeout(this.poll, this.pollMs);
  }

  /** Retries registered and not yet run. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  private readonly poll = (): void => {
    this.timer = null;
    // Swap the lists: a retry that waits again lands on the fresh one, for the next poll.
    const run = this.waiting;
    this.waiting = this.spare;
    this.spare = run;
    for (let i = 0; i < run.length; i++) run[i]!();
    run.length = 0;
  };

  /** Drops every waiting retry and the timer (the thread is closing). */
  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.waiting.length = 0;
  }
}

/** What a PausableFeed reports to its source. */
export interface PausableFeedHooks {
  /** `bytes` more were handed to the edge (backlog accounting). */
  onFed?: (bytes: number) => void;
  /** Every byte kept back has been fed since `write()` last returned false: the source may read again. */
  onResume?: () => void;
}

/** One written chunk waiting in a feed. */
interface KeptChunk {
  bytes: Uint8Array;
  /** End the stream's frame state after this chunk (the end of one `ingest()` call). */
  endAfter: boolean;
}

/**
 * One pausable source's byte stream into the edge: feeds what the rings take, keeps the rest in order, and says when
 * the source must pause (`write()` returns false) and when it may read again (`onResume`). Ingest thread.
 */
export class PausableFeed {
  /** The edge stream the bytes go to. */
  readonly stream: IngestStream;
  private readonly room: RingRoom;
  private readonly waiter: RoomWaiter;
  private readonly hooks: PausableFeedHooks;
  private readonly chunks: KeptChunk[] = [];
  private head = 0;
  private offset = 0;
  private kept = 0;
  /** write() returned false since the last onResume. */
  private paused = false;
  /** A retry is scheduled (timer or next turn): write() only queues. */
  private scheduled = false;
  private ending = false;
  /** `end(true)`: the partial frame left at the end counts as cut_at_stop. */
  private cutByStop = false;
  private ended = false;
  private endWaiters: (() => void)[] = [];

  /** A feed into `stream`, sized by `room`, retried by `waiter`, reporting through `hooks`. */
  constructor(stream: IngestStream, room: RingRoom, waiter: RoomWaiter, hooks: PausableFeedHooks = {}) {
    this.stream = stream;
    this.room = room;
    this.waiter = waiter;
    this.hooks = hooks;
  }

  /** Bytes written and not yet fed. */
  get keptBytes(): number {
    return this.kept;
  }

  /** True once `end()` has taken effect (every byte fed, the stream ended). */
  get isEnded(): boolean {
    return this.ended;
  }

  /**
   * Feeds `chunk` as far as the rings allow and keeps the rest (the chunk is kept by reference: the caller must not
   * reuse it). Returns false when bytes were kept: the source pauses until `onResume`. With `endAfter`, the stream's
   * frame state ends after the chunk (a partial frame left then counts as truncated), as for one `ingest()` call.
   */
  write(chunk: Uint8Array, endAfter = false): boolean {
    if (this.ending) return true;
    if (chunk.length === 0 && !endAfter) return this.kept === 0;
    this.chunks.push({ bytes: chunk, endAfter });
    this.kept += chunk.length;
    if (!this.scheduled) this.pump();
    if (this.kept > 0 || this.head < this.chunks.length) {
      this.paused = true;
      return false;
    }
    return true;
  }

  /**
   * Ends the stream once every kept byte is fed; resolves then. Idempotent, except that `cutByStop` given by any call
   * before the stream has ended applies: the router stopped reading the source (its partial frame left counts as
   * cut_at_stop, not truncated).
   */
  end(cutByStop = false): Promise<void> {
    if (this.ended) return Promise.resolve();
    if (cutByStop) this.cutByStop = true;
    const done = new Promise<void>((resolve) => this.endWaiters.push(resolve));
    if (!this.ending) {
      this.ending = true;
      if (!this.scheduled) this.pump();
    }
    return done;
  }

  private readonly pump = (): void => {
    this.scheduled = false;
    const chunks = this.chunks;
    let fedThisTurn = 0;
    while (this.head < chunks.length) {
      const c = chunks[this.head]!;
      const left = c.bytes.length - this.offset;
      if (left > 0) {
        const n = feedableBytes(this.room, this.stream, left);
        if (n === 0) {
          this.scheduled = true;
          this.waiter.wait(this.pump);
          return;
        }
        this.stream.write(n === c.bytes.length ? c.bytes : c.bytes.subarray(this.offset, this.offset + n));
        this.offset += n;
        this.kept -= n;
        fedThisTurn += n;
        this.hooks.onFed?.(n);
        if (this.offset < c.bytes.length) {
          if (fedThisTurn >= FEED_BYTES_PER_TURN) return this.yieldTurn();
          continue;
        }
      }
      if (c.endAfter) this.stream.end();
      this.head++;
      this.offset = 0;
      if (fedThisTurn >= FEED_BYTES_PER_TURN && this.head < chunks.length) return this.yieldTurn();
    }
    chunks.length = 0;
    this.head = 0;
    if (this.ending && !this.ended) {
      this.ended = true;
      this.stream.end(this.cutByStop);
      for (const w of this.endWaiters.splice(0)) w();
    }
    if (this.paused) {
      this.paused = false;
      this.hooks.onResume?.();
    }
  };

  /** Continues on the next turn of the event loop, so a long backlog never holds the thread. */
  private yieldTurn(): void {
    this.scheduled = true;
    setImmediate(this.pump);
  }
}
