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
import {
  ADM_BLOCK_F64,
  ADM_OFFERED_F64,
  ADM_SHED_F64,
  Lane,
  SHED_REASON_COUNT,
  ShedReason,
  TEL_ADMIT_TIME_NS_F64,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';

const T0 = 5e15;

function setup(capacitySlots: number, options = {}) {
  const ring = SpscRing.wrap(allocateTelemetryRing(capacitySlots, DEFAULT_ADMISSION_OPTIONS.reservedFraction));
  const counters = new Float64Array(allocateAdmissionCounters(4));
  const admission = new LaneAdmission(
    ring,
    counters,
    2 * ADM_BLOCK_F64,
    { ...DEFAULT_ADMISSION_OPTIONS, ...options },
    T0,
  );
  return { ring, counters, admission };
}

test('shed results encode their reason', () => {
  for (const r of [ShedReason.RING_FULL, ShedReason.RATE_LIMITED, ShedReason.DRAINING, ShedReason.QUEUE_DELAY])
    assert.equal(shedReasonOf(-1 - r), r);
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
  const { ring, admission } = setup(1024, { idleBucketCapacity: 3, idleBucketRatePerSec: 1000 });
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
  const { ring, admission } = setup(64, { idleBucketCapacity: 1, idleBucketRatePerSec: 0 });
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

/** Admission with a queue-delay controller, and helpers that stamp admitted records and let the controller look. */
function delaySetup(capacitySlots: number) {
  // A low watermark: spells need the ring at or above it, and these rings hold a few records.
  const { ring, admission } = setup(capacitySlots, {
    queueDelayTargetMs: 5,
    queueDelayIntervalMs: 100,
    watermarkFraction: 0.005,
  });
  const cell = new Float64Array(1);
  const admitStamped = (lane: Lane, t: number): number => {
    const slot = admission.admit(lane, t);
    if (slot >= 0) ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = t;
    return slot;
  };
  const look = (t: number): boolean => {
    cell[0] = t;
    admission.observeQueueDelay(cell, 0, false);
    return admission.isDelayShedding();
  };
  return { ring, admission, cell, admitStamped, look };
}

const MS = 1e6;

test('queue delay: a spell starts once the oldest record has waited past the target for the interval; it sheds live IDLE and TRANSITION pings, never COMPLIANCE or pausable ones', () => {
  const { ring, admission, cell, admitStamped, look } = delaySetup(1024);
  for (let i = 0; i < 40; i++) admitStamped(Lane.TRANSITION, T0);
  ring.publish();
  assert.equal(look(T0 + 4 * MS), false, 'under the target');
  assert.equal(look(T0 + 6 * MS), false, 'above the target: the interval starts');
  assert.ok(admitStamped(Lane.TRANSITION, T0 + 50 * MS) >= 0, 'a burst shorter than the interval is queued');
  assert.equal(look(T0 + 105 * MS), false, '99 ms above the target');
  assert.equal(look(T0 + 106 * MS), true, '100 ms above the target');
  // Nothing drained yet: the spell's depth limit is its floor (16), and 41 records wait.
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 106 * MS), -1 - ShedReason.QUEUE_DELAY);
  assert.equal(admitStamped(Lane.IDLE, T0 + 106 * MS), -1 - ShedReason.QUEUE_DELAY);
  assert.ok(admitStamped(Lane.COMPLIANCE, T0 + 106 * MS) >= 0, 'COMPLIANCE is never shed for delay');
  cell[0] = T0 + 106 * MS;
  assert.ok(admission.admitPausableAt(Lane.TRANSITION, cell, 0) >= 0, 'a pausable source waits for room instead');
  assert.equal(admission.shedCount(Lane.TRANSITION, ShedReason.QUEUE_DELAY), 1);
  assert.equal(admission.shedCount(Lane.IDLE, ShedReason.QUEUE_DELAY), 1);
  // The consumer catches up: during the spell the lanes are admitted up to the depth limit.
  ring.publish();
  ring.release(ring.available());
  assert.equal(look(T0 + 150 * MS), true, 'a ping was shed less than an interval ago');
  for (let i = 0; i < 16; i++) assert.ok(admitStamped(Lane.TRANSITION, T0 + 150 * MS) >= 0, `admit ${i}`);
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 150 * MS), -1 - ShedReason.QUEUE_DELAY);
  ring.publish();
  ring.release(ring.available());
  // Nothing shed for an interval and no wait: the spell ends.
  assert.equal(look(T0 + 249 * MS), true);
  assert.equal(look(T0 + 251 * MS), false);
  for (let i = 0; i < 100; i++) assert.ok(admitStamped(Lane.TRANSITION, T0 + 251 * MS) >= 0);
  ring.publish();
  // Above the target again less than an interval after the spell ended: a spell starts at once.
  assert.equal(look(T0 + 257 * MS), true);
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 257 * MS), -1 - ShedReason.QUEUE_DELAY);
});

test('queue delay: during a spell the depth limit is what the consumer drains within the target', () => {
  const { ring, admitStamped, look } = delaySetup(4096);
  look(T0);
  for (let i = 0; i < 2000; i++) admitStamped(Lane.TRANSITION, T0);
  ring.publish();
  // The consumer drains 200 records per 20 ms window: 10 per ms, so 50 within the 5 ms target.
  for (let k = 1; k <= 5; k++) {
    ring.release(200);
    assert.equal(look(T0 + k * 20 * MS), false, `window ${k}`);
  }
  ring.release(200);
  assert.equal(look(T0 + 120 * MS), true, 'above the target since 20 ms');
  // 800 wait; 760 more drain, then 10 are admitted up to the limit of 50.
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 120 * MS), -1 - ShedReason.QUEUE_DELAY);
  ring.release(760);
  for (let i = 0; i < 10; i++) assert.ok(admitStamped(Lane.TRANSITION, T0 + 120 * MS) >= 0, `admit ${i}`);
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 120 * MS), -1 - ShedReason.QUEUE_DELAY);
  assert.ok(admitStamped(Lane.COMPLIANCE, T0 + 120 * MS) >= 0);
});

test('queue delay: no spell while the ring is under the watermark, however long its oldest record waited', () => {
  const { ring, admission } = setup(1024, { queueDelayTargetMs: 5, queueDelayIntervalMs: 100 });
  const cell = new Float64Array(1);
  for (let i = 0; i < 600; i++) {
    const slot = admission.admit(Lane.TRANSITION, T0);
    ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = T0;
  }
  ring.publish();
  // 600 of 1024 slots: under the 615-slot watermark; the consumer stalled for a second.
  for (let t = 0; t <= 1000; t += 10) {
    cell[0] = T0 + t * 1e6;
    admission.observeQueueDelay(cell, 0, false);
  }
  assert.equal(admission.isDelayShedding(), false);
  assert.ok(admission.admit(Lane.TRANSITION, T0 + 1000e6) >= 0);
});

test('queue delay: a target of 0 turns the controller off', () => {
  const { ring, admission } = setup(64, { queueDelayTargetMs: 0 });
  const slot = admission.admit(Lane.TRANSITION, T0);
  ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = T0;
  ring.publish();
  const cell = new Float64Array([T0 + 60_000e6]);
  admission.observeQueueDelay(cell, 0, false);
  assert.equal(admission.isDelayShedding(), false);
  assert.ok(admission.admit(Lane.TRANSITION, T0 + 60_000e6) >= 0);
});

test('queue delay: after a window in which the consumer ran out of records, the depth limit grows instead of following the drain rate down', () => {
  const { ring, admission, cell, admitStamped } = delaySetup(4096);
  const look = (t: number, idle: boolean): boolean => {
    cell[0] = t;
    admission.observeQueueDelay(cell, 0, idle);
    return admission.isDelayShedding();
  };
  look(T0, false);
  for (let i = 0; i < 100; i++) admitStamped(Lane.TRANSITION, T0);
  ring.publish();
  // Nothing drains: the spell starts with the floor of 16.
  assert.equal(look(T0 + 10 * MS, false), false);
  assert.equal(look(T0 + 110 * MS, false), true);
  ring.release(ring.available());
  for (let i = 0; i < 16; i++) assert.ok(admitStamped(Lane.TRANSITION, T0 + 110 * MS) >= 0);
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 110 * MS), -1 - ShedReason.QUEUE_DELAY);
  ring.publish();
  ring.release(ring.available());
  // The consumer found every ring empty during the window: 16 x 1.5 = 24.
  assert.equal(look(T0 + 115 * MS, true), true);
  assert.equal(look(T0 + 131 * MS, false), true);
  for (let i = 0; i < 24; i++) assert.ok(admitStamped(Lane.TRANSITION, T0 + 131 * MS) >= 0, `admit ${i}`);
  assert.equal(admitStamped(Lane.TRANSITION, T0 + 131 * MS), -1 - ShedReason.QUEUE_DELAY);
});

/**
 * A ring of 1,024 slots (watermark 615) fed every 10 ms with `arrive` stamped records while its consumer reads up to
 * `read(t)` of them; returns the time of the first look that found a spell (NaN: none) and the deepest depth seen.
 */
function drive(
  arrive: (t: number) => number,
  read: (t: number) => number,
  untilMs: number,
): { spellAtMs: number; maxDepth: number } {
  const { ring, admission } = setup(1024, { queueDelayTargetMs: 5, queueDelayIntervalMs: 100 });
  const cell = new Float64Array(1);
  let maxDepth = 0;
  for (let t = 0; t <= untilMs; t += 10) {
    const now = T0 + t * MS;
    for (let i = arrive(t); i > 0; i--) {
      const slot = admission.admit(Lane.TRANSITION, now);
      if (slot >= 0) ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = now;
    }
    ring.publish();
    ring.release(Math.min(ring.available(), read(t)));
    maxDepth = Math.max(maxDepth, ring.refreshDepth());
    cell[0] = now;
    admission.observeQueueDelay(cell, 0, false);
    if (admission.isDelayShedding()) return { spellAtMs: t, maxDepth };
  }
  return { spellAtMs: NaN, maxDepth };
}

test('queue delay: below the watermark, a backlog that builds while the consumer reads flat out starts a spell; a stalled consumer, one catching up and one that empties the ring do not', () => {
  // 12 arrive and 10 are read every 10 ms: the backlog grows by 2 a look, the oldest record waits ever longer.
  const ramp = drive(
    () => 12,
    () => 10,
    3000,
  );
  // The wait passes the target at about 30 ms; ten intervals later the spell starts.
  assert.ok(ramp.spellAtMs > 1000 && ramp.spellAtMs <= 1100, `spell at ${ramp.spellAtMs} ms`);
  assert.ok(ramp.maxDepth < 300, `shed far under the 615-slot watermark: depth ${ramp.maxDepth}`);
  // A stall leaves a standing queue: 10 arrive and 10 are read every 10 ms, except for 150 ms without reading (a
  // busy host). The queue may yet drain: the spell waits for ten intervals of it.
  const standing = drive(
    () => 10,
    (t) => (t >= 2000 && t < 2150 ? 0 : 10),
    5000,
  );
  assert.ok(standing.spellAtMs > 3000, `standing queue: spell at ${standing.spellAtMs} ms`);
  // A consumer that stalls for a second with 500 records waiting (under the watermark): no spell.
  const stalled = drive(
    (t) => (t === 0 ? 500 : 0),
    () => 0,
    1000,
  );
  assert.ok(Number.isNaN(stalled.spellAtMs), `no spell for a stall: ${stalled.spellAtMs}`);
  // Stalled for 200 ms with arrivals going on, then catching up at twice the arrival rate: the depth shrinks, and
  // although the oldest record waits past the target for longer than the interval, no spell starts.
  const catchingUp = drive(
    () => 10,
    (t) => (t < 200 ? 0 : 20),
    1000,
  );
  assert.ok(Number.isNaN(catchingUp.spellAtMs), `no spell while catching up: ${catchingUp.spellAtMs}`);
  // A consumer that takes everything every 40 ms: its records wait up to 40 ms, but it empties the ring.
  const batching = drive(
    () => 10,
    (t) => (t % 40 === 30 ? 1000 : 0),
    2000,
  );
  assert.ok(Number.isNaN(batching.spellAtMs), `no spell for a batching consumer: ${batching.spellAtMs}`);
});

test('queue delay: an overload that comes back soon after a spell ended is shed again after one interval, not ten', () => {
  const { ring, admission } = setup(1024, { queueDelayTargetMs: 5, queueDelayIntervalMs: 100 });
  const cell = new Float64Array(1);
  const changes: [number, boolean][] = [];
  let shedding = false;
  // Overloaded (12 in, 10 read per 10 ms) until 1.5 s, light (5 in) until 2 s, overloaded again from 2 s.
  for (let t = 0; t <= 4000; t += 10) {
    const now = T0 + t * MS;
    const arrive = t < 1500 || t >= 2000 ? 12 : 5;
    for (let i = 0; i < arrive; i++) {
      const slot = admission.admit(Lane.TRANSITION, now);
      if (slot >= 0) ring.f64[slot * ring.strideF64 + TEL_ADMIT_TIME_NS_F64] = now;
    }
    ring.publish();
    ring.release(Math.min(ring.available(), 10));
    ring.refreshDepth();
    cell[0] = now;
    admission.observeQueueDelay(cell, 0, false);
    if (admission.isDelayShedding() !== shedding) {
      shedding = !shedding;
      changes.push([t, shedding]);
    }
  }
  assert.ok(changes.length >= 3, `a spell, its end and a second spell: ${JSON.stringify(changes)}`);
  const [first, end, second] = changes as [[number, boolean], [number, boolean], [number, boolean]];
  assert.ok(first[1] && first[0] > 1000 && first[0] <= 1100, `first spell after ten intervals: ${first[0]}`);
  assert.ok(!end[1] && end[0] >= 1500 && end[0] < 2000, `it ends in the light phase: ${end[0]}`);
  assert.ok(second[1] && second[0] > 2000 && second[0] < 2400, `the second within a few intervals: ${second[0]}`);
});
