/**
 * The COMPLIANCE shed alarm: one error line per check that finds COMPLIANCE pings shed since the previous one, with
 * the count since then by reason and the total; silent when none were, and blind to the other lanes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shedCounterIndex } from '../../src/ingest/admission.js';
import { ComplianceShedAlarm } from '../../src/ingest/shed-alarm.js';
import { allocateAdmissionCounters } from '../../src/shm/regions.js';
import { ADM_BLOCK_F64, Lane, ShedReason } from '../../src/shm/layout.js';

test('COMPLIANCE shedding is reported as one line per check with the count since the last line; other lanes are not', () => {
  const counters = new Float64Array(allocateAdmissionCounters(2));
  const lines: string[] = [];
  let now = 1000;
  const alarm = new ComplianceShedAlarm({
    admissionCounters: counters,
    blocks: 2,
    nowMs: () => now,
    write: (l) => lines.push(l),
  });
  // Counts before the alarm started are its baseline.
  const at = (shard: number, lane: Lane, reason: ShedReason): number =>
    shard * ADM_BLOCK_F64 + shedCounterIndex(lane, reason);
  assert.equal(alarm.check(), 0);
  counters[at(0, Lane.IDLE, ShedReason.RATE_LIMITED)] = 500;
  counters[at(1, Lane.TRANSITION, ShedReason.RING_FULL)] = 20;
  now += 1000;
  assert.equal(alarm.check(), 0, 'lower lanes shed by design: no alarm');
  assert.deepEqual(lines, []);
  counters[at(0, Lane.COMPLIANCE, ShedReason.RING_FULL)] = 3;
  counters[at(1, Lane.COMPLIANCE, ShedReason.RING_FULL)] = 4;
  now += 1000;
  assert.equal(alarm.check(), 7);
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /^ingest: shed 7 COMPLIANCE pings in the last 1\.0s \(ring_full=7\); 7 since start: compliance triggers may be missing/,
  );
  now += 1000;
  assert.equal(alarm.check(), 0, 'nothing new: no line');
  assert.equal(lines.length, 1);
  counters[at(1, Lane.COMPLIANCE, ShedReason.RING_FULL)] = 5;
  counters[at(0, Lane.COMPLIANCE, ShedReason.DRAINING)] = 2;
  // The period is since the previous check, when nothing was shed: the shedding happened within it.
  now += 2500;
  assert.equal(alarm.check(), 3);
  assert.match(lines[1]!, /shed 3 COMPLIANCE pings in the last 2\.5s \(ring_full=1 draining=2\); 10 since start/);
});

test('the alarm refuses counters that do not hold its blocks', () => {
  assert.throws(
    () =>
      new ComplianceShedAlarm({
        admissionCounters: new Float64Array(ADM_BLOCK_F64),
        blocks: 2,
        nowMs: () => 0,
        write: () => undefined,
      }),
    /admissionCounters must hold 2 blocks/,
  );
});
