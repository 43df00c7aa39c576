import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LoopStallMeter, STALL_TOTAL_NS } from '../../src/dispatch/loop-stall.js';
import { Limiter } from '../../src/dispatch/limiter.js';
import { GradientLimit } from '../../src/dispatch/limits/index.js';

const MS = 1e6;

test('loop stall meter: lateness beyond the period and the grace adds up; a stall in progress counts', () => {
  let now = 0;
  const m = new LoopStallMeter(() => now);
  for (let t = 1; t <= 10; t++) {
    now = t * MS;
    m.tick();
  }
  assert.equal(m.totalNs(now), 0, 'ticks on time are no stall');
  now = 11.9 * MS; // 1.9 ms after the last tick: within period + grace
  m.tick();
  assert.equal(m.totalNs(now), 0);
  now = 41.9 * MS; // 30 ms late: 28 ms beyond the 2 ms allowance
  assert.equal(Math.round(m.totalNs(now) / 1e3), 28_000, 'the stall in progress is counted before the tick runs');
  m.tick();
  assert.equal(Math.round(m.cells[STALL_TOTAL_NS]! / 1e3), 28_000);
  assert.equal(m.lateTicks, 1);
  m.stop();
  now = 1000 * MS;
  assert.equal(Math.round(m.totalNs(now) / 1e3), 28_000, 'a stopped meter counts nothing more');
  assert.throws(() => new LoopStallMeter(() => 0, { tickMs: 0 }), /loopStall\.tickMs must be a number in \[1, 100\]/);
});

/**
 * A caller's event loop and a downstream, in 0.25 ms steps. The downstream answers each request `serviceMs(t)` after
 * it was sent; the loop handles what arrived only while it is available (`available(t)`), running its due timer tick
 * first (timers come before I/O in a loop turn), then the answers, then, once per ms of its own time, sends
 * `sendPerMs` requests (or up to the limit).
 */
function run(
  limiter: Limiter,
  meter: LoopStallMeter,
  clock: { now: number },
  endMs: number,
  available: (tMs: number) => boolean,
  serviceMs: (tMs: number) => number,
  sendPerMs: number,
): void {
  const pending: { permit: number; doneMs: number }[] = [];
  let lastTickMs = 0;
  let lastSendMs = -1;
  for (let step = 0; step <= endMs * 4; step++) {
    const t = step / 4;
    clock.now = t * MS;
    if (!available(t)) continue;
    if (t - lastTickMs >= 1) {
      meter.tick();
      lastTickMs = t;
    }
    while (pending.length > 0 && pending[0]!.doneMs <= t) limiter.releaseSuccess(pending.shift()!.permit, t * MS);
    if (t - lastSendMs >= 1) {
      // The caller always has work: `sendPerMs` a ms (Infinity: up to the limit), so the downstream is pressed.
      for (let k = 0; k < sendPerMs; k++) {
        const permit = limiter.tryAcquire(t * MS);
        if (permit < 0) break;
        pending.push({ permit, doneMs: t + serviceMs(t) });
      }
      lastSendMs = t;
    }
  }
}

/** Fast decrease armed (the default ratio of 2); the smoothed rule is kept out of the way (a 10 s interval). */
function fastOnlyLimit(): GradientLimit {
  return new GradientLimit({
    initialLimit: 40,
    maxLimit: 400,
    updateIntervalNs: 10_000 * MS,
    updateIntervalRtts: 0,
  });
}

/** The loop runs 2 ms out of every 22 from 60 ms on: a thread starved of a core, its answers handled late. */
const starved = (t: number): boolean => t < 60 || (t - 60) % 22 < 2;

test("limiter: the caller's own stalls are taken out of the samples, so they do not cut the limit as a queue would", () => {
  const clock = { now: 0 };
  const meter = new LoopStallMeter(() => clock.now);
  const corrected = new Limiter(fastOnlyLimit(), 400, meter.cells);
  run(corrected, meter, clock, 400, starved, () => 10, Infinity);
  const g = corrected.algorithm as GradientLimit;
  assert.equal(g.fastDecreases, 0, 'no fast cut for stalls of the caller');
  assert.equal(g.estimatedLimit, 40);
  assert.ok(corrected.stallCorrectedSamples > 10, `stalled samples corrected: ${corrected.stallCorrectedSamples}`);
  assert.ok(corrected.localStallNs > 100 * MS, `stall taken out: ${(corrected.localStallNs / MS).toFixed(1)} ms`);
  assert.ok(g.referenceRttNs >= 10 * MS, 'the reference is never pulled below the downstream baseline');
  // The measured round trips are kept as measured for the metrics.
  assert.ok(corrected.rttSumNs / corrected.rttCount > 12 * MS);

  // The same loop and downstream without the correction: the stalls read as a queue and cut the limit.
  const clock2 = { now: 0 };
  const meter2 = new LoopStallMeter(() => clock2.now);
  const raw = new Limiter(fastOnlyLimit(), 400);
  run(raw, meter2, clock2, 400, starved, () => 10, Infinity);
  assert.ok((raw.algorithm as GradientLimit).fastDecreases >= 1, 'uncorrected, the stalls cut the limit');
  assert.ok((raw.algorithm as GradientLimit).estimatedLimit <= 20);
});

test('limiter: with the correction on, a queue at the downstream still cuts the limit at once', () => {
  const clock = { now: 0 };
  const meter = new LoopStallMeter(() => clock.now);
  const limiter = new Limiter(fastOnlyLimit(), 400, meter.cells);
  // The loop is always there; from 60 ms the downstream answers in 30 ms instead of 10 (a queue formed).
  run(
    limiter,
    meter,
    clock,
    200,
    () => true,
    (t) => (t < 60 ? 10 : 30),
    4,
  );
  const g = limiter.algorithm as GradientLimit;
  assert.equal(g.fastDecreases, 1);
  assert.equal(g.estimatedLimit, 20);
  assert.equal(limiter.stallCorrectedSamples, 0, 'nothing to correct when the loop never stalled');
});
