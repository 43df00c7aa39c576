import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CircuitBreaker } from '../../src/dispatch/breaker.js';
import { Limiter } from '../../src/dispatch/limiter.js';
import { GradientLimit, VegasLimit, WindowedLimit } from '../../src/dispatch/limits/index.js';
import { LaneAdmission } from '../../src/ingest/admission.js';
import { SpscRing } from '../../src/shm/ring.js';
import { Lane, ShedReason } from '../../src/shm/layout.js';
import { simulateBurst, simulateLimiters, type LimitersResult } from '../../src/index.js';
import { resolveLimitersOptions } from '../../src/sim/scenarios/limiters/limiters-options.js';
import { buildLimiterRig } from '../../src/sim/scenarios/limiters/limiters-scenario.js';
import { LaneAdmissionRings } from '../../src/sim/ingest/telemetry-policies.js';
import { DEFAULT_ADMISSION_OPTIONS } from '../../src/ingest/admission-options.js';

test('one seed gives byte-identical results, another seed different ones (both scenarios)', () => {
  const limiters = (seed: number): string => JSON.stringify(simulateLimiters({ seed, minutes: 0.5 }));
  const a = limiters(1);
  assert.equal(limiters(1), a);
  assert.notEqual(limiters(2), a);
  const burst = (seed: number): string =>
    JSON.stringify(simulateBurst({ seed, minutes: 0.5, baselinePerSec: 20_000, drainPerSec: 40_000 }));
  const b = burst(1);
  assert.equal(burst(1), b);
  assert.notEqual(burst(2), b);
});

test('the simulator drives the production Limiter, limits, CircuitBreaker, LaneAdmission and rings', () => {
  const o = resolveLimitersOptions({ minutes: 0.2 });
  const gradient = o.rows.find((r) => r.name === 'gradient')!;
  const rig = buildLimiterRig(o, gradient);
  assert.ok(rig.limiter instanceof Limiter);
  assert.ok(rig.breaker instanceof CircuitBreaker);
  assert.ok(rig.limit instanceof GradientLimit);
  assert.equal(rig.limiter.algorithm, rig.limit);
  // Product defaults: what a downstream gets with no limit option (safety cap 256).
  assert.equal(rig.limiter.safetyCap, 256);
  const vegas = buildLimiterRig(
    o,
    o.rows.find((r) => r.name === 'vegas, windowed')!,
  );
  assert.ok(vegas.limit instanceof WindowedLimit);
  assert.ok((vegas.limit as WindowedLimit).inner instanceof VegasLimit);
  // The rig runs: the production limiter hands out permits and takes samples on the virtual clock.
  rig.sim.run(12e9);
  assert.ok(rig.limiter.succeeded > 1000, `succeeded ${rig.limiter.succeeded}`);
  assert.equal(rig.limiter.succeeded, rig.client.delivered);

  const rings = new LaneAdmissionRings(2, 1024, DEFAULT_ADMISSION_OPTIONS, 0);
  for (const a of rings.admissions) assert.ok(a instanceof LaneAdmission);
  for (const r of rings.rings) assert.ok(r instanceof SpscRing);
  assert.equal(rings.rings[0]!.reservedSlots, Math.ceil(1024 * DEFAULT_ADMISSION_OPTIONS.reservedFraction));
});

function row(r: LimitersResult, name: string): LimitersResult['rows'][number] {
  const found = r.rows.find((x) => x.name === name);
  assert.ok(found, name);
  return found;
}

test('limiters, three simulated minutes: the gradient uses >= 90 % of capacity, overloads only at the drop; fixed-high overloads', () => {
  const r = simulateLimiters({
    minutes: 3,
    limiters: [
      { name: 'fixed-high', limit: 32 },
      { name: 'gradient', limit: 'gradient' },
    ],
  });
  const g = row(r, 'gradient');
  assert.ok(g.utilisation >= 0.9, `gradient utilisation ${g.utilisation}`);
  for (const u of g.utilisationPerPhase) assert.ok(u >= 0.9, `per phase ${g.utilisationPerPhase.join(', ')}`);
  // The 2x -> 0.6x drop (32 -> 10 workers at 2 minutes): a latency limit learns of it only from the queue it finds,
  // so the window after the drop may be overloaded; nowhere else.
  const dropS = 120;
  for (const [from, to] of g.overloadEpisodesS) {
    assert.ok(from >= dropS && to <= dropS + 2, `gradient overloaded ${from}-${to} s`);
  }
  assert.ok(g.overloadEpisodes <= 1);
  assert.ok(g.p99Ms < 100, `gradient P99 ${g.p99Ms} ms`);
  const f = row(r, 'fixed-high');
  assert.ok(f.overloadEpisodes >= 5, `fixed-high episodes ${f.overloadEpisodes}`);
  // At 0.6x the fixed limit of 32 queues 22 requests behind 10 workers for the whole phase.
  assert.ok(f.overloadSeconds >= 55, `fixed-high overloaded ${f.overloadSeconds} s`);
  assert.ok(f.p99Ms > 2 * g.p99Ms);
  // Every trigger is accounted for: delivered, deferred, or in flight at the end.
  for (const x of r.rows) assert.equal(x.offered, x.delivered + x.deferred + x.inflightAtEnd);
});

test('limiters, capacity that only grows: the gradient has no overload episode at all', () => {
  const r = simulateLimiters({
    minutes: 2,
    capacityFactors: [1, 2],
    limiters: [{ name: 'gradient', limit: 'gradient' }],
  });
  const g = row(r, 'gradient');
  assert.equal(g.overloadEpisodes, 0);
  assert.ok(g.utilisation >= 0.9, `gradient utilisation ${g.utilisation}`);
});

test('burst: lane admission loses no COMPLIANCE ping and sheds <= 1.05x the minimum; tail shedding loses some; the unbounded queue grows', () => {
  // Rings of 2048 slots (the router's default is 16384) keep the run short: the minimum is then mostly the burst's
  // excess rather than the buffer, as over an hour with the default rings.
  const r = simulateBurst({ minutes: 4, ringCapacitySlots: 2048 });
  const lanes = r.rows.find((x) => x.policy === 'lane admission')!;
  const naive = r.rows.find((x) => x.policy === 'naive tail shedding')!;
  const unbounded = r.rows.find((x) => x.policy === 'unbounded queue')!;
  assert.ok(r.minimumShed > 100_000, `minimum ${r.minimumShed}`);
  assert.equal(lanes.complianceLost, 0);
  assert.ok(lanes.shedOverMinimum! <= 1.05, `lane admission sheds ${lanes.shedOverMinimum}x the minimum`);
  assert.ok(lanes.shedOverMinimum! >= 1, 'no policy sheds less than the minimum');
  assert.ok(naive.shedOverMinimum! >= 1);
  assert.ok(naive.complianceLost > 0, 'tail shedding drops COMPLIANCE pings like any other');
  assert.equal(unbounded.shedTotal, 0);
  assert.ok(unbounded.memoryGrowthMiBPerSec > 0.5, `growth ${unbounded.memoryGrowthMiBPerSec} MiB/s`);
  assert.ok(unbounded.peakDepth > r.bufferSlots * 10);
  assert.ok(unbounded.heldP99Ms.idle! > naive.heldP99Ms.idle!);
  // The production counters agree with the simulator's: shed by reason adds up to the shed per lane.
  const byReason = lanes.shedByReason!;
  for (const lane of ['idle', 'transition', 'compliance'] as const) {
    const sum = Object.values(byReason).reduce((s, perLane) => s + perLane[lane], 0);
    assert.equal(sum, lanes.shed[lane]);
  }
  assert.ok(byReason['queue_delay']!.idle > 0);
  assert.equal(Lane.IDLE, 0);
  assert.equal(ShedReason.QUEUE_DELAY, 3);
});

test('options are checked, and each message names the option', () => {
  assert.throws(() => simulateLimiters({ minutes: 0 }), /options\.minutes must be a number in \[0\.05, 1440\], got 0/);
  assert.throws(
    () => simulateLimiters({ minutes: 1, serviceDistribution: 'gamma' as never }),
    /options\.serviceDistribution must be one of/,
  );
  assert.throws(() => simulateLimiters({ foo: 1 } as never), /options\.foo is not an option/);
  assert.throws(
    () => simulateLimiters({ limiters: [{ name: 'g', limit: 'gradient', gradient: { smoothing: 2 } }] }),
    /options\.limiters\[0\]\.gradient\.smoothing must be a number in/,
  );
  assert.throws(
    () => simulateLimiters({ limiters: [{ name: 'g', limit: 'gradient', aimd: {} }] }),
    /options\.limiters\[0\]\.aimd applies only to limit "aimd"/,
  );
  assert.throws(
    () => simulateLimiters({ limiters: [{ name: 'v', limit: 'vegas', window: { windowSamples: 0 } }] }),
    /options\.limiters\[0\]\.window\.windowSamples must be/,
  );
  assert.throws(() => simulateLimiters({ breaker: { windowSize: 0 } }), /options\.breaker\.windowSize must be/);
  assert.throws(() => simulateBurst({ ringCapacitySlots: 1000 }), /options\.ringCapacitySlots must be a power of two/);
  assert.throws(
    () => simulateBurst({ admission: { watermarkFraction: 2 } }),
    /options\.admission\.watermarkFraction must be a number in \[0, 1\]/,
  );
  assert.throws(() => simulateBurst({ idleShare: 0.99 }), /options\.idleShare must be a number in \[0, 0\.98\]/);
});
