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
  /** Closes this end. */
  close(): void;
}

/** Told of a batch a callback failed (threw, or its promise rejected), with what it threw. */
export type CallbackFailureListener = (downstream: number, triggers: number, err: unknown) => void;

/** What a callback threw, as one line of text (an Error's name and message; anything else as a string). */
export function callbackErrorText(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  try {
    return `threw ${typeof err === 'string' ? JSON.stringify(err) : String(err)}`;
  } catch {
    return 'threw a value that cannot be shown';
  }
}

/**
 * Opens the bridge for the downstreams' callbacks (by downstream index; null for a downstream that is not a
 * callback), or returns null when none is. `onFailure` hears of every batch a callback failed (a trigger stream's
 * end aside: its batches fail as gone, which is no error of the embedding's).
 */
export function openCallbackBridge(
  callbacks: readonly (Callback | null)[],
  onFailure: CallbackFailureListener = () => undefined,
): CallbackBridgeEnd | null {
  if (!callbacks.some((c) => c !== null)) return null;
  const channel = new MessageChannel();
  const port = channel.port2;
  port.on('message', (call: CallbackCall) => {
    // The callback's own duration, measured here where it runs: the limiter samples this, not the round trip
    // through the message port (which also holds however long this thread was busy with other work).
    const startNs = nowNs();
    const answer = (ok: boolean, err?: unknown): void => {
      const gone = err instanceof StreamLeftError;
      port.postMessage({ id: call.id, ok, serviceNs: nowNs() - startNs, gone } satisfies CallbackAnswer);
      if (!ok && !gone) onFailure(call.downstream, call.triggers.length, err);
    };
    try {
      const r = callbacks[call.downstream]!(call.triggers as Trigger[]);
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
  return { workerPort: channel.port1, close: () => port.close() };
}
