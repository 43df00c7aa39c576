/**
 * A NATS server with JetStream of a test's own (the installed `nats-server` binary, Debian's), on a free port with
 * its store in a scratch directory; and a TCP relay that can hold back what the server sends, to lose
 * acknowledgements on purpose.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A free TCP port on 127.0.0.1 (closed again; a race with another process is unlikely enough for tests). */
export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** Resolves once `port` accepts a connection, within `timeoutMs`. */
export async function acceptingOn(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect({ host: '127.0.0.1', port }, () => {
        c.destroy();
        resolve(true);
      });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing accepts on 127.0.0.1:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A running nats-server with JetStream. */
export class NatsServer {
  readonly port: number;
  private readonly args: string[];
  private child: ChildProcess;
  private exited: Promise<void>;

  private constructor(port: number, args: string[], child: ChildProcess) {
    this.port = port;
    this.args = args;
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
  }

  /**
   * Starts one (JetStream on, store in a scratch directory); fails with the reason when the binary is missing.
   * `config`, when given, is the text of a server configuration file (e.g. subject mappings) the server also reads.
   */
  static async start(config?: string): Promise<NatsServer> {
    const port = await freePort();
    const store = mkdtempSync(join(tmpdir(), 'nats-js-'));
    const args = ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store];
    if (config !== undefined) {
      const file = join(store, 'server.conf');
      writeFileSync(file, config);
      args.unshift('-c', file);
    }
    return new NatsServer(port, args, await NatsServer.spawn(port, args));
  }

  private static async spawn(port: number, args: string[]): Promise<ChildProcess> {
    const child = spawn('nats-server', args, { stdio: 'ignore' });
    const failed = new Promise<never>((_, reject) =>
      child.once('error', (e) =>
        reject(new Error(`nats-server could not start (install Debian's nats-server): ${e.message}`)),
      ),
    );
    await Promise.race([acceptingOn(port, 10_000), failed]);
    return child;
  }

  /** Stops the server and starts it again on the same port and store (what it had stored is kept). */
  async restart(downMs: number): Promise<void> {
    await this.stop();
    await new Promise((r) => setTimeout(r, downMs));
    this.child = await NatsServer.spawn(this.port, this.args);
    this.exited = new Promise((resolve) => this.child.once('exit', () => resolve()));
  }

  /** nats://127.0.0.1:<port>. */
  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Stops it. */
  async stop(): Promise<void> {
    this.child.kill('SIGTERM');
    await this.exited;
  }
}

/**
 * A TCP relay to `targetPort`: what clients send goes through at once; what the target sends back waits `delayMs`
 * (in order). Counts the JetStream message ids clients publish (`Nats-Msg-Id` headers) to show re-sends.
 */
export class HoldingRelay {
  delayMs = 0;
  msgIdsSeen = 0;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  port = 0;

  constructor(targetPort: number) {
    this.server = net.createServer((client) => {
      const upstream = net.connect({ host: '127.0.0.1', port: targetPort });
      this.sockets.add(client).add(upstream);
      let tail = '';
      client.on('data', (b: Buffer) => {
        const text = tail + b.toString('latin1');
        // A header split across two reads is counted once: only matches that end in the new bytes count.
        for (const m of text.matchAll(/Nats-Msg-Id:/g)) if (m.index + m[0].length > tail.length) this.msgIdsSeen++;
        tail = text.slice(-16);
        upstream.write(b);
      });
      // Why a chain of timers: later bytes must not overtake earlier ones when the delay changes.
      let last = 0;
      upstream.on('data', (b: Buffer) => {
        const at = Math.max(Date.now() + this.delayMs, last);
        last = at;
        const timer = setTimeout(() => {
          this.timers.delete(timer);
          if (client.writable) client.write(b);
        }, at - Date.now());
        this.timers.add(timer);
      });
      const end = (): void => {
        client.destroy();
        upstream.destroy();
      };
      client.on('close', end).on('error', end);
      upstream.on('close', end).on('error', end);
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    for (const timer of this.timers) clearTimeout(timer);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
