/**
 * Every option of the router, declared once: name, type, default, range, unit, doc line, flag, help section and the
 * threads that read it. The option types (`options.ts`), defaults, validation, `--help`, the README's options table
 * and the config file's JSON Schema are all derived from this definition; add an option here and it appears in all
 * of them.
 */
import { availableParallelism } from 'node:os';
import { isLoopbackHost } from '../auth/secrets.js';
import { BREAKER_DEFAULTS } from '../dispatch/breaker.js';
import { DEFAULT_BACKLOG_MAX_BYTES } from '../dispatch/dispatcher.js';
import { DOWNSTREAM_DEFAULTS } from '../dispatch/downstream.js';
import {
  GRADIENT_LIMIT_DEFAULTS,
  GradientLimit,
  type GradientLimitOptions,
} from '../dispatch/limits/gradient-limit.js';
import { WEBHOOK_SINK_DEFAULTS } from '../dispatch/sinks/webhook-sink.js';
import { JETSTREAM_SINK_DEFAULTS } from '../dispatch/sinks/jetstream-sink.js';
import { SubjectTemplate } from '../dispatch/sinks/subject-template.js';
import { MQTT_SINK_DEFAULTS } from '../dispatch/sinks/mqtt-sink.js';
import { SIGNATURE_HEADER, SIGNATURE_TIMESTAMP_HEADER } from '../dispatch/sinks/webhook-signature.js';
import type { Trigger } from '../dispatch/trigger.js';
import { AIMD_LIMIT_DEFAULTS, AimdLimit, type AimdLimitOptions } from '../dispatch/limits/aimd-limit.js';
import {
  GRADIENT2_LIMIT_DEFAULTS,
  Gradient2Limit,
  type Gradient2LimitOptions,
} from '../dispatch/limits/gradient2-limit.js';
import { VEGAS_LIMIT_DEFAULTS, VegasLimit, type VegasLimitOptions } from '../dispatch/limits/vegas-limit.js';
import { FixedLimit } from '../dispatch/limits/fixed-limit.js';
import {
  WINDOWED_LIMIT_DEFAULTS,
  WindowedLimit,
  type WindowedLimitOptions,
} from '../dispatch/limits/windowed-limit.js';
import { ADMISSION_SPEC } from '../ingest/admission-options.js';
import { JETSTREAM_SOURCE_DEFAULTS } from '../ingest/sources/jetstream-source.js';
import { MAX_PARTITIONS, parsePartitionList } from '../ingest/sources/partitions.js';
import { MAX_INGEST_THREADS, TRIGGER_TYPE_NAMES } from '../shm/layout.js';
import {
  bool,
  choice,
  delegate,
  fn,
  group,
  int,
  list,
  nullable,
  num,
  optional,
  stringMap,
  text,
  variants,
  type GroupCheck,
} from '../option-schema/option-spec.js';

/** Names of the adaptive limit algorithms. */
const LIMIT_NAMES = ['gradient', 'aimd', 'vegas', 'gradient2'] as const;

/** Default pool size: every core but one (the ingest thread's), at least one. */
export const DEFAULT_POOL_SIZE = Math.max(1, availableParallelism() - 1);

/** Default ingest threads: a quarter of the cores (at least one, at most MAX_INGEST_THREADS). */
const DEFAULT_INGEST_THREADS = Math.max(1, Math.min(MAX_INGEST_THREADS, Math.floor(availableParallelism() / 4)));

/** Headers a webhook's `headers` may not set: the router sets them, or they belong to the connection. */
const ROUTER_SET_HEADERS = [
  'content-type',
  'content-length',
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  SIGNATURE_HEADER,
  SIGNATURE_TIMESTAMP_HEADER,
];

/** An MQTT topic template must parse; a password needs a user name. */
const mqttRule: GroupCheck = (d, name) => {
  const topic = d['topic'];
  if (typeof topic === 'string') {
    try {
      new SubjectTemplate(name('topic'), topic, 'mqtt');
    } catch (err) {
      return (err as Error).message;
    }
  }
  if (d['password'] !== null && d['password'] !== undefined && (d['username'] === null || d['username'] === undefined))
    return `${name('password')} needs ${name('username')}`;
  return undefined;
};

/** A JetStream subject template must parse, and a stream the router creates needs a literal prefix to capture. */
const jetstreamRule: GroupCheck = (d, name) => {
  const subject = d['subject'];
  if (typeof subject !== 'string') return undefined;
  let template: SubjectTemplate;
  try {
    template = new SubjectTemplate(name('subject'), subject, 'nats');
  } catch (err) {
    return (err as Error).message;
  }
  if (d['createStream'] !== false && !template.prefix.endsWith('.'))
    return `${name('subject')} ${JSON.stringify(subject)} must start with literal tokens ending in "." for the router to create its stream (subjects "<prefix>>"); or create the stream yourself and set ${name('createStream')} false`;
  return undefined;
};

/** A JetStream source's partition list must parse against its count, and its subject prefix be literal tokens. */
const partitionsRule: GroupCheck = (d, name) => {
  const count = d['partitionCount'];
  const list = d['partitions'];
  if (list === 'auto') {
    if (d['stateBucket'] === null)
      return `${name('partitions')} "auto" needs ${name('stateBucket')}: a partition that moves between routers takes its device state with it`;
  } else if (typeof count === 'number' && typeof list === 'string') {
    try {
      if (parsePartitionList(list, count, name('partitions')).length === 0) return `${name('partitions')} is empty`;
    } catch (err) {
      return (err as Error).message;
    }
  }
  const prefix = d['subjectPrefix'];
  if (typeof prefix === 'string' && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(prefix))
    return `${name('subjectPrefix')} must be literal subject tokens (letters, digits, - and _, separated by "."), got ${JSON.stringify(prefix)}`;
  const bucket = d['stateBucket'];
  for (const key of ['stateBucket', 'leaseBucket'] as const) {
    const v = d[key];
    if (typeof v === 'string' && !/^[A-Za-z0-9_-]+$/.test(v))
      return `${name(key)} must be a key-value bucket name (letters, digits, - and _), got ${JSON.stringify(v)}`;
  }
  // They name the keys of the partitions' state in the bucket.
  for (const key of ['stream', 'consumerPrefix'] as const) {
    const v = d[key];
    if (typeof bucket === 'string' && typeof v === 'string' && !/^[A-Za-z0-9_-]+$/.test(v))
      return `${name(key)} must be letters, digits, - and _ while ${name('stateBucket')} is set (it names the state's keys), got ${JSON.stringify(v)}`;
  }
  return undefined;
};

/** A webhook's CA bundle needs https:, and its bearer token and an `authorization` header exclude each other. */
const webhookSecurityRule: GroupCheck = (d, name) => {
  const url = d['url'];
  if (d['caFile'] !== null && d['caFile'] !== undefined && typeof url === 'string' && !url.startsWith('https:'))
    return `${name('caFile')} applies to an https: url only, got ${name('url')} ${JSON.stringify(url)}`;
  const headers = d['headers'] as Record<string, unknown> | undefined;
  const hasAuthHeader = headers !== undefined && Object.keys(headers).some((k) => k.toLowerCase() === 'authorization');
  if (d['bearerToken'] !== null && d['bearerToken'] !== undefined && hasAuthHeader)
    return `${name('bearerToken')} and an authorization entry in ${name('headers')} both set the Authorization header: keep one`;
  return undefined;
};

const subscription = group(
  {
    fenceIds: optional(list(text('name', { doc: 'a fence id' }), { doc: 'fence ids (a trigger of any of them)' })),
    tags: optional(list(text('name', { doc: 'a fence tag' }), { doc: 'fence tags (a trigger of a fence with any)' })),
    types: optional(list(choice(TRIGGER_TYPE_NAMES, { doc: 'a trigger type' }), { doc: 'trigger types' })),
  },
  { doc: 'which triggers it receives: a trigger matches when it matches every list given (absent: all)' },
);

const breaker = group(
  {
    failureRateThreshold: num({
      doc: 'failed share of the window that opens the breaker',
      min: 0.01,
      max: 1,
      unit: 'fraction',
      default: BREAKER_DEFAULTS.failureRateThreshold,
    }),
    windowSize: int({ doc: 'outcomes remembered', min: 1, max: 100_000, default: BREAKER_DEFAULTS.windowSize }),
    minimumRequests: int({
      doc: 'outcomes in the window before the failed share is trusted (at most windowSize)',
      min: 1,
      max: 100_000,
      default: BREAKER_DEFAULTS.minimumRequests,
    }),
    refusalsToOpen: int({
      doc: 'consecutive refused connections that open the breaker at once',
      min: 1,
      max: 1_000_000,
      default: BREAKER_DEFAULTS.refusalsToOpen,
    }),
    openDurationMs: int({
      doc: 'first open period (then a probe)',
      min: 1,
      max: 86_400_000,
      unit: 'ms',
      default: BREAKER_DEFAULTS.openDurationNs / 1e6,
    }),
    maxOpenDurationMs: int({
      doc: 'longest open period after repeated failed probes (at least openDurationMs)',
      min: 1,
      max: 86_400_000,
      unit: 'ms',
      default: BREAKER_DEFAULTS.maxOpenDurationNs / 1e6,
    }),
  },
  {
    doc: 'circuit breaker of the downstream',
    threads: ['dispatcher'],
    check: (b, name) =>
      (b['minimumRequests'] as number) > (b['windowSize'] as number)
        ? `${name('minimumRequests')} must be at most ${name('windowSize')} (${String(b['windowSize'])}), got ${String(b['minimumRequests'])}`
        : (b['maxOpenDurationMs'] as number) < (b['openDurationMs'] as number)
          ? `${name('maxOpenDurationMs')} must be at least ${name('openDurationMs')} (${String(b['openDurationMs'])}), got ${String(b['maxOpenDurationMs'])}`
          : undefined,
  },
);

/** What a tuning declares beyond its algorithm's defaults. */
interface TuningExtras {
  /** The doc line, when the generated one does not fit. */
  doc?: string;
  /** Options whose default is a library-only rule (a function) but that a config file may set to a number. */
  numbers?: readonly string[];
}

/**
 * Tuning of one limit algorithm: an object of its options (their names and types from its defaults), checked by the
 * algorithm itself, which names the option in its message. An option whose default is not a number or a boolean, or
 * a function given for any option, is refused as set only by the library (a function cannot cross to the dispatcher
 * thread), unless `numbers` lists the option and the value is a number.
 */
function tuning<T extends object>(
  algorithm: string,
  defaults: Readonly<T>,
  build: (v: Partial<T>) => unknown,
  example: string,
  extras: TuningExtras = {},
) {
  const numbers = extras.numbers ?? [];
  return delegate<Partial<T>>({
    doc:
      extras.doc ??
      `tuning of the ${algorithm} limit (with limit "${algorithm}"${algorithm === 'gradient' ? ' or none' : ''}), e.g. ${example}`,
    check: (v) => {
      if (v === null || typeof v !== 'object' || Array.isArray(v))
        throw new RangeError(`must be an object of ${algorithm} limit options`);
      for (const [k, x] of Object.entries(v)) {
        // A name the algorithm does not have is left to it: its message lists the ones it has.
        if (!Object.hasOwn(defaults, k)) continue;
        const d: unknown = (defaults as Record<string, unknown>)[k];
        const settable =
          typeof x !== 'function' &&
          (typeof d === 'number' || typeof d === 'boolean' || (numbers.includes(k) && typeof x === 'number'));
        if (!settable) throw new RangeError(`${k} is set only by the library (not a number a config file can give)`);
      }
      build(v as Partial<T>);
    },
    schema: {
      type: 'object',
      additionalProperties: false,
      properties: Object.fromEntries(
        Object.entries(defaults)
          .filter(([k, x]) => typeof x === 'number' || typeof x === 'boolean' || numbers.includes(k))
          .map(([k, x]) => [k, { type: typeof x === 'boolean' ? 'boolean' : 'number' }]),
      ),
    },
  });
}

/** Fields every downstream has. */
const downstreamBase = {
  name: text('name', { doc: 'unique name (metric label, directory of its durable files)' }),
  subscribe: optional(subscription),
  limit: optional(
    delegate<(typeof LIMIT_NAMES)[number] | number>({
      doc: `concurrency limit: ${LIMIT_NAMES.map((n) => `"${n}"`).join(', ')} (default "gradient"), or a fixed number of requests in [1, 4096]`,
      check: (v) => {
        if (typeof v === 'string' && (LIMIT_NAMES as readonly string[]).includes(v)) return;
        if (typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 4096) return;
        throw new RangeError(
          `must be one of ${LIMIT_NAMES.map((n) => `"${n}"`).join(', ')} or an integer in [1, 4096], got ${typeof v === 'string' ? JSON.stringify(v) : String(v)}`,
        );
      },
      schema: { anyOf: [{ enum: [...LIMIT_NAMES] }, { type: 'integer', minimum: 1, maximum: 4096 }] },
    }),
  ),
  gradient: optional(
    tuning<GradientLimitOptions>(
      'gradient',
      GRADIENT_LIMIT_DEFAULTS,
      (v) => new GradientLimit(v),
      '{ "fastDecreaseRttRatio": 2 }',
    ),
  ),
  aimd: optional(
    tuning<AimdLimitOptions>('aimd', AIMD_LIMIT_DEFAULTS, (v) => new AimdLimit(v), '{ "backoffRatio": 0.8 }'),
  ),
  vegas: optional(
    tuning<VegasLimitOptions>(
      'vegas',
      VEGAS_LIMIT_DEFAULTS,
      (v) => new VegasLimit(v),
      '{ "smoothing": 0.5, "alpha": 3, "beta": 6 } (alpha, beta, threshold: requests here, functions of the limit only in the library)',
      { numbers: ['alpha', 'beta', 'threshold'] },
    ),
  ),
  gradient2: optional(
    tuning<Gradient2LimitOptions>(
      'gradient2',
      GRADIENT2_LIMIT_DEFAULTS,
      (v) => new Gradient2Limit(v),
      '{ "queueSize": 8, "rttTolerance": 2 }',
    ),
  ),
  window: optional(
    tuning<WindowedLimitOptions>(
      'window',
      WINDOWED_LIMIT_DEFAULTS,
      (v) => new WindowedLimit(new FixedLimit(1), v),
      '{ "windowSamples": 20 }',
      {
        doc: 'the adaptive limit runs on windows of samples (mean RTT, peak in-flight) instead of single ones, e.g. { "windowSamples": 20 }',
      },
    ),
  ),
  breaker,
  safetyCap: int({
    doc: 'static cap on requests in flight, above the adaptive limit',
    min: 1,
    max: 4096,
    default: DOWNSTREAM_DEFAULTS.safetyCap,
  }),
  maxBatchTriggers: int({
    doc: 'triggers per delivery at most (a batch takes what is waiting, up to this)',
    min: 1,
    max: 4096,
    default: DOWNSTREAM_DEFAULTS.maxBatchTriggers,
  }),
  queueCapacitySlots: int({
    doc: 'triggers held in memory; more wait in order in the backlog log',
    min: 1,
    max: 1 << 22,
    default: DOWNSTREAM_DEFAULTS.queueCapacitySlots,
  }),
  maxQueueAgeMs: optional(
    int({
      doc: 'a trigger not delivered this long after its ping was admitted is dead-lettered as expired (absent: never)',
      min: 1,
      max: 86_400_000,
      unit: 'ms',
    }),
  ),
  maxAttempts: int({
    doc: 'delivery attempts per trigger before it is undeliverable',
    min: 1,
    max: 100,
    default: DOWNSTREAM_DEFAULTS.maxAttempts,
  }),
  replay: bool({
    doc: 'an undeliverable trigger waits in the replay lane, its device behind it (true), or is dead-lettered (false)',
    default: true,
  }),
  replayGiveUpMs: int({
    doc: 'a parked trigger that keeps failing alone this long (answers that ask for no later, the breaker closed) is given up (dead-lettered for good) and its device goes on (0: never)',
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    unit: 'ms',
    default: DOWNSTREAM_DEFAULTS.replayGiveUpMs,
  }),
  backlogMaxBytes: int({
    doc: 'largest backlog log on disk; past it the trigger rings are held back',
    min: 1 << 20,
    max: Number.MAX_SAFE_INTEGER,
    unit: 'bytes',
    default: DEFAULT_BACKLOG_MAX_BYTES,
  }),
} as const;

/** A fixed limit is at most the safety cap; a limit's tuning applies only with that limit ("gradient" is the default). */
const limitOptionsRule: GroupCheck = (d, name) => {
  const limit = d['limit'] ?? 'gradient';
  if (typeof limit === 'number' && typeof d['safetyCap'] === 'number' && limit > d['safetyCap'])
    return `${name('limit')} ${limit} is above ${name('safetyCap')} ${d['safetyCap']}, which bounds every limit: raise safetyCap to at least the fixed limit`;
  if (d['window'] !== undefined && typeof d['limit'] === 'number')
    return `${name('window')} applies only to an adaptive limit, got the fixed limit ${String(d['limit'])}`;
  for (const algorithm of LIMIT_NAMES) {
    if (d[algorithm] !== undefined && limit !== algorithm) {
      return `${name(algorithm)} applies only with limit "${algorithm}"${algorithm === 'gradient' ? ' (or no limit)' : ''}, got limit ${JSON.stringify(d['limit'])}`;
    }
  }
  return undefined;
};

const downstream = variants(
  'kind',
  {
    webhook: group(
      {
        ...downstreamBase,
        url: text('url', {
          doc: 'the URL batches are POSTed to (redirects are not followed)',
          protocols: ['http:', 'https:'],
        }),
        timeoutMs: int({
          doc: 'the whole answer must be in by then, from the start of the request: otherwise a failed delivery',
          min: 1,
          max: 3_600_000,
          unit: 'ms',
          default: WEBHOOK_SINK_DEFAULTS.timeoutMs,
          flag: 'webhook-timeout-ms',
        }),
        connectTimeoutMs: int({
          doc: 'a new connection (TCP, and the TLS handshake for https:) must be up by then: otherwise a failed delivery',
          min: 1,
          max: 3_600_000,
          unit: 'ms',
          default: WEBHOOK_SINK_DEFAULTS.connectTimeoutMs,
          flag: 'webhook-connect-timeout-ms',
        }),
        caFile: nullable(
          text('path', {
            doc: 'PEM file of the CA certificates an https: webhook is verified against (null: the system store)',
            flag: 'webhook-ca-file',
          }),
        ),
        bearerToken: nullable(
          text('token', {
            doc: 'sent as "Authorization: Bearer <token>"',
            cliText: '--webhook-bearer-token-file, GEOFENCE_WEBHOOK_BEARER_TOKEN',
          }),
        ),
        signingSecret: nullable(
          text('token', {
            doc: 'HMAC-SHA256 key: each request carries x-geofence-timestamp and x-geofence-signature (see the README)',
            cliText: '--webhook-signing-secret-file, GEOFENCE_WEBHOOK_SIGNING_SECRET',
          }),
        ),
        headers: optional(
          stringMap({
            doc: 'extra request headers (e.g. an API key); a flag value is "Name: value"',
            keyPattern: /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/,
            keyRule: 'an HTTP header name',
            reservedKeys: ROUTER_SET_HEADERS,
            flag: 'webhook-header',
          }),
        ),
      },
      {
        doc: 'an HTTP(S) webhook receiving batched JSON POSTs',
        section: 'Webhooks (every --webhook)',
        check: (d, name) => limitOptionsRule(d, name) ?? webhookSecurityRule(d, name),
      },
    ),
    jetstream: group(
      {
        ...downstreamBase,
        servers: list(text('url', { doc: 'a NATS server', protocols: ['nats:', 'tls:'] }), {
          doc: 'NATS servers, nats://host:4222 (the client fails over between them)',
        }),
        subject: text('name', {
          doc: 'subject template: {type}, {fenceId}, {deviceId}, {lane} (each value with characters other than letters, digits, - and _ replaced by _)',
          default: JETSTREAM_SINK_DEFAULTS.subject,
        }),
        stream: text('name', {
          doc: 'the JetStream stream the subjects belong to',
          default: JETSTREAM_SINK_DEFAULTS.stream,
        }),
        createStream: bool({
          doc: 'create the stream when missing (subjects "<template prefix>>", file storage, limits retention)',
          default: JETSTREAM_SINK_DEFAULTS.createStream,
        }),
        duplicateWindowMs: int({
          doc: 'duplicate window of a stream the router creates: a trigger re-sent within it is stored once',
          min: 1000,
          max: 7 * 86_400_000,
          unit: 'ms',
          default: JETSTREAM_SINK_DEFAULTS.duplicateWindowMs,
        }),
        streamReplicas: int({
          doc: 'replicas of a stream the router creates',
          min: 1,
          max: 5,
          default: JETSTREAM_SINK_DEFAULTS.streamReplicas,
        }),
        ackTimeoutMs: int({
          doc: 'how long a batch waits for its next acknowledgement: with none for so long it fails and is re-sent',
          min: 1,
          max: 3_600_000,
          unit: 'ms',
          default: JETSTREAM_SINK_DEFAULTS.ackTimeoutMs,
        }),
        token: nullable(text('token', { doc: 'token of a server that requires one' })),
      },
      {
        doc: 'a NATS JetStream stream, one message per trigger, de-duplicated by (deviceId, seq)',
        check: (d, name) => limitOptionsRule(d, name) ?? jetstreamRule(d, name),
      },
    ),
    mqtt: group(
      {
        ...downstreamBase,
        url: text('url', { doc: 'the broker, mqtt://host:1883 or mqtts://host:8883', protocols: ['mqtt:', 'mqtts:'] }),
        topic: text('name', {
          doc: 'topic template: {type}, {fenceId}, {deviceId}, {lane} (each value with characters other than letters, digits, - and _ replaced by _)',
          default: MQTT_SINK_DEFAULTS.topic,
        }),
        protocolVersion: int({
          doc: 'MQTT protocol version: 5, or 4 for 3.1.1',
          min: 4,
          max: 5,
          default: MQTT_SINK_DEFAULTS.protocolVersion,
        }),
        clientId: optional(
          text('name', {
            doc: 'client id of the persistent session (default: geofence-router-<name>; in a partition group geofence-router-<name>-<member name>)',
          }),
        ),
        sessionExpirySeconds: int({
          doc: 'how long the broker keeps the session while the router is away (MQTT 5)',
          min: 0,
          max: 4_294_967_295,
          unit: 's',
          default: MQTT_SINK_DEFAULTS.sessionExpirySeconds,
        }),
        ackTimeoutMs: int({
          doc: 'how long a batch waits for its next PUBACK: with none for so long it fails and is re-sent',
          min: 1,
          max: 3_600_000,
          unit: 'ms',
          default: MQTT_SINK_DEFAULTS.ackTimeoutMs,
        }),
        username: nullable(text('name', { doc: 'user name for a broker that requires one' })),
        password: nullable(text('name', { doc: 'password (with username)' })),
      },
      {
        doc: 'an MQTT broker (5 or 3.1.1), one QoS 1 message per trigger, retain off, persistent session',
        check: (d, name) => limitOptionsRule(d, name) ?? mqttRule(d, name),
      },
    ),
    ndjson: group(
      {
        ...downstreamBase,
        path: text('path', { doc: 'file appended to, one trigger per line ("-": stdout)' }),
        fsync: bool({
          doc: 'a batch counts as delivered once fsynced, not only written (survives a power loss; a disk flush per batch)',
          default: false,
        }),
      },
      {
        doc: 'an NDJSON file',
        check: (d, name) =>
          limitOptionsRule(d, name) ??
          (d['fsync'] === true && d['path'] === '-'
            ? `${name('fsync')} applies to a file, not to stdout ("-")`
            : undefined),
      },
    ),
    callback: group(
      {
        ...downstreamBase,
        callback: fn<(triggers: readonly Trigger[]) => Promise<void> | void>({
          doc: 'receives each batch on the thread that created the router; a throw or rejection is a failed delivery, logged (warn) with the downstream and what was thrown',
        }),
        timeoutMs: nullable(
          int({
            doc: 'a call not settled by then is a failed delivery (logged, its batch sent again while the late call may still run: a device can then see a batch twice, and out of order; what the call does later is ignored); null: none, a call holds its device until it settles. At close, a call still running a second after the drain deadline leaves its batch for the next start either way',
            min: 1,
            max: 3_600_000,
            unit: 'ms',
          }),
        ),
      },
      { doc: 'an in-process callback (library only)', check: limitOptionsRule },
    ),
    stream: group(
      { ...downstreamBase },
      {
        doc: 'a trigger stream the embedding reads with `for await (const batch of router.triggers(name))` (library only)',
        check: limitOptionsRule,
      },
    ),
  },
  { doc: 'a downstream triggers are delivered to' },
);

/** Downstream names are unique, and at most one downstream writes stdout. */
const uniqueNames: GroupCheck = (o, name) => {
  const seen = new Set<string>();
  const list = o['downstreams'] as { name: string; kind: string; path?: unknown }[];
  let stdout = -1;
  for (let i = 0; i < list.length; i++) {
    const n = list[i]!.name;
    if (seen.has(n)) return `${name('downstreams', i, 'name')} must be unique, got ${JSON.stringify(n)} twice`;
    seen.add(n);
    // Two writers of stdout would interleave their batches' bytes: one line could hold parts of two.
    if (list[i]!.kind === 'ndjson' && list[i]!.path === '-') {
      if (stdout >= 0)
        return `${name('downstreams', i, 'path')} "-": ${name('downstreams', stdout, 'path')} writes stdout already (one downstream may)`;
      stdout = i;
    }
  }
  return undefined;
};

/**
 * Refuses a telemetry listener on a non-loopback address with neither TLS nor a token, or an admin server there
 * without a token, unless `allowUnauthenticated` says so.
 */
/** A JetStream source's acknowledgement wait must outlast two checkpoint intervals (messages wait for one). */
const sourceAckWait: GroupCheck = (o, name) => {
  const js = o['jetstreamSource'] as { ackWaitMs?: unknown } | null | undefined;
  const interval = o['checkpointIntervalMs'];
  if (js === null || js === undefined || typeof js.ackWaitMs !== 'number' || typeof interval !== 'number')
    return undefined;
  if (js.ackWaitMs < 2 * interval + 1000)
    return `${name('jetstreamSource')}.ackWaitMs (${js.ackWaitMs}) must be at least 2 x ${name('checkpointIntervalMs')} + 1000 (${2 * interval + 1000}): a message is acknowledged only once a checkpoint covers it`;
  return undefined;
};

const exposure: GroupCheck = (o) => {
  if (o['allowUnauthenticated'] === true) return undefined;
  const ingest = o['ingest'] as { tls: unknown; authToken: unknown };
  const listenHost = o['listenHost'] as string | null;
  if (listenHost !== null && !isLoopbackHost(listenHost) && ingest.tls === null && ingest.authToken === null) {
    return `options.listenHost ${listenHost} is not a loopback address and the telemetry listener has neither TLS (options.ingest.tls, --tls-cert/--tls-key) nor a token (options.ingest.authToken, --ingest-token-file): anyone who reaches it could inject pings; set one, or options.allowUnauthenticated (--allow-unauthenticated) to accept that`;
  }
  const adminHost = o['adminHost'] as string | null;
  if (adminHost !== null && !isLoopbackHost(adminHost) && o['adminToken'] === null) {
    return `options.adminHost ${adminHost} is not a loopback address and the admin server has no token (options.adminToken, --admin-token-file): anyone who reaches it could reload the fences; set one, or options.allowUnauthenticated (--allow-unauthenticated) to accept that`;
  }
  return undefined;
};

const floodLimit = (doc: string, flag: string) =>
  num({ doc: `${doc} (0: no limit)`, min: 0, max: 1e9, unit: 'per s', default: 0, flag });

const tls = nullable(
  group(
    {
      certFile: text('path', { doc: 'server certificate chain (PEM)' }),
      keyFile: text('path', { doc: 'its private key (PEM)' }),
      caFile: nullable(text('path', { doc: 'CA bundle client certificates must chain to (null: not asked for)' })),
      requireClientCert: bool({ doc: 'with a CA: refuse a client without a valid certificate', default: true }),
    },
    {
      doc: 'TLS for the telemetry listener (null: plain TCP)',
      cliText: '--tls-cert, --tls-key, --tls-ca, --tls-client-cert-optional',
    },
  ),
);

const ingest = group(
  {
    maxFrameBytes: int({
      doc: 'largest telemetry frame',
      min: 16,
      max: 16 * 1024 * 1024,
      unit: 'bytes',
      default: 1024,
      flag: 'max-frame-bytes',
    }),
    readChunkBytes: int({
      doc: 'bytes a stream processes per step',
      min: 256,
      max: 16 * 1024 * 1024,
      unit: 'bytes',
      default: 65536,
    }),
    sharedStructures: bool({
      doc: 'accept msgpackr shared-structure records (all senders must use them)',
      default: false,
      flag: 'shared-structures',
    }),
    maxConnections: int({
      doc: 'simultaneous TCP connections',
      min: 1,
      max: 1_000_000,
      default: 10_000,
      flag: 'max-connections',
    }),
    idleTimeoutMs: int({
      doc: 'close a TCP connection that sent nothing this long (0: never; a paused one is not idle)',
      min: 0,
      max: 86_400_000,
      unit: 'ms',
      default: 300_000,
    }),
    tls,
    authToken: nullable(
      text('token', {
        doc: 'token each TCP connection presents first, as the line "AUTH <token>"',
        cliText: '--ingest-token-file, GEOFENCE_INGEST_TOKEN',
      }),
    ),
    frameDeadlineMs: int({
      doc: 'close a connection that begins a frame and does not finish it within this (0: never)',
      min: 0,
      max: 3_600_000,
      unit: 'ms',
      default: 10_000,
      flag: 'frame-deadline-ms',
    }),
    maxHeldBytes: int({
      doc: 'bytes all connections may hold for partial frames; past it the oldest partial frames’ connections close',
      min: 65_536,
      max: 2 ** 40,
      unit: 'bytes',
      default: 64 * 1024 * 1024,
      flag: 'max-held-bytes',
    }),
    stationarySpeedMps: num({
      doc: 'speed below which a ping is stationary',
      min: 0,
      max: 100,
      unit: 'm/s',
      default: 0.5,
    }),
    stationaryRadiusM: num({
      doc: 'distance within which an unmoving device is stationary',
      min: 0,
      max: 10_000,
      unit: 'm',
      default: 10,
    }),
    rejectLogIntervalMs: int({
      doc: 'least time between two log lines of one reject reason',
      min: 0,
      max: 86_400_000,
      unit: 'ms',
      default: 10_000,
    }),
    overload: choice(['shed', 'backpressure'], {
      doc: 'when a ring is full the TCP listener sheds by lane, or pauses the connection (files, stdin, push() always wait)',
      default: 'shed',
      flag: 'overload',
    }),
    inputHighWaterBytes: int({
      doc: 'ingest() bytes in flight at which ingest() returns false (and stdin pauses)',
      min: 1024,
      max: 1 << 30,
      unit: 'bytes',
      default: 1 << 20,
    }),
    inputHighWaterPoints: int({
      doc: 'push() points in flight at which push() returns false',
      min: 1,
      max: 1 << 24,
      default: 8192,
    }),
    maxPingsPerSecPerConnection: floodLimit('pings per TCP connection a second', 'max-pings-per-sec-per-connection'),
    maxNewDevicesPerSecPerConnection: floodLimit(
      'new devices per TCP connection a second',
      'max-new-devices-per-sec-per-connection',
    ),
    maxPingsPerSecPerAddress: floodLimit(
      'pings per source address a second (its connections share it)',
      'max-pings-per-sec-per-address',
    ),
    maxNewDevicesPerSecPerAddress: floodLimit(
      'new devices per source address a second',
      'max-new-devices-per-sec-per-address',
    ),
  },
  { doc: 'the ingest edge', section: 'Telemetry and admin', threads: ['ingest'] },
);

const deadLetter = group(
  {
    capacityRecords: int({
      doc: 'dead-letter ring records before a flush',
      min: 1,
      max: 1 << 20,
      default: 4096,
      flag: 'dead-letter-capacity',
    }),
    maxBytesPerDownstream: int({
      doc: 'dead letters kept on disk per downstream; the oldest past it are dropped (over_budget)',
      min: 1 << 20,
      max: Number.MAX_SAFE_INTEGER,
      unit: 'bytes',
      default: 256 * 1024 * 1024,
      flag: 'dead-letter-max-bytes',
    }),
    maxAgeMs: int({
      doc: 'dead letters older than this are dropped (too_old); one waiting for replay is given up',
      min: 1,
      max: Number.MAX_SAFE_INTEGER,
      unit: 'ms',
      default: 7 * 24 * 3600 * 1000,
      flag: 'dead-letter-max-age-ms',
    }),
  },
  {
    doc: 'dead letters',
    section: 'Fences and downstreams',
    threads: ['dispatcher'],
    retired: { dir: 'dead letters live in options.stateDir (<stateDir>/downstreams/<name>/)' },
  },
);

/** The router's options. */
export const ROUTER_SPEC = group(
  {
    listenHost: nullable(
      text('host', {
        doc: 'interface of the telemetry TCP listener (null: none; the library opens none unless listenHost or listenPort is given); non-loopback needs TLS or a token',
        default: '127.0.0.1',
        section: 'Telemetry and admin',
        threads: ['ingest'],
        cliText: '--listen HOST:PORT, --no-listen',
      }),
    ),
    listenPort: int({
      doc: 'port of the telemetry listener (0: any free port)',
      min: 0,
      max: 65535,
      default: 7070,
      threads: ['ingest'],
      cliText: '--listen HOST:PORT',
    }),
    adminHost: nullable(
      text('host', {
        doc: 'interface of the admin HTTP server (null: none; the library opens none unless adminHost or adminPort is given); non-loopback needs adminToken',
        default: '127.0.0.1',
        cliText: '--admin HOST:PORT, --no-admin',
      }),
    ),
    adminPort: int({
      doc: 'port of the admin HTTP server',
      min: 0,
      max: 65535,
      default: 9464,
      cliText: '--admin HOST:PORT',
    }),
    adminToken: nullable(
      text('token', {
        doc: 'bearer token every admin route that changes anything requires',
        cliText: '--admin-token-file, GEOFENCE_ADMIN_TOKEN',
      }),
    ),
    allowUnauthenticated: bool({
      doc: 'bind non-loopback addresses without TLS or tokens (logged as a warning)',
      default: false,
      flag: 'allow-unauthenticated',
      section: 'Telemetry and admin',
    }),
    shards: int({
      doc: 'telemetry shards (rings); a device always maps to one',
      min: 1,
      max: 1024,
      default: 8,
      flag: 'shards',
      section: 'Pipeline',
      threads: ['ingest', 'containment'],
    }),
    ringCapacitySlots: int({
      doc: 'slots per telemetry ring',
      min: 64,
      max: 1 << 24,
      powerOfTwo: true,
      default: 16384,
      flag: 'ring-capacity',
      section: 'Pipeline',
    }),
    admission: ADMISSION_SPEC,
    poolSize: int({
      doc: 'containment worker threads for the shards (with `complianceWorker`, one more for the COMPLIANCE ring)',
      min: 1,
      max: 256,
      default: DEFAULT_POOL_SIZE,
      defaultText: 'cores - 1',
      flag: 'pool-size',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    complianceWorker: bool({
      doc: 'with one ingest thread, a COMPLIANCE ring and a containment worker of its own: COMPLIANCE pings pass the other lanes’ queue, each device on one path at a time so its order holds (false: every lane shares the shard rings; ignored with several ingest threads)',
      default: true,
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    ingestThreads: int({
      doc: 'ingest threads: each decodes, registers, classifies and admits the pings of its share of the TCP connections into telemetry rings of its own (thread 0 also reads files, stdin, JetStream and in-process input)',
      min: 1,
      max: MAX_INGEST_THREADS,
      default: DEFAULT_INGEST_THREADS,
      defaultText: 'cores / 4, at least 1',
      flag: 'ingest-threads',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    batchSize: int({
      doc: 'pings per shard per pass of a containment task at most (batches never wait to fill)',
      min: 1,
      max: 65536,
      default: 512,
      flag: 'batch-size',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    batchBudgetUs: int({
      doc: 'a containment batch is sized from the measured cost per ping to take about this long (batchSize caps it): short batches keep a pass over the shards, and so every ring wait, short when pings are expensive',
      min: 10,
      max: 1_000_000,
      unit: 'µs',
      default: 250,
      flag: 'batch-budget-us',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    containmentStallMs: int({
      doc: 'a containment task with records waiting and no batch begun this long is aborted and replaced',
      min: 100,
      max: 3_600_000,
      unit: 'ms',
      default: 10_000,
      flag: 'containment-stall-ms',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    maxDevices: int({
      doc: 'device slots',
      min: 1,
      max: 1 << 24,
      default: 100_000,
      flag: 'max-devices',
      section: 'Pipeline',
    }),
    deviceIdleTimeoutMs: int({
      doc: 'a device without a ping this long is expired and its slot reused (0: never)',
      min: 100,
      max: 31_536_000_000,
      zeroOff: true,
      unit: 'ms',
      default: 86_400_000,
      flag: 'device-idle-timeout-ms',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    deviceExpiry: choice(['exit', 'silent'], {
      doc: 'an expired device inside fences gets an EXIT per fence with "reason":"expired", or nothing',
      default: 'exit',
      flag: 'device-expiry',
      section: 'Pipeline',
      threads: ['ingest'],
    }),
    crossMaxSpeedMps: num({
      doc: 'no CROSS for a move between two pings faster than this (0: no such rule)',
      min: 1,
      max: 1e6,
      zeroOff: true,
      unit: 'm/s',
      default: 250,
      flag: 'cross-max-speed-mps',
      section: 'Pipeline',
      threads: ['ingest', 'containment'],
    }),
    crossMaxGapMs: int({
      doc: 'no CROSS across a gap between pings longer than this (0: off)',
      min: 1000,
      max: 86_400_000,
      zeroOff: true,
      unit: 'ms',
      default: 3_600_000,
      flag: 'cross-max-gap-ms',
      section: 'Pipeline',
      threads: ['ingest', 'containment'],
    }),
    crossMaxPerDevicePerSec: int({
      doc: 'CROSS triggers per device a second at most; the rest are counted, not written (0: no limit)',
      min: 1,
      max: 1_000_000,
      zeroOff: true,
      unit: 'per s',
      default: 100,
      flag: 'cross-max-per-device-per-sec',
      section: 'Pipeline',
      threads: ['ingest', 'containment'],
    }),
    idBytesPerSlot: int({ doc: 'UTF-8 bytes of the longest device id', min: 1, max: 1024, unit: 'bytes', default: 64 }),
    maxFencesPerDevice: int({
      doc: 'fences a device can be inside at once; beyond it a fence is untracked for that stay (counted)',
      min: 1,
      max: 256,
      default: 64,
      flag: 'max-fences-per-device',
      section: 'Pipeline',
    }),
    fenceEntriesPerDevice: int({
      doc: 'fence entries provisioned per device on average (8 own, the rest from a shared pool, 24 bytes each)',
      min: 1,
      max: 256,
      default: 32,
      flag: 'fence-entries-per-device',
      section: 'Pipeline',
    }),
    fencesFile: nullable(
      text('path', {
        doc: 'GeoJSON FeatureCollection of fences (null: none, or `fences` given to createRouter)',
        flag: 'fences',
        section: 'Fences and downstreams',
      }),
    ),
    complianceMarginM: num({
      doc: 'a ping this close to a compliance fence’s box travels in the COMPLIANCE lane',
      min: 0,
      max: 100_000,
      unit: 'm',
      default: 100,
      flag: 'compliance-margin-m',
      section: 'Fences and downstreams',
      threads: ['ingest'],
    }),
    maxFenceFileBytes: int({
      doc: 'largest fence file read; a larger one is refused',
      min: 1024,
      max: 2 ** 40,
      unit: 'bytes',
      default: 2 ** 30,
      flag: 'max-fence-file-bytes',
      section: 'Fences and downstreams',
    }),
    maxFences: int({
      doc: 'most fences in one file or collection',
      min: 1,
      max: 10_000_000,
      default: 1_000_000,
      flag: 'max-fences',
      section: 'Fences and downstreams',
    }),
    maxVerticesPerRing: int({
      doc: 'most positions in one polygon ring',
      min: 4,
      max: 10_000_000,
      default: 100_000,
      flag: 'max-vertices-per-ring',
      section: 'Fences and downstreams',
    }),
    jetstreamSource: nullable(
      group(
        {
          servers: list(text('url', { doc: 'a NATS server', protocols: ['nats:', 'tls:'] }), {
            doc: 'NATS servers, nats://host:4222 (the client fails over between them)',
          }),
          stream: text('name', {
            doc: 'the stream holding the telemetry',
            default: JETSTREAM_SOURCE_DEFAULTS.stream,
          }),
          subjectPrefix: text('name', {
            doc: 'pings are published to <subjectPrefix>.<partition>.<deviceId>; the partition is partitionOf(deviceId, partitionCount)',
            default: JETSTREAM_SOURCE_DEFAULTS.subjectPrefix,
          }),
          partitionCount: int({
            doc: 'partitions the subjects are split into (every router and the ingest tier must agree)',
            min: 1,
            max: MAX_PARTITIONS,
            default: JETSTREAM_SOURCE_DEFAULTS.partitionCount,
          }),
          partitions: text('name', {
            doc: 'partitions this router consumes: "all", numbers and ranges such as "0-7,12", or "auto": taken through leases shared with the other routers of the stream, balanced as routers join and leave, moved with their device state when one dies',
            default: JETSTREAM_SOURCE_DEFAULTS.partitions,
          }),
          consumerPrefix: text('name', {
            doc: 'durable consumers are named <consumerPrefix>-p<partition>',
            default: JETSTREAM_SOURCE_DEFAULTS.consumerPrefix,
          }),
          createStream: bool({
            doc: 'create the stream when missing (subjects "<subjectPrefix>.>", file storage, limits retention)',
            default: JETSTREAM_SOURCE_DEFAULTS.createStream,
          }),
          streamReplicas: int({
            doc: 'replicas of a stream the router creates',
            min: 1,
            max: 5,
            default: JETSTREAM_SOURCE_DEFAULTS.streamReplicas,
          }),
          streamMaxAgeMs: int({
            doc: 'how long a stream the router creates keeps a message (0: no age limit)',
            min: 0,
            max: Number.MAX_SAFE_INTEGER,
            unit: 'ms',
            default: JETSTREAM_SOURCE_DEFAULTS.streamMaxAgeMs,
          }),
          duplicateWindowMs: int({
            doc: 'duplicate window of a stream the router creates (a re-publish with the same Nats-Msg-Id is stored once)',
            min: 1000,
            max: 7 * 86_400_000,
            unit: 'ms',
            default: JETSTREAM_SOURCE_DEFAULTS.duplicateWindowMs,
          }),
          fetchMessages: int({
            doc: 'messages one fetch of a partition asks for',
            min: 1,
            max: 100_000,
            default: JETSTREAM_SOURCE_DEFAULTS.fetchMessages,
          }),
          ackWaitMs: int({
            doc: 'how long the server waits for an acknowledgement before delivering a message again (a message is acknowledged once a checkpoint covers it: at least 2 x checkpointIntervalMs + 1 s)',
            min: 1000,
            max: 3_600_000,
            unit: 'ms',
            default: JETSTREAM_SOURCE_DEFAULTS.ackWaitMs,
          }),
          maxBacklogAgeMs: int({
            doc: 'messages older than this when taken are fed as live traffic, where lane shedding applies (0: never; the log absorbs any backlog)',
            min: 0,
            max: Number.MAX_SAFE_INTEGER,
            unit: 'ms',
            default: JETSTREAM_SOURCE_DEFAULTS.maxBacklogAgeMs,
          }),
          stateBucket: nullable(
            text('name', {
              doc: "key-value bucket keeping each partition's device state with the stream position it covers, written at every checkpoint and restored by whichever router reads the partition next (null: device state stays in the state directory)",
              default: JETSTREAM_SOURCE_DEFAULTS.stateBucket,
            }),
          ),
          leaseBucket: text('name', {
            doc: 'key-value bucket of the partition leases (partitions "auto"); its TTL is the lease time',
            default: JETSTREAM_SOURCE_DEFAULTS.leaseBucket,
          }),
          leaseMs: int({
            doc: 'lease time of a lease bucket the router creates (a bucket that exists keeps its own): a router that stops renewing loses its partitions this long after its last renewal',
            min: 1000,
            max: 3_600_000,
            unit: 'ms',
            default: JETSTREAM_SOURCE_DEFAULTS.leaseMs,
          }),
          memberName: nullable(
            text('name', {
              doc: "this router's name among the members of a group (null: <hostname>-<pid>); characters other than letters, digits, - and _ become _",
            }),
          ),
          token: nullable(text('token', { doc: 'token of a server that requires one' })),
        },
        {
          doc: 'a NATS JetStream stream read as telemetry, one durable pull consumer per owned partition (null: none)',
          section: 'Telemetry and admin',
          threads: ['ingest'],
          cliText:
            '--source jetstream://HOST:PORT[,HOST:PORT]/STREAM, --partitions, --partition-count, --partition-state-bucket, --lease-ms, --member-name',
          check: (d, name) => partitionsRule(d, name),
        },
      ),
    ),
    inputs: list(text('path', { doc: 'a file path, or "-" for stdin' }), {
      doc: 'files of concatenated MessagePack frames to replay at start ("-": stdin)',
      default: [],
      threads: ['ingest'],
      cliText: '--input FILE (repeatable)',
    }),
    downstreams: list(downstream, {
      doc: 'downstreams triggers are delivered to',
      default: [],
      threads: ['dispatcher'],
      cliText: '--webhook URL, --ndjson PATH (repeatable)',
    }),
    deadLetter,
    stateDir: nullable(
      text('path', {
        doc: 'checkpoints, backlog logs, dead letters; one router at a time (null: a temporary directory)',
        default: 'geofence-router-state',
        flag: 'state-dir',
        section: 'Durable state',
      }),
    ),
    checkpointIntervalMs: int({
      doc: 'device state is checkpointed this often: what a crash can lose',
      min: 100,
      max: 86_400_000,
      unit: 'ms',
      default: 5000,
      flag: 'checkpoint-interval-ms',
      section: 'Durable state',
    }),
    drainDeadlineMs: int({
      doc: 'how long a drain keeps delivering; what is left is kept in the state directory for the next start',
      min: 0,
      max: 3_600_000,
      unit: 'ms',
      default: 30_000,
      flag: 'drain-deadline-ms',
      section: 'Durable state',
    }),
    ingest,
  },
  { doc: 'the router', check: (o, name) => uniqueNames(o, name) ?? exposure(o, name) ?? sourceAckWait(o, name) },
);
