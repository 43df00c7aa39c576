/**
 * The demo's parts: the simulated service never serves more batches at once than its capacity and serves them all in
 * arrival order; its service time drifts within its range; the fleet stays within its bound and its speed controls
 * work; the status line and summary carry the numbers they claim.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { drainedCleanly, drainOutcome, formatStatusLine, formatSummary } from '../../src/router/status.js';
import { heldBucketBoundNs } from '../../src/pipeline/held-time.js';
import { heldTimeWindow } from '../../src/pipeline/stats.js';
import { HELD_BUCKET_COUNT } from '../../src/shm/layout.js';
import { Fleet, mulberry32, type FleetPing } from '../../src/fences/synthetic-fleet.js';
import { SimulatedService } from '../../src/demo/simulated-service.js';
import type { DownstreamStats, RouterStats } from '../../src/pipeline/stats.js';

test('the simulated service serves at most `capacity` batches at once, all of them, first come first served', async () => {
  const service = new SimulatedService(
    { capacity: 3, minServiceMs: 1, maxServiceMs: 3, driftPeriodMs: 50 },
    () => performance.now(),
    mulberry32(1),
  );
  let most = 0;
  const order: number[] = [];
  const calls = Array.from({ length: 20 }, (_, i) =>
    service.handle(i + 1).then(() => {
      order.push(i);
      most = Math.max(most, service.inService);
    }),
  );
  // Sample while they run: the servers in use never exceed the capacity.
  const probe = setInterval(() => (most = Math.max(most, service.inService)), 0);
  await Promise.all(calls);
  clearInterval(probe);
  assert.ok(most <= 3 && most >= 1, `at most 3 in service, saw ${most}`);
  assert.equal(service.servedBatches, 20);
  assert.equal(service.servedTriggers, (20 * 21) / 2);
  assert.equal(service.inService, 0);
  assert.equal(service.queued, 0);
  assert.equal(service.maxQueued, 17, 'all but the first three waited');
});

test('the service time drifts between its low and high values', () => {
  let now = 0;
  const s = new SimulatedService(
    { minServiceMs: 2, maxServiceMs: 20, driftPeriodMs: 40_000 },
    () => now,
    () => 0.5,
  );
  assert.equal(s.baseServiceMs(0), 2);
  assert.ok(Math.abs(s.baseServiceMs(20_000) - 20) < 1e-9);
  for (now = 0; now < 80_000; now += 777) {
    const v = s.baseServiceMs(now);
    assert.ok(v >= 2 && v <= 20, `${v} within [2, 20]`);
  }
  assert.throws(
    () =>
      new SimulatedService(
        { capacity: 0 },
        () => 0,
        () => 0,
      ),
    /options\.capacity must be an integer in \[1, 4096\], got 0/,
  );
  assert.throws(
    () =>
      new SimulatedService(
        { minServiceMs: 30, maxServiceMs: 20 },
        () => 0,
        () => 0,
      ),
    /options\.minServiceMs/,
  );
});

test('the fleet turns moving devices back at its bound and parks and starts devices on request', () => {
  const centreLat = 52.52;
  const centreLon = 13.405;
  const fleet = new Fleet({
    devices: 200,
    seed: 3,
    centreLat,
    centreLon,
    radiusM: 1000,
    boundRadiusM: 1000,
    parkedFraction: 0.25,
  });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  const mPerDegLon = 111_195 * Math.cos((centreLat * Math.PI) / 180);
  let farthestM = 0;
  // Ten simulated minutes at one ping a second: at 23 m/s a free device would be 13 km away.
  for (let t = 1; t <= 600; t++) {
    for (let i = 0; i < fleet.size; i++) {
      fleet.advance(i, ping, 1_000_000 + t * 1000);
      const d = Math.hypot((ping.lat - centreLat) * 111_195, (ping.lon - centreLon) * mPerDegLon);
      farthestM = Math.max(farthestM, d);
    }
  }
  // A device beyond the bound turns back within a few pings (heading spread +-20 degrees).
  assert.ok(farthestM < 1000 + 23 * 10, `farthest ${farthestM.toFixed(0)} m`);
  let parked = 0;
  for (let i = 0; i < fleet.size; i++) if (fleet.speedOf(i) === 0) parked++;
  assert.ok(parked > 20 && parked < 80, `about a quarter parked: ${parked}`);
  fleet.setSpeed(0, 0);
  fleet.advance(0, ping, 2_000_000);
  const before = { lat: ping.lat, lon: ping.lon };
  fleet.advance(0, ping, 2_010_000);
  assert.ok(
    Math.hypot((ping.lat - before.lat) * 111_195, (ping.lon - before.lon) * mPerDegLon) < 5,
    'a parked device only jitters',
  );
  assert.ok(ping.speed < 0.5, 'a parked device reports a stationary speed');
  fleet.setSpeed(0, 10);
  fleet.advance(0, ping, 2_020_000);
  assert.equal(ping.speed, 10);
  assert.throws(() => fleet.setSpeed(0, -1), /speedMps must be a number in \[0, 1000\)/);
  assert.equal(fleet.idOf(5), 'veh-3-5');
});

function stats(over: Partial<RouterStats>): RouterStats {
  const base: RouterStats = {
    frames: 0,
    accepted: 0,
    rejected: {},
    rejectedTotal: 0,
    devices: 0,
    deviceLifecycle: { expired: 0, revived: 0, freed: 0, reused: 0, expiryExits: 0 },
    offered: { idle: 0, transition: 0, compliance: 0 },
    admitted: { idle: 0, transition: 0, compliance: 0 },
    shed: { idle: { rate_limited: 0 }, transition: { ring_full: 0 }, compliance: { ring_full: 0 } },
    offeredTotal: 0,
    admittedTotal: 0,
    shedTotal: 0,
    admittedByIngestThread: [0],
    processed: 0,
    stale: 0,
    lost: 0,
    triggers: { ENTER: 0, EXIT: 0, DWELL: 0, CROSS: 0 },
    triggersTotal: 0,
    triggersDispatched: 0,
    unrouted: 0,
    deliveriesOffered: 0,
    recovered: 0,
    delivered: 0,
    replayed: 0,
    deadLettered: 0,
    deadLetteredByReason: { rejected: 0, expired: 0, undeliverable: 0 },
    final: 0,
    inFlight: 0,
    carriedOver: 0,
    deadLetterDropped: { over_budget: 0, too_old: 0, disk_error: 0 },
    durableWriteErrors: 0,
    durableFailingDownstreams: 0,
    downstreams: [],
    heldTimeP50Ms: Number.NaN,
    heldTimeP99Ms: Number.NaN,
    heldTimeMaxMs: Number.NaN,
    heldTimeSamples: 0,
    heldTimeBucketCounts: new Array<number>(HELD_BUCKET_COUNT).fill(0),
    replayHeldTimeP99Ms: Number.NaN,
    replayHeldTimeSamples: 0,
    checkpoints: 0,
    checkpointFailures: 0,
    checkpointLastMs: 0,
    checkpointPauseMs: 0,
    checkpointBytes: 0,
    checkpointDevices: 0,
    tasks: 0,
    reloads: 0,
    fenceEdits: 0,
    fenceEditsFailed: 0,
    fenceEditLastMs: 0,
    fenceOverflows: 0,
    candidateOverflows: 0,
    implausibleSegments: 0,
    crossOverBudget: 0,
    generationMismatches: 0,
    untrackedFences: [],
    partitionsAfterGap: 0,
    damagedLost: 0,
    inputErrors: 0,
    unconfiguredTriggers: 0,
  };
  return { ...base, ...over };
}

test('the status line shows the rate since the previous snapshot, shed by lane, triggers, downstreams and P99', () => {
  const prev = stats({ accepted: 1000 });
  const ds: DownstreamStats = {
    name: 'svc',
    limit: 12.4,
    inflight: 3,
    rttMinMs: 2,
    breakerState: 'closed',
    breakerOpens: 0,
    backoffs: 0,
    deviceHolds: 0,
    queueDepth: 0,
    sending: 1,
    offered: 9,
    recovered: 0,
    delivered: 7,
    replayed: 0,
    deadLettered: 1,
    deadLetteredByReason: { rejected: 1, expired: 0, undeliverable: 0 },
    final: 1,
    inFlight: 1,
    parked: 0,
    spilled: 0,
    backlogRecords: 2,
    backlogBytes: 300,
    carriedOver: 0,
    backpressureWaits: 0,
    memoryOnly: 0,
    deadLetterDropped: { over_budget: 0, too_old: 0, disk_error: 0 },
    deadLetterBytes: 0,
    durableWriteErrors: 0,
    durableFailing: false,
    damagedRecords: 0,
    damagedLost: 0,
    cursorDamagedCopies: 0,
    cursorFallbacks: 0,
    heldTimeP99MsByLane: { idle: Number.NaN, transition: Number.NaN, compliance: Number.NaN },
    heldTimeSamplesByLane: { idle: 0, transition: 0, compliance: 0 },
  };
  const cur = stats({
    accepted: 3000,
    shed: { idle: { rate_limited: 5, ring_full: 2 }, transition: { ring_full: 1 }, compliance: { ring_full: 0 } },
    triggers: { ENTER: 4, EXIT: 3, DWELL: 2, CROSS: 1 },
    downstreams: [ds],
    heldTimeP99Ms: 3.456,
  });
  const line = formatStatusLine(prev, cur, 500, 2400);
  assert.equal(
    line,
    't=2s ingest=4000/s shed(idle=7 transition=1 compliance=0) triggers(ENTER=4 EXIT=3 DWELL=2 CROSS=1) svc(limit=12 inflight=3 delivered=7 backlog=2 dead_lettered=1) held_p99=n/a held_p99_all=3.46ms',
  );
  assert.match(formatStatusLine(prev, stats({}), 1000, 1000), /held_p99=n\/a held_p99_all=n\/a$/);
});

test("the status line's held_p99 is the last interval's, from the histogram's deltas; held_p99_all is cumulative", () => {
  // Bucket 30 holds the cold start (about 8 ms), bucket 10 (about 93 us) the steady traffic.
  const at = (counts: Record<number, number>): number[] => {
    const a = new Array<number>(HELD_BUCKET_COUNT).fill(0);
    for (const [i, n] of Object.entries(counts)) a[Number(i)] = n;
    return a;
  };
  const prev = stats({ heldTimeSamples: 1000, heldTimeBucketCounts: at({ 30: 1000 }), heldTimeP99Ms: 8 });
  const cur = stats({
    heldTimeSamples: 2000,
    heldTimeBucketCounts: at({ 10: 995, 20: 5, 30: 1000 }),
    heldTimeP99Ms: 8,
  });
  const w = heldTimeWindow(prev, cur);
  assert.equal(w.samples, 1000);
  assert.equal(w.p50Ms, heldBucketBoundNs(10) / 1e6);
  // 995 of 1000 at bucket 10: the 990th is there; the 1000th (max) is in bucket 20.
  assert.equal(w.p99Ms, heldBucketBoundNs(10) / 1e6);
  assert.equal(w.maxMs, heldBucketBoundNs(20) / 1e6);
  assert.match(formatStatusLine(prev, cur, 1000, 3000), / held_p99=0\.09ms held_p99_all=8\.00ms$/);
  // A window with one sample in the overflow bucket reports the last bound, not the cumulative maximum.
  const over = stats({
    heldTimeSamples: 2001,
    heldTimeBucketCounts: at({ 10: 995, 20: 5, 30: 1000, [HELD_BUCKET_COUNT - 1]: 1 }),
  });
  assert.equal(heldTimeWindow(cur, over).p99Ms, heldBucketBoundNs(HELD_BUCKET_COUNT - 2) / 1e6);
  assert.ok(Number.isNaN(heldTimeWindow(cur, cur).p99Ms));
});

test('the summary reports the accounting, the state directory, and how the drain ended', () => {
  const summary = (over: Partial<RouterStats>) => ({
    ...stats({
      accepted: 10,
      admittedTotal: 10,
      processed: 10,
      triggersTotal: 4,
      deliveriesOffered: 4,
      delivered: 4,
      ...over,
    }),
    uptimeMs: 5000,
    stateDir: '/var/lib/geofence' as string | null,
    checkpointIntervalMs: 5000,
    lastCheckpointMs: 0,
    finalCheckpointFailed: false,
  });
  const clean = summary({});
  const lines = formatSummary(clean, 120);
  assert.ok(drainedCleanly(clean));
  assert.equal(drainOutcome(clean), 'delivered');
  assert.match(lines.join('\n'), /admitted=10 processed=10/);
  assert.match(lines.join('\n'), /state {6}\/var\/lib\/geofence: checkpoint every 5\.0s/);
  assert.match(lines[lines.length - 1]!, /^drained cleanly/);
  const short = summary({ processed: 9 });
  assert.equal(drainOutcome(short), 'lost');
  assert.match(formatSummary(short, 1).at(-1)!, /^drain incomplete: admitted=10 processed=9/);
  assert.equal(drainOutcome(summary({ lost: 1 })), 'lost');
  // Dead letters and triggers kept for the next start are not losses, but not a clean delivery either.
  const kept = summary({
    delivered: 2,
    final: 1,
    carriedOver: 1,
    deadLettered: 1,
    deadLetteredByReason: { rejected: 1, expired: 0, undeliverable: 0 },
  });
  assert.equal(drainOutcome(kept), 'kept');
  assert.equal(drainedCleanly(kept), false);
  assert.match(
    formatSummary(kept, 1).at(-1)!,
    /^drained, nothing lost: 1 triggers dead-lettered for good, 1 kept in the state directory/,
  );
  assert.match(formatSummary(kept, 1).join('\n'), /dead_lettered\(rejected=1 expired=0 undeliverable=0\)/);
  assert.match(
    formatSummary({ ...clean, stateDir: null }, 1).join('\n'),
    /temporary directory \(removed\): nothing survives a restart/,
  );
});
