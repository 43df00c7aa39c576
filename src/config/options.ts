/**
 * Router options (main thread): one Options interface, one defaults object, one validation that names the option
 * and its allowed range. `resolveRouterOptions` merges a partial over the defaults (nested objects merged, arrays
 * replaced) and validates the result.
 */
import { availableParallelism } from 'node:os';
import { TRIGGER_TYPE_NAMES } from '../shm/layout.js';
import type { Trigger } from '../dispatch/trigger.js';
import { isLoopbackHost } from '../auth/secrets.js';
import { validateFloodLimits } from '../ingest/stream-limits.js';
import {
  GRADIENT_LIMIT_DEFAULTS,
  GradientLimit,
  type GradientLimitOptions,
} from '../dispatch/limits/gradient-limit.js';

/** Trigger type names as subscriptions name them. */
export type TriggerTypeName = (typeof TRIGGER_TYPE_NAMES)[number];

/** Which triggers a downstream receives: a trigger matches when it matches every list given (absent = any). */
export interface SubscriptionOptions {
  /** Fence ids. */
  fenceIds?: string[];
  /** Fence tags (a trigger matches when its fence has any of them). */
  tags?: string[];
  /** Trigger types. */
  types?: TriggerTypeName[];
}

/** Concurrency-limit algorithm of a downstream: an adaptive algorithm by name, or a fixed limit (a number). */
export type LimitChoice = 'gradient' | 'aimd' | 'vegas' | 'gradient2' | number;

/** Names of the adaptive limit algorithms. */
const LIMIT_NAMES = ['gradient', 'aimd', 'vegas', 'gradient2'] as const;

/** Fields every downstream has (all but `name` and `kind` optional; the dispatcher's defaults apply). */
interface DownstreamBase {
  /** Unique name (metric label, dead-letter key). */
  name: string;
  /** Which triggers it receives; absent = all. */
  subscribe?: SubscriptionOptions;
  /** Concurrency limit: 'gradient' (default), 'aimd', 'vegas', 'gradient2', or a fixed number of requests. */
  limit?: LimitChoice;
  /**
   * Tuning of the gradient limit (with `limit` 'gradient' or absent): any of GradientLimitOptions, e.g.
   * `{ "fastDecreaseRttRatio": 2 }` to halve the limit at once when a queue clearly builds. Unknown names and bad
   * values are refused with the option named.
   */
  gradient?: Partial<GradientLimitOptions>;
  /** Static safety cap on requests in flight, [1, 4096] (default 256). */
  safetyCap?: number;
  /** Triggers per delivery (batch) at most, [1, 4096] (default 128; a batch holds what is waiting, up to this). */
  maxBatchTriggers?: number;
  /** Triggers held in memory, [1, 2^22] (default 16384); more wait in order in the backlog log. */
  queueCapacitySlots?: number;
  /**
   * A trigger not delivered this long after its ping was admitted is dead-lettered as expired instead of sent, ms,
   * [1, 8.64e7] (default: never).
   */
  maxQueueAgeMs?: number;
  /** Delivery attempts per trigger before it is dead-lettered as undeliverable, [1, 100] (default 3). */
  maxAttempts?: number;
  /**
   * An undeliverable trigger waits in the replay lane, its device's later triggers behind it, until the downstream
   * takes it (true, default); false dead-letters it for good and lets the device go on.
   */
  replay?: boolean;
  /** Largest backlog log on disk, bytes, [1 MiB, 2^53) (default 1 GiB); past it the trigger rings are held back. */
  backlogMaxBytes?: number;
}

/** An HTTP webhook receiving batched JSON POSTs. */
export interface WebhookDownstreamOptions extends DownstreamBase {
  kind: 'webhook';
  /** http:// URL. */
  url: string;
  /** Per-request timeout, ms, [1, 3.6e6] (default 10000). */
  timeoutMs?: number;
}

/** An NDJSON file (or "-" for stdout), one trigger per line. */
export interface NdjsonDownstreamOptions extends DownstreamBase {
  kind: 'ndjson';
  /** File path, or "-" for stdout. */
  path: string;
}

/** An in-process callback (library use only; not expressible in a config file). */
export interface CallbackDownstreamOptions extends DownstreamBase {
  kind: 'callback';
  /**
   * Receives each batch of triggers on the thread that created the router; the batch counts as delivered when the
   * returned promise (or the call) completes, and as a failed delivery (retried, then dead-lettered) when it throws.
   */
  callback: (triggers: readonly Trigger[]) => Promise<void> | void;
}

/** One downstream. */
export type DownstreamOptions = WebhookDownstreamOptions | NdjsonDownstreamOptions | CallbackDownstreamOptions;

/** Lane admission in front of each telemetry ring. */
export interface AdmissionConfig {
  /** Fraction of each ring reachable only by the COMPLIANCE lane, [0, 0.5]. */
  reservedFraction: number;
  /** Fill fraction at and above which IDLE pings need a token, (0, 1). */
  watermarkFraction: number;
  /** IDLE token bucket capacity, tokens, >= 1. */
  idleBucketCapacity: number;
  /** IDLE token bucket refill rate, tokens per second, >= 0. */
  idleBucketRatePerSec: number;
  /**
   * Queue-delay target, ms, [0, 60000] (0: off): when a ring's oldest record has waited longer than this for
   * `queueDelayIntervalMs`, IDLE and TRANSITION pings of live sources are shed (`queue_delay`) until it is under again.
   */
  queueDelayTargetMs: number;
  /** How long the wait must stay above the target before shedding starts, ms, [0, 60000]. */
  queueDelayIntervalMs: number;
}

/** The ingest edge. */
export interface IngestConfig {
  /** Largest frame accepted, bytes, [16, 16 MiB]. */
  maxFrameBytes: number;
  /** Bytes a stream processes per step, [256, 16 MiB]. */
  readChunkBytes: number;
  /** Accept msgpackr shared-structure records (exclusive wire mode, see src/ingest/wire-format.ts). */
  sharedStructures: boolean;
  /** Largest number of simultaneous TCP connections, [1, 1e6]. */
  maxConnections: number;
  /**
   * Close a TCP connection that sent nothing for this long, ms (0 = never). Finite by default: a sender that died
   * without closing (a gateway power-cycled, a NAT that dropped the flow) would otherwise hold a connection slot for ever.
   */
  idleTimeoutMs: number;
  /** TLS for the telemetry listener (null: plain TCP). */
  tls: IngestTlsConfig | null;
  /**
   * Token each TCP producer presents as its first bytes, the line `AUTH <token>\n`, before its frames (null: none), at
   * least 16 characters; a connection that does not is closed and counted (`unauthenticated`).
   */
  authToken: string | null;
  /**
   * A TCP connection that begins a frame and does not complete it within this is closed, ms, [0, 3600000] (0: never):
   * a client trickling bytes cannot hold a connection for long.
   */
  frameDeadlineMs: number;
  /**
   * Bytes all TCP connections may hold for partial frames together, [64 KiB, 2^40]; past it the connections whose
   * partial frames are oldest are closed until the rest fit.
   */
  maxHeldBytes: number;
  /** Speed below which a ping is stationary, m/s, [0, 100]. */
  stationarySpeedMps: number;
  /** Distance within which an unmoving device is stationary, m, [0, 10000]. */
  stationaryRadiusM: number;
  /** Minimum time between two log lines for the same reject reason, ms, >= 0. */
  rejectLogIntervalMs: number;
  /**
   * What the TCP listener does when a frame's telemetry ring has no room for it: 'shed' (default) drops pings by lane
   * at the edge, counted and logged, as a live GPS stream cannot wait; 'backpressure' pauses the connection until the
   * ring has room again, losing nothing (for senders that buffer, e.g. a relay replaying a log). Files, stdin and
   * `ingest()` / `push()` are always back-pressured, whatever this says.
   */
  overload: OverloadPolicy;
  /**
   * High-water mark of the in-process input in flight, bytes, [1024, 2^30]: `ingest()` bytes (and, counted apart,
   * forwarded stdin bytes) posted to the ingest thread and not yet fed to the edge. At or above it `ingest()` returns
   * false and stdin is paused; `inputDrained()` resolves (and stdin resumes) at half of it.
   */
  inputHighWaterBytes: number;
  /**
   * High-water mark of the in-process points in flight, [1, 2^24]: `push()` points posted to the ingest thread and not
   * yet offered to admission. At or above it `push()` returns false.
   */
  inputHighWaterPoints: number;
  /**
   * Flood limits of the TCP listener, each 0 (default: no limit) or a rate per second: pings per connection, new
   * devices per connection, pings per source address, new devices per source address (all connections from one
   * address share its budget). What exceeds one is rejected (`connection_rate`, `new_device_rate`) and counted;
   * known devices and other senders keep flowing. Files, stdin and in-process input are never limited.
   */
  maxPingsPerSecPerConnection: number;
  /** See maxPingsPerSecPerConnection. */
  maxNewDevicesPerSecPerConnection: number;
  /** See maxPingsPerSecPerConnection. */
  maxPingsPerSecPerAddress: number;
  /** See maxPingsPerSecPerConnection. */
  maxNewDevicesPerSecPerAddress: number;
}

/** What a live source does when a telemetry ring has no room: shed by lane at the edge, or pause the source. */
export type OverloadPolicy = 'shed' | 'backpressure';

/** The overload policies, as options and flags name them. */
export const OVERLOAD_POLICIES: readonly OverloadPolicy[] = ['shed', 'backpressure'];

/** What a device's expiry says about the fences it is inside (see RouterOptions.deviceExpiry). */
export type DeviceExpiryMode = 'exit' | 'silent';
/** The accepted `deviceExpiry` values. */
export const DEVICE_EXPIRY_MODES: readonly DeviceExpiryMode[] = ['exit', 'silent'];

/** Dead letters. */
export interface DeadLetterConfig {
  /** Records the dead-letter ring holds before a flush, [1, 2^20]. */
  capacityRecords: number;
  /**
   * Size budget of each downstream's dead letters on disk, bytes, [1 MiB, 2^53) (default 256 MiB). Past it the oldest
   * dead letters are dropped, counted as `over_budget` and alarmed.
   */
  maxBytesPerDownstream: number;
  /**
   * Age budget of dead letters, ms, [1, 2^53) (default 7 days): older ones are dropped, counted as `too_old` and
   * alarmed. A dropped dead letter that waited for replay is given up.
   */
  maxAgeMs: number;
}

/** TLS for the telemetry listener: PEM files, read at start. */
export interface IngestTlsConfig {
  /** Server certificate chain. */
  certFile: string;
  /** Its private key. */
  keyFile: string;
  /** CA bundle that client certificates must chain to (null: client certificates are not asked for). */
  caFile: string | null;
  /** With a CA: refuse a client without a valid certificate (true, default) or only ask for one (false). */
  requireClientCert: boolean;
}

/** Every option of the router. */
export interface RouterOptions {
  /**
   * Interface the telemetry TCP listener binds (null: no TCP listener). Loopback by default; any other address needs
   * TLS (`ingest.tls`) or a token (`ingest.authToken`), or `allowUnauthenticated`.
   */
  listenHost: string | null;
  /** Port of the telemetry listener, [0, 65535] (0: any free port). */
  listenPort: number;
  /** Interface the admin HTTP server binds (null: no admin server); a non-loopback one needs `adminToken`. */
  adminHost: string | null;
  /** Port of the admin HTTP server, [0, 65535]. */
  adminPort: number;
  /** Bearer token every admin route that changes anything requires (null: none), at least 16 characters. */
  adminToken: string | null;
  /**
   * Lets the telemetry listener bind a non-loopback address without TLS or a token, and the admin server without a
   * token (a warning is logged at start): anyone who reaches the port can then inject pings or reload fences.
   */
  allowUnauthenticated: boolean;
  /** Telemetry shards (rings), [1, 1024]. */
  shards: number;
  /** Slots per telemetry ring, a power of two in [64, 2^24]. */
  ringCapacitySlots: number;
  /** Lane admission. */
  admission: AdmissionConfig;
  /** Containment worker threads, [1, 256]. */
  poolSize: number;
  /**
   * Pings per shard per pass of a containment task at most, [1, 65536]. Batches never wait to fill: a shard's ring is
   * published at `batchSize` claimed records, every 256 records and at the end of every read chunk.
   */
  batchSize: number;
  /**
   * Containment watchdog, ms, [100, 3600000] (default 10,000): a group whose task is in flight, whose shards have
   * records waiting and whose task has begun no batch for this long (while its trigger rings have room) is declared
   * hung; its task is aborted (the pool replaces the worker), the batch it held is dropped and counted as lost, and the
   * group is resubmitted. /healthz answers 503 from detection until the replacement makes progress.
   */
  containmentStallMs: number;
  /** Device slots, [1, 2^24]. */
  maxDevices: number;
  /**
   * A device without a ping for this long is expired, ms, 0 or [100, 3.1536e10] (default 86,400,000: a day; 0:
   * never): its stays end (see `deviceExpiry`) and its slot is reused by a new device once every downstream has
   * settled its triggers. A device that sends again continues as a new stay, its seq above every seq it had.
   */
  deviceIdleTimeoutMs: number;
  /**
   * What an expiry says about the fences the device is inside: "exit" (default) an EXIT per fence, at its last
   * position and time, with `"reason":"expired"`; "silent" nothing.
   */
  deviceExpiry: DeviceExpiryMode;
  /**
   * No CROSS for a move between two pings that implies more than this speed, m/s, 0 or [1, 1e6] (default 250: faster
   * than anything on the ground; 0 turns the rule off): a device that jumps across the city would otherwise cross
   * every fence on the straight line. Counted (`geofence_implausible_segments_total`).
   */
  crossMaxSpeedMps: number;
  /** No CROSS across a gap between pings longer than this, ms, 0 or [1000, 8.64e7] (default 3,600,000; 0: off). */
  crossMaxGapMs: number;
  /**
   * CROSS triggers per device per second at most, 0 or [1, 1e6] (default 100; 0: no limit): the rest are not written
   * and are counted (`geofence_cross_over_budget_total`, the summary). ENTER, EXIT and DWELL are never limited.
   */
  crossMaxPerDevicePerSec: number;
  /** UTF-8 bytes per device id (longest string id), [1, 1024]. */
  idBytesPerSlot: number;
  /**
   * Fences a device can be inside (or pending for) at once, [1, 256]: 8 held per device, the rest from a shared pool
   * of maxDevices * 8 entries. Beyond it a fence is untracked for that stay (counted; no trigger about it).
   */
  maxFencesPerDevice: number;
  /**
   * Fence entries provisioned per device on average, [1, 256]: 8 of its own plus a share of the shared overflow pool
   * (maxDevices * (this - 8) entries, 24 bytes each). Raise it when the `fence_untracked` count grows with devices
   * that are not each above maxFencesPerDevice.
   */
  fenceEntriesPerDevice: number;
  /** GeoJSON FeatureCollection of fences (null: start with none, or with `fences` given to createRouter). */
  fencesFile: string | null;
  /** A ping within this distance of a compliance fence's bounding box travels in the COMPLIANCE lane, m, [0, 100000]. */
  complianceMarginM: number;
  /** Largest fence file read, bytes, [1 KiB, 2^40] (default 1 GiB). */
  maxFenceFileBytes: number;
  /** Most fences in one file or collection, [1, 10^7] (default 1,000,000). */
  maxFences: number;
  /** Most positions in one polygon ring, [4, 10^7] (default 100,000). */
  maxVerticesPerRing: number;
  /** Files of concatenated MessagePack frames to replay at start ("-": stdin). */
  inputs: string[];
  /** Downstreams triggers are delivered to. */
  downstreams: DownstreamOptions[];
  /** Dead letters. */
  deadLetter: DeadLetterConfig;
  /**
   * Directory of everything that outlives the process (device-state checkpoints, each downstream's backlog log,
   * dead-letter file and pending file), created if absent; relative paths resolve against the working directory. One
   * router at a time. null: a temporary directory removed at close (nothing survives a restart).
   */
  stateDir: string | null;
  /** Device state is checkpointed this often, ms, [100, 8.64e7]: what a crash can lose. */
  checkpointIntervalMs: number;
  /**
   * How long a drain (close, SIGTERM) keeps delivering, ms, [0, 3.6e6] (default 30000). Then nothing new is sent,
   * the calls in flight are awaited (each bounded by its sink's timeout), and what is left stays in the state
   * directory for the next start (counted as `kept`).
   */
  drainDeadlineMs: number;
  /** The ingest edge. */
  ingest: IngestConfig;
}

/** A partial RouterOptions (nested objects partial too), as a config file or flags give it. */
export type RouterOptionsInput = Partial<Omit<RouterOptions, 'admission' | 'deadLetter' | 'ingest'>> & {
  admission?: Partial<AdmissionConfig>;
  deadLetter?: Partial<DeadLetterConfig>;
  ingest?: Partial<IngestConfig>;
};

/** Default state directory (relative to the working directory). */
const DEFAULT_STATE_DIR = 'geofence-router-state';

/** Default pool size: every core but one (the ingest thread's), at least one. */
export const DEFAULT_POOL_SIZE = Math.max(1, availableParallelism() - 1);

/** The defaults. */
export const ROUTER_DEFAULTS: Readonly<RouterOptions> = Object.freeze({
  listenHost: '127.0.0.1',
  listenPort: 7070,
  adminHost: '127.0.0.1',
  adminPort: 9464,
  adminToken: null,
  allowUnauthenticated: false,
  shards: 8,
  ringCapacitySlots: 16384,
  admission: Object.freeze({
    reservedFraction: 0.05,
    watermarkFraction: 0.6,
    idleBucketCapacity: 1000,
    idleBucketRatePerSec: 10_000,
    queueDelayTargetMs: 5,
    queueDelayIntervalMs: 100,
  }),
  poolSize: DEFAULT_POOL_SIZE,
  batchSize: 512,
  containmentStallMs: 10_000,
  maxDevices: 100_000,
  deviceIdleTimeoutMs: 86_400_000,
  deviceExpiry: 'exit',
  crossMaxSpeedMps: 250,
  crossMaxGapMs: 3_600_000,
  crossMaxPerDevicePerSec: 100,
  idBytesPerSlot: 64,
  maxFencesPerDevice: 64,
  fenceEntriesPerDevice: 32,
  fencesFile: null,
  complianceMarginM: 100,
  maxFenceFileBytes: 2 ** 30,
  maxFences: 1_000_000,
  maxVerticesPerRing: 100_000,
  inputs: [],
  downstreams: [],
  deadLetter: Object.freeze({
    capacityRecords: 4096,
    maxBytesPerDownstream: 256 * 1024 * 1024,
    maxAgeMs: 7 * 24 * 3600 * 1000,
  }),
  stateDir: DEFAULT_STATE_DIR,
  checkpointIntervalMs: 5000,
  drainDeadlineMs: 30_000,
  ingest: Object.freeze({
    maxFrameBytes: 1024,
    readChunkBytes: 65536,
    sharedStructures: false,
    maxConnections: 10_000,
    idleTimeoutMs: 300_000,
    tls: null,
    authToken: null,
    frameDeadlineMs: 10_000,
    maxHeldBytes: 64 * 1024 * 1024,
    stationarySpeedMps: 0.5,
    stationaryRadiusM: 10,
    rejectLogIntervalMs: 10_000,
    overload: 'shed',
    inputHighWaterBytes: 1 << 20,
    inputHighWaterPoints: 8192,
    maxPingsPerSecPerConnection: 0,
    maxNewDevicesPerSecPerConnection: 0,
    maxPingsPerSecPerAddress: 0,
    maxNewDevicesPerSecPerAddress: 0,
  }),
}) as RouterOptions;

/** Merges `input` over the defaults and validates; throws a RangeError naming the first bad option. */
export function resolveRouterOptions(input: RouterOptionsInput = {}): RouterOptions {
  if (input === null || typeof input !== 'object' || Array.isArray(input))
    throw new RangeError('options must be an object');
  checkKeys(input, ROUTER_DEFAULTS, 'options');
  const nested = (key: 'admission' | 'deadLetter' | 'ingest'): object => {
    const v: unknown = input[key];
    if (v === undefined) return {};
    if (v === null || typeof v !== 'object' || Array.isArray(v))
      throw new RangeError(`options.${key} must be an object`);
    if (key === 'deadLetter' && 'dir' in v) {
      throw new RangeError(
        'options.deadLetter.dir is not an option: dead letters live in options.stateDir (<stateDir>/downstreams/<name>/)',
      );
    }
    checkKeys(v, ROUTER_DEFAULTS[key], `options.${key}`);
    return v;
  };
  const o = {
    ...ROUTER_DEFAULTS,
    ...input,
    admission: { ...ROUTER_DEFAULTS.admission, ...nested('admission') },
    deadLetter: { ...ROUTER_DEFAULTS.deadLetter, ...nested('deadLetter') },
    ingest: { ...ROUTER_DEFAULTS.ingest, ...nested('ingest') },
    downstreams: input.downstreams ?? [],
    inputs: input.inputs ?? [],
  } as RouterOptions;
  const tls: unknown = o.ingest.tls;
  if (tls !== null && typeof tls === 'object' && !Array.isArray(tls)) {
    checkKeys(tls, { certFile: 0, keyFile: 0, caFile: 0, requireClientCert: 0 }, 'options.ingest.tls');
    o.ingest.tls = { caFile: null, requireClientCert: true, ...(tls as Partial<IngestTlsConfig>) } as IngestTlsConfig;
  }
  validateRouterOptions(o);
  return o;
}

function checkKeys(value: object, reference: object, path: string): void {
  for (const k of Object.keys(value)) {
    if (!Object.prototype.hasOwnProperty.call(reference, k)) throw new RangeError(`${path}.${k} is not an option`);
  }
}

function int(v: unknown, name: string, lo: number, hi: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new RangeError(`${name} must be an integer in [${lo}, ${hi}], got ${show(v)}`);
  }
}

function num(v: unknown, name: string, lo: number, hi: number, range: string): void {
  if (typeof v !== 'number' || !(v >= lo && v <= hi))
    throw new RangeError(`${name} must be a number in ${range}, got ${show(v)}`);
}

function powerOfTwo(v: unknown, name: string, lo: number, hi: number): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi || (v & (v - 1)) !== 0) {
    throw new RangeError(`${name} must be a power of two in [${lo}, ${hi}], got ${show(v)}`);
  }
}

function hostOrNull(v: unknown, name: string): void {
  if (v !== null && (typeof v !== 'string' || v.length === 0))
    throw new RangeError(`${name} must be a host name or address, or null, got ${show(v)}`);
}

function pathOrNull(v: unknown, name: string): void {
  if (v !== null && (typeof v !== 'string' || v.length === 0))
    throw new RangeError(`${name} must be a file path or null, got ${show(v)}`);
}

function show(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

function stringList(v: unknown, name: string, allowed?: readonly string[]): void {
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string' || s.length === 0)) {
    throw new RangeError(`${name} must be an array of non-empty strings, got ${show(v)}`);
  }
  if (allowed !== undefined) {
    for (const s of v as string[]) {
      if (!allowed.includes(s)) throw new RangeError(`${name} must hold only ${allowed.join(' / ')}, got ${show(s)}`);
    }
  }
}

/** Validates complete options; throws a RangeError naming the option and its allowed range. */
export function validateRouterOptions(o: RouterOptions): void {
  hostOrNull(o.listenHost, 'options.listenHost');
  int(o.listenPort, 'options.listenPort', 0, 65535);
  hostOrNull(o.adminHost, 'options.adminHost');
  int(o.adminPort, 'options.adminPort', 0, 65535);
  validateExposure(o);
  int(o.shards, 'options.shards', 1, 1024);
  powerOfTwo(o.ringCapacitySlots, 'options.ringCapacitySlots', 64, 1 << 24);
  num(o.admission.reservedFraction, 'options.admission.reservedFraction', 0, 0.5, '[0, 0.5]');
  num(
    o.admission.watermarkFraction,
    'options.admission.watermarkFraction',
    Number.MIN_VALUE,
    1 - Number.EPSILON,
    '(0, 1)',
  );
  num(o.admission.idleBucketCapacity, 'options.admission.idleBucketCapacity', 1, 1e9, '[1, 1e9]');
  num(o.admission.idleBucketRatePerSec, 'options.admission.idleBucketRatePerSec', 0, 1e9, '[0, 1e9]');
  num(o.admission.queueDelayTargetMs, 'options.admission.queueDelayTargetMs', 0, 60_000, '[0, 60000]');
  num(o.admission.queueDelayIntervalMs, 'options.admission.queueDelayIntervalMs', 0, 60_000, '[0, 60000]');
  if (o.admission.watermarkFraction + o.admission.reservedFraction > 1) {
    throw new RangeError(
      `options.admission.watermarkFraction + options.admission.reservedFraction must be <= 1, got ${o.admission.watermarkFraction} + ${o.admission.reservedFraction}`,
    );
  }
  int(o.poolSize, 'options.poolSize', 1, 256);
  int(o.batchSize, 'options.batchSize', 1, 65536);
  int(o.containmentStallMs, 'options.containmentStallMs', 100, 3_600_000);
  int(o.maxDevices, 'options.maxDevices', 1, 1 << 24);
  if (o.deviceIdleTimeoutMs !== 0)
    int(o.deviceIdleTimeoutMs, 'options.deviceIdleTimeoutMs (0 or a value in range)', 100, 31_536_000_000);
  if (o.crossMaxSpeedMps !== 0)
    num(o.crossMaxSpeedMps, 'options.crossMaxSpeedMps (0 or a value in range)', 1, 1e6, '[1, 1e6]');
  if (o.crossMaxGapMs !== 0) int(o.crossMaxGapMs, 'options.crossMaxGapMs (0 or a value in range)', 1000, 86_400_000);
  if (o.crossMaxPerDevicePerSec !== 0)
    int(o.crossMaxPerDevicePerSec, 'options.crossMaxPerDevicePerSec (0 or a value in range)', 1, 1_000_000);
  if (!(DEVICE_EXPIRY_MODES as readonly unknown[]).includes(o.deviceExpiry)) {
    throw new RangeError(
      `options.deviceExpiry must be one of ${DEVICE_EXPIRY_MODES.map((m) => JSON.stringify(m)).join(', ')}, got ${show(o.deviceExpiry)}`,
    );
  }
  int(o.idBytesPerSlot, 'options.idBytesPerSlot', 1, 1024);
  int(o.maxFencesPerDevice, 'options.maxFencesPerDevice', 1, 256);
  int(o.fenceEntriesPerDevice, 'options.fenceEntriesPerDevice', 1, 256);
  pathOrNull(o.fencesFile, 'options.fencesFile');
  num(o.complianceMarginM, 'options.complianceMarginM', 0, 100_000, '[0, 100000]');
  int(o.maxFenceFileBytes, 'options.maxFenceFileBytes', 1024, 2 ** 40);
  int(o.maxFences, 'options.maxFences', 1, 10_000_000);
  int(o.maxVerticesPerRing, 'options.maxVerticesPerRing', 4, 10_000_000);
  if (!Array.isArray(o.inputs))
    throw new RangeError(`options.inputs must be an array of file paths, got ${show(o.inputs)}`);
  stringList(o.inputs, 'options.inputs');
  if (!Array.isArray(o.downstreams))
    throw new RangeError(`options.downstreams must be an array, got ${show(o.downstreams)}`);
  const names = new Set<string>();
  o.downstreams.forEach((d, i) => validateDownstream(d, `options.downstreams[${i}]`, names));
  pathOrNull(o.stateDir, 'options.stateDir');
  int(o.checkpointIntervalMs, 'options.checkpointIntervalMs', 100, 86_400_000);
  int(o.drainDeadlineMs, 'options.drainDeadlineMs', 0, 3_600_000);
  int(o.deadLetter.capacityRecords, 'options.deadLetter.capacityRecords', 1, 1 << 20);
  int(o.deadLetter.maxBytesPerDownstream, 'options.deadLetter.maxBytesPerDownstream', 1 << 20, Number.MAX_SAFE_INTEGER);
  int(o.deadLetter.maxAgeMs, 'options.deadLetter.maxAgeMs', 1, Number.MAX_SAFE_INTEGER);
  const g = o.ingest;
  int(g.maxFrameBytes, 'options.ingest.maxFrameBytes', 16, 16 * 1024 * 1024);
  int(g.readChunkBytes, 'options.ingest.readChunkBytes', 256, 16 * 1024 * 1024);
  if (typeof g.sharedStructures !== 'boolean')
    throw new RangeError(`options.ingest.sharedStructures must be a boolean, got ${show(g.sharedStructures)}`);
  int(g.maxConnections, 'options.ingest.maxConnections', 1, 1_000_000);
  int(g.idleTimeoutMs, 'options.ingest.idleTimeoutMs', 0, 86_400_000);
  int(g.frameDeadlineMs, 'options.ingest.frameDeadlineMs', 0, 3_600_000);
  int(g.maxHeldBytes, 'options.ingest.maxHeldBytes', 65_536, 2 ** 40);
  num(g.stationarySpeedMps, 'options.ingest.stationarySpeedMps', 0, 100, '[0, 100]');
  num(g.stationaryRadiusM, 'options.ingest.stationaryRadiusM', 0, 10_000, '[0, 10000]');
  int(g.rejectLogIntervalMs, 'options.ingest.rejectLogIntervalMs', 0, 86_400_000);
  if (!(OVERLOAD_POLICIES as readonly unknown[]).includes(g.overload)) {
    throw new RangeError(`options.ingest.overload must be "shed" or "backpressure", got ${show(g.overload)}`);
  }
  int(g.inputHighWaterBytes, 'options.ingest.inputHighWaterBytes', 1024, 1 << 30);
  int(g.inputHighWaterPoints, 'options.ingest.inputHighWaterPoints', 1, 1 << 24);
  validateFloodLimits(g);
}

function validateDownstream(d: unknown, path: string, names: Set<string>): void {
  if (d === null || typeof d !== 'object') throw new RangeError(`${path} must be an object`);
  const x = d as Partial<DownstreamOptions> & Record<string, unknown>;
  if (typeof x.name !== 'string' || x.name.length === 0)
    throw new RangeError(`${path}.name must be a non-empty string, got ${show(x.name)}`);
  if (names.has(x.name)) throw new RangeError(`${path}.name must be unique, got ${show(x.name)} twice`);
  names.add(x.name);
  const allowedKeys = [
    'name',
    'kind',
    'subscribe',
    'limit',
    'gradient',
    'safetyCap',
    'maxBatchTriggers',
    'queueCapacitySlots',
    'maxQueueAgeMs',
    'maxAttempts',
    'replay',
    'backlogMaxBytes',
  ];
  const gradient: unknown = x['gradient'];
  if (gradient !== undefined) {
    if (gradient === null || typeof gradient !== 'object' || Array.isArray(gradient)) {
      throw new RangeError(`${path}.gradient must be an object of gradient limit options, got ${show(gradient)}`);
    }
    if (x['limit'] !== undefined && x['limit'] !== 'gradient') {
      throw new RangeError(
        `${path}.gradient applies only with limit 'gradient' (or no limit), got limit ${show(x['limit'])}`,
      );
    }
    for (const k of Object.keys(gradient)) {
      if (!(k in GRADIENT_LIMIT_DEFAULTS)) {
        throw new RangeError(
          `${path}.gradient.${k} is not a gradient limit option (one of ${Object.keys(GRADIENT_LIMIT_DEFAULTS).join(', ')})`,
        );
      }
    }
    try {
      // The limit validates each option's value with a message naming it.
      new GradientLimit(gradient as Partial<GradientLimitOptions>);
    } catch (err) {
      throw new RangeError(`${path}.gradient: ${(err as Error).message}`, { cause: err });
    }
  }
  const lim: unknown = x['limit'];
  if (lim !== undefined && !(typeof lim === 'string' && (LIMIT_NAMES as readonly string[]).includes(lim))) {
    int(lim, `${path}.limit (a fixed limit; or one of ${LIMIT_NAMES.join(' / ')})`, 1, 4096);
  }
  const optInt = (k: string, lo: number, hi: number): void => {
    if (x[k] !== undefined) int(x[k], `${path}.${k}`, lo, hi);
  };
  optInt('safetyCap', 1, 4096);
  optInt('maxBatchTriggers', 1, 4096);
  optInt('queueCapacitySlots', 1, 1 << 22);
  optInt('maxQueueAgeMs', 1, 86_400_000);
  optInt('maxAttempts', 1, 100);
  optInt('backlogMaxBytes', 1 << 20, Number.MAX_SAFE_INTEGER);
  if (x['replay'] !== undefined && typeof x['replay'] !== 'boolean')
    throw new RangeError(`${path}.replay must be a boolean, got ${show(x['replay'])}`);
  if (x.kind === 'webhook') {
    allowedKeys.push('url', 'timeoutMs');
    let ok: boolean;
    try {
      const u = new URL(String(x.url));
      ok = u.protocol === 'http:';
    } catch {
      ok = false;
    }
    if (!ok) throw new RangeError(`${path}.url must be an http:// URL, got ${show(x.url)}`);
    optInt('timeoutMs', 1, 3_600_000);
  } else if (x.kind === 'ndjson') {
    allowedKeys.push('path');
    if (typeof x.path !== 'string' || x.path.length === 0)
      throw new RangeError(`${path}.path must be a file path or "-", got ${show(x.path)}`);
  } else if (x.kind === 'callback') {
    allowedKeys.push('callback');
    if (typeof x.callback !== 'function') throw new RangeError(`${path}.callback must be a function`);
  } else {
    throw new RangeError(`${path}.kind must be "webhook", "ndjson" or "callback", got ${show(x.kind)}`);
  }
  for (const k of Object.keys(x))
    if (!allowedKeys.includes(k)) throw new RangeError(`${path}.${k} is not an option of a ${x.kind} downstream`);
  if (x.subscribe !== undefined) {
    const s = x.subscribe as Record<string, unknown>;
    if (s === null || typeof s !== 'object') throw new RangeError(`${path}.subscribe must be an object`);
    for (const k of Object.keys(s))
      if (!['fenceIds', 'tags', 'types'].includes(k)) throw new RangeError(`${path}.subscribe.${k} is not an option`);
    if (s['fenceIds'] !== undefined) stringList(s['fenceIds'], `${path}.subscribe.fenceIds`);
    if (s['tags'] !== undefined) stringList(s['tags'], `${path}.subscribe.tags`);
    if (s['types'] !== undefined) stringList(s['types'], `${path}.subscribe.types`, TRIGGER_TYPE_NAMES);
  }
}

/** A token option: null, or a string of at least 16 characters. */
function tokenOrNull(v: unknown, name: string): void {
  if (v !== null && (typeof v !== 'string' || v.length < 16 || /\s/.test(v))) {
    throw new RangeError(
      `${name} must be null or a string of at least 16 characters without spaces, got ${typeof v === 'string' ? `${v.length} characters` : show(v)}`,
    );
  }
}

/**
 * Checks the ingest TLS and tokens, and refuses a telemetry listener on a non-loopback address with neither TLS nor a
 * token, or an admin server there without a token, unless `allowUnauthenticated` says so.
 */
function validateExposure(o: RouterOptions): void {
  tokenOrNull(o.adminToken, 'options.adminToken');
  tokenOrNull(o.ingest.authToken, 'options.ingest.authToken');
  if (typeof o.allowUnauthenticated !== 'boolean')
    throw new RangeError(`options.allowUnauthenticated must be a boolean, got ${show(o.allowUnauthenticated)}`);
  const tls = o.ingest.tls;
  if (tls !== null) {
    if (typeof tls !== 'object')
      throw new RangeError(
        `options.ingest.tls must be null or { certFile, keyFile, caFile, requireClientCert }, got ${show(tls)}`,
      );
    for (const k of ['certFile', 'keyFile'] as const) {
      if (typeof tls[k] !== 'string' || tls[k].length === 0)
        throw new RangeError(`options.ingest.tls.${k} must be a file path, got ${show(tls[k])}`);
    }
    if (tls.caFile !== null && (typeof tls.caFile !== 'string' || tls.caFile.length === 0)) {
      throw new RangeError(`options.ingest.tls.caFile must be null or a file path, got ${show(tls.caFile)}`);
    }
    if (typeof tls.requireClientCert !== 'boolean')
      throw new RangeError(
        `options.ingest.tls.requireClientCert must be a boolean, got ${show(tls.requireClientCert)}`,
      );
  }
  if (o.allowUnauthenticated) return;
  if (o.listenHost !== null && !isLoopbackHost(o.listenHost) && tls === null && o.ingest.authToken === null) {
    throw new RangeError(
      `options.listenHost ${o.listenHost} is not a loopback address and the telemetry listener has neither TLS (options.ingest.tls, --tls-cert/--tls-key) nor a token (options.ingest.authToken, --ingest-token-file): anyone who reaches it could inject pings; set one, or options.allowUnauthenticated (--allow-unauthenticated) to accept that`,
    );
  }
  if (o.adminHost !== null && !isLoopbackHost(o.adminHost) && o.adminToken === null) {
    throw new RangeError(
      `options.adminHost ${o.adminHost} is not a loopback address and the admin server has no token (options.adminToken, --admin-token-file): anyone who reaches it could reload the fences; set one, or options.allowUnauthenticated (--allow-unauthenticated) to accept that`,
    );
  }
}
