/**
 * Lane classification of a ping (ingest thread): pure, allocation-free, with the spatial questions injected.
 *
 * Order (first match wins):
 * 1. COMPLIANCE when the ping is inside or near a compliance fence's box (`nearCompliance(lat, lon)`) or the device
 *    was inside a compliance fence (`deviceInsideCompliance(slot)`). An explicit lane never demotes such a ping:
 *    every ping that could produce a compliance trigger travels in the COMPLIANCE lane.
 * 2. The explicit `lane` the device sent, when present.
 * 3. IDLE when the device is stationary: its reported speed is below `stationarySpeedMps`, or, with no speed
 *    reported, it is within `stationaryRadiusM` of its motion anchor (the position where it was last seen to move,
 *    see `advanceMotionAnchor`). Comparing with the last ping instead would call a fast-pinging mover stationary.
 * 4. TRANSITION otherwise (including a device's first ping, whose motion is unknown).
 */
import { Lane } from '../shm/layout.js';

/** The spatial questions classification asks; the fence store answers them (allocation-free, any thread-local). */
export interface LanePredicates {
  /** True when (lat, lon) is inside or near the bounding box of any compliance fence. */
  nearCompliance(lat: number, lon: number): boolean;
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
 * distance at the tens-of-metres scale stationarity works at.
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
 * The lane of one ping. `explicitLane` is -1 when absent, `speedMps` NaN when absent, `anchorLat` / `anchorLon`
 * NaN before the device's first ping. Pure: reads only its arguments and the predicates.
 */
export function classifyLane(
  slot: number,
  lat: number,
  lon: number,
  speedMps: number,
  explicitLane: number,
  anchorLat: number,
  anchorLon: number,
  predicates: LanePredicates,
  thresholds: StationaryThresholds,
): Lane {
  if (predicates.nearCompliance(lat, lon) || predicates.deviceInsideCompliance(slot)) return Lane.COMPLIANCE;
  if (explicitLane === Lane.IDLE || explicitLane === Lane.TRANSITION || explicitLane === Lane.COMPLIANCE) {
    return explicitLane;
  }
  if (speedMps === speedMps) {
    // A reported speed decides.
    return speedMps < thresholds.stationarySpeedMps ? Lane.IDLE : Lane.TRANSITION;
  }
  if (anchorLat !== anchorLat) return Lane.TRANSITION;
  return approxDistanceM(anchorLat, anchorLon, lat, lon) < thresholds.stationaryRadiusM ? Lane.IDLE : Lane.TRANSITION;
}

/**
 * Moves the device's motion anchor to (lat, lon) when it is the first position or lies at least
 * `stationaryRadiusM` from the anchor. Call after `classifyLane` for every accepted ping.
 */
export function advanceMotionAnchor(
  slot: number,
  lat: number,
  lon: number,
  anchorLat: Float64Array,
  anchorLon: Float64Array,
  stationaryRadiusM: number,
): void {
  const aLat = anchorLat[slot]!;
  if (aLat !== aLat || approxDistanceM(aLat, anchorLon[slot]!, lat, lon) >= stationaryRadiusM) {
    anchorLat[slot] = lat;
    anchorLon[slot] = lon;
  }
}
