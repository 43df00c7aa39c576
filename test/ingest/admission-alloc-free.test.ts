import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  LaneAdmission,
  allocateAdmissionCounters,
  allocateTelemetryRing,
  DEFAULT_ADMISSION_OPTIONS,
} from '../../src/ingest/admission.js';
import {
  Lane,
  ShedReason,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import { mix32 } from '../shm/fixtures/seeded-records.js';

test('admit + write + batch publish + the queue-delay look allocate nothing, on every path (admitted, ring full, rate limited, draining, queue delay)', async () => {
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0.05));
  const counters = new Float64Array(allocateAdmissionCounters(1));
  // A queue-delay target of 100 us held for 5 ms: the ring fills first, then the controller sheds, many times over.
  const options = {
    ...DEFAULT_ADMISSION_OPTIONS,
    idleBucketCapacity: 64,
    idleBucketRatePerSec: 100_000,
    queueDelayTargetMs: 0.1,
    queueDelayIntervalMs: 5,
  };
  const admission = new LaneAdmission(ring, counters, 0, options, 0);
  // Seeded lanes: 60% IDLE, 30% TRANSITION, 10% COMPLIANCE.
  const lanes = new Uint8Array(4096);
  for (let i = 0; i < lanes.length; i++) {
    const h = mix32(i + 17) % 10;
    lanes[i] = h < 6 ? Lane.IDLE : h < 9 ? Lane.TRANSITION : Lane.COMPLIANCE;
  }
  const { f64, i32, strideF64, strideI32 } = ring;
  const clock = new Float64Array(1);
  const iterations = 4_000_000;
  // Moved on after the first pass, so the clock keeps going forward into the second.
  let passStartNs = 1e15;
  const body = (i: number): void => {
    // A drain window now and then (the first inside the warm-up), so the DRAINING path is measured too.
    admission.setDraining((i & 0xffff) > 0xf000);
    const nowNs = passStartNs + i * 250;
    const lane = lanes[i & 4095]! as Lane;
    const slot = admission.admit(lane, nowNs);
    if (slot >= 0) {
      const bF64 = slot * strideF64;
      const bI32 = slot * strideI32;
      f64[bF64 + TEL_LAT_F64] = 52 + (i & 1023) * 1e-5;
      f64[bF64 + TEL_LON_F64] = 13 + (i & 511) * 1e-5;
      f64[bF64 + TEL_ADMIT_TIME_NS_F64] = nowNs;
      i32[bI32 + TEL_DEVICE_SLOT_I32] = i & 0xffff;
      i32[bI32 + TEL_LANE_I32] = lane;
    }
    // Publish in batches of 32 pings, and look at the queue delay as a read chunk would.
    if ((i & 31) === 31) {
      ring.publish();
      clock[0] = nowNs;
      admission.observeQueueDelay(clock, 0, false);
    }
    // The consumer (same thread here) keeps up only part of the time, so the ring crosses the watermark and fills.
    if ((i & 63) === 63) ring.release(Math.min(ring.available(), (i >> 6) & 63));
  };
  // A first, unasserted pass: every path (drains, a full ring, rate limiting) is taken many times and V8 finishes
  // recompiling after the deoptimisations that first visits to rare paths cause, which a long-running router has long
  // been through. Only the second pass is measured.
  await measureAllocations(iterations, body, 1_000_000);
  passStartNs += (1_000_000 + iterations) * 250;
  const idleAdmitted = admission.admitted(Lane.IDLE);
  const complianceAdmitted = admission.admitted(Lane.COMPLIANCE);
  const idleRateLimited = admission.shedCount(Lane.IDLE, ShedReason.RATE_LIMITED);
  const transitionRingFull = admission.shedCount(Lane.TRANSITION, ShedReason.RING_FULL);
  const complianceDraining = admission.shedCount(Lane.COMPLIANCE, ShedReason.DRAINING);
  const transitionDelayed = admission.shedCount(Lane.TRANSITION, ShedReason.QUEUE_DELAY);
  const report = await measureAllocations(iterations, body, 1_000_000);
  assert.equal(report.gcCount, 0, `GC events during ${iterations} admissions`);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes} bytes`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes} bytes`);
  // Every path was exercised in the measured pass.
  assert.ok(admission.admitted(Lane.IDLE) > idleAdmitted && admission.admitted(Lane.COMPLIANCE) > complianceAdmitted);
  assert.ok(admission.shedCount(Lane.IDLE, ShedReason.RATE_LIMITED) > idleRateLimited, 'rate limited path');
  assert.ok(admission.shedCount(Lane.TRANSITION, ShedReason.RING_FULL) > transitionRingFull, 'ring full path');
  assert.ok(admission.shedCount(Lane.COMPLIANCE, ShedReason.DRAINING) > complianceDraining, 'draining path');
  assert.ok(admission.shedCount(Lane.TRANSITION, ShedReason.QUEUE_DELAY) > transitionDelayed, 'queue delay path');
});

test('admitPausableAt (pausable sources) allocates nothing, admitted, ring full and draining', async () => {
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0.05));
  const counters = new Float64Array(allocateAdmissionCounters(1));
  const admission = new LaneAdmission(ring, counters, 0, DEFAULT_ADMISSION_OPTIONS, 0);
  const time = new Float64Array(1);
  const iterations = 4_000_000;
  const body = (i: number): void => {
    admission.setDraining((i & 0xffff) > 0xf000);
    time[0] = 1e15 + i * 250;
    const lane = (mix32(i + 5) % 3) as Lane;
    const slot = admission.admitPausableAt(lane, time, 0);
    if (slot >= 0) ring.f64[slot * ring.strideF64 + TEL_LAT_F64] = 52;
    if ((i & 31) === 31) ring.publish();
    if ((i & 63) === 63) ring.release(Math.min(ring.available(), (i >> 6) & 63));
  };
  await measureAllocations(iterations, body, 1_000_000);
  const ringFull = admission.shedCount(Lane.TRANSITION, ShedReason.RING_FULL);
  const report = await measureAllocations(iterations, body, 1_000_000);
  assert.equal(report.gcCount, 0, `GC events during ${iterations} admissions`);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes} bytes`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes} bytes`);
  assert.ok(admission.shedCount(Lane.TRANSITION, ShedReason.RING_FULL) > ringFull, 'ring full path');
  assert.equal(admission.shedCount(Lane.IDLE, ShedReason.RATE_LIMITED), 0, 'never rate limited');
});
