/**
 * Main-thread helpers of the router: a pipeline thread with its request channel, and the downstream options turned
 * into the structured-clone-safe specs the dispatcher thread builds its downstreams from.
 */
import { Worker, type MessagePort } from 'node:worker_threads';
import type { RouterOptions } from '../config/options.js';
import { TRIGGER_TYPE_NAMES } from '../shm/layout.js';
import type { DownstreamSpec } from './dispatch-wiring.js';
import { Requester, type LogLevel, type ThreadEvent } from './messages.js';

/** A pipeline thread and its request channel. */
export class ThreadHandle {
  readonly worker: Worker;
  readonly requests: Requester;
  readonly started: Promise<number>;
  private exited = false;

  /**
   * Starts the thread; `started` resolves with the port it reports (or rejects when it fails to start). `onDrained`
   * receives the thread's backlog wake-ups ('input-drained' events).
   */
  constructor(
    url: URL,
    data: unknown,
    transfer: MessagePort[],
    name: string,
    log: (line: string, level?: LogLevel) => void,
    onInputsDone: () => void,
    onDrained: (which: 'input' | 'stdin') => void = () => undefined,
  ) {
    this.worker = new Worker(url, { workerData: data, transferList: transfer, name });
    this.requests = new Requester(this.worker, name);
    this.started = new Promise((resolve, reject) => {
      this.worker.on('message', (e: ThreadEvent) => {
        if (e.type === 'started') resolve(e.port);
        else if (e.type === 'failed') reject(new Error(`${name}: ${e.error}`));
        else if (e.type === 'reply') this.requests.onReply(e.id, e.error);
        else if (e.type === 'log') log(e.line, e.level);
        else if (e.type === 'inputs-done') onInputsDone();
        else if (e.type === 'input-drained') onDrained(e.which);
      });
      this.worker.on('error', (err) => {
        log(`${name} failed: ${err.stack ?? err.message}`);
        reject(err);
        this.requests.failAll(err.message);
      });
      this.worker.on('exit', (code) => {
        this.exited = true;
        reject(new Error(`${name} exited with code ${code} before it started`));
        this.requests.failAll(`exited with code ${code}`);
      });
    });
    // A failed start is reported through `started`; keep an unobserved rejection from crashing the process.
    this.started.catch(() => undefined);
  }

  /** Terminates the thread unless it has exited. */
  async stop(): Promise<void> {
    if (!this.exited) await this.worker.terminate();
  }
}

/** The downstream options as the dispatcher thread receives them (callbacks stay on the main thread). */
export function downstreamSpecs(o: RouterOptions): DownstreamSpec[] {
  return o.downstreams.map((d) => {
    const s: DownstreamSpec = { name: d.name, kind: d.kind };
    if (d.kind === 'webhook') {
      s.url = d.url;
      if (d.timeoutMs !== undefined) s.timeoutMs = d.timeoutMs;
    }
    if (d.kind === 'ndjson') s.path = d.path;
    if (d.subscribe !== undefined) {
      const sub: NonNullable<DownstreamSpec['subscription']> = {};
      if (d.subscribe.fenceIds !== undefined) sub.fenceIds = d.subscribe.fenceIds;
      if (d.subscribe.tags !== undefined) sub.tags = d.subscribe.tags;
      if (d.subscribe.types !== undefined)
        sub.types = d.subscribe.types.map((t) => (TRIGGER_TYPE_NAMES as readonly string[]).indexOf(t));
      s.subscription = sub;
    }
    if (d.limit !== undefined) s.limit = d.limit;
    if (d.gradient !== undefined) s.gradient = { ...d.gradient };
    if (d.safetyCap !== undefined) s.safetyCap = d.safetyCap;
    if (d.maxBatchTriggers !== undefined) s.maxBatchTriggers = d.maxBatchTriggers;
    if (d.queueCapacitySlots !== undefined) s.queueCapacitySlots = d.queueCapacitySlots;
    if (d.maxQueueAgeMs !== undefined) s.maxQueueAgeMs = d.maxQueueAgeMs;
    if (d.maxAttempts !== undefined) s.maxAttempts = d.maxAttempts;
    if (d.replay !== undefined) s.replay = d.replay;
    if (d.backlogMaxBytes !== undefined) s.backlogMaxBytes = d.backlogMaxBytes;
    // The dead-letter budgets are router-wide options, applied to each downstream.
    s.deadLetterMaxBytes = o.deadLetter.maxBytesPerDownstream;
    s.deadLetterMaxAgeMs = o.deadLetter.maxAgeMs;
    return s;
  });
}
