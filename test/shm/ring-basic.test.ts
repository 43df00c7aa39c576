import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { RingKind } from '../../src/shm/layout.js';

test('ring wraps many times on one thread without losing or reordering records', () => {
  const ring = SpscRing.wrap(allocateRingRegion({ capacitySlots: 8, strideBytes: 16, kind: RingKind.RAW }));
  let written = 0;
  let read = 0;
  for (let round = 0; round < 1000; round++) {
    const free = ring.freeSlots();
    const n = Math.min(free, (round % 7) + 1);
    for (let i = 0; i < n; i++) {
      const slot = ring.claim();
      ring.f64[slot * ring.strideF64] = written++;
    }
    ring.publish();
    const avail = ring.available();
    const m = Math.min(avail, (round % 5) + 1);
    for (let i = 0; i < m; i++) assert.equal(ring.f64[ring.readSlot(i) * ring.strideF64], read++);
    ring.release(m);
  }
  assert.ok(written > 1000);
  assert.equal(ring.depth(), written - read);
});

test('the allocation probe sees an allocating body', async () => {
  const { measureAllocations } = await import('../support/alloc-free.js');
  const keep: number[][] = [];
  const report = await measureAllocations(2_000_000, (i) => {
    const a = [i, i + 1];
    if ((i & 0xffff) === 0) keep.push(a);
  });
  assert.ok(report.gcCount > 0, `expected GCs from an allocating body, saw ${report.gcCount}`);
});
