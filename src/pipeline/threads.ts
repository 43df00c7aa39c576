/**
 * Main-thread helpers of the router: a pipeline thread with its request channel, and the downstream options turned
 * into the structured-clone-safe specs the dispatcher thread builds its downstreams from.
 */
import { Worker, type MessagePort } from 'node:worker_threads';
import type { RouterOptions } from '../config/options.js';
import type { DownstreamSpec } from './dispatch-wiring.js';
import type { LogFn } from '../log/router-log.js';
import { Requester, type ThreadEvent } from './messages.js';

/** A pipeline thread and its request channel. */
export class ThreadHandle {
  readonly worker: Worker;
  readonly requests: Requester;
  readonly started: Promise<number>;
  /** Resolves when the thread says 'ready' (the ingest thread, before its 'begin') or has started; rejects as `started`. */
  readonly ready: Promise<void>;
  /** Rejects (naming the thread and its exit code) when the thread exits without being asked to; never resolves. */
  readonly death: Promise<never>;
  private exited = false;
  /** The thread reported its start. */
  private running = false;
  /** stop() was called: an exit after it is the expected one. */
  private stopping = false;

  /**
   * Starts the thread; `started` resolves with the port it reports (or rejects when it fails to start). `onDrained`
   * receives the thread's backlog wake-ups ('input-drained' events).
   */
  constructor(
    url: URL,
    data: unknown,
    transfer: MessagePort[],
    name: string,
    log: LogFn,
    onInputsDone: () => void,
    onDrained: (which: 'input' | 'stdin') => void = () => undefined,
  ) {
    this.worker = new Worker(url, { workerData: data, transferList: transfer, name });
    let died: (err: Error) => void = () => undefined;
    this.death = new Promise<never>((_resolve, reject) => (died = reject));
    this.death.catch(() => undefined);
    this.requests = new Requester(this.worker, name);
    // The `thread` field of its log lines: "ingest" for the "ingest thread".
    const thread = name.replace(/ thread$/, '');
    let isReady: () => void = () => undefined;
    let notReady: (err: Error) => void = () => undefined;
    this.ready = new Promise<void>((resolve, reject) => {
      isReady = resolve;
      notReady = reject;
    });
    this.started = new Promise((resolve, reject) => {
      this.worker.on('message', (e: ThreadEvent) => {
        if (e.type === 'ready') isReady();
        else if (e.type === 'started') {
          this.running = true;
          isReady();
          resolve(e.port);
        } else if (e.type === 'failed') reject(new Error(`${name}: ${e.error}`));
        else if (e.type === 'reply') this.requests.onReply(e.id, e.error);
        else if (e.type === 'log') log(e.line, e.level ?? 'info', { ...e.fields, thread });
        else if (e.type === 'inputs-done') onInputsDone();
        else if (e.type === 'input-drained') onDrained(e.which);
      });
      this.worker.on('error', (err) => {
        log(`${name} failed: ${err.stack ?? err.message}`, 'error', { thread });
        reject(err);
        this.requests.failAll(err.message);
      });
      this.worker.on('exit', (code) => {
        this.exited = true;
        // An exit nobody asked for: the thread's work has stopped (/healthz says so too).
        if (!this.stopping) died(new Error(`the ${name} exited with code ${code}`));
        if (this.running && !this.stopping) log(`${name} exited with code ${code}`, 'error', { thread });
        reject(new Error(`${name} exited with code ${code} before it started`));
        this.requests.failAll(`exited with code ${code}`);
      });
    });
    this.started.catch((err: Error) => notReady(err));
    // A failed start is reported through `started` and `ready`; keep an unobserved rejection from crashing the process.
    this.ready.catch(() => undefined);
  }

  /** True once the thread has exited without being asked to (stop()). */
  get died(): boolean {
    return this.exited && !this.stopping;
  }

  /** Terminates the thread unless it has exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (!this.exited) await this.worker.terminate();
  }
}

/** The downstream options as the dispatcher thread receives them (callbacks stay on the main thread). */
export function downstreamSpecs(o: RouterOptions): DownstreamSpec[] {
  return o.downstreams.map((d) => {
    // The dead-letter budgets are router-wide options, applied to each downstream.
    const budgets = {
      deadLetterMaxBytes: o.deadLetter.maxBytesPerDownstream,
      deadLetterMaxAgeMs: o.deadLetter.maxAgeMs,
    };
    if (d.kind !== 'callback') return { ...d, ...budgets };
    const { callback: _callback, ...rest } = d;
    return { ...rest, ...budgets };
  });
}
