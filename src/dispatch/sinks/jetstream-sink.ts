/**
 * NATS JetStream sink: each trigger is one message (the trigger's JSON object, as a webhook receives it in its array)
 * published with an acknowledgement to the subject its template names. The message id (`Nats-Msg-Id`) is the
 * trigger's identity at this downstream, `<downstream name>/<deviceId as JSON>/<seq>` (another downstream publishing
 * to the same stream has its own ids), so within the stream's duplicate window a re-sent trigger (a batch
 * whose acknowledgement was lost, a retry, a replay after a restart) is dropped by the server: the stream holds each
 * trigger once. A batch is delivered when every message in it is acknowledged; a timeout or a lost connection fails
 * the batch, and so does an answer that says the stream cannot take it now (503): an error answer whose code says
 * "again later" (ackAnswer). The messages acknowledged as stored before such a failure are named in the result
 * (SinkResult.delivered) and settled; the rest are sent again (a copy the server stored without its acknowledgement
 * arriving is dropped as a duplicate). The server's "no responders" (no stream took
 * the message) is asked about (whoCaptures): a message no stream captures, while the stream is there, is refused;
 * one a stream captures (not answering now: a leader election) or sent while the stream is missing (being created
 * again, its only replica's server restarting) is retried. A refused message (that one, or one any other error
 * answer refuses: code 400, over the stream's size limit, ...) is named in the batch's result (SinkResult.refused),
 * dead-lettered as rejected, and the rest of the batch is delivered.
 *
 * Publishing is asynchronous, as JetStream's own clients do it for throughput: messages are written with a reply
 * subject under one inbox of the sink's, and the acknowledgements are matched to their batch as they arrive, with one
 * timer per batch (a request per message, with a timer each, delivers about a third as many).
 *
 * Per-device order: one downstream never has two requests with triggers of the same device in flight, and within a
 * batch a device's next message is published once the one before is stored or refused for good (deviceChains), the
 * first message of every device at once. A stream may answer one message "again later" and store the next (a leader
 * election, a limit freed in between); the one sent again must not be stored behind its device's later triggers (the
 * duplicate window would then drop those when they come again), so the stream stores each device's triggers in seq
 * order.
 */
import { connect, createInbox, headers, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { closeWithin, type Sink, type SinkError, type SinkResult } from './sink.js';
import { SubjectTemplate } from './subject-template.js';
import { triggerJson } from './format.js';
import { deviceChains, unsentOf } from './device-chains.js';
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
  /** How long a batch waits for its next acknowledgement, ms: with none for so long, it fails. */
  ackTimeoutMs: number;
  /** Token for a server that requires one; null: none. */
  token: string | null;
  /**
   * The downstream's name: the first part of every message id (`<name>/<deviceId as JSON>/<seq>`), so two
   * downstreams publishing to one stream never have each other's messages dropped as duplicates. Empty: the id is
   * `<deviceId as JSON>/<seq>`.
   */
  name: string;
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
  name: '',
};

const encoder = new TextEncoder();

/** Publishes triggers to a JetStream stream (see the module comment). */
export class JetStreamSink implements Sink {
  private readonly options: JetStreamSinkOptions;
  private readonly template: SubjectTemplate;
  private nc: NatsConnection | null = null;
  private connecting: Promise<NatsConnection> | null = null;
  private closed = false;
  /** The inbox the acknowledgements come to (`<inbox>.<token>`). */
  private inbox = '';
  /** The batch waiting for each token's acknowledgement. */
  private readonly pending = new Map<number, PendingBatch>();
  private nextToken = 1;
  /** When the stream last acknowledged a message as stored, ms (Date.now). */
  private storedAtMs = 0;
  /** Answers of the server to whoCaptures's questions (see remembered), by question; atMs 0 while in flight. */
  private readonly answers = new Map<string, { atMs: number; answer: Promise<unknown> }>();

  /** Validates the options (errors name them); connects on the first delivery. */
  constructor(options: Partial<JetStreamSinkOptions> & { servers: readonly string[] }) {
    const o: JetStreamSinkOptions = { ...JETSTREAM_SINK_DEFAULTS, ...options };
    if (o.servers.length === 0) throw new RangeError('options.servers must name at least one server');
    for (const s of o.servers) {
      if (!/^(nats|tls):\/\/[^\s/]+\/?$/.test(s))
        throw new RangeError(`options.servers must hold nats://host:port URLs, got ${JSON.stringify(s)}`);
    }
    this.template = new SubjectTemplate('options.subject', o.subject, 'nats');
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
    let nc: NatsConnection;
    try {
      nc = await this.client();
    } catch (err) {
      return { status: 0, error: connectError(err) };
    }
    if (batch.count === 0) return { status: 200 };
    const first = this.nextToken;
    this.nextToken += batch.count;
    const pending = this.pending;
    const chains = deviceChains(batch);
    const ackTimeoutMs = this.options.ackTimeoutMs;
    const idPrefix = this.options.name.length === 0 ? '' : `${this.options.name}/`;
    return new Promise<SinkResult>((resolve) => {
      /** Publishes message `i` of the batch; false when the connection closed under the write (the batch failed). */
      const publish = (i: number): boolean => {
        const id = batch.deviceId(i);
        const h = headers();
        h.set('Nats-Msg-Id', `${idPrefix}${typeof id === 'number' ? String(id) : JSON.stringify(id)}/${batch.seq(i)}`);
        pending.set(first + i, state);
        state.waiting++;
        state.sent.push(i);
        state.progressAtMs = Date.now();
        try {
          nc.publish(this.template.render(batch, i), encoder.encode(triggerJson(batch, i)), {
            reply: `${this.inbox}.${first + i}`,
            headers: h,
          });
          return true;
        } catch (err) {
          if (exceedsMaxPayload(err)) {
            // Larger, with its headers, than the server takes (its max_payload): it can never be published. Refused
            // for good, as the stream refuses a message over its own size limit, and its device goes on.
            pending.delete(first + i);
            state.waiting--;
            state.refused.push(i);
            const n = chains.next[i]!;
            return n < 0 || publish(n);
          }
          // The connection closed under the writes: the batch is retried (but what was stored).
          finish({ status: 0, error: 'network' });
          return false;
        }
      };
      const state: PendingBatch = {
        first,
        waiting: 0,
        sent: [],
        refused: [],
        again: [],
        stored: [],
        unrouted: (i) => {
          // "No responders": refused where no stream captures the subject and the stream is there (a template it
          // does not cover); waited for where a stream captures it or the stream is missing. Asked at once (answers
          // are kept for a second), the message counted unanswered meanwhile; its subject is read now, while the
          // batch is still this delivery's.
          const answered = (answer: number): void => {
            if (finished) return;
            state.progressAtMs = Date.now();
            if (answer === REFUSED) {
              state.refused.push(i);
              state.follow(i);
            } else if (answer === UNKNOWN) {
              state.unknown.push(i);
            } else {
              state.again.push(i);
            }
            if (--state.waiting === 0) state.settle();
          };
          this.whoCaptures(nc, this.template.render(batch, i)).then(answered, () => answered(UNAVAILABLE));
        },
        unknown: [],
        progressAtMs: Date.now(),
        timer: setTimeout(function expire(): void {
          // A deadline since the batch's last publish or answer: a device's messages go one after another.
          const leftMs = state.progressAtMs + ackTimeoutMs - Date.now();
          if (leftMs > 0) state.timer = setTimeout(expire, leftMs);
          else finish({ status: 0, error: 'timeout' });
        }, ackTimeoutMs),
        follow: (i) => {
          const n = chains.next[i]!;
          if (n >= 0) publish(n);
        },
        settle: () => {
          // "No responders" where the stream's subjects could not be read (no permission): refused beside a message
          // the stream stored in this batch (or, for this sink, within the last second), else waited for. Decided
          // once every other answer is in; a refused one's device then goes on.
          if (state.unknown.length > 0) {
            const refuse = state.stored.length > 0 || Date.now() - this.storedAtMs < ANSWER_KEPT_MS;
            for (const i of state.unknown.splice(0)) {
              if (!refuse) state.again.push(i);
              else {
                state.refused.push(i);
                state.follow(i);
              }
            }
            if (state.waiting > 0 || finished) return;
          }
          // A device's messages behind one that can be stored later were not published: the batch goes again.
          finish({ status: state.again.length > 0 || state.sent.length < batch.count ? 503 : 200 });
        },
      };
      let finished = false;
      const finish = (r: SinkResult): void => {
        if (finished) return;
        finished = true;
        clearTimeout(state.timer);
        for (let t = first; t < first + batch.count; t++) pending.delete(t);
        // Refusals and stored messages heard before a failure stand: those triggers are settled, the rest (each
        // device's from its first not stored on) are sent again.
        const out: SinkResult = state.refused.length === 0 ? r : { ...r, refused: state.refused.sort((a, b) => a - b) };
        if (r.status !== 200 && state.stored.length > 0) out.delivered = state.stored.sort((a, b) => a - b);
        if (r.status !== 200 && state.again.length > 0) out.again = state.again.sort((a, b) => a - b);
        // Messages never published (behind one of their device that goes again) use up no attempt.
        if (r.status !== 200 && state.sent.length < batch.count)
          out.unsent = unsentOf(batch.count, state.sent, state.sent.length);
        resolve(out);
      };
      for (const i of chains.firsts) if (!publish(i)) return;
      // Every message refused before it was published (none is waiting for an answer).
      if (state.waiting === 0) state.settle();
    });
  }

  /** One acknowledgement (or refusal, or "no responders") for the message of `token`. */
  private onAck(msg: Msg): void {
    const token = Number(msg.subject.slice(this.inbox.length + 1));
    const state = this.pending.get(token);
    if (state === undefined) return; // its batch already finished (timed out)
    this.pending.delete(token);
    const index = token - state.first;
    if (msg.headers?.code === 503) {
      state.unrouted(index);
      return;
    }
    state.progressAtMs = Date.now();
    const answer = ackAnswer(msg.data);
    if (answer === STORED) this.storedAtMs = state.progressAtMs;
    if (answer === UNAVAILABLE) state.again.push(index);
    else {
      (answer === STORED ? state.stored : state.refused).push(index);
      // Answered for good: the device's next message may go (deviceChains).
      state.follow(index);
    }
    if (--state.waiting === 0) state.settle();
  }

  /**
   * Whether a message to `subject` that had no responders can be stored later. The stream's subjects are read first
   * (one question for every subject, its permission `$JS.API.STREAM.INFO.<stream>`): a subject they capture, or a
   * stream that is missing (being created) or not answering, is UNAVAILABLE (retried). For a subject they do not
   * capture, the server is asked which stream does (`$JS.API.STREAM.NAMES`): another stream (not answering now) is
   * UNAVAILABLE; none, REFUSED; where that question is not permitted, REFUSED too (the stream is there and does not
   * cover the template). UNKNOWN where the stream's subjects cannot be read for want of permission. Answers are kept
   * for a second after they come, and one question of each kind is asked at a time.
   */
  private async whoCaptures(nc: NatsConnection, subject: string): Promise<number> {
    const subjects = await this.remembered(`stream ${this.options.stream}`, async () => {
      try {
        const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: this.options.ackTimeoutMs });
        return (await jsm.streams.info(this.options.stream)).config.subjects ?? [];
      } catch (err) {
        // The stream is gone (deleted, or its only replica's store lost) and this sink creates it: it is created
        // again now, as at the start, and the messages go again.
        if (
          this.options.createStream &&
          err instanceof JetStreamApiError &&
          err.code === JetStreamApiCodes.StreamNotFound
        )
          await this.createStream(nc).catch(() => undefined);
        return notPermitted(err) ? UNKNOWN : UNAVAILABLE;
      }
    });
    if (typeof subjects === 'number') return subjects;
    if (subjects.some((pattern) => subjectCaptures(pattern, subject))) return UNAVAILABLE;
    return this.remembered(`subject ${subject}`, async () => {
      try {
        const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: this.options.ackTimeoutMs });
        await jsm.streams.find(subject);
        return UNAVAILABLE;
      } catch (err) {
        if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return REFUSED;
        return notPermitted(err) ? REFUSED : UNAVAILABLE;
      }
    });
  }

  /** The answer to question `key`: the one in flight, or one kept for a second after it came, or `ask()` now. */
  private remembered<T>(key: string, ask: () => Promise<T>): Promise<T> {
    const known = this.answers.get(key);
    if (known !== undefined && (known.atMs === 0 || Date.now() - known.atMs < ANSWER_KEPT_MS))
      return known.answer as Promise<T>;
    if (this.answers.size >= ANSWERS_KEPT_MAX) this.answers.clear();
    const entry = { atMs: 0, answer: ask() as Promise<unknown> };
    this.answers.set(key, entry);
    void entry.answer.finally(() => (entry.atMs = Date.now()));
    return entry.answer as Promise<T>;
  }

  /** Creates the stream with the documented settings (its subjects, duplicate window and replicas). */
  private async createStream(nc: NatsConnection): Promise<void> {
    const o = this.options;
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: o.ackTimeoutMs });
    await jsm.streams.add({
      name: o.stream,
      subjects: this.streamSubjects,
      duplicate_window: o.duplicateWindowMs * 1_000_000,
      num_replicas: o.streamReplicas,
    });
  }

  /** Drains and closes the connection (closed outright if the server does not answer the drain in time). */
  async close(): Promise<void> {
    this.closed = true;
    const nc = this.nc;
    this.nc = null;
    if (nc !== null)
      await closeWithin(
        () => nc.drain(),
        () => nc.close(),
      );
  }

  private client(): Promise<NatsConnection> {
    if (this.nc !== null) return Promise.resolve(this.nc);
    if (this.closed) return Promise.reject(new Error('closed'));
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    return this.connecting;
  }

  private async open(): Promise<NatsConnection> {
    const o = this.options;
    const nc = await connect({
      servers: [...o.servers],
      // Why unlimited reconnects: a broker restart must not end the sink; deliveries fail meanwhile and are retried.
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      name: 'geofence-router',
      ...(o.token === null ? {} : { token: o.token }),
    });
    try {
      if (o.createStream) {
        const jsm = await jetstreamManager(nc);
        try {
          await jsm.streams.info(o.stream);
        } catch {
          await this.createStream(nc);
        }
      }
    } catch (err) {
      // The next delivery connects again; this connection must not stay open (and reconnecting) beside it.
      await nc.close().catch(() => undefined);
      throw err;
    }
    this.inbox = createInbox();
    nc.subscribe(`${this.inbox}.*`, { callback: (_err, msg) => this.onAck(msg) });
    this.nc = nc;
    // A connection the client gave up on (the server refusing its credentials again and again) is closed for good:
    // the next delivery connects afresh instead of publishing into it.
    void nc.closed().then(() => {
      if (this.nc === nc) this.nc = null;
    });
    return nc;
  }
}

/** A batch waiting for its acknowledgements. */
interface PendingBatch {
  /** Acknowledgements still to come (of the messages published). */
  waiting: number;
  /** Indexes of the messages published, in order (a device's next one once the one before is stored or refused). */
  sent: number[];
  /** The token of the batch's first message. */
  first: number;
  /** Indexes (in the batch) of the messages stored, in the order their acknowledgements came. */
  stored: number[];
  /** Indexes (in the batch) of the messages the stream refused for good. */
  refused: number[];
  /** Indexes (in the batch) of the messages that could not be stored now (the stream's answer says "again later"). */
  again: number[];
  /** Message `i` had no responders: asks why (whoCaptures), then counts it refused or "again later". */
  unrouted(i: number): void;
  /** Indexes of messages with no responders whose stream's subjects could not be read: decided in settle. */
  unknown: number[];
  /** When a message of the batch was last published or answered, ms (Date.now). */
  progressAtMs: number;
  /** The batch's deadline. */
  timer: NodeJS.Timeout;
  /** Publishes the next message of the device of message `i`, if any (message `i` is stored or refused). */
  follow(i: number): void;
  /** Resolves the batch once every acknowledgement is in. */
  settle(): void;
}

/** `{"stream"` as bytes: how every acknowledgement of a stored message starts. */
const ACK_START = new TextEncoder().encode('{"stream"');

/** ackAnswer: the message is stored. */
const STORED = 0;
/** ackAnswer: refused for good. */
const REFUSED = 1;
/** ackAnswer: the stream cannot take it now. */
const UNAVAILABLE = 2;
/** whoCaptures: the stream's subjects may not be read (no permission). */
const UNKNOWN = 3;
/** How long an answer of the server to whoCaptures is kept after it came, ms. */
const ANSWER_KEPT_MS = 1000;
/** Answers kept at most (all are dropped past it). */
const ANSWERS_KEPT_MAX = 1024;

/** Whether `err` (or an error it wraps) is the server refusing the question for want of permission. */
function notPermitted(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e.name === 'PermissionViolationError' || /permissions? violation/i.test(e.message)) return true;
  }
  return false;
}

/**
 * Whether the stream subject `pattern` (tokens split by ".", "*" one token, ">" one or more last tokens) captures the
 * literal subject `subject`.
 */
export function subjectCaptures(pattern: string, subject: string): boolean {
  const p = pattern.split('.');
  const s = subject.split('.');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '>') return i < p.length - 1 ? false : s.length > i;
    if (i >= s.length || (p[i] !== '*' && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}

/**
 * JetStream error codes (`err_code`) answered with a 4xx `code` that say "again later" all the same: the account's
 * JetStream storage or memory is used up (10002, "resource limits exceeded for account"), which frees as the account's
 * streams age out or their consumers acknowledge. A full stream answers 503 and is UNAVAILABLE anyway.
 */
const AGAIN_LATER_ERR_CODES: ReadonlySet<number> = new Set([10002]);

/**
 * What a stream's answer says: `{"stream": ..., "seq": ...}` stores the message; an error whose code says "again
 * later" is UNAVAILABLE (5xx, 429 too many requests, 408, 425, and 409: the same message id still being stored, as a
 * batch sent again after a timeout meets its first copy; and the account's limits, AGAIN_LATER_ERR_CODES); any other
 * error, an empty or unreadable answer, a refusal (the message itself is refused: over the stream's size limit).
 */
function ackAnswer(data: Uint8Array): number {
  let plain = data.length > ACK_START.length;
  for (let i = 0; plain && i < ACK_START.length; i++) plain = data[i] === ACK_START[i];
  if (plain) return STORED;
  if (data.length === 0) return REFUSED;
  try {
    const error = (JSON.parse(new TextDecoder().decode(data)) as { error?: { code?: unknown; err_code?: unknown } })
      .error;
    if (error === undefined) return STORED;
    const code = typeof error?.code === 'number' ? error.code : 0;
    const errCode = typeof error?.err_code === 'number' ? error.err_code : 0;
    return code >= 500 ||
      code === 429 ||
      code === 408 ||
      code === 409 ||
      code === 425 ||
      AGAIN_LATER_ERR_CODES.has(errCode)
      ? UNAVAILABLE
      : REFUSED;
  } catch {
    return REFUSED;
  }
}

/** True for the client's refusal of a message larger than the server's max_payload (thrown by publish). */
function exceedsMaxPayload(err: unknown): boolean {
  return err instanceof Error && /max_payload/.test(err.message);
}

function connectError(err: unknown): SinkError {
  const msg = String((err as Error).message ?? err);
  const cause = (err as { cause?: { code?: string } }).cause?.code;
  return cause === 'ECONNREFUSED' || /refused/i.test(msg) ? 'refused' : 'network';
}
