/**
 * Limiter comparison against a real HTTP downstream in a separate process whose capacity changes during each run, the
 * step test and the first seed's scenario on real HTTP: 1x (16 workers), then 2x (32: a deploy doubles it), then
 * 0.6x (10 workers: a noisy neighbour); service time 20 ms. For each limiter a fresh Dispatcher (product defaults:
 * the dispatcher thread's own loop stalls are taken out of the samples) offers triggers at a fixed rate above the
 * largest capacity and the figures are taken side by side: utilisation of true capacity, P99 trigger latency (send
 * to acknowledgment), server-side P99 (arrival to answer), overload episodes, deferred triggers, and per step the
 * settling time and overshoot of the limit.
 *
 * The unloaded latency baseline is measured after a discarded warm-up (JIT, first connections) against the same
 * server given 64 workers, with a fixed limit of 24: the server never queues, while the client sends about as many
 * requests per second as in the loaded runs, so its own event-loop and scheduling delays (large on a shared 2-core
 * host) are in the baseline as they are in the runs. Before and after the candidates; the baseline is the P99 of
 * the pooled samples (several thousand), not the maximum of a few dozen. The client's event-loop delay and the
 * server-side queue wait are recorded per run, so client-side inflation can be told from downstream queueing.
 *
 * Settling: after each step, the time until the limit's 250 ms moving average enters, and then stays within, +-15 %
 * of the phase's final level (the median limit over the phase's last half); overshoot: how far the moving average went
 * past that level in the step's direction after first reaching it, as a fraction of it.
 *
 * Run: npm run build && node --expose-gc dist/bench/limiters.bench.js [--repeats N] [--only NAME] [--phase-ms MS]
 *   --repeats N    run every candidate N times (interleaved) and report per-limiter medians (default 1)
 *   --only NAME    only the candidates whose name contains NAME (for tuning; the report needs all of them)
 *   --phase-ms MS  length of each capacity phase (default 8000)
 *   GRADIENT_TRY='{"allowanceFactor":0.5}' (environment) adds a row: the gradient with those options (an array of
 *   option objects adds a row for each)
 * Writes bench/out/limiters.json (every pass, the medians, and each row's limit over time) and
 * bench/limiters-http.svg (limit vs true capacity over time, every row of the first pass).
 */
import { fork, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Lane, TriggerType } from '../src/shm/layout.js';
import { nowNs } from '../src/shm/clock.js';
import { Dispatcher } from '../src/dispatch/dispatcher.js';
import {
  AimdLimit,
  FixedLimit,
  Gradient2Limit,
  GradientLimit,
  VegasLimit,
  WindowedLimit,
  type Limit,
} from '../src/dispatch/limits/index.js';
import { IndexNamer } from '../src/dispatch/sinks/format.js';
import { WebhookSink } from '../src/dispatch/sinks/webhook-sink.js';
import { TriggerRecord } from '../test/dispatch/fixtures.js';
import { renderChart } from '../src/sim/chart/svg-chart.js';

const SERVICE_MS = 20;
const BASE_WORKERS = 16;
const PHASE_WORKERS: [string, number][] = [
  ['1x', BASE_WORKERS],
  ['2x', BASE_WORKERS * 2],
  ['0.6x', Math.round(BASE_WORKERS * 0.6)],
];
const OFFER_PER_S = 2000; // above the 2x capacity of 1,600 requests/s
/** Limit samples for the settling figures: a moving average over this long, ms. */
const SETTLE_AVERAGE_MS = 250;
/** The settled band around a phase's final level. */
const SETTLE_BAND = 0.15;
/** The settled server-side P99 leaves out requests that arrived within this long of a step, ms. */
const SETTLED_AFTER_MS = 2000;
const TICK_MS = 5;
const SEED = 0x5eed;
const UNLOADED_LIMIT = 24;
const UNLOADED_WORKERS = 64;
const UNLOADED_MS = 6000;

interface Row {
  limiter: string;
  utilisation: number;
  nominalUtilisation: number;
  p50Ms: number;
  p99Ms: number;
  serverWaitP99Ms: number;
  loopDelayP99Ms: number;
  overloadEpisodes: number;
  deferred: number;
  delivered: number;
  refused503: number;
  meanLimitPerPhase: number[];
  utilisationPerPhase: number[];
  /** Gradient only: fast decreases made. */
  fastDecreases: number;
  /** Server side: P99 from arrival to answer, ms. */
  serverP99Ms: number;
  /** The same over each phase from SETTLED_AFTER_MS after its start (the limit has had time to settle), ms. */
  settledServerP99Ms: number;
  /** Per step (phases 2 and 3): settling time, ms (NaN: never settled), and overshoot as a fraction. */
  settleMsPerStep: number[];
  overshootPerStep: number[];
  /** Per phase: the share of requests that waited at the server over 1 ms, and the server wait P99, ms. */
  waitedShareByPhase: number[];
  waitP99MsByPhase: number[];
  /** The limit every tick: [ms since the run's start, limit] pairs. */
  limitSeries: number[];
  samplesMs: Float64Array;
}

interface ServerStats {
  busyIntegralMs: number;
  capacityIntegralMs: number;
  nominalBusyMs: number;
  served: number;
  refused: number;
  episodes: number;
  waitP99Ms: number;
  residenceP99Ms: number;
  settledResidenceP99Ms: number;
  /** Per phase: requests, the share that waited over 1 ms, the wait P99 (ms). */
  waitByPhase: { requests: number; over1Ms: number; p99Ms: number }[];
}

function rpc<T>(child: ChildProcess, msg: object, reply?: string): Promise<T> {
  return new Promise((resolve) => {
    if (reply === undefined) {
      child.send(msg);
      resolve(undefined as T);
      return;
    }
    const on = (m: { op: string }): void => {
      if (m.op !== reply) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
    child.send(msg);
  });
}

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * Settling time and overshoot of one phase from its limit samples ([t, limit] pairs relative to the step): see the
 * module comment. `up` is the step's direction.
 */
function settleOf(points: number[], up: boolean): { settleMs: number; overshoot: number } {
  const n = points.length / 2;
  if (n < 4) return { settleMs: NaN, overshoot: NaN };
  const tEnd = points[2 * (n - 1)]!;
  const tail: number[] = [];
  for (let i = 0; i < n; i++) if (points[2 * i]! >= tEnd / 2) tail.push(points[2 * i + 1]!);
  const level = median(tail);
  const avg: number[] = [];
  let lo = 0;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    sum += points[2 * i + 1]!;
    while (points[2 * i]! - points[2 * lo]! > SETTLE_AVERAGE_MS) sum -= points[2 * lo++ + 1]!;
    avg.push(sum / (i - lo + 1));
  }
  let lastOut = -1;
  for (let i = 0; i < n; i++) if (Math.abs(avg[i]! - level) > SETTLE_BAND * level) lastOut = i;
  const settleMs = lastOut === n - 1 ? NaN : lastOut < 0 ? 0 : points[2 * (lastOut + 1)]!;
  let reached = false;
  let overshoot = 0;
  for (let i = 0; i < n; i++) {
    const a = avg[i]!;
    if (!reached && (up ? a >= level : a <= level)) reached = true;
    if (reached) overshoot = Math.max(overshoot, up ? (a - level) / level : (level - a) / level);
  }
  return { settleMs, overshoot };
}

async function runOne(
  child: ChildProcess,
  port: number,
  name: string,
  limit: Limit,
  safetyCap: number,
  phases: [string, number, number][],
): Promise<Row> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `bench-${name.replace(/[^a-z0-9]/gi, '')}-`));
  const namer = new IndexNamer();
  const rtts = new Float64Array(200_000);
  let nRtt = 0;
  const d = new Dispatcher({
    stateDir: dir,
    namer,
    maxDevices: 4096,
    // The control loop alone: a full queue refuses (no backlog log on disk).
    spill: false,
    downstreams: [
      {
        name,
        sink: new WebhookSink({ url: `http://127.0.0.1:${port}/`, timeoutMs: 1000, maxSockets: 256 }),
        limit,
        safetyCap,
        maxBatchTriggers: 1,
        queueCapacitySlots: 256,
        maxQueueAgeMs: 250,
        replay: false,
        breaker: { minimumRequests: 1000, windowSize: 1000, failureRateThreshold: 0.9 },
      },
    ],
    onDelivered: (_d, batch, now) => {
      if (nRtt < rtts.length) rtts[nRtt++] = (now - batch.sentAtNs) / 1e6;
    },
  });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  let seq = 0;
  let rand = SEED;
  await rpc(child, { op: 'workers', workers: phases[0]![1] });
  await rpc(child, { op: 'reset' });
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const meanLimits: number[] = [];
  const phaseUtil: number[] = [];
  const settleMsPerStep: number[] = [];
  const overshootPerStep: number[] = [];
  const limitSeries: number[] = [];
  const runStart = performance.now();
  let prev = { busy: 0, cap: 0 };
  for (let p = 0; p < phases.length; p++) {
    const [, workers, ms] = phases[p]!;
    await rpc(child, { op: 'workers', workers });
    await rpc(child, { op: 'mark' });
    const start = performance.now();
    let offeredInPhase = 0;
    let limitSum = 0;
    let limitN = 0;
    const points: number[] = [];
    while (performance.now() - start < ms) {
      const due = Math.floor(((performance.now() - start) / 1000) * OFFER_PER_S);
      while (offeredInPhase < due) {
        offeredInPhase++;
        seq++;
        // Seeded lane mix: one in ten is COMPLIANCE.
        rand = (Math.imul(rand, 1103515245) + 12345) >>> 0;
        const lane = rand % 10 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION;
        d.offer(r.set(seq, TriggerType.ENTER, lane, seq & 1023, seq & 4095, nowNs()).f64, r.i32, 0, 0);
      }
      d.pump();
      limitSum += ds.limiter.limit;
      limitN++;
      points.push(performance.now() - start, ds.limiter.limit);
      limitSeries.push(Math.round(performance.now() - runStart), ds.limiter.limit);
      await new Promise((res) => setTimeout(res, TICK_MS));
    }
    meanLimits.push(limitSum / limitN);
    if (p > 0) {
      const st = settleOf(points, workers > phases[p - 1]![1]);
      settleMsPerStep.push(st.settleMs);
      overshootPerStep.push(st.overshoot);
    }
    const s = await rpc<ServerStats>(child, { op: 'stats' }, 'stats');
    phaseUtil.push((s.busyIntegralMs - prev.busy) / (s.capacityIntegralMs - prev.cap));
    prev = { busy: s.busyIntegralMs, cap: s.capacityIntegralMs };
  }
  loop.disable();
  const stats = await rpc<ServerStats>(child, { op: 'stats', settleMs: SETTLED_AFTER_MS }, 'stats');
  await d.close(2000);
  fs.rmSync(dir, { recursive: true, force: true });
  const sorted = rtts.slice(0, nRtt).sort();
  return {
    limiter: name,
    utilisation: stats.busyIntegralMs / stats.capacityIntegralMs,
    nominalUtilisation: stats.nominalBusyMs / stats.capacityIntegralMs,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    serverWaitP99Ms: stats.waitP99Ms,
    loopDelayP99Ms: loop.percentile(99) / 1e6,
    overloadEpisodes: stats.episodes,
    deferred: ds.deadLettered,
    delivered: ds.delivered,
    refused503: stats.refused,
    meanLimitPerPhase: meanLimits,
    utilisationPerPhase: phaseUtil,
    fastDecreases: limit instanceof GradientLimit ? limit.fastDecreases : 0,
    serverP99Ms: stats.residenceP99Ms,
    settledServerP99Ms: stats.settledResidenceP99Ms,
    waitedShareByPhase: stats.waitByPhase.map((w) => w.over1Ms),
    waitP99MsByPhase: stats.waitByPhase.map((w) => w.p99Ms),
    settleMsPerStep,
    overshootPerStep,
    limitSeries,
    samplesMs: sorted,
  };
}

/**
 * Rows for GRADIENT_TRY: one object of gradient options, or an array of them (a row each, named by its options).
 */
function tryRows(json: string | undefined): [string, () => Limit, number][] {
  if (json === undefined) return [];
  const parsed = JSON.parse(json) as object | object[];
  const list = Array.isArray(parsed) ? parsed : [parsed];
  return list.map((o) => [`gradient try ${JSON.stringify(o)}`, () => new GradientLimit(o), 256]);
}

/** Limit vs true capacity over time for every row of one pass (the limit resampled every 100 ms). */
function limitChart(rows: Row[], phases: [string, number, number][]): string {
  const stepMs = 100;
  const totalMs = phases.reduce((a, [, , ms]) => a + ms, 0);
  const x: number[] = [];
  for (let t = 0; t <= totalMs; t += stepMs) x.push(t / 1000);
  const workersAt = (tMs: number): number => {
    let end = 0;
    for (const [, workers, ms] of phases) {
      end += ms;
      if (tMs < end) return workers;
    }
    return phases[phases.length - 1]![1];
  };
  const resample = (series: number[]): (number | null)[] => {
    const out: (number | null)[] = [];
    let k = 0;
    let last: number | null = null;
    for (const t of x) {
      while (k < series.length / 2 && series[2 * k]! <= t * 1000) last = series[2 * k++ + 1]!;
      out.push(last);
    }
    return out;
  };
  let markMs = 0;
  const marks = phases.slice(1).map(([name, workers], i) => {
    markMs += phases[i]![2];
    return { x: markMs / 1000, label: `${name}: ${workers} workers` };
  });
  return renderChart({
    title: 'Limit vs true capacity on a real HTTP downstream (20 ms service), per limiter',
    subtitle: `one pass of bench/limiters.bench.ts; capacity ${phases.map(([, w]) => w).join(' -> ')} workers`,
    x,
    xLabel: 'time, s',
    marks,
    panelHeight: 90,
    panels: rows.map((r) => ({
      title: `${r.limiter}: utilisation ${(r.utilisation * 100).toFixed(1)} %, P99 ${r.p99Ms.toFixed(1)} ms, overload episodes ${r.overloadEpisodes}`,
      yLabel: 'requests',
      series: [
        { label: 'true capacity (workers)', values: x.map((t) => workersAt(t * 1000)), dash: '5 3', colour: '#555' },
        { label: 'limit', values: resample(r.limitSeries), step: true },
      ],
    })),
  });
}

function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main(): Promise<void> {
  const repeats = Number(argValue('--repeats') ?? '1');
  if (!Number.isInteger(repeats) || repeats < 1 || repeats > 20)
    throw new RangeError(`--repeats must be an integer in [1, 20], got ${String(argValue('--repeats'))}`);
  const only = argValue('--only');
  const phaseMs = Number(argValue('--phase-ms') ?? '8000');
  if (!Number.isInteger(phaseMs) || phaseMs < 2000 || phaseMs > 600_000)
    throw new RangeError(`--phase-ms must be an integer in [2000, 600000], got ${String(argValue('--phase-ms'))}`);
  const PHASES: [string, number, number][] = PHASE_WORKERS.map(([n, w]) => [n, w, phaseMs]);
  const here = path.dirname(fileURLToPath(import.meta.url));
  const child = fork(path.join(here, 'dispatch-capacity-server.js'), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ready = await new Promise<{ port: number }>((resolve) =>
    child.once('message', (m) => resolve(m as { port: number })),
  );
  await rpc(child, {
    op: 'config',
    config: { serviceMs: SERVICE_MS, queueLimit: 64, overloadWaitMs: SERVICE_MS, overloadMinMs: 200 },
  });
  const loadBefore = os.loadavg();
  const unloadedPhase: [string, number, number][] = [['unloaded', UNLOADED_WORKERS, UNLOADED_MS]];
  // Warm-up, discarded: JIT, sockets and timers settle before anything is measured.
  await runOne(child, ready.port, 'warm-up', new FixedLimit(UNLOADED_LIMIT), 256, [
    ['unloaded', UNLOADED_WORKERS, 2000],
  ]);
  const unloadedA = await runOne(child, ready.port, 'unloaded', new FixedLimit(UNLOADED_LIMIT), 256, unloadedPhase);
  // Fixed limits sized for the low case (10 workers) and the high case (32); the Netflix algorithms with the bounds
  // of our gradient, per sample and on windows (their library's WindowedLimit defaults: 1 s windows of at least 10
  // samples), as their users run them; the gradient with the product defaults, bare and under a static cap.
  const bounds = { initialLimit: 20, minLimit: 4, maxLimit: 400 };
  const candidates: [string, () => Limit, number][] = [
    ['fixed-low (10)', () => new FixedLimit(10), 256],
    ['fixed-high (32)', () => new FixedLimit(32), 256],
    ['aimd', () => new AimdLimit(bounds), 256],
    ['aimd (windowed)', () => new WindowedLimit(new AimdLimit(bounds)), 256],
    ['vegas', () => new VegasLimit(bounds), 256],
    ['vegas (windowed)', () => new WindowedLimit(new VegasLimit(bounds)), 256],
    ['gradient2', () => new Gradient2Limit(bounds), 256],
    ['gradient2 (windowed)', () => new WindowedLimit(new Gradient2Limit(bounds)), 256],
    ['gradient', () => new GradientLimit(), 256],
    ['gradient + cap 48', () => new GradientLimit(), 48],
    ...tryRows(process.env.GRADIENT_TRY),
  ].filter(([n]) => only === undefined || (n as string).includes(only)) as [string, () => Limit, number][];
  const passes: Row[][] = [];
  for (let k = 0; k < repeats; k++) {
    const rows: Row[] = [];
    for (const [name, make, cap] of candidates) rows.push(await runOne(child, ready.port, name, make(), cap, PHASES));
    passes.push(rows);
  }
  const unloadedB = await runOne(child, ready.port, 'unloaded', new FixedLimit(UNLOADED_LIMIT), 256, unloadedPhase);
  const loadAfter = os.loadavg();
  child.send({ op: 'exit' });
  const pooled = Float64Array.from([...unloadedA.samplesMs, ...unloadedB.samplesMs]).sort();
  const baseP50 = percentile(pooled, 0.5);
  const base = percentile(pooled, 0.99);
  const srvBase = Math.max(unloadedA.serverP99Ms, unloadedB.serverP99Ms);
  console.log(
    `unloaded latency (fixed limit ${UNLOADED_LIMIT}, ${UNLOADED_WORKERS} workers, ${pooled.length} samples, before + after): P50 ${baseP50.toFixed(1)} ms, ` +
      `P99 ${base.toFixed(1)} ms (before ${unloadedA.p99Ms.toFixed(1)}, after ${unloadedB.p99Ms.toFixed(1)}); ` +
      `server-side P99 ${srvBase.toFixed(1)} ms; ` +
      `load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')} -> ${loadAfter.map((x) => x.toFixed(2)).join(' ')}`,
  );
  const show = (r: Row): Record<string, string | number> => ({
    limiter: r.limiter,
    'util %': (r.utilisation * 100).toFixed(1),
    'nominal util %': (r.nominalUtilisation * 100).toFixed(1),
    'P50 ms': r.p50Ms.toFixed(1),
    'P99 ms': r.p99Ms.toFixed(1),
    'P99/unl': (r.p99Ms / base).toFixed(2),
    'srv wait P99': r.serverWaitP99Ms.toFixed(1),
    'waited >1 ms % 1x/2x/0.6x': r.waitedShareByPhase.map((x) => (x * 100).toFixed(1)).join(' / '),
    'wait P99 1x/2x/0.6x': r.waitP99MsByPhase.map((x) => x.toFixed(1)).join(' / '),
    'loop P99': r.loopDelayP99Ms.toFixed(1),
    episodes: r.overloadEpisodes,
    deferred: r.deferred,
    delivered: r.delivered,
    '503s': r.refused503,
    'limit 1x/2x/0.6x': r.meanLimitPerPhase.map((x) => x.toFixed(1)).join(' / '),
    'util % 1x/2x/0.6x': r.utilisationPerPhase.map((x) => (x * 100).toFixed(0)).join(' / '),
    'fast cuts': r.fastDecreases,
    'srv P99': r.serverP99Ms.toFixed(1),
    'srv P99/unl': (r.serverP99Ms / srvBase).toFixed(2),
    'settled srv P99/unl': (r.settledServerP99Ms / srvBase).toFixed(2),
    'settle ms 2x/0.6x': r.settleMsPerStep.map((x) => x.toFixed(0)).join(' / '),
    'overshoot % 2x/0.6x': r.overshootPerStep.map((x) => (x * 100).toFixed(0)).join(' / '),
  });
  passes.forEach((rows, k) => {
    console.log(`pass ${k + 1} of ${repeats}`);
    console.table(rows.map(show));
  });
  const medians = candidates.map(([name], i) => {
    const rs = passes.map((rows) => rows[i]!);
    const m = (f: (r: Row) => number): number => median(rs.map(f));
    return {
      limiter: name,
      utilisation: m((r) => r.utilisation),
      nominalUtilisation: m((r) => r.nominalUtilisation),
      p50Ms: m((r) => r.p50Ms),
      p99Ms: m((r) => r.p99Ms),
      p99OverUnloaded: m((r) => r.p99Ms) / base,
      serverWaitP99Ms: m((r) => r.serverWaitP99Ms),
      loopDelayP99Ms: m((r) => r.loopDelayP99Ms),
      overloadEpisodes: m((r) => r.overloadEpisodes),
      overloadEpisodesPerPass: rs.map((r) => r.overloadEpisodes),
      deferred: m((r) => r.deferred),
      delivered: m((r) => r.delivered),
      refused503: m((r) => r.refused503),
      meanLimitPerPhase: [0, 1, 2].map((p) => m((r) => r.meanLimitPerPhase[p]!)),
      serverP99Ms: m((r) => r.serverP99Ms),
      settledServerP99Ms: m((r) => r.settledServerP99Ms),
      settleMsPerStep: [0, 1].map((p) => m((r) => r.settleMsPerStep[p]!)),
      overshootPerStep: [0, 1].map((p) => m((r) => r.overshootPerStep[p]!)),
    };
  });
  if (repeats > 1) {
    console.log(`medians of ${repeats} passes`);
    console.table(
      medians.map((r) => ({
        limiter: r.limiter,
        'util %': (r.utilisation * 100).toFixed(1),
        'P50 ms': r.p50Ms.toFixed(1),
        'P99 ms': r.p99Ms.toFixed(1),
        'P99/unl': r.p99OverUnloaded.toFixed(2),
        'srv wait P99': r.serverWaitP99Ms.toFixed(1),
        'episodes (per pass)': r.overloadEpisodesPerPass.join(' '),
        deferred: r.deferred,
        '503s': r.refused503,
        'limit 1x/2x/0.6x': r.meanLimitPerPhase.map((x) => x.toFixed(1)).join(' / '),
        'srv P99': r.serverP99Ms.toFixed(1),
        'srv P99/unl': (r.serverP99Ms / srvBase).toFixed(2),
        'settled srv P99/unl': (r.settledServerP99Ms / srvBase).toFixed(2),
        'settle ms': r.settleMsPerStep.map((x) => x.toFixed(0)).join(' / '),
        'overshoot %': r.overshootPerStep.map((x) => (x * 100).toFixed(0)).join(' / '),
      })),
    );
  }
  fs.writeFileSync('bench/limiters-http.svg', limitChart(passes[0]!, PHASES));
  const strip = ({ samplesMs: _s, ...rest }: Row): Omit<Row, 'samplesMs'> => rest;
  fs.mkdirSync('bench/out', { recursive: true });
  fs.writeFileSync(
    'bench/out/limiters.json',
    JSON.stringify(
      {
        unloaded: {
          limit: UNLOADED_LIMIT,
          workers: UNLOADED_WORKERS,
          samples: pooled.length,
          p50Ms: baseP50,
          p99Ms: base,
          beforeP99Ms: unloadedA.p99Ms,
          afterP99Ms: unloadedB.p99Ms,
        },
        loadAverage: { before: loadBefore, after: loadAfter },
        repeats,
        passes: passes.map((rows) => rows.map(strip)),
        medians,
        serviceMs: SERVICE_MS,
        phaseMs,
        unloadedServerP99Ms: srvBase,
        baseWorkers: BASE_WORKERS,
        offerPerS: OFFER_PER_S,
      },
      null,
      2,
    ),
  );
}

await main();
