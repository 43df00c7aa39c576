/**
 * TCP telemetry listener (ingest thread): many connections, one framing stream each.
 *
 * Overload policy (`overload`): with 'shed' (the default) sockets are never paused because rings fill: the edge
 * sheds by lane (a live GPS stream cannot be paused), and buffered bytes per connection are bounded by the stream's
 * fixed accumulation buffer (maxFrameBytes + readChunkBytes) since every 'data' chunk is decoded synchronously. With
 * 'backpressure' each connection goes through a PausableFeed (see ../backpressure.ts): when a frame's ring has no
 * room the socket is paused with the unfed part of its chunk kept (so TCP flow control slows the sender), and resumed
 * once it is fed; nothing is shed. Connections beyond `maxConnections` are refused and counted. Idle connections are
 * closed after `idleTimeoutMs` (a connection the router paused is not idle). Flood limits (`flood`, off by default)
 * reject pings and new devices over a connection's or a source address's per-second budget, counted by reason.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { ING_CONNECTIONS_CLOSED_F64, ING_CONNECTIONS_OPENED_F64, ING_CONNECTIONS_REFUSED_F64 } from '../../shm/layout.js';
import type { IngestEdge } from '../ingest-edge.js';
import { FloodGuard, hasFloodLimits, NO_FLOOD_LIMITS, validateFloodLimits, type FloodLimits } from '../stream-limits.js';
import type { TelemetrySource } from './source.js';

/** Options of the TCP source. */
export interface TcpSourceOptions {
  /** Interface to bind. */
  host: string;
  /** Port to bind (0: any free port; read it from `port` after start). */
  port: number;
  /** Largest number of simultaneous connections. */
  maxConnections: number;
  /** A connection with no data for this long is closed, ms (0: never). */
  idleTimeoutMs: number;
  /** When a frame's ring has no room: 'shed' by lane at the edge, or pause the connection ('backpressure'). */
  overload: 'shed' | 'backpressure';
  /** Pings and new devices per second per connection and per source address (see stream-limits.ts). */
  flood: FloodLimits;
}

/** Defaults of the TCP source. */
export const TCP_SOURCE_DEFAULTS: Readonly<TcpSourceOptions> = {
  host: '0.0.0.0',
  port: 7070,
  maxConnections: 10_000,
  idleTimeoutMs: 300_000,
  overload: 'shed',
  flood: NO_FLOOD_LIMITS,
};

/** Validates TCP source options; throws naming the option and its range. */
export function validateTcpSourceOptions(o: TcpSourceOptions, prefix = 'options'): void {
  if (typeof o.host !== 'string' || o.host.length === 0) throw new RangeError(`${prefix}.host must be a non-empty string, got ${String(o.host)}`);
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new RangeError(`${prefix}.port must be an integer in [0, 65535], got ${String(o.port)}`);
  if (!Number.isInteger(o.maxConnections) || o.maxConnections < 1 || o.maxConnections > 1_000_000) {
    throw new RangeError(`${prefix}.maxConnections must be an integer in [1, 1000000], got ${String(o.maxConnections)}`);
  }
  if (!Number.isInteger(o.idleTimeoutMs) || o.idleTimeoutMs < 0) throw new RangeError(`${prefix}.idleTimeoutMs must be an integer >= 0, got ${String(o.idleTimeoutMs)}`);
  if (o.overload !== 'shed' && o.overload !== 'backpressure') {
    throw new RangeError(`${prefix}.overload must be "shed" or "backpressure", got ${String(o.overload)}`);
  }
  validateFloodLimits(o.flood, prefix);
}

/** The TCP listener source. */
export class TcpSource implements TelemetrySource {
  readonly name = 'tcp';
  private readonly options: TcpSourceOptions;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /** Per open connection: resolves once its stream has ended (its kept bytes fed, with 'backpressure'). */
  private readonly closing = new Map<Socket, Promise<void>>();
  private boundPort = 0;

  constructor(options: Partial<TcpSourceOptions> = {}) {
    this.options = { ...TCP_SOURCE_DEFAULTS, ...options };
    validateTcpSourceOptions(this.options);
  }

  /** The bound port (after `start`). */
  get port(): number {
    return this.boundPort;
  }

  /** Open connections. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  start(edge: IngestEdge): Promise<void> {
    const counters = edge.counters;
    const guard = hasFloodLimits(this.options.flood) ? new FloodGuard(this.options.flood, edge.clockNs) : null;
    const server = createServer({ noDelay: true }, (socket) => {
      if (this.sockets.size >= this.options.maxConnections) {
        counters[ING_CONNECTIONS_REFUSED_F64]!++;
        socket.destroy();
        return;
      }
      counters[ING_CONNECTIONS_OPENED_F64]!++;
      this.sockets.add(socket);
      const name = `tcp ${String(socket.remoteAddress)}:${String(socket.remotePort)}`;
      const address = String(socket.remoteAddress);
      const limits = guard === null ? null : guard.open(address);
      const idleMs = this.options.idleTimeoutMs;
      if (idleMs > 0) socket.setTimeout(idleMs, () => socket.destroy());
      let ended: () => void = () => undefined;
      this.closing.set(socket, new Promise<void>((resolve) => (ended = resolve)));
      const closed = (): void => {
        guard?.release(address);
        this.sockets.delete(socket);
        this.closing.delete(socket);
        counters[ING_CONNECTIONS_CLOSED_F64]!++;
        ended();
      };
      if (this.options.overload === 'backpressure') {
        const feed = edge.openFeed(
          name,
          {
            onResume: () => {
              if (idleMs > 0) socket.setTimeout(idleMs);
              socket.resume();
            },
          },
          limits,
        );
        socket.on('data', (chunk: Buffer) => {
          if (feed.write(chunk)) return;
          // Waiting for the rings is not idleness: the idle clock stops while the router holds the connection.
          if (idleMs > 0) socket.setTimeout(0);
          socket.pause();
        });
        socket.on('close', () => void feed.end().then(closed));
      } else {
        const stream = edge.openStream(name, limits);
        socket.on('data', (chunk: Buffer) => stream.write(chunk));
        socket.on('close', () => {
          stream.end();
          closed();
        });
      }
      socket.on('error', () => {
        // A reset connection ends like a closed one; 'close' follows.
      });
    });
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port, this.options.host, () => {
        server.off('error', reject);
        const addr = server.address();
        this.boundPort = addr !== null && typeof addr === 'object' ? addr.port : 0;
        resolve();
      });
    });
  }

  /**
   * Stops listening and closes every connection (their partial frames count as truncated; with 'backpressure' the
   * bytes already received are fed first); resolves when all have ended.
   */
  stop(): Promise<void> {
    const server = this.server;
    if (server === null) return Promise.resolve();
    this.server = null;
    const closing: Promise<void>[] = [new Promise((resolve) => server.close(() => resolve()))];
    for (const s of this.sockets) {
      closing.push(this.closing.get(s) ?? Promise.resolve());
      s.destroy();
    }
    return Promise.all(closing).then(() => undefined);
  }
}
