/**
 * Options of lane admission (see `admission.ts`), declared here by their owner: the router's `admission` options are
 * this group (see `config/router-option-spec.ts`), so the router, a standalone LaneAdmission, --help, the README and
 * the config file's schema share one definition, one range and one message per option.
 */
import { checkInput, checkRules, pathText, withDefaults } from '../option-schema/option-check.js';
import { group, num, type Value } from '../option-schema/option-spec.js';

/** The admission options: each one's doc line, range, unit, default and flag. */
export const ADMISSION_SPEC = group(
  {
    reservedFraction: num({
      doc: 'share of each telemetry ring only COMPLIANCE pings may use',
      min: 0,
      max: 0.5,
      unit: 'fraction',
      default: 0.05,
      flag: 'reserved-fraction',
    }),
    watermarkFraction: num({
      doc: 'ring fill at and above which IDLE pings need a token (0: always; 1: never)',
      min: 0,
      max: 1,
      unit: 'fraction',
      default: 0.6,
      flag: 'watermark-fraction',
    }),
    idleBucketCapacity: num({
      doc: 'IDLE token bucket capacity (its burst)',
      min: 1,
      max: 1e9,
      unit: 'tokens',
      default: 1000,
      flag: 'idle-bucket-capacity',
    }),
    idleBucketRatePerSec: num({
      doc: 'IDLE tokens added per second',
      min: 0,
      max: 1e9,
      unit: 'per s',
      default: 10_000,
      flag: 'idle-bucket-rate',
    }),
    queueDelayTargetMs: num({
      doc: 'shed IDLE and TRANSITION pings of live sources while a ring’s oldest record waits longer (0: off)',
      min: 0,
      max: 60_000,
      unit: 'ms',
      default: 5,
      flag: 'queue-delay-target-ms',
    }),
    queueDelayIntervalMs: num({
      doc: 'how long the wait must stay above the target before shedding starts',
      min: 0,
      max: 60_000,
      unit: 'ms',
      default: 100,
      flag: 'queue-delay-interval-ms',
    }),
  },
  {
    doc: 'lane admission in front of each telemetry ring',
    section: 'Admission',
    threads: ['ingest'],
  },
);

/** How admission sheds in front of one telemetry ring (the router's `admission` options). */
export type AdmissionOptions = Value<typeof ADMISSION_SPEC>;

/** Defaults: 5% reserved slice, 60% watermark, idle bucket of 1000 refilled at 10 000/s, a 5 ms queue-delay target. */
export const DEFAULT_ADMISSION_OPTIONS: Readonly<AdmissionOptions> = Object.freeze(
  withDefaults(ADMISSION_SPEC, {}) as AdmissionOptions,
);

function describe(value: unknown): string {
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}

/**
 * Fills in defaults and checks every admission option; throws a RangeError naming the option and its allowed range,
 * e.g. `options.reservedFraction must be a number in [0, 0.5], got 0.7`. Returns a new, frozen object.
 */
export function validateAdmissionOptions(o: Partial<AdmissionOptions> = {}): AdmissionOptions {
  if (o === null || typeof o !== 'object' || Array.isArray(o))
    throw new TypeError(`admission options must be an object, got ${describe(o)}`);
  const name = (path: readonly (string | number)[]): string => `options.${pathText(path)}`;
  checkInput(ADMISSION_SPEC, o, [], name);
  const v = withDefaults(ADMISSION_SPEC, o) as AdmissionOptions;
  checkRules(ADMISSION_SPEC, v, [], name);
  return Object.freeze(v);
}
