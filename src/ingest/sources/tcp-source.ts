/**
 * TCP telemetry listener (ingest thread): many connections, one framing stream each.
 *
 * Backpressure: sockets are never paused because rings fill (the edge sheds by lane; a live GPS stream cannot be
 * paused). Buffered bytes per connection are bounded by the stream's fixed accumulation buffer (maxFrameBytes +
 * readChunkBytes) since every 'data' chunk is decoded synchronously; connections beyond `maxConnections` are refused
 * and counted. Idle connections are closed after `idleTimeoutMs`.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { ING_CONNECTIONS_CLOSED_F64, ING_CONNECTIONS_OPENED_F64, ING_CONNECTIONS_REFUSED_F64 } from '../../shm/layout.js';
import type { IngestEdge } from '../ingest-edge.js';
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
}

/** Defaults of the TCP source. */
export const TCP_SOURCE_DEFAULTS: Readonly<TcpSourceOptions> = {
  host: '0.0.0.0',
  port: 7070,
  maxConnections: 10_000,
  idleTimeoutMs: 0,
};

/** Validates TCP source options; throws naming the option and its range. */
export function validateTcpSourceOptions(o: TcpSourceOptions, prefix = 'options'): void {
  if (typeof o.host !== 'string' || o.host.length === 0) throw new RangeError(`${prefix}.host must be a non-empty string, got ${String(o.host)}`);
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new RangeError(`${prefix}.port must be an integer in [0, 65535], got ${String(o.port)}`);
  if (!Number.isInteger(o.maxConnections) || o.maxConnections < 1 || o.maxConnections > 1_000_000) {
    throw new RangeError(`${prefix}.maxConnections must be an integer in [1, 1000000], got ${String(o.maxConnections)}`);
  }
  if (!Number.isInteger(o.idleTimeoutMs) || o.idleTimeoutMs < 0) throw new RangeError(`${prefix}.idleTimeoutMs must be an integer >= 0, got ${String(o.idleTimeoutMs)}`);
}

/** The TCP listener source. */
export class TcpSource implements TelemetrySource {
  readonly name = 'tcp';
  private readonly options: TcpSourceOptions;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
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
    const server = createServer({ noDelay: true }, (socket) => {
      if (this.sockets.size >= this.options.maxConnections) {
        counters[ING_CONNECTIONS_REFUSED_F64]!++;
        socket.destroy();
        return;
      }
      counters[ING_CONNECTIONS_OPENED_F64]!++;
      this.sockets.add(socket);
      const stream = edge.openStream(`tcp ${String(socket.remoteAddress)}:${String(socket.remotePort)}`);
      if (this.options.idleTimeoutMs > 0) {
        socket.setTimeout(this.options.idleTimeoutMs, () => socket.destroy());
      }
      socket.on('data', (chunk: Buffer) => stream.write(chunk));
      socket.on('error', () => {
        // A reset connection ends like a closed one; 'close' follows.
      });
      socket.on('close', () => {
        stream.end();
        this.sockets.delete(socket);
        counters[ING_CONNECTIONS_CLOSED_F64]!++;
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

  /** Stops listening and closes every connection (their partial frames count as truncated); resolves when all closed. */
  stop(): Promise<void> {
    const server = this.server;
    if (server === null) return Promise.resolve();
    this.server = null;
    const closing: Promise<void>[] = [new Promise((resolve) => server.close(() => resolve()))];
    for (const s of this.sockets) {
      closing.push(new Promise((resolve) => s.once('close', () => resolve())));
      s.destroy();
    }
    return Promise.all(closing).then(() => undefined);
  }
}
