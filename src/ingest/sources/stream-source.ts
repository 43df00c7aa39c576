/**
 * Replay of a byte stream (ingest thread): stdin, a file of concatenated frames, or any Readable. A replay can wait,
 * so it is back-pressured, never shed: its bytes go through a PausableFeed (see ../backpressure.ts), and when a
 * frame's ring has no room the Readable is paused with the unfed bytes kept, and resumed once they are fed.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import type { IngestEdge } from '../ingest-edge.js';
import type { TelemetrySource } from './source.js';

/** A source reading one Readable to its end. */
export class ReadableSource implements TelemetrySource {
  readonly name: string;
  private readonly open: () => Readable;
  private readonly onError: (err: Error) => void;
  private readable: Readable | null = null;
  private done: Promise<void> = Promise.resolve();
  /** `stop` was called: a partial frame left counts as cut_at_stop. */
  private stopping = false;

  /**
   * `open` creates the Readable when the source starts; `onError` hears of an error that ends the reading (what was
   * read before it is fed, the rest is not read).
   */
  constructor(name: string, open: () => Readable, onError: (err: Error) => void = () => undefined) {
    this.name = name;
    this.open = open;
    this.onError = onError;
  }

  /** Starts reading; `finished` resolves when the stream has ended and every byte read has been fed. */
  start(edge: IngestEdge): Promise<void> {
    const readable = this.open();
    this.readable = readable;
    const feed = edge.openFeed(this.name, { onResume: () => readable.resume() });
    this.done = new Promise((resolve) => {
      let ended = false;
      const finish = (): void => {
        if (ended) return;
        ended = true;
        // Bytes read before the end (or a stop) are fed before the stream ends: what was read is never dropped.
        void feed.end(this.stopping).then(resolve);
      };
      readable.on('data', (chunk: Buffer | string) => {
        if (!feed.write(typeof chunk === 'string' ? Buffer.from(chunk) : chunk)) readable.pause();
      });
      readable.once('end', finish);
      readable.once('close', finish);
      readable.once('error', (err: Error) => {
        this.onError(err);
        finish();
      });
    });
    return Promise.resolve();
  }

  /** Resolves when the whole input has been ingested. */
  finished(): Promise<void> {
    return this.done;
  }

  /** Stops reading; resolves once the bytes already read have been fed and the stream has ended. */
  stop(): Promise<void> {
    this.stopping = true;
    this.readable?.destroy();
    return this.done;
  }
}

/** Replays a file of concatenated MessagePack frames; `onError` as ReadableSource's. */
export function fileSource(
  path: string,
  readChunkBytes = 64 * 1024,
  onError: (err: Error) => void = () => undefined,
): ReadableSource {
  return new ReadableSource(`file ${path}`, () => createReadStream(path, { highWaterMark: readChunkBytes }), onError);
}
