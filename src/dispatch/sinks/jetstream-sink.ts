/**
 * NATS JetStream sink: each trigger is one message (the trigger's JSON object, as a webhook receives it in its array)
 * published with an acknowledgement to the subject its template names. The message id (`Nats-Msg-Id`) is the
 * trigger's identity, `<deviceId as JSON>/<seq>`, so within the stream's duplicate window a re-sent trigger (a batch
 * whose acknowledgement was lost, a retry, a replay after a restart) is dropped by the server: the stream holds each
 * trigger once. A batch is delivered when every message in it is acknowledged; a timeout or a lost connection fails
 * the batch (it is retried whole, the duplicates dropped), a refusal by the server refuses it.
 *
 * Per-device order: one downstream never has two requests with triggers of the same device in flight, and one
 * connection publishes a batch in order, so the stream stores each device's triggers in seq order.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient, type PubAck } from '@nats-io/jetstream';
import type { Sink, SinkError, SinkResult } from './sink.js';
import { SubjectTemplate } from './subject-template.js';
import { triggerJson } from './format.js';
import type { TriggerBatch } from './trigger-batch.js';
import { checkNumber } from '../validate.js';

/** Options of JetStreamSink. */
export interface JetStreamSinkOptions {
  /** Server URLs: `nats://host:4222` (the client picks one and fails over to the others). */
  servers: readonly string[];
  /** Subject template (see subject-template.ts). */
  subject: string;
  /** Stream the subjects belong to; created when missing if `createStream`. */
  stream: string;
  /** Create the stream (subjects `<template prefix>>`, file storage) when it does not exist. */
  createStream: boolean;
  /** Duplicate window of a stream the sink creates, ms (a re-sent trigger within it is dropped by the server). */
  duplicateWindowMs: number;
  /** Replicas of a stream the sink creates. */
  streamReplicas: number;
  /** How long a publish waits for its acknowledgement, ms. */
  ackTimeoutMs: number;
  /** Token for a server that requires one; null: none. */
  token: string | null;
}

/** Defaults of JetStreamSink (servers has none). */
export const JETSTREAM_SINK_DEFAULTS: Readonly<Omit<JetStreamSinkOptions, 'servers'>> = {
  subject: 'geofence.{type}.{fenceId}',
  stream: 'GEOFENCE_TRIGGERS',
  createStream: true,
  duplicateWindowMs: 120_000,
  streamReplicas: 1,
  ackTimeoutMs: 5_000,
  token: null,
};

const encoder = new TextEncoder();

/** Publishes triggers to a JetStream stream (see the module comment). */
export class JetStreamSink implements Sink {
  private readonly options: JetStreamSinkOptions;
  private readonly template: SubjectTemplate;
  private nc: NatsConnection | null = null;
  private js: JetStreamClient | null = null;
  private connecting: Promise<JetStreamClient> | null = null;
  private closed = false;

  /** Validates the options (errors name them); connects on the first delivery. */
  constructor(options: Partial<JetStreamSinkOptions> & { servers: readonly string[] }) {
    const o: JetStreamSinkOptions = { ...JETSTREAM_SINK_DEFAULTS, ...options };
    if (o.servers.length === 0) throw new RangeError('options.servers must name at least one server');
    for (const s of o.servers) {
      if (!/^(nats|tls):\/\/[^\s/]+\/?$/.test(s))
        throw new RangeError(`options.servers must hold nats://host:port URLs, got ${JSON.stringify(s)}`);
    }
    this.template = new SubjectTemplate('options.subject', o.subject);
    if (!/^[A-Za-z0-9_-]+$/.test(o.stream))
      throw new RangeError(`options.stream must be letters, digits, - and _, got ${JSON.stringify(o.stream)}`);
    checkNumber('options.duplicateWindowMs', o.duplicateWindowMs, 1000, 7 * 86_400_000, true);
    checkNumber('options.streamReplicas', o.streamReplicas, 1, 5, true);
    checkNumber('options.ackTimeoutMs', o.ackTimeoutMs, 1, 3_600_000);
    if (o.createStream && (this.template.prefix.length === 0 || !this.template.prefix.endsWith('.')))
      throw new RangeError(
        `options.subject ${JSON.stringify(o.subject)}: to create the stream the template must start with literal tokens ending in "." (its subjects are "<prefix>>"); or create the stream yourself and set createStream false`,
      );
    this.options = o;
  }

  /** The subjects a stream this sink creates captures. */
  get streamSubjects(): string[] {
    return [`${this.template.prefix}>`];
  }

  /** Publishes every trigger of the batch and waits for every acknowledgement; never rejects. */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    let js: JetStreamClient;
    try {
      js = await this.client();
    } catch (err) {
      return { status: 0, error: connectError(err) };
    }
    const acks: Promise<PubAck>[] = [];
    const timeout = this.options.ackTimeoutMs;
    for (let i = 0; i < batch.count; i++) {
      const id = batch.deviceId(i);
      const msgID = `${typeof id === 'number' ? String(id) : JSON.stringify(id)}/${batch.seq(i)}`;
      acks.push(js.publish(this.template.render(batch, i), encoder.encode(triggerJson(batch, i)), { msgID, timeout }));
    }
    const settled = await Promise.allSettled(acks);
    let refused = false;
    let lost = false;
    for (const s of settled) {
      if (s.status === 'fulfilled') continue;
      if (isServerRefusal(s.reason)) refused = true;
      else lost = true;
    }
    // A lost acknowledgement is retried (the duplicates are dropped by the server); a refusal is permanent.
    if (lost) return { status: 0, error: 'timeout' };
    if (refused) return { status: 400 };
    return { status: 200 };
  }

  /** Drains and closes the connection. */
  async close(): Promise<void> {
    this.closed = true;
    const nc = this.nc;
    this.nc = null;
    this.js = null;
    if (nc !== null) await nc.drain().catch(() => nc.close());
  }

  private client(): Promise<JetStreamClient> {
    if (this.js !== null) return Promise.resolve(this.js);
    if (this.closed) return Promise.reject(new Error('closed'));
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    return this.connecting;
  }

  private async open(): Promise<JetStreamClient> {
    const o = this.options;
    const nc = await connect({
      servers: [...o.servers],
      // Why unlimited reconnects: a broker restart must not end the sink; deliveries fail meanwhile and are retried.
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      name: 'geofence-router',
      ...(o.token === null ? {} : { token: o.token }),
    });
    if (o.createStream) {
      const jsm = await jetstreamManager(nc);
      try {
        await jsm.streams.info(o.stream);
      } catch {
        await jsm.streams.add({
          name: o.stream,
          subjects: this.streamSubjects,
          duplicate_window: o.duplicateWindowMs * 1_000_000,
          num_replicas: o.streamReplicas,
        });
      }
    }
    this.nc = nc;
    this.js = jetstream(nc, { timeout: o.ackTimeoutMs });
    return this.js;
  }
}

/** A publish the server answered with an error (not a timeout or a connection problem). */
function isServerRefusal(err: unknown): boolean {
  const e = err as { name?: string; message?: string; api_error?: unknown; code?: unknown };
  return e.api_error !== undefined || e.name === 'JetStreamApiError';
}

function connectError(err: unknown): SinkError {
  const msg = String((err as Error).message ?? err);
  const cause = (err as { cause?: { code?: string } }).cause?.code;
  return cause === 'ECONNREFUSED' || /refused/i.test(msg) ? 'refused' : 'network';
}
