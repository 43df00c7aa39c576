/**
 * A Mosquitto broker of a test's own (the installed `mosquitto` binary, Debian's) on a free port, with persistence in
 * a scratch directory so that it can be restarted with its sessions and queued messages.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { acceptingOn, freePort } from './nats-server.js';

/** A Mosquitto broker that can be restarted on the same port. */
export class MosquittoBroker {
  readonly port: number;
  private readonly configFile: string;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();

  private constructor(port: number, configFile: string) {
    this.port = port;
    this.configFile = configFile;
  }

  /**
   * Starts one on a free port (persistence on); with `acl`, the text of an access-rules file (`topic readwrite ...`
   * lines for anonymous clients: what they do not name is denied).
   */
  static async start(acl?: string): Promise<MosquittoBroker> {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'mosquitto-'));
    const configFile = join(dir, 'mosquitto.conf');
    writeFileSync(
      configFile,
      // Why max_queued_messages: Mosquitto drops QoS 1 messages for a subscriber more than 1000 behind by default (the
      // test's subscriber shares a busy thread with the router), and that loss would be the broker's, not ours. Why not
      // 0 (no limit): Mosquitto 2.0.11 with 0 closes a publisher's connection right after refusing one of its
      // messages (access rules) while a subscriber is connected.
      // Why user: started as root, Mosquitto switches to the user `mosquitto`, which cannot write this 0700 scratch
      // directory; its persistence then fails without a word, and a restart loses every session and queued message.
      `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${dir}/\n` +
        `max_queued_messages 10000000\nuser ${userInfo().username}\n` +
        (acl === undefined ? '' : `acl_file ${join(dir, 'acl')}\n`),
    );
    if (acl !== undefined) writeFileSync(join(dir, 'acl'), acl);
    const broker = new MosquittoBroker(port, configFile);
    await broker.run();
    return broker;
  }

  /** mqtt://127.0.0.1:<port>. */
  get url(): string {
    return `mqtt://127.0.0.1:${this.port}`;
  }

  /** Stops it (SIGTERM: it saves its sessions) and starts it again after `pauseMs`. */
  async restart(pauseMs: number): Promise<void> {
    await this.stop();
    await new Promise((r) => setTimeout(r, pauseMs));
    await this.run();
  }

  /** Stops it. */
  async stop(): Promise<void> {
    this.child?.kill('SIGTERM');
    await this.exited;
    this.child = null;
  }

  private async run(): Promise<void> {
    const child = spawn('mosquitto', ['-c', this.configFile], { stdio: 'ignore' });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const failed = new Promise<never>((_, reject) =>
      child.once('error', (e) =>
        reject(new Error(`mosquitto could not start (install Debian's mosquitto): ${e.message}`)),
      ),
    );
    await Promise.race([acceptingOn(this.port, 10_000), failed]);
  }
}
