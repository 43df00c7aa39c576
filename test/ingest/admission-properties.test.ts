import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  LaneAdmission,
  shedReasonOf,
  allocateAdmissionCounters,
  allocateTelemetryRing,
} from '../../src/ingest/admission.js';
import {
  ADM_BLOCK_F64,
  Lane,
  LANE_COUNT,
  SHED_REASON_COUNT,
  ShedReason,
  TEL_LANE_I32,
  telemetryRingIndex,
} from '../../src/shm/layout.js';
import { admissionOptionsPerThread } from '../../src/pipeline/ingest-path.js';
import { SpscRing } from '../../src/shm/ring.js';

/** One step of a scenario: offer a ping, publish what was claimed, or let the consumer release some records. */
type Step =
  | { kind: 'offer'; lane: Lane; advanceNs: number; producer?: number }
  | { kind: 'publish' }
  | { kind: 'consume'; count: number };

interface Scenario {
  capacityLog2: number;
  reservedFraction: number;
  watermarkFraction: number;
  idleBucketCapacity: number;
  idleBucketRatePerSec: number;
  shard: number;
  steps: Step[];
  /** Ingest threads, each admitting into a ring of its own for the shard (default 1). */
  producers?: number;
}

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('offer' as const),
      lane: fc.constantFrom<Lane>(Lane.IDLE, Lane.TRANSITION, Lane.COMPLIANCE),
      advanceNs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2_000_000 })),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ kind: 'publish' as const }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('consume' as const), count: fc.integer({ min: 1, max: 64 }) }),
  },
);

const scenarioArb: fc.Arbitrary<Scenario> = fc.record({
  capacityLog2: fc.integer({ min: 1, max: 7 }),
  reservedFraction: fc.oneof(
    fc.constant(0),
    fc.constant(0.05),
    fc.constant(0.5),
    fc.double({ min: 0, max: 0.5, noNaN: true }),
  ),
  watermarkFraction: fc.oneof(
    fc.constant(0),
    fc.constant(0.6),
    fc.constant(1),
    fc.double({ min: 0, max: 1, noNaN: true }),
  ),
  idleBucketCapacity: fc.oneof(fc.constant(1), fc.double({ min: 1, max: 40, noNaN: true })),
  idleBucketRatePerSec: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 200_000, noNaN: true })),
  shard: fc.integer({ min: 0, max: 2 }),
  steps: fc.array(stepArb, { minLength: 1, maxLength: 400 }),
});

const START_NS = 3.2e16;

/**
 * Drives a real ring and a real LaneAdmission through a scenario on one thread (acting as producer and consumer),
 * checking after every step the four admission properties against the exact depth read from the ring header.
 */
function runScenario(s: Scenario): void {
  const capacitySlots = 1 << s.capacityLog2;
  const producers = s.producers ?? 1;
  const shards = 3;
  const counters = new Float64Array(allocateAdmissionCounters(producers * shards));
  const configured = {
    reservedFraction: s.reservedFraction,
    watermarkFraction: s.watermarkFraction,
    idleBucketCapacity: s.idleBucketCapacity,
    idleBucketRatePerSec: s.idleBucketRatePerSec,
    queueDelayTargetMs: 0,
    queueDelayIntervalMs: 0,
  };
  // Each ingest thread admits into its ring of the shard with its share of the IDLE bucket, as the router does.
  const options = admissionOptionsPerThread(configured, producers);
  const rings: SpscRing[] = [];
  const admissions: LaneAdmission[] = [];
  const bases: number[] = [];
  for (let p = 0; p < producers; p++) {
    const ring = SpscRing.wrap(allocateTelemetryRing(capacitySlots, s.reservedFraction));
    const base = telemetryRingIndex(p, s.shard, shards) * ADM_BLOCK_F64;
    rings.push(ring);
    bases.push(base);
    admissions.push(new LaneAdmission(ring, counters, base, options, START_NS));
  }
  const sharedSlots = capacitySlots - rings[0]!.reservedSlots;
  const watermarkSlots = Math.ceil(s.watermarkFraction * capacitySlots);
  // The test's own tallies, per ring and lane: results it saw returned.
  const offered = rings.map(() => [0, 0, 0]);
  const admitted = rings.map(() => [0, 0, 0]);
  const shed = rings.map(() => new Array<number>(3 * SHED_REASON_COUNT).fill(0));
  // Per ring, lanes of the records in it, oldest first (published and claimed alike).
  const inRing: Lane[][] = rings.map(() => []);
  let idleAdmittedAboveWatermark = 0;
  let nowNs = START_NS;

  for (const step of s.steps) {
    if (step.kind === 'publish') {
      for (const ring of rings) ring.publish();
      continue;
    }
    if (step.kind === 'consume') {
      // The shard's consumer takes from every ring (the containment task passes over them in turn).
      rings.forEach((ring, p) => {
        const n = Math.min(step.count, ring.available());
        for (let k = 0; k < n; k++) {
          assert.equal(ring.i32[ring.readSlot(k) * ring.strideI32 + TEL_LANE_I32], inRing[p]!.shift());
        }
        ring.release(n);
      });
      continue;
    }
    nowNs += step.advanceNs;
    const p = (step.producer ?? 0) % producers;
    const ring = rings[p]!;
    // Exact depth without touching the producer's cached view of the consumer.
    const depthSlots = (ring.writeSeq() + ring.pendingCount() - ring.readSeq()) | 0;
    const expectedSlot = (ring.writeSeq() + ring.pendingCount()) & ring.mask;
    const lane = step.lane;
    const result = admissions[p]!.admit(lane, nowNs);
    offered[p]![lane]!++;
    if (result >= 0) {
      admitted[p]![lane]!++;
      assert.equal(result, expectedSlot, 'admit returns the next slot');
      ring.i32[result * ring.strideI32 + TEL_LANE_I32] = lane;
      inRing[p]!.push(lane);
    } else {
      shed[p]![lane * SHED_REASON_COUNT + shedReasonOf(result)]!++;
    }

    // 1. A COMPLIANCE ping is admitted whenever any slot of its ring is free.
    if (lane === Lane.COMPLIANCE)
      assert.equal(result >= 0, depthSlots < capacitySlots, `compliance at depth ${depthSlots}`);
    // 2. Other lanes never reach the reserved slice, and are shed as RING_FULL only when their part is full.
    if (lane !== Lane.COMPLIANCE) {
      if (result >= 0)
        assert.ok(depthSlots < sharedSlots, `lane ${lane} admitted at depth ${depthSlots} >= ${sharedSlots}`);
      assert.equal(result === -1 - ShedReason.RING_FULL, depthSlots >= sharedSlots);
    }
    if (lane === Lane.TRANSITION) assert.equal(result >= 0, depthSlots < sharedSlots);
    if (lane === Lane.IDLE && depthSlots < watermarkSlots) assert.equal(result >= 0, depthSlots < sharedSlots);
    let nonCompliance = 0;
    for (const l of inRing[p]!) if (l !== Lane.COMPLIANCE) nonCompliance++;
    assert.ok(
      nonCompliance <= sharedSlots,
      `${nonCompliance} lower-lane records in a ring sharing ${sharedSlots} slots`,
    );
    // 3. IDLE above the watermark is admitted at no more than the configured rate (plus its burst), over every ring
    //    together: each thread's bucket has its share (a bucket holds one token at least, so a burst below one per
    //    thread becomes one per thread).
    if (lane === Lane.IDLE && result >= 0 && depthSlots >= watermarkSlots) idleAdmittedAboveWatermark++;
    const burst = Math.max(s.idleBucketCapacity, producers);
    const allowed = burst + (s.idleBucketRatePerSec * (nowNs - START_NS)) / 1e9;
    assert.ok(
      idleAdmittedAboveWatermark <= allowed + 1e-6,
      `${idleAdmittedAboveWatermark} idle admitted, the configured bucket allows ${allowed}`,
    );
    // Only IDLE is ever rate limited; nothing is shed as DRAINING unless draining.
    if (result === -1 - ShedReason.RATE_LIMITED) assert.equal(lane, Lane.IDLE);
    assert.notEqual(result, -1 - ShedReason.DRAINING);
  }

  // 4. Counters add up per ring and lane and match what admit() returned; other blocks are untouched.
  admissions.forEach((admission, p) => {
    for (let lane = 0 as Lane; lane < LANE_COUNT; lane++) {
      let shedTotal = 0;
      for (let r = 0 as ShedReason; r < SHED_REASON_COUNT; r++) {
        assert.equal(admission.shedCount(lane, r), shed[p]![lane * SHED_REASON_COUNT + r]);
        shedTotal += admission.shedCount(lane, r);
      }
      assert.equal(admission.offered(lane), offered[p]![lane]);
      assert.equal(admission.admitted(lane), admitted[p]![lane]);
      assert.equal(admission.offered(lane), admission.admitted(lane) + shedTotal);
    }
  });
  for (let i = 0; i < counters.length; i++) {
    if (!bases.some((base) => i >= base && i < base + ADM_BLOCK_F64))
      assert.equal(counters[i], 0, `counter cell ${i} outside the rings' blocks`);
  }
}

test('admission properties hold over random scenarios (reserved slice, compliance, idle rate, counters)', () => {
  fc.assert(fc.property(scenarioArb, runScenario), { numRuns: 400, seed: 0x2a11 });
});

test('admission properties hold on a ring kept under overload (offers far outpace releases)', () => {
  const overloadArb = scenarioArb.chain((s) =>
    fc
      .array(
        fc.oneof(
          { weight: 20, arbitrary: stepArb.filter((st) => st.kind === 'offer') },
          { weight: 3, arbitrary: fc.constant<Step>({ kind: 'publish' }) },
          {
            weight: 1,
            arbitrary: fc.record({ kind: fc.constant('consume' as const), count: fc.integer({ min: 1, max: 8 }) }),
          },
        ),
        { minLength: 50, maxLength: 600 },
      )
      .map((steps) => ({ ...s, steps })),
  );
  fc.assert(fc.property(overloadArb, runScenario), { numRuns: 200, seed: 0x0be7 });
});

test('admission properties hold per ring and in total with two ingest threads admitting into one shard', () => {
  const twoArb = scenarioArb.chain((s) =>
    fc
      .array(
        fc.oneof(
          {
            weight: 16,
            arbitrary: fc.record({
              kind: fc.constant('offer' as const),
              lane: fc.constantFrom<Lane>(Lane.IDLE, Lane.TRANSITION, Lane.COMPLIANCE),
              advanceNs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2_000_000 })),
              producer: fc.integer({ min: 0, max: 1 }),
            }),
          },
          { weight: 3, arbitrary: fc.constant<Step>({ kind: 'publish' }) },
          {
            weight: 2,
            arbitrary: fc.record({ kind: fc.constant('consume' as const), count: fc.integer({ min: 1, max: 16 }) }),
          },
        ),
        { minLength: 50, maxLength: 600 },
      )
      .map((steps) => ({ ...s, steps, producers: 2 })),
  );
  fc.assert(fc.property(twoArb, runScenario), { numRuns: 300, seed: 0x2b22 });
});
