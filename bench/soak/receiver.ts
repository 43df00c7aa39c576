/**
 * Webhook receivers of the soak (real HTTP servers in the soak's process) that check the delivery contract as triggers
 * stream in, without keeping them: per device, seq must strictly increase; a trigger at or below the device's last
 * seq is a re-delivery only when its content matches what that (device, seq) carried (a window of recent seqs per
 * device is kept to tell), else a violation; a jump of more than one is a gap (a trigger this receiver never got).
 *
 * A receiver follows a behaviour chosen per request by `behaviour(nowMs)`: answer 200 after a delay, answer 503 with
 * Retry-After, hang (never answer), reset the connection, or refuse connections (the server stops listening).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** What a receiver does with a request. */
export type Behaviour =
  | { kind: 'ok'; delayMs: number }
  | { kind: 'unavailable'; retryAfterS: number }
  | { kind: 'hang' }
  | { kind: 'reset' }
  | { kind: 'down' };

/** Recent seqs remembered per device to recognise a re-delivery. */
const WINDOW = 64;

/** Per-device contract state. */
interface DeviceTrack {
  lastSeq: number;
  recent: Map<number, string>;
}

/** Counters of what a receiver got. */
export interface ReceiverCounts {
  /** Requests answered 2xx, and their triggers. */
  batches: number;
  triggers: number;
  /** Triggers received again with the content their (device, seq) had: re-deliveries, allowed. */
  redeliveries: number;
  /** Seq at or below the device's last with other content, or not in the window: order broken. */
  orderViolations: number;
  /** Seqs skipped (sum of jumps beyond one). */
  gapSeqs: number;
  /** Requests answered 503, hung, reset. */
  unavailable: number;
  hung: number;
  resets: number;
  /** Devices seen. */
  devices: number;
  /** The first few violations, named. */
  problems: string[];
}

/** A checking webhook receiver. */
export class CheckingReceiver {
  readonly counts: ReceiverCounts = {
    batches: 0,
    triggers: 0,
    redeliveries: 0,
    orderViolations: 0,
    gapSeqs: 0,
    unavailable: 0,
    hung: 0,
    resets: 0,
    devices: 0,
    problems: [],
  };
  port = 0;
  private server: Server | null = null;
  private readonly devices = new Map<string, DeviceTrack>();
  private readonly sockets = new Set<Socket>();
  private readonly hanging = new Set<ServerResponse>();
  private listening = false;

  constructor(private readonly behaviour: (nowMs: number) => Behaviour) {}

  /** Listens on a free loopback port (kept across down phases). */
  async start(): Promise<void> {
    const server = createServer((req, res) => this.handle(req, res));
    server.keepAliveTimeout = 30_000;
    server.on('connection', (s: Socket) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    const a = server.address();
    this.port = a !== null && typeof a === 'object' ? a.port : 0;
    this.listening = true;
  }

  /** Applies the behaviour's `down` phase: stops listening (and drops connections) or listens again. */
  async setDown(down: boolean): Promise<void> {
    if (down && this.listening) {
      this.listening = false;
      const server = this.server!;
      const closed = new Promise<void>((r) => server.close(() => r()));
      for (const s of this.sockets) s.destroy();
      await closed;
    } else if (!down && !this.listening) {
      await this.start();
    }
  }

  /** Stops the server and answers nothing more. */
  async stop(): Promise<void> {
    for (const r of this.hanging) r.destroy();
    await this.setDown(true);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const b = this.behaviour(Date.now());
      if (b.kind === 'hang' || b.kind === 'down') {
        this.counts.hung++;
        this.hanging.add(res);
        res.on('close', () => this.hanging.delete(res));
        return;
      }
      if (b.kind === 'reset') {
        this.counts.resets++;
        req.socket.destroy();
        return;
      }
      if (b.kind === 'unavailable') {
        this.counts.unavailable++;
        res.writeHead(503, { 'retry-after': String(b.retryAfterS), 'content-length': 0 });
        res.end();
        return;
      }
      const answer = (): void => {
        if (res.destroyed) return;
        // Counted only when the answer goes out: a batch the router gave up on is not received.
        this.take(Buffer.concat(chunks).toString('utf8'));
        res.writeHead(200, { 'content-length': 0 });
        res.end();
      };
      if (b.delayMs > 0) setTimeout(answer, b.delayMs);
      else answer();
    });
  }

  private take(body: string): void {
    const batch = JSON.parse(body) as {
      deviceId: string | number;
      seq: number;
      type: string;
      fenceId: string;
      eventTimeMs: number;
    }[];
    const c = this.counts;
    c.batches++;
    for (const t of batch) {
      c.triggers++;
      const key = typeof t.deviceId === 'number' ? `n${t.deviceId}` : `s${t.deviceId}`;
      const content = `${t.type} ${t.fenceId} ${t.eventTimeMs}`;
      let d = this.devices.get(key);
      if (d === undefined) {
        d = { lastSeq: 0, recent: new Map() };
        this.devices.set(key, d);
        c.devices++;
      }
      if (t.seq <= d.lastSeq) {
        const before = d.recent.get(t.seq);
        if (before === content) c.redeliveries++;
        else {
          c.orderViolations++;
          if (c.problems.length < 10)
            c.problems.push(
              `device ${key} seq ${t.seq} after ${d.lastSeq} (${before === undefined ? 'not a recent seq' : 'other content'})`,
            );
        }
        continue;
      }
      // A device's first trigger seen here may follow seqs of an earlier run (seq carries across restarts).
      if (d.lastSeq > 0 && t.seq > d.lastSeq + 1) c.gapSeqs += t.seq - d.lastSeq - 1;
      d.lastSeq = t.seq;
      d.recent.set(t.seq, content);
      if (d.recent.size > WINDOW) d.recent.delete(d.recent.keys().next().value!);
    }
  }
}
