import type { Limit } from './limit.js';
import { checkNumber } from '../validate.js';

/**
 * A fixed limit: `limit = L` whatever the samples say. The baseline the adaptive limits are compared with.
 */
export class FixedLimit implements Limit {
  /** The constant limit. */
  readonly limit: number;
  /** Fixed limits keep no reference RTT. */
  readonly referenceRttNs = NaN;

  /** `limit` must be an integer in [1, 1e6]. */
  constructor(limit: number) {
    this.limit = checkNumber('limit', limit, 1, 1e6, true);
  }

  /** Ignores the sample. */
  onSample(_startNs: number, _rttNs: number, _inflight: number, _didDrop: boolean): void {}
}
