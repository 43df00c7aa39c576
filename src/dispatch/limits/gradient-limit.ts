import type { Limit } from './limit.js';
import { checkNumber, refuseUnknownOptions, withDefaults } from '../validate.js';

/** RTTs kept per update interval for its median (the most recent ones when an interval has more). */
const INTERVAL_SAMPLE_CAPACITY = 256;
/** A light interval's median serves as the band's reference only from this many samples (fewer are one burst). */
const LIGHT_REFERENCE_MIN_SAMPLES = 3;

/** RTTs a probe keeps for its median (the most recent ones when it takes more). */
const PROBE_SAMPLE_CAPACITY = 64;

/**
 * While growth is held by the no-load gate, a fall of the limit to this fraction of where the hold began with the
 * RTT no lower (see GATE_RELEARN_RTT_FRACTION) shows no queue of ours (a queue drains as the load falls): the
 * downstream got slower, and the gate moves up to `(1 + growthTolerance)` times the RTT now.
 */
const GATE_RELEARN_LIMIT_FRACTION = 0.9;
/**
 * A fall of the limit to this fraction of where the hold began, with the RTT no lower, asks for a probe (when the last
 * one is at least `reprobeMinGapNs` old): the no-load RTT is measured again rather than assumed.
 */
const GATE_PROBE_LIMIT_FRACTION = 0.97;
/**
 * A probe for the gate holds the limit at this fraction of its value: the limit is then within a few percent of the
 * downstream's concurrency (the gate held it there), so a lighter cut than a reference probe's already removes any
 * queue, and costs less throughput.
 */
const GATE_PROBE_FRACTION = 0.8;
/** The RTT "did not fall" while it stays at least this fraction of its value when the hold began. */
const GATE_RELEARN_RTT_FRACTION = 0.97;

/**
 * The k-th smallest of `a[0..n)` (0-based) into `out[at]`, reordering `a` in place (Hoare selection; a typed cell,
 * so no double is boxed on the way out). Allocation-free.
 */
function selectInto(a: Float64Array, n: number, k: number, out: Float64Array, at: number): void {
  let lo = 0;
  let hi = n - 1;
  // Narrow [lo, hi] to the side holding index k until it is one element.
  while (lo < hi) {
    const pivot = a[(lo + hi) >> 1]!;
    let i = lo;
    let j = hi;
    // Partition: everything left of i is <= pivot, everything right of j is >= pivot.
    while (i <= j) {
      while (a[i]! < pivot) i++;
      while (a[j]! > pivot) j--;
      if (i <= j) {
        const t = a[i]!;
        a[i] = a[j]!;
        a[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else break;
  }
  out[at] = a[k]!;
}

/** Options of GradientLimit. */
export interface GradientLimitOptions {
  /** Starting limit. */
  initialLimit: number;
  /** Floor: never zero, so a trickle keeps probing the downstream. */
  minLimit: number;
  /** Ceiling: a fraction of the downstream's known capacity, bounding the damage of a wrong signal. */
  maxLimit: number;
  /** Weight of each new target in the limit, in (0, 1]. */
  smoothing: number;
  /** Lower clamp of the gradient, in (0, 1]: one slow interval can at most scale the target by this. */
  minGradient: number;
  /** Growth only while the peak in-flight of the interval is at least this fraction of the limit, in (0, 1]. */
  growthUtilisation: number;
  /**
   * The growth allowance is `allowanceFactor * sqrt(L)`, in (0, 4]: it is also the queue the limit keeps at the
   * downstream in equilibrium (`L (1 - g) = allowance`), so it trades latency at the downstream for the speed of growth.
   */
  allowanceFactor: number;
  /**
   * The growth gate, off by default (Infinity): the allowance is given only while the interval's median RTT is under
   * `(1 + growthTolerance)` times the no-load RTT (the median RTT a probe measured at its reduced limit), >= 0.001. The
   * queueing delay the limit keeps at the downstream is then about this fraction of the RTT instead of sqrt(L)
   * requests; but any rise of the RTT that is not a queue (the caller's own load on a busy host) holds growth too.
   * With the gate on, an earlier first probe (`firstProbeAfterNs` 2e9) and a median over more samples
   * (`probeSamples` 16) set it sooner and better.
   */
  growthTolerance: number;
  /**
   * The first probe comes this long after the first sample when that is sooner than `rttMinWindowNs`, ns (Infinity,
   * the default: at the end of the first window, as every later one).
   */
  firstProbeAfterNs: number;
  /** Multiplier applied on loss (error, timeout, 429/503), in (0, 1). */
  backoffRatio: number;
  /** Shortest time between two limit updates, ns; samples in between are averaged. */
  updateIntervalNs: number;
  /**
   * The update interval is also at least this many reference RTTs: the downstream reacts to a limit change about
   * one RTT later, and the loop must run slower than that.
   */
  updateIntervalRtts: number;
  /**
   * A queue is clearly building when `fastDecreaseSamples` consecutive samples each took at least this many
   * reference RTTs (RTT-min, or the band's reference while a light median is fresh: see `lightReferenceMaxAgeNs`);
   * the limit is then cut at once by `minGradient` (unsmoothed, at most once per RTT). >= 1; Infinity turns the fast
   * path off. Default 2: it removes the overload at a sudden capacity drop. The caller's own stalls (a CPU-starved
   * host) look like a queue to it unless they are taken out of the samples first: the router's dispatcher does that
   * (`Limiter` with a `LoopStallMeter`); a caller that cannot may prefer Infinity.
   */
  fastDecreaseRttRatio: number;
  /** Consecutive slow samples that make a fast decrease (a run, not one outlier). */
  fastDecreaseSamples: number;
  /**
   * The fast path is armed only while the limit is at least this: a small limit can only build a small queue,
   * which the smoothed rule drains within a few intervals, while a false cut (a stall of the caller taken for a
   * queue) costs a small limit most. >= 1.
   */
  fastDecreaseMinLimit: number;
  /**
   * The run must also last at least this many reference RTTs (from its first sample's completion to its last):
   * completions handled together after a pause of the caller's own event loop all look slow at one instant, a
   * queue at the downstream keeps them slow over time. In [0, 10].
   */
  fastDecreaseSpanRtts: number;
  /** The reference (minimum) RTT is re-established by a forced probe this often, ns. */
  rttMinWindowNs: number;
  /** During a probe the limit is this fraction of its value, so low-queue samples can be observed, in (0, 1]. */
  probeFraction: number;
  /** Samples started after the probe began that it collects before the new reference is taken. */
  probeSamples: number;
  /**
   * The downstream is not the constraint while the interval's peak in-flight stays under this fraction of the limit:
   * the limit then holds (no decrease for a slower RTT, no growth either), in [0, 1]; 0 turns the hold off. A
   * slower answer with little load on the downstream is its own business, not a queue this limit built.
   */
  appLimitedUtilisation: number;
  /**
   * While the downstream is pressed but the limit is not the constraint (the interval's peak in-flight between
   * `appLimitedUtilisation` and `growthUtilisation` of the limit), the gradient there is `min(1, partialLoadRttRatio *
   * rttMin / rtt)`, >= 1: the spread of a jittery downstream's answers (a median well above the smallest of them) is
   * no queue, and without this the limit, which earns no growth at that load, would shrink on it interval after
   * interval down to the demand. A queue that doubles the RTT still lowers it. 1 gives the plain gradient there.
   */
  partialLoadRttRatio: number;
  /**
   * In that band the reference is the median RTT of the last light interval (peak in-flight under
   * `appLimitedUtilisation` of the limit, at least LIGHT_REFERENCE_MIN_SAMPLES samples) when it ended within this long
   * and is above RTT-min, at most `partialLoadRttRatio` RTT-mins, ns (0: RTT-min only). A queue is what more in flight
   * adds to the RTT, so the band compares its median with what the downstream answered at a lighter load just before:
   * its spread, its drift and the caller's own delays are in both, and one answer faster than all others (a timer
   * that fired early) does not set the bar alone. The cap bounds what the band lets stand when the light load queued
   * too (a limit over twice what the downstream takes): `partialLoadRttRatio^2` RTT-mins. The fast decrease reads its
   * samples against the same reference (against RTT-min alone, most answers of such a downstream are twice a rare
   * fast one); the gradient at or over `growthUtilisation` still reads RTT-min alone.
   */
  lightReferenceMaxAgeNs: number;
  /**
   * A probe is started early (before `rttMinWindowNs`) when `reprobeIntervals` intervals in a row had a median RTT of
   * at least this many reference RTTs, >= 1 (Infinity: never early). The probe tells a moved baseline (a slower
   * service: the RTT stays up at half the load, and becomes the new reference) from a queue (the RTT falls back).
   */
  reprobeRttRatio: number;
  /** Consecutive slow intervals that start an early probe, >= 1. */
  reprobeIntervals: number;
  /** Two early probes are at least this far apart, ns. */
  reprobeMinGapNs: number;
  /** Loss backoffs within `cautiousWindowNs` that make growth cautious. */
  cautiousBackoffs: number;
  /** Window in which `cautiousBackoffs` backoffs make growth cautious, ns. */
  cautiousWindowNs: number;
  /** While cautious, increases are at least `updateInterval * cautiousIntervalMultiplier` apart. */
  cautiousIntervalMultiplier: number;
}

/** Defaults of GradientLimit. */
export const GRADIENT_LIMIT_DEFAULTS: GradientLimitOptions = {
  initialLimit: 20,
  minLimit: 4,
  maxLimit: 400,
  smoothing: 0.2,
  minGradient: 0.5,
  growthUtilisation: 0.8,
  allowanceFactor: 1,
  growthTolerance: Infinity,
  firstProbeAfterNs: Infinity,
  backoffRatio: 0.5,
  updateIntervalNs: 50e6,
  updateIntervalRtts: 1.5,
  fastDecreaseRttRatio: 2,
  fastDecreaseSamples: 3,
  fastDecreaseMinLimit: 12,
  fastDecreaseSpanRtts: 0.5,
  rttMinWindowNs: 60e9,
  probeFraction: 0.5,
  probeSamples: 5,
  appLimitedUtilisation: 0.5,
  partialLoadRttRatio: 1.5,
  lightReferenceMaxAgeNs: 5e9,
  reprobeRttRatio: 1.5,
  reprobeIntervals: 3,
  reprobeMinGapNs: 5e9,
  cautiousBackoffs: 3,
  cautiousWindowNs: 300e9,
  cautiousIntervalMultiplier: 4,
};

/**
 * The gradient limit: infers the downstream's capacity from the ratio of its no-load RTT to its current RTT.
 *
 * Samples are grouped into update intervals of `max(updateIntervalNs, updateIntervalRtts * rttMin)`; at the end of
 * one, with `rtt` the median RTT of the interval (robust to a burst of late completions; the last 256 samples when
 * there are more) and `peak` its largest in-flight:
 * - loss in the interval: `L = max(minLimit, L * backoffRatio)` (one backoff per interval; counted for caution)
 * - else `g = clamp(r * rttMin / rtt, minGradient, 1)`, with `r = 1` when `peak >= growthUtilisation * L` (the limit
 *   is the constraint) and `r = partialLoadRttRatio` below that (a jittery downstream's spread is not a queue),
 *   where (with `r = partialLoadRttRatio` only) `rttMin` is replaced by the median of the last light interval when
 *   that is fresh and higher, capped at `r * rttMin` (see `lightReferenceMaxAgeNs`),
 *   `allowance = allowanceFactor * sqrt(L) * h` when `peak >= growthUtilisation * L` and `rtt < gate` (and, when
 *   cautious, the last increase is at least `cautiousIntervalMultiplier` intervals old), else 0, with the taper
 *   `h = min(1, (gate - rtt) / (gate - noLoad))`, full at the no-load RTT and none at the gate,
 *   `L = clamp((1 - smoothing) L + smoothing (L g + allowance), minLimit, maxLimit)`.
 *
 * The gate is `(1 + growthTolerance) * noLoad`, `noLoad` the median RTT of the last probe (before the first probe,
 * `rttMin`); by default `growthTolerance` is Infinity: no gate, `h = 1`. Without it the equilibrium
 * `L (1 - g) = allowance` keeps about sqrt(L) requests queued at the downstream; with it, about `growthTolerance` of
 * the RTT, while a capacity rise is followed about as fast (the RTT stays at no-load until the limit reaches the new
 * capacity). A downstream that got slower with no queue of ours holds the median over the gate while the limit
 * falls: at GATE_PROBE_LIMIT_FRACTION of where the hold began with the RTT no lower, a light probe (the limit at
 * GATE_PROBE_FRACTION, at most once per `reprobeMinGapNs`) measures the no-load RTT again; at
 * GATE_RELEARN_LIMIT_FRACTION (a queue would have drained by then) the gate moves up to `(1 + growthTolerance) * rtt`.
 *
 * Fast decrease (on by default; `fastDecreaseRttRatio` Infinity turns it off), without waiting for the interval's
 * end, while `L >= fastDecreaseMinLimit` and for samples sent while the downstream was pressed (in flight at least
 * `appLimitedUtilisation * L`: a light load builds no queue, and a slower answer then is the downstream's own): when
 * `fastDecreaseSamples` consecutive samples each took
 * at least `fastDecreaseRttRatio * base` (`base` the band's reference: the last light interval's median while fresh
 * and above `rttMin`, capped at `partialLoadRttRatio * rttMin`, else `rttMin`), completing over at least
 * `fastDecreaseSpanRtts * rttMin` (a queue clearly building, not one burst of completions handled late together by a
 * stalled caller),
 * `L = max(minLimit, L * minGradient)` at once: the gradient clamp still bounds the cut to halving per update.
 * Until an interval's median comes back below the fast ratio (of the same base) the cut is unconfirmed and the fast
 * path is off (the smoothed rule still applies): an RTT that stays at twice the reference after halving the load may
 * be a moved baseline (a slower deploy) that only the re-probe can tell, so it is not cut again and again. Fast cuts
 * do not count for caution: caution follows loss, the downstream's own signal that it struggles, while a latency cut
 * may come from the caller's own delays.
 *
 * After a backoff (loss or fast decrease) at time T, samples of requests that started before T are ignored: they
 * were sent under the old limit and show the queue the cut is removing, so reacting to them would be reacting to
 * the loop's own past decision. This also makes successive backoffs at least one RTT apart.
 *
 * While the interval's peak in-flight stays under `appLimitedUtilisation * L` the downstream is not the constraint and
 * the limit holds: neither the gradient nor the allowance is applied (a slower RTT at a light load is the
 * downstream's own, and growth is earned only under pressure). Such an interval with a median of at least
 * `reprobeRttRatio * rttMin` still counts toward an early probe (below), which then holds the limit at
 * `probeFraction` of that interval's peak in-flight: a stale reference (the minimum of a faster past) is replaced
 * even while the downstream is never pressed, and a queue at that light load drains in the probe as at any other.
 *
 * `rttMin` is a windowed minimum: every `rttMinWindowNs` (the first time after `firstProbeAfterNs` when sooner) a probe
 * holds the limit at `probeFraction * L`, takes the
 * smallest RTT of `probeSamples` samples that started after the probe began as the new reference, then restores L.
 * A probe also starts early when `reprobeIntervals` intervals in a row (pressed or held) had a median of at least
 * `reprobeRttRatio * rttMin` (at most once per `reprobeMinGapNs`): if the downstream merely got slower (a deploy, a
 * drifting service time), its RTT stays up at the probe's reduced load and becomes the reference, so the limit stops
 * shrinking against a stale one within a few intervals instead of at the end of the window; if a queue made the RTT
 * high, the probe drains it (its smallest RTT is under `1 / reprobeRttRatio` of the slow median) and the reference
 * stays.
 * Growth is cautious while `cautiousBackoffs` loss backoffs happened within `cautiousWindowNs`.
 * Time comes only from the samples (`startNs + rttNs` is "now").
 */
export class GradientLimit implements Limit {
  private readonly o: GradientLimitOptions;
  private estimate: number;
  private rttMinNs = Infinity;
  private windowStartNs = NaN;
  private lastUpdateNs = NaN;
  private lastIncreaseNs = -Infinity;
  private accCount = 0;
  private accPeakInflight = 0;
  private accDrop = false;
  private probing = false;
  private probeStartNs = 0;
  /** Probes started so far (the first early probe needs no gap before it). */
  private probes = 0;
  private probeMinNs = Infinity;
  private probeSeen = 0;
  /** The fraction of the limit the current probe holds it at. */
  private probeFractionNow = 0.5;
  /** The probe's RTTs (a ring of the latest PROBE_SAMPLE_CAPACITY), for their median. */
  private readonly probeRttsNs = new Float64Array(PROBE_SAMPLE_CAPACITY);
  /** Growth stops while the interval's median RTT is at least this, ns (Infinity: not set yet). */
  private gateNs = Infinity;
  /** The limit and median RTT when the gate began holding growth (0: not holding). */
  private gatedFromLimit = 0;
  private gatedFromRttNs = 0;
  /** Gate moves up because the downstream got slower while the gate held growth. */
  gateRelearns = 0;
  /** Probes started because the gate held growth while the limit fell and the RTT did not. */
  gateProbes = 0;
  /** The gate holds with the limit falling and the RTT not: a probe is due. */
  private gateSuspect = false;
  private savedEstimate = 0;
  private readonly backoffTimesNs: Float64Array;
  /** [startNs, rttNs, nowNs, median, queue base] of the sample being applied (doubles in a cell are never boxed). */
  private readonly sampleCell = new Float64Array(5);
  private backoffCount = 0;
  /** Samples of requests started before this time (the last backoff), ns, are ignored. */
  private freshFromNs = -Infinity;
  /** Consecutive samples at or above `fastDecreaseRttRatio` queue bases (see queueBase). */
  private slowRun = 0;
  /** Completion time of the first sample of the current slow run, ns. */
  private slowRunStartNs = 0;
  /** The interval's RTTs (a ring of the latest INTERVAL_SAMPLE_CAPACITY), reordered in place for the median. */
  private readonly intervalRttsNs = new Float64Array(INTERVAL_SAMPLE_CAPACITY);
  /** Fast decreases made. */
  fastDecreases = 0;
  /** A fast cut was made and no interval since has come back below the fast ratio. */
  private unconfirmedFastCut = false;
  /** Intervals in a row whose median RTT was at least `reprobeRttRatio` reference RTTs. */
  private slowIntervals = 0;
  /** Probes started before the reference window was over (a suspected baseline move). */
  earlyProbes = 0;
  /** Early probes that found the downstream slower at half the load (the reference moved up). */
  baselineMoves = 0;
  /** The slow interval median that started the current early probe, ns (0: a window probe). */
  private probeSlowMedianNs = 0;
  /** Interval updates held because the downstream was not pressed (peak in-flight under appLimitedUtilisation). */
  heldUpdates = 0;
  /** The peak in-flight of the last slow held interval (0: the last slow interval was pressed), for its probe. */
  private slowHeldPeak = 0;
  /** Median RTT of the last light interval with enough samples, ns (NaN: none yet), and when it ended. */
  private lightMedianNs = NaN;
  private lightMedianAtNs = -Infinity;

  /** Validates every option (see GradientLimitOptions). */
  constructor(options?: Partial<GradientLimitOptions>) {
    refuseUnknownOptions(GRADIENT_LIMIT_DEFAULTS, options, 'gradient limit');
    const o = withDefaults(GRADIENT_LIMIT_DEFAULTS, options);
    checkNumber('options.minLimit', o.minLimit, 1, 1e6, true);
    checkNumber('options.maxLimit', o.maxLimit, o.minLimit, 1e6, true);
    checkNumber('options.initialLimit', o.initialLimit, o.minLimit, o.maxLimit, true);
    checkNumber('options.smoothing', o.smoothing, 1e-6, 1);
    checkNumber('options.minGradient', o.minGradient, 0.01, 1);
    checkNumber('options.growthUtilisation', o.growthUtilisation, 0.01, 1);
    checkNumber('options.allowanceFactor', o.allowanceFactor, 0.01, 4);
    checkNumber('options.growthTolerance', o.growthTolerance, 0.001, Infinity);
    checkNumber('options.firstProbeAfterNs', o.firstProbeAfterNs, 0, Infinity);
    checkNumber('options.backoffRatio', o.backoffRatio, 0.01, 0.999);
    checkNumber('options.updateIntervalNs', o.updateIntervalNs, 0, 3.6e12);
    checkNumber('options.updateIntervalRtts', o.updateIntervalRtts, 0, 1000);
    checkNumber('options.fastDecreaseRttRatio', o.fastDecreaseRttRatio, 1, Infinity);
    checkNumber('options.fastDecreaseSamples', o.fastDecreaseSamples, 1, 1e6, true);
    checkNumber('options.fastDecreaseMinLimit', o.fastDecreaseMinLimit, 1, 1e6);
    checkNumber('options.fastDecreaseSpanRtts', o.fastDecreaseSpanRtts, 0, 10);
    checkNumber('options.rttMinWindowNs', o.rttMinWindowNs, 1, Number.MAX_SAFE_INTEGER);
    checkNumber('options.probeFraction', o.probeFraction, 0.01, 1);
    checkNumber('options.appLimitedUtilisation', o.appLimitedUtilisation, 0, 1);
    checkNumber('options.partialLoadRttRatio', o.partialLoadRttRatio, 1, Infinity);
    checkNumber('options.lightReferenceMaxAgeNs', o.lightReferenceMaxAgeNs, 0, Number.MAX_SAFE_INTEGER);
    checkNumber('options.reprobeRttRatio', o.reprobeRttRatio, 1, Infinity);
    checkNumber('options.reprobeIntervals', o.reprobeIntervals, 1, 1e6, true);
    checkNumber('options.reprobeMinGapNs', o.reprobeMinGapNs, 0, Number.MAX_SAFE_INTEGER);
    checkNumber('options.probeSamples', o.probeSamples, 1, 1e6, true);
    checkNumber('options.cautiousBackoffs', o.cautiousBackoffs, 1, 1000, true);
    checkNumber('options.cautiousWindowNs', o.cautiousWindowNs, 0, Number.MAX_SAFE_INTEGER);
    checkNumber('options.cautiousIntervalMultiplier', o.cautiousIntervalMultiplier, 1, 1000);
    this.o = o;
    this.estimate = o.initialLimit;
    this.sampleCell[4] = Infinity;
    this.backoffTimesNs = new Float64Array(o.cautiousBackoffs);
  }

  /** Current limit (whole requests); during a probe, the reduced probe limit. */
  get limit(): number {
    const e = this.probing ? this.savedEstimate * this.probeFractionNow : this.estimate;
    return Math.max(this.o.minLimit, Math.floor(e));
  }

  /** Unrounded estimate (the value restored after a probe). */
  get estimatedLimit(): number {
    return this.probing ? this.savedEstimate : this.estimate;
  }

  /** The windowed minimum RTT, ns (NaN before the first sample). */
  get referenceRttNs(): number {
    return this.rttMinNs === Infinity ? NaN : this.rttMinNs;
  }

  /** True while a forced re-probe holds the limit down. */
  get isProbing(): boolean {
    return this.probing;
  }

  /** True when growth is currently slowed by repeated backoffs (as of time `nowNs`). */
  isCautious(nowNs: number): boolean {
    const n = this.o.cautiousBackoffs;
    if (this.backoffCount < n) return false;
    // The oldest of the last n backoffs sits at the ring's next write position.
    const oldest = this.backoffTimesNs[this.backoffCount % n]!;
    return nowNs - oldest <= this.o.cautiousWindowNs;
  }

  private cautiousNow(): boolean {
    const n = this.o.cautiousBackoffs;
    if (this.backoffCount < n) return false;
    return this.sampleCell[2]! - this.backoffTimesNs[this.backoffCount % n]! <= this.o.cautiousWindowNs;
  }

  /** Current update interval, ns. */
  updateIntervalNs(): number {
    const byRtt = this.rttMinNs === Infinity ? 0 : this.o.updateIntervalRtts * this.rttMinNs;
    return Math.max(this.o.updateIntervalNs, byRtt);
  }

  /**
   * See the class comment for the rule. A small trampoline: the doubles go into a typed cell and `step` takes only
   * small integers, so an optimised caller inlines this call and boxes no number (allocation-free updates).
   */
  onSample(startNs: number, rttNs: number, inflight: number, didDrop: boolean): void {
    this.sampleCell[0] = startNs;
    this.sampleCell[1] = rttNs;
    this.step(inflight, didDrop);
  }

  private step(inflight: number, didDrop: boolean): void {
    const startNs = this.sampleCell[0]!;
    const rttNs = this.sampleCell[1]!;
    if (!(rttNs >= 0) || !Number.isFinite(startNs)) return;
    const rtt = rttNs > 0 ? rttNs : 1;
    const nowNs = startNs + rtt;
    const o = this.o;
    if (Number.isNaN(this.windowStartNs)) {
      this.windowStartNs = nowNs;
      this.lastUpdateNs = nowNs;
    }
    if (this.probing) {
      this.sampleCell[2] = nowNs;
      this.onProbeSample(didDrop);
      return;
    }
    if (
      nowNs - this.windowStartNs >=
        (this.probes === 0 && o.firstProbeAfterNs < o.rttMinWindowNs ? o.firstProbeAfterNs : o.rttMinWindowNs) &&
      this.rttMinNs !== Infinity
    ) {
      this.startProbe(nowNs);
      return;
    }
    if (rtt < this.rttMinNs) {
      this.rttMinNs = rtt;
      this.sampleCell[2] = nowNs;
      this.queueBase();
    }
    // Sent before the last backoff: it shows the queue that backoff is already removing.
    if (startNs < this.freshFromNs) return;
    this.intervalRttsNs[this.accCount % INTERVAL_SAMPLE_CAPACITY] = rtt;
    this.accCount++;
    if (inflight > this.accPeakInflight) this.accPeakInflight = inflight;
    if (didDrop) this.accDrop = true;
    this.sampleCell[2] = nowNs;
    if (inflight < o.appLimitedUtilisation * this.estimate) {
      // Sent while the downstream was not pressed: no evidence of a queue either way (neither counts nor breaks a run).
    } else if (
      !didDrop &&
      !this.unconfirmedFastCut &&
      this.estimate >= o.fastDecreaseMinLimit &&
      rtt >= o.fastDecreaseRttRatio * this.sampleCell[4]!
    ) {
      if (this.slowRun++ === 0) this.slowRunStartNs = nowNs;
      if (
        this.slowRun >= o.fastDecreaseSamples &&
        nowNs - this.slowRunStartNs >= o.fastDecreaseSpanRtts * this.rttMinNs
      ) {
        this.fastDecrease();
        return;
      }
    } else {
      this.slowRun = 0;
    }
    this.checkInterval();
  }

  /**
   * The reference below which a pressed answer is no sign of a queue, into `sampleCell[4]`, at the time in
   * `sampleCell[2]`: the last light interval's median while fresh (`lightReferenceMaxAgeNs`) and above RTT-min, capped
   * at `partialLoadRttRatio` RTT-mins; else RTT-min. Computed when its inputs change (a new RTT-min, an interval's end,
   * a probe's end), not per sample. The band's gradient and the fast path read it, so that the usual
   * answer of a jittery downstream is not taken for a queue over a rare fast one.
   */
  private queueBase(): void {
    const o = this.o;
    const cap = o.partialLoadRttRatio * this.rttMinNs;
    this.sampleCell[4] =
      o.lightReferenceMaxAgeNs > 0 &&
      this.sampleCell[2]! - this.lightMedianAtNs <= o.lightReferenceMaxAgeNs &&
      this.lightMedianNs > this.rttMinNs
        ? this.lightMedianNs < cap
          ? this.lightMedianNs
          : cap
        : this.rttMinNs;
  }

  /** Updates when the interval (at `sampleCell[2]`) is over. */
  private checkInterval(): void {
    const o = this.o;
    // Inline (not a method call returning a double, which would box it).
    const intervalNs = Math.max(o.updateIntervalNs, o.updateIntervalRtts * this.rttMinNs);
    if (this.sampleCell[2]! - this.lastUpdateNs < intervalNs) return;
    this.update();
  }

  private startProbe(nowNs: number, fraction = this.o.probeFraction): void {
    this.probes++;
    this.probeFractionNow = fraction;
    this.gateSuspect = false;
    this.slowIntervals = 0;
    this.probeSlowMedianNs = 0;
    this.probing = true;
    this.probeStartNs = nowNs;
    this.probeMinNs = Infinity;
    this.probeSeen = 0;
    this.savedEstimate = this.estimate;
    this.unconfirmedFastCut = false;
  }

  private fastDecrease(): void {
    const o = this.o;
    this.gatedFromLimit = 0;
    const L = this.estimate;
    this.estimate = Math.max(o.minLimit, L * o.minGradient);
    this.fastDecreases++;
    this.unconfirmedFastCut = true;
    this.endInterval(true);
  }

  /**
   * Starts a new interval at the sample's time (`sampleCell[2]`: a double passed as an argument may be boxed); after
   * a backoff, older requests' samples stop counting.
   */
  private endInterval(backedOff: boolean): void {
    const nowNs = this.sampleCell[2]!;
    this.accCount = 0;
    this.accPeakInflight = 0;
    this.accDrop = false;
    this.slowRun = 0;
    this.lastUpdateNs = nowNs;
    if (backedOff) this.freshFromNs = nowNs;
  }

  /**
   * True when the no-load gate holds growth at this interval's median (`sampleCell[3]`, limit `estimate`); moves the
   * gate up when the downstream got slower (see GATE_RELEARN_LIMIT_FRACTION). Reads its doubles from fields and cells,
   * so none is boxed on the way in.
   */
  private gateHolds(): boolean {
    const L = this.estimate;
    const rttNs = this.sampleCell[3]!;
    const tolerance = this.o.growthTolerance;
    // Until a probe or a relearn sets it, the gate stands on the reference (the smallest RTT, so it may be too low
    // for a jittery downstream: the relearn below then lifts it).
    if (this.gateNs === Infinity) this.gateNs = this.rttMinNs * (1 + tolerance);
    if (!(rttNs >= this.gateNs)) {
      this.gatedFromLimit = 0;
      this.gateSuspect = false;
      return false;
    }
    if (this.gatedFromLimit === 0 || rttNs < this.gatedFromRttNs * GATE_RELEARN_RTT_FRACTION) {
      // Holding starts, or the RTT fell with the load (a queue draining): measure from here.
      this.gateSuspect = false;
      this.gatedFromLimit = L;
      this.gatedFromRttNs = rttNs;
      return true;
    }
    if (L >= this.gatedFromLimit * GATE_RELEARN_LIMIT_FRACTION) {
      if (L < this.gatedFromLimit * GATE_PROBE_LIMIT_FRACTION) this.gateSuspect = true;
      return true;
    }
    // Less load and no less RTT: not a queue of ours. The no-load RTT is this now.
    this.gateNs = rttNs * (1 + tolerance);
    this.gatedFromLimit = 0;
    this.gateRelearns++;
    return false;
  }

  private update(): void {
    const nowNs = this.sampleCell[2]!;
    const o = this.o;
    const intervalNs = Math.max(o.updateIntervalNs, o.updateIntervalRtts * this.rttMinNs);
    const L = this.estimate;
    const backoff = this.accDrop;
    this.intervalMedian();
    const rttNs = this.sampleCell[3]!;
    // The interval after a fast cut came back below the fast ratio: the cut drained a queue, as it should.
    if (rttNs < o.fastDecreaseRttRatio * this.sampleCell[4]!) this.unconfirmedFastCut = false;
    if (backoff) {
      this.gatedFromLimit = 0;
      this.estimate = Math.max(o.minLimit, L * o.backoffRatio);
      this.recordBackoff();
      this.slowIntervals = 0;
    } else if (this.accPeakInflight < o.appLimitedUtilisation * Math.floor(L)) {
      // Not the constraint: a slower answer at this load is not a queue this limit built, and no growth is earned.
      this.heldUpdates++;
      if (this.accCount >= LIGHT_REFERENCE_MIN_SAMPLES) {
        this.lightMedianNs = rttNs;
        this.lightMedianAtNs = nowNs;
      }
      // Slow at a light load counts toward an early probe as slow under pressure does: either the reference is stale
      // (a slower downstream, or the minimum of a faster past) or there is a queue, and the probe tells which.
      if (rttNs >= o.reprobeRttRatio * this.rttMinNs) {
        this.slowIntervals++;
        this.slowHeldPeak = this.accPeakInflight;
      } else {
        this.slowIntervals = 0;
      }
    } else {
      const used = this.accPeakInflight >= o.growthUtilisation * Math.floor(L);
      const ratio = used ? 1 : o.partialLoadRttRatio;
      // In the band the reference is the queue base (a light median is trusted up to `partialLoadRttRatio` RTT-mins: a
      // light load can queue too, a limit over twice what the downstream takes, and a queue is then in both medians).
      const reference = used ? this.rttMinNs : this.sampleCell[4]!;
      const g = Math.max(o.minGradient, Math.min(1, (ratio * reference) / rttNs));
      const gated = used && o.growthTolerance !== Infinity && this.gateHolds();
      const mayGrow =
        used &&
        !gated &&
        (!this.cautiousNow() || nowNs - this.lastIncreaseNs >= intervalNs * o.cautiousIntervalMultiplier);
      // The allowance tapers from full at the no-load RTT to none at the gate, so growth slows as a queue appears
      // instead of overshooting the gate by a whole step.
      const gate = this.gateNs;
      const headroom = gate === Infinity ? 1 : ((gate - rttNs) * (1 + o.growthTolerance)) / (o.growthTolerance * gate);
      const allowance = mayGrow ? o.allowanceFactor * Math.sqrt(L) * (headroom < 1 ? headroom : 1) : 0;
      const next = Math.max(
        o.minLimit,
        Math.min(o.maxLimit, L * (1 - o.smoothing) + (L * g + allowance) * o.smoothing),
      );
      if (next > L) this.lastIncreaseNs = nowNs;
      this.estimate = next;
      this.slowIntervals = rttNs >= o.reprobeRttRatio * this.rttMinNs ? this.slowIntervals + 1 : 0;
      this.slowHeldPeak = 0;
    }
    this.endInterval(backoff);
    this.queueBase();
    // Slow for several intervals while pressed: a probe at reduced load tells a queue from a moved baseline.
    if (
      this.slowIntervals >= o.reprobeIntervals &&
      (this.probes === 0 || nowNs - this.probeStartNs >= o.reprobeMinGapNs)
    ) {
      this.earlyProbes++;
      // After a light interval the probe halves what was in flight, not the limit (which would cut nothing).
      const peak = this.slowHeldPeak;
      this.startProbe(nowNs, peak > 0 ? (o.probeFraction * peak) / L : o.probeFraction);
      this.probeSlowMedianNs = rttNs;
    } else if (this.gateSuspect && !this.probing && nowNs - this.probeStartNs >= o.reprobeMinGapNs) {
      // The gate holds growth while the limit falls and the RTT does not: measure the no-load RTT again (a probe like
      // any other, at a lighter cut: it sets the reference and restarts the window too).
      this.gateProbes++;
      this.startProbe(nowNs, GATE_PROBE_FRACTION);
    }
  }

  private onProbeSample(didDrop: boolean): void {
    const startNs = this.sampleCell[0]!;
    const rtt = this.sampleCell[1]! > 0 ? this.sampleCell[1]! : 1;
    const nowNs = this.sampleCell[2]!;
    const o = this.o;
    if (didDrop) {
      // Loss during a probe still backs off, at most once per interval.
      if (
        nowNs - this.lastUpdateNs >= Math.max(o.updateIntervalNs, o.updateIntervalRtts * this.rttMinNs) &&
        startNs >= this.freshFromNs
      ) {
        this.savedEstimate = Math.max(o.minLimit, this.savedEstimate * o.backoffRatio);
        this.recordBackoff();
        this.lastUpdateNs = nowNs;
        this.freshFromNs = nowNs;
      }
      return;
    }
    // Only requests sent under the probe's reduced limit show the downstream without our queue in it.
    if (startNs < this.probeStartNs) return;
    if (rtt < this.probeMinNs) this.probeMinNs = rtt;
    this.probeRttsNs[this.probeSeen % PROBE_SAMPLE_CAPACITY] = rtt;
    if (++this.probeSeen < o.probeSamples) return;
    if (o.growthTolerance !== Infinity) {
      // The no-load RTT for the growth gate: the probe's median (at its reduced limit).
      const n = this.probeSeen < PROBE_SAMPLE_CAPACITY ? this.probeSeen : PROBE_SAMPLE_CAPACITY;
      selectInto(this.probeRttsNs, n, n >> 1, this.sampleCell, 3);
      this.gateNs = this.sampleCell[3]! * (1 + o.growthTolerance);
      this.gatedFromLimit = 0;
    }
    // An early probe whose RTT fell well below the slow median drained a queue: the old reference stands. One whose
    // RTT stayed up at half the load met a slower downstream: that is the new baseline.
    const drainedQueue = this.probeSlowMedianNs > 0 && this.probeMinNs * o.reprobeRttRatio < this.probeSlowMedianNs;
    if (drainedQueue) {
      if (this.probeMinNs < this.rttMinNs) this.rttMinNs = this.probeMinNs;
    } else {
      if (this.probeSlowMedianNs > 0) this.baselineMoves++;
      this.rttMinNs = this.probeMinNs;
    }
    this.probeSlowMedianNs = 0;
    this.queueBase();
    this.windowStartNs = nowNs;
    this.estimate = this.savedEstimate;
    this.probing = false;
    this.endInterval(false);
  }

  /** Median of the interval's kept RTTs into sampleCell[3] (reordered in place; the interval ends after). */
  private intervalMedian(): void {
    const n = this.accCount < INTERVAL_SAMPLE_CAPACITY ? this.accCount : INTERVAL_SAMPLE_CAPACITY;
    // An even count takes the upper median: one number, no averaging needed for a gradient.
    selectInto(this.intervalRttsNs, n, n >> 1, this.sampleCell, 3);
  }

  private recordBackoff(): void {
    this.backoffTimesNs[this.backoffCount % this.o.cautiousBackoffs] = this.sampleCell[2]!;
    this.backoffCount++;
  }
}
