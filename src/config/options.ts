/**
 * Router options (main thread): the types, defaults and validation, all derived from the one definition in
 * `router-option-spec.ts`. `resolveRouterOptions` checks an input (naming its source), merges it over the defaults
 * (nested objects merged, arrays replaced) and checks the rules across options.
 */
import { TRIGGER_TYPE_NAMES } from '../shm/layout.js';
import {
  checkInput,
  checkRules,
  libraryNamer,
  OptionError,
  withDefaults,
  type Namer,
} from '../option-schema/option-check.js';
import { configJsonSchema } from '../option-schema/option-docs.js';
import type { Input, ThreadKeys, ThreadName, Value } from '../option-schema/option-spec.js';
import { ROUTER_SPEC } from './router-option-spec.js';
import { JETSTREAM_SOURCE_DEFAULTS } from '../ingest/sources/jetstream-source.js';

export { DEFAULT_POOL_SIZE } from './router-option-spec.js';

/** Every option of the router, resolved (see `router-option-spec.ts` for each one's doc, range and default). */
export type RouterOptions = Value<typeof ROUTER_SPEC>;
/** Router options as the library, a config file or flags give them: any option may be left out. */
export type RouterOptionsInput = Input<typeof ROUTER_SPEC>;
/** One downstream (as given: the dispatcher's defaults fill what is left out). */
export type DownstreamOptions = NonNullable<RouterOptionsInput['downstreams']>[number];
/** One downstream, resolved. */
export type ResolvedDownstream = RouterOptions['downstreams'][number];
/** An HTTP webhook receiving batched JSON POSTs. */
export type WebhookDownstreamOptions = Extract<DownstreamOptions, { kind: 'webhook' }>;
/** An NDJSON file (or "-" for stdout), one trigger per line. */
export type NdjsonDownstreamOptions = Extract<DownstreamOptions, { kind: 'ndjson' }>;
/** An in-process callback (library use only; not expressible in a config file). */
export type CallbackDownstreamOptions = Extract<DownstreamOptions, { kind: 'callback' }>;
/** Which triggers a downstream receives. */
export type SubscriptionOptions = NonNullable<DownstreamOptions['subscribe']>;
/** Concurrency-limit algorithm of a downstream: an adaptive algorithm by name, or a fixed limit (a number). */
export type LimitChoice = NonNullable<DownstreamOptions['limit']>;
/** Lane admission in front of each telemetry ring. */
export type AdmissionConfig = RouterOptions['admission'];
/** The ingest edge. */
export type IngestConfig = RouterOptions['ingest'];
/** TLS for the telemetry listener. */
export type IngestTlsConfig = NonNullable<IngestConfig['tls']>;
/** Dead letters. */
export type DeadLetterConfig = RouterOptions['deadLetter'];
/** What a live source does when a telemetry ring has no room. */
export type OverloadPolicy = IngestConfig['overload'];
/** What a device's expiry says about the fences it is inside. */
export type DeviceExpiryMode = RouterOptions['deviceExpiry'];
/** Trigger type names as subscriptions name them. */
export type TriggerTypeName = (typeof TRIGGER_TYPE_NAMES)[number];
/** The top-level options read on thread `T`, as that thread receives them. */
export type ThreadOptions<T extends ThreadName> = Pick<RouterOptions, ThreadKeys<typeof ROUTER_SPEC, T>>;

/** The defaults. */
export const ROUTER_DEFAULTS: Readonly<RouterOptions> = deepFreeze(withDefaults(ROUTER_SPEC, {}) as RouterOptions);

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

/**
 * Checks `input` (naming options through `name`: the library's `options.x` by default), merges it over the defaults
 * and checks the rules across options; throws an OptionError (a RangeError) naming the first bad option.
 */
export function resolveRouterOptions(input: RouterOptionsInput = {}, name: Namer = libraryNamer): RouterOptions {
  if (input === null || typeof input !== 'object' || Array.isArray(input))
    throw new OptionError('options must be an object');
  checkInput(ROUTER_SPEC, input, [], name);
  refuseWithoutEffect(input, name);
  const o = withDefaults(ROUTER_SPEC, input) as RouterOptions;
  checkRules(ROUTER_SPEC, o, [], name);
  return o;
}

/** Fields of a downstream that no trigger stream uses: its batches are never sent again in a run. */
const NOT_FOR_STREAMS = ['maxAttempts', 'replay', 'replayGiveUpMs', 'breaker'] as const;
/** Fields of a JetStream source that only a partition group (partitions "auto") uses. */
const GROUP_ONLY = ['leaseMs', 'memberName', 'leaseBucket'] as const;

/**
 * Refuses options given where they can have no effect (checked on the input, where "given" is still known): none is
 * silently ignored.
 */
function refuseWithoutEffect(input: RouterOptionsInput, name: Namer): void {
  const js = input.jetstreamSource as Record<string, unknown> | null | undefined;
  if (js !== null && js !== undefined && js['partitions'] !== 'auto') {
    for (const k of GROUP_ONLY) {
      if (js[k] !== undefined)
        throw new OptionError(
          `${name(['jetstreamSource', k])} applies only to a partition group (${name(['jetstreamSource', 'partitions'])} "auto"), got partitions ${JSON.stringify(js['partitions'] ?? JETSTREAM_SOURCE_DEFAULTS.partitions)}`,
        );
    }
  }
  (input.downstreams ?? []).forEach((given, i) => {
    const d = given as Record<string, unknown>;
    if (d['kind'] === 'stream') {
      for (const k of NOT_FOR_STREAMS) {
        if (d[k] !== undefined)
          throw new OptionError(
            `${name(['downstreams', i, k])} has no effect on a trigger stream: a batch counts as delivered when its loop asks for the next, and is never sent again in the run (no attempts, breaker or replay)`,
          );
      }
    }
    if (d['replay'] === false && d['replayGiveUpMs'] !== undefined)
      throw new OptionError(
        `${name(['downstreams', i, 'replayGiveUpMs'])} applies only with the replay lane, and ${name(['downstreams', i, 'replay'])} is false`,
      );
  });
}

/** Validates complete options; throws a RangeError naming the option and its allowed range. */
export function validateRouterOptions(o: RouterOptions): void {
  checkInput(ROUTER_SPEC, o, [], libraryNamer);
  checkRules(ROUTER_SPEC, o, [], libraryNamer);
}

/** The top-level options thread `thread` reads (a structured-clone-safe copy when no callback is among them). */
export function threadOptions<T extends ThreadName>(o: RouterOptions, thread: T): ThreadOptions<T> {
  const out: Record<string, unknown> = {};
  for (const [k, f] of Object.entries(ROUTER_SPEC.fields)) {
    if (f.threads?.includes(thread) === true) out[k] = (o as Record<string, unknown>)[k];
  }
  return out as ThreadOptions<T>;
}

/** The JSON Schema (draft 2020-12) of a config file: every option, its type, range, default and doc line. */
export function routerConfigSchema(): Record<string, unknown> {
  return configJsonSchema(ROUTER_SPEC, 'geofence-trigger-router config file');
}
