import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AimdLimit,
  FixedLimit,
  Gradient2Limit,
  GradientLimit,
  VegasLimit,
  WindowedLimit,
  type Limit,
} from '../../src/dispatch/limits/index.js';

const MS = 1e6;

/** Feeds `n` samples one `gapNs` apart starting at `t0`; inflight from `inflightOf(limit)`. Returns the end time. */
function feed(
  limit: Limit,
  t0: number,
  n: number,
  gapNs: number,
  rttNs: number,
  inflightOf: (l: number) => number,
  drop = false,
): number {
  let t = t0;
  for (let i = 0; i < n; i++) {
    limit.onSample(t, rttNs, inflightOf(limit.limit), drop);
    t += gapNs;
  }
  return t;
}
const saturated = (l: number): number => l;
const idle = (): number => 1;

const perSample = { updateIntervalNs: 0, updateIntervalRtts: 0 } as const;

test('gradient: grows while saturated at the no-load RTT, not while idle', () => {
  const a = new GradientLimit({ ...perSample, initialLimit: 10 });
  feed(a, 0, 50, MS, 10 * MS, saturated);
  assert.ok(a.limit > 20, `saturated limit grew: ${a.limit}`);
  const b = new GradientLimit({ ...perSample, initialLimit: 10 });
  feed(b, 0, 500, MS, 10 * MS, idle);
  assert.equal(b.limit, 10);
});

test('gradient: halves on loss, never below the floor, never above the ceiling', () => {
  const g = new GradientLimit({ ...perSample, initialLimit: 40, minLimit: 3, maxLimit: 60 });
  g.onSample(0, 10 * MS, 40, true);
  assert.equal(g.limit, 20);
  // Each loss started after the previous backoff (10 ms apart, 10 ms RTT), so each one counts.
  feed(g, 10 * MS, 20, 10 * MS, 10 * MS, saturated, true);
  assert.equal(g.limit, 3);
  feed(g, 100 * MS, 5000, MS, 10 * MS, saturated);
  assert.equal(g.limit, 60);
});

test('gradient: the gradient is clamped at minGradient (a 20x spike cannot cut the limit by 95%)', () => {
  const g = new GradientLimit({ ...perSample, initialLimit: 100, maxLimit: 1000, smoothing: 1 });
  g.onSample(0, 10 * MS, 100, false); // reference 10 ms
  const before = g.estimatedLimit;
  g.onSample(20 * MS, 200 * MS, 100, false);
  // smoothing 1: L' = L * 0.5 + sqrt(L)
  assert.ok(Math.abs(g.estimatedLimit - (before * 0.5 + Math.sqrt(before))) < 1e-9);
});

test('gradient: errors that return fast still brake (loss beats a perfect gradient)', () => {
  const g = new GradientLimit({ ...perSample, initialLimit: 50, minLimit: 2, maxLimit: 400 });
  feed(g, 0, 1000, MS, 1 * MS, saturated, true);
  assert.equal(g.limit, 2);
});

test('gradient: one update per interval; samples inside the interval are averaged', () => {
  const g = new GradientLimit({ initialLimit: 10, updateIntervalNs: 100 * MS, updateIntervalRtts: 0 });
  feed(g, 0, 50, MS, 10 * MS, saturated); // ends at 49 + 10 ms < 100 ms after the first sample
  assert.equal(g.limit, 10);
  g.onSample(200 * MS, 10 * MS, 10, false);
  assert.ok(g.estimatedLimit > 10);
  // Many losses inside one interval back off once.
  const before = g.estimatedLimit;
  feed(g, 300 * MS, 10, MS, 10 * MS, saturated, true);
  assert.equal(g.estimatedLimit, before * 0.5);
});

test('gradient: re-probes the reference after the window, so a slower baseline is relearnt (early probes off)', () => {
  const g = new GradientLimit({
    ...perSample,
    initialLimit: 40,
    minLimit: 4,
    maxLimit: 400,
    rttMinWindowNs: 10_000 * MS,
    probeSamples: 3,
    reprobeRttRatio: Infinity,
  });
  let t = feed(g, 0, 100, MS, 10 * MS, saturated);
  assert.equal(g.referenceRttNs, 10 * MS);
  // The downstream's baseline moves to 30 ms: compared with the stale 10 ms reference it looks congested.
  feed(g, t, 200, MS, 30 * MS, saturated);
  const collapsed = g.limit;
  assert.ok(collapsed <= 8, `limit collapses against a stale reference: ${collapsed}`);
  // Past the window: a probe starts and holds the limit at probeFraction.
  t = feed(g, 10_100 * MS, 1, MS, 30 * MS, saturated);
  assert.equal(g.isProbing, true);
  assert.equal(g.limit, Math.max(4, Math.floor(g.estimatedLimit * 0.5)));
  // Samples started after the probe began set the new reference.
  t = feed(g, t + 50 * MS, 3, MS, 30 * MS, saturated);
  assert.equal(g.isProbing, false);
  assert.equal(g.referenceRttNs, 30 * MS);
  feed(g, t, 200, MS, 30 * MS, saturated);
  assert.ok(g.limit > collapsed * 3, `limit recovers after the re-probe: ${g.limit}`);
});

test('gradient: a slower baseline under load is relearnt by an early probe within a few intervals: a dip, no collapse', () => {
  const g = new GradientLimit({ ...perSample, initialLimit: 40, minLimit: 4, maxLimit: 400, probeSamples: 3 });
  let t = feed(g, 0, 100, MS, 10 * MS, saturated);
  const before = g.estimatedLimit;
  // The service gets slower (10 -> 30 ms) with nothing queued: three slow intervals start a probe.
  t = feed(g, t, 3, MS, 30 * MS, saturated);
  assert.equal(g.isProbing, true);
  assert.equal(g.earlyProbes, 1);
  // At half the load the RTT stays at 30 ms: the baseline moved, and the reference follows it.
  t = feed(g, t + 50 * MS, 3, MS, 30 * MS, saturated);
  assert.equal(g.isProbing, false);
  assert.equal(g.referenceRttNs, 30 * MS);
  assert.equal(g.baselineMoves, 1);
  const dipped = g.estimatedLimit;
  assert.ok(dipped > before * 0.65, `dipped to ${dipped.toFixed(1)} from ${before.toFixed(1)}, no collapse`);
  feed(g, t, 200, MS, 30 * MS, saturated);
  assert.ok(g.estimatedLimit > before, `grows again at the new baseline: ${g.estimatedLimit.toFixed(1)}`);
});

test('gradient: an early probe that drains a queue keeps the reference, and the limit settles near capacity', () => {
  // A downstream of 16 servers and a 10 ms service: RTT = 10 ms * max(1, in-flight / 16).
  const g = new GradientLimit({ initialLimit: 100, minLimit: 4, maxLimit: 400, updateIntervalNs: 20 * MS });
  let t = 0;
  g.onSample(t, 10 * MS, 1, false); // the no-load reference
  const limits: number[] = [];
  for (let i = 0; i < 20_000; i++) {
    const inflight = g.limit;
    const rtt = 10 * MS * Math.max(1, inflight / 16);
    t += rtt / inflight; // completions spread over one RTT
    g.onSample(t - rtt, rtt, inflight, false);
    if (i >= 15_000) limits.push(g.limit);
  }
  assert.ok(g.earlyProbes >= 1, `early probes: ${g.earlyProbes}`);
  assert.equal(g.baselineMoves, 0, 'no probe mistook the queue for a slower downstream');
  assert.equal(g.referenceRttNs, 10 * MS);
  limits.sort((a, b) => a - b);
  const median = limits[limits.length >> 1]!;
  assert.ok(median >= 12 && median <= 26, `settles near the 16 servers: median limit ${median}`);
});

test('gradient: holds while the downstream is not pressed (peak in-flight under half the limit), whatever the RTT', () => {
  const light = new GradientLimit({ ...perSample, initialLimit: 40 });
  let t = feed(light, 0, 50, MS, 10 * MS, saturated);
  const L0 = light.estimatedLimit;
  feed(light, t, 500, MS, 40 * MS, () => Math.floor(L0 / 4));
  assert.equal(light.estimatedLimit, L0, 'a slower answer at a quarter of the limit moves nothing');
  assert.ok(light.heldUpdates >= 440, `held updates: ${light.heldUpdates}`);
  // Slow at a light load: one early probe (at half of what was in flight) found the downstream slower, the new
  // reference; the limit is where it was.
  assert.equal(light.earlyProbes, 1);
  assert.equal(light.referenceRttNs, 40 * MS);
  // The same RTT with the limit pressed is a queue: it shrinks (early probes off to show the gradient alone).
  const pressed = new GradientLimit({ ...perSample, initialLimit: 40, reprobeRttRatio: Infinity });
  t = feed(pressed, 0, 50, MS, 10 * MS, saturated);
  feed(pressed, t, 50, MS, 40 * MS, saturated);
  assert.ok(pressed.estimatedLimit < L0 * 0.3, `pressed: ${pressed.estimatedLimit.toFixed(1)}`);
  // appLimitedUtilisation 0 turns the hold off.
  const off = new GradientLimit({
    ...perSample,
    initialLimit: 40,
    appLimitedUtilisation: 0,
    reprobeRttRatio: Infinity,
  });
  t = feed(off, 0, 50, MS, 10 * MS, saturated);
  feed(off, t, 50, MS, 40 * MS, () => Math.floor(L0 / 4));
  assert.ok(off.estimatedLimit < L0 * 0.3);
});

test('gradient: probes more slowly after repeated backoffs', () => {
  const opts = {
    initialLimit: 20,
    updateIntervalNs: 10 * MS,
    updateIntervalRtts: 0,
    cautiousBackoffs: 3,
    cautiousWindowNs: 60_000 * MS,
    cautiousIntervalMultiplier: 4,
  };
  const calm = new GradientLimit(opts);
  const hurt = new GradientLimit(opts);
  calm.onSample(0, 10 * MS, 20, false);
  hurt.onSample(0, 10 * MS, 20, false);
  for (let k = 1; k <= 3; k++) hurt.onSample(k * 20 * MS, 10 * MS, 20, true);
  assert.equal(hurt.isCautious(100 * MS), true);
  assert.equal(calm.isCautious(100 * MS), false);
  const count = (g: GradientLimit): number => {
    let ups = 0;
    let last = g.estimatedLimit;
    for (let t = 100 * MS; t < 1100 * MS; t += 5 * MS) {
      g.onSample(t, 10 * MS, g.limit, false);
      if (g.estimatedLimit > last) ups++;
      last = g.estimatedLimit;
    }
    return ups;
  };
  const calmUps = count(calm);
  const hurtUps = count(hurt);
  assert.ok(calmUps >= 90, `calm grows every interval: ${calmUps}`);
  assert.ok(hurtUps * 3 <= calmUps, `cautious growth is at least 3x rarer: ${hurtUps} vs ${calmUps}`);
  // Outside the caution window growth returns to normal.
  assert.equal(hurt.isCautious(61_000 * MS), false);
});

/** Options where only the fast path can move the limit (the smoothed interval is 10 s long). */
const fastOnly = {
  initialLimit: 40,
  maxLimit: 400,
  updateIntervalNs: 10_000 * MS,
  updateIntervalRtts: 0,
  fastDecreaseRttRatio: 2,
} as const;

/** Reference 10 ms, then completions flowing 1 ms apart (starts 1..29 ms, done 11..39 ms): a busy downstream. */
function flowing(g: GradientLimit): void {
  g.onSample(0, 10 * MS, 40, false);
  feed(g, MS, 29, MS, 10 * MS, () => 40);
}

test('gradient: a run of samples at >= 2x the reference cuts the limit at once by the clamp, one outlier does not', () => {
  const g = new GradientLimit(fastOnly);
  flowing(g);
  g.onSample(16 * MS, 25 * MS, 40, false); // one outlier, done at 41 ms
  g.onSample(32 * MS, 10 * MS, 40, false); // run broken
  g.onSample(18 * MS, 25 * MS, 40, false); // 43 ms
  g.onSample(20 * MS, 25 * MS, 40, false); // 45 ms
  assert.equal(g.estimatedLimit, 40, 'two slow samples in a row are not a run of three');
  g.onSample(24 * MS, 25 * MS, 40, false); // 49 ms: third, spanning 6 ms >= 0.5 reference RTT
  assert.equal(g.estimatedLimit, 20, 'three in a row: L * minGradient, unsmoothed');
  assert.equal(g.fastDecreases, 1);
  // Samples below the ratio never cut fast.
  const h = new GradientLimit(fastOnly);
  flowing(h);
  feed(h, 30 * MS, 100, MS, 19 * MS, () => 40);
  assert.equal(h.estimatedLimit, 40);
  assert.equal(h.fastDecreases, 0);
});

test('gradient: late completions handled together after a pause neither cut fast nor move the interval median', () => {
  const g = new GradientLimit({ ...fastOnly, updateIntervalNs: 100 * MS, smoothing: 1 });
  flowing(g); // the interval starts at 10 ms
  feed(g, 30 * MS, 11, MS, 10 * MS, () => 40); // done 40..50 ms
  // The caller's event loop stalls from 50 to 80 ms: requests sent at 31..50 ms are all handled at about 80 ms.
  for (let k = 0; k < 20; k++) g.onSample((31 + k) * MS, (80 - 31 - k) * MS + k * 0.1 * MS, 40, false);
  assert.equal(g.fastDecreases, 0, 'a burst spanning 2 ms (< half a reference RTT) is no evidence of a queue');
  assert.equal(g.estimatedLimit, 40);
  // The interval closes on a normal sample: the median is the 10 ms majority, so g = 1 and the limit grows.
  g.onSample(100 * MS, 10 * MS, 40, false);
  assert.ok(g.estimatedLimit > 40, `the median ignores the minority burst: ${g.estimatedLimit}`);
  // The same slow RTTs with completions spread over time are a queue: the run spans half a reference RTT and cuts.
  const q = new GradientLimit(fastOnly);
  flowing(q);
  feed(q, 10 * MS, 4, 2 * MS, 30 * MS, () => 40); // done 40, 42, 44, 46 ms
  assert.equal(q.fastDecreases, 1);
  assert.equal(q.estimatedLimit, 20);
});

test('gradient: after a backoff, samples of requests sent before it are ignored; a fast cut waits for confirmation', () => {
  const g = new GradientLimit({ ...fastOnly, updateIntervalNs: 60 * MS });
  flowing(g);
  feed(g, 10 * MS, 4, 2 * MS, 30 * MS, () => 40); // cut at 46 ms
  assert.equal(g.estimatedLimit, 20);
  // Requests started before the cut come back slow (and one lost): they reflect the old limit, nothing moves.
  feed(g, 17 * MS, 29, MS, 31 * MS, () => 40); // done 48..76 ms
  g.onSample(45 * MS, 32 * MS, 40, true);
  assert.equal(g.estimatedLimit, 20);
  // Sent after the cut and still slow: unconfirmed, so no second fast cut (the smoothed rule acts at 106 ms).
  feed(g, 47 * MS, 4, 2 * MS, 31 * MS, () => 20); // done 78..84 ms
  assert.equal(g.fastDecreases, 1, 'no cut again before an interval confirms the first one');
  feed(g, 55 * MS, 21, MS, 31 * MS, () => 20); // done 86..106 ms: the interval ends with a median of 31 ms
  assert.ok(g.estimatedLimit < 20 && g.estimatedLimit > 17, `smoothed decrease only: ${g.estimatedLimit}`);
  // An interval below the fast ratio confirms the cut; then a new run of slow samples cuts again.
  feed(g, 96 * MS, 80, MS, 12 * MS, () => 20); // done 108..187 ms: the interval at 166 ms has a 12 ms median
  const before = g.estimatedLimit;
  feed(g, 160 * MS, 4, 2 * MS, 30 * MS, () => 20); // done 190..196 ms
  assert.equal(g.fastDecreases, 2);
  assert.equal(g.estimatedLimit, before * 0.5);
  // Loss: one sent before a backoff is ignored even after the interval; one sent after it halves.
  const l = new GradientLimit({ initialLimit: 40, updateIntervalNs: 20 * MS, updateIntervalRtts: 0 });
  l.onSample(0, 10 * MS, 40, true); // first sample: the interval starts here
  l.onSample(30 * MS, 10 * MS, 40, true); // interval over: halve at 40 ms
  assert.equal(l.estimatedLimit, 20);
  l.onSample(35 * MS, 40 * MS, 20, true); // sent before the backoff at 40 ms
  assert.equal(l.estimatedLimit, 20);
  l.onSample(45 * MS, 20 * MS, 20, true); // sent after it, interval over: halve
  assert.equal(l.estimatedLimit, 10);
});

test('gradient: the update interval is 1.5 reference RTTs (the downstream reacts about one RTT later)', () => {
  const g = new GradientLimit({
    initialLimit: 10,
    updateIntervalNs: 0,
    updateIntervalRtts: 1.5,
    fastDecreaseRttRatio: 100,
  });
  g.onSample(0, 10 * MS, 10, false);
  assert.equal(g.updateIntervalNs(), 15 * MS);
  // Saturated at the reference: updates come 15 ms apart, so 1 ms-spaced samples over 150 ms give about ten.
  let updates = 0;
  let last = g.estimatedLimit;
  for (let t = MS; t < 150 * MS; t += MS) {
    g.onSample(t, 10 * MS, g.limit, false);
    if (g.estimatedLimit !== last) updates++;
    last = g.estimatedLimit;
  }
  assert.ok(updates >= 8 && updates <= 10, `updates every 1.5 RTT: ${updates}`);
  // A floor in ns wins over a short reference.
  const f = new GradientLimit({ updateIntervalNs: 50 * MS, updateIntervalRtts: 1.5 });
  f.onSample(0, 10 * MS, 10, false);
  assert.equal(f.updateIntervalNs(), 50 * MS);
});

test('gradient: validates options with messages naming them', () => {
  assert.throws(
    () => new GradientLimit({ minLimit: 0 }),
    /options\.minLimit must be an integer in \[1, 1000000\], got 0/,
  );
  assert.throws(() => new GradientLimit({ smoothing: 2 }), /options\.smoothing/);
  assert.equal(new GradientLimit().fastDecreases, 0);
  assert.throws(
    () => new GradientLimit({ fastDecreaseRttRatio: 0.5 }),
    /options\.fastDecreaseRttRatio must be a number in \[1, Infinity\], got 0.5/,
  );
});

test('aimd: +1 while in use, none while idle, x0.9 on loss and on timeout, floor and ceiling', () => {
  const a = new AimdLimit({ initialLimit: 20, minLimit: 5, maxLimit: 30, timeoutNs: 100 * MS });
  a.onSample(0, MS, 10, false);
  assert.equal(a.limit, 21);
  a.onSample(0, MS, 3, false);
  assert.equal(a.limit, 21);
  a.onSample(0, MS, 21, true);
  assert.equal(a.limit, 18);
  a.onSample(0, 200 * MS, 18, false);
  assert.equal(a.limit, 16);
  feed(a, 0, 100, MS, MS, saturated, true);
  assert.equal(a.limit, 5);
  feed(a, 0, 100, MS, MS, saturated);
  assert.equal(a.limit, 30);
});

test('aimd: the backoff ratio is in [0.5, 1), a ratio just under 1 still backs off by one', () => {
  const a = new AimdLimit({ initialLimit: 20, backoffRatio: 0.9999 });
  a.onSample(0, MS, 20, true);
  assert.equal(a.limit, 19);
  assert.throws(
    () => new AimdLimit({ backoffRatio: 1 }),
    /^RangeError: options\.backoffRatio must be a number in \[0\.5, 1\), got 1$/,
  );
  assert.throws(() => new AimdLimit({ backoffRatio: 0.4 }), /options\.backoffRatio/);
  assert.equal(new AimdLimit().limit, 20);
});

test('vegas: grows with no queue, not while idle, shrinks on loss and queueing, floor, ceiling, re-probe', () => {
  const v = new VegasLimit({ initialLimit: 20, maxLimit: 200, probeMultiplier: 1000 });
  v.onSample(0, 10 * MS, 20, false); // sets the no-load RTT
  v.onSample(0, 10 * MS, 20, false);
  assert.equal(v.limit, 26); // q = 0 <= threshold: +beta (6 * log10(20) -> 6)
  const idleV = new VegasLimit({ initialLimit: 20, probeMultiplier: 1000 });
  feed(idleV, 0, 100, MS, 10 * MS, idle);
  assert.equal(idleV.limit, 20);
  v.onSample(0, 10 * MS, 26, true);
  assert.equal(v.limit, 25);
  v.onSample(0, 40 * MS, 25, false); // q = ceil(25 * 0.75) = 19 > beta = 6: -1
  assert.equal(v.limit, 24);
  feed(v, 0, 200, MS, 10 * MS, saturated, true);
  assert.equal(v.limit, 1);
  feed(v, 0, 400, MS, 10 * MS, saturated);
  assert.equal(v.limit, 200);
  const p = new VegasLimit({ initialLimit: 10, probeMultiplier: 2, random: () => 0 });
  p.onSample(0, 10 * MS, 10, false);
  feed(p, 0, 8, MS, 50 * MS, saturated); // jitter 0.5: probe after 0.5 * 2 * L samples
  assert.equal(p.referenceRttNs, 50 * MS, 'the no-load RTT was re-probed');
});

test('vegas: alpha, beta, threshold, increase and decrease as functions of the limit', () => {
  const seen: number[] = [];
  const v = new VegasLimit({
    initialLimit: 100,
    smoothing: 1,
    probeMultiplier: 1000,
    alpha: (l) => Math.floor(l / 10),
    beta: (l) => (seen.push(l), Math.floor(l / 5)),
    threshold: 2,
    increase: (l) => l + 5,
    decrease: (l) => l * 0.8,
  });
  v.onSample(0, 10 * MS, 100, false); // the no-load RTT
  v.onSample(0, 11 * MS, 100, false); // queue ceil(100 / 11) = 10, not < alpha 10, not > beta 20: unchanged
  assert.equal(v.limit, 100);
  v.onSample(0, 10.5 * MS, 100, false); // queue 5: > threshold 2, < alpha 10: increase
  assert.equal(v.limit, 105);
  v.onSample(0, 30 * MS, 105, false); // queue 70 > beta 21: decrease
  assert.equal(v.limit, 84);
  v.onSample(0, 10 * MS, 84, false); // queue 0 <= threshold: + beta (16)
  assert.equal(v.limit, 100);
  v.onSample(0, 10 * MS, 100, true); // loss: decrease
  assert.equal(v.limit, 80);
  assert.deepEqual(seen, [100, 100, 105, 84]);
  // With smoothing the estimate is fractional; alpha, beta and threshold see it in whole requests.
  const w = new VegasLimit({
    initialLimit: 100,
    smoothing: 0.5,
    probeMultiplier: 1000,
    beta: (l) => (seen.push(l), 6),
  });
  w.onSample(0, 10 * MS, 100, false);
  w.onSample(0, 10 * MS, 100, true); // decrease: 100 - 2, smoothed: 99
  w.onSample(0, 10 * MS, 100, true); // 99 - 1, smoothed: 98.5
  seen.length = 0;
  w.onSample(0, 10 * MS, 100, false);
  assert.deepEqual(seen, [98]);
  // A function returning NaN leaves the limit as it was.
  const n = new VegasLimit({ initialLimit: 10, probeMultiplier: 1000, decrease: () => NaN });
  n.onSample(0, 10 * MS, 10, false);
  n.onSample(0, 10 * MS, 10, true);
  assert.equal(n.limit, 10);
  assert.throws(
    () => new VegasLimit({ alpha: -1 }),
    /^RangeError: options\.alpha must be a number in \[0, 1000000\], got -1$/,
  );
  assert.throws(
    () => new VegasLimit({ increase: 3 as never }),
    /^RangeError: options\.increase must be a function of the limit \(library only\), got 3$/,
  );
});

test('gradient2: grows while saturated, not while idle, floor and ceiling', () => {
  const g = new Gradient2Limit({ initialLimit: 20, minLimit: 5, maxLimit: 100 });
  feed(g, 0, 50, MS, 10 * MS, saturated);
  assert.ok(g.limit > 30, `grew: ${g.limit}`);
  const i = new Gradient2Limit({ initialLimit: 20 });
  feed(i, 0, 100, MS, 10 * MS, idle);
  assert.equal(i.limit, 20);
  feed(g, 0, 2000, MS, 10 * MS, saturated);
  assert.equal(g.limit, 100);
  // RTT rising faster than the long average follows pulls the limit down to the floor.
  // g = 0.5: L -> 0.9 L + 0.2 queueSize, fixed point 2 queueSize = 8.
  const f = new Gradient2Limit({ initialLimit: 20, minLimit: 5, maxLimit: 100 });
  let rtt = 10;
  for (let k = 0; k < 3000; k++) f.onSample(0, (rtt *= 1.01) * MS, f.limit, false);
  assert.equal(f.limit, 8);
  const z = new Gradient2Limit({ initialLimit: 20, minLimit: 5, maxLimit: 100, queueSize: 0 });
  rtt = 10;
  for (let k = 0; k < 3000; k++) z.onSample(0, (rtt *= 1.01) * MS, z.limit, false);
  assert.equal(z.limit, 5);
});

test('gradient2: a sample within rttTolerance of the long RTT is no queue; beyond it the gradient is tolerance * long / rtt', () => {
  const g = new Gradient2Limit({ initialLimit: 20, smoothing: 1 });
  g.onSample(0, 10 * MS, 20, false); // long 10 ms, gradient 1: L = 20 + 4
  assert.equal(g.limit, 24);
  g.onSample(0, 14 * MS, 24, false); // long 12 ms (warm-up mean), 1.5 * 12 / 14 > 1: L = 24 + 4
  assert.equal(g.limit, 28);
  g.onSample(0, 40 * MS, 28, false); // long 64 / 3 ms, gradient 1.5 * 64 / 3 / 40 = 0.8: L = 28 * 0.8 + 4 = 26.4
  assert.equal(g.limit, 26);
  const strict = new Gradient2Limit({ initialLimit: 20, smoothing: 1, rttTolerance: 1 });
  for (const [rtt, inflight] of [
    [10, 20],
    [14, 24],
    [40, 28],
  ] as const)
    strict.onSample(0, rtt * MS, inflight, false);
  // Tolerance 1: 14 ms against a 12 ms long RTT already shrinks (24 * 6 / 7 + 4), then 40 ms against 64 / 3 ms.
  const L2 = 24 * (12 / 14) + 4;
  assert.equal(strict.limit, Math.floor(L2 * (64 / 3 / 40) + 4));
  assert.throws(() => new Gradient2Limit({ rttTolerance: 0.9 }), /options\.rttTolerance must be a number in \[1, /);
});

test('gradient2: a long RTT over twice the sample is cut by 5 % (after this sample); under half the limit it only learns', () => {
  const g = new Gradient2Limit({ initialLimit: 20, smoothing: 1, longWindow: 3, warmupWindow: 1 });
  g.onSample(0, 100, 20, false);
  assert.equal(g.referenceRttNs, 100);
  g.onSample(0, 20, 24, false); // EMA factor 0.5: long 60 = 3 * 20, cut to 57
  assert.ok(Math.abs(g.referenceRttNs - 57) < 1e-9, `long RTT ${g.referenceRttNs}`);
  assert.equal(g.limit, 28, 'the gradient (of the uncut 60) is clamped at 1');
  g.onSample(0, 40, 13, false); // inflight 13 < 28 / 2: the long RTT moves (48.5), the limit does not
  assert.ok(Math.abs(g.referenceRttNs - 48.5) < 1e-9, `long RTT ${g.referenceRttNs}`);
  assert.equal(g.limit, 28);
});

test('gradient2: queueSize as a function of the limit (whole requests)', () => {
  const seen: number[] = [];
  const g = new Gradient2Limit({
    initialLimit: 100,
    maxLimit: 1000,
    smoothing: 0.5,
    queueSize: (l) => (seen.push(l), Math.floor(Math.sqrt(l))),
  });
  g.onSample(0, 10 * MS, 100, false); // L' = 100 + 10, smoothed: 105
  assert.equal(g.limit, 105);
  g.onSample(0, 10 * MS, 105, false); // L' = 105 + 10, smoothed: 110
  assert.equal(g.limit, 110);
  assert.deepEqual(seen, [100, 105]);
});

test('every algorithm refuses an option it does not have, naming it and the ones it has', () => {
  assert.throws(
    () => new GradientLimit({ rttTolerance: 2 } as never),
    /^RangeError: rttTolerance is not a gradient limit option \(one of initialLimit, /,
  );
  assert.throws(
    () => new Gradient2Limit({ driftMultiplier: 2 } as never),
    /^RangeError: driftMultiplier is not a Gradient2 limit option \(one of initialLimit, minLimit, maxLimit, smoothing, queueSize, rttTolerance, longWindow, warmupWindow\)$/,
  );
  assert.throws(
    () => new VegasLimit({ maxConcurrency: 5 } as never),
    /^RangeError: maxConcurrency is not a Vegas limit option/,
  );
  assert.throws(() => new AimdLimit({ backoff: 0.5 } as never), /^RangeError: backoff is not a AIMD limit option/);
  assert.throws(() => new AimdLimit(7 as never), /AIMD limit options must be an object/);
});

test('windowed: one sample per window (mean RTT, peak in-flight, any loss), closed by size and age; fast samples left out', () => {
  const seen: [number, number, number, boolean][] = [];
  const inner: Limit = {
    limit: 5,
    referenceRttNs: 7,
    onSample: (start, rtt, inflight, drop) => void seen.push([start, rtt, inflight, drop]),
  };
  const w = new WindowedLimit(inner, { minWindowNs: 100 * MS, maxWindowNs: 1000 * MS, windowSamples: 4, minRttNs: MS });
  assert.equal(w.limit, 5);
  assert.equal(w.referenceRttNs, 7);
  // Four samples 10 ms apart: enough samples, but the window is not 100 ms old yet.
  for (let i = 0; i < 4; i++) w.onSample(i * 10 * MS, (10 + i) * MS, 3 + i, false);
  assert.equal(seen.length, 0);
  w.onSample(200 * MS, 0.5 * MS, 50, false); // under minRttNs: left out
  w.onSample(200 * MS, 15 * MS, 2, false); // closes it: 5 samples, 215 ms old
  assert.deepEqual(seen, [[0, ((10 + 11 + 12 + 13 + 15) / 5) * MS, 6, false]]);
  // A window with few samples closes at maxWindowNs; a fast loss still counts.
  w.onSample(300 * MS, 0.1 * MS, 1, true);
  w.onSample(1400 * MS, 20 * MS, 1, false);
  assert.equal(seen.length, 2);
  assert.deepEqual(seen[1], [300 * MS, 10.05 * MS, 1, true]);
  assert.equal(w.windows, 2);
  assert.throws(
    () => new WindowedLimit(inner, { windowSize: 3 } as never),
    /windowSize is not a windowed limit option/,
  );
  assert.throws(() => new WindowedLimit(inner, { minWindowNs: 10, maxWindowNs: 5 }), /options\.maxWindowNs must be/);
});

test('windowed: Vegas run per window is steadier than per sample under jittery RTTs', () => {
  // 16 servers, 10 ms service with +-30 % jitter, 800 requests/s; the same seeded samples for both.
  const run = (limit: Limit): number[] => {
    let seed = 42;
    const rand = (): number => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    const limits: number[] = [];
    let t = 0;
    for (let i = 0; i < 40_000; i++) {
      const inflight = limit.limit;
      const rtt = 10 * MS * Math.max(1, inflight / 16) * (0.7 + 0.6 * rand());
      t += 1.25 * MS;
      limit.onSample(t, rtt, inflight, false);
      if (i >= 20_000) limits.push(limit.limit);
    }
    return limits;
  };
  const cv = (xs: number[]): number => {
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    return Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / xs.length) / mean;
  };
  const perSample = cv(run(new VegasLimit({ initialLimit: 10, seed: 3 })));
  const windowed = cv(
    run(
      new WindowedLimit(new VegasLimit({ initialLimit: 10, seed: 3 }), {
        minWindowNs: 50 * MS,
        maxWindowNs: 200 * MS,
        windowSamples: 20,
      }),
    ),
  );
  assert.ok(windowed < perSample, `stddev/mean per window ${windowed.toFixed(3)} < per sample ${perSample.toFixed(3)}`);
});

test('fixed: never moves', () => {
  const f = new FixedLimit(7);
  feed(f, 0, 100, MS, MS, saturated, true);
  assert.equal(f.limit, 7);
  assert.throws(() => new FixedLimit(0), /limit must be an integer/);
});
