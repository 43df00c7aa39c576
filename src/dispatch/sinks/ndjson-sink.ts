import * as fs from 'node:fs';
import type { Writable } from 'node:stream';
import { triggerJson, type TriggerNamer } from './format.js';
import { RESULT_OK, type Sink, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';

/** Where an NdjsonSink writes: a file path (appended, optionally fsynced per batch) or a stream such as stdout. */
export type NdjsonTarget = { path: string; fsync?: boolean } | { stream: Writable };

/** NDJSON sink: one JSON object per trigger per line (format of `triggerJson`). */
export class NdjsonSink implements Sink {
  private readonly namer: TriggerNamer;
  private readonly fd: number;
  private readonly fsync: boolean;
  private readonly stream: Writable | undefined;

  /** Opens the file for appending (or wraps the stream). */
  constructor(target: NdjsonTarget, namer: TriggerNamer) {
    this.namer = namer;
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

  /** Writes the batch's lines; a write error is status 0 / network. */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    let text = '';
    for (let i = 0; i < batch.count; i++) text += triggerJson(batch, i, this.namer) + '\n';
    try {
      if (this.stream !== undefined) {
        const stream = this.stream;
        await new Promise<void>((resolve, reject) => stream.write(text, (err) => (err ? reject(err) : resolve())));
      } else {
        const fd = this.fd;
        // One write per batch on an O_APPEND descriptor: concurrent batches never interleave inside a line.
        await new Promise<void>((resolve, reject) => fs.write(fd, text, (err) => (err ? reject(err) : resolve())));
        if (this.fsync) await new Promise<void>((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
      }
      return RESULT_OK;
    } catch {
      return { status: 0, error: 'network' };
    }
  }

  /** Closes the file (streams are left open: their owner closes them). */
  async close(): Promise<void> {
    if (this.fd >= 0) fs.closeSync(this.fd);
  }
}
