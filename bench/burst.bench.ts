/**
 * The second seed's burst on the real pipeline: telemetry at a baseline the router drains comfortably, driven to 3x
 * the baseline for `--seconds`, then back, sent over TCP by a load generator in its own process
 * (bench/loadgen/burst-loadgen.ts) to a fresh router per row (bench/burst/router-row.ts, a process of its own:
 * `createRouter`, its real TCP listener on loopback, an in-process callback downstream), every row on the same offered
 * traffic.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/burst.bench.js [--baseline N] [--seconds S] [--runs K]
 *       [--capacity C] [--warmup-seconds 4] [--lead-seconds 3] [--tail-seconds 6] [--rows unbounded,naive,lanes]
 *       (`--rows unbounded-deadline`: the unbounded row with the frame deadline at its default)
 *
 * Schedule per row: `--warmup-seconds` at a third of the baseline (the router's cold start), `--lead-seconds` at the
 * baseline, `--seconds` (default 12) at 3x the baseline, `--tail-seconds` at the baseline.
 *
 * Scaling to the host: first a probe (a router with the naive row's options, offered more than it can take for
 * `--probe-seconds` after a 3 s warm-up) measures the pipeline's drain capacity C here: the median processed rate of
 * 250 ms samples over the probe's second half, once the rings stay at least half full (the probe rate grows by 1.6
 * until they do, and is measured again at about the burst's rate when it was far from it: the drain shares the two
 * cores with the edge's decoding and shedding). The baseline is then 0.6 x C (or `--baseline`), the burst 3 x the
 * baseline (1.8 x C): the baseline drains with room to spare and the burst exceeds the drain. The host's other work
 * moves the drain by up to 2x within minutes, so each later run is scaled to the drain the run before it measured
 * (its naive row's mean processed rate during the burst), and a run whose burst did not exceed that drain plus the
 * rings' capacity (the minimum below is 0) is discarded and run again, at most twice in all (discarded runs are kept
 * in the JSON). `--capacity` skips the probe and scales every run to C.
 *
 * Traffic (bench/burst/traffic.ts): a seeded fleet of `--devices` devices in a 6 x 6 km city of 12,000 fences, 56 % of
 * the devices parked, and two sites of small compliance fences sized so that about 2 % of pings fall near one: the
 * router's lane classifier then makes about 2 % COMPLIANCE, 55 % IDLE and 43 % TRANSITION of the pings (measured and
 * reported per row). Every ping's `ts` is its intended send time.
 *
 * Rows:
 * - `unbounded queue`: `ingest: { overload: "backpressure", frameDeadlineMs: 0 }`, the product's way of not shedding
 *   a TCP source: the router stops reading a connection while its rings are full, so the overload waits in the socket
 *   buffers and in the generator, which keeps every ping it cannot hand over in memory and reports its queued bytes
 *   and RSS. (The frame deadline is off because the router otherwise closes a connection it has kept paused with a
 *   partial frame for 10 s, losing what was queued behind it; see bench/RESULTS.md.)
 * - `naive tail shedding`: `admission: { reservedFraction: 0, watermarkFraction: 1, queueDelayTargetMs: 0 }`: no
 *   reserved slice, the IDLE token bucket never consulted (watermark at 100 %), no queue-delay controller: every ping
 *   is admitted while its ring has a free slot and shed as ring_full otherwise, whatever its lane.
 * - `lane admission (defaults)`: the product's defaults.
 *
 * Figures per row (held times over the window from the burst's start to the end of the row, when everything sent
 * was processed; counts over the whole row): held-time P99 (the router's histograms: admission -> handed to the
 * downstream, per trigger, overall and by trigger lane, i.e. the fence's class), the time from each ping's intended
 * send time to the delivery of its trigger (what the router's held time leaves out: the wait in front of admission),
 * shed % by lane, total shed against the minimum any policy must shed, COMPLIANCE pings lost, peak memory.
 *
 * The minimum: with the rings empty when the burst starts (the baseline is below the drain), a policy that drains at
 * D pings/s and may hold Q records (every shard's ring, `shards x ringCapacitySlots`) must shed at least
 * `max(0, A_burst - D x S - Q)`, A_burst the pings sent during the S-second burst. D is the drain measured in the
 * same run by the policy that keeps the rings full (the naive row: pings it processed during the burst / S; the
 * probe's C when that row is not run), so the minimum moves with the host's load from run to run. Also reported: the
 * same with Q replaced by what D drains in 40 ms (the most a policy can hold and keep its wait under 40 ms), and with
 * D the row's own drain during the burst (what its shed would have been worth had it kept the consumer as busy).
 *
 * Writes bench/out/burst.json (the figures of every run and their medians, and a time series per row of the last
 * run: ring fill, shed, admitted and offered per lane per second, 250 ms apart) and bench/burst.svg (ring fill and
 * shed by lane through the burst, per row, and the generator's queue for the unbounded row).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { RouterOptionsInput } from '../src/index.js';
import { E2E_BOUNDS_S } from './burst/e2e-histogram.js';
import type { RowReport, RowSample, RowSpec } from './burst/router-row.js';
import { shapeCity, type CityShape, type FleetShape } from './burst/traffic.js';
import { quantileBetween } from './soak/scrape.js';
import { renderSvg, type Panel } from './soak/svg.js';

const here = dirname(fileURLToPath(import.meta.url));
const REPO = join(here, '..', '..');
const ROW_SCRIPT = join(here, 'burst', 'router-row.js');
const LOADGEN = join(here, 'loadgen', 'burst-loadgen.js');

const { values } = parseArgs({
  options: {
    baseline: { type: 'string' },
    seconds: { type: 'string', default: '12' },
    runs: { type: 'string', default: '1' },
    capacity: { type: 'string' },
    'warmup-seconds': { type: 'string', default: '4' },
    'lead-seconds': { type: 'string', default: '3' },
    'tail-seconds': { type: 'string', default: '6' },
    'probe-seconds': { type: 'string', default: '6' },
    'probe-rate': { type: 'string', default: '40000' },
    devices: { type: 'string', default: '6000' },
    'sample-ms': { type: 'string', default: '250' },
    rows: { type: 'string' },
  },
});

const positive = (name: string, text: string | undefined): number => {
  const v = Number(text);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`--${name} must be a positive number, got ${String(text)}`);
  return v;
};
const burstS = positive('seconds', values.seconds);
const runs = Math.floor(positive('runs', values.runs));
const warmupS = positive('warmup-seconds', values['warmup-seconds']);
const leadS = positive('lead-seconds', values['lead-seconds']);
/** Seconds from the generator's start to the burst's start. */
const burstStartS = warmupS + leadS;
const tailS = positive('tail-seconds', values['tail-seconds']);
const probeS = positive('probe-seconds', values['probe-seconds']);
const sampleMs = positive('sample-ms', values['sample-ms']);

/** Share of the baseline in the drain capacity, and the burst's multiple of the baseline. */
const BASELINE_OF_CAPACITY = 0.6;
const BURST_MULTIPLE = 3;
/** The probe's warm-up at a third of its rate, s. */
const PROBE_WARMUP_S = 3;
/** How many times at most a run without an overload (the host drained the whole burst) is run again. */
const MAX_RERUNS = 2;
/** The schedule's phases: warm-up, baseline, burst, baseline. */
const PHASE_BURST = 2;
/** The held-time bound the second minimum allows a policy, s. */
const WAIT_BOUND_S = 0.04;

const FLEET: FleetShape = {
  devices: Math.floor(positive('devices', values.devices)),
  seed: 7,
  radiusM: 2800,
  boundM: 2900,
  parkedFraction: 0.56,
};
const CITY: CityShape = {
  seed: 11,
  fenceCount: 12000,
  fencesPerKm2: 12000 / 36,
  minRadiusM: 60,
  maxRadiusM: 300,
  minVertices: 32,
  maxVertices: 64,
};
const COMPLIANCE_SHARE = 0.02;

/** The rows: name and the router options that make it. */
const ROWS: readonly { key: string; name: string; options: RouterOptionsInput }[] = [
  {
    key: 'unbounded',
    name: 'unbounded queue',
    // The frame deadline off: with it, the router closes a connection it has kept paused with a partial frame for
    // frameDeadlineMs (10 s), and every ping queued behind it is lost (see bench/RESULTS.md).
    options: { ingest: { overload: 'backpressure', frameDeadlineMs: 0 } },
  },
  {
    key: 'naive',
    name: 'naive tail shedding',
    options: { admission: { reservedFraction: 0, watermarkFraction: 1, queueDelayTargetMs: 0 } },
  },
  { key: 'lanes', name: 'lane admission (defaults)', options: {} },
];
/** Rows run only when `--rows` names them. */
const EXTRA_ROWS: readonly { key: string; name: string; options: RouterOptionsInput }[] = [
  {
    // The unbounded row with the frame deadline at its default (10 s).
    key: 'unbounded-deadline',
    name: 'backpressure, frame deadline 10 s',
    options: { ingest: { overload: 'backpressure' } },
  },
];
const rowFilter = values.rows?.split(',');
const rows = rowFilter === undefined ? ROWS : [...ROWS, ...EXTRA_ROWS].filter((r) => rowFilter.includes(r.key));

/** What the generator printed. */
interface GeneratorRun {
  epochStartMs: number;
  samples: { tS: number; sent: number; queuedBytes: number; rssBytes: number }[];
  done: {
    sent: number;
    bytes: number;
    sentPerPhase: number[];
    scheduleEndS: number;
    flushedAtS: number;
    peakQueuedBytes: number;
    peakRssBytes: number;
    closedConnections: number;
  };
}

/** Reads JSON lines of a child's stdout, handing each to `onLine`. */
function jsonLines(child: ChildProcess, onLine: (v: Record<string, unknown>) => void): void {
  createInterface({ input: child.stdout! }).on('line', (line) => {
    if (line.trim() !== '') onLine(JSON.parse(line) as Record<string, unknown>);
  });
}

const exited = (child: ChildProcess): Promise<number | null> =>
  new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });

/** One row: a router process, the generator against it along `schedule`, and both reports. */
async function runRow(
  name: string,
  options: RouterOptionsInput,
  fencesPath: string,
  schedule: string,
): Promise<{ report: RowReport; gen: GeneratorRun }> {
  const spec: RowSpec = { row: name, fencesPath, options, sampleMs };
  const router = spawn(process.execPath, [ROW_SCRIPT, JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'inherit'] });
  // A bench that fails part-way must not leave a router running.
  const killRouter = (): void => void router.kill('SIGKILL');
  process.once('exit', killRouter);
  let reportLine: RowReport | null = null;
  const port = await new Promise<number>((resolve, reject) => {
    jsonLines(router, (v) => {
      if (typeof v.port === 'number') resolve(v.port);
      else reportLine = v as unknown as RowReport;
    });
    router.once('exit', (code) => reject(new Error(`router-row exited ${String(code)} before listening`)));
  });
  const gen = spawn(
    process.execPath,
    [
      LOADGEN,
      '--port',
      String(port),
      '--schedule',
      schedule,
      '--devices',
      String(FLEET.devices),
      '--seed',
      String(FLEET.seed),
      '--radius-m',
      String(FLEET.radiusM),
      '--bound-m',
      String(FLEET.boundM),
      '--parked-fraction',
      String(FLEET.parkedFraction),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const genRun: Partial<GeneratorRun> & { samples: GeneratorRun['samples'] } = { samples: [] };
  jsonLines(gen, (v) => {
    if (v.start === true) genRun.epochStartMs = v.epochStartMs as number;
    else if (v.done === true) genRun.done = v as unknown as GeneratorRun['done'];
    else genRun.samples.push(v as unknown as GeneratorRun['samples'][number]);
  });
  const genCode = await exited(gen);
  if (genCode !== 0 || genRun.done === undefined) throw new Error(`burst-loadgen exited ${String(genCode)}`);
  router.stdin!.end(`finish ${genRun.done.sent}\n`);
  const code = await exited(router);
  process.off('exit', killRouter);
  if (code !== 0 || reportLine === null) throw new Error(`router-row ${name} exited ${String(code)}`);
  return { report: reportLine, gen: genRun as GeneratorRun };
}

const median = (xs: number[]): number => {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const round = (v: number, digits = 2): number => (Number.isFinite(v) ? Math.round(v * 10 ** digits) / 10 ** digits : v);
const LANES = ['idle', 'transition', 'compliance'] as const;
const total = (r: Record<string, number>): number => LANES.reduce((a, l) => a + (r[l] ?? 0), 0);

/** The processed rate of 250 ms-ish samples, per second, between two epoch times. */
function processedRates(samples: RowSample[], fromMs: number, toMs: number): number[] {
  const out: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1]!;
    const b = samples[i]!;
    if (a.atMs < fromMs || b.atMs > toMs) continue;
    out.push(((b.processed - a.processed) * 1000) / (b.atMs - a.atMs));
  }
  return out;
}

/** What the probe found. */
interface Capacity {
  /** Where it came from: the probe, the previous run's naive row, or --capacity. */
  source: 'probe' | 'previous run' | 'given';
  capacityPerSec: number;
  offeredPerSec: number;
  fill: number;
}

/** The probe: the drain capacity C on this host now, starting at `startRate` pings/s. */
async function probe(fencesPath: string, startRate: number): Promise<Capacity> {
  let rate = Math.round(startRate);
  for (let attempt = 0; ; attempt++) {
    const { report, gen } = await runRow(
      'probe',
      ROWS[1]!.options,
      fencesPath,
      `${Math.round(rate / 3)}:${PROBE_WARMUP_S},${rate}:${probeS}`,
    );
    const from = gen.epochStartMs + (PROBE_WARMUP_S + probeS / 2) * 1000;
    const to = gen.epochStartMs + (PROBE_WARMUP_S + probeS) * 1000;
    const capacity = median(processedRates(report.samples, from, to));
    const inWindow = report.samples.filter((x) => x.atMs >= from && x.atMs <= to);
    const fill = median(inWindow.map((x) => x.ringDepth / x.ringCapacity));
    log(
      `probe ${attempt + 1}: offered ${rate}/s for ${probeS} s (the generator's schedule ran ${round(gen.done.scheduleEndS, 2)} s), processed ${Math.round(capacity)}/s (median, second half), ring fill ${round(fill * 100, 1)} %`,
    );
    // The rings must stay full for the processed rate to be the drain's, not the offered rate. The drain shares the
    // cores with the edge's decoding and shedding, so it is measured once more at about the burst's rate when the
    // saturating probe was far from it.
    const burstRate = capacity * BASELINE_OF_CAPACITY * BURST_MULTIPLE;
    const near = rate >= burstRate * 0.8 && rate <= burstRate * 1.25;
    if ((fill >= 0.5 && near) || attempt === 3)
      return { source: 'probe', capacityPerSec: capacity, offeredPerSec: rate, fill };
    rate = fill >= 0.5 ? Math.round(burstRate) : Math.round(rate * 1.6);
  }
}

/** Quantile q of a histogram between two cumulative snapshots, ms (Infinity past the last bound). */
function p99Ms(bounds: readonly number[], before: number[] | undefined, after: number[] | undefined): number {
  if (after === undefined) return Number.NaN;
  return quantileBetween({ counts: before ?? [] }, { bounds: [...bounds], counts: after }, 0.99) * 1000;
}

/** Pings processed by `ms` (epoch), interpolated between the two samples around it. */
function processedAt(samples: RowSample[], ms: number): number {
  let i = samples.findIndex((x) => x.atMs >= ms);
  if (i < 0) return samples[samples.length - 1]!.processed;
  if (i === 0) i = 1;
  const a = samples[i - 1]!;
  const b = samples[i]!;
  return a.processed + ((b.processed - a.processed) * (ms - a.atMs)) / Math.max(1, b.atMs - a.atMs);
}

/** Mean processed rate over the burst (pings processed between its start and its end, per second). */
function burstDrain(report: RowReport, gen: GeneratorRun): number {
  const burstStartMs = gen.epochStartMs + burstStartS * 1000;
  const burstEndMs = burstStartMs + burstS * 1000;
  return (processedAt(report.samples, burstEndMs) - processedAt(report.samples, burstStartMs)) / burstS;
}

/** The figures of one row of one run; `drainPerSec` is the drain the minimum shed is computed with. */
function figures(
  rowName: string,
  report: RowReport,
  gen: GeneratorRun,
  drainPerSec: number,
): Record<string, unknown> & { series: Record<string, unknown>[] } {
  const burstStartMs = gen.epochStartMs + burstStartS * 1000;
  const burstEndMs = burstStartMs + burstS * 1000;
  const samples = report.samples;
  const last = samples[samples.length - 1]!;
  // The last sample before the burst: the window's start.
  const before = [...samples].reverse().find((x) => x.atMs <= burstStartMs) ?? samples[0]!;
  const f = report.final;
  const sent = gen.done.sent;
  const sentBurst = gen.done.sentPerPhase[PHASE_BURST] ?? 0;
  const ringCapacity = last.ringCapacity;
  const shedByLane = Object.fromEntries(LANES.map((l) => [l, sumOf(f.shed[l] ?? {})]));
  const shedTotal = total(shedByLane);
  const minShed = Math.max(0, sentBurst - drainPerSec * burstS - ringCapacity);
  const minShed40 = Math.max(0, sentBurst - drainPerSec * burstS - drainPerSec * WAIT_BOUND_S);
  const ownDrain = burstDrain(report, gen);
  const minShedOwn = Math.max(0, sentBurst - ownDrain * burstS - ringCapacity);
  const heldBounds = report.heldBounds;
  // The generator's queue: at the burst's start and end, and its peak.
  const genAt = (ms: number): { queuedBytes: number; rssBytes: number; sent: number } => {
    const tS = (ms - gen.epochStartMs) / 1000;
    let best = gen.samples[0] ?? { queuedBytes: 0, rssBytes: 0, sent: 0 };
    for (const s of gen.samples) if (s.tS <= tS) best = s;
    return best;
  };
  const g0 = genAt(burstStartMs);
  const g1 = genAt(burstEndMs);
  const bytesPerPing = gen.done.bytes / Math.max(1, sent);
  // Pings sent and not yet offered to admission (socket buffers, the generator's queue, the router's read buffers).
  let waitingPeak = 0;
  for (const s of samples) {
    const w = genAt(s.atMs).sent - total(s.offered);
    if (w > waitingPeak) waitingPeak = w;
  }
  const waitingAt = (ms: number): number => {
    const s = [...samples].reverse().find((x) => x.atMs <= ms) ?? samples[0]!;
    return Math.max(0, genAt(s.atMs).sent - total(s.offered));
  };
  // Shed before the burst (a router that was not yet keeping up with the baseline).
  const shedBeforeBurst = total(before.shed);
  // Shed after the burst, while the offered rate was back at the baseline.
  const atBurstEnd = [...samples].reverse().find((x) => x.atMs <= burstEndMs) ?? samples[0]!;
  const shedAfterBurst = total(last.shed) - total(atBurstEnd.shed);
  const rssAtBurstStart = before.rssBytes;
  const fromStart = samples.filter((s) => s.atMs >= gen.epochStartMs);
  const series = fromStart.slice(1).map((s, i) => {
    const p = fromStart[i]!;
    const dt = (s.atMs - p.atMs) / 1000;
    const rate = (k: 'shed' | 'admitted' | 'offered'): Record<string, number> =>
      Object.fromEntries(LANES.map((l) => [l, round((s[k][l]! - p[k][l]!) / dt, 0)]));
    const g = genAt(s.atMs);
    return {
      tS: round((s.atMs - gen.epochStartMs) / 1000, 3),
      ringFill: round(s.ringDepth / s.ringCapacity, 4),
      shedPerSec: rate('shed'),
      admittedPerSec: rate('admitted'),
      offeredPerSec: rate('offered'),
      processedPerSec: round((s.processed - p.processed) / dt, 0),
      routerRssMiB: round(s.rssBytes / 2 ** 20, 1),
      generatorQueuedMiB: round(g.queuedBytes / 2 ** 20, 2),
      waitingInFrontPings: Math.max(0, g.sent - total(s.offered)),
      waitingInFrontMiB: round((Math.max(0, g.sent - total(s.offered)) * bytesPerPing) / 2 ** 20, 2),
    };
  });
  const offeredAll = total(f.offered);
  return {
    row: rowName,
    sent,
    sentBurst,
    settled: report.settled,
    laneMixOfOffered: Object.fromEntries(LANES.map((l) => [l, round((f.offered[l]! / offeredAll) * 100, 2)])),
    heldP99Ms: {
      all: round(p99Ms(heldBounds, before.held.all, last.held.all)),
      compliance: round(p99Ms(heldBounds, before.held.compliance, last.held.compliance)),
      transition: round(p99Ms(heldBounds, before.held.transition, last.held.transition)),
    },
    heldSamples: {
      compliance: sumOf(last.held.compliance!) - sumOf(before.held.compliance ?? []),
      transition: sumOf(last.held.transition!) - sumOf(before.held.transition ?? []),
    },
    intendedToDeliveredP99Ms: {
      compliance: round(p99Ms(E2E_BOUNDS_S, before.e2e.compliance, last.e2e.compliance)),
      transition: round(p99Ms(E2E_BOUNDS_S, before.e2e.transition, last.e2e.transition)),
    },
    shedPctByLane: Object.fromEntries(
      LANES.map((l) => [l, round((shedByLane[l]! / Math.max(1, f.offered[l]!)) * 100, 2)]),
    ),
    shedByReason: f.shed,
    shedTotal,
    shedPct: round((shedTotal / Math.max(1, sent)) * 100, 2),
    minShedDrainPerSec: Math.round(drainPerSec),
    ringCapacitySlots: ringCapacity,
    minShed: Math.round(minShed),
    minShedPct: round((minShed / sent) * 100, 2),
    shedOverMin: round(shedTotal / minShed, 3),
    minShedWaitBounded: Math.round(minShed40),
    shedOverMinWaitBounded: round(shedTotal / minShed40, 3),
    drainDuringBurstPerSec: Math.round(ownDrain),
    shedOverMinOwnDrain: round(shedTotal / minShedOwn, 3),
    complianceLost: shedByLane.compliance,
    errorLines: report.errorLines,
    errorExamples: report.errorExamples,
    neverArrived: sent - f.accepted - f.rejected,
    rejected: f.rejected,
    fenceOverflows: f.fenceOverflows,
    triggers: f.triggers,
    routerPeakRssMiB: round(report.peakRssBytes / 2 ** 20, 1),
    routerRssAtBurstStartMiB: round(rssAtBurstStart / 2 ** 20, 1),
    generatorPeakQueuedMiB: round(gen.done.peakQueuedBytes / 2 ** 20, 2),
    generatorPeakRssMiB: round(gen.done.peakRssBytes / 2 ** 20, 1),
    generatorQueueGrowthMiBPerBurstSecond: round((g1.queuedBytes - g0.queuedBytes) / burstS / 2 ** 20, 2),
    generatorRssGrowthMiBPerBurstSecond: round((g1.rssBytes - g0.rssBytes) / burstS / 2 ** 20, 2),
    waitingInFrontPeakPings: waitingPeak,
    waitingInFrontGrowthMiBPerBurstSecond: round(
      ((waitingAt(burstEndMs) - waitingAt(burstStartMs)) * bytesPerPing) / burstS / 2 ** 20,
      2,
    ),
    shedBeforeBurst,
    shedAfterBurst,
    waitingInFrontPeakMiB: round((waitingPeak * bytesPerPing) / 2 ** 20, 2),
    generatorFlushedAfterScheduleS: round(gen.done.flushedAtS - gen.done.scheduleEndS, 2),
    connectionsDropped: last.connectionsDropped,
    series,
  };
}

function sumOf(r: Record<string, number> | number[]): number {
  return (Array.isArray(r) ? r : Object.values(r)).reduce((a, v) => a + v, 0);
}

const log = (s: string): void => void process.stderr.write(`burst: ${s}\n`);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gr-burst-'));
  const fencesPath = join(dir, 'fences.geojson');
  const city = shapeCity(CITY, FLEET, COMPLIANCE_SHARE);
  writeFileSync(fencesPath, JSON.stringify(city.geojson));
  log(
    `city: ${CITY.fenceCount} fences and ${city.complianceFences} compliance fences in ${city.sites} sites` +
      ` of ${Math.round(city.siteSideM)} m; expected lanes ` +
      `compliance ${round(city.expected.compliance * 100)} %, idle ${round(city.expected.idle * 100)} %`,
  );
  const loadAtStart = loadavg().map((v) => round(v));
  const perRun: Record<string, unknown>[][] = [];
  const discarded: Record<string, unknown>[][] = [];
  const lastSeries: Record<string, Record<string, unknown>[]> = {};
  const loads: number[][] = [];
  // The drain the next run is scaled to: the probe's before the first run, then the naive row's of the run before.
  let nextCapacity: Capacity | null = null;
  let scaled = { capacityPerSec: Number.NaN, baseline: Number.NaN, burst: Number.NaN };
  for (let run = 0; perRun.length < runs && discarded.length <= MAX_RERUNS; run++) {
    const capacity: Capacity =
      values.capacity !== undefined
        ? {
            source: 'given',
            capacityPerSec: positive('capacity', values.capacity),
            offeredPerSec: Number.NaN,
            fill: Number.NaN,
          }
        : (nextCapacity ?? (await probe(fencesPath, positive('probe-rate', values['probe-rate']))));
    const baseline =
      values.baseline === undefined
        ? Math.round(capacity.capacityPerSec * BASELINE_OF_CAPACITY)
        : positive('baseline', values.baseline);
    const burst = baseline * BURST_MULTIPLE;
    const schedule = `${Math.round(baseline / 3)}:${warmupS},${baseline}:${leadS},${burst}:${burstS},${baseline}:${tailS}`;
    log(
      `run ${run + 1}: capacity ${Math.round(capacity.capacityPerSec)}/s (${capacity.source}); baseline ${baseline}/s ` +
        `(${round(baseline / capacity.capacityPerSec)} x C), burst ${burst}/s (${round(burst / capacity.capacityPerSec)} x C) ` +
        `for ${burstS} s between ${leadS} s and ${tailS} s of baseline (after a ${warmupS} s warm-up at a third of the baseline)`,
    );
    const done: { report: RowReport; gen: GeneratorRun; load: number[] }[] = [];
    for (const r of rows) {
      const { report, gen } = await runRow(r.name, r.options, fencesPath, schedule);
      const load = loadavg().map((v) => round(v));
      loads.push(load);
      done.push({ report, gen, load });
      log(`run ${run + 1} ${r.name}: done, mean drain in the burst ${Math.round(burstDrain(report, gen))}/s`);
    }
    // The drain the minimum is computed with: this run's, with the rings kept full (the naive row), else the probe's.
    const naive = rows.findIndex((r) => r.key === 'naive');
    const drainPerSec = naive >= 0 ? burstDrain(done[naive]!.report, done[naive]!.gen) : capacity.capacityPerSec;
    const series: Record<string, Record<string, unknown>[]> = {};
    const rowsOfRun = rows.map((r, i) => {
      const { series: rowSeries, ...fig } = figures(r.name, done[i]!.report, done[i]!.gen, drainPerSec);
      series[r.key] = rowSeries;
      log(`run ${run + 1} ${r.name}: ${JSON.stringify({ ...fig, shedByReason: undefined, errorExamples: undefined })}`);
      return {
        ...fig,
        capacityPerSec: Math.round(capacity.capacityPerSec),
        scaledTo: capacity.source,
        baselinePerSec: baseline,
        burstPerSec: burst,
        loadAvg: done[i]!.load,
      };
    });
    // The host's free CPU moves with its other work: the next run is scaled to the drain this run measured.
    if (naive >= 0)
      nextCapacity = { source: 'previous run', capacityPerSec: drainPerSec, offeredPerSec: burst, fill: Number.NaN };
    // A run whose burst did not exceed the drain plus the rings (minimum 0: the host drained what the rings could not
    // hold) had no overload to judge a policy by: it does not count.
    const minShed = naive >= 0 ? ((rowsOfRun[naive] as Record<string, unknown>).minShed as number) : 1;
    if (minShed <= 0) {
      log(`run ${run + 1}: the burst did not exceed the drain plus the rings' capacity; run discarded`);
      discarded.push(rowsOfRun);
      continue;
    }
    perRun.push(rowsOfRun);
    Object.assign(lastSeries, series);
    scaled = { capacityPerSec: capacity.capacityPerSec, baseline, burst };
  }
  // Medians over runs of every numeric figure (and of numeric fields one level down).
  const medians =
    perRun.length === 0
      ? []
      : rows.map((r, i) =>
          medianFigures(
            r.name,
            perRun.map((rr) => rr[i]!),
          ),
        );
  const result = {
    command: `node dist/bench/burst.bench.js ${process.argv.slice(2).join(' ')}`.trim(),
    date: new Date().toISOString(),
    host: { loadAvgAtStart: loadAtStart, loadAvgAfterEachRow: loads },
    scaling: {
      baselineOfCapacity: BASELINE_OF_CAPACITY,
      burstMultiple: BURST_MULTIPLE,
      probeSeconds: probeS,
      probeWarmupSeconds: PROBE_WARMUP_S,
      capacityGiven: values.capacity !== undefined,
      baselineGiven: values.baseline !== undefined,
      lastRun: scaled,
    },
    schedule: { warmupS, leadS, burstS, tailS },
    waitBoundS: WAIT_BOUND_S,
    fleet: FLEET,
    city: { ...CITY, complianceFences: city.complianceFences, expectedLaneShares: city.expected },
    rows: rows.map((r) => ({ key: r.key, name: r.name, options: r.options })),
    medians,
    runs: perRun,
    discardedRuns: discarded,
    seriesOfLastRun: lastSeries,
  };
  mkdirSync(join(REPO, 'bench', 'out'), { recursive: true });
  writeFileSync(join(REPO, 'bench', 'out', 'burst.json'), `${JSON.stringify(result, null, 2)}\n`);
  if (Object.keys(lastSeries).length > 0)
    writeFileSync(join(REPO, 'bench', 'burst.svg'), plot(lastSeries, scaled.baseline, scaled.burst));
  process.stdout.write(`${markdownTable(medians)}\n`);
  for (const [k, rr] of perRun.entries()) {
    const f = rr[0]!;
    process.stdout.write(
      `run ${k + 1}: C ${String(f.capacityPerSec)}/s (${String(f.scaledTo)}), baseline ${String(f.baselinePerSec)}/s, burst ${String(f.burstPerSec)}/s, ` +
        `drain D ${String(f.minShedDrainPerSec)}/s, ring capacity ${String(f.ringCapacitySlots)} slots, burst sent ${String(f.sentBurst)}\n`,
    );
  }
  if (discarded.length > 0) process.stdout.write(`runs discarded (no overload): ${discarded.length}\n`);
  process.stdout.write(
    `load average (1, 5, 15 min): at the start ${loadAtStart.join(', ')}; after each row ${loads.map((l) => l[0]).join(', ')}\n`,
  );
  rmSync(dir, { recursive: true, force: true });
}

/** Medians over runs of every number of a row's figures, and of the numbers one level down. */
function medianFigures(name: string, all: Record<string, unknown>[]): Record<string, unknown> {
  const out: Record<string, unknown> = { row: name, runs: all.length };
  for (const [key, v] of Object.entries(all[0]!)) {
    if (typeof v === 'number') out[key] = median(all.map((x) => x[key] as number));
    else if (v !== null && typeof v === 'object' && Object.values(v).every((x) => typeof x === 'number')) {
      out[key] = Object.fromEntries(
        Object.keys(v).map((k) => [k, median(all.map((x) => (x[key] as Record<string, number>)[k]!))]),
      );
    }
  }
  return out;
}

/** The medians as the Markdown table bench/RESULTS.md quotes. */
function markdownTable(medians: Record<string, unknown>[]): string {
  const n = (v: unknown): string =>
    typeof v !== 'number' || Number.isNaN(v) ? '-' : v === Infinity ? 'inf' : v.toLocaleString('en-US');
  const o = (m: Record<string, unknown>, key: string): Record<string, number> => m[key] as Record<string, number>;
  const lines = [
    '| row | held P99 ms: all / COMPLIANCE / TRANSITION | intended send -> delivered P99 ms: COMPLIANCE / TRANSITION | shed % IDLE / TRANSITION / COMPLIANCE | shed % of sent | minimum % of sent | shed / minimum (wait-bounded; own drain) | COMPLIANCE lost | router peak RSS MiB | waiting in front of the router: peak MiB, growth MiB per burst s; generator queue peak MiB, RSS peak MiB |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const m of medians) {
    const held = o(m, 'heldP99Ms');
    const e2e = o(m, 'intendedToDeliveredP99Ms');
    const shed = o(m, 'shedPctByLane');
    lines.push(
      `| ${String(m.row)} | ${n(held.all)} / ${n(held.compliance)} / ${n(held.transition)} | ${n(e2e.compliance)} / ${n(e2e.transition)} | ` +
        `${n(shed.idle)} / ${n(shed.transition)} / ${n(shed.compliance)} | ${n(m.shedPct)} | ${n(m.minShedPct)} | ` +
        `${n(m.shedOverMin)} (${n(m.shedOverMinWaitBounded)}; ${n(m.shedOverMinOwnDrain)}) | ${n(m.complianceLost)} | ` +
        `${n(m.routerPeakRssMiB)} | ${n(m.waitingInFrontPeakMiB)}, ${n(m.waitingInFrontGrowthMiBPerBurstSecond)}; ` +
        `${n(m.generatorPeakQueuedMiB)}, ${n(m.generatorPeakRssMiB)} |`,
    );
  }
  return lines.join('\n');
}

/** The SVG: per row, the telemetry ring fill and the shed rate by lane through the burst. */
function plot(series: Record<string, Record<string, unknown>[]>, baseline: number, burst: number): string {
  type Point = {
    tS: number;
    ringFill: number;
    shedPerSec: Record<string, number>;
    generatorQueuedMiB: number;
    waitingInFrontMiB: number;
  };
  // One time axis: the longest row's samples; shorter rows end early (no points past their end).
  const keys = rows.map((r) => r.key).filter((k) => series[k] !== undefined);
  const longest = keys.reduce((a, k) => (series[k]!.length > series[a]!.length ? k : a), keys[0]!);
  const tS = (series[longest] as Point[]).map((p) => p.tS);
  const at = (k: string, get: (p: Point) => number): number[] =>
    tS.map((_, j) => {
      const p = (series[k] as Point[])[j];
      return p === undefined ? Number.NaN : get(p);
    });
  const panels: Panel[] = [];
  for (const r of rows) {
    if (series[r.key] === undefined) continue;
    panels.push({
      title: `${r.name}: telemetry ring fill, % of all rings' slots`,
      yMax: 100,
      lines: [{ label: 'ring fill', colour: '#2ca02c', values: at(r.key, (p) => p.ringFill * 100) }],
    });
    panels.push({
      title: `${r.name}: shed, thousand pings/s by lane`,
      lines: [
        { label: 'idle', colour: '#7f7f7f', values: at(r.key, (p) => p.shedPerSec.idle! / 1000) },
        { label: 'transition', colour: '#ff7f0e', values: at(r.key, (p) => p.shedPerSec.transition! / 1000) },
        { label: 'compliance', colour: '#d62728', values: at(r.key, (p) => p.shedPerSec.compliance! / 1000) },
      ],
    });
    if (r.key.startsWith('unbounded')) {
      panels.push({
        title: `${r.name}: sent and not yet offered to admission, MiB (socket buffers, the generator's queue)`,
        lines: [
          { label: 'waiting in front of the router', colour: '#9467bd', values: at(r.key, (p) => p.waitingInFrontMiB) },
          {
            label: "of it in the generator's queue",
            colour: '#1f77b4',
            values: at(r.key, (p) => p.generatorQueuedMiB),
          },
        ],
      });
    }
  }
  return renderSvg(
    `Burst over TCP: ${baseline.toLocaleString('en-US')} pings/s, ${burst.toLocaleString('en-US')}/s for ${burstS} s, then ${baseline.toLocaleString('en-US')}/s`,
    tS,
    panels,
    [
      { atS: 0, label: 'warm-up' },
      { atS: warmupS, label: 'baseline' },
      { atS: burstStartS, label: 'burst' },
      { atS: burstStartS + burstS, label: 'baseline' },
    ],
    { timeUnit: 's', xLabel: 'seconds since the load generator started' },
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`burst: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
