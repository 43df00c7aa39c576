/** Test support for the command line: runs the built binary as a real child process and collects its output. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createReadStream, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI_NODE_FLAGS } from '../../src/cli/node-flags.js';

/** Path of the built binary (dist/src/cli/main.js). */
export const MAIN_PATH = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** A running binary with its output so far. */
export class CliProcess {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly waiters: Array<() => void> = [];

  /**
   * Starts the binary with `args`. It runs in `cwd` (default: a fresh temporary directory, so the default state
   * directory of one run never meets another's). With `stdinPath`, that file is piped to its stdin ('pipe': stdin
   * stays open for the test to write to `child.stdin`). Node runs with
   * `nodeFlags` (default: CLI_NODE_FLAGS, the flags npm start passes).
   */
  constructor(
    args: readonly string[],
    timeoutMs = 30_000,
    cwd = mkdtempSync(join(tmpdir(), 'gr-cli-')),
    stdinPath: string | null = null,
    nodeFlags: readonly string[] = CLI_NODE_FLAGS,
  ) {
    this.child = spawn(process.execPath, [...nodeFlags, MAIN_PATH, ...args], {
      stdio: [stdinPath === null ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      cwd,
    });
    if (stdinPath !== null && stdinPath !== 'pipe') createReadStream(stdinPath).pipe(this.child.stdin!);
    this.child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      this.stdout += s;
      this.wake();
    });
    this.child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      this.stderr += s;
      this.wake();
    });
    // A hung child must not hang the suite.
    const killer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    this.exited = new Promise((resolve) => {
      this.child.once('close', (code, signal) => {
        clearTimeout(killer);
        this.wake();
        resolve({ code, signal });
      });
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Waits until `test` holds on the output so far; rejects if the process exits first. */
  async waitFor(what: string, test: (p: CliProcess) => boolean): Promise<void> {
    let done = false;
    void this.exited.then(() => (done = true));
    while (!test(this)) {
      if (done || this.child.exitCode !== null) {
        throw new Error(`process exited before ${what}\nstdout:\n${this.stdout}\nstderr:\n${this.stderr}`);
      }
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }
}

/** Runs the binary to its end. */
export async function runCli(
  args: readonly string[],
  timeoutMs = 30_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = new CliProcess(args, timeoutMs);
  const { code } = await p.exited;
  return { code, stdout: p.stdout, stderr: p.stderr };
}

/** The status lines (they start with `t=`). */
export function statusLines(stdout: string): string[] {
  return stdout.split('\n').filter((l) => /^t=\d+s /.test(l));
}

/** Triggers of every type summed, from a status line. */
export function triggersIn(line: string): number {
  const m = /triggers\(ENTER=(\d+) EXIT=(\d+) DWELL=(\d+) CROSS=(\d+)\)/.exec(line);
  if (m === null) throw new Error(`no triggers in: ${line}`);
  return Number(m[1]) + Number(m[2]) + Number(m[3]) + Number(m[4]);
}

/** A `name=<integer>` value from a text (the first one). */
export function valueOf(text: string, name: string): number {
  const m = new RegExp(`(?:^|[ (])${name}=(\\d+)`, 'm').exec(text);
  if (m === null) throw new Error(`no ${name}= in:\n${text}`);
  return Number(m[1]);
}

/** One JSON log line of the binary (stderr, the default --log-format json). */
export interface LogLine {
  level: 'error' | 'warn' | 'info' | 'debug';
  time: string;
  thread: string;
  msg: string;
  [field: string]: unknown;
}

/** The JSON log lines in `stderr` (lines that are not JSON objects, such as a usage error, are skipped). */
export function logLines(stderr: string): LogLine[] {
  const lines: LogLine[] = [];
  for (const text of stderr.split('\n')) {
    if (!text.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(text) as LogLine);
    } catch {
      // A partial last line (the process is still writing): read on the next call.
    }
  }
  return lines;
}

/** True when `stderr` holds a log line at `level` whose message matches `pattern`. */
export function hasLogLine(stderr: string, level: LogLine['level'], pattern: RegExp): boolean {
  return logLines(stderr).some((l) => l.level === level && pattern.test(l.msg));
}
