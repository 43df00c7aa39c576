/**
 * Command-line flags (main thread): node:util parseArgs, a --help text, and the merge rule: defaults, then the
 * config file (--config), then flags. Downstreams given by flags replace the file's list.
 */
import { LOG_FORMATS, type LogFormat } from '../log/cli-logger.js';
import { LOG_LEVELS, type LogLevel } from '../log/router-log.js';
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { loadConfigFile } from './config-file.js';
import {
  checkInput,
  libraryNamer,
  mergeInputs,
  OptionError,
  pathText,
  type Namer,
  type OptionPath,
} from '../option-schema/option-check.js';
import { declaredOptions, flagHelp, helpLine } from '../option-schema/option-docs.js';
import type { Declared } from '../option-schema/option-spec.js';
import { resolveRouterOptions, type RouterOptions, type RouterOptionsInput } from './options.js';
import { ROUTER_SPEC } from './router-option-spec.js';

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
  /** --version was given. */
  version: boolean;
  /** --demo was given. */
  demo: boolean;
  /** The demo's settings (empty unless demo flags were given; they need --demo). */
  demoFlags: DemoFlags;
  /** --print-config-schema was given. */
  printConfigSchema: boolean;
  /** --config path, if given. */
  configPath: string | null;
  /** --log-format (default json). */
  logFormat: LogFormat;
  /** --log-level (default info). */
  logLevel: LogLevel;
  /** Options given by flags. */
  overrides: RouterOptionsInput;
}

/** A flag of its own (not one option's): composite, a file holding a secret, or the demo's. */
interface FixedFlag {
  /** Name without dashes. */
  name: string;
  /** node:util parseArgs type. */
  type: 'string' | 'boolean';
  /** One-letter alias. */
  short?: string;
  /** Repeatable. */
  multiple?: boolean;
  /** Placeholder of its value in --help. */
  value?: string;
  /** --help section (null: not listed). */
  section: string | null;
  /** --help text. */
  help: string;
}

const FIXED_FLAGS: readonly FixedFlag[] = [
  {
    name: 'config',
    short: 'c',
    type: 'string',
    value: 'FILE',
    section: 'General',
    help: 'JSON config file (same option names as the library; see --print-config-schema)',
  },
  {
    name: 'demo',
    type: 'boolean',
    section: 'General',
    help: 'run the built-in demo (synthetic city, fleet and downstream)',
  },
  {
    name: 'print-config-schema',
    type: 'boolean',
    section: 'General',
    help: 'print the JSON Schema of the config file and exit',
  },
  { name: 'help', short: 'h', type: 'boolean', section: 'General', help: 'show this text' },
  { name: 'version', short: 'v', type: 'boolean', section: 'General', help: 'print the version and exit' },
  {
    name: 'log-format',
    type: 'string',
    value: 'json|pretty',
    section: 'General',
    help: 'log lines on stderr: one JSON object each (default), or pretty for a terminal',
  },
  {
    name: 'log-level',
    type: 'string',
    value: 'LEVEL',
    section: 'General',
    help: 'least severe level logged: error, warn, info (default) or debug',
  },
  {
    name: 'demo-seconds',
    type: 'string',
    value: 'S',
    section: 'Demo (with --demo)',
    help: 'stop by itself after S seconds (drain and summary as on Ctrl-C)',
  },
  {
    name: 'demo-devices',
    type: 'string',
    value: 'N',
    section: 'Demo (with --demo)',
    help: 'simulated devices (default 20000)',
  },
  {
    name: 'demo-fences',
    type: 'string',
    value: 'N',
    section: 'Demo (with --demo)',
    help: 'synthetic-city fences (default 3000)',
  },
  {
    name: 'demo-seed',
    type: 'string',
    value: 'N',
    section: 'Demo (with --demo)',
    help: 'seed of the city and the fleet (default 7)',
  },
  {
    name: 'listen',
    type: 'string',
    value: 'HOST:PORT',
    section: 'Telemetry and admin',
    help: 'telemetry TCP listener (default 127.0.0.1:7070); an address other hosts can reach needs --tls-cert/--tls-key or --ingest-token-file (or --allow-unauthenticated)',
  },
  {
    name: 'no-listen',
    type: 'boolean',
    section: 'Telemetry and admin',
    help: 'no TCP listener (in-process sources only)',
  },
  {
    name: 'tls-cert',
    type: 'string',
    value: 'FILE',
    section: 'Telemetry and admin',
    help: 'the listener speaks TLS with this certificate chain (PEM) ...',
  },
  {
    name: 'tls-key',
    type: 'string',
    value: 'FILE',
    section: 'Telemetry and admin',
    help: '... and this private key (PEM)',
  },
  {
    name: 'tls-ca',
    type: 'string',
    value: 'FILE',
    section: 'Telemetry and admin',
    help: 'client certificates must chain to this CA bundle (PEM)',
  },
  {
    name: 'tls-client-cert-optional',
    type: 'boolean',
    section: 'Telemetry and admin',
    help: "with --tls-cert, --tls-key and a CA (--tls-ca, or the config file's caFile): ask for a client certificate without requiring one",
  },
  {
    name: 'source',
    type: 'string',
    value: 'URL',
    section: 'Telemetry and admin',
    help: 'read telemetry from a NATS JetStream stream: jetstream://HOST:PORT[,HOST:PORT][/STREAM] (stream default GEOFENCE_TELEMETRY); one durable pull consumer per partition, nothing shed while the log holds the backlog',
  },
  {
    name: 'partitions',
    type: 'string',
    value: 'LIST',
    section: 'Telemetry and admin',
    help: 'with --source: the partitions this router consumes, "all" (default), numbers and ranges such as 0-7,12, or "auto" (leases shared with the other routers of the stream: balanced as routers join and leave, taken over with their state when one dies)',
  },
  {
    name: 'lease-ms',
    type: 'string',
    value: 'MS',
    section: 'Telemetry and admin',
    help: 'with --partitions auto: lease time of a lease bucket the router creates (default 10000): a router that stops renewing loses its partitions this long after its last renewal',
  },
  {
    name: 'member-name',
    type: 'string',
    value: 'NAME',
    section: 'Telemetry and admin',
    help: "with --partitions auto: this router's name among the group's members (default <hostname>-<pid>)",
  },
  {
    name: 'partition-count',
    type: 'string',
    value: 'N',
    section: 'Telemetry and admin',
    help: "with --source: partitions the stream's subjects are split into (default 16; the ingest tier must agree)",
  },
  {
    name: 'partition-state-bucket',
    type: 'string',
    value: 'NAME',
    section: 'Telemetry and admin',
    help: 'with --source: key-value bucket keeping each partition\'s device state (default GEOFENCE_PARTITION_STATE; "none": the state directory only)',
  },
  {
    name: 'ingest-token-file',
    type: 'string',
    value: 'FILE',
    section: 'Telemetry and admin',
    help: 'each connection must open with the line "AUTH <token>" carrying the token in FILE (or GEOFENCE_INGEST_TOKEN); at least 16 characters',
  },
  {
    name: 'webhook-bearer-token-file',
    type: 'string',
    value: 'FILE',
    section: 'Webhooks (every --webhook)',
    help: 'each request carries "Authorization: Bearer <token>" with the token in FILE (or GEOFENCE_WEBHOOK_BEARER_TOKEN)',
  },
  {
    name: 'webhook-signing-secret-file',
    type: 'string',
    value: 'FILE',
    section: 'Webhooks (every --webhook)',
    help: 'each request is signed with HMAC-SHA256 keyed by the secret in FILE (or GEOFENCE_WEBHOOK_SIGNING_SECRET): x-geofence-timestamp and x-geofence-signature',
  },
  {
    name: 'admin',
    type: 'string',
    value: 'HOST:PORT',
    section: 'Telemetry and admin',
    help: 'admin HTTP server: /metrics /healthz /readyz (default 127.0.0.1:9464)',
  },
  { name: 'no-admin', type: 'boolean', section: 'Telemetry and admin', help: 'no admin server' },
  {
    name: 'admin-token-file',
    type: 'string',
    value: 'FILE',
    section: 'Telemetry and admin',
    help: 'POST /admin/... needs "Authorization: Bearer <token>" with the token in FILE (or GEOFENCE_ADMIN_TOKEN); needed for a non-loopback --admin',
  },
  {
    name: 'webhook',
    type: 'string',
    multiple: true,
    value: 'URL',
    section: 'Fences and downstreams',
    help: 'deliver triggers to an HTTP webhook (repeatable; see Webhooks below)',
  },
  {
    name: 'ndjson',
    type: 'string',
    multiple: true,
    value: 'PATH',
    section: 'Fences and downstreams',
    help: 'append triggers to an NDJSON file, "-" for stdout (repeatable)',
  },
  {
    name: 'input',
    type: 'string',
    multiple: true,
    value: 'FILE',
    section: 'Fences and downstreams',
    help: 'replay a file of MessagePack frames, "-" for stdin (repeatable)',
  },
  { name: 'dead-letter-dir', type: 'string', section: null, help: 'replaced by --state-dir' },
];

/** --help sections in order. */
const HELP_SECTIONS = [
  'Telemetry and admin',
  'Pipeline',
  'Admission',
  'Fences and downstreams',
  'Webhooks (every --webhook)',
  'Durable state',
];

/** Options that have a flag of their own. */
const OPTION_FLAGS = declaredOptions(ROUTER_SPEC).filter((o) => o.field.flag !== undefined);

function fixedHelp(section: string): string[] {
  return FIXED_FLAGS.filter((f) => f.section === section).map((f) =>
    helpLine(
      `${f.short !== undefined ? `-${f.short}, ` : '    '}--${f.name}${f.value === undefined ? '' : ` ${f.value}`}`.replace(
        /^ {4}/,
        '',
      ),
      f.help,
    ),
  );
}

function buildHelp(): string {
  const optionHelp = flagHelp(ROUTER_SPEC);
  const sections = HELP_SECTIONS.map((name) => {
    const lines = [...fixedHelp(name), ...(optionHelp.get(name) ?? [])];
    return `${name}:\n${lines.join('\n')}`;
  });
  return `Usage: geofence-router [--config FILE] [flags]

Routes MessagePack GPS telemetry through geofences to ENTER / EXIT / DWELL / CROSS triggers.
Options come from the defaults, then the JSON config file, then these flags.

General:
${fixedHelp('General').join('\n')}

Demo (with --demo):
${fixedHelp('Demo (with --demo)').join('\n')}

Signals: SIGHUP reloads the fences file; SIGINT / SIGTERM drain, print a summary and exit. With
--no-listen and --input, the run drains by itself once every input has been read.

Exit codes (the summary lists everything not delivered, by lane and reason):
  0  drained cleanly: nothing shed or rejected, every fence entry tracked, every admitted ping
     processed and every trigger delivered
  3  drained, but something was not delivered by design: pings shed (by lane and reason) or
     rejected (by reason), fence entries or candidates not tracked (fence_overflows,
     candidate_overflows), CROSS triggers over budget, pings of stream partitions read after a
     gap (partitions_after_gap), dead letters dropped from storage, durable records found
     damaged, input files not read to their end (input_errors), triggers dead-lettered for good,
     or triggers kept in the state directory for the next start (or for downstreams no longer
     configured)
  1  failure: the start failed, the drain could not account for every admitted ping, or the
     final checkpoint could not be written
  2  bad flags, config file or options

Overload: files and stdin (--input) are read only as fast as the telemetry rings take them: they
are paused, never shed. The TCP listener sheds by lane when a ring is full (a live stream cannot
wait), or pauses the connection with --overload backpressure. A shed COMPLIANCE ping is logged as
an error (at most one line a second, with the count).

${sections.join('\n\n')}
`;
}

/** The --help text (every option's flag line comes from the option definition). */
export const HELP_TEXT = buildHelp();

const FLAGS: NonNullable<ParseArgsConfig['options']> = Object.fromEntries([
  ...FIXED_FLAGS.map((f) => [
    f.name,
    {
      type: f.type,
      ...(f.short === undefined ? {} : { short: f.short }),
      ...(f.multiple === true ? { multiple: true } : {}),
    },
  ]),
  ...OPTION_FLAGS.map((o) => [
    o.field.flag,
    o.field.kind === 'bool'
      ? { type: 'boolean' }
      : { type: 'string', ...(o.field.kind === 'map' ? { multiple: true } : {}) },
  ]),
]);

/** A token from a file named by `--flag` (trailing newline removed), else from the environment variable `env`. */
function tokenFrom(flag: string, path: string | undefined, env: string): string | undefined {
  if (path !== undefined) {
    try {
      return readFileSync(path, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new OptionError(
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
    throw new OptionError(`--${flag} must be a number, got ${JSON.stringify(text)}`);
  return v;
}

function hostPort(flag: string, text: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const host = i > 0 ? text.slice(0, i).replace(/^\[(.*)\]$/, '$1') : '';
  const port = Number(text.slice(i + 1));
  if (i <= 0 || host === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new OptionError(`--${flag} must be HOST:PORT with PORT in [0, 65535], got ${JSON.stringify(text)}`);
  }
  return { host, port };
}

/** A flag's text as the option's value: numbers parsed, "Name: value" pairs collected; checked against the option. */
function flagValue(field: Declared, flag: string, raw: unknown): unknown {
  let value: unknown = raw;
  if (field.kind === 'int' || field.kind === 'num') value = number(flag, raw as string);
  else if (field.kind === 'map') {
    const m: Record<string, string> = {};
    for (const pair of raw as string[]) {
      const i = pair.indexOf(':');
      if (i <= 0) throw new OptionError(`--${flag} must be "Name: value", got ${JSON.stringify(pair)}`);
      m[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
    }
    value = m;
  }
  checkInput(field, value, [], () => `--${flag}`);
  return value;
}

/** Sets `value` at `path` in `o`, creating the groups on the way. */
function setPath(o: Record<string, unknown>, path: OptionPath, value: unknown): void {
  let at = o;
  for (let i = 0; i < path.length - 1; i++) {
    const k = path[i] as string;
    at = (at[k] ??= {}) as Record<string, unknown>;
  }
  at[path[path.length - 1] as string] = value;
}

/** Parses argv (without node and script); throws a RangeError naming the flag on bad input. */
export function parseCliArgs(argv: readonly string[]): CliRequest {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false });
  } catch (err) {
    throw new OptionError(`${(err as Error).message} (see --help)`, { cause: err });
  }
  const v = parsed.values as Record<string, string | boolean | string[] | undefined>;
  const str = (k: string): string | undefined => v[k] as string | undefined;
  // --help and --print-config-schema answer whatever else is wrong on the line.
  const answersOnly = v['help'] === true || v['version'] === true || v['print-config-schema'] === true;
  let overrides: RouterOptionsInput = {};
  let demoFlags: DemoFlags = {};
  try {
    overrides = overridesFrom(v);
    demoFlags = parseDemoFlags(
      v as Partial<Record<'demo-seconds' | 'demo-devices' | 'demo-fences' | 'demo-seed', string>>,
    );
  } catch (err) {
    if (!answersOnly) throw err;
  }
  if (v['demo'] !== true && !answersOnly) {
    const given = Object.keys(demoFlags)[0];
    if (given !== undefined) throw new OptionError(`--demo-${given} needs --demo (see --help)`);
  }
  return {
    help: v['help'] === true,
    version: v['version'] === true,
    demo: v['demo'] === true,
    printConfigSchema: v['print-config-schema'] === true,
    demoFlags,
    configPath: str('config') ?? null,
    logFormat: oneOf('--log-format', str('log-format'), LOG_FORMATS, 'json'),
    logLevel: oneOf('--log-level', str('log-level'), LOG_LEVELS, 'info'),
    overrides,
  };
}

/** `given` when it is one of `allowed`, `fallback` when absent; else an OptionError naming the flag. */
function oneOf<T extends string>(flag: string, given: string | undefined, allowed: readonly T[], fallback: T): T {
  if (given === undefined) return fallback;
  if ((allowed as readonly string[]).includes(given)) return given as T;
  throw new OptionError(`${flag} must be one of ${allowed.join(', ')} (got ${JSON.stringify(given)})`);
}

/** The options the flags `v` set, each checked and named by its flag. */
function overridesFrom(v: Record<string, string | boolean | string[] | undefined>): RouterOptionsInput {
  const str = (k: string): string | undefined => v[k] as string | undefined;
  const o: Record<string, unknown> = {};
  const webhookFields: Record<string, unknown> = {};
  for (const opt of OPTION_FLAGS) {
    const flag = opt.field.flag as string;
    const raw = v[flag];
    if (raw === undefined) continue;
    const value = flagValue(opt.field, flag, raw);
    if (opt.path[0] === 'downstreams') webhookFields[opt.path[1] as string] = value;
    else setPath(o, opt.path, value);
  }
  // --listen / --no-listen and --admin / --no-admin: an address, or none.
  for (const flag of ['listen', 'admin'] as const) {
    const text = str(flag);
    if (text !== undefined) {
      const hp = hostPort(flag, text);
      o[`${flag}Host`] = hp.host;
      o[`${flag}Port`] = hp.port;
    }
    if (v[`no-${flag}`] === true) o[`${flag}Host`] = null;
  }
  const adminToken = tokenFrom('admin-token-file', str('admin-token-file'), 'GEOFENCE_ADMIN_TOKEN');
  if (adminToken !== undefined) o['adminToken'] = adminToken;
  const ingestToken = tokenFrom('ingest-token-file', str('ingest-token-file'), 'GEOFENCE_INGEST_TOKEN');
  if (ingestToken !== undefined) setPath(o, ['ingest', 'authToken'], ingestToken);
  const cert = str('tls-cert');
  const key = str('tls-key');
  if ((cert === undefined) !== (key === undefined)) throw new OptionError('--tls-cert and --tls-key go together');
  if (cert !== undefined) {
    // Only the fields the flags give: a config file's others (its CA bundle, requireClientCert) stay in force.
    const tls: Record<string, unknown> = { certFile: cert, keyFile: key };
    const ca = str('tls-ca');
    if (ca !== undefined) tls['caFile'] = ca;
    if (v['tls-client-cert-optional'] === true) tls['requireClientCert'] = false;
    setPath(o, ['ingest', 'tls'], tls);
  } else {
    for (const flag of ['tls-ca', 'tls-client-cert-optional'])
      if (v[flag] !== undefined) throw new OptionError(`--${flag} needs --tls-cert and --tls-key`);
  }
  const source = str('source');
  if (source !== undefined) {
    const js: Record<string, unknown> = parseSourceUrl(source);
    const partitions = str('partitions');
    if (partitions !== undefined) js['partitions'] = partitions;
    const count = integerIn('partition-count', str('partition-count'), 1, 4096);
    if (count !== undefined) js['partitionCount'] = count;
    const bucket = str('partition-state-bucket');
    if (bucket !== undefined) js['stateBucket'] = bucket === 'none' ? null : bucket;
    const leaseMs = integerIn('lease-ms', str('lease-ms'), 1000, 3_600_000);
    if (leaseMs !== undefined) js['leaseMs'] = leaseMs;
    const member = str('member-name');
    if (member !== undefined) js['memberName'] = member;
    o['jetstreamSource'] = js;
  } else if (
    ['partitions', 'partition-count', 'partition-state-bucket', 'lease-ms', 'member-name'].some(
      (f) => str(f) !== undefined,
    )
  ) {
    throw new OptionError(
      '--partitions, --partition-count, --partition-state-bucket, --lease-ms and --member-name need --source',
    );
  }
  if (str('dead-letter-dir') !== undefined) {
    throw new OptionError(
      '--dead-letter-dir is replaced by --state-dir (dead letters live in <state-dir>/downstreams/<name>/)',
    );
  }
  const inputs = v['input'] as string[] | undefined;
  if (inputs !== undefined) o['inputs'] = inputs;
  // A secret from the environment alone applies to the --webhook downstreams when there are any; without them it
  // is not an error (the variable may be set for other runs), a secret file given as a flag is.
  const secretFlags: Record<string, string> = {
    bearerToken: 'webhook-bearer-token-file',
    signingSecret: 'webhook-signing-secret-file',
  };
  const fromEnvOnly = new Set<string>();
  for (const [field, env] of [
    ['bearerToken', 'GEOFENCE_WEBHOOK_BEARER_TOKEN'],
    ['signingSecret', 'GEOFENCE_WEBHOOK_SIGNING_SECRET'],
  ] as const) {
    const flag = secretFlags[field]!;
    const secret = tokenFrom(flag, str(flag), env);
    if (secret === undefined) continue;
    webhookFields[field] = secret;
    if (str(flag) === undefined) fromEnvOnly.add(field);
  }
  const webhooks = (v['webhook'] as string[] | undefined) ?? [];
  const downstreams: Record<string, unknown>[] = [];
  webhooks.forEach((url, i) => downstreams.push({ name: `webhook-${i + 1}`, kind: 'webhook', url, ...webhookFields }));
  ((v['ndjson'] as string[] | undefined) ?? []).forEach((path, i) =>
    downstreams.push({ name: `ndjson-${i + 1}`, kind: 'ndjson', path }),
  );
  const extra = Object.keys(webhookFields).find((field) => !fromEnvOnly.has(field));
  if (extra !== undefined && webhooks.length === 0) {
    const flag = OPTION_FLAGS.find((x) => x.path[1] === extra)?.field.flag ?? secretFlags[extra] ?? extra;
    throw new OptionError(`--${flag} applies to the --webhook downstreams, and none is given`);
  }
  if (downstreams.length > 0) o['downstreams'] = downstreams;
  const overrides = o as RouterOptionsInput;
  // Values a flag built from several parts (or from a file) are checked here too, each named by its flag.
  checkInput(ROUTER_SPEC, overrides, [], flagNamer);
  return overrides;
}

/**
 * Where the CLI listens unless told otherwise (`--listen`, `--admin`, `--no-listen`, `--no-admin`, or the config file):
 * the library opens no listener unless asked, the command line does.
 */
export const CLI_NETWORK_DEFAULTS: Readonly<RouterOptionsInput> = Object.freeze({
  listenHost: '127.0.0.1',
  listenPort: 7070,
  adminHost: '127.0.0.1',
  adminPort: 9464,
});

/** `jetstream://host:port[,host:port][/STREAM]` as the jetstreamSource option's servers and stream. */
function parseSourceUrl(text: string): Record<string, unknown> {
  const m = /^jetstream:\/\/([^/?#]+)(?:\/([A-Za-z0-9_-]+))?\/?$/.exec(text);
  if (m === null) {
    throw new OptionError(
      `--source must be jetstream://HOST:PORT[,HOST:PORT][/STREAM] (stream names: letters, digits, - and _), got ${JSON.stringify(text)}`,
    );
  }
  const servers = m[1]!.split(',').map((hp) => `nats://${hp}`);
  return m[2] === undefined ? { servers } : { servers, stream: m[2] };
}

/** Names an option by the flag that set it. */
const flagNamer: Namer = (path) => {
  const head = path[0];
  const at = pathText(path);
  const own = OPTION_FLAGS.find((o) => pathText(o.path) === at);
  if (own !== undefined) return `--${own.field.flag}`;
  if (head === 'listenHost' || head === 'listenPort') return '--listen';
  if (head === 'adminHost' || head === 'adminPort') return '--admin';
  if (head === 'adminToken') return '--admin-token-file (or GEOFENCE_ADMIN_TOKEN)';
  if (head === 'inputs') return '--input';
  if (head === 'jetstreamSource') {
    if (path[1] === 'partitions') return '--partitions';
    if (path[1] === 'partitionCount') return '--partition-count';
    if (path[1] === 'stateBucket') return '--partition-state-bucket';
    if (path[1] === 'leaseMs') return '--lease-ms';
    if (path[1] === 'memberName') return '--member-name';
    if (path[1] === 'servers' || path[1] === 'stream' || path[1] === undefined) return '--source';
  }
  if (head === 'downstreams') {
    const field = path[2];
    const byFlag = OPTION_FLAGS.find((o) => o.path[0] === 'downstreams' && o.path[1] === field);
    if (byFlag !== undefined) return `--${byFlag.field.flag}`;
    if (field === 'bearerToken') return '--webhook-bearer-token-file (or GEOFENCE_WEBHOOK_BEARER_TOKEN)';
    if (field === 'signingSecret') return '--webhook-signing-secret-file (or GEOFENCE_WEBHOOK_SIGNING_SECRET)';
    return field === 'path' ? '--ndjson' : '--webhook';
  }
  if (at === 'ingest.authToken') return '--ingest-token-file (or GEOFENCE_INGEST_TOKEN)';
  if (at.startsWith('ingest.tls'))
    return `--tls-${path[2] === 'caFile' ? 'ca' : path[2] === 'keyFile' ? 'key' : 'cert'}`;
  return libraryNamer(path);
};

function integerIn(flag: string, text: string | undefined, lo: number, hi: number): number | undefined {
  const x = number(flag, text);
  if (x !== undefined && !(Number.isInteger(x) && x >= lo && x <= hi)) {
    throw new OptionError(`--${flag} must be an integer in [${lo}, ${hi}], got ${JSON.stringify(text)}`);
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
      throw new OptionError(`--demo-seconds must be a number in (0, 86400], got ${JSON.stringify(v['demo-seconds'])}`);
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

/** Merges the config file's options (if any) and flag overrides: nested objects key by key, lists replaced. */
export function mergeOptionInputs(file: RouterOptionsInput, flags: RouterOptionsInput): RouterOptionsInput {
  return mergeInputs(ROUTER_SPEC, file, flags) as RouterOptionsInput;
}

/** Resolves the router options a command line asks for (reads the config file when --config is given). */
export function optionsFromCli(request: CliRequest): RouterOptions {
  const file = request.configPath !== null ? loadConfigFile(request.configPath) : {};
  return resolveRouterOptions(mergeOptionInputs(mergeOptionInputs(CLI_NETWORK_DEFAULTS, file), request.overrides));
}
