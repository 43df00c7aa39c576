/**
 * The main thread's end of the callback bridge: the dispatcher thread posts each batch for an in-process callback
 * downstream through a MessagePort; this end calls the embedding's callback on the thread that created the router and
 * answers with the outcome and the callback's own duration (what the downstream's limiter samples).
 */
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { Trigger } from '../dispatch/trigger.js';
import type { CallbackAnswer, CallbackCall } from '../pipeline/messages.js';
import { nowNs } from '../shm/clock.js';
import { StreamLeftError } from './trigger-stream.js';

/** An embedding's callback, as `CallbackDownstreamOptions.callback` takes it. */
type Callback = (triggers: readonly Trigger[]) => Promise<void> | void;

/** An open bridge: the port to hand to the dispatcher thread, and how to close this end. */
export interface CallbackBridgeEnd {
  /** The dispatcher thread's end (transfer it in the thread's workerData). */
  readonly workerPort: MessagePort;
  /**
   * Answers every call of a callback downstream still running (not a trigger stream's: it lets go by itself) as the
   * downstream gone for this run, so its batch is kept for the next start; a later settling is ignored. Returns how
   * many calls it answered.
   */
  letGo(): number;
  /** Closes this end. */
  close(): void;
}

/** Told of a batch a callback failed (threw, or its promise rejected, or it ran past its timeout), with why. */
export type CallbackFailureListener = (downstream: number, triggers: number, err: unknown) => void;

/** A callback that ran past its downstream's `timeoutMs`: its batch failed and is sent again. */
class CallbackTimeoutError extends Error {
  override readonly name = 'CallbackTimeoutError';
}

/** What a callback threw, as one line of text (an Error's name and message; anything else as a string). */
export function callbackErrorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  try {
    return `threw ${typeof err === 'string' ? JSON.stringify(err) : String(err)}`;
  } catch {
    return 'threw a value that cannot be shown';
  }
}

/** What the bridge calls for one downstream. */
export interface BridgedCallback {
  /** The function called with each batch. */
  call: Callback;
  /**
   * How long a call may run, ms (null: no bound): past it the call fails with a CallbackTimeoutError, its batch is
   * sent again, and whatever the call does later is ignored.
   */
  timeoutMs: number | null;
  /** Whether `letGo` answers its running calls (a trigger stream lets go of its batches by itself). */
  letGoAtDrain: boolean;
}

/** A call being answered: its downstream's entry, how to answer it (once), and how to stop its timer. */
interface RunningCall {
  callback: BridgedCallback;
  answer: (ok: boolean, err?: unknown, gone?: boolean) => void;
  clear: () => void;
}

/**
 * Opens the bridge for the downstreams' callbacks (by downstream index; null for a downstream that is neither a
 * callback nor a trigger stream), or returns null when none is. `onFailure` hears of every batch a callback failed (a
 * trigger stream's end aside: its batches fail as gone, which is no error of the embedding's).
 */
export function openCallbackBridge(
  callbacks: readonly (BridgedCallback | null)[],
  onFailure: CallbackFailureListener = () => undefined,
): CallbackBridgeEnd | null {
  if (!callbacks.some((c) => c !== null)) return null;
  const channel = new MessageChannel();
  const port = channel.port2;
  const running = new Map<number, RunningCall>();
  port.on('message', (call: CallbackCall) => {
    // The callback's own duration, measured here where it runs: the limiter samples this, not the round trip
    // through the message port (which also holds however long this thread was busy with other work).
    const startNs = nowNs();
    const callback = callbacks[call.downstream]!;
    const timeoutMs = callback.timeoutMs;
    let timer: NodeJS.Timeout | null = null;
    const answer = (ok: boolean, err?: unknown, letGo = false): void => {
      if (!running.delete(call.id)) return;
      if (timer !== null) clearTimeout(timer);
      const gone = letGo || err instanceof StreamLeftError;
      port.postMessage({ id: call.id, ok, serviceNs: nowNs() - startNs, gone } satisfies CallbackAnswer);
      if (!ok && !gone) onFailure(call.downstream, call.triggers.length, err);
    };
    running.set(call.id, { callback, answer, clear: () => timer !== null && clearTimeout(timer) });
    if (timeoutMs !== null) {
      timer = setTimeout(
        () => answer(false, new CallbackTimeoutError(`not settled within ${timeoutMs} ms (timeoutMs)`)),
        timeoutMs,
      );
      // A call still running keeps no process alive by its timer.
      timer.unref();
    }
    try {
      const r = callback.call(call.triggers as Trigger[]);
      if (r !== undefined && r !== null && typeof (r as Promise<void>).then === 'function') {
        (r as Promise<void>).then(
          () => answer(true),
          (err: unknown) => answer(false, err),
        );
      } else {
        answer(true);
      }
    } catch (err) {
      answer(false, err);
    }
  });
  return {
    workerPort: channel.port1,
    letGo: () => {
      let n = 0;
      for (const c of [...running.values()]) {
        if (!c.callback.letGoAtDrain) continue;
        c.answer(false, undefined, true);
        n++;
      }
      return n;
    },
    close: () => {
      // Nothing answers any more: the calls still running are forgotten, their timers stopped.
      for (const c of running.values()) c.clear();
      running.clear();
      port.close();
    },
  };
}
