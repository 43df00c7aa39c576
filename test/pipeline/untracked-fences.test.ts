import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRouter, type Router } from '../../src/index.js';
import { drainOutcome, formatSummary } from '../../src/router/status.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, square, T0, waitFor } from './support.js';

const NESTED = {
  type: 'FeatureCollection',
  features: [square('a', 0, 0, 300), square('b', 0, 0, 200), square('c', 0, 0, 100)],
};
const WALK = [-400, -250, -150, 0, 150, 250, 400];

/** A router over NESTED in `stateDir`, with one callback downstream collecting into `got`, its log into `log`. */
function nestedRouter(
  stateDir: string,
  maxFencesPerDevice: number | undefined,
  got: Trigger[],
  log: string[],
): Promise<Router> {
  return createRouter({
    fences: NESTED,
    listenHost: null,
    adminHost: null,
    poolSize: 1,
    maxDevices: 100,
    ...(maxFencesPerDevice === undefined ? {} : { maxFencesPerDevice }),
    stateDir,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: (line) => void log.push(line),
  });
}

async function run(
  maxFencesPerDevice?: number,
): Promise<{ got: Trigger[]; log: string[]; metrics: string; lines: string[]; outcome: string }> {
  const got: Trigger[] = [];
  const log: string[] = [];
  const router = await nestedRouter(mkdtempSync(join(tmpdir(), 'gr-untracked-')), maxFencesPerDevice, got, log);
  WALK.forEach((x, i) => {
    const [lat, lon] = at(x, 0);
    router.push({ id: 'car', lat, lon, ts: T0 + 1000 * i });
  });
  await waitFor(() => router.stats().processed === WALK.length, 10_000, 'every ping processed');
  // The untracked report runs on the progress timer.
  await sleep(400);
  const metrics = await router.metricsText();
  const summary = await router.close();
  // An untracked fence takes no seq: what arrives is in order, without a gap, as valid stays.
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  return { got, log, metrics, lines: formatSummary(summary, 0), outcome: drainOutcome(summary) };
}

test('nested squares through a real router: with the default options every fence is tracked, exactly', async () => {
  const r = await run();
  assert.deepEqual(
    r.got.map((t) => `${t.type} ${t.fenceId}`),
    ['ENTER a', 'ENTER b', 'ENTER c', 'EXIT c', 'EXIT b', 'EXIT a'],
  );
  assert.equal(r.outcome, 'delivered');
  assert.ok(!r.log.some((l) => l.includes('could not track')));
});

test('a bound of 2: no trigger about the third fence, and it is named in metrics, the log and the summary', async () => {
  const r = await run(2);
  assert.deepEqual(
    r.got.map((t) => `${t.type} ${t.fenceId}`),
    ['ENTER a', 'ENTER b', 'EXIT b', 'EXIT a'],
  );
  assert.match(r.metrics, /geofence_fence_untracked_pings\{fence_id="c"\} 1/);
  assert.match(r.metrics, /geofence_fence_entry_overflows_total 1/);
  const line = r.log.find((l) => l.includes('could not track'));
  assert.ok(line !== undefined, r.log.join('\n'));
  assert.match(
    line,
    /1 pings found a device inside a fence it could not track .*maxFencesPerDevice 2.*Most affected fences: c \(1\)/,
  );
  assert.ok(
    r.lines.some((l) =>
      /tracking\s+fence_overflows=1 candidate_overflows=0 implausible_segments=0 cross_over_budget=0 untracked_fences\(c=1\)/.test(
        l,
      ),
    ),
    r.lines.join('\n'),
  );
  assert.notEqual(r.outcome, 'delivered', 'an untracked stay is loss: not "drained cleanly"');
});

/** One run over NESTED in `stateDir`: pushes device car's pings (x metres east, at T0 + ms), closes cleanly. */
async function runIn(
  stateDir: string,
  maxFencesPerDevice: number | undefined,
  pings: readonly [number, number][],
): Promise<{ got: Trigger[]; log: string[]; outcome: string; lines: string[] }> {
  const got: Trigger[] = [];
  const log: string[] = [];
  const router = await nestedRouter(stateDir, maxFencesPerDevice, got, log);
  const before = router.stats().processed;
  for (const [x, ms] of pings) {
    const [lat, lon] = at(x, 0);
    router.push({ id: 'car', lat, lon, ts: T0 + ms });
  }
  await waitFor(() => router.stats().processed === before + pings.length, 10_000, 'every ping processed');
  const summary = await router.close();
  return { got, log, outcome: drainOutcome(summary), lines: formatSummary(summary, 0) };
}

const INTO_C: [number, number][] = [
  [-400, 0],
  [-250, 1000],
  [-150, 2000],
  [0, 3000],
];

test('a device inside an untracked fence at a stop: after the restart, leaving it says nothing about it (no CROSS)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-untracked-restart-'));
  const first = await runIn(dir, 2, INTO_C);
  assert.deepEqual(
    first.got.map((t) => `${t.type} ${t.fenceId}`),
    ['ENTER a', 'ENTER b'],
  );
  // 400 m in 7 s: a plausible move, out of all three.
  const second = await runIn(dir, 2, [[400, 10_000]]);
  assert.deepEqual(second.got.map((t) => `${t.type} ${t.fenceId}`).sort(), ['EXIT a', 'EXIT b']);
  const all = [...first.got, ...second.got];
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true }).problems, []);
});

test('stays a restart cannot hold (a lower maxFencesPerDevice) end with an EXIT, and the fence stays untracked', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-untracked-lower-'));
  const first = await runIn(dir, undefined, INTO_C);
  assert.deepEqual(
    first.got.map((t) => `${t.type} ${t.fenceId}`),
    ['ENTER a', 'ENTER b', 'ENTER c'],
  );
  // Restarted with room for two: c's stay ends at the restore, counted as a fence overflow (loss: not "drained
  // cleanly"); the device, still inside c, takes it up no more, and leaving it says nothing more about it.
  const second = await runIn(dir, 2, [
    [10, 5000],
    [400, 12_000],
  ]);
  assert.deepEqual(
    second.got.map((t) => `${t.type} ${t.fenceId}`),
    ['EXIT c', 'EXIT a', 'EXIT b'],
  );
  assert.ok(
    second.log.some((l) => l.includes('1 stays could not be restored')),
    second.log.join('\n'),
  );
  assert.notEqual(second.outcome, 'delivered');
  assert.ok(
    second.lines.some((l) => /tracking\s+fence_overflows=2 .*untracked_fences\(c=2\)/.test(l)),
    second.lines.join('\n'),
  );
  // Restarted again with room for two, the device leaving at once: the restore's overflow alone is counted.
  const dir2 = mkdtempSync(join(tmpdir(), 'gr-untracked-lower2-'));
  await runIn(dir2, undefined, INTO_C);
  const third = await runIn(dir2, 2, [[400, 12_000]]);
  assert.deepEqual(
    third.got.map((t) => `${t.type} ${t.fenceId}`),
    ['EXIT c', 'EXIT a', 'EXIT b'],
  );
  assert.notEqual(third.outcome, 'delivered');
  assert.ok(
    third.lines.some((l) => /tracking\s+fence_overflows=1 .*untracked_fences\(c=1\)/.test(l)),
    third.lines.join('\n'),
  );
  const all = [...first.got, ...second.got];
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true }).problems, []);
});

test('a device with an untracked fence: a fence of its whose tags change still begins a new stay at its next ping', async () => {
  const got: Trigger[] = [];
  const log: string[] = [];
  const router = await nestedRouter(mkdtempSync(join(tmpdir(), 'gr-untracked-retag-')), 2, got, log);
  try {
    INTO_C.forEach(([x, ms]) => {
      const [lat, lon] = at(x, 0);
      router.push({ id: 'car', lat, lon, ts: T0 + ms });
    });
    await waitFor(() => got.length === 2, 10_000, 'ENTER a, ENTER b (c untracked)');
    const r = await router.upsertFence(square('a', 0, 0, 300, { tags: ['outer'] }));
    assert.equal(r.exits, 1);
    const [lat, lon] = at(10, 0);
    router.push({ id: 'car', lat, lon, ts: T0 + 5000 });
    await waitFor(() => got.length === 4, 10_000, 'EXIT a (old tags), ENTER a (new tags)');
  } finally {
    await router.close();
  }
  assert.deepEqual(
    got.map((t) => `${t.type} ${t.fenceId} ${t.tags.join(',')}`),
    ['ENTER a ', 'ENTER b ', 'EXIT a ', 'ENTER a outer'],
  );
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});
