/**
 * The backlog log's held positions: as many holds as the capacity whatever the order of their release (a ring full of
 * gaps is compacted), the oldest one held always known, and none past the capacity.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BacklogHolds } from '../../src/durable/backlog-holds.js';

test('backlog holds: one old hold kept while many later ones come and go; the capacity counts the holds, not the places', () => {
  const holds = new BacklogHolds(8);
  const first = holds.take(1, 100);
  let off = 200;
  // 1000 holds taken and released behind the first: the ring fills with gaps and is compacted.
  for (let k = 0; k < 1000; k++) holds.release(holds.take(1, off++));
  assert.equal(holds.count, 1);
  assert.equal(holds.oldest(), first);
  const later: number[] = [];
  for (let k = 0; k < 7; k++) later.push(holds.take(1, off++));
  assert.equal(holds.count, 8);
  assert.equal(holds.take(1, off), -1, 'full at the capacity');
  // Released out of order: the oldest is the first taken of those still held.
  holds.release(later[0]!);
  holds.release(first);
  assert.equal(holds.oldest(), later[1]);
  assert.equal(holds.offOf(holds.oldest()), holds.offOf(later[1]!));
  assert.ok(holds.offOf(later[1]!) < holds.offOf(later[2]!));
  holds.release(later[3]!);
  for (let k = 0; k < 3; k++) assert.ok(holds.take(2, k) >= 0);
  assert.equal(holds.oldest(), later[1]);
  holds.clear();
  assert.equal(holds.count, 0);
  assert.equal(holds.oldest(), -1);
  for (let k = 0; k < 8; k++) assert.ok(holds.take(3, k) >= 0, 'every cell free again');
  assert.equal(holds.segOf(holds.oldest()), 3);
});
