/**
 * How long this thread's event loop was unavailable: the signal that tells the router's own stalls from a queue at a
 * downstream.
 *
 * A round trip measured on an event loop is the downstream's time plus however long its completion waited for the
 * loop: a thread that runs a long task, or that waits for a core on a starved host, makes every answer that arrives
 * meanwhile look slow, exactly as a queue at the downstream would. The meter runs a short repeating timer and adds up
 * how late each tick fired beyond its period and a grace; that sum is a clock that advances only while the loop is
 * not there to run callbacks. A request's share of local delay is that clock's advance between its send and its
 * completion, which the limiter takes out of the sample (see `Limiter`). A queue at the downstream leaves the clock
 * still; a stall of the caller moves it by as much as it delays the completions.
 *
 * The state is a Float64Array (cells below) the timer writes and the limiter reads inline, so reading it allocates
 * nothing. Timers run before the poll phase of each loop turn, so the tick that measures a stall runs before the
 * completions that waited through it are handled; a stall still in progress (the current turn runs long) is counted by
 * `stallClockNs` from the last tick's time.
 */
import type { ClockNs } from '../shm/clock.js';
import { checkNumber } from './validate.js';

/** Cell: when the last tick ran, ns. */
export const STALL_LAST_TICK_NS = 0;
/** Cell: local stall accumulated up to the last tick, ns. */
export const STALL_TOTAL_NS = 1;
/** Cell: how late past the last tick the loop may be before the lateness counts (the period plus the grace), ns. */
export const STALL_ALLOWANCE_NS = 2;
/** Cells in a stall state. */
export const STALL_CELLS = 3;

/** The stall clock at `nowNs`: the accumulated stall plus the lateness in progress (inline in hot paths). */
function stallClockNs(cells: Float64Array, nowNs: number): number {
  const pending = nowNs - cells[STALL_LAST_TICK_NS]! - cells[STALL_ALLOWANCE_NS]!;
  return pending > 0 ? cells[STALL_TOTAL_NS]! + pending : cells[STALL_TOTAL_NS]!;
}

/** Options of LoopStallMeter. */
export interface LoopStallMeterOptions {
  /** Timer period, ms, [1, 100]: the resolution of the measurement. Default 1. */
  tickMs: number;
  /** Lateness up to this much past the period is a timer's normal jitter, not a stall, ms, [0, 100]. Default 1. */
  graceMs: number;
}

const LOOP_STALL_DEFAULTS: Readonly<LoopStallMeterOptions> = { tickMs: 1, graceMs: 1 };

/** Measures the local stall of the thread that starts it (see the module comment). */
export class LoopStallMeter {
  /** The state the limiters read (cells STALL_*). */
  readonly cells = new Float64Array(STALL_CELLS);
  /** Ticks run. */
  ticks = 0;
  /** Ticks that found the loop late (a stall). */
  lateTicks = 0;
  private readonly clock: ClockNs;
  private readonly tickMs: number;
  private readonly allowanceNs: number;
  private timer: ReturnType<typeof setInterval> | null = null;
  private readonly onTick = (): void => this.tick();

  /** `clock` is the thread's ns clock (the one the limiters' samples use). */
  constructor(clock: ClockNs, options?: Partial<LoopStallMeterOptions>) {
    const o = { ...LOOP_STALL_DEFAULTS, ...options };
    checkNumber('loopStall.tickMs', o.tickMs, 1, 100);
    checkNumber('loopStall.graceMs', o.graceMs, 0, 100);
    this.clock = clock;
    this.tickMs = o.tickMs;
    this.allowanceNs = (o.tickMs + o.graceMs) * 1e6;
    this.cells[STALL_ALLOWANCE_NS] = this.allowanceNs;
    this.cells[STALL_LAST_TICK_NS] = clock();
  }

  /** Starts the timer (unref'd: it never keeps a process alive). Idempotent. */
  start(): this {
    if (this.timer !== null) return this;
    this.cells[STALL_LAST_TICK_NS] = this.clock();
    this.cells[STALL_ALLOWANCE_NS] = this.allowanceNs;
    this.timer = setInterval(this.onTick, this.tickMs);
    this.timer.unref();
    return this;
  }

  /** Stops the timer; the cells keep their totals and nothing counts as a stall from now on. */
  stop(): void {
    this.cells[STALL_ALLOWANCE_NS] = Infinity;
    if (this.timer === null) return;
    clearInterval(this.timer);
    this.timer = null;
  }

  /** Total local stall measured so far, ns (up to `nowNs`, the stall in progress included). */
  totalNs(nowNs: number): number {
    return stallClockNs(this.cells, nowNs);
  }

  /** One tick at the clock's current time (what the timer runs; tests call it with their own clock). */
  tick(): void {
    const c = this.cells;
    const nowNs = this.clock();
    const late = nowNs - c[STALL_LAST_TICK_NS]! - c[STALL_ALLOWANCE_NS]!;
    if (late > 0) {
      c[STALL_TOTAL_NS] = c[STALL_TOTAL_NS]! + late;
      this.lateTicks++;
    }
    c[STALL_LAST_TICK_NS] = nowNs;
    this.ticks++;
  }
}
