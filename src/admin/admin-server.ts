/**
 * The admin HTTP server (main thread), on 127.0.0.1 by default:
 * - GET /metrics: Prometheus text exposition of the registry (read from shared memory at scrape time);
 * - GET /healthz: 200 while the process serves requests and the health function (if any) says healthy, else 503 with
 *   its reason (liveness: e.g. a containment shard group declared hung by the watchdog);
 * - GET /readyz: 200 when the readiness function says ready, else 503 with its reason;
 * - POST /admin/reload-fences: runs the reload handler once at a time; 200 with its result as JSON, 409 while one
 *   runs, 500 with the error message when it fails.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

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
}

/** Defaults of the admin server's address. */
export const ADMIN_DEFAULTS = { host: '127.0.0.1', port: 9464 } as const;

/** The admin HTTP server. */
export class AdminServer {
  private readonly options: AdminServerOptions;
  private server: Server | null = null;
  private reloading = false;
  private boundPort = 0;

  constructor(options: Omit<AdminServerOptions, 'host' | 'port'> & Partial<Pick<AdminServerOptions, 'host' | 'port'>>) {
    this.options = { host: ADMIN_DEFAULTS.host, port: ADMIN_DEFAULTS.port, ...options };
    const { host, port } = this.options;
    if (typeof host !== 'string' || host.length === 0) throw new RangeError(`options.host must be a non-empty string, got ${String(host)}`);
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`options.port must be an integer in [0, 65535], got ${String(port)}`);
  }

  /** The bound port (after `start`). */
  get port(): number {
    return this.boundPort;
  }

  /** Starts listening. */
  start(): Promise<void> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => send(res, 500, 'text/plain', `internal error: ${(err as Error).message}\n`));
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
    // Drain any request body; none of the routes reads one.
    req.resume();
    if (path === '/metrics') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const text = await this.options.registry.metrics();
      return send(res, 200, this.options.registry.contentType, text);
    }
    if (path === '/healthz') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const h = this.options.health?.();
      if (h !== undefined && !h.ready) return send(res, 503, 'text/plain', `unhealthy${h.reason !== undefined ? `: ${h.reason}` : ''}\n`);
      return send(res, 200, 'text/plain', 'ok\n');
    }
    if (path === '/readyz') {
      if (method !== 'GET' && method !== 'HEAD') return methodNotAllowed(res, 'GET');
      const r = this.options.readiness();
      const ready = typeof r === 'boolean' ? r : r.ready;
      const reason = typeof r === 'boolean' ? undefined : r.reason;
      return send(res, ready ? 200 : 503, 'text/plain', ready ? 'ready\n' : `not ready${reason !== undefined ? `: ${reason}` : ''}\n`);
    }
    if (path === '/admin/reload-fences') {
      if (method !== 'POST') return methodNotAllowed(res, 'POST');
      if (this.reloading) return sendJson(res, 409, { error: 'a fence reload is already running' });
      this.reloading = true;
      try {
        const result = await this.options.reloadFences();
        return sendJson(res, 200, { ok: true, result: result ?? null });
      } catch (err) {
        return sendJson(res, 500, { ok: false, error: err instanceof Error ? err.message : String(err) });
      } finally {
        this.reloading = false;
      }
    }
    return send(res, 404, 'text/plain', 'not found\n');
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
