/**
 * The trigger as delivered to an in-process callback (the same fields as the NDJSON and webhook JSON objects).
 */
import type { LANE_NAMES, TRIGGER_TYPE_NAMES } from '../shm/layout.js';

/** One ENTER / EXIT / DWELL / CROSS trigger. */
export interface Trigger {
  /** Trigger type. */
  type: (typeof TRIGGER_TYPE_NAMES)[number];
  /** The device's id as it sent it: a string, or an unsigned integer (so 42 and "42" are two devices). */
  deviceId: string | number;
  /** The fence's id. */
  fenceId: string;
  /** The fence's tags. */
  tags: readonly string[];
  /** Dispatch class of the trigger: `compliance` for a compliance fence's trigger, `transition` otherwise. */
  lane: (typeof LANE_NAMES)[number];
  /** Latitude of that ping, WGS84 degrees. */
  lat: number;
  /** Longitude of that ping. */
  lon: number;
  /** Event time of that ping, epoch ms. */
  eventTimeMs: number;
  /**
   * The device's trigger sequence number: strictly increasing per device, across restarts too (with gaps: other
   * downstreams' triggers, and a jump after an unclean stop). (deviceId, seq) names one trigger for good.
   */
  seq: number;
  /** Milliseconds the device had been inside the fence (DWELL and EXIT; 0 otherwise). */
  insideMs: number;
  /** True when the trigger is a dead letter re-delivered by the replay lane (it failed every attempt before). */
  replay: boolean;
  /** Present on an EXIT the router wrote because the device sent nothing for `deviceIdleTimeoutMs`: "expired". */
  reason?: 'expired';
}
