import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_ADMISSION_OPTIONS,
  LaneAdmission,
  allocateAdmissionCounters,
  allocateTelemetryRing,
  shedCounterIndex,
  shedReasonOf,
} from '../../src/ingest/admission.js';
import { ADM_BLOCK_F64, ADM_OFFERED_F64, ADM_SHED_F64, Lane, SHED_REASON_COUNT, ShedReason } from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';

const T0 = 5e15;

function setup(capacitySlots: number, options = {}) {
  const ring = SpscRing.wrap(allocateTelemetryRing(capacitySlots, DEFAULT_ADMISSION_OPTIONS.reservedFraction));
  const counters = new Float64Array(allocateAdmissionCounters(4));
  const admission = new LaneAdmission(ring, counters, 2 * ADM_BLOCK_F64, { ...DEFAULT_ADMISSION_OPTIONS, ...options }, T0);
  return { ring, counters, admission };
}

test('shed results encode their reason', () => {
  for (const r of [ShedReason.RING_FULL, ShedReason.RATE_LIMITED, ShedReason.DRAINING]) assert.equal(shedReasonOf(-1 - r), r);
  assert.equal(shedCounterIndex(Lane.COMPLIANCE, ShedReason.DRAINING), ADM_SHED_F64 + 2 * SHED_REASON_COUNT + 2);
});

test('lower lanes stop at the reserved slice; COMPLIANCE fills it; unpublished claims count', () => {
  const { ring, admission } = setup(64); // 4 reserved slots, 60 shared
  assert.equal(ring.reservedSlots, 4);
  for (let i = 0; i < 60; i++) assert.ok(admission.admit(Lane.TRANSITION, T0) >= 0);
  // Nothing published yet: the claims alone fill the shared part.
  assert.equal(ring.depth(), 0);
  assert.equal(admission.admit(Lane.TRANSITION, T0), -1 - ShedReason.RING_FULL);
  assert.equal(admission.admit(Lane.IDLE, T0), -1 - ShedReason.RING_FULL);
  for (let i = 0; i < 4; i++) assert.ok(admission.admit(Lane.COMPLIANCE, T0) >= 0);
  assert.equal(admission.admit(Lane.COMPLIANCE, T0), -1 - ShedReason.RING_FULL);
  ring.publish();
  // The consumer frees 5 slots: one below the shared limit again.
  ring.release(5);
  assert.ok(admission.admit(Lane.TRANSITION, T0) >= 0);
  assert.equal(admission.admit(Lane.TRANSITION, T0), -1 - ShedReason.RING_FULL);
  assert.equal(admission.shedCount(Lane.TRANSITION, ShedReason.RING_FULL), 2);
  assert.equal(admission.shedCount(Lane.IDLE, ShedReason.RING_FULL), 1);
  assert.equal(admission.shedCount(Lane.COMPLIANCE, ShedReason.RING_FULL), 1);
});

test('above the watermark IDLE takes tokens: burst, then the refill rate', () => {
  const { ring, admission } = setup(1024, { idleBucketCapacity: 3, idleBucketRatePerSecond: 1000 });
  assert.equal(admission.watermarkSlots, 615);
  // Below the watermark IDLE is never rate limited, however many arrive at once.
  for (let i = 0; i < 615; i++) assert.ok(admission.admit(Lane.IDLE, T0) >= 0);
  ring.publish();
  for (let i = 0; i < 3; i++) assert.ok(admission.admit(Lane.IDLE, T0) >= 0, 'burst');
  assert.equal(admission.admit(Lane.IDLE, T0), -1 - ShedReason.RATE_LIMITED);
  // Other lanes are not rate limited.
  assert.ok(admission.admit(Lane.TRANSITION, T0) >= 0);
  assert.ok(admission.admit(Lane.IDLE, T0 + 1e6) >= 0, 'one token per ms');
  assert.equal(admission.admit(Lane.IDLE, T0 + 1.5e6), -1 - ShedReason.RATE_LIMITED);
  // Once the consumer drains below the watermark, IDLE flows freely again (the bucket is not consulted).
  ring.publish();
  ring.release(ring.available());
  for (let i = 0; i < 100; i++) assert.ok(admission.admit(Lane.IDLE, T0 + 1.5e6) >= 0);
  assert.equal(admission.shedCount(Lane.IDLE, ShedReason.RATE_LIMITED), 2);
});

test('a stale cached consumer position never sheds: admission re-reads it before shedding', () => {
  const { ring, admission } = setup(64);
  for (let i = 0; i < 60; i++) admission.admit(Lane.TRANSITION, T0);
  ring.publish();
  // The consumer releases everything; the producer's cached read sequence is now stale by 60.
  ring.release(60);
  for (let i = 0; i < 60; i++) assert.ok(admission.admit(Lane.TRANSITION, T0) >= 0, `admit ${i}`);
});

test('while draining every lane is shed as DRAINING and counted; stopping the drain admits again', () => {
  const { ring, counters, admission } = setup(64);
  admission.setDraining(true);
  assert.equal(admission.isDraining(), true);
  for (const lane of [Lane.IDLE, Lane.TRANSITION, Lane.COMPLIANCE]) {
    assert.equal(admission.admit(lane, T0), -1 - ShedReason.DRAINING);
    assert.equal(admission.shedCount(lane, ShedReason.DRAINING), 1);
    assert.equal(counters[2 * ADM_BLOCK_F64 + ADM_OFFERED_F64 + lane], 1);
    assert.equal(admission.admitted(lane), 0);
  }
  assert.equal(ring.pendingCount(), 0, 'nothing claimed while draining');
  admission.setDraining(false);
  assert.ok(admission.admit(Lane.COMPLIANCE, T0) >= 0);
});

test('a pausable source is never rate limited: same lane limits and draining, counted like admit()', () => {
  const { ring, admission } = setup(64, { idleBucketCapacity: 1, idleBucketRatePerSecond: 0 });
  const time = new Float64Array([T0]);
  // IDLE past the watermark with an empty bucket: admitted all the way to the lower lanes' limit.
  for (let i = 0; i < 60; i++) assert.ok(admission.admitPausableAt(Lane.IDLE, time, 0) >= 0, `admit ${i}`);
  assert.equal(admission.admitPausableAt(Lane.IDLE, time, 0), -1 - ShedReason.RING_FULL);
  assert.equal(admission.admitPausableAt(Lane.TRANSITION, time, 0), -1 - ShedReason.RING_FULL);
  assert.ok(admission.admitPausableAt(Lane.COMPLIANCE, time, 0) >= 0, 'COMPLIANCE may use the reserved slice');
  assert.equal(admission.shedCount(Lane.IDLE, ShedReason.RATE_LIMITED), 0);
  assert.equal(admission.offered(Lane.IDLE), 61);
  assert.equal(admission.admitted(Lane.IDLE), 60);
  // A stale cached consumer position is re-read before shedding.
  ring.publish();
  ring.release(ring.available());
  assert.ok(admission.admitPausableAt(Lane.TRANSITION, time, 0) >= 0);
  admission.setDraining(true);
  assert.equal(admission.admitPausableAt(Lane.COMPLIANCE, time, 0), -1 - ShedReason.DRAINING);
});
