/**
 * Command-line flags (main thread): node:util parseArgs, a --help text, and the merge rule: defaults, then the
 * config file (--config), then flags. Downstreams given by flags replace the file's list.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { loadConfigFile } from './config-file.js';
import {
  DEVICE_EXPIRY_MODES,
  OVERLOAD_POLICIES,
  resolveRouterOptions,
  type DeviceExpiryMode,
  type OverloadPolicy,
  type RouterOptions,
  type RouterOptionsInput,
  type DownstreamOptions,
} from './options.js';

/** The demo's settings given by flags (absent: the demo's defaults). */
export interface DemoFlags {
  /** --demo-seconds: stop by itself after this many seconds, (0, 86400]. */
  seconds?: number;
  /** --demo-devices: simulated devices, [1, 1000000]. */
  devices?: number;
  /** --demo-fences: synthetic-city fences, [1, 100000]. */
  fences?: number;
  /** --demo-seed: seed of the city and the fleet, an integer in [0, 2^32). */
  seed?: number;
}

/** What the command line asked for. */
export interface CliRequest {
  /** --help was given. */
  help: boolean;
  /** --demo was given. */
  demo: boolean;
  /** The demo's settings (empty unless demo flags were given; they need --demo). */
  demoFlags: DemoFlags;
  /** --config path, if given. */
  configPath: string | null;
  /** Options given by flags. */
  overrides: RouterOptionsInput;
}

/** The --help text. */
export const HELP_TEXT = `Usage: geofence-router [--config FILE] [flags]

Routes MessagePack GPS telemetry through geofences to ENTER / EXIT / DWELL / CROSS triggers.
Options come from the defaults, then the JSON config file, then these flags.

General:
  -c, --config FILE            JSON config file (same option names as the library)
      --demo                   run the built-in demo (synthetic city, fleet and downstream)
  -h, --help                   show this text

Demo (with --demo):
      --demo-seconds S         stop by itself after S seconds (drain and summary as on Ctrl-C)
      --demo-devices N         simulated devices (default 20000)
      --demo-fences N          synthetic-city fences (default 3000)
      --demo-seed N            seed of the city and the fleet (default 7)

Signals: SIGHUP reloads the fences file; SIGINT / SIGTERM drain, print a summary and exit. With
--no-listen and --input, the run drains by itself once every input has been read.

Exit codes (the summary lists everything not delivered, by lane and reason):
  0  drained cleanly: nothing shed or rejected, every fence entry tracked, every admitted ping
     processed and every trigger delivered
  3  drained, but something was not delivered by design: pings shed (by lane and reason) or
     rejected (by reason), fence entries not tracked (fence_overflows), triggers dead-lettered,
     or triggers kept in the state directory for the next start
  1  failure: the start failed, or the drain could not account for every admitted ping
  2  bad flags, config file or options

Overload: files and stdin (--input) are read only as fast as the telemetry rings take them: they
are paused, never shed. The TCP listener sheds by lane when a ring is full (a live stream cannot
wait), or pauses the connection with --overload backpressure. A shed COMPLIANCE ping is logged as
an error (at most one line a second, with the count).

Telemetry and admin:
      --listen HOST:PORT       telemetry TCP listener (default 127.0.0.1:7070); an address other hosts can
                               reach needs --tls-cert/--tls-key or --ingest-token-file (or --allow-unauthenticated)
      --no-listen              no TCP listener (in-process sources only)
      --tls-cert FILE          the listener speaks TLS with this certificate chain (PEM) ...
      --tls-key FILE           ... and this private key (PEM)
      --tls-ca FILE            client certificates must chain to this CA bundle (PEM)
      --tls-client-cert-optional  with --tls-ca, ask for a client certificate without requiring one
      --ingest-token-file FILE each connection must open with the line "AUTH <token>" carrying the token in FILE
                               (or GEOFENCE_INGEST_TOKEN); at least 16 characters
      --admin HOST:PORT        admin HTTP server: /metrics /healthz /readyz (default 127.0.0.1:9464)
      --no-admin               no admin server
      --admin-token-file FILE  POST /admin/... needs "Authorization: Bearer <token>" with the token in FILE (or
                               GEOFENCE_ADMIN_TOKEN); needed for a non-loopback --admin
      --allow-unauthenticated  bind non-loopback addresses without TLS or tokens (logged as a warning)
      --max-frame-bytes N      largest telemetry frame, bytes (default 1024)
      --shared-structures      accept msgpackr shared-structure records (all senders must use them)
      --max-connections N      simultaneous TCP connections (default 10000)
      --frame-deadline-ms N    close a connection that begins a frame and does not finish it within N ms
                               (default 10000; 0: never)
      --max-held-bytes N       bytes all connections may hold for partial frames; past it the oldest partial
                               frames' connections are closed (default 67108864)
      --max-pings-per-sec-per-connection N      flood limits of the TCP listener (default 0: none);
      --max-new-devices-per-sec-per-connection N  what exceeds one is rejected and counted
      --max-pings-per-sec-per-address N         (connection_rate, new_device_rate); every connection
      --max-new-devices-per-sec-per-address N   from one address shares the address's budget
      --overload MODE          when a ring is full, the TCP listener sheds by lane ("shed", default)
                               or pauses the connection ("backpressure")

Pipeline:
      --shards N               telemetry shards (default 8)
      --ring-capacity N        slots per telemetry ring, power of two (default 16384)
      --pool-size N            containment worker threads (default: cores - 1)
      --batch-size N           pings per containment batch at most (default 512)
      --containment-stall-ms N abort a containment task that makes no progress for N ms (default 10000)
      --max-devices N          device slots (default 100000)
      --device-idle-timeout-ms N  a device without a ping for N ms is expired and its slot reused
                               (default 86400000: a day; 0: never)
      --device-expiry MODE     an expired device inside fences gets an EXIT per fence marked
                               "reason":"expired" ("exit", default) or nothing ("silent")
      --cross-max-speed-mps N  no CROSS for a move faster than N m/s between two pings (default 250;
                               0 turns the plausibility rule off)
      --cross-max-gap-ms N     no CROSS across a gap between pings longer than N ms (default 3600000; 0: off)
      --cross-max-per-device-per-sec N  CROSS triggers per device per second at most, the rest counted
                               and not written (default 100; 0: no limit)
      --max-fences-per-device N  fences a device can be inside at once (default 64)
      --fence-entries-per-device N  fence entries provisioned per device on average, 24 bytes each (default 32)

Admission:
      --reserved-fraction F    ring share reserved for the COMPLIANCE lane, [0, 0.5] (default 0.05)
      --watermark-fraction F   fill at and above which IDLE pings need a token (default 0.6)
      --idle-bucket-capacity N IDLE token bucket capacity (default 1000)
      --idle-bucket-rate N     IDLE tokens per second (default 10000)
      --queue-delay-target-ms N  shed IDLE and TRANSITION pings of live sources while a ring's oldest record
                               has waited longer than N ms (default 5; 0: off)
      --queue-delay-interval-ms N  for this long before shedding starts (default 100)

Fences and downstreams:
      --fences FILE            GeoJSON FeatureCollection of fences
      --webhook URL            deliver triggers to an HTTP webhook (repeatable)
      --ndjson PATH            append triggers to an NDJSON file, "-" for stdout (repeatable)
      --compliance-margin-m M  pings this close to a compliance fence's box travel as COMPLIANCE (default 100)
      --max-fence-file-bytes N largest fence file read (default 1073741824); a larger one is refused
      --max-fences N           most fences in a file (default 1000000)
      --max-vertices-per-ring N  most positions in one polygon ring (default 100000)
      --input FILE             replay a file of MessagePack frames, "-" for stdin (repeatable)
      --dead-letter-capacity N dead-letter ring records before a flush (default 4096)
      --dead-letter-max-bytes N  dead letters kept on disk per downstream, bytes (default 268435456);
                               the oldest past it are dropped, counted (over_budget) and logged
      --dead-letter-max-age-ms N dead letters older than this are dropped, counted (too_old) and
                               logged (default 604800000: 7 days)

Durable state:
      --state-dir DIR          checkpoints, backlog logs and dead letters; one router at a time
                               (default ./geofence-router-state)
      --checkpoint-interval-ms N  device state checkpoint period, what a crash can lose (default 5000)
      --drain-deadline-ms N    how long SIGTERM / SIGINT keep delivering before what is left is kept in the
                               state directory for the next start (default 30000)
`;

const FLAGS = {
  config: { type: 'string', short: 'c' },
  demo: { type: 'boolean' },
  'demo-seconds': { type: 'string' },
  'demo-devices': { type: 'string' },
  'demo-fences': { type: 'string' },
  'demo-seed': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  listen: { type: 'string' },
  'no-listen': { type: 'boolean' },
  admin: { type: 'string' },
  'no-admin': { type: 'boolean' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-client-cert-optional': { type: 'boolean' },
  'ingest-token-file': { type: 'string' },
  'admin-token-file': { type: 'string' },
  'allow-unauthenticated': { type: 'boolean' },
  'max-frame-bytes': { type: 'string' },
  'shared-structures': { type: 'boolean' },
  'max-connections': { type: 'string' },
  'frame-deadline-ms': { type: 'string' },
  'max-held-bytes': { type: 'string' },
  'max-pings-per-sec-per-connection': { type: 'string' },
  'max-new-devices-per-sec-per-connection': { type: 'string' },
  'max-pings-per-sec-per-address': { type: 'string' },
  'max-new-devices-per-sec-per-address': { type: 'string' },
  overload: { type: 'string' },
  shards: { type: 'string' },
  'ring-capacity': { type: 'string' },
  'pool-size': { type: 'string' },
  'batch-size': { type: 'string' },
  'containment-stall-ms': { type: 'string' },
  'max-devices': { type: 'string' },
  'device-idle-timeout-ms': { type: 'string' },
  'device-expiry': { type: 'string' },
  'cross-max-speed-mps': { type: 'string' },
  'cross-max-gap-ms': { type: 'string' },
  'cross-max-per-device-per-sec': { type: 'string' },
  'max-fences-per-device': { type: 'string' },
  'fence-entries-per-device': { type: 'string' },
  'reserved-fraction': { type: 'string' },
  'watermark-fraction': { type: 'string' },
  'idle-bucket-capacity': { type: 'string' },
  'idle-bucket-rate': { type: 'string' },
  'queue-delay-target-ms': { type: 'string' },
  'queue-delay-interval-ms': { type: 'string' },
  fences: { type: 'string' },
  webhook: { type: 'string', multiple: true },
  ndjson: { type: 'string', multiple: true },
  'compliance-margin-m': { type: 'string' },
  'max-fence-file-bytes': { type: 'string' },
  'max-fences': { type: 'string' },
  'max-vertices-per-ring': { type: 'string' },
  input: { type: 'string', multiple: true },
  'dead-letter-dir': { type: 'string' },
  'dead-letter-capacity': { type: 'string' },
  'dead-letter-max-bytes': { type: 'string' },
  'dead-letter-max-age-ms': { type: 'string' },
  'state-dir': { type: 'string' },
  'checkpoint-interval-ms': { type: 'string' },
  'drain-deadline-ms': { type: 'string' },
} as const;

/** A token from a file named by `--flag` (trailing newline removed), else from the environment variable `env`. */
function tokenFrom(flag: string, path: string | undefined, env: string): string | undefined {
  if (path !== undefined) {
    try {
      return readFileSync(path, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new RangeError(
        `--${flag}: cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        { cause: err },
      );
    }
  }
  const fromEnv = process.env[env];
  return fromEnv === undefined || fromEnv === '' ? undefined : fromEnv;
}

function number(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const v = Number(text);
  if (text.trim() === '' || !Number.isFinite(v))
    throw new RangeError(`--${flag} must be a number, got ${JSON.stringify(text)}`);
  return v;
}

function hostPort(flag: string, text: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const host = i > 0 ? text.slice(0, i).replace(/^\[(.*)\]$/, '$1') : '';
  const port = Number(text.slice(i + 1));
  if (i <= 0 || host === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RangeError(`--${flag} must be HOST:PORT with PORT in [0, 65535], got ${JSON.stringify(text)}`);
  }
  return { host, port };
}

/** Parses argv (without node and script); throws a RangeError naming the flag on bad input. */
export function parseCliArgs(argv: readonly string[]): CliRequest {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false });
  } catch (err) {
    throw new RangeError(`${(err as Error).message} (see --help)`, { cause: err });
  }
  const v = parsed.values;
  const o: RouterOptionsInput = {};
  const set = <K extends keyof RouterOptionsInput>(k: K, x: RouterOptionsInput[K] | undefined): void => {
    if (x !== undefined) o[k] = x;
  };
  if (v.listen !== undefined) {
    const hp = hostPort('listen', v.listen);
    o.listenHost = hp.host;
    o.listenPort = hp.port;
  }
  if (v['no-listen'] === true) o.listenHost = null;
  if (v.admin !== undefined) {
    const hp = hostPort('admin', v.admin);
    o.adminHost = hp.host;
    o.adminPort = hp.port;
  }
  if (v['no-admin'] === true) o.adminHost = null;
  const adminToken = tokenFrom('admin-token-file', v['admin-token-file'], 'GEOFENCE_ADMIN_TOKEN');
  if (adminToken !== undefined) o.adminToken = adminToken;
  if (v['allow-unauthenticated'] === true) o.allowUnauthenticated = true;
  set('shards', number('shards', v.shards));
  set('ringCapacitySlots', number('ring-capacity', v['ring-capacity']));
  set('poolSize', number('pool-size', v['pool-size']));
  set('batchSize', number('batch-size', v['batch-size']));
  set('containmentStallMs', number('containment-stall-ms', v['containment-stall-ms']));
  set('maxDevices', number('max-devices', v['max-devices']));
  set('deviceIdleTimeoutMs', number('device-idle-timeout-ms', v['device-idle-timeout-ms']));
  set('crossMaxSpeedMps', number('cross-max-speed-mps', v['cross-max-speed-mps']));
  set('crossMaxGapMs', number('cross-max-gap-ms', v['cross-max-gap-ms']));
  set('crossMaxPerDevicePerSec', number('cross-max-per-device-per-sec', v['cross-max-per-device-per-sec']));
  if (v['device-expiry'] !== undefined) {
    if (!(DEVICE_EXPIRY_MODES as readonly string[]).includes(v['device-expiry'])) {
      throw new RangeError(`--device-expiry must be "exit" or "silent", got ${JSON.stringify(v['device-expiry'])}`);
    }
    o.deviceExpiry = v['device-expiry'] as DeviceExpiryMode;
  }
  set('maxFencesPerDevice', number('max-fences-per-device', v['max-fences-per-device']));
  set('fenceEntriesPerDevice', number('fence-entries-per-device', v['fence-entries-per-device']));
  set('fencesFile', v.fences);
  set('complianceMarginM', number('compliance-margin-m', v['compliance-margin-m']));
  set('maxFenceFileBytes', number('max-fence-file-bytes', v['max-fence-file-bytes']));
  set('maxFences', number('max-fences', v['max-fences']));
  set('maxVerticesPerRing', number('max-vertices-per-ring', v['max-vertices-per-ring']));
  if (v.input !== undefined) o.inputs = v.input;
  const admission: NonNullable<RouterOptionsInput['admission']> = {};
  const a = (k: keyof typeof admission, x: number | undefined): void => {
    if (x !== undefined) admission[k] = x;
  };
  a('reservedFraction', number('reserved-fraction', v['reserved-fraction']));
  a('watermarkFraction', number('watermark-fraction', v['watermark-fraction']));
  a('idleBucketCapacity', number('idle-bucket-capacity', v['idle-bucket-capacity']));
  a('idleBucketRatePerSec', number('idle-bucket-rate', v['idle-bucket-rate']));
  a('queueDelayTargetMs', number('queue-delay-target-ms', v['queue-delay-target-ms']));
  a('queueDelayIntervalMs', number('queue-delay-interval-ms', v['queue-delay-interval-ms']));
  if (Object.keys(admission).length > 0) o.admission = admission;
  const ingest: NonNullable<RouterOptionsInput['ingest']> = {};
  const mfb = number('max-frame-bytes', v['max-frame-bytes']);
  if (mfb !== undefined) ingest.maxFrameBytes = mfb;
  const mc = number('max-connections', v['max-connections']);
  if (mc !== undefined) ingest.maxConnections = mc;
  const fd = number('frame-deadline-ms', v['frame-deadline-ms']);
  if (fd !== undefined) ingest.frameDeadlineMs = fd;
  const mh = number('max-held-bytes', v['max-held-bytes']);
  if (mh !== undefined) ingest.maxHeldBytes = mh;
  if (v['shared-structures'] === true) ingest.sharedStructures = true;
  const ingestToken = tokenFrom('ingest-token-file', v['ingest-token-file'], 'GEOFENCE_INGEST_TOKEN');
  if (ingestToken !== undefined) ingest.authToken = ingestToken;
  if (v['tls-cert'] !== undefined || v['tls-key'] !== undefined) {
    if (v['tls-cert'] === undefined || v['tls-key'] === undefined)
      throw new RangeError('--tls-cert and --tls-key go together');
    ingest.tls = {
      certFile: v['tls-cert'],
      keyFile: v['tls-key'],
      caFile: v['tls-ca'] ?? null,
      requireClientCert: v['tls-client-cert-optional'] !== true,
    };
  } else if (v['tls-ca'] !== undefined) {
    throw new RangeError('--tls-ca needs --tls-cert and --tls-key');
  }
  const flood = [
    ['maxPingsPerSecPerConnection', 'max-pings-per-sec-per-connection'],
    ['maxNewDevicesPerSecPerConnection', 'max-new-devices-per-sec-per-connection'],
    ['maxPingsPerSecPerAddress', 'max-pings-per-sec-per-address'],
    ['maxNewDevicesPerSecPerAddress', 'max-new-devices-per-sec-per-address'],
  ] as const;
  for (const [key, flag] of flood) {
    const x = number(flag, v[flag]);
    if (x !== undefined) ingest[key] = x;
  }
  if (v.overload !== undefined) {
    if (!(OVERLOAD_POLICIES as readonly string[]).includes(v.overload)) {
      throw new RangeError(`--overload must be "shed" or "backpressure", got ${JSON.stringify(v.overload)}`);
    }
    ingest.overload = v.overload as OverloadPolicy;
  }
  if (Object.keys(ingest).length > 0) o.ingest = ingest;
  const deadLetter: NonNullable<RouterOptionsInput['deadLetter']> = {};
  if (v['dead-letter-dir'] !== undefined) {
    throw new RangeError(
      '--dead-letter-dir is replaced by --state-dir (dead letters live in <state-dir>/downstreams/<name>/)',
    );
  }
  set('stateDir', v['state-dir']);
  set('checkpointIntervalMs', number('checkpoint-interval-ms', v['checkpoint-interval-ms']));
  set('drainDeadlineMs', number('drain-deadline-ms', v['drain-deadline-ms']));
  const dlc = number('dead-letter-capacity', v['dead-letter-capacity']);
  if (dlc !== undefined) deadLetter.capacityRecords = dlc;
  const dlb = number('dead-letter-max-bytes', v['dead-letter-max-bytes']);
  if (dlb !== undefined) deadLetter.maxBytesPerDownstream = dlb;
  const dla = number('dead-letter-max-age-ms', v['dead-letter-max-age-ms']);
  if (dla !== undefined) deadLetter.maxAgeMs = dla;
  if (Object.keys(deadLetter).length > 0) o.deadLetter = deadLetter;
  const downstreams: DownstreamOptions[] = [];
  (v.webhook ?? []).forEach((url, i) => downstreams.push({ name: `webhook-${i + 1}`, kind: 'webhook', url }));
  (v.ndjson ?? []).forEach((path, i) => downstreams.push({ name: `ndjson-${i + 1}`, kind: 'ndjson', path }));
  if (downstreams.length > 0) o.downstreams = downstreams;
  const demoFlags = parseDemoFlags(v);
  if (v.demo !== true && v.help !== true) {
    const given = Object.keys(demoFlags)[0];
    if (given !== undefined) throw new RangeError(`--demo-${given} needs --demo (see --help)`);
  }
  return { help: v.help === true, demo: v.demo === true, demoFlags, configPath: v.config ?? null, overrides: o };
}

function integerIn(flag: string, text: string | undefined, lo: number, hi: number): number | undefined {
  const x = number(flag, text);
  if (x !== undefined && !(Number.isInteger(x) && x >= lo && x <= hi)) {
    throw new RangeError(`--${flag} must be an integer in [${lo}, ${hi}], got ${JSON.stringify(text)}`);
  }
  return x;
}

function parseDemoFlags(
  v: Partial<Record<'demo-seconds' | 'demo-devices' | 'demo-fences' | 'demo-seed', string>>,
): DemoFlags {
  const d: DemoFlags = {};
  const seconds = number('demo-seconds', v['demo-seconds']);
  if (seconds !== undefined) {
    if (!(seconds > 0 && seconds <= 86_400))
      throw new RangeError(`--demo-seconds must be a number in (0, 86400], got ${JSON.stringify(v['demo-seconds'])}`);
    d.seconds = seconds;
  }
  const devices = integerIn('demo-devices', v['demo-devices'], 1, 1_000_000);
  if (devices !== undefined) d.devices = devices;
  const fences = integerIn('demo-fences', v['demo-fences'], 1, 100_000);
  if (fences !== undefined) d.fences = fences;
  const seed = integerIn('demo-seed', v['demo-seed'], 0, 2 ** 32 - 1);
  if (seed !== undefined) d.seed = seed;
  return d;
}

/** Merges defaults, the config file (if any) and flag overrides (nested objects merged key by key), and validates. */
export function mergeOptionInputs(file: RouterOptionsInput, flags: RouterOptionsInput): RouterOptionsInput {
  const merged: RouterOptionsInput = { ...file, ...flags };
  if (file.admission !== undefined || flags.admission !== undefined)
    merged.admission = { ...file.admission, ...flags.admission };
  if (file.ingest !== undefined || flags.ingest !== undefined) merged.ingest = { ...file.ingest, ...flags.ingest };
  if (file.deadLetter !== undefined || flags.deadLetter !== undefined)
    merged.deadLetter = { ...file.deadLetter, ...flags.deadLetter };
  return merged;
}

/** Resolves the router options a command line asks for (reads the config file when --config is given). */
export function optionsFromCli(request: CliRequest): RouterOptions {
  const file = request.configPath !== null ? loadConfigFile(request.configPath) : {};
  return resolveRouterOptions(mergeOptionInputs(file, request.overrides));
}
