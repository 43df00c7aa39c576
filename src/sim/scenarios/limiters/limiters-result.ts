/**
 * What `simulateLimiters` returns: the figures of each limiter row, the definitions behind them, and the series of
 * the plots.
 */

/** Per-window series of one row (one value per window). */
export interface LimiterSeries {
  /** The limiter's effective limit at the window's end. */
  limit: number[];
  /** Mean requests in flight over the window. */
  inflight: number[];
  /** The limit's reference RTT at the window's end, ms (null: none yet). */
  rttMinMs: (number | null)[];
  /** Mean RTT of the answers in the window, ms (null: none). */
  rttMeanMs: (number | null)[];
}

/** One row's figures. */
export interface LimiterRowResult {
  name: string;
  /** The limit as built, e.g. `WindowedLimit(VegasLimit(defaults), defaults)`. */
  limit: string;
  safetyCap: number;
  /** Utilisation of true capacity over the run, 0..1. */
  utilisation: number;
  /** The same per capacity phase. */
  utilisationPerPhase: number[];
  /** Mean effective limit per capacity phase. */
  meanLimitPerPhase: number[];
  p50Ms: number;
  p99Ms: number;
  /** P99 of the queue wait at the downstream (arrival to start of service), ms. */
  serverWaitP99Ms: number;
  overloadEpisodes: number;
  /** Each episode's start and end, s from the start of the run. */
  overloadEpisodesS: [number, number][];
  overloadSeconds: number;
  offered: number;
  delivered: number;
  deferred: number;
  /** Deferred beyond what no limiter could send: deferred - max(0, offered - capacityTriggers). */
  deferredBeyondCapacity: number;
  /** Requests still in flight when the run ended (neither delivered nor deferred). */
  inflightAtEnd: number;
  errors: number;
  refusals: number;
  timeouts: number;
  breakerOpens: number;
  series: LimiterSeries;
}

/** What `simulateLimiters` returns. */
export interface LimitersResult {
  scenario: 'limiters';
  seed: number;
  minutes: number;
  /** The options in force (rows as names and built limits). */
  options: Record<string, unknown>;
  /** Workers of each capacity phase (true capacity in concurrent requests). */
  phaseWorkers: number[];
  /** Window length of the series and of overload episodes, ms. */
  windowMs: number;
  /** End of each window, s. */
  timesS: number[];
  /** Workers in each window (true capacity). */
  capacityWorkers: number[];
  /** Triggers the downstream could have served in the run: the integral of workers over the mean service time. */
  capacityTriggers: number;
  /** The definitions behind the columns. */
  definitions: Record<string, string>;
  rows: LimiterRowResult[];
}
