/**
 * `npm run sim`: runs the simulator's scenarios (src/sim) and writes their results and plots.
 *
 *   npm run sim                                   # both scenarios, seed 1, an hour of simulated time each
 *   npm run sim -- --scenario limiters --seed 2 --minutes 10
 *   npm run sim -- --scenario burst --options '{"admission":{"watermarkFraction":0.02}}'
 *
 *   --scenario limiters|burst|all   which scenario (default all)
 *   --seed N                        seed of every random stream (default 1)
 *   --minutes N                     simulated minutes (default 60)
 *   --options JSON                  more options of the one scenario chosen (see LIMITERS_SCENARIO_DEFAULTS and
 *                                   BURST_SCENARIO_DEFAULTS); checked like the library's
 *   --out DIR                       where the files go (default bench/sim)
 *
 * Writes <out>/limiters.json, limiters.svg (limit vs true capacity per limiter), gradient.svg (the gradient's limit,
 * in flight and RTT-min), burst.json and burst.svg (ring fill and shedding by lane). The JSON holds every figure of
 * the tables and the series at every tenth window; the same seed gives byte-identical files. Prints the tables and
 * how long each scenario took on this machine (wall time is printed only, never written, so files stay identical).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  burstChartSvg,
  burstTable,
  gradientChartSvg,
  limitersChartSvg,
  limitersTable,
  simulateBurst,
  simulateLimiters,
  type BurstResult,
  type LimitersResult,
} from '../src/index.js';

/** Series kept in the JSON: every SERIES_EVERY-th window (the plots use all of them). */
const SERIES_EVERY = 10;

const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'all' },
    seed: { type: 'string', default: '1' },
    minutes: { type: 'string', default: '60' },
    options: { type: 'string' },
    out: { type: 'string', default: join('bench', 'sim') },
  },
});

function fail(message: string): never {
  process.stderr.write(`sim: ${message}\n`);
  process.exit(2);
}

const scenario = values.scenario;
if (scenario !== 'limiters' && scenario !== 'burst' && scenario !== 'all')
  fail(`--scenario must be limiters, burst or all, got ${String(scenario)}`);
const seed = Number(values.seed);
const minutes = Number(values.minutes);
let extra: Record<string, unknown> = {};
if (values.options !== undefined) {
  if (scenario === 'all') fail('--options needs --scenario limiters or --scenario burst');
  try {
    extra = JSON.parse(values.options) as Record<string, unknown>;
  } catch (e) {
    fail(`--options is not JSON: ${(e as Error).message}`);
  }
}
const out = values.out;
mkdirSync(out, { recursive: true });

function every<T>(xs: readonly T[]): T[] {
  return xs.filter((_x, i) => i % SERIES_EVERY === SERIES_EVERY - 1);
}

function thinnedLimiters(r: LimitersResult): object {
  return {
    ...r,
    seriesEvery: SERIES_EVERY,
    timesS: every(r.timesS),
    capacityWorkers: every(r.capacityWorkers),
    rows: r.rows.map((row) => ({
      ...row,
      series: {
        limit: every(row.series.limit),
        inflight: every(row.series.inflight),
        rttMinMs: every(row.series.rttMinMs),
        rttMeanMs: every(row.series.rttMeanMs),
      },
    })),
  };
}

function thinnedBurst(r: BurstResult): object {
  return {
    ...r,
    seriesEvery: SERIES_EVERY,
    timesS: every(r.timesS),
    offeredPerSec: every(r.offeredPerSec),
    rows: r.rows.map((row) => ({
      ...row,
      series: {
        depth: every(row.series.depth),
        shedPerSec: {
          idle: every(row.series.shedPerSec.idle),
          transition: every(row.series.shedPerSec.transition),
          compliance: every(row.series.shedPerSec.compliance),
        },
      },
    })),
  };
}

function write(name: string, text: string): void {
  writeFileSync(join(out, name), text);
  console.log(`wrote ${join(out, name)}`);
}

function run<T>(what: string, f: () => T): T {
  const t0 = performance.now();
  let result: T;
  try {
    result = f();
  } catch (e) {
    if (e instanceof RangeError) fail(e.message);
    throw e;
  }
  console.log(`${what}: ${((performance.now() - t0) / 1000).toFixed(1)} s wall`);
  return result;
}

if (scenario === 'limiters' || scenario === 'all') {
  const r = run(`limiters, seed ${seed}, ${minutes} simulated minutes`, () =>
    simulateLimiters({ seed, minutes, ...extra }),
  );
  console.log(`\n${limitersTable(r)}\n`);
  for (const [k, v] of Object.entries(r.definitions)) console.log(`- ${k}: ${v}`);
  write('limiters.json', `${JSON.stringify(thinnedLimiters(r), null, 1)}\n`);
  write('limiters.svg', limitersChartSvg(r));
  write('gradient.svg', gradientChartSvg(r));
  console.log('');
}
if (scenario === 'burst' || scenario === 'all') {
  const r = run(`burst, seed ${seed}, ${minutes} simulated minutes`, () => simulateBurst({ seed, minutes, ...extra }));
  console.log(`\n${burstTable(r)}\n`);
  console.log(
    `minimum any policy must shed: ${r.minimumShed.toLocaleString('en-US')} of ` +
      `${(r.offered.idle + r.offered.transition + r.offered.compliance).toLocaleString('en-US')} pings ` +
      `(${(r.minimumShedShare * 100).toFixed(2)} %)`,
  );
  for (const [k, v] of Object.entries(r.definitions)) console.log(`- ${k}: ${v}`);
  write('burst.json', `${JSON.stringify(thinnedBurst(r), null, 1)}\n`);
  write('burst.svg', burstChartSvg(r));
}
