import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncDir } from '../../durable/fs-util.js';
import { triggerJson } from './format.js';
import { RESULT_OK, type Sink, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';

/**
 * Where an NdjsonSink writes: a file path (appended, optionally fsynced per batch) or an open descriptor such as
 * stdout's (1), written directly: a batch counts as delivered once the descriptor took all of its bytes, and a write
 * error (a reader gone: EPIPE) fails it.
 */
export type NdjsonTarget = { path: string; fsync?: boolean } | { fd: number };

/** How long a write to a descriptor in non-blocking mode waits before trying again when it is full (EAGAIN), ms. */
const FULL_DESCRIPTOR_WAIT_MS = 5;

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
  /** The descriptor written directly (stdout's), or -1 for a file. */
  private readonly givenFd: number;
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
      this.givenFd = -1;
    } else {
      this.fd = target.fd;
      this.path = null;
      this.fsync = false;
      this.givenFd = target.fd;
    }
  }

  /** Writes the batch's lines after every earlier batch; a write error is status 0 / network. */
  deliver(batch: TriggerBatch): Promise<SinkResult> {
    let text = '';
    for (let i = 0; i < batch.count; i++) text += triggerJson(batch, i) + '\n';
    const result = this.tail.then(() => this.write(text));
    this.tail = result;
    return result;
  }

  private async write(text: string): Promise<SinkResult> {
    try {
      if (this.givenFd >= 0) {
        await writeAll(this.givenFd, Buffer.from(text, 'utf8'));
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

  /** Waits for the last write, then closes the file (a descriptor it was given is left open: stdout is not ours). */
  async close(): Promise<void> {
    await this.tail;
    if (this.fd >= 0 && this.givenFd < 0) fs.closeSync(this.fd);
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
 * Writes all of `bytes` to the descriptor `fd`, in order: a short write goes on with the rest, and a descriptor that
 * is full in non-blocking mode (EAGAIN: a pipe whose reader is behind) is tried again after a short wait, so every
 * line is written whole. Any other error (EPIPE: the reader is gone) rejects.
 */
async function writeAll(fd: number, bytes: Buffer): Promise<void> {
  for (let at = 0; at < bytes.length;) {
    try {
      at += await new Promise<number>((resolve, reject) =>
        fs.write(fd, bytes, at, bytes.length - at, null, (err, n) => (err ? reject(err) : resolve(n))),
      );
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      await new Promise((resolve) => setTimeout(resolve, FULL_DESCRIPTOR_WAIT_MS));
    }
  }
}
