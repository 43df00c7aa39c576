/**
 * Lane classification of a ping (ingest thread): pure, allocation-free, with the spatial questions injected.
 *
 * Order (first match wins):
 * 1. COMPLIANCE when the ping is inside or near a compliance fence's box (`nearCompliance(values)`) or the device
 *    was inside a compliance fence (`deviceInsideCompliance(slot)`). An explicit lane never demotes such a ping:
 *    every ping that could produce a compliance trigger travels in the COMPLIANCE lane.
 * 2. The explicit `lane` the device sent, when present.
 * 3. IDLE when the device is stationary: its reported speed is below `stationarySpeedMps`, or, with no speed
 *    reported, it is within `stationaryRadiusM` of its motion anchor (the position where it was last seen to move,
 *    see `advanceMotionAnchor`). Comparing with the last ping instead would call a fast-pinging mover stationary.
 * 4. TRANSITION otherwise (including a device's first ping, whose motion is unknown).
 *
 * Nothing here takes or returns a double: positions and speeds are read from `PingFields.values` and the anchor
 * arrays, so the per-ping path stays allocation-free however V8 inlines it.
 */
import { Lane } from '../shm/layout.js';
import { PF_LAT_F64, PF_LON_F64, PF_SPEED_MPS_F64, type PingFields } from './ping-fields.js';

/**
 * The spatial questions classification asks; the fence store answers them (allocation-free, any thread-local).
 * No double crosses these calls: the position is read from cells, so an implementation too large for V8 to inline
 * (a spatial index query) still allocates nothing per ping.
 */
export interface LanePredicates {
  /**
   * True when the position `values[PF_LAT_F64]` (latitude), `values[PF_LON_F64]` (longitude) is inside or near the
   * bounding box of any compliance fence. `values` is the ping's `PingFields.values`; read those two cells only.
   */
  nearCompliance(values: Float64Array): boolean;
  /** True when the device in `slot` is currently inside a compliance fence. */
  deviceInsideCompliance(slot: number): boolean;
}

/** Predicates for a router with no compliance fences. */
export const NO_COMPLIANCE: LanePredicates = {
  nearCompliance: () => false,
  deviceInsideCompliance: () => false,
};

/** Thresholds of stationarity. */
export interface StationaryThresholds {
  /** Reported speed below this is stationary, m/s. */
  stationarySpeedMps: number;
  /** With no speed reported, a device within this distance of its motion anchor is stationary, metres. */
  stationaryRadiusM: number;
}

/** Mean Earth radius, metres. */
const EARTH_RADIUS_M = 6_371_008.8;
const DEG_TO_RAD = Math.PI / 180;

/**
 * Distance in metres between two positions by the equirectangular approximation: within 0.1% of the great-circle
 * distance at the tens-of-metres scale stationarity works at. Takes and returns doubles, so it is for tests and cold
 * code: per ping, `withinAnchorRadius` computes the same distance without a double crossing a call.
 */
export function approxDistanceM(lat1: number, lon1: number, lat2: number, lon2: number): number {
  let dLon = lon2 - lon1;
  // Take the short way round across the antimeridian.
  if (dLon > 180) dLon -= 360;
  else if (dLon < -180) dLon += 360;
  const x = dLon * DEG_TO_RAD * Math.cos(((lat1 + lat2) / 2) * DEG_TO_RAD);
  const y = (lat2 - lat1) * DEG_TO_RAD;
  return Math.sqrt(x * x + y * y) * EARTH_RADIUS_M;
}

/**
 * True when the ping's position (`values`, PF_* cells) lies within `radiusM` of the motion anchor of `slot`
 * (`approxDistanceM` < `radiusM`); false when the slot has no anchor yet (NaN). Reads every double from a cell or an
 * object and returns a boolean, so it allocates nothing whether or not V8 inlines it.
 */
export function withinAnchorRadius(
  slot: number,
  values: Float64Array,
  anchorLat: Float64Array,
  anchorLon: Float64Array,
  thresholds: StationaryThresholds,
): boolean {
  const aLat = anchorLat[slot]!;
  const lat = values[PF_LAT_F64]!;
  let dLon = values[PF_LON_F64]! - anchorLon[slot]!;
  // Take the short way round across the antimeridian.
  if (dLon > 180) dLon -= 360;
  else if (dLon < -180) dLon += 360;
  const x = dLon * DEG_TO_RAD * Math.cos(((aLat + lat) / 2) * DEG_TO_RAD);
  const y = (lat - aLat) * DEG_TO_RAD;
  // NaN (no anchor yet) compares false.
  return Math.sqrt(x * x + y * y) * EARTH_RADIUS_M < thresholds.stationaryRadiusM;
}

/**
 * The lane of one ping: its position and speed in `fields.values`, `fields.explicitLane` (-1 when absent), the
 * device's motion anchor in `anchorLat[slot]` / `anchorLon[slot]` (NaN before its first ping). Pure: reads only its
 * arguments and the predicates; allocation-free (no double crosses a call).
 */
export function classifyLane(
  slot: number,
  fields: PingFields,
  anchorLat: Float64Array,
  anchorLon: Float64Array,
  predicates: LanePredicates,
  thresholds: StationaryThresholds,
): Lane {
  const values = fields.values;
  if (predicates.nearCompliance(values) || predicates.deviceInsideCompliance(slot)) return Lane.COMPLIANCE;
  const explicitLane = fields.explicitLane;
  if (explicitLane === Lane.IDLE || explicitLane === Lane.TRANSITION || explicitLane === Lane.COMPLIANCE) {
    return explicitLane;
  }
  const speedMps = values[PF_SPEED_MPS_F64]!;
  if (speedMps === speedMps) {
    // A reported speed decides.
    return speedMps < thresholds.stationarySpeedMps ? Lane.IDLE : Lane.TRANSITION;
  }
  // No anchor yet (first ping): motion unknown; withinAnchorRadius answers false for it.
  return withinAnchorRadius(slot, values, anchorLat, anchorLon, thresholds) ? Lane.IDLE : Lane.TRANSITION;
}

/**
 * Moves the device's motion anchor to the ping's position when it is the first position or lies at least
 * `stationaryRadiusM` from the anchor. Call after `classifyLane` for every accepted ping. Allocation-free.
 */
export function advanceMotionAnchor(
  slot: number,
  values: Float64Array,
  anchorLat: Float64Array,
  anchorLon: Float64Array,
  thresholds: StationaryThresholds,
): void {
  // A NaN anchor (first ping) is never within the radius.
  if (!withinAnchorRadius(slot, values, anchorLat, anchorLon, thresholds)) {
    anchorLat[slot] = values[PF_LAT_F64]!;
    anchorLon[slot] = values[PF_LON_F64]!;
  }
}
