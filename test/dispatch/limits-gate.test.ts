import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { seededRandom } from '../../src/dispatch/limits/limit.js';

const MS = 1e6;
const S = 1e9;

/** The growth gate as its option's documentation recommends turning it on. */
const GATED = { growthTolerance: 0.07, firstProbeAfterNs: 2e9, probeSamples: 16 };

interface Run {
  /** [time ns, estimated limit] after every sample. */
  series: [number, number][];
}

/**
 * Drives `g` as a pressed caller does: every sample is sent with the limit in flight (the probe's while it probes),
 * `limit` requests per round trip, for `seconds`; `rttOf(t, inflight)` is the downstream.
 */
function pressed(g: GradientLimit, seconds: number, rttOf: (tNs: number, inflight: number) => number): Run {
  const series: [number, number][] = [];
  let t = 0;
  while (t < seconds * S) {
    const inflight = g.limit;
    const rtt = rttOf(t, inflight);
    g.onSample(t, rtt, inflight, false);
    t += rtt / inflight;
    series.push([t, g.estimatedLimit]);
  }
  return { series };
}

function meanOver(run: Run, fromNs: number, toNs = Infinity): number {
  let sum = 0;
  let n = 0;
  for (const [t, l] of run.series) {
    if (t >= fromNs && t < toNs) {
      sum += l;
      n++;
    }
  }
  return sum / n;
}

function minOver(run: Run, fromNs: number, toNs = Infinity): number {
  let m = Infinity;
  for (const [t, l] of run.series) if (t >= fromNs && t < toNs && l < m) m = l;
  return m;
}

/** Sixteen workers, 20 ms each; requests beyond them wait their turn. */
const queueing = (_t: number, inflight: number): number => 20 * MS * Math.max(1, inflight / 16);

test('gradient: growth stops near the no-load RTT, so the queue kept at the downstream is a request or so, not sqrt(L)', () => {
  const gated = pressed(new GradientLimit(GATED), 20, queueing);
  const ungated = pressed(new GradientLimit(), 20, queueing);
  const withGate = meanOver(gated, 10 * S);
  const without = meanOver(ungated, 10 * S);
  // Without the gate: L - 16 = sqrt(L), about 20.6 (4.6 requests queued).
  assert.ok(without > 19.5, `without the gate: ${without.toFixed(2)}`);
  // With it: under 1.6 requests queued, and never under the workers (all of them kept busy).
  assert.ok(withGate >= 16 && withGate < 17.6, `with the gate: ${withGate.toFixed(2)}`);
  assert.ok(minOver(gated, 10 * S) >= 15.5, `with the gate, lowest: ${minOver(gated, 10 * S).toFixed(2)}`);
});

test('gradient: with the gate, a downstream that doubled its capacity is followed within a second', () => {
  // 16 workers, then 32 from 10 s.
  const step = (t: number, inflight: number): number => 20 * MS * Math.max(1, inflight / (t < 10 * S ? 16 : 32));
  const gated = pressed(new GradientLimit(GATED), 20, step);
  const ungated = pressed(new GradientLimit(), 20, step);
  const reach = (run: Run): number => run.series.find(([t, l]) => t >= 10 * S && l >= 31)![0] - 10 * S;
  // From a lower start (about 17 against 20.6 without the gate), so later, but within a second.
  const ms = (x: number): string => (x / MS).toFixed(0);
  assert.ok(reach(gated) < 1 * S, `reached 31 after ${ms(reach(gated))} ms (without the gate ${ms(reach(ungated))})`);
  const after = meanOver(gated, 15 * S);
  // The queue the gate allows is a share of the RTT (7 %), so about 2 requests at 32 workers.
  assert.ok(after >= 32 && after < 35.2, `after the step: ${after.toFixed(2)}`);
});

test('gradient: the gate does not hold a jittery downstream under its workers (its jitter is not a queue)', () => {
  // +-20 % uniform jitter on 10 ms: the smallest RTT is 8 ms, the median 10 ms. The gate (an option for steady service
  // times) holds growth whenever an interval's median is over 1.07 times the last probe's; the limit stays at about
  // the workers (15.7-17.1 over seeds 1-10), under the ungated limit's 20-21.
  const random = seededRandom(7);
  const jittery = (_t: number, inflight: number): number =>
    10 * MS * (0.8 + 0.4 * random()) * Math.max(1, inflight / 16);
  const run = pressed(new GradientLimit(GATED), 30, jittery);
  const mean = meanOver(run, 10 * S);
  assert.ok(mean >= 15, `mean limit ${mean.toFixed(2)} over 16 workers`);
  assert.ok(minOver(run, 10 * S) >= 13, `lowest ${minOver(run, 10 * S).toFixed(2)}`);
  const ungated = meanOver(pressed(new GradientLimit(), 30, jittery), 10 * S);
  assert.ok(ungated > mean, `without the gate ${ungated.toFixed(2)}, with it ${mean.toFixed(2)}`);
});

test('gradient: a downstream that got 20 % slower (no queue) has its gate measured again after a small dip', () => {
  // 16 workers; the service time goes from 20 to 24 ms at 10 s (a deploy): the RTT rises with no queue of ours.
  const slower = (t: number, inflight: number): number => (t < 10 * S ? 20 : 24) * MS * Math.max(1, inflight / 16);
  const g = new GradientLimit(GATED);
  const run = pressed(g, 25, slower);
  assert.ok(g.gateProbes + g.gateRelearns >= 1, 'the gate was measured again or moved up');
  const lowest = minOver(run, 10 * S);
  assert.ok(lowest >= 14, `lowest after the change: ${lowest.toFixed(2)} (16 workers)`);
  const after = meanOver(run, 15 * S);
  assert.ok(after >= 15.5, `settled after the change: ${after.toFixed(2)}`);
});

test('gradient: growthTolerance and firstProbeAfterNs are validated with messages naming them', () => {
  assert.throws(() => new GradientLimit({ growthTolerance: -0.1 }), /options\.growthTolerance/);
  assert.throws(() => new GradientLimit({ firstProbeAfterNs: -1 }), /options\.firstProbeAfterNs/);
  assert.doesNotThrow(() => new GradientLimit({ growthTolerance: Infinity, firstProbeAfterNs: 0 }));
});
