/**
 * The admin HTTP server (main thread), on 127.0.0.1 by default:
 * - GET /metrics: Prometheus text exposition of the registry (read from shared memory at scrape time);
 * - GET /healthz: 200 while the process serves requests and the health function (if any) says healthy, else 503 with
 *   its reason (liveness: e.g. a containment shard group declared hung by the watchdog);
 * - GET /readyz: 200 when the readiness function says ready, else 503 with its reason;
 * - GET /devices/:id and GET /fences/:id/devices: what a device is inside now, and who is inside a fence now;
 * - POST /admin/reload-fences: runs the reload handler once at a time; 200 with its result as JSON, 409 while one
 *   runs, 500 with the error message when it fails (file system paths in it reduced to their last part);
 * - PUT /admin/fences/:id (body: one GeoJSON Feature, up to `maxFenceBodyBytes`; its `properties.id` is the path's
 *   id or absent) and DELETE /admin/fences/:id: live fence edits; 200 with the edit's result, 400 for an invalid
 *   fence (every problem listed), 404 for deleting an id not in force, 503 when the router cannot take edits now.
 *
 * Hygiene: a route that changes anything needs `Authorization: Bearer <token>` when a token is set (compared in
 * constant time; 401 otherwise) and is rate limited (429 with Retry-After past `mutationsPerMinute`); a request body
 * larger than `maxBodyBytes` is refused (413) and its connection closed, whatever the route. Every refusal is counted
 * by reason (`refused`).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { secretMatches } from '../auth/secrets.js';

/** What readiness reports. */
export interface Readiness {
  /** Whether the router takes traffic. */
  ready: boolean;
  /** Why not, when not. */
  reason?: string;
}

/** Options of the admin server. */
export interface AdminServerOptions {
  /** Interface to bind. */
  host: string;
  /** Port (0: any free port; read `port` after start). */
  port: number;
  /** The metrics: a prom-client Registry, or anything with its `metrics()` and `contentType`. */
  registry: { metrics(): Promise<string>; readonly contentType: string };
  /** Readiness of the router. */
  readiness: () => Readiness | boolean;
  /** Health of the router (same shape as readiness; `ready` reads "healthy"); absent: always healthy. */
  health?: () => Readiness;
  /** Reloads the fences; its resolved value is returned as JSON. */
  reloadFences: () => Promise<unknown>;
  /** Answers the read-only state routes (GET /devices/:id, GET /fences/:id/devices); absent: those routes are 404. */
  queries?: {
    device(deviceId: string | number): unknown;
    occupants(fenceId: string): unknown;
  };
  /** Live fence edits (PUT / DELETE /admin/fences/:id); absent: those routes are 404. */
  fences?: {
    /** Adds or replaces the fence; rejects with an error carrying `errors` (problems) for an invalid one. */
    upsert(feature: unknown): Promise<{ action: string }>;
    /** Removes the fence; resolves with action 'absent' when no fence has that id. */
    remove(fenceId: string): Promise<{ action: string }>;
  };
  /** Bearer token every mutating route requires (null: none; then only a loopback bind is safe). */
  token: string | null;
  /** Largest request body accepted, bytes, on every route but the fence upsert. */
  maxBodyBytes: number;
  /** Largest fence upsert body accepted, bytes. */
  maxFenceBodyBytes: number;
  /** Mutating requests accepted per minute (a token bucket of that many, refilled evenly). */
  mutationsPerMinute: number;
  /** Fence edits accepted per minute (a bucket of their own). */
  fenceEditsPerMinute: number;
}

/** The handlers a router serves through the admin server (see `AdminServer.use`). */
export type AdminHandlers = Pick<
  AdminServerOptions,
  'registry' | 'readiness' | 'health' | 'reloadFences' | 'fences' | 'queries'
>;

/** Defaults of the admin server. */
const ADMIN_DEFAULTS = {
  host: '127.0.0.1',
  port: 9464,
  token: null,
  maxBodyBytes: 16 * 1024,
  maxFenceBodyBytes: 4 * 1024 * 1024,
  mutationsPerMinute: 12,
  fenceEditsPerMinute: 600,
} as const;

/** Why the admin server refused a request. */
export const ADMIN_REFUSAL_REASONS = ['unauthorized', 'rate_limited', 'body_too_large'] as const;

/** Refused requests by reason. */
export type AdminRefusals = Record<(typeof ADMIN_REFUSAL_REASONS)[number], number>;

/** Replaces every absolute file system path in `text` with its last part (responses never show where files live). */
function withoutPaths(text: string): string {
  return text.replace(/(?<=^|[\s'"(=:])(?:[A-Za-z]:)?(?:[\\/][^\s\\/:'"`,;()]+)+/g, (p) => {
    const parts = p.split(/[\\/]/);
    return parts[parts.length - 1] ?? '';
  });
}

/** The admin options with defaults. */
type DefaultedOption = keyof typeof ADMIN_DEFAULTS;

/** A token bucket of `perMinute` requests a minute, refilled evenly. */
class MinuteBucket {
  private tokens: number;
  private refilledAtMs = Date.now();

  constructor(
    name: string,
    readonly perMinute: number,
  ) {
    if (!Number.isInteger(perMinute) || perMinute < 1 || perMinute > 60_000) {
      throw new RangeError(`options.${name} must be an integer in [1, 60000], got ${String(perMinute)}`);
    }
    this.tokens = perMinute;
  }

  /** Takes one token; false when none is left. */
  take(): boolean {
    const now = Date.now();
    this.tokens = Math.min(this.perMinute, this.tokens + ((now - this.refilledAtMs) * this.perMinute) / 60_000);
    this.refilledAtMs = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** The admin HTTP server. */
export class AdminServer {
  private readonly options: AdminServerOptions;
  private server: Server | null = null;
  private reloading = false;
  private boundPort = 0;
  /** Requests refused, by reason. */
  readonly refused: AdminRefusals = { unauthorized: 0, rate_limited: 0, body_too_large: 0 };
  /** Mutations (reloads) and fence edits allowed now. */
  private readonly mutations: MinuteBucket;
  private readonly edits: MinuteBucket;

  constructor(options: Omit<AdminServerOptions, DefaultedOption> & Partial<Pick<AdminServerOptions, DefaultedOption>>) {
    this.options = { ...ADMIN_DEFAULTS, ...options };
    const { host, port, token, maxBodyBytes, maxFenceBodyBytes, mutationsPerMinute, fenceEditsPerMinute } =
      this.options;
    if (typeof host !== 'string' || host.length === 0)
      throw new RangeError(`options.host must be a non-empty string, got ${String(host)}`);
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new RangeError(`options.port must be an integer in [0, 65535], got ${String(port)}`);
    if (token !== null && (typeof token !== 'string' || token.length < 16))
      throw new RangeError('options.token must be null or a string of at least 16 characters');
    if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 0 || maxBodyBytes > 1 << 30) {
      throw new RangeError(`options.maxBodyBytes must be an integer in [0, 2^30], got ${String(maxBodyBytes)}`);
    }
    if (!Number.isInteger(maxFenceBodyBytes) || maxFenceBodyBytes < 0 || maxFenceBodyBytes > 1 << 30) {
      throw new RangeError(
        `options.maxFenceBodyBytes must be an integer in [0, 2^30], got ${String(maxFenceBodyBytes)}`,
      );
    }
    this.mutations = new MinuteBucket('mutationsPerMinute', mutationsPerMinute);
    this.edits = new MinuteBucket('fenceEditsPerMinute', fenceEditsPerMinute);
  }

  /**
   * Serves `handlers` from now on: the server starts before the router it serves exists (so `/healthz` and `/readyz`
   * answer while the fences load and the threads start) and is handed over once the router runs.
   */
  use(handlers: AdminHandlers): void {
    Object.assign(this.options, handlers);
  }

  /** The bound port (after `start`). */
  get port(): number {
    return this.boundPort;
  }

  /** Starts listening. */
  start(): Promise<void> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) =>
        send(res, 500, 'text/plain', `internal error: ${(err as Error).message}\n`),
      );
    });
    server.keepAliveTimeout = 5000;
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port, this.options.host, () => {
        server.off('error', reject);
        const a = server.address();
        this.boundPort = a !== null && typeof a === 'object' ? a.port : 0;
        resolve();
      });
    });
  }

  /** Stops listening and closes idle keep-alive connections. */
  close(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (server === null) return Promise.resolve();
    return new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    // Only the fence upsert reads a body: one announced too large is refused at once, one that turns out too large as
    // it arrives closes the connection; the rest is drained.
    const fenceRoute = /^\/admin\/fences\/([^/]+)$/.exec(path ?? '');
    const readsBody = fenceRoute !== null && method === 'PUT' && this.options.fences !== undefined;
    const limit = readsBody ? this.options.maxFenceBodyBytes : this.options.maxBodyBytes;
    const announced = Number(req.headers['content-length'] ?? 0);
    if (announced > limit) {
      this.refused.body_too_large++;
      res.setHeader('connection', 'close');
      send(res, 413, 'text/plain', `request body over ${limit} bytes\n`);
      req.socket.end();
      return;
    }
    let received = 0;
    const chunks: Buffer[] = [];
    const body = new Promise<Buffer | null>((resolve) => {
      req.on('end', () => resolve(Buffer.concat(chunks)));
      req.on('close', () => resolve(null));
    });
    req.on('data', (c: Buffer) => {
      received += c.length;
      if (received > limit) {
        this.refused.body_too_large++;
        req.socket.destroy();
      } else if (readsBody) chunks.push(c);
    });
    req.resume();
    if (path === '/metrics') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const text = await this.options.registry.metrics();
      return send(res, 200, this.options.registry.contentType, text);
    }
    if (path === '/healthz') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const h = this.options.health?.();
      if (h !== undefined && !h.ready)
        return send(res, 503, 'text/plain', `unhealthy${h.reason !== undefined ? `: ${h.reason}` : ''}\n`);
      return send(res, 200, 'text/plain', 'ok\n');
    }
    if (path === '/readyz') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const r = this.options.readiness();
      const ready = typeof r === 'boolean' ? r : r.ready;
      const reason = typeof r === 'boolean' ? undefined : r.reason;
      return send(
        res,
        ready ? 200 : 503,
        'text/plain',
        ready ? 'ready\n' : `not ready${reason !== undefined ? `: ${reason}` : ''}\n`,
      );
    }
    if (path === '/admin/reload-fences') {
      if (method !== 'POST') return methodNotAllowed(res, 'POST');
      if (!this.admitMutation(req, res, this.mutations)) return;
      if (this.reloading) return sendJson(res, 409, { error: 'a fence reload is already running' });
      this.reloading = true;
      try {
        const result = await this.options.reloadFences();
        return sendJson(res, 200, { ok: true, result: result ?? null });
      } catch (err) {
        return sendJson(res, 500, { ok: false, error: withoutPaths(err instanceof Error ? err.message : String(err)) });
      } finally {
        this.reloading = false;
      }
    }
    const edits = this.options.fences;
    if (edits !== undefined && fenceRoute !== null) {
      if (method !== 'PUT' && method !== 'DELETE') return methodNotAllowed(res, 'PUT, DELETE');
      if (!this.admitMutation(req, res, this.edits)) return;
      const fenceId = decodeUriPart(fenceRoute[1]!);
      if (fenceId === null) return sendJson(res, 400, { error: 'malformed percent-encoding in the fence id' });
      try {
        if (method === 'DELETE') {
          const result = await edits.remove(fenceId);
          return result.action === 'absent'
            ? sendJson(res, 404, { error: `no fence ${JSON.stringify(fenceId)}` })
            : sendJson(res, 200, { ok: true, result });
        }
        const raw = await body;
        if (raw === null) return undefined;
        const feature = featureFor(fenceId, raw);
        if (typeof feature === 'string') return sendJson(res, 400, { error: feature });
        return sendJson(res, 200, { ok: true, result: await edits.upsert(feature) });
      } catch (err) {
        const problems = (err as { errors?: unknown }).errors;
        if (Array.isArray(problems)) return sendJson(res, 400, { error: (err as Error).message, problems });
        return sendJson(res, 503, { error: withoutPaths(err instanceof Error ? err.message : String(err)) });
      }
    }
    const q = this.options.queries;
    const device = /^\/devices\/([^/]+)$/.exec(path ?? '');
    if (q !== undefined && device !== null) {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const raw = decodeUriPart(device[1]!);
      if (raw === null) return sendJson(res, 400, { error: 'malformed percent-encoding in the device id' });
      // Digits name a numeric id unless ?type=string says the device sent a string (42 and "42" are two devices).
      const asString = /[?&]type=string(&|$)/.test(req.url ?? '');
      const id = !asString && /^\d{1,16}$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : raw;
      const answer = q.device(id);
      return answer === null
        ? sendJson(res, 404, { error: `no device ${JSON.stringify(id)}` })
        : sendJson(res, 200, answer);
    }
    const fence = /^\/fences\/([^/]+)\/devices$/.exec(path ?? '');
    if (q !== undefined && fence !== null) {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const fenceId = decodeUriPart(fence[1]!);
      if (fenceId === null) return sendJson(res, 400, { error: 'malformed percent-encoding in the fence id' });
      const answer = q.occupants(fenceId);
      return answer === null
        ? sendJson(res, 404, { error: `no fence ${JSON.stringify(fenceId)}` })
        : sendJson(res, 200, { fenceId, devices: answer });
    }
    return send(res, 404, 'text/plain', 'not found\n');
  }

  /** Checks the token and takes a token from `bucket`; answers 401 or 429 and returns false when either fails. */
  private admitMutation(req: IncomingMessage, res: ServerResponse, bucket: MinuteBucket): boolean {
    if (!this.authorized(req)) {
      this.refused.unauthorized++;
      res.setHeader('www-authenticate', 'Bearer');
      send(res, 401, 'text/plain', 'unauthorized\n');
      return false;
    }
    if (!bucket.take()) {
      this.refused.rate_limited++;
      res.setHeader('retry-after', String(Math.ceil(60 / bucket.perMinute)));
      send(res, 429, 'text/plain', 'too many requests\n');
      return false;
    }
    return true;
  }

  /** Whether the request carries the bearer token (always, when none is set). */
  private authorized(req: IncomingMessage): boolean {
    const token = this.options.token;
    if (token === null) return true;
    const header = req.headers.authorization ?? '';
    const m = /^Bearer (.+)$/.exec(header);
    return m !== null && secretMatches(m[1]!, token);
  }
}

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json', `${JSON.stringify(value)}\n`);
}

function methodNotAllowed(res: ServerResponse, allow: string): void {
  res.setHeader('allow', allow);
  send(res, 405, 'text/plain', 'method not allowed\n');
}

/** The Feature a PUT body holds, its `properties.id` set to the path's id; or what is wrong with it. */
function featureFor(fenceId: string, raw: Buffer): unknown {
  let feature: unknown;
  try {
    feature = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    return `body is not JSON: ${(err as Error).message}`;
  }
  if (typeof feature !== 'object' || feature === null || Array.isArray(feature)) return 'body is not a GeoJSON Feature';
  const f = feature as { properties?: unknown };
  const props = f.properties ?? {};
  if (typeof props !== 'object' || props === null || Array.isArray(props)) return 'properties must be an object';
  const id = (props as { id?: unknown }).id;
  if (id !== undefined && String(id) !== fenceId) {
    return `properties.id ${JSON.stringify(id)} differs from the id in the path ${JSON.stringify(fenceId)}`;
  }
  return { ...f, properties: { ...props, id: fenceId } };
}

/** A percent-decoded path segment, or null when its encoding is malformed. */
function decodeUriPart(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}
