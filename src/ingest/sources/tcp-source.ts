/**
 * TCP telemetry listener (ingest thread): many connections, one framing stream each.
 *
 * Overload policy (`overload`): with 'shed' (the default) sockets are never paused because rings fill: the edge
 * sheds by lane (a live GPS stream cannot be paused), and every 'data' chunk is decoded synchronously, in place: a
 * connection holds memory only for a frame it has begun and not completed (see FrameStream). With
 * 'backpressure' each connection goes through a PausableFeed (see ../backpressure.ts): when a frame's ring has no
 * room the socket is paused with the unfed part of its chunk kept (so TCP flow control slows the sender), and resumed
 * once it is fed; nothing is shed. Connections beyond `maxConnections` are refused and counted. Idle connections are
 * closed after `idleTimeoutMs` (a connection the router paused is not idle). Flood limits (`flood`, off by default)
 * reject pings and new devices over a connection's or a source address's per-second budget, counted by reason.
 *
 * Slow clients are bounded: a connection that begins a frame and does not complete it within `frameDeadlineMs` is
 * closed (a client trickling bytes holds no slot for long; a connection the router itself holds back with
 * 'backpressure' is not late while it is held, and its clock restarts when it may send again), and the bytes all connections hold for partial frames
 * stay within `maxHeldBytes`: past it, the connections whose partial frames are oldest are closed until the rest fit.
 * Each closure is counted by reason (ING_CONNECTIONS_DROPPED_F64); the partial frame counts as truncated.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer, type TlsOptions } from 'node:tls';
import { secretMatches } from '../../auth/secrets.js';
import {
  ConnectionDropReason,
  ING_CONNECTIONS_CLOSED_F64,
  ING_CONNECTIONS_DROPPED_F64,
  ING_CONNECTIONS_OPENED_F64,
  ING_CONNECTIONS_REFUSED_F64,
  ING_FORWARD_PAUSES_F64,
  ING_HELD_BYTES_F64,
} from '../../shm/layout.js';
import type { IngestEdge, IngestStream } from '../ingest-edge.js';
import {
  FloodGuard,
  hasFloodLimits,
  NO_FLOOD_LIMITS,
  validateFloodLimits,
  type FloodLimits,
} from '../stream-limits.js';
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
  /** A frame begun and not completed within this is refused and its connection closed, ms (0: never). */
  frameDeadlineMs: number;
  /** Bytes all connections may hold for partial frames together; past it the oldest partial frames' go. */
  maxHeldBytes: number;
  /** TLS (PEM contents, not paths): the listener speaks TLS only; with `ca`, client certificates are checked. */
  tls: { cert: string | Buffer; key: string | Buffer; ca: string | Buffer | null; requireClientCert: boolean } | null;
  /** Token each connection presents first, as the line `AUTH <token>\n` (null: none). */
  authToken: string | null;
}

/** Longest authentication line accepted, bytes (`AUTH ` + token + newline). */
const MAX_AUTH_LINE_BYTES = 512;
/** Time a connection has to present its token, ms. */
const AUTH_DEADLINE_MS = 10_000;

/** One open connection's stream and the partial frame it holds. */
interface Connection {
  readonly socket: Socket;
  readonly stream: IngestStream;
  /** Bytes its stream holds for a partial frame, as last counted into the total. */
  held: number;
  /** When its current partial frame began, ms since the epoch (-1: none, or the router holds the connection back). */
  partialSinceMs: number;
  /** True while the router holds the connection back ('backpressure'): its partial frame is not the sender's delay. */
  paused: boolean;
}

/** Defaults of the TCP source. */
const TCP_SOURCE_DEFAULTS: Readonly<TcpSourceOptions> = {
  host: '0.0.0.0',
  port: 7070,
  maxConnections: 10_000,
  idleTimeoutMs: 300_000,
  overload: 'shed',
  flood: NO_FLOOD_LIMITS,
  frameDeadlineMs: 10_000,
  maxHeldBytes: 64 * 1024 * 1024,
  tls: null,
  authToken: null,
};

/** Validates TCP source options; throws naming the option and its range. */
function validateTcpSourceOptions(o: TcpSourceOptions, prefix = 'options'): void {
  if (typeof o.host !== 'string' || o.host.length === 0)
    throw new RangeError(`${prefix}.host must be a non-empty string, got ${String(o.host)}`);
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535)
    throw new RangeError(`${prefix}.port must be an integer in [0, 65535], got ${String(o.port)}`);
  if (!Number.isInteger(o.maxConnections) || o.maxConnections < 1 || o.maxConnections > 1_000_000) {
    throw new RangeError(
      `${prefix}.maxConnections must be an integer in [1, 1000000], got ${String(o.maxConnections)}`,
    );
  }
  if (!Number.isInteger(o.idleTimeoutMs) || o.idleTimeoutMs < 0)
    throw new RangeError(`${prefix}.idleTimeoutMs must be an integer >= 0, got ${String(o.idleTimeoutMs)}`);
  if (o.overload !== 'shed' && o.overload !== 'backpressure') {
    throw new RangeError(`${prefix}.overload must be "shed" or "backpressure", got ${String(o.overload)}`);
  }
  validateFloodLimits(o.flood, prefix);
  if (!Number.isInteger(o.frameDeadlineMs) || o.frameDeadlineMs < 0 || o.frameDeadlineMs > 3_600_000) {
    throw new RangeError(
      `${prefix}.frameDeadlineMs must be an integer in [0, 3600000], got ${String(o.frameDeadlineMs)}`,
    );
  }
  if (!Number.isInteger(o.maxHeldBytes) || o.maxHeldBytes < 65_536 || o.maxHeldBytes > 2 ** 40) {
    throw new RangeError(`${prefix}.maxHeldBytes must be an integer in [65536, 2^40], got ${String(o.maxHeldBytes)}`);
  }
}

/** The TCP listener source. */
export class TcpSource implements TelemetrySource {
  readonly name = 'tcp';
  private readonly options: TcpSourceOptions;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /**
   * Every accepted TCP socket until it closes, those still reading the `AUTH` line or in the TLS handshake included
   * (not yet in `sockets`): `stop` ends them too, or the server's close would wait for them.
   */
  private readonly accepted = new Set<Socket>();
  /** Per open connection: resolves once its stream has ended (its kept bytes fed, with 'backpressure'). */
  private readonly closing = new Map<Socket, Promise<void>>();
  /** Connections `stop` closed while they were open and not ended by their sender (their partial frame: cut_at_stop). */
  private readonly cutByStop = new Set<Socket>();
  private boundPort = 0;
  /** Open connections by socket, for the frame deadline and the held-bytes budget. */
  private readonly connections = new Map<Socket, Connection>();
  /** Bytes the connections hold for partial frames, summed. */
  private heldTotal = 0;
  /** When the frame-deadline sweep last ran, ms since the epoch. */
  private lastSweepMs = 0;
  private deadlineTimer: NodeJS.Timeout | null = null;

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
    const onConnection = (socket: Socket): void => {
      // Authenticated (or through its handshake) after `stop` began: the listener is closing, nothing is read.
      if (this.server === null) {
        socket.destroy();
        return;
      }
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
      if (idleMs > 0) {
        socket.setTimeout(idleMs, () => {
          counters[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.IDLE]!++;
          socket.destroy();
        });
      }
      let ended: () => void = () => undefined;
      this.closing.set(socket, new Promise<void>((resolve) => (ended = resolve)));
      const closed = (): void => {
        const c = this.connections.get(socket);
        if (c !== undefined) {
          this.heldTotal -= c.held;
          counters[ING_HELD_BYTES_F64] = this.heldTotal;
          this.connections.delete(socket);
        }
        guard?.release(address);
        this.sockets.delete(socket);
        this.closing.delete(socket);
        counters[ING_CONNECTIONS_CLOSED_F64]!++;
        ended();
      };
      // The router holds the connection back (rings full with 'backpressure', or the ingest thread it was spread to
      // saturated): neither idleness nor a slow sender meanwhile, so the idle clock and the frame deadline stop.
      const holdBack = (): void => {
        if (idleMs > 0) socket.setTimeout(0);
        const c = this.connections.get(socket);
        if (c !== undefined) {
          c.paused = true;
          c.partialSinceMs = -1;
        }
        socket.pause();
      };
      const release = (): void => {
        if (idleMs > 0) socket.setTimeout(idleMs);
        const c = this.connections.get(socket);
        if (c !== undefined) {
          // The frame deadline runs again from now: the sender could not send while it was held back.
          c.paused = false;
          c.partialSinceMs = c.stream.bufferedBytes === 0 ? -1 : Date.now();
        }
        socket.resume();
      };
      if (this.options.overload === 'backpressure') {
        const feed = edge.openFeed(name, { onResume: release }, limits);
        this.connections.set(socket, { socket, stream: feed.stream, held: 0, partialSinceMs: -1, paused: false });
        socket.on('data', (chunk: Buffer) => {
          const fed = feed.write(chunk);
          this.afterData(socket, counters);
          if (!fed) holdBack();
        });
        // Cut by `stop`: its partial frame counts as cut_at_stop (not truncated: its sender did not end it).
        socket.on('close', () => void feed.end(this.cutByStop.delete(socket)).then(closed));
      } else {
        // Spread over the ingest threads (the edge decides; a connection held back by 'backpressure' stays here).
        const stream = edge.openConnection(name, limits, address);
        this.connections.set(socket, { socket, stream, held: 0, partialSinceMs: -1, paused: false });
        socket.on('data', (chunk: Buffer) => {
          stream.write(chunk);
          this.afterData(socket, counters);
          // Spread to an ingest thread whose input ring is full: its bytes wait, in order, and the connection is not
          // read until they have gone in (the other connections go on).
          if (stream.holdsBack?.() !== true) return;
          counters[ING_FORWARD_PAUSES_F64]!++;
          holdBack();
          stream.whenHandedOn!(release);
        });
        socket.on('close', () => {
          stream.end(this.cutByStop.delete(socket));
          closed();
        });
      }
      socket.on('error', () => {
        // A reset connection ends like a closed one; 'close' follows.
      });
    };
    const tls = this.options.tls;
    const token = this.options.authToken;
    const accept =
      token === null
        ? onConnection
        : (socket: Socket): void => this.authenticate(socket, token, counters, onConnection);
    let server: Server;
    if (tls === null) {
      server = createServer({ noDelay: true }, accept);
    } else {
      const tlsOptions: TlsOptions = {
        cert: tls.cert,
        key: tls.key,
        minVersion: 'TLSv1.2',
        handshakeTimeout: AUTH_DEADLINE_MS,
      };
      if (tls.ca !== null) {
        tlsOptions.ca = tls.ca;
        tlsOptions.requestCert = true;
        tlsOptions.rejectUnauthorized = tls.requireClientCert;
      }
      const tlsServer = createTlsServer(tlsOptions, (socket) => {
        socket.setNoDelay(true);
        accept(socket);
      });
      tlsServer.on('tlsClientError', (_err, socket) => {
        // A handshake the stop ended (see `stop`) is not the client's failure.
        if (this.server !== null) counters[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.TLS_HANDSHAKE]!++;
        socket.destroy();
      });
      server = tlsServer;
    }
    this.server = server;
    server.on('connection', (raw: Socket) => {
      this.accepted.add(raw);
      raw.once('close', () => this.accepted.delete(raw));
    });
    const deadlineMs = this.options.frameDeadlineMs;
    if (deadlineMs > 0) {
      // One sweep for every connection, a few times per deadline.
      const sweepMs = Math.max(50, Math.min(1000, deadlineMs / 4));
      this.lastSweepMs = Date.now();
      this.deadlineTimer = setInterval(() => this.closeLateFrames(counters, sweepMs), sweepMs);
      this.deadlineTimer.unref();
    }
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
   * Reads the connection's first line, `AUTH <token>`, before handing it to `next` with the bytes after it: a wrong
   * or missing token, a line longer than MAX_AUTH_LINE_BYTES or none within AUTH_DEADLINE_MS closes it, counted.
   */
  private authenticate(socket: Socket, token: string, counters: Float64Array, next: (socket: Socket) => void): void {
    let got: Buffer = Buffer.alloc(0);
    const refuse = (): void => {
      cleanup();
      counters[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.UNAUTHENTICATED]!++;
      socket.destroy();
    };
    const timer = setTimeout(refuse, AUTH_DEADLINE_MS);
    const onData = (chunk: Buffer): void => {
      got = got.length === 0 ? chunk : Buffer.concat([got, chunk]);
      const nl = got.indexOf(0x0a);
      if (nl < 0) {
        if (got.length > MAX_AUTH_LINE_BYTES) refuse();
        return;
      }
      const line = got.subarray(0, nl).toString('latin1').replace(/\r$/, '');
      const rest = got.subarray(nl + 1);
      if (nl > MAX_AUTH_LINE_BYTES || !line.startsWith('AUTH ') || !secretMatches(line.slice(5), token)) {
        refuse();
        return;
      }
      cleanup();
      next(socket);
      // The bytes after the line are the first telemetry.
      if (rest.length > 0) socket.emit('data', rest);
    };
    const onError = (): void => undefined;
    const cleanup = (): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('error', onError);
    };
    socket.on('data', onData);
    socket.on('error', onError);
    socket.once('close', () => clearTimeout(timer));
  }

  /** After a chunk: the connection's held bytes into the total, its partial frame's age, and the budget. */
  private afterData(socket: Socket, counters: Float64Array): void {
    const c = this.connections.get(socket);
    if (c === undefined) return;
    this.observe(c, counters);
    if (this.heldTotal > this.options.maxHeldBytes) this.closeOldestPartials(counters);
  }

  /**
   * Reads what the connection's stream holds back into the held total and its partial frame's age (after each
   * chunk, and at each deadline sweep: a connection decoded by another ingest thread reports a moment later).
   */
  private observe(c: Connection, counters: Float64Array): void {
    const held = c.stream.heldBytes;
    if (held !== c.held) {
      this.heldTotal += held - c.held;
      c.held = held;
      counters[ING_HELD_BYTES_F64] = this.heldTotal;
    }
    if (c.stream.bufferedBytes === 0) c.partialSinceMs = -1;
    else if (c.partialSinceMs < 0 && !c.paused) c.partialSinceMs = Date.now();
  }

  /**
   * Closes connections, oldest partial frame first, until the held bytes fit the budget; a connection this router
   * paused (its partial frame waits for the router, not for its sender: no age) goes last.
   */
  private closeOldestPartials(counters: Float64Array): void {
    const age = (c: Connection): number => (c.partialSinceMs < 0 ? Infinity : c.partialSinceMs);
    const partial = [...this.connections.values()].filter((c) => c.held > 0).sort((a, b) => age(a) - age(b));
    for (const c of partial) {
      if (this.heldTotal <= this.options.maxHeldBytes) break;
      this.drop(c, ConnectionDropReason.HELD_BYTES, counters);
    }
  }

  /**
   * Closes the connections whose partial frame is older than the frame deadline. A sweep that runs late found this
   * thread's own loop stalled, the senders' bytes waiting unread in their sockets: that time is not theirs, so every
   * partial frame's age is moved on by the lateness first.
   */
  private closeLateFrames(counters: Float64Array, sweepMs: number): void {
    const now = Date.now();
    const sinceLastMs = now - this.lastSweepMs;
    const lateMs = sinceLastMs - sweepMs;
    this.lastSweepMs = now;
    if (lateMs > 0) for (const c of this.connections.values()) if (c.partialSinceMs >= 0) c.partialSinceMs += lateMs;
    // A connection whose bytes have not all reached the ingest thread that decodes it (that thread is busy or
    // stalled): its sender is not the slow one, so the time since the last sweep is not its either.
    for (const c of this.connections.values()) {
      if (c.partialSinceMs >= 0 && c.stream.inTransit?.() === true) c.partialSinceMs += Math.min(sinceLastMs, sweepMs);
    }
    for (const c of this.connections.values()) this.observe(c, counters);
    if (this.heldTotal > this.options.maxHeldBytes) this.closeOldestPartials(counters);
    const before = now - this.options.frameDeadlineMs;
    for (const c of this.connections.values()) {
      if (c.partialSinceMs >= 0 && c.partialSinceMs < before)
        this.drop(c, ConnectionDropReason.FRAME_DEADLINE, counters);
    }
  }

  /** Closes a connection for `reason` (counted); its held bytes leave the total now. */
  private drop(c: Connection, reason: number, counters: Float64Array): void {
    counters[ING_CONNECTIONS_DROPPED_F64 + reason]!++;
    this.heldTotal -= c.held;
    c.held = 0;
    c.partialSinceMs = -1;
    counters[ING_HELD_BYTES_F64] = this.heldTotal;
    this.connections.delete(c.socket);
    c.socket.destroy();
  }

  /**
   * Stops listening and closes every connection (their partial frames count as cut_at_stop; with 'backpressure' the
   * bytes already received are fed first), and every socket still authenticating or in its TLS handshake (nothing of
   * theirs read); resolves when all have ended.
   */
  stop(): Promise<void> {
    const server = this.server;
    if (server === null) return Promise.resolve();
    this.server = null;
    if (this.deadlineTimer !== null) clearInterval(this.deadlineTimer);
    this.deadlineTimer = null;
    const closing: Promise<void>[] = [new Promise((resolve) => server.close(() => resolve()))];
    for (const s of this.sockets) {
      closing.push(this.closing.get(s) ?? Promise.resolve());
      // Not closed by the router already (a drop) nor ended by its sender (all it sent was read): the stop cuts it.
      if (!s.destroyed && !s.readableEnded) this.cutByStop.add(s);
      s.destroy();
    }
    // Those still authenticating or in the TLS handshake: nothing of theirs was read (a live TLS connection's own
    // socket is already destroyed above).
    for (const raw of this.accepted) raw.destroy();
    return Promise.all(closing).then(() => undefined);
  }
}
