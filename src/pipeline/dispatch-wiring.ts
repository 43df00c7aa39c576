/**
 * The dispatcher thread's wiring: naming triggers from the shared device id table and the fence stores of every
 * generation still referenced, the held-time probe in front of each sink, the bridge to callbacks that live on the
 * main thread, and building Dispatcher downstream options from the router's serialisable downstream specs.
 */
import type { MessagePort } from 'node:worker_threads';
import { DeviceIdReader } from '../ingest/device-registry.js';
import type { FenceStore } from '../fences/store.js';
import { AimdLimit, FixedLimit, Gradient2Limit, GradientLimit, VegasLimit, type Limit } from '../dispatch/limits/index.js';
import type { GradientLimitOptions } from '../dispatch/limits/gradient-limit.js';
import type { DownstreamOptions as DispatchDownstreamOptions } from '../dispatch/downstream.js';
import type { Subscription } from '../dispatch/router.js';
import { NdjsonSink } from '../dispatch/sinks/ndjson-sink.js';
import type { Sink, SinkResult } from '../dispatch/sinks/sink.js';
import type { TriggerBatch } from '../dispatch/sinks/trigger-batch.js';
import type { TriggerNamer } from '../dispatch/sinks/format.js';
import { WebhookSink } from '../dispatch/sinks/webhook-sink.js';
import type { ClockNs } from '../shm/clock.js';
import { LANE_NAMES, TRIGGER_TYPE_NAMES, type TriggerType } from '../shm/layout.js';
import { recordHeldTime } from './held-time.js';
import type { CallbackAnswer, CallbackCall } from './messages.js';
import type { Trigger } from './trigger.js';

/** A downstream as the main thread hands it to the dispatcher thread (no functions: structured-clone safe). */
export interface DownstreamSpec {
  /** Name. */
  name: string;
  /** Transport. */
  kind: 'webhook' | 'ndjson' | 'callback';
  /** Webhook URL. */
  url?: string;
  /** NDJSON path ("-": stdout). */
  path?: string;
  /** Webhook timeout, ms. */
  timeoutMs?: number;
  /** Subscription (types as TriggerType numbers). */
  subscription?: { fenceIds?: string[]; tags?: string[]; types?: number[] };
  /** Limit algorithm or fixed limit. */
  limit?: string | number;
  /** Gradient limit tuning (with limit 'gradient' or absent). */
  gradient?: Partial<GradientLimitOptions>;
  /** Dispatcher tuning, passed through when set. */
  safetyCap?: number;
  maxBatchTriggers?: number;
  queueCapacitySlots?: number;
  maxQueueAgeMs?: number;
  maxAttempts?: number;
  replay?: boolean;
}

/** Names devices and fences for the dispatcher (subscriptions and payloads). */
export class PipelineNamer implements TriggerNamer {
  private readonly ids: DeviceIdReader;
  /** Fence stores by generation, kept while triggers may name them. */
  readonly stores = new Map<number, FenceStore>();

  constructor(idTable: SharedArrayBuffer) {
    this.ids = new DeviceIdReader(idTable);
  }

  /** The device's id as a string (`slot-<n>` if the slot were not published, which the pipeline never does). */
  deviceId(slot: number): string {
    const id = this.ids.deviceIdOf(slot);
    return id === undefined ? `slot-${slot}` : typeof id === 'string' ? id : String(id);
  }

  /** The fence's id; `fence-<generation>-<index>` once that generation's store has been dropped. */
  fenceId(generation: number, index: number): string {
    const s = this.stores.get(generation);
    return s !== undefined && index < s.fenceCount ? s.fenceId(index) : `fence-${generation}-${index}`;
  }

  /** The fence's tags ([] once its generation has been dropped). */
  fenceTags(generation: number, index: number): readonly string[] {
    const s = this.stores.get(generation);
    return s !== undefined && index < s.fenceCount ? s.tags(index) : [];
  }

  /** Trigger object of record `i` of a batch (callback payloads). */
  triggerOf(batch: TriggerBatch, i: number): Trigger {
    const gen = batch.generation(i);
    const fence = batch.fenceIndex(i);
    return {
      type: TRIGGER_TYPE_NAMES[batch.type(i)]!,
      deviceId: this.deviceId(batch.deviceSlot(i)),
      fenceId: this.fenceId(gen, fence),
      tags: this.fenceTags(gen, fence),
      lane: LANE_NAMES[batch.lane(i)]!,
      lat: batch.lat(i),
      lon: batch.lon(i),
      eventTimeMs: batch.eventTimeMs(i),
      seq: batch.seq(i),
      insideMs: batch.insideMs(i),
      replay: batch.replay,
    };
  }
}

/**
 * Records the held time (admission -> handed to this sink) of each live trigger on its first attempt, then calls the
 * inner sink. Allocation-free apart from the inner sink.
 */
export class HeldTimeSink implements Sink {
  private readonly inner: Sink;
  private readonly cells: Float64Array;
  private readonly base: number;
  private readonly clock: ClockNs;

  constructor(inner: Sink, cells: Float64Array, base: number, clock: ClockNs) {
    this.inner = inner;
    this.cells = cells;
    this.base = base;
    this.clock = clock;
  }

  deliver(batch: TriggerBatch): Promise<SinkResult> {
    if (!batch.replay) {
      const now = this.clock();
      for (let i = 0; i < batch.count; i++) {
        // Retries would count the same trigger twice.
        if (batch.attempts(i) === 1) recordHeldTime(this.cells, this.base, now - batch.admitTimeNs(i));
      }
    }
    return this.inner.deliver(batch);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

/** Dispatcher-thread end of the callback bridge: posts each batch to the main thread and awaits its answer. */
export class CallbackBridge {
  private readonly port: MessagePort;
  private readonly namer: PipelineNamer;
  private readonly pending = new Map<number, (r: SinkResult) => void>();
  private nextId = 1;

  constructor(port: MessagePort, namer: PipelineNamer) {
    this.port = port;
    this.namer = namer;
    port.on('message', (a: CallbackAnswer) => {
      const resolve = this.pending.get(a.id);
      if (resolve === undefined) return;
      this.pending.delete(a.id);
      resolve({ status: a.ok ? 200 : 500, serviceNs: a.serviceNs });
    });
  }

  /** A sink for the callback of downstream `downstream`. */
  sinkFor(downstream: number): Sink {
    return {
      deliver: (batch) => {
        const triggers: Trigger[] = new Array<Trigger>(batch.count);
        for (let i = 0; i < batch.count; i++) triggers[i] = this.namer.triggerOf(batch, i);
        const id = this.nextId++;
        const call: CallbackCall = { id, downstream, triggers };
        return new Promise<SinkResult>((resolve) => {
          this.pending.set(id, resolve);
          this.port.postMessage(call);
        });
      },
      close: async () => undefined,
    };
  }

  /** Closes the port (after the dispatcher has drained). */
  close(): void {
    this.port.close();
  }
}

function limitOf(choice: string | number | undefined, gradient: Partial<GradientLimitOptions> | undefined): Limit | undefined {
  if (choice === undefined) return gradient === undefined ? undefined : new GradientLimit(gradient);
  if (typeof choice === 'number') return new FixedLimit(choice);
  switch (choice) {
    case 'gradient':
      return new GradientLimit(gradient);
    case 'aimd':
      return new AimdLimit();
    case 'vegas':
      return new VegasLimit();
    case 'gradient2':
      return new Gradient2Limit();
    default:
      throw new RangeError(`unknown limit ${choice}`);
  }
}

/** Builds the Dispatcher's downstream options from the specs, wrapping each sink in the held-time probe. */
export function buildDownstreams(
  specs: readonly DownstreamSpec[],
  namer: PipelineNamer,
  bridge: CallbackBridge | null,
  heldCells: Float64Array,
  heldBase: number,
  clock: ClockNs,
): DispatchDownstreamOptions[] {
  return specs.map((s, i) => {
    let sink: Sink;
    if (s.kind === 'webhook') {
      sink = new WebhookSink(s.timeoutMs === undefined ? { url: s.url! } : { url: s.url!, timeoutMs: s.timeoutMs }, namer);
    } else if (s.kind === 'ndjson') {
      sink = new NdjsonSink(s.path === '-' ? { stream: process.stdout } : { path: s.path! }, namer);
    } else {
      if (bridge === null) throw new Error(`downstream ${s.name}: callback downstream without a bridge`);
      sink = bridge.sinkFor(i);
    }
    const o: DispatchDownstreamOptions = { name: s.name, sink: new HeldTimeSink(sink, heldCells, heldBase, clock) };
    if (s.subscription !== undefined) {
      const sub: Subscription = {};
      if (s.subscription.fenceIds !== undefined) sub.fenceIds = s.subscription.fenceIds;
      if (s.subscription.tags !== undefined) sub.tags = s.subscription.tags;
      if (s.subscription.types !== undefined) sub.types = s.subscription.types as TriggerType[];
      o.subscription = sub;
    }
    const limit = limitOf(s.limit, s.gradient);
    if (limit !== undefined) o.limit = limit;
    if (s.safetyCap !== undefined) o.safetyCap = s.safetyCap;
    if (s.maxBatchTriggers !== undefined) o.maxBatchTriggers = s.maxBatchTriggers;
    if (s.queueCapacitySlots !== undefined) o.queueCapacitySlots = s.queueCapacitySlots;
    if (s.maxQueueAgeMs !== undefined) o.maxQueueAgeMs = s.maxQueueAgeMs;
    if (s.maxAttempts !== undefined) o.maxAttempts = s.maxAttempts;
    if (s.replay !== undefined) o.replay = s.replay;
    return o;
  });
}
