/**
 * Options of lane admission (see `admission.ts`): one interface, one defaults object, one validator whose messages
 * name the option and its allowed range.
 */

/** How admission sheds in front of one telemetry ring. */
export interface AdmissionOptions {
  /**
   * Fraction of each telemetry ring reachable only by COMPLIANCE pings, in [0, 0.5]. The ring reserves
   * `ceil(capacitySlots * reservedFraction)` slots (see `reservedSlotsFor`). Default 0.05.
   */
  reservedFraction: number;
  /**
   * Fill (depth / capacity) in [0, 1] at and above which IDLE pings must also take a token from the idle bucket.
   * Default 0.6.
   */
  watermarkFraction: number;
  /** Burst, in pings, the idle bucket admits above the watermark; a finite number >= 1. Default 1024. */
  idleBucketCapacity: number;
  /** Sustained IDLE pings per second admitted above the watermark; a finite number >= 0. Default 10000. */
  idleBucketRatePerSecond: number;
  /**
   * Queue-delay target of the live lanes, ms, [0, 60000] (0: off). When the oldest record waiting in a ring has been
   * there longer than this for `queueDelayIntervalMs`, IDLE and TRANSITION pings of live sources are shed
   * (`queue_delay`) until it is back under the target, so the ring holds about this much time of work and a
   * COMPLIANCE ping waits no longer behind it. Default 5.
   */
  queueDelayTargetMs: number;
  /**
   * How long the oldest record must stay above the target before shedding starts, ms, [0, 60000]: a burst shorter
   * than this is queued, not shed. Shedding resumes at once when the delay rises again within this time of stopping.
   * Default 100.
   */
  queueDelayIntervalMs: number;
}

/**
 * Defaults: 5% reserved slice, 60% watermark, idle bucket of 1024 pings refilled at 10 000 pings/s, a 5 ms queue-delay
 * target held for 100 ms before shedding.
 */
export const DEFAULT_ADMISSION_OPTIONS: Readonly<AdmissionOptions> = Object.freeze({
  reservedFraction: 0.05,
  watermarkFraction: 0.6,
  idleBucketCapacity: 1024,
  idleBucketRatePerSecond: 10_000,
  queueDelayTargetMs: 5,
  queueDelayIntervalMs: 100,
});

/** Largest reservedFraction accepted: the other lanes always keep at least half of the ring. */
const MAX_RESERVED_FRACTION = 0.5;

function numberIn(name: string, value: unknown, min: number, max: number, range: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(`options.${name} must be ${range}, got ${describe(value)}`);
  }
  return value;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}

/**
 * Fills in defaults and checks every admission option; throws a RangeError naming the option and its allowed range,
 * e.g. `options.reservedFraction must be a number in [0, 0.5], got 0.7`. Returns a new, frozen object.
 */
export function validateAdmissionOptions(o: Partial<AdmissionOptions> = {}): AdmissionOptions {
  if (o === null || typeof o !== 'object')
    throw new TypeError(`admission options must be an object, got ${describe(o)}`);
  const pick = <K extends keyof AdmissionOptions>(key: K): unknown =>
    o[key] === undefined ? DEFAULT_ADMISSION_OPTIONS[key] : o[key];
  return Object.freeze({
    reservedFraction: numberIn(
      'reservedFraction',
      pick('reservedFraction'),
      0,
      MAX_RESERVED_FRACTION,
      `a number in [0, ${MAX_RESERVED_FRACTION}]`,
    ),
    watermarkFraction: numberIn('watermarkFraction', pick('watermarkFraction'), 0, 1, 'a number in [0, 1]'),
    idleBucketCapacity: numberIn('idleBucketCapacity', pick('idleBucketCapacity'), 1, Infinity, 'a finite number >= 1'),
    idleBucketRatePerSecond: numberIn(
      'idleBucketRatePerSecond',
      pick('idleBucketRatePerSecond'),
      0,
      Infinity,
      'a finite number >= 0',
    ),
    queueDelayTargetMs: numberIn('queueDelayTargetMs', pick('queueDelayTargetMs'), 0, 60_000, 'a number in [0, 60000]'),
    queueDelayIntervalMs: numberIn(
      'queueDelayIntervalMs',
      pick('queueDelayIntervalMs'),
      0,
      60_000,
      'a number in [0, 60000]',
    ),
  });
}
