/**
 * Rate-limited log of ingest rejections (ingest thread): at most one line per reason per interval, with the count
 * of rejections suppressed since the last line. The clock is injected; nothing is allocated unless a line is written.
 */
import { REJECT_REASON_COUNT, REJECT_REASON_NAMES, type RejectReason } from '../shm/layout.js';
import { describeValueReject } from './reject-detail.js';

/** Where log lines go. */
export type LogLine = (line: string) => void;

/** Options of the reject log. */
export interface RejectLogOptions {
  /** Minimum time between two lines for the same reason, ms (0 logs every rejection). */
  intervalMs: number;
  /** Current time in ms (injected so tests and simulations control it). */
  nowMs: () => number;
  /** Sink of lines; default `console.warn`. */
  write?: LogLine;
}

/** Rate-limited per-reason log. */
export class RejectLog {
  private readonly intervalMs: number;
  private readonly nowMs: () => number;
  private readonly write: LogLine;
  private readonly lastLineMs = new Float64Array(REJECT_REASON_COUNT).fill(Number.NEGATIVE_INFINITY);
  private readonly suppressed = new Float64Array(REJECT_REASON_COUNT);

  constructor(options: RejectLogOptions) {
    if (!(options.intervalMs >= 0))
      throw new RangeError(`intervalMs must be a number >= 0, got ${String(options.intervalMs)}`);
    this.intervalMs = options.intervalMs;
    this.nowMs = options.nowMs;
    this.write = options.write ?? ((line) => console.warn(line));
  }

  /**
   * Notes one rejection; writes a line when the reason's interval has passed. `buf[start, end)` are the frame's
   * bytes (the first 32 are shown in hex); `source` names where they came from. A line for a value reject also says
   * which value and why ("id 9007199254740993 is above 2^53-1"), read again from the frame's bytes.
   */
  note(reason: RejectReason, source: string, buf: Uint8Array | null, start: number, end: number): void {
    const now = this.nowMs();
    if (now - this.lastLineMs[reason]! < this.intervalMs) {
      this.suppressed[reason]!++;
      return;
    }
    const suppressed = this.suppressed[reason]!;
    this.lastLineMs[reason] = now;
    this.suppressed[reason] = 0;
    let line = `ingest: rejected ${REJECT_REASON_NAMES[reason]} from ${source}`;
    // Described only here, once per written line: the decode it takes never runs for a suppressed reject.
    const detail = buf === null ? null : describeValueReject(reason, buf, start, end);
    if (detail !== null) line += `: ${detail}`;
    if (buf !== null && end > start) {
      const shown = Math.min(end - start, 32);
      line += ` (first bytes: ${Buffer.from(buf.buffer, buf.byteOffset + start, shown).toString('hex')}${shown < end - start ? '...' : ''})`;
    }
    if (suppressed > 0) line += ` [${String(suppressed)} more ${REJECT_REASON_NAMES[reason]} since the last line]`;
    this.write(line);
  }
}
