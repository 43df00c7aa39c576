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
import {
  PF_ACCURACY_M_F64,
  PF_ADMIT_TIME_NS_F64,
  PF_HEADING_DEG_F64,
  PF_LAT_F64,
  PF_LON_F64,
  PF_SPEED_MPS_F64,
  PF_TS_MS_F64,
  type PingFields,
} from './ping-fields.js';

/**
 * Fills ring slot `ringSlot` (from `ring.claim()`) with the ping, including its admission time, which the admission
 * step puts in `fields.values[PF_ADMIT_TIME_NS_F64]` (a cell, not an argument: a double argument is boxed wherever
 * V8 does not inline the call). The caller publishes.
 */
export function writeTelemetryRecord(ring: SpscRing, ringSlot: number, fields: PingFields): void {
  const f = ringSlot * ring.strideF64;
  const f64 = ring.f64;
  const values = fields.values;
  f64[f + TEL_LAT_F64] = values[PF_LAT_F64]!;
  f64[f + TEL_LON_F64] = values[PF_LON_F64]!;
  f64[f + TEL_EVENT_TIME_MS_F64] = values[PF_TS_MS_F64]!;
  f64[f + TEL_ADMIT_TIME_NS_F64] = values[PF_ADMIT_TIME_NS_F64]!;
  f64[f + TEL_SPEED_MPS_F64] = values[PF_SPEED_MPS_F64]!;
  f64[f + TEL_HEADING_DEG_F64] = values[PF_HEADING_DEG_F64]!;
  f64[f + TEL_ACCURACY_M_F64] = values[PF_ACCURACY_M_F64]!;
  const i = ringSlot * ring.strideI32;
  ring.i32[i + TEL_DEVICE_SLOT_I32] = fields.slot;
  ring.i32[i + TEL_LANE_I32] = fields.lane;
}
