import * as http from 'node:http';
import * as https from 'node:https';
import type { Socket } from 'node:net';
import { batchJson } from './format.js';
import { classifyResult, Outcome, type Sink, type SinkError, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';
import { SIGNATURE_HEADER, SIGNATURE_TIMESTAMP_HEADER, signWebhook } from './webhook-signature.js';
import { checkNumber, withDefaults } from '../validate.js';

/** Options of WebhookSink. */
export interface WebhookSinkOptions {
  /** Target URL (http: or https:). */
  url: string;
  /** The answer must have come in full this long after the request began, ms: otherwise the attempt is lost. */
  timeoutMs: number;
  /** A new connection (TCP, and TLS for https:) must be up within this, ms: otherwise the attempt is lost. */
  connectTimeoutMs: number;
  /** Keep-alive sockets at most (set it to the downstream's safety cap). */
  maxSockets: number;
  /** Extra request headers. */
  headers: Readonly<Record<string, string>>;
  /** PEM certificates an https: server is verified against instead of the system's store; null: the system's. */
  ca: string | null;
  /** Sent as `Authorization: Bearer <token>`; null: no such header. */
  bearerToken: string | null;
  /** Key of the HMAC-SHA256 signature over timestamp and body (see webhook-signature.ts); null: unsigned. */
  signingSecret: string | null;
}

/** Defaults of WebhookSink (url has none). */
export const WEBHOOK_SINK_DEFAULTS: Readonly<Omit<WebhookSinkOptions, 'url'>> = {
  timeoutMs: 10_000,
  connectTimeoutMs: 5_000,
  maxSockets: 256,
  headers: {},
  ca: null,
  bearerToken: null,
  signingSecret: null,
};

/** Response header in which a consumer may advertise its credit window. */
const CREDIT_HEADER = 'x-credit-window';

/**
 * HTTP(S) webhook sink: each batch is one `POST` of a JSON array (see `batchJson`) over keep-alive connections.
 * 2xx is delivered; a redirect is not followed (a 3xx answer is a permanent rejection, as another 4xx would be);
 * `Retry-After` (seconds or an HTTP date) and `x-credit-window` are read from the answer; connection refused,
 * connect and answer timeouts, TLS failures and socket errors come back as status 0 with the reason.
 *
 * A request of several triggers refused for what it carries (400, 413 payload too large, 422) is sent again in
 * halves, in order, down to single triggers: only a trigger the receiver refuses on its own is refused
 * (SinkResult.refused, dead-lettered as rejected), and the rest of the batch is delivered; the limiter takes no
 * sample from such a batch. A receiver that refuses every request so is asked up to 2n - 1 times for a batch of n
 * (one that means "never" answers 403, or another 4xx, which refuses the whole request at once). A part that fails
 * otherwise (5xx, 429, a timeout) fails the rest of the batch: the parts delivered before it are named in the result
 * (SinkResult.delivered) and settled, the rest is sent again; a part that meets another refusal (401, 403, 404, ...)
 * has its triggers refused.
 */
export class WebhookSink implements Sink {
  private readonly options: WebhookSinkOptions;
  private readonly agent: http.Agent;
  private readonly target: URL;
  private readonly secure: boolean;
  /** Sockets already connected once (a reused keep-alive socket has no connect phase to time). */
  private readonly connected = new WeakSet<Socket>();

  /** Validates the options; the URL must be http: or https:. */
  constructor(options: Partial<WebhookSinkOptions> & { url: string }) {
    const o = withDefaults({ ...WEBHOOK_SINK_DEFAULTS, url: options.url }, options);
    let target: URL;
    try {
      target = new URL(o.url);
    } catch {
      throw new RangeError(`options.url must be an http: or https: URL, got ${JSON.stringify(o.url)}`);
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:')
      throw new RangeError(`options.url must be an http: or https: URL, got ${o.url}`);
    checkNumber('options.timeoutMs', o.timeoutMs, 1, 3_600_000);
    checkNumber('options.connectTimeoutMs', o.connectTimeoutMs, 1, 3_600_000);
    checkNumber('options.maxSockets', o.maxSockets, 1, 65536, true);
    if (o.ca !== null && !o.ca.includes('-----BEGIN CERTIFICATE-----'))
      throw new RangeError('options.ca must hold PEM certificates (-----BEGIN CERTIFICATE-----)');
    if (o.ca !== null && target.protocol !== 'https:') throw new RangeError('options.ca applies to an https: URL only');
    for (const k of ['bearerToken', 'signingSecret'] as const) {
      const v = o[k];
      if (v !== null && (typeof v !== 'string' || v.length === 0 || /[\r\n]/.test(v)))
        throw new RangeError(`options.${k} must be a non-empty string on one line`);
    }
    this.options = o;
    this.target = target;
    this.secure = target.protocol === 'https:';
    this.agent = this.secure
      ? new https.Agent({ keepAlive: true, maxSockets: o.maxSockets, ...(o.ca === null ? {} : { ca: o.ca }) })
      : new http.Agent({ keepAlive: true, maxSockets: o.maxSockets });
  }

  /** POSTs the batch (in parts when refused for its content, see the class comment); never rejects. */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    const whole = await this.post(batchJson(batch));
    if (batch.count === 1 || !SPLIT_ON.has(whole.status)) return whole;
    const parts: Parts = { refused: [], delivered: [], credits: undefined };
    const mid = batch.count >>> 1;
    const failed = (await this.inParts(batch, 0, mid, parts)) ?? (await this.inParts(batch, mid, batch.count, parts));
    const refused = parts.refused.length === 0 ? {} : { refused: parts.refused };
    // The parts delivered before the failure are settled; the rest of the batch is sent again.
    if (failed !== null)
      return {
        ...failed,
        ...refused,
        ...(parts.delivered.length === 0 ? {} : { delivered: parts.delivered }),
        // The latest credit window heard stands when the failure gave none (a timeout).
        ...(failed.credits === undefined && parts.credits !== undefined ? { credits: parts.credits } : {}),
        unsampled: true,
      };
    // The receiver's latest credit window from a delivered part stands.
    const credits = parts.credits === undefined ? {} : { credits: parts.credits };
    return { status: 200, unsampled: true, ...credits, ...refused };
  }

  /**
   * POSTs records `from` to `to` of the batch, splitting again while refused for content; adds the indexes refused
   * for good to `parts.refused`. Null when each record was delivered or refused; otherwise the failure that stopped it.
   */
  private async inParts(batch: TriggerBatch, from: number, to: number, parts: Parts): Promise<SinkResult | null> {
    const r = await this.post(batchJson(batch, from, to));
    const outcome = classifyResult(r);
    if (outcome === Outcome.OK) {
      if (r.credits !== undefined) parts.credits = r.credits;
      for (let i = from; i < to; i++) parts.delivered.push(i);
      return null;
    }
    if (outcome !== Outcome.REJECTED) return r;
    if (to - from > 1 && SPLIT_ON.has(r.status)) {
      const mid = (from + to) >>> 1;
      return (await this.inParts(batch, from, mid, parts)) ?? (await this.inParts(batch, mid, to, parts));
    }
    for (let i = from; i < to; i++) parts.refused.push(i);
    return null;
  }

  /** One POST of `body`; never rejects. */
  private post(body: string): Promise<SinkResult> {
    const o = this.options;
    const headers: Record<string, string | number> = {
      ...o.headers,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
    };
    if (o.bearerToken !== null) headers['authorization'] = `Bearer ${o.bearerToken}`;
    if (o.signingSecret !== null) {
      const ts = Math.floor(Date.now() / 1000);
      headers[SIGNATURE_TIMESTAMP_HEADER] = String(ts);
      headers[SIGNATURE_HEADER] = signWebhook(o.signingSecret, ts, body);
    }
    return new Promise<SinkResult>((resolve) => {
      let settled = false;
      let connectTimer: NodeJS.Timeout | null = null;
      const done = (r: SinkResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        if (connectTimer !== null) clearTimeout(connectTimer);
        resolve(r);
      };
      const request = (this.secure ? https.request : http.request) as typeof http.request;
      const req = request(
        {
          agent: this.agent,
          method: 'POST',
          hostname: this.target.hostname,
          port: this.target.port,
          path: this.target.pathname + this.target.search,
          headers,
        },
        (res) => {
          const status = res.statusCode ?? 0;
          const result: SinkResult = { status };
          const retryAfter = parseRetryAfterMs(res.headers['retry-after'], Date.now());
          if (retryAfter !== undefined) result.retryAfterMs = retryAfter;
          const creditHeader = res.headers[CREDIT_HEADER];
          if (typeof creditHeader === 'string' && /^\d+$/.test(creditHeader)) result.credits = Number(creditHeader);
          res.on('error', () => done({ status: 0, error: 'network' }));
          // The body is drained so the socket returns to the keep-alive pool.
          res.on('end', () => done(result));
          res.resume();
        },
      );
      // Why a deadline of our own: req.setTimeout is an idle timeout, which a server trickling bytes never trips.
      const deadline = setTimeout(() => {
        done({ status: 0, error: 'timeout' });
        req.destroy();
      }, o.timeoutMs);
      req.on('socket', (socket: Socket) => {
        if (this.connected.has(socket)) return;
        connectTimer = setTimeout(() => {
          done({ status: 0, error: 'connect-timeout' });
          req.destroy();
        }, o.connectTimeoutMs);
        socket.once(this.secure ? 'secureConnect' : 'connect', () => {
          this.connected.add(socket);
          if (connectTimer !== null) clearTimeout(connectTimer);
          connectTimer = null;
        });
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        done({ status: 0, error: errorKind(err) });
      });
      req.end(body);
    });
  }

  /** Closes the keep-alive sockets. */
  async close(): Promise<void> {
    this.agent.destroy();
  }
}

/** A batch being delivered in parts. */
interface Parts {
  /** Indexes refused for good, ascending. */
  refused: number[];
  /** Indexes delivered, ascending. */
  delivered: number[];
  /** The credit window of the latest delivered part's answer, if it gave one. */
  credits: number | undefined;
}

/** Statuses that refuse a request for what it carries: a request of several triggers is split (class comment). */
const SPLIT_ON: ReadonlySet<number> = new Set([400, 413, 422]);

/** What a request error was, for the sink result. */
function errorKind(err: NodeJS.ErrnoException): SinkError {
  if (err.code === 'ECONNREFUSED') return 'refused';
  const code = err.code ?? '';
  // Certificate and handshake failures (node:tls and OpenSSL codes).
  if (code.startsWith('ERR_TLS') || code.startsWith('ERR_SSL') || /CERT|SELF_SIGNED|VERIFY/.test(code)) return 'tls';
  return 'network';
}

/** Parses a Retry-After header (delay seconds or an HTTP date) into ms from `nowMs`; undefined when absent or bad. */
export function parseRetryAfterMs(value: string | string[] | undefined, nowMs: number): number | undefined {
  if (typeof value !== 'string' || value.length === 0) return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : Math.max(0, t - nowMs);
}
