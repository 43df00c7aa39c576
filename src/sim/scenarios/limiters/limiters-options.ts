/**
 * Options of the limiters scenario (`simulateLimiters`): one defaults object, and a check of each option whose
 * message names it (`options.minutes must be a number in [0.05, 1440], got 0`).
 */
import { BREAKER_DEFAULTS, CircuitBreaker, type BreakerOptions } from '../../../dispatch/breaker.js';
import { DOWNSTREAM_DEFAULTS } from '../../../dispatch/downstream.js';
import {
  AimdLimit,
  FixedLimit,
  Gradient2Limit,
  GradientLimit,
  VegasLimit,
  WindowedLimit,
  type Limit,
} from '../../../dispatch/limits/index.js';
import { AIMD_LIMIT_DEFAULTS, type AimdLimitOptions } from '../../../dispatch/limits/aimd-limit.js';
import { GRADIENT2_LIMIT_DEFAULTS, type Gradient2LimitOptions } from '../../../dispatch/limits/gradient2-limit.js';
import { GRADIENT_LIMIT_DEFAULTS, type GradientLimitOptions } from '../../../dispatch/limits/gradient-limit.js';
import { VEGAS_LIMIT_DEFAULTS, type VegasLimitOptions } from '../../../dispatch/limits/vegas-limit.js';
import { WINDOWED_LIMIT_DEFAULTS, type WindowedLimitOptions } from '../../../dispatch/limits/windowed-limit.js';
import { SERVICE_DISTRIBUTIONS, type ServiceDistribution } from '../../random/random.js';
import { built, checkKeys, checkNumber, checkOneOf, withDefaults } from '../check-options.js';

/** The adaptive algorithms a row may name (a number is a fixed limit). */
const ALGORITHMS = ['gradient', 'aimd', 'vegas', 'gradient2'] as const;

/** Per algorithm: its name in messages and tables, its defaults (for unknown keys) and its production constructor. */
const ALGORITHM_ENTRIES: Record<
  (typeof ALGORITHMS)[number],
  { what: string; className: string; defaults: object; make: (tuning: never) => Limit }
> = {
  gradient: {
    what: 'gradient limit',
    className: 'GradientLimit',
    defaults: GRADIENT_LIMIT_DEFAULTS,
    make: (t: Partial<GradientLimitOptions> | undefined) => new GradientLimit(t),
  },
  aimd: {
    what: 'AIMD limit',
    className: 'AimdLimit',
    defaults: AIMD_LIMIT_DEFAULTS,
    make: (t: Partial<AimdLimitOptions> | undefined) => new AimdLimit(t),
  },
  vegas: {
    what: 'Vegas limit',
    className: 'VegasLimit',
    defaults: VEGAS_LIMIT_DEFAULTS,
    make: (t: Partial<VegasLimitOptions> | undefined) => new VegasLimit(t),
  },
  gradient2: {
    what: 'Gradient2 limit',
    className: 'Gradient2Limit',
    defaults: GRADIENT2_LIMIT_DEFAULTS,
    make: (t: Partial<Gradient2LimitOptions> | undefined) => new Gradient2Limit(t),
  },
};

/**
 * One row of the comparison: a limit built the way the router builds a downstream's (`limit`, the algorithm's own
 * tuning under its name, `window` to run it on windows of samples) and the static safety cap above it.
 */
export interface LimiterRowOptions {
  /** The row's name in the table. */
  name: string;
  /** 'gradient' | 'aimd' | 'vegas' | 'gradient2', or a fixed limit (an integer in [1, 4096]). */
  limit: 'gradient' | 'aimd' | 'vegas' | 'gradient2' | number;
  /** GradientLimit options (for limit 'gradient'). */
  gradient?: Partial<GradientLimitOptions>;
  /** AimdLimit options (for limit 'aimd'). */
  aimd?: Partial<AimdLimitOptions>;
  /** VegasLimit options (for limit 'vegas'). */
  vegas?: Partial<VegasLimitOptions>;
  /** Gradient2Limit options (for limit 'gradient2'). */
  gradient2?: Partial<Gradient2LimitOptions>;
  /** Run the adaptive limit on windows of samples (WindowedLimit options; {} for its defaults). */
  window?: Partial<WindowedLimitOptions>;
  /** Static cap on requests in flight above the limit, [1, 65536]; default the router's (256). */
  safetyCap?: number;
}

/** Options of `simulateLimiters`. */
export interface LimitersScenarioOptions {
  /** Seed of every random stream (traffic, service times, faults). */
  seed: number;
  /** Simulated duration, minutes; split into equal phases, one per capacity factor. */
  minutes: number;
  /** Workers of the downstream at capacity factor 1. */
  workers: number;
  /** Capacity of each phase as a multiple of `workers` (workers rounded, at least 1). */
  capacityFactors: number[];
  /** Mean service time of a request, ms. */
  serviceMs: number;
  /** Shape of the service time: 'lognormal', 'exponential' or 'uniform'. */
  serviceDistribution: ServiceDistribution;
  /** Lognormal sigma, or uniform jitter fraction in [0, 1). */
  serviceSpread: number;
  /** Requests that may wait for a worker; one more is refused at once (503). */
  queueLimit: number;
  /** Network time added to every answer, ms. */
  networkMs: number;
  /** Triggers offered per second (one trigger per request), Poisson. */
  offeredPerSec: number;
  /** Share of requests answered with an error (injected), [0, 1]. */
  errorRate: number;
  /** Share of requests never answered (injected; the client times out), [0, 1]. */
  lostRate: number;
  /** An injected error comes back after this fraction of a service time, (0, 1]. */
  errorLatencyFraction: number;
  /** A request unanswered this long is a timeout (loss), ms. */
  timeoutMs: number;
  /** A trigger not sent within this of its arrival is deferred, ms. */
  deadlineMs: number;
  /** Attempts per trigger before it is deferred. */
  maxAttempts: number;
  /** A 1 s window is overloaded when the mean queue wait at the downstream exceeds this, ms (default: serviceMs). */
  overloadWaitMs: number | undefined;
  /** Length of an overload window and of a chart sample, ms. */
  windowMs: number;
  /** Circuit-breaker options of every row (the router's defaults otherwise). */
  breaker: Partial<BreakerOptions>;
  /** The rows; default: the comparison in the module comment of `limiters-scenario.ts`. */
  limiters: LimiterRowOptions[] | undefined;
}

/**
 * Defaults: a 16-worker downstream of 40 ms +-10 % (uniform) going 1x -> 2x -> 0.6x over an hour, offered 1,000
 * triggers/s (above the 2x capacity of 800/s). The service time has a floor, as a real service's has: a latency
 * limit compares RTTs with the smallest one it saw, and a distribution without a floor (a lognormal) makes an idle
 * downstream look congested (see bench/RESULTS.md).
 */
export const LIMITERS_SCENARIO_DEFAULTS: Readonly<LimitersScenarioOptions> = Object.freeze({
  seed: 1,
  minutes: 60,
  workers: 16,
  capacityFactors: [1, 2, 0.6],
  serviceMs: 40,
  serviceDistribution: 'uniform',
  serviceSpread: 0.1,
  queueLimit: 64,
  networkMs: 0,
  offeredPerSec: 1000,
  errorRate: 0,
  lostRate: 0,
  errorLatencyFraction: 0.05,
  timeoutMs: 1000,
  deadlineMs: 250,
  maxAttempts: 3,
  overloadWaitMs: undefined,
  windowMs: 1000,
  breaker: {},
  limiters: undefined,
});

/** A row resolved: its name, how to build its limit, and its cap. */
export interface ResolvedRow {
  name: string;
  /** The row's limit and tuning in words (for the table's notes). */
  description: string;
  makeLimit: () => Limit;
  safetyCap: number;
}

/** Options after defaults and checks, with the rows resolved. */
export interface ResolvedLimitersOptions extends Omit<LimitersScenarioOptions, 'limiters' | 'overloadWaitMs'> {
  overloadWaitMs: number;
  rows: ResolvedRow[];
}

/** The default rows for a downstream of `workers` whose capacity moves by `factors`. */
function defaultLimiterRows(workers: number, factors: readonly number[]): LimiterRowOptions[] {
  const low = Math.max(1, Math.round(workers * Math.min(...factors)));
  const high = Math.max(1, Math.round(workers * Math.max(...factors)));
  const cap = Math.ceil(high * 1.5);
  return [
    { name: `fixed-low (${low})`, limit: low },
    { name: `fixed-high (${high})`, limit: high },
    { name: 'aimd', limit: 'aimd' },
    { name: 'aimd, windowed', limit: 'aimd', window: {} },
    { name: 'vegas', limit: 'vegas' },
    { name: 'vegas, windowed', limit: 'vegas', window: {} },
    { name: 'gradient2', limit: 'gradient2' },
    { name: 'gradient2, windowed', limit: 'gradient2', window: {} },
    { name: 'gradient', limit: 'gradient' },
    { name: `gradient + cap ${cap}`, limit: 'gradient', safetyCap: cap },
  ];
}

function resolveRow(row: unknown, path: string): ResolvedRow {
  const keys = { name: 1, limit: 1, gradient: 1, aimd: 1, vegas: 1, gradient2: 1, window: 1, safetyCap: 1 };
  if (row === null || typeof row !== 'object' || Array.isArray(row))
    throw new RangeError(`${path} must be an object, got ${Array.isArray(row) ? 'an array' : String(row)}`);
  checkKeys(keys, row, path);
  const r = row as LimiterRowOptions;
  if (typeof r.name !== 'string' || r.name === '')
    throw new RangeError(`${path}.name must be a non-empty string, got ${String(r.name)}`);
  const safetyCap = checkNumber(`${path}.safetyCap`, r.safetyCap ?? DOWNSTREAM_DEFAULTS.safetyCap, 1, 65536, true);
  const limit = r.limit;
  let make: () => Limit;
  let description: string;
  if (typeof limit === 'number') {
    checkNumber(`${path}.limit`, limit, 1, 4096, true);
    if (r.window !== undefined) throw new RangeError(`${path}.window applies only to an adaptive limit`);
    make = () => new FixedLimit(limit);
    description = `FixedLimit(${limit})`;
  } else {
    const algorithm = checkOneOf(`${path}.limit`, limit, ALGORITHMS);
    for (const other of ALGORITHMS) {
      if (other !== algorithm && r[other] !== undefined)
        throw new RangeError(`${path}.${other} applies only to limit "${other}", got limit "${algorithm}"`);
    }
    const tuning = r[algorithm];
    const entry = ALGORITHM_ENTRIES[algorithm];
    const bare = (): Limit => entry.make(tuning as never);
    // Built once here so a wrong option is refused now, naming it, rather than in the middle of a run.
    built(`${path}.${algorithm}`, entry.what, entry.defaults, tuning, bare);
    description = `${entry.className}(${tuning === undefined ? 'defaults' : JSON.stringify(tuning)})`;
    if (r.window !== undefined) {
      const w = r.window;
      built(`${path}.window`, 'windowed limit', WINDOWED_LIMIT_DEFAULTS, w, () => new WindowedLimit(bare(), w));
      make = () => new WindowedLimit(bare(), w);
      description = `WindowedLimit(${description}, ${Object.keys(w).length === 0 ? 'defaults' : JSON.stringify(w)})`;
    } else {
      make = bare;
    }
  }
  return { name: r.name, description, makeLimit: make, safetyCap };
}

/** Fills in defaults and checks every option; throws a RangeError naming the first wrong one. */
export function resolveLimitersOptions(options: Partial<LimitersScenarioOptions> = {}): ResolvedLimitersOptions {
  checkKeys(LIMITERS_SCENARIO_DEFAULTS, options, 'options');
  const o = withDefaults(LIMITERS_SCENARIO_DEFAULTS as LimitersScenarioOptions, options);
  checkNumber('options.seed', o.seed, 0, 0xffffffff, true);
  checkNumber('options.minutes', o.minutes, 0.05, 1440);
  checkNumber('options.workers', o.workers, 1, 4096, true);
  if (!Array.isArray(o.capacityFactors) || o.capacityFactors.length === 0 || o.capacityFactors.length > 100)
    throw new RangeError(
      `options.capacityFactors must be an array of 1 to 100 numbers, got ${String(o.capacityFactors)}`,
    );
  o.capacityFactors.forEach((f, i) => checkNumber(`options.capacityFactors[${i}]`, f, 0.01, 100));
  checkNumber('options.serviceMs', o.serviceMs, 0.001, 60_000);
  checkOneOf('options.serviceDistribution', o.serviceDistribution, SERVICE_DISTRIBUTIONS);
  checkNumber('options.serviceSpread', o.serviceSpread, 0, o.serviceDistribution === 'uniform' ? 0.999 : 3);
  checkNumber('options.queueLimit', o.queueLimit, 0, 1e9, true);
  checkNumber('options.networkMs', o.networkMs, 0, 60_000);
  checkNumber('options.offeredPerSec', o.offeredPerSec, 0, 1e7);
  checkNumber('options.errorRate', o.errorRate, 0, 1);
  checkNumber('options.lostRate', o.lostRate, 0, 1 - o.errorRate);
  checkNumber('options.errorLatencyFraction', o.errorLatencyFraction, 1e-6, 1);
  checkNumber('options.timeoutMs', o.timeoutMs, 0.001, 3.6e6);
  checkNumber('options.deadlineMs', o.deadlineMs, 0, 3.6e6);
  checkNumber('options.maxAttempts', o.maxAttempts, 1, 100, true);
  const overloadWaitMs = o.overloadWaitMs ?? o.serviceMs;
  checkNumber('options.overloadWaitMs', overloadWaitMs, 0, 3.6e6);
  checkNumber('options.windowMs', o.windowMs, 1, 3.6e6);
  built('options.breaker', 'breaker', BREAKER_DEFAULTS, o.breaker, () => new CircuitBreaker(o.breaker), 'breaker.');
  const rowsIn = o.limiters ?? defaultLimiterRows(o.workers, o.capacityFactors);
  if (!Array.isArray(rowsIn) || rowsIn.length === 0 || rowsIn.length > 64)
    throw new RangeError(`options.limiters must be an array of 1 to 64 rows, got ${String(rowsIn)}`);
  const rows = rowsIn.map((r, i) => resolveRow(r, `options.limiters[${i}]`));
  const { limiters: _limiters, ...rest } = o;
  return { ...rest, overloadWaitMs, rows };
}
