/**
 * How a drain ended and the exit code it gives, on the final stats of a real router (closed at once) with counts set:
 * only a drain that shed, rejected and dropped nothing says "drained cleanly" and exits 0; shedding, rejections,
 * fence-tracking overflows, damaged durable records, dead letters and triggers kept (for the next start, or for
 * downstreams no longer named) exit 3 and are listed by lane and reason; an unaccounted ping or a failed final
 * checkpoint exits 1.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  drainedCleanly,
  drainOutcome,
  EXIT_CLEAN,
  EXIT_FAILURE,
  EXIT_LOSS,
  exitCodeOf,
  formatSummary,
  worseOutcome,
  type DrainOutcome,
} from '../../src/router/status.js';
import { createRouter, type RouterSummary } from '../../src/index.js';

test('the drain outcome, its exit code and the summary list every loss by lane and reason', async () => {
  const router = await createRouter({
    listenHost: null,
    adminHost: null,
    shards: 1,
    poolSize: 1,
    ringCapacitySlots: 64,
    maxDevices: 16,
    stateDir: null,
    log: () => undefined,
  });
  const base = await router.close();
  const clean: RouterSummary = { ...base, accepted: 10, offeredTotal: 10, admittedTotal: 10, processed: 10 };
  const last = (s: RouterSummary): string => formatSummary(s, 1).at(-1)!;

  assert.equal(drainOutcome(clean), 'delivered');
  assert.equal(exitCodeOf(drainOutcome(clean)), EXIT_CLEAN);
  assert.ok(drainedCleanly(clean));
  assert.match(last(clean), /^drained cleanly/);
  assert.match(
    formatSummary(clean, 1).join('\n'),
    /shed\(idle=0 transition=0 compliance=0\) total=0 by_reason\(none\)\n {2}rejected {3}total=0 by_reason\(none\)\n {2}tracking {3}fence_overflows=0 candidate_overflows=0/,
  );

  const shed: RouterSummary = {
    ...clean,
    shed: {
      idle: { ring_full: 0, rate_limited: 5, draining: 0 },
      transition: { ring_full: 2, rate_limited: 0, draining: 0 },
      compliance: { ring_full: 1, rate_limited: 0, draining: 0 },
    },
    shedTotal: 8,
  };
  assert.equal(drainOutcome(shed), 'dropped');
  assert.equal(exitCodeOf(drainOutcome(shed)), EXIT_LOSS);
  assert.equal(drainedCleanly(shed), false);
  const shedText = formatSummary(shed, 1).join('\n');
  assert.match(
    shedText,
    /shed\(idle=5 transition=2 compliance=1\) total=8 by_reason\(idle\.rate_limited=5 transition\.ring_full=2 compliance\.ring_full=1\)/,
  );
  assert.match(last(shed), /^drained with loss: shed=8 \(compliance=1\) rejected=0 fence_overflows=0/);
  assert.doesNotMatch(shedText, /drained cleanly/);

  const rejected: RouterSummary = { ...clean, rejected: { corrupt_frame: 2, invalid_lat: 1 }, rejectedTotal: 3 };
  assert.equal(exitCodeOf(drainOutcome(rejected)), EXIT_LOSS);
  assert.match(
    formatSummary(rejected, 1).join('\n'),
    / {2}rejected {3}total=3 by_reason\(corrupt_frame=2 invalid_lat=1\)/,
  );

  const untracked: RouterSummary = { ...clean, fenceOverflows: 4 };
  assert.equal(exitCodeOf(drainOutcome(untracked)), EXIT_LOSS);
  assert.match(formatSummary(untracked, 1).join('\n'), / {2}tracking {3}fence_overflows=4 candidate_overflows=0/);
  assert.match(last(untracked), /fence_overflows=4/);

  const deadLettered: RouterSummary = {
    ...clean,
    deadLettered: 2,
    final: 2,
    deadLetteredByReason: { ...clean.deadLetteredByReason, undeliverable: 2 },
  };
  assert.equal(drainOutcome(deadLettered), 'kept');
  assert.equal(exitCodeOf(drainOutcome(deadLettered)), EXIT_LOSS);
  assert.match(formatSummary(deadLettered, 1).join('\n'), /dead_lettered\(rejected=0 expired=0 undeliverable=2\)/);

  // Dead letters dropped from storage (budget, age, disk) took their record of loss with them: a loss, not "kept".
  const droppedFromDisk: RouterSummary = {
    ...deadLettered,
    deadLetterDropped: { over_budget: 5, too_old: 0, disk_error: 1 },
  };
  assert.equal(drainOutcome(droppedFromDisk), 'dropped');
  assert.equal(exitCodeOf(drainOutcome(droppedFromDisk)), EXIT_LOSS);
  assert.match(last(droppedFromDisk), /^drained with loss: .*dead_letters_dropped=6/);

  // Partitions read after a gap in their stream: pings no one read, a loss by the stream's retention.
  const afterGap: RouterSummary = { ...clean, partitionsAfterGap: 3 };
  assert.equal(drainOutcome(afterGap), 'dropped');
  assert.equal(exitCodeOf(drainOutcome(afterGap)), EXIT_LOSS);
  assert.match(formatSummary(afterGap, 1).join('\n'), / {2}source {5}partitions_after_gap=3: /);
  assert.match(last(afterGap), /^drained with loss: .*partitions_after_gap=3: /);
  assert.doesNotMatch(formatSummary(clean, 1).join('\n'), /partitions_after_gap/);

  // Records of a pending file or backlog log found damaged: their triggers were skipped, a loss (not "nothing lost").
  const damaged: RouterSummary = { ...deadLettered, damagedLost: 2 };
  assert.equal(drainOutcome(damaged), 'dropped');
  assert.equal(exitCodeOf(drainOutcome(damaged)), EXIT_LOSS);
  assert.match(last(damaged), /^drained with loss: .* damaged_records=2: /);

  // Triggers left by downstreams the options no longer name: kept, not delivered, not lost.
  const unconfigured: RouterSummary = { ...clean, unconfiguredTriggers: 7 };
  assert.equal(drainOutcome(unconfigured), 'kept');
  assert.equal(exitCodeOf(drainOutcome(unconfigured)), EXIT_LOSS);
  assert.match(formatSummary(unconfigured, 1).join('\n'), / {2}unconfigured 7 undelivered triggers /);
  assert.match(last(unconfigured), /^drained, nothing lost: .*, 7 kept for downstreams the options no longer name$/);

  // A final checkpoint that failed: the next start treats the stop as unclean, a failure.
  const noCheckpoint: RouterSummary = { ...clean, finalCheckpointFailed: true };
  assert.equal(drainOutcome(noCheckpoint), 'lost');
  assert.equal(exitCodeOf(drainOutcome(noCheckpoint)), EXIT_FAILURE);
  assert.match(last(noCheckpoint), /^drain incomplete: the final checkpoint failed/);

  // A partition group's exit code covers its earlier routers: the worst outcome wins.
  const worst = (first: DrainOutcome, ...rest: DrainOutcome[]): DrainOutcome => rest.reduce(worseOutcome, first);
  assert.equal(worst('delivered', 'kept', 'dropped'), 'dropped');
  assert.equal(worst('kept', 'delivered'), 'kept');
  assert.equal(worst('delivered', 'lost', 'kept'), 'lost');

  // An admitted ping not processed is a failure, whatever else was lost by design.
  const incomplete: RouterSummary = { ...shed, processed: 9 };
  assert.equal(drainOutcome(incomplete), 'lost');
  assert.equal(exitCodeOf(drainOutcome(incomplete)), EXIT_FAILURE);
  assert.match(last(incomplete), /^drain incomplete/);
});
