/**
 * Lane classification: compliance first (never demoted by an explicit lane), explicit lane, stationarity by speed
 * or by distance from the motion anchor; allocation-free.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Lane } from '../../src/shm/layout.js';
import {
  NO_COMPLIANCE,
  advanceMotionAnchor,
  approxDistanceM,
  classifyLane,
  withinAnchorRadius,
  type LanePredicates,
} from '../../src/ingest/lane-classifier.js';
import { PF_LAT_F64, PF_LON_F64, PF_SPEED_MPS_F64, PingFields } from '../../src/ingest/ping-fields.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import { makeEdge, ping } from './support.js';

const T = { stationarySpeedMps: 0.5, stationaryRadiusM: 10 };
const NaN_ = Number.NaN;

/** Fields of a ping at (lat, lon) with `speedMps` (NaN: absent) and `explicitLane` (-1: absent). */
function at(lat: number, lon: number, speedMps: number, explicitLane: number): PingFields {
  const f = new PingFields();
  f.values[PF_LAT_F64] = lat;
  f.values[PF_LON_F64] = lon;
  f.values[PF_SPEED_MPS_F64] = speedMps;
  f.explicitLane = explicitLane;
  return f;
}

/** Anchor arrays of one slot holding (lat, lon); NaN for no anchor yet. */
function anchor(lat: number, lon: number): [Float64Array, Float64Array] {
  return [Float64Array.of(lat), Float64Array.of(lon)];
}

class BoxPredicates implements LanePredicates {
  insideSlots = new Set<number>();
  nearCompliance(values: Float64Array): boolean {
    const lat = values[PF_LAT_F64]!;
    const lon = values[PF_LON_F64]!;
    return lat > 10 && lat < 11 && lon > 20 && lon < 21;
  }
  deviceInsideCompliance(slot: number): boolean {
    return this.insideSlots.has(slot);
  }
}

test('compliance wins over everything, including an explicit lower lane', () => {
  const p = new BoxPredicates();
  assert.equal(classifyLane(0, at(10.5, 20.5, 0, Lane.IDLE), ...anchor(10.5, 20.5), p, T), Lane.COMPLIANCE);
  p.insideSlots.add(3);
  assert.equal(classifyLane(3, at(0, 0, 0, Lane.IDLE), ...anchor(0, 0), p, T), Lane.COMPLIANCE);
  assert.equal(classifyLane(4, at(0, 0, 0, NaN_ as number), ...anchor(0, 0), p, T), Lane.IDLE);
});

test('explicit lane, then speed, then distance from the anchor', () => {
  const p = NO_COMPLIANCE;
  assert.equal(classifyLane(0, at(0, 0, 30, Lane.IDLE), ...anchor(NaN_, NaN_), p, T), Lane.IDLE);
  assert.equal(classifyLane(0, at(0, 0, 0, Lane.COMPLIANCE), ...anchor(NaN_, NaN_), p, T), Lane.COMPLIANCE);
  assert.equal(classifyLane(0, at(0, 0, 0.2, -1), ...anchor(NaN_, NaN_), p, T), Lane.IDLE);
  assert.equal(classifyLane(0, at(0, 0, 3, -1), ...anchor(0, 0), p, T), Lane.TRANSITION);
  assert.equal(
    classifyLane(0, at(0, 0, NaN_, -1), ...anchor(NaN_, NaN_), p, T),
    Lane.TRANSITION,
    'first ping: unknown motion',
  );
  // 5 m north of the anchor: stationary; 20 m: moving.
  const dLat5m = 5 / 111_195;
  assert.equal(classifyLane(0, at(dLat5m, 0, NaN_, -1), ...anchor(0, 0), p, T), Lane.IDLE);
  assert.equal(classifyLane(0, at(4 * dLat5m, 0, NaN_, -1), ...anchor(0, 0), p, T), Lane.TRANSITION);
});

test('the anchor moves only after the radius, so a slow creep is seen as motion', () => {
  const lat = new Float64Array(1).fill(NaN_);
  const lon = new Float64Array(1).fill(NaN_);
  const step = 3 / 111_195; // 3 m per ping
  const lanes: Lane[] = [];
  for (let i = 0; i < 10; i++) {
    const f = at(i * step, 0, NaN_, -1);
    lanes.push(classifyLane(0, f, lat, lon, NO_COMPLIANCE, T));
    advanceMotionAnchor(0, f.values, lat, lon, T);
  }
  // Anchor at 0 m, then 12 m (i = 4), then 24 m (i = 8).
  assert.deepEqual(lanes, [1, 0, 0, 0, 1, 0, 0, 0, 1, 0]);
  assert.ok(Math.abs(approxDistanceM(0, 179.9999, 0, -179.9999) - 22.24) < 0.1, 'short way across the antimeridian');
  // The per-ping test measures the same distance (11.12 m here) without doubles crossing the call.
  const across = at(0, -179.99995, NaN_, -1).values;
  assert.equal(withinAnchorRadius(0, across, ...anchor(0, 179.99995), { ...T, stationaryRadiusM: 11.2 }), true);
  assert.equal(withinAnchorRadius(0, across, ...anchor(0, 179.99995), { ...T, stationaryRadiusM: 11.1 }), false);
  assert.equal(withinAnchorRadius(0, across, ...anchor(NaN_, NaN_), T), false, 'no anchor yet');
});

test('the edge classifies with its predicates', () => {
  const p = new BoxPredicates();
  const fx = makeEdge({}, { predicates: p });
  fx.edge.push(ping('c', 1, { lat: 10.5, lon: 20.5 }) as never);
  fx.edge.push(ping('s', 1, { speed: 0.1 }) as never);
  fx.edge.push(ping('m', 1) as never);
  assert.deepEqual(
    fx.sink.pings.map((x) => x.lane),
    [Lane.COMPLIANCE, Lane.IDLE, Lane.TRANSITION],
  );
});

test('classification and anchor updates allocate nothing', async () => {
  const p = new BoxPredicates();
  const lat = new Float64Array(1024).fill(NaN_);
  const lon = new Float64Array(1024).fill(NaN_);
  const f = new PingFields();
  const values = f.values;
  let sink = 0;
  const report = await measureAllocations(3_000_000, (i) => {
    const slot = i & 1023;
    values[PF_LAT_F64] = 10 + (i % 997) * 1e-3;
    values[PF_LON_F64] = 20 + (i % 991) * 1e-3;
    values[PF_SPEED_MPS_F64] = i % 5 === 0 ? NaN_ : (i % 7) * 0.2;
    f.explicitLane = i % 11 === 0 ? 0 : -1;
    sink += classifyLane(slot, f, lat, lon, p, T);
    advanceMotionAnchor(slot, values, lat, lon, T);
  });
  assert.ok(sink > 0);
  assert.equal(report.gcCount, 0);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes}`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes}`);
});
