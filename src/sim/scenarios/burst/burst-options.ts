/**
 * Options of the burst scenario (`simulateBurst`): one defaults object, and a check of each option whose message
 * names it (`options.idleShare must be a number in [0, 0.98], got 1`).
 */
import {
  DEFAULT_ADMISSION_OPTIONS,
  validateAdmissionOptions,
  type AdmissionOptions,
} from '../../../ingest/admission.js';
import { RING_MAX_CAPACITY_SLOTS, TELEMETRY_STRIDE_BYTES } from '../../../shm/layout.js';
import { built, checkKeys, checkNumber, withDefaults } from '../check-options.js';

/** Options of `simulateBurst`. */
export interface BurstScenarioOptions {
  /** Seed of every random stream (chunk sizes, lanes, shards). */
  seed: number;
  /** Simulated duration, minutes. */
  minutes: number;
  /** Telemetry offered outside the burst, pings per second (Poisson per read chunk). */
  baselinePerSec: number;
  /** The burst's plateau as a multiple of the baseline. */
  burstFactor: number;
  /** When the ramp up starts, minutes from the start (default: a third of the run). */
  burstStartMinute: number | undefined;
  /** Length of each ramp (up, and back down), minutes (default: a twelfth of the run). */
  rampMinutes: number | undefined;
  /** Length of the plateau, minutes (default: a sixth of the run). */
  burstMinutes: number | undefined;
  /** Share of COMPLIANCE pings, [0, 1]. */
  complianceShare: number;
  /** Share of IDLE pings (the rest is TRANSITION). */
  idleShare: number;
  /** What the consumer of the rings (the containment pool) takes, records per second. */
  drainPerSec: number;
  /** Telemetry shards (one ring and one admission each); the router's default is 8. */
  shards: number;
  /** Slots per ring, a power of two; the router's default is 16384. */
  ringCapacitySlots: number;
  /** Lane admission options ({}: the production defaults). */
  admission: Partial<AdmissionOptions>;
  /** Period of the ingest thread's read chunks (and of the drain's ticks), ms. */
  chunkMs: number;
  /** Memory one queued ping takes, bytes (default: the ring's record stride). */
  bytesPerEntry: number;
  /** Length of a series sample, ms. */
  windowMs: number;
}

/** Defaults: 30,000 pings/s driven to 3x for a sixth of an hour, 2 % COMPLIANCE, 55 % IDLE, a 70,000/s drain. */
export const BURST_SCENARIO_DEFAULTS: Readonly<BurstScenarioOptions> = Object.freeze({
  seed: 1,
  minutes: 60,
  baselinePerSec: 30_000,
  burstFactor: 3,
  burstStartMinute: undefined,
  rampMinutes: undefined,
  burstMinutes: undefined,
  complianceShare: 0.02,
  idleShare: 0.55,
  drainPerSec: 70_000,
  shards: 8,
  ringCapacitySlots: 16384,
  admission: {},
  chunkMs: 1,
  bytesPerEntry: TELEMETRY_STRIDE_BYTES,
  windowMs: 1000,
});

/** Options after defaults and checks, the burst's times filled in. */
export interface ResolvedBurstOptions extends Omit<
  BurstScenarioOptions,
  'burstStartMinute' | 'rampMinutes' | 'burstMinutes' | 'admission'
> {
  burstStartMinute: number;
  rampMinutes: number;
  burstMinutes: number;
  admission: AdmissionOptions;
}

/** Fills in defaults and checks every option; throws a RangeError naming the first wrong one. */
export function resolveBurstOptions(options: Partial<BurstScenarioOptions> = {}): ResolvedBurstOptions {
  checkKeys(BURST_SCENARIO_DEFAULTS, options, 'options');
  const o = withDefaults(BURST_SCENARIO_DEFAULTS as BurstScenarioOptions, options);
  checkNumber('options.seed', o.seed, 0, 0xffffffff, true);
  checkNumber('options.minutes', o.minutes, 0.05, 1440);
  checkNumber('options.baselinePerSec', o.baselinePerSec, 0, 1e7);
  checkNumber('options.burstFactor', o.burstFactor, 0, 100);
  const burstStartMinute = checkNumber('options.burstStartMinute', o.burstStartMinute ?? o.minutes / 3, 0, o.minutes);
  const rampMinutes = checkNumber('options.rampMinutes', o.rampMinutes ?? o.minutes / 12, 0, o.minutes);
  const burstMinutes = checkNumber('options.burstMinutes', o.burstMinutes ?? o.minutes / 6, 0, o.minutes);
  checkNumber('options.complianceShare', o.complianceShare, 0, 1);
  checkNumber('options.idleShare', o.idleShare, 0, 1 - o.complianceShare);
  checkNumber('options.drainPerSec', o.drainPerSec, 1, 1e8);
  checkNumber('options.shards', o.shards, 1, 1024, true);
  const cap = o.ringCapacitySlots;
  if (!Number.isInteger(cap) || cap < 64 || cap > RING_MAX_CAPACITY_SLOTS || (cap & (cap - 1)) !== 0)
    throw new RangeError(
      `options.ringCapacitySlots must be a power of two in [64, ${RING_MAX_CAPACITY_SLOTS}], got ${String(cap)}`,
    );
  const admission = built('options.admission', 'lane admission', DEFAULT_ADMISSION_OPTIONS, o.admission, () =>
    validateAdmissionOptions(o.admission),
  );
  checkNumber('options.chunkMs', o.chunkMs, 0.01, 1000);
  checkNumber('options.bytesPerEntry', o.bytesPerEntry, 1, 1e6);
  checkNumber('options.windowMs', o.windowMs, o.chunkMs, 3.6e6);
  return { ...o, burstStartMinute, rampMinutes, burstMinutes, admission };
}
