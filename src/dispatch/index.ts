/**
 * Dispatch: the dispatcher thread's control loop. Owns per-downstream concurrency limits (gradient, AIMD, Vegas,
 * Gradient2, fixed) behind a `Limiter` with a static safety cap, per-device FIFOs with COMPLIANCE-first ready lists
 * and their durable backlog logs, credit windows, circuit breakers, the dead-letter ring with its durable files and
 * the replay lane, the sinks, the fence catalog, and routing by subscription. Everything here runs on the dispatcher thread; the metric cells are read by the main thread.
 */
export * from './limits/index.js';
export { Limiter, NO_PERMIT, RELEASE_SUCCESS, RELEASE_DROPPED, RELEASE_IGNORE } from './limiter.js';
export { CircuitBreaker, BreakerState, BREAKER_DEFAULTS, BREAKER_STATE_NAMES, type BreakerOptions } from './breaker.js';
export { CreditWindow } from './credits.js';
export { DeviceQueues, ReadyList } from './device-queues.js';
export { FenceCatalog, type FenceNames } from './fence-catalog.js';
export { DeadLetterRing } from './dead-letter/ring.js';
export { TriggerRouter, MAX_DOWNSTREAMS, type Subscription } from './router.js';
export { TriggerBatch, type BatchNames } from './sinks/trigger-batch.js';
export { classifyResult, Outcome, RESULT_OK, type Sink, type SinkResult, type SinkError } from './sinks/sink.js';
export { IndexNamer, triggerJson, batchJson, type TriggerNamer } from './sinks/format.js';
export { CallbackSink, type TriggerCallback } from './sinks/callback-sink.js';
export { NdjsonSink, type NdjsonTarget } from './sinks/ndjson-sink.js';
export { WebhookSink, parseRetryAfterMs, CREDIT_HEADER, WEBHOOK_SINK_DEFAULTS, type WebhookSinkOptions } from './sinks/webhook-sink.js';
export { Downstream, type DownstreamOptions, type DownstreamContext, type DeadLetterTarget, type DeliveredHook } from './downstream.js';
export { Dispatcher, metricsCells, OFFER_BLOCKED, DEFAULT_BACKLOG_MAX_BYTES, type DispatcherOptions, type DispatchTotals } from './dispatcher.js';
export { copyTrigger, laneOf } from './record.js';
export * from './metric-names.js';
