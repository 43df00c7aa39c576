import * as fs from 'node:fs';
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
 */
export class NdjsonSink implements Sink {
  private readonly fd: number;
  private readonly fsync: boolean;
  private readonly stream: Writable | undefined;
  /** The last write handed to the file: the next one starts when it settles. */
  private tail: Promise<unknown> = Promise.resolve();

  /** Opens the file for appending (or wraps the stream). */
  constructor(target: NdjsonTarget) {
    if ('path' in target) {
      this.fd = fs.openSync(target.path, 'a');
      this.fsync = target.fsync ?? false;
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
        await new Promise<void>((resolve, reject) => fs.write(fd, text, (err) => (err ? reject(err) : resolve())));
        if (this.fsync)
          await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
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
