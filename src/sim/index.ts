/**
 * The deterministic simulator: drives the production limiter, limits, circuit breaker, lane admission and
 * telemetry rings on a virtual clock, against simulated downstreams, drains and traffic, to reproduce the seeds'
 * tables and to let users try their own settings. Runs on the caller's thread, synchronously; it reads no clock and
 * starts no timer or worker, so the same options give the same result to the digit.
 *
 * Parts: `engine/` (virtual clock, event queue), `random/` (seeded streams and distributions), `downstream/`
 * (workers behind a FIFO queue), `client/` (the sending side around the production Limiter and CircuitBreaker),
 * `traffic/` (Poisson arrivals, telemetry read chunks), `ingest/` (the ingest-edge policies and the drain),
 * `stats/` (histograms), `chart/` (SVG line charts), `scenarios/` (limiters and burst), `report/` (tables).
 */
export { simulateLimiters } from './scenarios/limiters/limiters-scenario.js';
export type { LimitersResult, LimiterRowResult, LimiterSeries } from './scenarios/limiters/limiters-result.js';
export {
  LIMITERS_SCENARIO_DEFAULTS,
  type LimitersScenarioOptions,
  type LimiterRowOptions,
} from './scenarios/limiters/limiters-options.js';
export { simulateBurst } from './scenarios/burst/burst-scenario.js';
export type { BurstResult, BurstRowResult, BurstPolicy, LaneFigures } from './scenarios/burst/burst-result.js';
export { BURST_SCENARIO_DEFAULTS, type BurstScenarioOptions } from './scenarios/burst/burst-options.js';
export { limitersChartSvg, gradientChartSvg } from './scenarios/limiters/limiters-charts.js';
export { burstChartSvg } from './scenarios/burst/burst-charts.js';
export { limitersTable, burstTable } from './report/tables.js';
export { renderChart, type ChartSpec, type ChartPanel, type ChartSeries, type ChartMark } from './chart/svg-chart.js';
