/**
 * A trigger stream: a downstream an embedding reads with `for await (const batch of router.triggers(name))`.
 *
 * It is a downstream like any other (its own limiter, per-device FIFOs, backlog log, breaker and dead letters),
 * reached through the callback bridge: each batch the dispatcher sends waits here until the loop takes it, and counts
 * as delivered when the loop comes back for the next one. So a consumer slower than the trigger
 * rate holds at most the batches in flight (the limit, under its safety cap); the rest waits in the dispatcher's
 * bounded queues and its backlog log, in per-device order, as for a slow webhook. The time a batch waits for the loop
 * is what the limiter samples. Leaving the loop (a break, or an exception thrown in it) does not count the batch the
 * loop held: it fails, and is sent again under the same identities (to the next start's stream), since the loop may
 * have left it half handled. A stream has one consumer. Once its loop has left, the downstream is gone for this run
 * (Downstream.markGone): nothing more is sent to it, and what it holds or gets from then on is kept in the
 * state directory for the stream of the next start: the batches in flight when it left fail as gone
 * (StreamLeftError), using up no attempt, and nothing is dead-lettered for want of a receiver.
 */
import type { Trigger } from '../dispatch/trigger.js';

/**
 * Why a batch of a stream whose loop left failed: the callback bridge answers it as gone (SinkResult.gone), so the
 * dispatcher sends the stream nothing more and the batch uses up no attempt.
 */
export class StreamLeftError extends Error {
  constructor(name: string) {
    super(`trigger stream ${name}: its loop has left`);
    this.name = 'StreamLeftError';
  }
}

/** A batch waiting for the loop, with how to settle its delivery. */
interface Pending {
  batch: readonly Trigger[];
  delivered: () => void;
  failed: (err: Error) => void;
}

/** One stream downstream's main-thread end (see the module comment). */
export class TriggerStream implements AsyncIterableIterator<readonly Trigger[]> {
  /** The downstream's name. */
  readonly name: string;
  private readonly waiting: Pending[] = [];
  /** The batch the loop holds now (delivered when it asks for the next, failed if it leaves). */
  private current: Pending | null = null;
  /** The loop's pending `next()`, waiting for a batch. */
  private pull: ((r: IteratorResult<readonly Trigger[]>) => void) | null = null;
  private taken = false;
  private ended = false;
  constructor(name: string) {
    this.name = name;
  }

  /** The downstream's callback: resolves once the loop has taken and finished the batch; rejects once the stream ended. */
  readonly deliver = (batch: readonly Trigger[]): Promise<void> => {
    if (this.ended) return Promise.reject(new StreamLeftError(this.name));
    return new Promise<void>((delivered, failed) => {
      const p: Pending = { batch, delivered, failed };
      const pull = this.pull;
      if (pull !== null) {
        this.pull = null;
        this.current = p;
        pull({ value: batch, done: false });
      } else {
        this.waiting.push(p);
      }
    });
  };

  /** Batches waiting for the loop (at most the downstream's in-flight requests). */
  get waitingBatches(): number {
    return this.waiting.length;
  }

  /** The stream itself; it has one consumer, so a second iteration is refused. */
  [Symbol.asyncIterator](): this {
    if (this.taken) throw new Error(`trigger stream ${this.name} is already being read (one consumer per stream)`);
    this.taken = true;
    return this;
  }

  /** The next batch: the one before it is delivered now. */
  next(): Promise<IteratorResult<readonly Trigger[]>> {
    this.settleCurrent();
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    const p = this.waiting.shift();
    if (p !== undefined) {
      this.current = p;
      return Promise.resolve({ value: p.batch, done: false });
    }
    if (this.pull !== null)
      return Promise.reject(new Error(`trigger stream ${this.name}: next() called twice at once`));
    return new Promise((resolve) => (this.pull = resolve));
  }

  /**
   * Leaving the loop: the batch it held fails as gone (it is sent again, see the module comment), and so does every
   * batch sent to the stream from now on; the stream ends.
   */
  return(): Promise<IteratorResult<readonly Trigger[]>> {
    const c = this.current;
    this.current = null;
    c?.failed(new StreamLeftError(this.name));
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  /**
   * The router's drain deadline passed: the batches waiting for the loop fail as gone, as when the loop leaves (kept in
   * the state directory for the next start's stream), and the stream ends: the loop's next `next()` counts the batch
   * it holds as delivered and ends the loop. Returns the batches let go.
   */
  letGo(): number {
    if (this.ended) return 0;
    const n = this.waiting.length;
    this.end();
    return n;
  }

  /**
   * Some time after `letGo`, the batch the loop still holds fails as gone too (it comes again at the next start,
   * under the same identities): a loop that awaits the router's close inside its body never comes back for the next
   * one. Returns 1 when there was one.
   */
  letGoHeld(): number {
    const c = this.current;
    if (c === null) return 0;
    this.current = null;
    c.failed(new StreamLeftError(this.name));
    return 1;
  }

  /** Ends the stream (its loop ends after the batch it holds; batches not taken fail). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const p of this.waiting.splice(0)) p.failed(new StreamLeftError(this.name));
    const pull = this.pull;
    this.pull = null;
    pull?.({ value: undefined, done: true });
  }

  private settleCurrent(): void {
    const c = this.current;
    this.current = null;
    c?.delivered();
  }
}
