import type { Limit } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/** Options of WindowedLimit. */
export interface WindowedLimitOptions {
  /** A window closes no earlier than this after its first sample, ns (unless `maxWindowNs` is shorter). */
  minWindowNs: number;
  /** A window closes at the first sample this long after its first one, however few samples it holds, ns. */
  maxWindowNs: number;
  /** Samples a window needs before `minWindowNs` can close it. */
  windowSamples: number;
  /** Samples faster than this are left out (a cached or refused-at-once answer says nothing of queueing), ns. */
  minRttNs: number;
}

/** Defaults of WindowedLimit: windows of 1 s holding at least 10 samples; samples under 100 us left out. */
export const WINDOWED_LIMIT_DEFAULTS: Readonly<WindowedLimitOptions> = {
  minWindowNs: 1e9,
  maxWindowNs: 1e9,
  windowSamples: 10,
  minRttNs: 1e5,
};

/**
 * Runs another limit on windows of samples instead of single ones, as per-sample algorithms (Vegas, Gradient2) are
 * meant to be run at high request rates: each window hands the wrapped limit one sample whose RTT is the window's
 * mean, whose in-flight is the window's largest, which is lost when any of its samples was, and which starts when the
 * window's first request started. A lost sample is always counted, however fast it came back.
 *
 * A window closes at the first sample that finds it at least `minWindowNs` old with `windowSamples` samples in it,
 * or at least `maxWindowNs` old. Allocation-free: the window is a few numbers in a typed cell.
 */
export class WindowedLimit implements Limit {
  /** The limit the windows are fed to. */
  readonly inner: Limit;
  private readonly o: WindowedLimitOptions;
  /** [window start ns, sum of RTTs ns] (doubles in a cell are never boxed). */
  private readonly cell = new Float64Array(2);
  private count = 0;
  private peakInflight = 0;
  private dropped = false;
  /** Windows handed to the inner limit. */
  windows = 0;

  /** Validates every option (see WindowedLimitOptions). */
  constructor(inner: Limit, options?: Partial<WindowedLimitOptions>) {
    refuseUnknownOptions(WINDOWED_LIMIT_DEFAULTS, options, 'windowed limit');
    const o = withDefaults(WINDOWED_LIMIT_DEFAULTS, options);
    checkNumber('options.minWindowNs', o.minWindowNs, 0, Number.MAX_SAFE_INTEGER);
    checkNumber('options.maxWindowNs', o.maxWindowNs, o.minWindowNs, Number.MAX_SAFE_INTEGER);
    checkNumber('options.windowSamples', o.windowSamples, 1, 1e9, true);
    checkNumber('options.minRttNs', o.minRttNs, 0, Number.MAX_SAFE_INTEGER);
    this.inner = inner;
    this.o = o;
  }

  /** The wrapped limit's current limit. */
  get limit(): number {
    return this.inner.limit;
  }

  /** The wrapped limit's reference RTT. */
  get referenceRttNs(): number {
    return this.inner.referenceRttNs;
  }

  /** Adds the sample to the current window; hands the window on when it closes. */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void {
    if (!didDrop && rttNs < this.o.minRttNs) return;
    const c = this.cell;
    if (this.count === 0) c[0] = startNs;
    c[1] = c[1]! + rttNs;
    this.count++;
    if (inflight > this.peakInflight) this.peakInflight = inflight;
    if (didDrop) this.dropped = true;
    const ageNs = startNs + rttNs - c[0]!;
    if (ageNs < this.o.maxWindowNs && (ageNs < this.o.minWindowNs || this.count < this.o.windowSamples)) return;
    const meanNs = c[1]! / this.count;
    const peak = this.peakInflight;
    const drop = this.dropped;
    this.count = 0;
    this.peakInflight = 0;
    this.dropped = false;
    c[1] = 0;
    this.windows++;
    this.inner.onSample(c[0]!, meanNs, peak, drop);
  }
}
