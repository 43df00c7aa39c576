/**
 * Replay of a byte stream (ingest thread): stdin, a file of concatenated frames, or any Readable. The readable is
 * consumed as fast as it delivers; the edge sheds by lane as it would for live traffic.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import type { IngestEdge } from '../ingest-edge.js';
import type { TelemetrySource } from './source.js';

/** A source reading one Readable to its end. */
export class ReadableSource implements TelemetrySource {
  readonly name: string;
  private readonly open: () => Readable;
  private readable: Readable | null = null;
  private done: Promise<void> = Promise.resolve();

  /** `open` creates the Readable when the source starts. */
  constructor(name: string, open: () => Readable) {
    this.name = name;
    this.open = open;
  }

  /** Starts reading; `finished` resolves when the stream has ended. */
  start(edge: IngestEdge): Promise<void> {
    const readable = this.open();
    this.readable = readable;
    const stream = edge.openStream(this.name);
    this.done = new Promise((resolve) => {
      let ended = false;
      const finish = (): void => {
        if (ended) return;
        ended = true;
        stream.end();
        resolve();
      };
      readable.on('data', (chunk: Buffer | string) => stream.write(typeof chunk === 'string' ? Buffer.from(chunk) : chunk));
      readable.once('end', finish);
      readable.once('close', finish);
      readable.once('error', finish);
    });
    return Promise.resolve();
  }

  /** Resolves when the whole input has been ingested. */
  finished(): Promise<void> {
    return this.done;
  }

  stop(): Promise<void> {
    this.readable?.destroy();
    return this.done;
  }
}

/** Replays a file of concatenated MessagePack frames. */
export function fileSource(path: string, readChunkBytes = 64 * 1024): ReadableSource {
  return new ReadableSource(`file ${path}`, () => createReadStream(path, { highWaterMark: readChunkBytes }));
}

/** Reads frames from the process's stdin. */
export function stdinSource(): ReadableSource {
  return new ReadableSource('stdin', () => process.stdin);
}
