/** Test helpers: small hand-made fences in metres around a city origin, rings, and trigger readback. */
import { allocateCounterRegion, allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import {
  CNT_BLOCK_F64,
  RingKind,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EXPIRE_EPOCH_F64,
  TEL_LANE_EXPIRE,
  TEL_LANE_I32,
  TELEMETRY_STRIDE_BYTES,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_FENCE_INDEX_MASK,
  TRG_GENERATION_I32,
  TRG_INSIDE_MS_F64,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
  TRIGGER_STRIDE_BYTES,
  TRIGGER_TYPE_NAMES,
} from '../../src/shm/layout.js';
import { M_PER_DEG, metresPerDegreeX } from '../../src/fences/geometry.js';
import {
  ContainmentEngine,
  DeviceState,
  FenceStore,
  allocateDeviceState,
  buildFenceStore,
  parseFences,
} from '../../src/fences/index.js';

/** City origin of the hand-made fences. */
export const ORIGIN_LAT = 52.5;
/** City origin of the hand-made fences. */
export const ORIGIN_LON = 13.4;

/** (lat, lon) of a point `eastM` east and `northM` north of the origin. */
export function at(eastM: number, northM: number): [number, number] {
  return [ORIGIN_LAT + northM / M_PER_DEG, ORIGIN_LON + eastM / metresPerDegreeX(ORIGIN_LAT)];
}

/** A square Polygon feature centred `eastM`/`northM` from the origin with half-side `halfM`. */
export function square(
  id: string,
  eastM: number,
  northM: number,
  halfM: number,
  props: Record<string, unknown> = {},
): Record<string, unknown> {
  const corners = [
    at(eastM - halfM, northM - halfM),
    at(eastM + halfM, northM - halfM),
    at(eastM + halfM, northM + halfM),
    at(eastM - halfM, northM + halfM),
  ];
  const ring = corners.map(([lat, lon]) => [lon, lat]);
  ring.push(ring[0]!);
  return { type: 'Feature', properties: { id, ...props }, geometry: { type: 'Polygon', coordinates: [ring] } };
}

/** A circle feature. */
export function circle(
  id: string,
  eastM: number,
  northM: number,
  radiusM: number,
  props: Record<string, unknown> = {},
): Record<string, unknown> {
  const [lat, lon] = at(eastM, northM);
  return {
    type: 'Feature',
    properties: { id, radius: radiusM, ...props },
    geometry: { type: 'Point', coordinates: [lon, lat] },
  };
}

/** A FeatureCollection of features. */
export function collection(...features: Record<string, unknown>[]): Record<string, unknown> {
  return { type: 'FeatureCollection', features };
}

/** One trigger read back from a ring. */
export interface ReadTrigger {
  type: string;
  slot: number;
  fence: number;
  lane: number;
  generation: number;
  seq: number;
  insideMs: number;
  eventTimeMs: number;
  admitTimeNs: number;
  lat: number;
  lon: number;
}

/** Reads the trigger `offset` places after the ring's read position, without releasing it. */
export function readTrigger(ring: SpscRing, offset: number): ReadTrigger {
  const s = ring.readSlot(offset);
  const f = s * ring.strideF64;
  const i = s * ring.strideI32;
  const cell = ring.i32[i + TRG_FENCE_INDEX_I32]!;
  return {
    type: TRIGGER_TYPE_NAMES[ring.i32[i + TRG_TYPE_I32]!]!,
    slot: ring.i32[i + TRG_DEVICE_SLOT_I32]!,
    fence: cell & TRG_FENCE_INDEX_MASK,
    lane: cell >>> TRG_LANE_SHIFT,
    generation: ring.i32[i + TRG_GENERATION_I32]!,
    seq: ring.f64[f + TRG_SEQ_F64]!,
    insideMs: ring.f64[f + TRG_INSIDE_MS_F64]!,
    eventTimeMs: ring.f64[f + TRG_EVENT_TIME_MS_F64]!,
    admitTimeNs: ring.f64[f + TRG_ADMIT_TIME_NS_F64]!,
    lat: ring.f64[f + TRG_LAT_F64]!,
    lon: ring.f64[f + TRG_LON_F64]!,
  };
}

/** Reads and releases every available trigger. */
export function drain(ring: SpscRing): ReadTrigger[] {
  const out: ReadTrigger[] = [];
  const n = ring.available();
  for (let k = 0; k < n; k++) out.push(readTrigger(ring, k));
  ring.release(n);
  return out;
}

/** A telemetry ring holding one published expiry record (as the ingest thread writes it) for `slot`, life epoch `epoch`. */
export function expiryRecordRing(slot: number, epoch: number): SpscRing {
  const tel = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 8, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  const s = tel.claim();
  tel.f64[s * tel.strideF64 + TEL_ADMIT_TIME_NS_F64] = 1;
  tel.f64[s * tel.strideF64 + TEL_EXPIRE_EPOCH_F64] = epoch;
  tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = slot;
  tel.i32[s * tel.strideI32 + TEL_LANE_I32] = TEL_LANE_EXPIRE;
  tel.publish();
  return tel;
}

/** A trigger ring of `capacitySlots`. */
export function triggerRing(capacitySlots = 1024): SpscRing {
  return SpscRing.wrap(
    allocateRingRegion({ capacitySlots, strideBytes: TRIGGER_STRIDE_BYTES, kind: RingKind.TRIGGER }),
  );
}

/** Everything a state-machine test needs. */
export interface Rig {
  store: FenceStore;
  state: DeviceState;
  engine: ContainmentEngine;
  triggers: SpscRing;
  counters: Float64Array;
  /** Sends one ping (east/north metres from origin) and returns the triggers it produced. */
  ping: (slot: number, eastM: number, northM: number, tMs: number, lane?: number) => ReadTrigger[];
}

/** Builds a store from `geojson` and an engine over fresh device state. */
export function rig(geojson: unknown, maxFencesPerDevice = 8, generation = 1): Rig {
  const store = FenceStore.open(buildFenceStore(parseFences(geojson), generation));
  const state = DeviceState.open(allocateDeviceState(16, maxFencesPerDevice));
  const counters = new Float64Array(allocateCounterRegion(2, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, CNT_BLOCK_F64);
  const triggers = triggerRing();
  return {
    store,
    state,
    engine,
    triggers,
    counters,
    ping(slot, eastM, northM, tMs, lane = 1) {
      const [lat, lon] = at(eastM, northM);
      engine.processPing(slot, lat, lon, tMs, tMs * 1e6, lane, triggers);
      return drain(triggers);
    },
  };
}
