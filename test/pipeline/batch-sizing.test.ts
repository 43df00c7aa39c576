/**
 * Containment batches sized by time: the count follows the measured cost per ping, never falls below the minimum,
 * never exceeds the cap or what is available, and one stretched batch moves the estimate only partly.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BatchSizer, MIN_BATCH_RECORDS } from '../../src/pipeline/batch-sizing.js';

const BUDGET_NS = 250_000;

test('before any batch the count is what is available, capped', () => {
  const s = new BatchSizer();
  assert.equal(s.count(10_000, 512, BUDGET_NS), 512);
  assert.equal(s.count(37, 512, BUDGET_NS), 37);
});

test('expensive pings (40 µs, a dense city) give batches that fit the budget; cheap ones keep the cap', () => {
  const dense = new BatchSizer();
  dense.note(512 * 40_000, 512);
  assert.equal(dense.costPerPingNs, 40_000);
  assert.equal(dense.count(10_000, 512, BUDGET_NS), 6, '250 µs / 40 µs');
  // Eight shards of such batches make a pass of at most 8 x 250 µs = 2 ms instead of 8 x 512 x 40 µs = 164 ms.
  assert.ok(8 * dense.count(10_000, 512, BUDGET_NS) * dense.costPerPingNs <= 8 * BUDGET_NS);
  const cheap = new BatchSizer();
  cheap.note(512 * 400, 512);
  assert.equal(cheap.count(10_000, 512, BUDGET_NS), 512, '625 fit: the cap holds');
  assert.equal(cheap.count(100, 512, BUDGET_NS), 100, 'never more than is there');
});

test('a very slow ping still leaves the minimum batch; a stretched batch moves the estimate by a quarter', () => {
  const s = new BatchSizer();
  s.note(10_000_000, 1);
  assert.equal(s.count(10_000, 512, BUDGET_NS), MIN_BATCH_RECORDS);
  const t = new BatchSizer();
  t.note(100 * 10_000, 100); // 10 µs a ping
  t.note(100 * 410_000, 100); // one batch preempted: 410 µs a ping
  assert.equal(t.costPerPingNs, 10_000 + 0.25 * 400_000);
  for (let i = 0; i < 40; i++) t.note(100 * 10_000, 100);
  assert.ok(Math.abs(t.costPerPingNs - 10_000) < 10, `back to the true cost: ${t.costPerPingNs}`);
  assert.equal(t.count(10_000, 512, BUDGET_NS), Math.floor(BUDGET_NS / t.costPerPingNs));
  assert.ok(t.count(10_000, 512, BUDGET_NS) >= 24);
});

test('empty or nonsensical samples are ignored', () => {
  const s = new BatchSizer();
  s.note(1000, 0);
  s.note(Number.NaN, 10);
  s.note(-5, 10);
  assert.equal(s.costPerPingNs, 0);
});
