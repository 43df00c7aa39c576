import { test } from 'node:test';
import assert from 'node:assert/strict';
import { seededRandom } from '../../src/dispatch/limits/limit.js';
import { EventQueue } from '../../src/sim/engine/event-queue.js';
import { Simulation, type SimTarget } from '../../src/sim/engine/simulation.js';
import { SimRandom, streamSeed } from '../../src/sim/random/random.js';
import { DurationHistogram } from '../../src/sim/stats/histogram.js';
import { RateProfile } from '../../src/sim/traffic/rate-profile.js';
import { renderChart } from '../../src/sim/chart/svg-chart.js';

test('the event queue pops by time, and events due at the same time in the order they were pushed', () => {
  const q = new EventQueue();
  const rand = seededRandom(7);
  const pushed: [number, number][] = [];
  // Few distinct times and many events: most ties; enough events to grow the heap twice.
  for (let i = 0; i < 5000; i++) {
    const t = Math.floor(rand() * 20) * 1000;
    q.push(t, 0, 0, i);
    pushed.push([t, i]);
  }
  const expected = [...pushed].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const got: [number, number][] = [];
  while (q.pop()) got.push([q.popped[0]!, q.popped[1]!]);
  assert.deepEqual(got, expected);
  assert.equal(q.size, 0);
});

test('the simulation runs events in time order, moves the clock only to event times, and stops at the horizon', () => {
  const sim = new Simulation();
  const seen: string[] = [];
  const target: SimTarget = {
    onEvent(kind, arg, nowNs) {
      seen.push(`${kind}:${arg}@${nowNs}`);
      // An event scheduled from inside a handler, due within the window, runs in the same run() call.
      if (kind === 1) sim.after(5, id, 2, arg + 1);
    },
  };
  const id = sim.register(target);
  sim.at(30, id, 0, 0);
  sim.at(10, id, 1, 10);
  sim.at(10, id, 0, 20);
  sim.at(100, id, 0, 30);
  assert.equal(sim.run(50), 4);
  assert.deepEqual(seen, ['1:10@10', '0:20@10', '2:11@15', '0:0@30']);
  assert.equal(sim.nowNs, 50);
  assert.equal(sim.pending, 1);
  assert.throws(() => sim.at(40, id, 0), /event time must be an integer >= now/);
  assert.throws(() => sim.at(60.5, id, 0), /event time must be an integer/);
});

test('SimRandom gives the numbers seededRandom gives for the same seed, and streams of one seed differ', () => {
  for (const seed of [0, 1, 0x5eed, 0xffffffff]) {
    const a = new SimRandom(seed);
    const b = seededRandom(seed);
    for (let i = 0; i < 1000; i++) assert.equal(a.uniform(), b());
  }
  const s1 = new SimRandom(streamSeed(1, 1)).uniform();
  const s2 = new SimRandom(streamSeed(1, 2)).uniform();
  const s3 = new SimRandom(streamSeed(2, 1)).uniform();
  assert.notEqual(s1, s2);
  assert.notEqual(s1, s3);
});

test('the distributions have the means they are asked for', () => {
  const r = new SimRandom(3);
  const n = 200_000;
  const mean = (f: () => number): number => {
    let s = 0;
    for (let i = 0; i < n; i++) s += f();
    return s / n;
  };
  assert.ok(Math.abs(mean(() => r.exponential(40)) / 40 - 1) < 0.01);
  assert.ok(Math.abs(mean(() => r.lognormal(40, 0.3)) / 40 - 1) < 0.01);
  assert.ok(Math.abs(mean(() => r.jitter(40, 0.1)) / 40 - 1) < 0.002);
  assert.ok(Math.abs(mean(() => r.poisson(60)) / 60 - 1) < 0.005);
  assert.ok(Math.abs(mean(() => r.poisson(2000)) / 2000 - 1) < 0.005);
  let lo = Infinity;
  for (let i = 0; i < n; i++) lo = Math.min(lo, r.jitter(40, 0.1));
  assert.ok(lo >= 36, 'uniform jitter has a floor');
});

test('the histogram reports quantiles within half a percent, and weighted samples count as many', () => {
  const h = new DurationHistogram();
  for (let v = 1; v <= 10_000; v++) h.add(v * 1e4);
  assert.ok(Math.abs(h.quantileNs(0.99) / 9.9e7 - 1) < 0.005);
  assert.ok(Math.abs(h.quantileNs(0.5) / 5e7 - 1) < 0.005);
  const w = new DurationHistogram();
  w.add(1e6, 99);
  w.add(5e8, 1);
  assert.equal(w.total, 100);
  assert.ok(Math.abs(w.quantileNs(0.99) / 1e6 - 1) < 0.005);
  assert.equal(w.maxNs, 5e8);
  assert.ok(Number.isNaN(new DurationHistogram().quantileNs(0.5)));
});

test('a rate profile interpolates between its points and integrates exactly over straight segments', () => {
  const p = new RateProfile([
    [10e9, 100],
    [20e9, 300],
  ]);
  assert.equal(p.rateAt(0), 100);
  assert.equal(p.rateAt(15e9), 200);
  assert.equal(p.rateAt(30e9), 300);
  assert.equal(p.peakPerSec, 300);
  // 10 s at 100/s, then a ramp averaging 200/s for 10 s, then 5 s at 300/s.
  assert.ok(Math.abs(p.expectedBetween(0, 25e9) - (1000 + 2000 + 1500)) < 1e-6);
});

test('the chart writer draws steps and lines, escapes text and breaks a line at missing values', () => {
  const svg = renderChart({
    title: 'a < b & "c"',
    x: [0, 1, 2, 3],
    xLabel: 'minutes',
    panels: [
      {
        title: 'panel',
        yLabel: 'requests',
        series: [
          { label: 'limit', values: [1, 2, 2, 3], step: true },
          { label: 'rtt', values: [1, null, 3, 4] },
        ],
      },
    ],
    marks: [{ x: 1.5, label: 'drop' }],
  });
  assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.ok(svg.trimEnd().endsWith('</svg>'));
  assert.ok(svg.includes('a &lt; b &amp; &quot;c&quot;'));
  const paths = [...svg.matchAll(/<path d="([^"]+)"/g)].map((m) => m[1]!);
  assert.equal(paths.length, 2);
  assert.match(paths[0]!, /^M[\d.]+,[\d.]+H[\d.]+V/);
  // The missing value starts a new sub-path.
  assert.equal(paths[1]!.split('M').length - 1, 2);
  assert.ok(svg.includes('>drop</text>'));
});
