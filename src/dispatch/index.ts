/**
 * Dispatch: the dispatcher thread's control loop. Owns per-downstream concurrency limits (gradient, AIMD, Vegas,
 * Gradient2, fixed) behind a `Limiter` with a static safety cap, COMPLIANCE-first bounded queues, credit windows,
 * circuit breakers, the dead-letter ring with its durable files and replay lanes, the sinks, and routing by
 * subscription. Everything here runs on the dispatcher thread; the metric cells are read by the main thread.
 */
export * from './limits/index.js';
export { Limiter, NO_PERMIT, RELEASE_SUCCESS, RELEASE_DROPPED, RELEASE_IGNORE } from './limiter.js';
export { CircuitBreaker, BreakerState, BREAKER_DEFAULTS, BREAKER_STATE_NAMES, type BreakerOptions } from './breaker.js';
export { CreditWindow } from './credits.js';
export { TriggerQueue } from './trigger-queue.js';
export { DeadLetterRing } from './dead-letter/ring.js';
export { DeadLetterFile, DEAD_LETTER_FILE_MAGIC, DEAD_LETTER_FILE_VERSION, DEAD_LETTER_FILE_HEADER_BYTES } from './dead-letter/file.js';
export { ReplayLane } from './dead-letter/replay-lane.js';
export { TriggerRouter, MAX_DOWNSTREAMS, type Subscription } from './router.js';
export { TriggerBatch } from './sinks/trigger-batch.js';
export { classifyResult, Outcome, RESULT_OK, type Sink, type SinkResult, type SinkError } from './sinks/sink.js';
export { IndexNamer, triggerJson, batchJson, type TriggerNamer } from './sinks/format.js';
export { CallbackSink, type TriggerCallback } from './sinks/callback-sink.js';
export { NdjsonSink, type NdjsonTarget } from './sinks/ndjson-sink.js';
export { WebhookSink, parseRetryAfterMs, CREDIT_HEADER, WEBHOOK_SINK_DEFAULTS, type WebhookSinkOptions } from './sinks/webhook-sink.js';
export { Downstream, type DownstreamOptions, type DeadLetterTarget, type DeliveredHook } from './downstream.js';
export { Dispatcher, metricsCells, type DispatcherOptions, type DispatchTotals } from './dispatcher.js';
export { copyTrigger, laneOf } from './record.js';
export * from './metric-names.js';
