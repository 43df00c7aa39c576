import * as http from 'node:http';
import { batchJson } from './format.js';
import type { Sink, SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';
import { checkNumber, withDefaults } from '../validate.js';

/** Options of WebhookSink. */
export interface WebhookSinkOptions {
  /** Target URL (http:). */
  url: string;
  /** Per-request timeout, ms: no answer in time is loss. */
  timeoutMs: number;
  /** Keep-alive sockets at most (set it to the downstream's safety cap). */
  maxSockets: number;
  /** Extra request headers. */
  headers: Readonly<Record<string, string>>;
}

/** Defaults of WebhookSink (url has none). */
export const WEBHOOK_SINK_DEFAULTS: Readonly<Omit<WebhookSinkOptions, 'url'>> = {
  timeoutMs: 10_000,
  maxSockets: 256,
  headers: {},
};

/** Response header in which a consumer may advertise its credit window. */
const CREDIT_HEADER = 'x-credit-window';

/**
 * HTTP webhook sink: each batch is one `POST` of a JSON array (see `batchJson`) over keep-alive connections
 * (node:http Agent). 2xx is delivered; `Retry-After` (seconds or an HTTP date) and `x-credit-window` are read from
 * the answer; connection refused, timeouts and socket errors come back as status 0 with the reason.
 */
export class WebhookSink implements Sink {
  private readonly options: WebhookSinkOptions;
  private readonly agent: http.Agent;
  private readonly target: URL;

  /** Validates the options; the URL must be http:. */
  constructor(options: Partial<WebhookSinkOptions> & { url: string }) {
    const o = withDefaults({ ...WEBHOOK_SINK_DEFAULTS, url: options.url }, options);
    const target = new URL(o.url);
    if (target.protocol !== 'http:') throw new RangeError(`options.url must be an http: URL, got ${o.url}`);
    checkNumber('options.timeoutMs', o.timeoutMs, 1, 3_600_000);
    checkNumber('options.maxSockets', o.maxSockets, 1, 65536, true);
    this.options = o;
    this.target = target;
    this.agent = new http.Agent({ keepAlive: true, maxSockets: o.maxSockets });
  }

  /** POSTs the batch; never rejects. */
  deliver(batch: TriggerBatch): Promise<SinkResult> {
    const body = batchJson(batch);
    return new Promise<SinkResult>((resolve) => {
      let settled = false;
      const done = (r: SinkResult): void => {
        if (!settled) {
          settled = true;
          resolve(r);
        }
      };
      const req = http.request(
        {
          agent: this.agent,
          method: 'POST',
          hostname: this.target.hostname,
          port: this.target.port,
          path: this.target.pathname + this.target.search,
          headers: {
            ...this.options.headers,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
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
      req.setTimeout(this.options.timeoutMs, () => {
        done({ status: 0, error: 'timeout' });
        req.destroy();
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        done({ status: 0, error: err.code === 'ECONNREFUSED' ? 'refused' : 'network' });
      });
      req.end(body);
    });
  }

  /** Closes the keep-alive sockets. */
  async close(): Promise<void> {
    this.agent.destroy();
  }
}

/** Parses a Retry-After header (delay seconds or an HTTP date) into ms from `nowMs`; undefined when absent or bad. */
export function parseRetryAfterMs(value: string | string[] | undefined, nowMs: number): number | undefined {
  if (typeof value !== 'string' || value.length === 0) return undefined;
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000);
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : Math.max(0, t - nowMs);
}
