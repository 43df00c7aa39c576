import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allocateTelemetryRing } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { TEL_DEVICE_SLOT_I32, TEL_EVENT_TIME_MS_F64, TEL_LAT_F64, TEL_LON_F64 } from '../../src/shm/layout.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';

function assertNoAllocation(report: Awaited<ReturnType<typeof measureAllocations>>): void {
  assert.equal(report.gcCount, 0, `GC events during ${report.iterations} iterations`);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes} bytes`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes} bytes`);
}

test('claim + write + batch publish allocates nothing', async () => {
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0));
  const { f64, i32, strideF64, strideI32 } = ring;
  const report = await measureAllocations(5_000_000, (i) => {
    // Only the ring's producer side is measured: release whole batches straight away (as a consumer would).
    if (ring.freeSlots(1) === 0) ring.release(ring.available());
    const slot = ring.claim();
    f64[slot * strideF64 + TEL_LAT_F64] = i * 1e-6;
    f64[slot * strideF64 + TEL_EVENT_TIME_MS_F64] = 1.7e12 + i;
    i32[slot * strideI32 + TEL_DEVICE_SLOT_I32] = i;
    if ((i & 63) === 63) ring.publish();
  });
  assertNoAllocation(report);
});

test('read + release allocates nothing', async () => {
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0));
  const { f64, i32, strideF64, strideI32 } = ring;
  for (let s = 0; s < 1024; s++) {
    f64[s * strideF64 + TEL_LAT_F64] = s;
    f64[s * strideF64 + TEL_LON_F64] = -s;
    i32[s * strideI32 + TEL_DEVICE_SLOT_I32] = s;
  }
  const sink = new Float64Array(1);
  const report = await measureAllocations(5_000_000, () => {
    // Publish a batch of 64 pre-written records without rewriting them, so the body measures the reading side.
    if (ring.available() === 0) {
      for (let k = 0; k < 64; k++) ring.claim();
      ring.publish();
    }
    const n = ring.available();
    const slot = ring.readSlot(0);
    sink[0]! +=
      f64[slot * strideF64 + TEL_LAT_F64]! +
      f64[slot * strideF64 + TEL_LON_F64]! +
      i32[slot * strideI32 + TEL_DEVICE_SLOT_I32]!;
    ring.release(n > 0 ? 1 : 0);
  });
  assertNoAllocation(report);
  assert.ok(sink[0] !== 0);
});

test('fill and depth read without allocating', async () => {
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0));
  for (let k = 0; k < 300; k++) ring.claim();
  ring.publish();
  const sink = new Float64Array(1);
  const report = await measureAllocations(5_000_000, () => {
    sink[0]! += ring.fill() + ring.depth();
  });
  assertNoAllocation(report);
  assert.equal(ring.fill(), 300 / 1024);
});
