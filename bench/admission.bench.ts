/**
 * Admission benchmarks on one thread: decisions per second for a seeded lane mix (60% IDLE, 30% TRANSITION,
 * 10% COMPLIANCE) with the ring below the watermark (fast path), with the ring held at its limits (shedding and the
 * token bucket), and admit + write + batch publish (the whole ingest-side cost per ping).
 * Run: npx tsc -p tsconfig.json && node --expose-gc dist/bench/admission.bench.js
 */
import { Bench } from 'tinybench';
import {
  DEFAULT_ADMISSION_OPTIONS,
  LaneAdmission,
  allocateAdmissionCounters,
  allocateTelemetryRing,
} from '../src/ingest/admission.js';
import { SpscRing } from '../src/shm/ring.js';
import {
  Lane,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
} from '../src/shm/layout.js';
import { opsRows, reportOps } from './ring-bench-report.js';

const PINGS_PER_CALL = 1 << 20;
const BATCH_SLOTS = 64;
const START_NS = 3e16;
const STEP_NS = 50; // 20 M pings/s of virtual time

function setup() {
  const ring = SpscRing.wrap(allocateTelemetryRing(4096, DEFAULT_ADMISSION_OPTIONS.reservedFraction));
  const counters = new Float64Array(allocateAdmissionCounters(1));
  const admission = new LaneAdmission(ring, counters, 0, DEFAULT_ADMISSION_OPTIONS, START_NS);
  return { ring, counters, admission };
}

// Seeded lane mix (xorshift32).
const lanes = new Uint8Array(65536);
let x = 0x2545f491;
for (let k = 0; k < lanes.length; k++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  const d = (x >>> 0) % 10;
  lanes[k] = d < 6 ? Lane.IDLE : d < 9 ? Lane.TRANSITION : Lane.COMPLIANCE;
}
const sink = new Float64Array(1);

const below = setup();
let belowNowNs = START_NS;
/** Ring below the watermark: every ping takes the fast path; publish and release every 64 pings. */
function admitBelowWatermark(): void {
  const { ring, admission } = below;
  let acc = 0;
  for (let k = 0; k < PINGS_PER_CALL; k++) {
    belowNowNs += STEP_NS;
    acc += admission.admit(lanes[k & 65535]! as Lane, belowNowNs);
    // Why: keep the depth low, as a consumer that keeps up would.
    if ((k & (BATCH_SLOTS - 1)) === BATCH_SLOTS - 1) {
      ring.publish();
      ring.release(ring.available());
    }
  }
  sink[0] = acc;
}

const overload = setup();
let overloadNowNs = START_NS;
/** Ring at its limits: the consumer releases 1 slot per 3 pings, so most IDLE/TRANSITION pings are shed. */
function admitOverloaded(): void {
  const { ring, admission } = overload;
  let acc = 0;
  for (let k = 0; k < PINGS_PER_CALL; k++) {
    overloadNowNs += STEP_NS;
    acc += admission.admit(lanes[k & 65535]! as Lane, overloadNowNs);
    if ((k & (BATCH_SLOTS - 1)) === BATCH_SLOTS - 1) {
      ring.publish();
      // A consumer at a third of the offered rate.
      ring.release(Math.min(ring.available(), BATCH_SLOTS / 3) | 0);
    }
  }
  sink[0] = acc;
}

const full = setup();
let fullNowNs = START_NS;
/** Admit + write 5 fields + publish per 64: the ingest side's whole per-ping ring cost. */
function admitWritePublish(): void {
  const { ring, admission } = full;
  const { f64, i32, strideF64, strideI32 } = ring;
  for (let k = 0; k < PINGS_PER_CALL; k++) {
    fullNowNs += STEP_NS;
    const lane = lanes[k & 65535]! as Lane;
    const slot = admission.admit(lane, fullNowNs);
    if (slot >= 0) {
      f64[slot * strideF64 + TEL_LAT_F64] = 52 + (k & 1023) * 1e-5;
      f64[slot * strideF64 + TEL_LON_F64] = 13 + (k & 511) * 1e-5;
      f64[slot * strideF64 + TEL_ADMIT_TIME_NS_F64] = fullNowNs;
      i32[slot * strideI32 + TEL_DEVICE_SLOT_I32] = k & 0xffff;
      i32[slot * strideI32 + TEL_LANE_I32] = lane;
    }
    if ((k & (BATCH_SLOTS - 1)) === BATCH_SLOTS - 1) {
      ring.publish();
      ring.release(ring.available());
    }
  }
}

const bench = new Bench({ name: 'admission (one thread)', time: 1500, warmupTime: 300, iterations: 10 });
const names = {
  below: 'admit, ring below watermark (fast path)',
  overload: 'admit, ring overloaded (shed + token bucket)',
  full: 'admit + write 5 fields + publish per 64',
} as const;
bench.add(names.below, admitBelowWatermark);
bench.add(names.overload, admitOverloaded);
bench.add(names.full, admitWritePublish);
bench.runSync();
const rows = opsRows(bench, {
  [names.below]: PINGS_PER_CALL,
  [names.overload]: PINGS_PER_CALL,
  [names.full]: PINGS_PER_CALL,
});
reportOps('admission', rows, {
  sink: sink[0],
  overloadCounters: Array.from(overload.counters.subarray(0, 15)),
  options: DEFAULT_ADMISSION_OPTIONS,
});
