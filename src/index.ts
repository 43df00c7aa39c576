/**
 * geofence-trigger-router: routes live MessagePack GPS telemetry through polygon geofences to ENTER / EXIT / DWELL /
 * CROSS triggers delivered to webhooks, NDJSON files and in-process callbacks, with priority shedding and
 * per-downstream adaptive concurrency limits.
 *
 * The package entry: `createRouter(options)` and the types an embedding needs; `simulateLimiters(options)` and
 * `simulateBurst(options)` run the deterministic simulator (src/sim) over the production control modules.
 */
export { createRouter } from './router/create-router.js';
export {
  createPartitionGroup,
  type EarlierRouterOutcome,
  type PartitionGroup,
  type PartitionGroupStats,
} from './router/partition-group.js';
export { fairShare } from './durable/partition-leases.js';
export type { Router, RouterExtras, RouterSummary, ReloadResult, FenceEditResult } from './router/api.js';
export type { DeviceNow, FenceStay, FenceOccupant } from './router/state-queries.js';
export type { RouterStats, DownstreamStats, PerLane, PerTriggerType, HeldTimeWindow } from './pipeline/stats.js';
export { heldTimeWindow } from './pipeline/stats.js';
export type { Trigger } from './dispatch/trigger.js';
export type { LoggerLike, LogLineCallback, LogLevel, LogFields } from './log/router-log.js';
export {
  verifyWebhookSignature,
  signWebhook,
  SIGNATURE_HEADER,
  SIGNATURE_TIMESTAMP_HEADER,
  DEFAULT_SIGNATURE_TOLERANCE_S,
  type WebhookSignatureInput,
  type WebhookSignatureVerdict,
} from './dispatch/sinks/webhook-signature.js';
export {
  resolveRouterOptions,
  validateRouterOptions,
  routerConfigSchema,
  ROUTER_DEFAULTS,
  DEFAULT_POOL_SIZE,
  type RouterOptions,
  type RouterOptionsInput,
  type DownstreamOptions,
  type WebhookDownstreamOptions,
  type NdjsonDownstreamOptions,
  type CallbackDownstreamOptions,
  type SubscriptionOptions,
  type AdmissionConfig,
  type IngestConfig,
  type DeadLetterConfig,
  type LimitChoice,
} from './config/options.js';
export { loadConfigFile } from './config/config-file.js';
export { OptionError } from './option-schema/option-check.js';
export { parseCliArgs, optionsFromCli, mergeOptionInputs, HELP_TEXT, type CliRequest } from './config/cli-args.js';
export { FenceValidationError, type FenceProblem } from './fences/parse.js';
export {
  generateSyntheticCity,
  syntheticCityBounds,
  type SyntheticCityOptions,
  type FeatureCollectionJson,
} from './fences/synthetic-city.js';
export type { TelemetryPoint } from './ingest/ping-fields.js';
export { partitionOf, partitionSubject, deviceIdToken, parsePartitionList } from './ingest/sources/partitions.js';
export { partitionConsumerName, JETSTREAM_SOURCE_DEFAULTS } from './ingest/sources/jetstream-source.js';
export { TELEMETRY_KEYS, TELEMETRY_SHARED_STRUCTURES, telemetrySharedStructures } from './ingest/wire-format.js';
export {
  simulateLimiters,
  simulateBurst,
  LIMITERS_SCENARIO_DEFAULTS,
  BURST_SCENARIO_DEFAULTS,
  limitersTable,
  burstTable,
  limitersChartSvg,
  gradientChartSvg,
  burstChartSvg,
  renderChart,
  type LimitersScenarioOptions,
  type LimiterRowOptions,
  type LimitersResult,
  type LimiterRowResult,
  type LimiterSeries,
  type BurstScenarioOptions,
  type BurstResult,
  type BurstRowResult,
  type BurstPolicy,
  type LaneFigures,
  type ChartSpec,
  type ChartPanel,
  type ChartSeries,
  type ChartMark,
} from './sim/index.js';
