/**
 * The limiters scenario (the first seed's table): one simulated downstream whose capacity moves in equal phases
 * (by default 16 workers of 40 ms, then 32, then 10: it doubles, then drops to 60 % of the original), offered
 * Poisson traffic above its largest capacity, and one run per limiter row, each drawing from the same seeded arrival
 * and service-time streams. Every row drives the production `Limiter`, `Limit` and `CircuitBreaker` on the virtual clock.
 *
 * Default rows: fixed limits sized for the low and for the high case; AIMD, Vegas and Gradient2 with the router's
 * defaults, each also on windows of samples (`WindowedLimit`, as users run them); the gradient with the router's
 * defaults (what a downstream gets with no `limit` option, safety cap 256), and the same under a static safety cap
 * of 1.5x the high case's workers.
 *
 * Figures per row:
 * - utilisation of true capacity: the integral of min(busy workers, workers) over the integral of workers;
 * - P50 / P99 latency: send to answer (or to the timeout) of every attempt, never the wait for a permit;
 * - overload episodes: the run is cut into windows of `windowMs` (1 s); a window is overloaded when the requests
 *   that started service in it waited longer than `overloadWaitMs` (one service time) on average in the
 *   downstream's queue, or a request was refused (queue full) or timed out; an episode is a maximal run of
 *   overloaded windows (overloaded seconds are given too);
 * - deferred: triggers not sent within `deadlineMs` of their arrival, out of attempts, or still queued at the end.
 */
import { CircuitBreaker } from '../../../dispatch/breaker.js';
import { Limiter } from '../../../dispatch/limiter.js';
import type { Limit } from '../../../dispatch/limits/limit.js';
import { LimitedClient } from '../../client/limited-client.js';
import { SimulatedDownstream } from '../../downstream/simulated-downstream.js';
import { Simulation, type SimTarget } from '../../engine/simulation.js';
import { SimRandom, streamSeed } from '../../random/random.js';
import { PoissonArrivals } from '../../traffic/poisson-arrivals.js';
import { RateProfile } from '../../traffic/rate-profile.js';
import {
  resolveLimitersOptions,
  type LimitersScenarioOptions,
  type ResolvedLimitersOptions,
  type ResolvedRow,
} from './limiters-options.js';
import type { LimiterRowResult, LimiterSeries, LimitersResult } from './limiters-result.js';

/** Random streams of a run (each row draws the same ones). */
const STREAM_TRAFFIC = 1;
const STREAM_SERVICE = 2;

/** One row's simulation, built and not yet run: the production parts it drives are here to inspect. */
export interface LimiterRig {
  sim: Simulation;
  downstream: SimulatedDownstream;
  client: LimitedClient;
  limit: Limit;
  limiter: Limiter;
  breaker: CircuitBreaker;
}

/** Builds one row's simulation: downstream, production limiter and breaker, client, arrivals. */
export function buildLimiterRig(o: ResolvedLimitersOptions, row: ResolvedRow): LimiterRig {
  const sim = new Simulation();
  const downstream = new SimulatedDownstream(
    sim,
    {
      serviceMeanNs: o.serviceMs * 1e6,
      serviceDistribution: o.serviceDistribution,
      serviceSpread: o.serviceSpread,
      queueLimit: o.queueLimit,
      networkNs: Math.round(o.networkMs * 1e6),
      errorLatencyFraction: o.errorLatencyFraction,
    },
    phaseWorkers(o)[0]!,
    new SimRandom(streamSeed(o.seed, STREAM_SERVICE)),
  );
  downstream.setFaults(o.errorRate, o.lostRate);
  const limit = row.makeLimit();
  const limiter = new Limiter(limit, row.safetyCap);
  const breaker = new CircuitBreaker(o.breaker);
  const client = new LimitedClient(sim, downstream, limiter, breaker, {
    deadlineNs: o.deadlineMs * 1e6,
    timeoutNs: Math.round(o.timeoutMs * 1e6),
    maxAttempts: o.maxAttempts,
  });
  new PoissonArrivals(
    sim,
    RateProfile.constant(o.offeredPerSec),
    new SimRandom(streamSeed(o.seed, STREAM_TRAFFIC)),
    client,
  );
  return { sim, downstream, client, limit, limiter, breaker };
}

function phaseWorkers(o: ResolvedLimitersOptions): number[] {
  return o.capacityFactors.map((f) => Math.max(1, Math.round(o.workers * f)));
}

/** Changes the downstream's capacity at each phase boundary and notes the integrals there. */
class PhaseChanger implements SimTarget {
  readonly busyAt: number[] = [0];
  readonly capacityAt: number[] = [0];
  constructor(
    private readonly downstream: SimulatedDownstream,
    private readonly workers: readonly number[],
  ) {}
  onEvent(kind: number, _arg: number, nowNs: number): void {
    this.downstream.setWorkers(this.workers[kind]!, nowNs);
    this.busyAt.push(this.downstream.busyIntegral);
    this.capacityAt.push(this.downstream.capacityIntegral);
  }
}

function ms(ns: number): number {
  return Math.round(ns / 1e3) / 1e3;
}

function runRow(o: ResolvedLimitersOptions, row: ResolvedRow, endNs: number, windowNs: number): LimiterRowResult {
  const rig = buildLimiterRig(o, row);
  const { sim, downstream, client, limiter, breaker } = rig;
  const workers = phaseWorkers(o);
  const phaseNs = endNs / workers.length;
  const changer = new PhaseChanger(downstream, workers);
  const changerId = sim.register(changer);
  for (let p = 1; p < workers.length; p++) sim.at(Math.round(p * phaseNs), changerId, p);
  const series: LimiterSeries = { limit: [], inflight: [], rttMinMs: [], rttMeanMs: [] };
  const limitSum = new Float64Array(workers.length);
  const limitWeight = new Float64Array(workers.length);
  const dsWindow = new Float64Array(3);
  const clWindow = new Float64Array(2);
  const overloadWaitNs = o.overloadWaitMs * 1e6;
  const episodesS: [number, number][] = [];
  let overloadedWindows = 0;
  let wasOverloaded = false;
  let prevT = 0;
  let prevInflight = 0;
  for (let k = 1; prevT < endNs; k++) {
    const t = Math.min(Math.round(k * windowNs), endNs);
    sim.run(t);
    downstream.advance(t);
    client.advance(t);
    downstream.takeWindow(dsWindow);
    client.takeWindow(clWindow);
    const overloaded = dsWindow[1]! > overloadWaitNs || dsWindow[2]! > 0 || clWindow[0]! > 0;
    if (overloaded) {
      overloadedWindows++;
      if (!wasOverloaded) episodesS.push([prevT / 1e9, t / 1e9]);
      else episodesS[episodesS.length - 1]![1] = t / 1e9;
    }
    wasOverloaded = overloaded;
    const dt = t - prevT;
    const lim = limiter.limit;
    series.limit.push(lim);
    series.inflight.push(Math.round(((client.inflightIntegral - prevInflight) / dt) * 100) / 100);
    const ref = limiter.rttMinNs;
    series.rttMinMs.push(Number.isNaN(ref) ? null : ms(ref));
    series.rttMeanMs.push(clWindow[1]! > 0 ? ms(clWindow[1]!) : null);
    const phase = Math.min(workers.length - 1, Math.floor((t - dt / 2) / phaseNs));
    limitSum[phase] = limitSum[phase]! + lim * dt;
    limitWeight[phase] = limitWeight[phase]! + dt;
    prevInflight = client.inflightIntegral;
    prevT = t;
  }
  client.finish(endNs);
  changer.busyAt.push(downstream.busyIntegral);
  changer.capacityAt.push(downstream.capacityIntegral);
  const utilisationPerPhase = workers.map(
    (_w, p) => (changer.busyAt[p + 1]! - changer.busyAt[p]!) / (changer.capacityAt[p + 1]! - changer.capacityAt[p]!),
  );
  return {
    name: row.name,
    limit: row.description,
    safetyCap: row.safetyCap,
    utilisation: downstream.busyIntegral / downstream.capacityIntegral,
    utilisationPerPhase,
    meanLimitPerPhase: workers.map((_w, p) => limitSum[p]! / limitWeight[p]!),
    p50Ms: ms(client.rtts.quantileNs(0.5)),
    p99Ms: ms(client.rtts.quantileNs(0.99)),
    serverWaitP99Ms: ms(downstream.waits.quantileNs(0.99)),
    overloadEpisodes: episodesS.length,
    overloadEpisodesS: episodesS,
    overloadSeconds: (overloadedWindows * windowNs) / 1e9,
    offered: client.offered,
    delivered: client.delivered,
    deferred: client.deferred,
    deferredBeyondCapacity: NaN,
    inflightAtEnd: limiter.inflight,
    errors: client.errors,
    refusals: client.refusals,
    timeouts: client.timeouts,
    breakerOpens: breaker.opens,
    series,
  };
}

/**
 * Runs the limiters scenario: one simulation per row, each driving the production limiter, limit and breaker
 * against the same simulated downstream and traffic. Deterministic: the same options give the same result to the
 * digit. Throws a RangeError naming the first wrong option.
 */
export function simulateLimiters(options: Partial<LimitersScenarioOptions> = {}): LimitersResult {
  const o = resolveLimitersOptions(options);
  const endNs = Math.round(o.minutes * 60e9);
  const windowNs = Math.round(o.windowMs * 1e6);
  const workers = phaseWorkers(o);
  const rows = o.rows.map((row) => runRow(o, row, endNs, windowNs));
  const phaseNs = endNs / workers.length;
  let capacityTriggers = 0;
  workers.forEach((w, p) => {
    capacityTriggers += (w * (Math.round((p + 1) * phaseNs) - Math.round(p * phaseNs))) / (o.serviceMs * 1e6);
  });
  capacityTriggers = Math.round(capacityTriggers);
  for (const r of rows) r.deferredBeyondCapacity = r.deferred - Math.max(0, r.offered - capacityTriggers);
  const timesS: number[] = [];
  const capacityWorkers: number[] = [];
  for (let k = 1, t = 0; t < endNs; k++) {
    t = Math.min(Math.round(k * windowNs), endNs);
    timesS.push(t / 1e9);
    capacityWorkers.push(workers[Math.min(workers.length - 1, Math.floor((t - 1) / phaseNs))]!);
  }
  const { rows: resolvedRows, ...rest } = o;
  return {
    scenario: 'limiters',
    seed: o.seed,
    minutes: o.minutes,
    options: {
      ...rest,
      limiters: resolvedRows.map((r) => ({ name: r.name, limit: r.description, safetyCap: r.safetyCap })),
    },
    phaseWorkers: workers,
    windowMs: o.windowMs,
    timesS,
    capacityWorkers,
    capacityTriggers,
    definitions: {
      utilisation: 'integral of min(busy workers, workers) / integral of workers, at the downstream',
      latency: 'send to answer (or to the timeout) of every attempt; the wait for a permit is not in it',
      overloadEpisode:
        `a maximal run of ${o.windowMs} ms windows in each of which the requests that started service waited ` +
        `more than ${o.overloadWaitMs} ms on average in the downstream's queue, or a request was refused (queue ` +
        `of ${o.queueLimit} full) or timed out (${o.timeoutMs} ms)`,
      deferred: `triggers not sent within ${o.deadlineMs} ms of arrival, out of ${o.maxAttempts} attempts, or queued at the end`,
      deferredBeyondCapacity:
        'deferred minus the triggers no limiter could have sent (offered minus what the workers could serve in the run)',
    },
    rows,
  };
}
