import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncDir } from '../../durable/fs-util.js';
import type { Writable } from 'node:stream';
import { triggerJson } from './format.js';
import { RESULT_OK, type Sink, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';

/** Where an NdjsonSink writes: a file path (appended, optionally fsynced per batch) or a stream such as stdout. */
export type NdjsonTarget = { path: string; fsync?: boolean } | { stream: Writable };

/**
 * NDJSON sink: one JSON object per trigger per line (format of `triggerJson`). Writes are serialised: a batch is
 * written only after the previous one's write (and fsync) completed, so the file holds batches in the order they were
 * handed over, whatever the downstream's concurrency.
 *
 * A file holds whole lines only: a write that fails part way (a full disk) is cut back to where its batch began, so
 * the batch's retry does not continue a torn line; and a file whose last line was torn by a crash (its batch never
 * counted delivered, so sent again) is cut back to its last complete line when it is opened (a last line that does
 * not start as a trigger's does is ended with a newline instead: the file is not only ours).
 */
export class NdjsonSink implements Sink {
  private readonly fd: number;
  private readonly fsync: boolean;
  private readonly stream: Writable | undefined;
  /** Bytes of whole lines in the file (where the next batch begins). */
  private size = 0;
  /** Bytes cut from the end of the file at open (a trigger's line torn by a crash). */
  readonly tornBytesCut: number = 0;
  /** The last write handed to the file: the next one starts when it settles. */
  private tail: Promise<unknown> = Promise.resolve();

  /** Opens the file for appending (or wraps the stream). */
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
      this.stream = undefined;
    } else {
      this.fd = -1;
      this.fsync = false;
      this.stream = target.stream;
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
      if (this.stream !== undefined) {
        const stream = this.stream;
        await new Promise<void>((resolve, reject) => stream.write(text, (err) => (err ? reject(err) : resolve())));
      } else {
        const fd = this.fd;
        const bytes = Buffer.from(text, 'utf8');
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
          // Whole lines only: the retry of this batch starts where it began (best effort: the disk may refuse this too).
          await new Promise<void>((resolve) => fs.ftruncate(fd, this.size, () => resolve()));
          throw err;
        }
        this.size += bytes.length;
      }
      return RESULT_OK;
    } catch {
      return { status: 0, error: 'network' };
    }
  }

  /** Waits for the last write, then closes the file (streams are left open: their owner closes them). */
  async close(): Promise<void> {
    await this.tail;
    if (this.fd >= 0) fs.closeSync(this.fd);
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
