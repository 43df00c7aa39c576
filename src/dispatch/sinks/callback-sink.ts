import { RESULT_OK, type Sink, type SinkResult } from './sink.js';
import type { TriggerBatch } from './trigger-batch.js';

/** The embedding's handler: may return nothing (delivered), a result, or a promise of either. Throwing is a 500. */
export type TriggerCallback = (batch: TriggerBatch) => void | SinkResult | Promise<void | SinkResult>;

/** In-process sink: hands each batch to a callback (the embedding application). */
export class CallbackSink implements Sink {
  private readonly callback: TriggerCallback;

  /** `callback` receives each batch; the batch is valid until its returned promise settles. */
  constructor(callback: TriggerCallback) {
    this.callback = callback;
  }

  /** Calls the callback; a throw or rejection becomes status 500. */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    try {
      const r = await this.callback(batch);
      return r ?? RESULT_OK;
    } catch {
      return { status: 500 };
    }
  }

  /** Nothing to release. */
  async close(): Promise<void> {}
}
