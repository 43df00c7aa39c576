import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeadLetterReason, Lane, TriggerType } from '../../src/shm/layout.js';
import { DeadLetterRing } from '../../src/dispatch/dead-letter/ring.js';
import { TriggerRouter } from '../../src/dispatch/router.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { TriggerQueue } from '../../src/dispatch/trigger-queue.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import { TriggerRecord } from './fixtures.js';

const ITERATIONS = 2_000_000;

function assertNoAllocation(report: { gcCount: number; newSpaceGrowthBytes: number; oldSpaceGrowthBytes: number }, what: string): void {
  assert.equal(report.gcCount, 0, `${what}: no GC`);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `${what}: new space grew ${report.newSpaceGrowthBytes}`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `${what}: old space grew ${report.oldSpaceGrowthBytes}`);
}

test('dead-letter put allocates nothing', async () => {
  const ring = new DeadLetterRing(4096);
  const r = new TriggerRecord().set(1, TriggerType.ENTER, Lane.COMPLIANCE, 7, 3);
  const report = await measureAllocations(ITERATIONS, (i) => {
    // The flush empties the ring; here the ring is simply reset when full.
    if (!ring.put(r.f64, r.i32, 0, 0, i & 7, DeadLetterReason.UNDELIVERABLE, 1, i)) ring.clear();
  });
  assertNoAllocation(report, 'DeadLetterRing.put');
});

test('queue push/pop and routing allocate nothing', async () => {
  const q = new TriggerQueue(1024, 64);
  const router = new TriggerRouter([undefined, { types: [TriggerType.DWELL] }, { fenceIds: ['fence-1-3'] }], new IndexNamer());
  const r = new TriggerRecord();
  router.route(0, 1, 1, 3); // first sight of the fence fills the table
  let sink = 0;
  const report = await measureAllocations(ITERATIONS, (i) => {
    r.set(i, i & 3, i % 3, 3, 1);
    sink += router.route(i & 3, i % 3, 1, 3);
    q.push(r.f64, r.i32, 0, 0, i, 0);
    const s = q.popSlot();
    if (s >= 0) q.freeSlot(s);
  });
  assertNoAllocation(report, 'queue + router');
  assert.ok(sink > 0);
});
