/**
 * The allocation measurement itself: a body that keeps allocating is caught (collections counted), whether its garbage
 * dies young or is kept, and a body that allocates nothing passes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';

test('the allocation measurement catches a body that allocates, young garbage or kept, and passes one that does not', async () => {
  let sink = 0;
  const young = await measureAllocations(1_000_000, (i) => {
    const o = { i, twice: i * 2 };
    sink += o.twice;
  });
  assert.ok(young.gcCount > 0, `an object per iteration forces collections (${young.gcCount})`);
  const kept: number[][] = [];
  const growing = await measureAllocations(200_000, (i) => {
    if ((i & 7) === 0) kept.push([i]);
  });
  assert.ok(
    growing.gcCount > 0 ||
      growing.newSpaceGrowthBytes >= ALLOCATION_SLACK_BYTES ||
      growing.oldSpaceGrowthBytes >= ALLOCATION_SLACK_BYTES,
    `kept arrays are seen (${growing.gcCount} collections, new space +${growing.newSpaceGrowthBytes}, old space +${growing.oldSpaceGrowthBytes})`,
  );
  const cells = new Float64Array(64);
  const none = await measureAllocations(2_000_000, (i) => {
    cells[i & 63] = cells[(i + 1) & 63]! + 1;
  });
  assert.equal(none.gcCount, 0);
  assert.ok(none.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES && none.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES);
  assert.ok(sink > 0 && kept.length > 0);
});
