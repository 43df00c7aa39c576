import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_ADMISSION_OPTIONS,
  LaneAdmission,
  allocateAdmissionCounters,
  allocateTelemetryRing,
  reservedSlotsFor,
  validateAdmissionOptions,
  type AdmissionOptions,
} from '../../src/ingest/admission.js';
import { allocateRingRegion } from '../../src/shm/regions.js';
import { RingKind, TELEMETRY_STRIDE_BYTES } from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';

test('defaults: 5% reserved slice, 60% watermark, positive idle bucket', () => {
  assert.deepEqual(validateAdmissionOptions({}), DEFAULT_ADMISSION_OPTIONS);
  assert.equal(DEFAULT_ADMISSION_OPTIONS.reservedFraction, 0.05);
  assert.equal(DEFAULT_ADMISSION_OPTIONS.watermarkFraction, 0.6);
  assert.ok(Object.isFrozen(DEFAULT_ADMISSION_OPTIONS));
  const merged = validateAdmissionOptions({ reservedFraction: 0.1 });
  assert.equal(merged.reservedFraction, 0.1);
  assert.equal(merged.idleBucketCapacity, DEFAULT_ADMISSION_OPTIONS.idleBucketCapacity);
});

test('the edges of every range are accepted', () => {
  for (const o of [
    { reservedFraction: 0 },
    { reservedFraction: 0.5 },
    { watermarkFraction: 0 },
    { watermarkFraction: 1 },
    { idleBucketCapacity: 1 },
    { idleBucketRatePerSec: 0 },
  ]) {
    assert.doesNotThrow(() => validateAdmissionOptions(o), JSON.stringify(o));
  }
});

test('bad admission options fail with a message naming the option and its range', () => {
  const cases: Array<[Partial<Record<keyof AdmissionOptions, unknown>>, RegExp]> = [
    [{ reservedFraction: 0.7 }, /^OptionError: options\.reservedFraction must be a number in \[0, 0\.5\], got 0\.7$/],
    [{ reservedFraction: -0.01 }, /options\.reservedFraction must be a number in \[0, 0\.5\], got -0\.01/],
    [{ reservedFraction: NaN }, /options\.reservedFraction .* got NaN/],
    [{ reservedFraction: '0.05' }, /options\.reservedFraction .* got "0\.05"/],
    [{ watermarkFraction: 1.2 }, /options\.watermarkFraction must be a number in \[0, 1\], got 1\.2/],
    [{ watermarkFraction: -1 }, /options\.watermarkFraction must be a number in \[0, 1\], got -1/],
    [{ idleBucketCapacity: 0 }, /options\.idleBucketCapacity must be a number in \[1, 1000000000\], got 0/],
    [
      { idleBucketCapacity: Infinity },
      /options\.idleBucketCapacity must be a number in \[1, 1000000000\], got Infinity/,
    ],
    [{ idleBucketRatePerSec: -5 }, /options\.idleBucketRatePerSec must be a number in \[0, 1000000000\], got -5/],
    [{ idleBucketRatePerSec: null }, /options\.idleBucketRatePerSec .* got null/],
  ];
  for (const [o, message] of cases) {
    assert.throws(
      () => validateAdmissionOptions(o as Partial<AdmissionOptions>),
      (e: unknown) => e instanceof RangeError && message.test(String(e)),
      JSON.stringify(o),
    );
  }
  assert.throws(
    () => validateAdmissionOptions(null as unknown as Partial<AdmissionOptions>),
    /admission options must be an object/,
  );
});

test('ring capacity must be a power of two; the reserved slice is ceil(capacity * fraction)', () => {
  for (const bad of [0, 1, 3, 1000, 1.5, -8, 2 ** 25]) {
    assert.throws(
      () => allocateTelemetryRing(bad, 0.05),
      /capacitySlots must be a power of two between 2 and \d+, got/,
      String(bad),
    );
  }
  assert.throws(() => allocateTelemetryRing(1024, 0.6), /reservedFraction must be a number in \[0, 0\.5\], got 0\.6/);
  assert.throws(() => allocateTelemetryRing(1024, -0.1), /reservedFraction must be a number in \[0, 0\.5\], got -0\.1/);
  assert.equal(reservedSlotsFor(1024, 0.05), 52);
  assert.equal(reservedSlotsFor(1024, 0), 0);
  assert.equal(reservedSlotsFor(2, 0.01), 1, 'a non-zero fraction always reserves a slot');
  assert.equal(reservedSlotsFor(2, 0.5), 1);
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0.05), RingKind.TELEMETRY);
  assert.equal(ring.reservedSlots, 52);
  assert.equal(ring.strideBytes, TELEMETRY_STRIDE_BYTES);
});

test('LaneAdmission rejects a ring whose reserved slice does not match the options, and a bad counter base', () => {
  const counters = new Float64Array(allocateAdmissionCounters(2));
  const noSlice = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 1024, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  assert.throws(
    () => new LaneAdmission(noSlice, counters, 0, DEFAULT_ADMISSION_OPTIONS, 0),
    /ring reserves 0 slots but options\.reservedFraction 0\.05 of 1024 slots needs 52/,
  );
  const ring = SpscRing.wrap(allocateTelemetryRing(1024, 0.05));
  assert.throws(
    () => new LaneAdmission(ring, counters, 1000, DEFAULT_ADMISSION_OPTIONS, 0),
    /counterBaseF64 must be an integer in/,
  );
  assert.throws(() => new LaneAdmission(ring, counters, 0.5, DEFAULT_ADMISSION_OPTIONS, 0), /counterBaseF64/);
  assert.throws(
    () => new LaneAdmission(ring, counters, 0, { ...DEFAULT_ADMISSION_OPTIONS, watermarkFraction: 2 }, 0),
    /options\.watermarkFraction/,
  );
  assert.throws(() => allocateAdmissionCounters(0), /ringCount must be a positive integer, got 0/);
});
