/**
 * Messages between the main thread and the pipeline threads, and a small request/reply helper. Control traffic
 * only (start, pause, resume, drain, close, embedding input, backlog wake-ups): no message is sent per event except
 * `push`.
 */
import type { LogFields, LogLevel } from '../log/router-log.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { TelemetryPoint } from '../ingest/ping-fields.js';

/** Main -> ingest thread. */
export type IngestRequest =
  /** Start taking input (the thread said 'ready': warmed, its sources prepared). */
  | { type: 'begin' }
  | { type: 'ingest'; bytes: Uint8Array }
  | { type: 'push'; point: TelemetryPoint }
  | { type: 'stream-data'; bytes: Uint8Array }
  | { type: 'stream-end' }
  | { type: 'pause'; id: number }
  | { type: 'resume'; id: number; fences: FenceStoreDescriptor }
  | { type: 'drain'; id: number }
  | { type: 'close'; id: number };

/** Main -> dispatcher thread. */
export type DispatcherRequest =
  | { type: 'fences'; id: number; fences: FenceStoreDescriptor }
  | { type: 'drain'; id: number; deadlineMs: number }
  | { type: 'close'; id: number; deadlineMs: number }
  /**
   * Sent after a state copy: resolves once containment has processed the pings of any batch in progress when the
   * request arrived (at most `batchRecords` past each telemetry ring's read position), the dispatcher has taken every
   * trigger published by then, and no trigger it had taken by then is held only in memory; fails after `withinMs`,
   * naming what is not. With `delivered`, right after one without that held: resolves once none of the same triggers
   * is undelivered at all (see Dispatcher.undeliveredTakenBy).
   */
  | {
      type: 'handed-on';
      id: number;
      batchRecords: number;
      withinMs: number;
      delivered: boolean;
    };

/** Pipeline thread -> main. */
export type ThreadEvent =
  /** The ingest thread is warmed and its sources prepared; it takes no input before 'begin'. */
  | { type: 'ready' }
  | { type: 'started'; port: number }
  | { type: 'failed'; error: string }
  | { type: 'reply'; id: number; error?: string }
  | { type: 'inputs-done' }
  /**
   * The in-process input backlog (`which: 'input'`) or the forwarded stdin backlog (`'stdin'`) reached its low-water
   * mark while the main thread waited for it (see input-backlog.ts): one per wait.
   */
  | { type: 'input-drained'; which: 'input' | 'stdin' }
  /** A log line (level 'info' when absent) with its fields; the main thread adds the thread's name. */
  | { type: 'log'; line: string; level?: LogLevel; fields?: LogFields };

/** Dispatcher thread -> main, over the callback bridge: one batch for the callback of downstream `downstream`. */
export interface CallbackCall {
  /** Call id, echoed in the answer. */
  id: number;
  /** Index of the downstream (in the router's downstream list). */
  downstream: number;
  /** The triggers. */
  triggers: unknown[];
}

/** Main -> dispatcher thread over the bridge: the callback's outcome. */
export interface CallbackAnswer {
  /** Call id. */
  id: number;
  /** True when the callback completed; false when it threw or rejected. */
  ok: boolean;
  /** How long the callback took, ns, measured on the thread that ran it. */
  serviceNs: number;
  /** The call failed because its downstream is gone for the run (a trigger stream whose loop left). */
  gone: boolean;
}

/** The side of a thread pair that sends requests and awaits replies. */
export interface RequestTarget {
  postMessage(message: unknown): void;
}

/** Sends requests carrying an `id` and resolves them when the matching `reply` event arrives. Main thread. */
export class Requester {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private readonly target: RequestTarget;
  private readonly what: string;
  /** Why every request now fails at once (the thread exited), or null while it runs. */
  private gone: string | null = null;

  /** `what` names the thread in errors. */
  constructor(target: RequestTarget, what: string) {
    this.target = target;
    this.what = what;
  }

  /** Sends `message` with a fresh id; resolves on its reply, rejects with the thread's error. */
  request<M extends { id: number }>(message: Omit<M, 'id'>): Promise<void> {
    if (this.gone !== null) return Promise.reject(new Error(`${this.what}: ${this.gone}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.target.postMessage({ ...message, id });
    });
  }

  /** Handles a reply event. */
  onReply(id: number, error: string | undefined): void {
    const p = this.pending.get(id);
    if (p === undefined) return;
    this.pending.delete(id);
    if (error === undefined) p.resolve();
    else p.reject(new Error(`${this.what}: ${error}`));
  }

  /** Rejects every pending request and every later one (the thread exited). */
  failAll(reason: string): void {
    this.gone = reason;
    for (const p of this.pending.values()) p.reject(new Error(`${this.what}: ${reason}`));
    this.pending.clear();
  }
}
