import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GradientLimit } from '../../src/dispatch/limits/index.js';
import { seededRandom } from '../../src/dispatch/limits/limit.js';

const MS = 1e6;
const S = 1e9;

/** A downstream: `workers` served at once, a service time of `serviceMs(t)` scaled by +-`jitter`. */
interface Downstream {
  workers: number;
  serviceMs: (tNs: number) => number;
  jitter: number;
  /** Share of answers that come at 0.6 of the service time (a timer that fired early), [0, 1). */
  fastShare?: number;
}

interface Trace {
  /** [time ns, estimated limit, in flight] per round. */
  rounds: [number, number, number][];
  /** Where the run ended, ns: the next run on the same limit starts there. */
  endNs: number;
}

/**
 * A caller that wants `demandOf(t)` requests in flight and sends `min(demand, limit)` of them each round; each takes
 * the service time (with jitter), longer by `inflight / workers` when more are in flight than the downstream has
 * workers (a FIFO queue in front of them). Samples are fed in completion order; a round lasts its median RTT. Runs
 * from `t0Ns` for `seconds`; `serviceMs` and `demandOf` see the absolute time.
 */
function drive(
  g: GradientLimit,
  seconds: number,
  ds: Downstream,
  demandOf: (tNs: number) => number,
  seed: number,
  t0Ns = 0,
): Trace {
  const random = seededRandom(seed);
  const rounds: [number, number, number][] = [];
  const rtts: number[] = [];
  let t = t0Ns;
  while (t < t0Ns + seconds * S) {
    const inflight = Math.max(1, Math.min(demandOf(t), g.limit));
    const queueFactor = Math.max(1, inflight / ds.workers);
    rtts.length = 0;
    for (let i = 0; i < inflight; i++) {
      const jitter = 1 - ds.jitter + 2 * ds.jitter * random();
      const early = ds.fastShare !== undefined && random() < ds.fastShare ? 0.6 : 1;
      rtts.push(ds.serviceMs(t) * MS * jitter * queueFactor * early);
    }
    rtts.sort((a, b) => a - b);
    for (const rtt of rtts) g.onSample(t, rtt, inflight, false);
    rounds.push([t, g.estimatedLimit, inflight]);
    t += rtts[rtts.length >> 1]!;
  }
  return { rounds, endNs: t };
}

function lowestAfter(trace: Trace, fromNs: number): number {
  let m = Infinity;
  for (const [t, l] of trace.rounds) if (t >= fromNs && l < m) m = l;
  return m;
}

function meanAfter(trace: Trace, fromNs: number): number {
  let sum = 0;
  let n = 0;
  for (const [t, l] of trace.rounds) {
    if (t >= fromNs) {
      sum += l;
      n++;
    }
  }
  return sum / n;
}

/** Sixteen workers at 8 ms +-20 %, as the demo's service at the middle of its drift. */
const jittery: Downstream = { workers: 16, serviceMs: () => 8, jitter: 0.2 };

/** A demand that wanders between 9 and 14 in flight: above half a limit of 20, under 0.8 of it. */
const wandering =
  (seed: number) =>
  (t: number): number =>
    9 + Math.floor(6 * (0.5 + 0.5 * Math.sin(t / (0.7 * S) + seed)));

test('gradient: a jittery downstream pressed below the growth threshold keeps its limit (the spread is no queue)', () => {
  for (const seed of [1, 2, 3]) {
    const now = drive(new GradientLimit(), 60, jittery, wandering(seed), seed);
    // The plain gradient in that band (ratio 1) shrinks on the spread every pressed interval, down to the demand.
    const plain = drive(
      new GradientLimit({ partialLoadRttRatio: 1, lightReferenceMaxAgeNs: 0 }),
      60,
      jittery,
      wandering(seed),
      seed,
    );
    const kept = lowestAfter(now, 5 * S);
    const before = meanAfter(plain, 30 * S);
    assert.ok(kept >= 17, `seed ${seed}: lowest limit ${kept.toFixed(1)} with 16 workers and at most 14 wanted`);
    assert.ok(
      before < 16,
      `seed ${seed}: the plain gradient's mean after 30 s ${before.toFixed(1)} (the check's point)`,
    );
  }
});

/** Bursts: 0.4 s at 11 in flight (0.55 of a limit of 20), 0.4 s at 3, and again. */
const bursts = (t: number): number => (Math.floor(t / (0.4 * S)) % 2 === 0 ? 11 : 3);

test('gradient: in the band and on the fast path the reference is the last light interval, so a rare early answer does not shrink the limit', () => {
  // Sixteen workers at 7 ms +-20 %, one answer in 200 at 0.6 of it: RTT-min about 3.4 ms, medians about 7 ms. With
  // the fast path off (the band's rule alone) and on (its base is the same reference: against RTT-min most answers
  // are twice it); the first 0.4 s (no light interval yet) is judged by RTT-min.
  const ds: Downstream = { workers: 16, serviceMs: () => 7, jitter: 0.2, fastShare: 0.005 };
  for (const options of [{ fastDecreaseRttRatio: Infinity }, {}]) {
    for (const seed of [1, 2, 3]) {
      const g = new GradientLimit(options);
      const now = drive(g, 30, ds, bursts, seed);
      const onMin = drive(new GradientLimit({ ...options, lightReferenceMaxAgeNs: 0 }), 30, ds, bursts, seed);
      const what = `seed ${seed}, ${JSON.stringify(options)}`;
      assert.ok(g.referenceRttNs < 4 * MS, `${what}: RTT-min ${(g.referenceRttNs / MS).toFixed(2)} ms`);
      const kept = lowestAfter(now, 2 * S);
      const before = meanAfter(onMin, 15 * S);
      assert.ok(kept >= 15, `${what}: lowest limit ${kept.toFixed(1)} with 16 workers and at most 11 wanted`);
      assert.ok(g.estimatedLimit >= kept, `${what}: ${kept.toFixed(1)} -> ${g.estimatedLimit.toFixed(1)}`);
      assert.equal(g.fastDecreases, 0, what);
      // Against RTT-min alone (the rule before) the limit is cut on the spread until the bursts press it: the check's
      // point.
      assert.ok(before < 8, `${what}: against RTT-min, mean after 15 s ${before.toFixed(1)}`);
    }
  }
});

test('gradient: after light intervals, a sharp capacity drop under pressure still takes the fast path', () => {
  // The same downstream for 3 s of bursts, then down to 3 workers with 20 wanted: about 6.7x the service time, well
  // over twice the fast path's base (at most 1.5 RTT-min).
  const g = new GradientLimit();
  const ds: Downstream = { workers: 16, serviceMs: () => 7, jitter: 0.2, fastShare: 0.005 };
  const first = drive(g, 3, ds, bursts, 1);
  assert.equal(g.fastDecreases, 0, 'none before the drop');
  const before = g.estimatedLimit;
  drive(g, 0.3, { ...ds, workers: 3 }, () => 20, 2, first.endNs);
  assert.ok(g.fastDecreases >= 1, `fast decreases ${g.fastDecreases}`);
  assert.ok(g.estimatedLimit <= before / 2, `${before.toFixed(1)} -> ${g.estimatedLimit.toFixed(1)}`);
});

test('gradient: a light median older than lightReferenceMaxAgeNs is not the reference', () => {
  // The early-answer downstream, 0.4 s light, then 11 in flight (the band) for good: the light median stands for 2 s,
  // then the band is judged against RTT-min (about 3.4 ms against medians of 7 ms) and the limit falls.
  const ds: Downstream = { workers: 16, serviceMs: () => 7, jitter: 0.2, fastShare: 0.005 };
  const demand = (t: number): number => (t < 0.4 * S ? 3 : 11);
  const g = new GradientLimit({
    fastDecreaseRttRatio: Infinity,
    reprobeRttRatio: Infinity,
    lightReferenceMaxAgeNs: 2e9,
  });
  const early = drive(g, 2.2, ds, demand, 1);
  const atTwo = g.estimatedLimit;
  drive(g, 3, ds, demand, 1, early.endNs);
  assert.ok(atTwo >= 19.9, `within the age: ${atTwo.toFixed(1)}`);
  assert.ok(g.estimatedLimit < 15, `after it: ${atTwo.toFixed(1)} -> ${g.estimatedLimit.toFixed(1)}`);
});

test('gradient: a queue that more in flight in the band builds over a light load still lowers the limit', () => {
  // Four workers: 11 in flight queue (2.75x the service time), 3 do not; the fast path and the early probe are off,
  // to show the band's rule alone.
  const only = { fastDecreaseRttRatio: Infinity, reprobeRttRatio: Infinity };
  const ds: Downstream = { workers: 4, serviceMs: () => 7, jitter: 0.2 };
  const g = new GradientLimit(only);
  drive(g, 10, ds, bursts, 1);
  assert.ok(g.estimatedLimit < 10, `limit ${g.estimatedLimit.toFixed(1)}`);
});

test("gradient: a queue the light load has too is not taken for the band's reference", () => {
  // Four workers at 7 ms +-20 %: 2 in flight for 1 s (RTT-min), 9 for 1 s (under half a limit of 20, yet queued to
  // 2.25x), then 11 and 9 by turns (2.75x in the band). The light median carries the queue; trusted only up to 1.5
  // RTT-mins, it cannot hold the band at 2.75x.
  const ds: Downstream = { workers: 4, serviceMs: () => 7, jitter: 0.2 };
  const demand = (t: number): number => (t < 1 * S ? 2 : t < 2 * S ? 9 : Math.floor(t / (0.4 * S)) % 2 === 0 ? 11 : 9);
  const noProbe = new GradientLimit({ fastDecreaseRttRatio: Infinity, reprobeRttRatio: Infinity });
  drive(noProbe, 20, ds, demand, 1);
  assert.ok(noProbe.estimatedLimit < 8, `early probes off: limit ${noProbe.estimatedLimit.toFixed(1)}`);
  // With early probes too: the band's cuts bring the limit down first, so the probes' reduced load drains the queue
  // and RTT-min stays near the service time (uncapped, the light median held the limit at 20 and a probe at half of it
  // took the queued 12.6 ms for RTT-min).
  const probing = new GradientLimit({ fastDecreaseRttRatio: Infinity });
  drive(probing, 20, ds, demand, 1);
  assert.ok(probing.earlyProbes >= 1, `probes ${probing.earlyProbes}`);
  assert.ok(probing.estimatedLimit < 8, `limit ${probing.estimatedLimit.toFixed(1)}`);
  assert.ok(probing.referenceRttNs < 7 * MS, `RTT-min ${(probing.referenceRttNs / MS).toFixed(2)} ms`);
});

test('gradient: a queue that doubles the RTT still lowers the limit while pressed below the growth threshold', () => {
  // Twelve wanted against a limit of 20 (0.6 of it); the fast path and the early probe are off, to show the band's
  // rule alone. Six workers make every request wait a second service time: twice RTT-min, over the band's 1.5x.
  const only = { fastDecreaseRttRatio: Infinity, reprobeRttRatio: Infinity };
  const run = (options: { partialLoadRttRatio?: number }): [number, number] => {
    const g = new GradientLimit({ ...only, ...options });
    const steady = drive(g, 5, { workers: 16, serviceMs: () => 8, jitter: 0 }, () => 12, 1);
    const before = g.estimatedLimit;
    drive(g, 3, { workers: 6, serviceMs: () => 8, jitter: 0 }, () => 12, 1, steady.endNs);
    return [before, g.estimatedLimit];
  };
  const [before, after] = run({});
  assert.ok(before >= 19.9, `no queue, no change: ${before.toFixed(1)}`);
  // Cut until in flight presses the limit (12 >= 0.8 L), then the full gradient takes it to the six workers.
  assert.ok(after < 10, `with the band's rule: ${before.toFixed(1)} -> ${after.toFixed(1)}`);
  // A band that never cuts (ratio Infinity) would keep the queue standing: the check's point.
  const [, never] = run({ partialLoadRttRatio: Infinity });
  assert.ok(never >= 19.9, `without: ${never.toFixed(1)}`);
});

test('gradient: a downstream that got slower under a light load has its reference measured again', () => {
  const g = new GradientLimit({ initialLimit: 40 });
  const ds: Downstream = { workers: 64, serviceMs: (t) => (t < 5 * S ? 5 : 15), jitter: 0.1 };
  // Pressed for 2 s at 5 ms sets the reference; then a light load (8 of 40) while the service slows to 15 ms.
  const first = drive(g, 2, ds, () => 1000, 1);
  assert.ok(g.referenceRttNs < 5 * MS, `reference ${(g.referenceRttNs / MS).toFixed(2)} ms`);
  const light = drive(g, 10, ds, () => 8, 2, first.endNs);
  assert.ok(g.earlyProbes >= 1 && g.baselineMoves >= 1, `probes ${g.earlyProbes}, moves ${g.baselineMoves}`);
  assert.ok(
    g.referenceRttNs >= 13 * MS && g.referenceRttNs <= 15 * MS,
    `reference ${(g.referenceRttNs / MS).toFixed(2)} ms`,
  );
  // The probe held what was in flight at half: 4 (the floor) of the 8 wanted, not half of the limit of 40.
  const probeInflight = light.rounds.filter(([, , n]) => n < 8).map(([, , n]) => n);
  assert.ok(probeInflight.length > 0 && Math.max(...probeInflight) <= 4, `probe in flight: ${probeInflight}`);
  // A press against the new reference is read as what it is: no queue, growth.
  const limitBefore = g.estimatedLimit;
  drive(g, 2, ds, () => 1000, 3, light.endNs);
  assert.ok(g.estimatedLimit > limitBefore, `${limitBefore.toFixed(1)} -> ${g.estimatedLimit.toFixed(1)}`);
});

test('gradient: a queue at a light load is drained by the probe and not taken for the reference', () => {
  // The limit of 100 stayed high while the downstream lost workers: 40 in flight (under half) on 16 workers queue.
  const g = new GradientLimit({ initialLimit: 100, maxLimit: 100 });
  const first = drive(g, 2, { workers: 128, serviceMs: () => 10, jitter: 0.05 }, () => 1000, 1);
  const reference = g.referenceRttNs;
  drive(g, 6, { workers: 16, serviceMs: () => 10, jitter: 0.05 }, () => 40, 2, first.endNs);
  assert.ok(g.earlyProbes >= 1, `probes ${g.earlyProbes}`);
  assert.equal(g.baselineMoves, 0, 'the probe at 20 in flight drained the queue');
  assert.ok(g.referenceRttNs <= reference * 1.05, `reference ${(g.referenceRttNs / MS).toFixed(2)} ms`);
});

test('gradient: partialLoadRttRatio and lightReferenceMaxAgeNs are validated with a message naming it', () => {
  assert.throws(() => new GradientLimit({ partialLoadRttRatio: 0.9 }), /options\.partialLoadRttRatio/);
  assert.throws(() => new GradientLimit({ partialLoadRttRatio: Number.NaN }), /options\.partialLoadRttRatio/);
  assert.doesNotThrow(() => new GradientLimit({ partialLoadRttRatio: 1 }));
  assert.throws(() => new GradientLimit({ lightReferenceMaxAgeNs: -1 }), /options\.lightReferenceMaxAgeNs/);
  assert.doesNotThrow(() => new GradientLimit({ lightReferenceMaxAgeNs: 0 }));
});
