import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncDir } from '../../durable/fs-util.js';
import { triggerJson } from './format.js';
import { RESULT_OK, type Sink, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';

/**
 * Where an NdjsonSink writes: a file path (appended, optionally fsynced per batch) or the process's stdout, written
 * directly (see openStdout): a batch counts as delivered once stdout took all of its bytes, and a write error (a
 * reader gone: EPIPE) or a reader that takes nothing for STDOUT_STALL_MS fails it.
 */
export type NdjsonTarget = { path: string; fsync?: boolean } | { stdout: true };

/** How long a write to stdout waits before trying again when it is full (EAGAIN: its reader is behind), ms. */
const FULL_DESCRIPTOR_WAIT_MS = 5;

/**
 * How long a write to stdout may go without a byte taken before it fails, ms: a reader that stopped reading (a pager
 * at a full page, a stuck process) must not hold the downstream's calls, and with them a drain, for ever.
 */
const STDOUT_STALL_MS = 10_000;

/**
 * A descriptor of its own on stdout, in non-blocking mode (a write to a reader that stopped reading then returns
 * EAGAIN instead of holding a thread-pool thread for ever) and appending (stdout redirected to a file grows at its
 * end); stdout itself (1) where the system gives none (no /proc), and then it is never closed here.
 */
function openStdout(): { fd: number; own: boolean } {
  try {
    const c = fs.constants;
    return { fd: fs.openSync('/proc/self/fd/1', c.O_WRONLY | c.O_APPEND | c.O_NONBLOCK), own: true };
  } catch {
    return { fd: 1, own: false };
  }
}

/**
 * NDJSON sink: one JSON object per trigger per line (format of `triggerJson`). Writes are serialised: a batch is
 * written only after the previous one's write (and fsync) completed, so the file holds batches in the order they were
 * handed over, whatever the downstream's concurrency.
 *
 * A file holds whole lines only: a write that fails part way (a full disk) is cut back to where its batch began, so
 * the batch's retry does not continue a torn line; and a file whose last line was torn by a crash (its batch never
 * counted delivered, so sent again) is cut back to its last complete line when it is opened (a last line that does
 * not start as a trigger's does is ended with a newline instead: the file is not only ours). Where a batch begins is
 * read from the file itself before each batch, so a file emptied meanwhile (logrotate's copytruncate) or appended to
 * by another writer is never cut at a stale length; where the cut is not safe (the file changed under the failed
 * write) or fails, the next batch starts with a newline, so its lines stay whole. A file renamed or removed (logrotate's
 * create) is noticed before the next batch: the path is opened afresh, so nothing is written to a file that is gone.
 */
export class NdjsonSink implements Sink {
  private fd: number;
  private readonly path: string | null;
  private readonly fsync: boolean;
  /** Writing to stdout (a descriptor of its own on it, or stdout itself when `ownsFd` is false). */
  private readonly toStdout: boolean;
  /** Whether `fd` is this sink's to close. */
  private readonly ownsFd: boolean;
  /** Batches handed over so far (deliver calls). */
  private batchesIssued = 0;
  /** Stdout failed a batch when this many had been handed over: those queued then fail with it (see write). */
  private failedThrough = 0;
  /** Bytes of whole lines in the file (where the next batch begins). */
  private size = 0;
  /** A failed write may have left a torn line that could not be cut: the next batch starts with a newline. */
  private torn = false;
  /** Times the path was opened afresh because the file had been renamed or removed. */
  reopened = 0;
  /** Bytes cut from the end of the file at open (a trigger's line torn by a crash). */
  readonly tornBytesCut: number = 0;
  /** The last write handed to the file: the next one starts when it settles. */
  private tail: Promise<unknown> = Promise.resolve();

  /** Opens the file for appending (or takes the descriptor). */
  constructor(target: NdjsonTarget) {
    if ('path' in target) {
      // Read as well, to look at the last line; a file the router may only write to is appended to as it is.
      let readable = true;
      const created = !fs.existsSync(target.path);
      try {
        this.fd = fs.openSync(target.path, 'a+');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EACCES') throw err;
        this.fd = fs.openSync(target.path, 'a');
        readable = false;
      }
      this.path = target.path;
      this.size = fs.fstatSync(this.fd).size;
      const whole = readable ? wholeLinesLength(this.fd, this.size) : this.size;
      if (whole < this.size) {
        if (startsTrigger(this.fd, whole)) {
          fs.ftruncateSync(this.fd, whole);
          this.tornBytesCut = this.size - whole;
          this.size = whole;
        } else {
          // Not a line of ours (a file written by someone else): ended, not cut.
          fs.writeSync(this.fd, '\n');
          this.size++;
        }
      }
      this.fsync = target.fsync ?? false;
      if (this.fsync) {
        // On disk before the first batch counts: the file's entry in its directory, and a cut made above.
        fs.fsyncSync(this.fd);
        if (created) syncDir(path.dirname(target.path));
      }
      this.toStdout = false;
      this.ownsFd = true;
    } else {
      const out = openStdout();
      this.fd = out.fd;
      this.path = null;
      this.fsync = false;
      this.toStdout = true;
      this.ownsFd = out.own;
    }
  }

  /** Writes the batch's lines after every earlier batch; a write error is status 0 / network. */
  deliver(batch: TriggerBatch): Promise<SinkResult> {
    let text = '';
    for (let i = 0; i < batch.count; i++) text += triggerJson(batch, i) + '\n';
    const n = ++this.batchesIssued;
    const result = this.tail.then(() => this.write(text, n));
    this.tail = result;
    return result;
  }

  private async write(text: string, n: number): Promise<SinkResult> {
    try {
      if (this.toStdout) {
        // Queued behind a batch that stdout failed (a reader gone, or one that stopped reading): fails with it, at
        // once, rather than each waiting out STDOUT_STALL_MS in turn; a batch handed over since tries again.
        if (n <= this.failedThrough) throw new Error('stdout failed the batch before this one');
        // A batch that failed part way left part of a line: this one starts on a line of its own.
        const bytes = Buffer.from(this.torn ? '\n' + text : text, 'utf8');
        try {
          await writeAll(this.fd, bytes, STDOUT_STALL_MS);
        } catch (err) {
          this.torn ||= ((err as { written?: number }).written ?? 0) > 0;
          this.failedThrough = this.batchesIssued;
          throw err;
        }
        this.torn = false;
      } else {
        // Where this batch begins: the file's own length (it may have been emptied or appended to by another writer).
        this.size = (await this.followPath()).size;
        const fd = this.fd;
        const bytes = Buffer.from(this.torn ? '\n' + text : text, 'utf8');
        try {
          // A write may take fewer bytes than asked (a full disk, a signal): the rest follows until all is written.
          for (let at = 0; at < bytes.length;) {
            at += await new Promise<number>((resolve, reject) =>
              fs.write(fd, bytes, at, bytes.length - at, null, (err, n) => (err ? reject(err) : resolve(n))),
            );
          }
          if (this.fsync)
            await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
        } catch (err) {
          // Whole lines only: cut back to where this batch began, unless the file is now shorter than that (emptied
          // under the write: a cut would lengthen it) or longer than this batch could have made it (another writer
          // appended: a cut would take their bytes); then, or when the cut fails, the next batch starts on a line of
          // its own.
          this.torn = true;
          const now = await fstat(fd).catch(() => null);
          if (now !== null && now.size >= this.size && now.size <= this.size + bytes.length) {
            const cut = await new Promise<boolean>((resolve) =>
              fs.ftruncate(fd, this.size, (e) => resolve(e === null)),
            );
            if (cut) this.torn = false;
          }
          throw err;
        }
        this.size += bytes.length;
        this.torn = false;
      }
      return RESULT_OK;
    } catch {
      return { status: 0, error: 'network' };
    }
  }

  /**
   * Opens the path afresh when it no longer names the open file (renamed or removed by a log rotation): the new file
   * is created if need be (and, with fsync, its directory entry made durable). Returns the open file's status. Errors
   * are the write's.
   */
  private async followPath(): Promise<fs.Stats> {
    const p = this.path!;
    const [named, open] = await Promise.all([fs.promises.stat(p).catch(() => null), fstat(this.fd)]);
    if (named !== null && named.ino === open.ino && named.dev === open.dev) return open;
    const fd = fs.openSync(p, 'a');
    if (this.fsync && named === null) syncDir(path.dirname(p));
    fs.closeSync(this.fd);
    this.fd = fd;
    this.torn = false;
    this.reopened++;
    return fstat(fd);
  }

  /** Waits for the last write, then closes the file (or its own descriptor on stdout). */
  async close(): Promise<void> {
    await this.tail;
    if (this.fd >= 0 && this.ownsFd) fs.closeSync(this.fd);
  }
}

/** How every line triggerJson writes begins. */
const TRIGGER_LINE_START = Buffer.from('{"type":');

/** How long the file open at `fd` (`size` bytes) is up to and including its last newline (0 when it has none). */
function wholeLinesLength(fd: number, size: number): number {
  const chunk = Buffer.allocUnsafe(64 * 1024);
  for (let end = size; end > 0;) {
    const start = Math.max(0, end - chunk.length);
    const n = fs.readSync(fd, chunk, 0, end - start, start);
    const nl = chunk.lastIndexOf(0x0a, n - 1);
    if (nl >= 0) return start + nl + 1;
    end = start;
  }
  return 0;
}

/**
 * Whether the bytes at `at` in the file open at `fd` start as a trigger's line does (`{"type":`, or as much of it as a
 * line torn shorter than that holds).
 */
function startsTrigger(fd: number, at: number): boolean {
  const head = Buffer.alloc(TRIGGER_LINE_START.length);
  const n = fs.readSync(fd, head, 0, head.length, at);
  return n > 0 && head.subarray(0, n).equals(TRIGGER_LINE_START.subarray(0, n));
}

/** fs.fstat as a promise. */
function fstat(fd: number): Promise<fs.Stats> {
  return new Promise((resolve, reject) => fs.fstat(fd, (err, st) => (err ? reject(err) : resolve(st))));
}

/**
 * Writes all of `bytes` to the descriptor `fd`, in order. A short write goes on with the rest; a full descriptor
 * (EAGAIN) is tried again every FULL_DESCRIPTOR_WAIT_MS. Rejects, with the count written so far in the error's
 * `written` property, on any other error (EPIPE: the reader is gone) or when the descriptor took no byte for `stallMs`.
 */
async function writeAll(fd: number, bytes: Buffer, stallMs: number): Promise<void> {
  let at = 0;
  let progressAtMs = Date.now();
  while (at < bytes.length) {
    try {
      at += await new Promise<number>((resolve, reject) =>
        fs.write(fd, bytes, at, bytes.length - at, null, (err, n) => (err ? reject(err) : resolve(n))),
      );
      progressAtMs = Date.now();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw Object.assign(err as Error, { written: at });
      if (Date.now() - progressAtMs >= stallMs)
        throw Object.assign(new Error(`stdout took no byte for ${stallMs} ms`), { written: at });
      await new Promise((resolve) => setTimeout(resolve, FULL_DESCRIPTOR_WAIT_MS));
    }
  }
}
