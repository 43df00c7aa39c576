/**
 * Writing an accepted ping into a claimed telemetry ring slot (ingest thread, after admission). Allocation-free.
 */
import {
  TEL_ACCURACY_M_F64,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_HEADING_DEG_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TEL_SPEED_MPS_F64,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { PingFields } from './ping-fields.js';

/** Fills ring slot `ringSlot` (from `ring.claim()`) with the ping and its admission time; the caller publishes. */
export function writeTelemetryRecord(ring: SpscRing, ringSlot: number, fields: PingFields, admitTimeNs: number): void {
  const f = ringSlot * ring.strideF64;
  const f64 = ring.f64;
  f64[f + TEL_LAT_F64] = fields.lat;
  f64[f + TEL_LON_F64] = fields.lon;
  f64[f + TEL_EVENT_TIME_MS_F64] = fields.tsMs;
  f64[f + TEL_ADMIT_TIME_NS_F64] = admitTimeNs;
  f64[f + TEL_SPEED_MPS_F64] = fields.speedMps;
  f64[f + TEL_HEADING_DEG_F64] = fields.headingDeg;
  f64[f + TEL_ACCURACY_M_F64] = fields.accuracyM;
  const i = ringSlot * ring.strideI32;
  ring.i32[i + TEL_DEVICE_SLOT_I32] = fields.slot;
  ring.i32[i + TEL_LANE_I32] = fields.lane;
}
