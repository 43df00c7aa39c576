/**
 * The COMPLIANCE shed alarm (ingest thread). A COMPLIANCE ping is shed only when a ring's reserved slice is full too,
 * or while draining; either way compliance triggers may be missing, so it is never silent: each check that finds the
 * COMPLIANCE shed counters grown since the previous one writes one error line with the count since then, by reason,
 * and the total. Checks run on a timer (once a second in the pipeline) and once more at the end of a drain, so the
 * lines are rate-limited by the timer and the shedding path itself does no more than count.
 *
 * The clock is injected; nothing is allocated unless a line is written.
 */
import { ADM_BLOCK_F64, ADM_SHED_F64, Lane, SHED_REASON_COUNT, SHED_REASON_NAMES } from '../shm/layout.js';

/** How often the pipeline checks, ms: at most one alarm line per this period. */
export const COMPLIANCE_ALARM_INTERVAL_MS = 1000;

/** Options of the alarm. */
export interface ComplianceShedAlarmOptions {
  /** The shared admission counters (ADM_* blocks, one per telemetry ring). */
  admissionCounters: Float64Array;
  /** Counter blocks (telemetry rings: one per ingest thread and shard). */
  blocks: number;
  /** Current time, ms (for the period a line covers). */
  nowMs: () => number;
  /** Where an alarm line goes (an error-level log). */
  write: (line: string) => void;
}

/** Watches the COMPLIANCE shed counters. */
export class ComplianceShedAlarm {
  private readonly counters: Float64Array;
  private readonly blocks: number;
  private readonly nowMs: () => number;
  private readonly write: (line: string) => void;
  /** Per reason: COMPLIANCE pings shed as of the last check. */
  private readonly seen = new Float64Array(SHED_REASON_COUNT);
  private lastCheckMs: number;

  /** Starts watching; COMPLIANCE pings shed before now are the baseline, not reported. */
  constructor(o: ComplianceShedAlarmOptions) {
    if (!(Number.isInteger(o.blocks) && o.blocks >= 1))
      throw new RangeError(`blocks must be an integer >= 1, got ${String(o.blocks)}`);
    if (o.admissionCounters.length < o.blocks * ADM_BLOCK_F64) {
      throw new RangeError(
        `admissionCounters must hold ${o.blocks} blocks of ${ADM_BLOCK_F64} cells, got ${o.admissionCounters.length} cells`,
      );
    }
    this.counters = o.admissionCounters;
    this.blocks = o.blocks;
    this.nowMs = o.nowMs;
    this.write = o.write;
    this.lastCheckMs = o.nowMs();
    for (let r = 0; r < SHED_REASON_COUNT; r++) this.seen[r] = this.shedSoFar(r);
  }

  /** COMPLIANCE pings shed for `reason` so far, over every ring. */
  private shedSoFar(reason: number): number {
    let n = 0;
    const cell = ADM_SHED_F64 + Lane.COMPLIANCE * SHED_REASON_COUNT + reason;
    for (let b = 0; b < this.blocks; b++) n += this.counters[b * ADM_BLOCK_F64 + cell]!;
    return n;
  }

  /** Writes one error line when COMPLIANCE pings were shed since the last check; returns how many were. */
  check(): number {
    const now = this.nowMs();
    let delta = 0;
    let total = 0;
    let parts = '';
    for (let r = 0; r < SHED_REASON_COUNT; r++) {
      const n = this.shedSoFar(r);
      const d = n - this.seen[r]!;
      total += n;
      if (d > 0) {
        delta += d;
        parts += `${parts === '' ? '' : ' '}${SHED_REASON_NAMES[r]!}=${d}`;
        this.seen[r] = n;
      }
    }
    const sinceMs = now - this.lastCheckMs;
    this.lastCheckMs = now;
    if (delta === 0) return 0;
    this.write(
      `ingest: shed ${delta} COMPLIANCE pings in the last ${(sinceMs / 1000).toFixed(1)}s (${parts}); ${total} since start: ` +
        'compliance triggers may be missing (the reserved slice of a ring was full, or the router was draining)',
    );
    return delta;
  }
}
