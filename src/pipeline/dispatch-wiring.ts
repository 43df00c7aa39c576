/**
 * The dispatcher thread's wiring: naming triggers from the shared device id table and the fence stores of every
 * generation still referenced, the held-time recorder, the bridge to callbacks that live on the main thread, and
 * building Dispatcher downstream options from the router's serialisable downstream specs.
 */
import { readFileSync } from 'node:fs';
import type { MessagePort } from 'node:worker_threads';
import { DeviceIdReader } from '../ingest/device-registry.js';
import type { FenceStore } from '../fences/store.js';
import {
  AimdLimit,
  FixedLimit,
  Gradient2Limit,
  GradientLimit,
  VegasLimit,
  WindowedLimit,
  type Limit,
} from '../dispatch/limits/index.js';
import type { ResolvedDownstream } from '../config/options.js';
import type { DispatcherDownstreamOptions } from '../dispatch/dispatcher.js';
import type { Subscription } from '../dispatch/trigger-router.js';
import { NdjsonSink } from '../dispatch/sinks/ndjson-sink.js';
import type { Sink, SinkResult } from '../dispatch/sinks/sink.js';
import type { TriggerBatch } from '../dispatch/sinks/trigger-batch.js';
import type { TriggerNamer } from '../dispatch/sinks/format.js';
import { JetStreamSink } from '../dispatch/sinks/jetstream-sink.js';
import { MqttSink } from '../dispatch/sinks/mqtt-sink.js';
import { WebhookSink } from '../dispatch/sinks/webhook-sink.js';
import {
  DS_BLOCK_F64,
  DS_LANE_HELD_BASE_F64,
  HELD_BLOCK_F64,
  LANE_NAMES,
  TRIGGER_TYPE_NAMES,
  type TriggerType,
} from '../shm/layout.js';
import { recordHeldTimeFrom } from './held-time.js';
import type { CallbackAnswer, CallbackCall } from './messages.js';
import type { Trigger } from '../dispatch/trigger.js';

/** A resolved downstream without its callback (a callback stays on the main thread). */
type WithoutCallback<D> = D extends { kind: 'callback' } ? Omit<D, 'callback'> : D;

/**
 * A downstream as the main thread hands it to the dispatcher thread: the resolved downstream options (no functions:
 * structured-clone safe) and the router-wide dead-letter budgets that apply to it.
 */
export type DownstreamSpec = WithoutCallback<ResolvedDownstream> & {
  /** Size budget of its dead letters on disk, bytes. */
  deadLetterMaxBytes: number;
  /** Age budget of its dead letters, ms. */
  deadLetterMaxAgeMs: number;
};

/** Fences of a generation known by name only (the fences a restored checkpoint named that the fences file lost). */
export interface NamesOnlyGeneration {
  /** Generation number (not one of the fence store's). */
  generation: number;
  /** Fence ids by index. */
  ids: string[];
  /** Fence tags by index. */
  tags: string[][];
}

/** Names devices and fences for the dispatcher (subscriptions, payloads, durable records). */
export class PipelineNamer implements TriggerNamer {
  private readonly ids: DeviceIdReader;
  /** Fence stores by generation, kept while triggers may name them. */
  readonly stores = new Map<number, FenceStore>();
  /** Generations known by name only. */
  readonly namesOnly = new Map<number, NamesOnlyGeneration>();

  constructor(idTable: SharedArrayBuffer) {
    this.ids = new DeviceIdReader(idTable);
  }

  /** The device's id as it sent it (`slot-<n>` if the slot were not published, which the pipeline never does). */
  deviceId(slot: number): string | number {
    return this.ids.deviceIdOf(slot) ?? `slot-${slot}`;
  }

  /** True when the device's id is an unsigned integer. */
  isNumeric(slot: number): boolean {
    return this.ids.isNumeric(slot);
  }

  /** Writes the numeric id into `dst[index]`. */
  copyNumericId(slot: number, dst: Float64Array, index: number): void {
    this.ids.copyNumericId(slot, dst, index);
  }

  /** Copies the UTF-8 bytes of a string id. */
  copyIdBytes(slot: number, dst: Uint8Array, at: number): number {
    return this.ids.copyIdBytes(slot, dst, at);
  }

  /** The fence's id, or undefined once that generation is gone. */
  fenceId(generation: number, index: number): string | undefined {
    const s = this.stores.get(generation);
    if (s !== undefined) return index < s.fenceCount ? s.fenceId(index) : undefined;
    return this.namesOnly.get(generation)?.ids[index];
  }

  /** The fence's tags ([] once its generation is gone). */
  fenceTags(generation: number, index: number): readonly string[] {
    const s = this.stores.get(generation);
    if (s !== undefined) return index < s.fenceCount ? s.tags(index) : [];
    return this.namesOnly.get(generation)?.tags[index] ?? [];
  }
}

/** Trigger object of record `i` of a batch (callback payloads). */
function triggerOf(batch: TriggerBatch, i: number): Trigger {
  const t: Trigger = {
    type: TRIGGER_TYPE_NAMES[batch.type(i)]!,
    deviceId: batch.deviceId(i),
    fenceId: batch.fenceId(i),
    tags: batch.tags(i),
    lane: LANE_NAMES[batch.lane(i)]!,
    lat: batch.lat(i),
    lon: batch.lon(i),
    eventTimeMs: batch.eventTimeMs(i),
    seq: batch.seq(i),
    insideMs: batch.insideMs(i),
    replay: batch.replay(i),
  };
  if (batch.expired(i)) t.reason = 'expired';
  return t;
}

/**
 * The recorder of the dispatcher's take (DispatcherOptions.onTaken): the time in `taken[0]` into the block of the
 * trigger's lane among the LANE_COUNT blocks from `base` of `cells`. Allocation-free.
 */
export function takenTimeRecorder(cells: Float64Array, base: number): (taken: Float64Array, lane: number) => void {
  return (taken, lane) => recordHeldTimeFrom(cells, base + lane * HELD_BLOCK_F64, taken);
}

/**
 * The held-time recorder of the dispatcher: the held time in `held[0]`, into the held-time block of `cells` (triggers
 * delivered without a dead letter; also into the downstream's block for the trigger's lane (its fence's class) in `dispatchCells`) or the
 * replay block (re-delivered dead letters). Allocation-free.
 */
export function heldTimeRecorder(
  cells: Float64Array,
  liveBase: number,
  replayBase: number,
  dispatchCells: Float64Array,
): (held: Float64Array, replayed: boolean, lane: number, downstream: number) => void {
  return (held, replayed, lane, downstream) => {
    if (replayed) {
      recordHeldTimeFrom(cells, replayBase, held);
      return;
    }
    recordHeldTimeFrom(cells, liveBase, held);
    recordHeldTimeFrom(dispatchCells, downstream * DS_BLOCK_F64 + DS_LANE_HELD_BASE_F64 + lane * HELD_BLOCK_F64, held);
  };
}

/** Dispatcher-thread end of the callback bridge: posts each batch to the main thread and awaits its answer. */
export class CallbackBridge {
  private readonly port: MessagePort;
  private readonly pending = new Map<number, (r: SinkResult) => void>();
  private nextId = 1;

  constructor(port: MessagePort) {
    this.port = port;
    port.on('message', (a: CallbackAnswer) => {
      const resolve = this.pending.get(a.id);
      if (resolve === undefined) return;
      this.pending.delete(a.id);
      resolve(
        a.gone
          ? { status: 500, serviceNs: a.serviceNs, gone: true }
          : { status: a.ok ? 200 : 500, serviceNs: a.serviceNs },
      );
    });
  }

  /** A sink for the callback of downstream `downstream`. */
  sinkFor(downstream: number): Sink {
    return {
      deliver: (batch) => {
        const triggers: Trigger[] = new Array<Trigger>(batch.count);
        for (let i = 0; i < batch.count; i++) triggers[i] = triggerOf(batch, i);
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

/** The downstream's limit (its algorithm with its tuning, run on windows when `window` is given), or undefined. */
function limitOf(s: DownstreamSpec): Limit | undefined {
  const limit = bareLimitOf(s);
  if (s.window === undefined) return limit;
  return new WindowedLimit(limit ?? new GradientLimit(), s.window);
}

/** The downstream's algorithm with its tuning, a fixed limit, or undefined for the default gradient. */
function bareLimitOf(s: DownstreamSpec): Limit | undefined {
  const choice = s.limit;
  if (choice === undefined) return s.gradient === undefined ? undefined : new GradientLimit(s.gradient);
  if (typeof choice === 'number') return new FixedLimit(choice);
  switch (choice) {
    case 'gradient':
      return new GradientLimit(s.gradient);
    case 'aimd':
      return new AimdLimit(s.aimd);
    case 'vegas':
      return new VegasLimit(s.vegas);
    case 'gradient2':
      return new Gradient2Limit(s.gradient2);
  }
}

/** Reads a webhook's CA bundle; an error names the downstream and the option. */
function readCaFile(name: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(
      `downstream ${name}: caFile ${path} cannot be read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      { cause: err },
    );
  }
}

/** Builds the Dispatcher's downstream options from the specs. */
export function buildDownstreams(
  specs: readonly DownstreamSpec[],
  bridge: CallbackBridge | null,
): DispatcherDownstreamOptions[] {
  return specs.map((s, i) => {
    let sink: Sink;
    if (s.kind === 'webhook') {
      sink = new WebhookSink({
        url: s.url,
        timeoutMs: s.timeoutMs,
        connectTimeoutMs: s.connectTimeoutMs,
        maxSockets: s.safetyCap,
        ...(s.headers === undefined ? {} : { headers: s.headers }),
        ca: s.caFile === null ? null : readCaFile(s.name, s.caFile),
        bearerToken: s.bearerToken,
        signingSecret: s.signingSecret,
      });
    } else if (s.kind === 'jetstream') {
      // The downstream's options carry the sink's under the same names.
      sink = new JetStreamSink(s);
    } else if (s.kind === 'mqtt') {
      sink = new MqttSink({
        url: s.url,
        topic: s.topic,
        protocolVersion: s.protocolVersion === 4 ? 4 : 5,
        clientId: s.clientId ?? `geofence-router-${s.name}`.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64),
        sessionExpirySeconds: s.sessionExpirySeconds,
        ackTimeoutMs: s.ackTimeoutMs,
        username: s.username,
        password: s.password,
      });
    } else if (s.kind === 'ndjson') {
      // "-": stdout, written from this thread directly (a worker's process.stdout only passes its bytes on to the main
      // thread's, so neither a reader gone nor one that is behind would ever be seen here).
      sink = new NdjsonSink(s.path === '-' ? { stdout: true } : { path: s.path, fsync: s.fsync });
    } else {
      if (bridge === null) throw new Error(`downstream ${s.name}: callback downstream without a bridge`);
      sink = bridge.sinkFor(i);
    }
    const o: DispatcherDownstreamOptions = {
      name: s.name,
      sink,
      safetyCap: s.safetyCap,
      maxBatchTriggers: s.maxBatchTriggers,
      queueCapacitySlots: s.queueCapacitySlots,
      maxAttempts: s.maxAttempts,
      replay: s.replay,
      replayGiveUpMs: s.replayGiveUpMs,
      backlogMaxBytes: s.backlogMaxBytes,
      deadLetterMaxBytes: s.deadLetterMaxBytes,
      deadLetterMaxAgeMs: s.deadLetterMaxAgeMs,
      breaker: {
        failureRateThreshold: s.breaker.failureRateThreshold,
        windowSize: s.breaker.windowSize,
        minimumRequests: s.breaker.minimumRequests,
        refusalsToOpen: s.breaker.refusalsToOpen,
        openDurationNs: s.breaker.openDurationMs * 1e6,
        maxOpenDurationNs: s.breaker.maxOpenDurationMs * 1e6,
      },
    };
    if (s.subscribe !== undefined) {
      const sub: Subscription = {};
      if (s.subscribe.fenceIds !== undefined) sub.fenceIds = s.subscribe.fenceIds;
      if (s.subscribe.tags !== undefined) sub.tags = s.subscribe.tags;
      if (s.subscribe.types !== undefined)
        sub.types = s.subscribe.types.map((t) => (TRIGGER_TYPE_NAMES as readonly string[]).indexOf(t) as TriggerType);
      o.subscription = sub;
    }
    const limit = limitOf(s);
    if (limit !== undefined) o.limit = limit;
    if (s.maxQueueAgeMs !== undefined) o.maxQueueAgeMs = s.maxQueueAgeMs;
    return o;
  });
}
