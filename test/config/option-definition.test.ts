/**
 * One definition of every option: the README table, --help, the JSON Schema and validation all come from it and agree;
 * a bad value names its source (flag, config file path and key, library option); the webhook `headers` option, added
 * in the definition alone, reaches a real HTTP server on every request, with the delivery contract intact.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { HELP_TEXT, mergeOptionInputs, optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { loadConfigFile } from '../../src/config/config-file.js';
import { declaredOptions, optionsMarkdown } from '../../src/option-schema/option-docs.js';
import {
  resolveRouterOptions,
  routerConfigSchema,
  threadOptions,
  type RouterOptionsInput,
} from '../../src/config/options.js';
import { ROUTER_SPEC } from '../../src/config/router-option-spec.js';
import {
  AimdLimit,
  Gradient2Limit,
  GradientLimit,
  VegasLimit,
  WindowedLimit,
} from '../../src/dispatch/limits/index.js';
import { buildDownstreams } from '../../src/pipeline/dispatch-wiring.js';
import { downstreamSpecs } from '../../src/pipeline/threads.js';
import { createRouter } from '../../src/index.js';
import { cityTraffic, sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function configFile(value: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'gr-optdef-'));
  const file = join(dir, 'router.json');
  writeFileSync(file, JSON.stringify(value));
  return file;
}

test('the README options table is the one the definition renders (node test/lint/options-readme.mjs writes it)', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const a = readme.indexOf('<!-- options:begin -->');
  const b = readme.indexOf('<!-- options:end -->');
  assert.ok(a > 0 && b > a, 'README has the options section');
  const table = readme.slice(a + '<!-- options:begin -->'.length, b).trim();
  assert.equal(table, optionsMarkdown(ROUTER_SPEC));
  const options = declaredOptions(ROUTER_SPEC);
  assert.ok(options.length > 80, `${options.length} options declared`);
  for (const o of options) assert.ok(table.includes(`\`${o.label}\``), o.label);
});

test('every flag of the definition is in --help and parses to its option; every option is in the schema', () => {
  const schema = routerConfigSchema();
  const flagged = declaredOptions(ROUTER_SPEC).filter((o) => o.field.flag !== undefined);
  assert.ok(flagged.length >= 40, `${flagged.length} option flags`);
  for (const o of flagged) assert.match(HELP_TEXT, new RegExp(`--${o.field.flag}\\b`), o.label);
  for (const o of declaredOptions(ROUTER_SPEC)) {
    if (o.field.kind === 'function') continue;
    type Node = Record<string, unknown>;
    const props = (n: Node): Record<string, Node> => {
      const inner = n['anyOf'] !== undefined ? (n['anyOf'] as Node[])[0]! : n;
      return (inner['properties'] ?? {}) as Record<string, Node>;
    };
    let at: Node = schema;
    o.path.forEach((part, i) => {
      if (i === 1 && o.path[0] === 'downstreams') {
        const variants = ((at['items'] as Node)['oneOf'] as Node[]) ?? [];
        at = variants.map((v) => props(v)[part as string]).find((x) => x !== undefined) ?? {};
      } else at = props(at)[part as string] ?? {};
    });
    assert.equal(typeof at['description'], 'string', `${o.label} is in the schema with its doc line`);
  }
  // A number flag reaches its option, nested or not.
  const parsed = parseCliArgs([
    '--watermark-fraction',
    '0.7',
    '--max-held-bytes',
    '131072',
    '--device-expiry',
    'silent',
  ]);
  assert.deepEqual(parsed.overrides, {
    admission: { watermarkFraction: 0.7 },
    ingest: { maxHeldBytes: 131072 },
    deviceExpiry: 'silent',
  });
});

test('the JSON Schema (strict draft 2020-12) and the validation agree on good and bad config files', () => {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  const validate = ajv.compile(routerConfigSchema());
  const good: unknown[] = [
    {},
    { $schema: './config.schema.json', shards: 4, admission: { watermarkFraction: 0.5 } },
    {
      listenHost: null,
      stateDir: null,
      deviceIdleTimeoutMs: 0,
      ringCapacitySlots: 1024,
      ingest: { tls: { certFile: 'a.pem', keyFile: 'b.pem' }, overload: 'backpressure' },
      downstreams: [
        {
          kind: 'webhook',
          name: 'hook',
          url: 'http://127.0.0.1:9/x',
          headers: { 'X-Api-Key': 'k-1' },
          breaker: { windowSize: 20, minimumRequests: 5 },
          limit: 16,
          subscribe: { types: ['ENTER', 'EXIT'], tags: ['depot'] },
        },
        { kind: 'ndjson', name: 'file', path: '-', limit: 'aimd', replay: false },
        { kind: 'webhook', name: 'upper', url: 'HTTP://127.0.0.1:9/x', headers: { 'X-Tab': 'a\tb' } },
      ],
    },
  ];
  const bad: [unknown, RegExp][] = [
    [{ shards: 0 }, /: shards must be an integer in \[1, 1024\], got 0$/],
    [{ ringCapacitySlots: 1000 }, /: ringCapacitySlots must be a power of two/],
    [{ admission: { watermarkFraction: 2 } }, /: admission\.watermarkFraction must be a number in \[0, 1\], got 2$/],
    [{ deviceIdleTimeoutMs: 50 }, /: deviceIdleTimeoutMs must be 0 or an integer in \[100, 31536000000\], got 50$/],
    [{ ingest: { overload: 'drop' } }, /: ingest\.overload must be one of "shed", "backpressure", got "drop"$/],
    [{ ingest: { colour: 1 } }, /: ingest\.colour is not an option$/],
    [{ deadLetter: { constructor: 1 } }, /: deadLetter\.constructor is not an option$/],
    [{ adminToken: '🙂🙂🙂🙂🙂🙂🙂🙂' }, /: adminToken must be a string of at least 16 characters/],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: ' http://x/' }] },
      /: downstreams\[0\]\.url must be an http:\/\/ or https:\/\/ URL/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http:/x' }] },
      /: downstreams\[0\]\.url must be an http:\/\/ or https:\/\/ URL/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://' }] },
      /: downstreams\[0\]\.url must be an http:\/\/ or https:\/\/ URL/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://x/', headers: { 'X-K': 'snow\u2603' } }] },
      /: downstreams\[0\]\.headers\.X-K must be a string of tabs and printable Latin-1 characters/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://x/', gradient: { constructor: 5 } }] },
      /: downstreams\[0\]\.gradient: constructor is not a gradient limit option/,
    ],
    [{ ingest: { tls: { certFile: 'a.pem' } } }, /: ingest\.tls\.keyFile is required/],
    [
      { adminToken: 'short' },
      /: adminToken must be a string of at least 16 characters without spaces, or null, got 5 characters$/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'ftp://x' }] },
      /: downstreams\[0\]\.url must be an http:\/\/ or https:\/\/ URL/,
    ],
    [
      { downstreams: [{ kind: 'pigeon', name: 'h' }] },
      /: downstreams\[0\]\.kind must be one of "webhook", "jetstream", "mqtt", "ndjson", "callback", "stream"/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://x/', headers: { 'Content-Type': 'text/plain' } }] },
      /: downstreams\[0\]\.headers\.Content-Type is set by the router and cannot be given$/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://x/', headers: { 'Bad Name': 'v' } }] },
      /: downstreams\[0\]\.headers\.Bad Name: "Bad Name" is not an HTTP header name$/,
    ],
    [
      { downstreams: [{ kind: 'webhook', name: 'h', url: 'http://x/', headers: { 'X-A': 'v\r\nX-B: w' } }] },
      /: downstreams\[0\]\.headers\.X-A must be a string of tabs and printable Latin-1 characters/,
    ],
    [
      { downstreams: [{ kind: 'ndjson', name: 'f', path: '-', path2: 1 }] },
      /: downstreams\[0\]\.path2 is not an option of a ndjson entry$/,
    ],
    [
      { downstreams: [{ kind: 'ndjson', name: 'f', path: '-', limit: 'fast' }] },
      /: downstreams\[0\]\.limit must be one of/,
    ],
    [
      { downstreams: [{ kind: 'ndjson', name: 'f', path: '-', breaker: { windowSize: 0 } }] },
      /breaker\.windowSize must be an integer/,
    ],
  ];
  for (const value of good) {
    assert.equal(validate(value), true, `schema accepts ${JSON.stringify(value)}: ${ajv.errorsText(validate.errors)}`);
    assert.doesNotThrow(() => loadConfigFile(configFile(value)), JSON.stringify(value));
  }
  for (const [value, re] of bad) {
    assert.equal(validate(value), false, `schema refuses ${JSON.stringify(value)}`);
    const file = configFile(value);
    assert.throws(
      () => loadConfigFile(file),
      (err: Error) => err.message.startsWith(`config file ${file}: `) && re.test(err.message),
      JSON.stringify(value),
    );
  }
});

test('a bad value names its source: the flag, the config file and key, or the library option', () => {
  const file = configFile({ admission: { watermarkFraction: 2 } });
  assert.throws(
    () => optionsFromCli(parseCliArgs(['--config', file])),
    new RegExp(
      `^OptionError: config file ${file.replace(/[.\\]/g, '\\$&')}: admission\\.watermarkFraction must be a number in \\[0, 1\\], got 2$`,
    ),
  );
  assert.throws(
    () => parseCliArgs(['--watermark-fraction', '2']),
    /^OptionError: --watermark-fraction must be a number in \[0, 1\], got 2$/,
  );
  assert.throws(
    () => parseCliArgs(['--watermark-fraction', 'high']),
    /^OptionError: --watermark-fraction must be a number, got "high"$/,
  );
  assert.throws(
    () => resolveRouterOptions({ admission: { watermarkFraction: 2 } }),
    /^OptionError: options\.admission\.watermarkFraction must be a number in \[0, 1\], got 2$/,
  );
  assert.throws(() => parseCliArgs(['--listen', '127.0.0.1:99999']), /^OptionError: --listen must be HOST:PORT/);
  // A rule across options names the options and the flags that set them, whichever source gave them.
  assert.throws(
    () => optionsFromCli(parseCliArgs(['--config', configFile({ adminHost: null }), '--listen', '0.0.0.0:0'])),
    /^OptionError: options\.listenHost 0\.0\.0\.0 is not a loopback address .*--tls-cert\/--tls-key.*--ingest-token-file.*--allow-unauthenticated/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        downstreams: [{ kind: 'ndjson', name: 'f', path: '-', breaker: { windowSize: 10, minimumRequests: 20 } }],
      }),
    /^OptionError: options\.downstreams\[0\]\.breaker\.minimumRequests must be at most options\.downstreams\[0\]\.breaker\.windowSize \(10\), got 20$/,
  );
});

test('webhook headers: one definition gives the type, the flag, the checks, the schema and the README row', () => {
  const cli = parseCliArgs([
    '--webhook',
    'http://127.0.0.1:9/a',
    '--webhook',
    'http://127.0.0.1:9/b',
    '--webhook-header',
    'X-Api-Key: k-123',
    '--webhook-header',
    'Authorization: Bearer abc',
    '--webhook-timeout-ms',
    '2500',
  ]);
  const o = optionsFromCli(cli);
  assert.equal(o.downstreams.length, 2);
  for (const d of o.downstreams) {
    assert.equal(d.kind, 'webhook');
    if (d.kind !== 'webhook') continue;
    assert.deepEqual(d.headers, { 'X-Api-Key': 'k-123', Authorization: 'Bearer abc' });
    assert.equal(d.timeoutMs, 2500);
  }
  assert.throws(
    () => parseCliArgs(['--webhook-header', 'X-Api-Key: k']),
    /^OptionError: --webhook-header applies to the --webhook downstreams, and none is given$/,
  );
  assert.throws(
    () => parseCliArgs(['--webhook', 'http://x/', '--webhook-header', 'no colon']),
    /^OptionError: --webhook-header must be "Name: value", got "no colon"$/,
  );
  assert.throws(
    () => parseCliArgs(['--webhook', 'http://x/', '--webhook-header', 'Host: evil']),
    /^OptionError: --webhook-header is set by the router and cannot be given$/,
  );
  assert.match(HELP_TEXT, /--webhook-header "NAME: VALUE"\s+extra request headers/);
  assert.match(optionsMarkdown(ROUTER_SPEC), /\| `downstreams\[\]\.headers` \(webhook\) \| `--webhook-header` \|/);
  const items = JSON.stringify(routerConfigSchema());
  assert.ok(items.includes('"headers":{"type":"object"'), 'the schema has headers');
});

test('--help answers whatever else is wrong; "__proto__" cannot carry options past the checks', () => {
  assert.equal(parseCliArgs(['--help', '--shards', '0']).help, true);
  assert.equal(parseCliArgs(['--print-config-schema', '--listen', 'x']).printConfigSchema, true);
  const saved = process.env['GEOFENCE_ADMIN_TOKEN'];
  process.env['GEOFENCE_ADMIN_TOKEN'] = 'short';
  try {
    assert.throws(
      () => parseCliArgs([]),
      /^OptionError: --admin-token-file \(or GEOFENCE_ADMIN_TOKEN\) must be a string/,
    );
  } finally {
    if (saved === undefined) delete process.env['GEOFENCE_ADMIN_TOKEN'];
    else process.env['GEOFENCE_ADMIN_TOKEN'] = saved;
  }
  const evil = JSON.parse('{"__proto__":{"allowUnauthenticated":true},"listenHost":"0.0.0.0"}') as RouterOptionsInput;
  assert.throws(() => resolveRouterOptions(mergeOptionInputs({}, evil)), /options\.__proto__ is not an option/);
  assert.throws(() => resolveRouterOptions(mergeOptionInputs(evil, {})), /options\.__proto__ is not an option/);
});

test('every limit algorithm is tuned from the router options; a tuning for another algorithm or a foreign name is refused', () => {
  // One downstream on stdout at most: the others write files.
  const dir = mkdtempSync(join(tmpdir(), 'gr-limits-'));
  const o = resolveRouterOptions({
    downstreams: [
      { kind: 'ndjson', name: 'a', path: '-', limit: 'aimd', aimd: { initialLimit: 40, backoffRatio: 0.5 } },
      {
        kind: 'ndjson',
        name: 'v',
        path: join(dir, 'v.ndjson'),
        limit: 'vegas',
        vegas: { initialLimit: 7, alpha: 2, beta: 4, threshold: 1 },
      },
      {
        kind: 'ndjson',
        name: 'g2',
        path: join(dir, 'g2.ndjson'),
        limit: 'gradient2',
        gradient2: { initialLimit: 9, queueSize: 8, rttTolerance: 1 },
      },
      { kind: 'ndjson', name: 'g', path: join(dir, 'g.ndjson'), gradient: { initialLimit: 11 } },
    ],
  });
  const built = buildDownstreams(downstreamSpecs(o), null);
  const [aimd, vegas, gradient2, gradient] = built.map((d) => d.limit!);
  assert.ok(aimd instanceof AimdLimit && vegas instanceof VegasLimit && gradient2 instanceof Gradient2Limit);
  assert.ok(gradient instanceof GradientLimit);
  assert.deepEqual([aimd.limit, vegas.limit, gradient2.limit, gradient.limit], [40, 7, 9, 11]);
  aimd.onSample(0, 1e6, 40, true);
  assert.equal(aimd.limit, 20, 'the AIMD backoff ratio given (0.5) is the one applied');
  // Gradient2 with tolerance 1: a sample over the long RTT scales L by long / rtt (the default 1.5 would keep L whole).
  gradient2.onSample(0, 10e6, 9, false);
  gradient2.onSample(0, 15e6, 9, false);
  assert.equal(gradient2.limit, Math.floor(10.6 * 0.8 + (10.6 * (12.5 / 15) + 8) * 0.2));
  for (const d of built) void d.sink.close();
  const bad = (d: Record<string, unknown>): void =>
    void resolveRouterOptions({ downstreams: [{ kind: 'ndjson', name: 'x', path: '-', ...d }] } as RouterOptionsInput);
  assert.throws(
    () => bad({ limit: 'aimd', aimd: { bogus: 1 } }),
    /^OptionError: options\.downstreams\[0\]\.aimd: bogus is not a AIMD limit option/,
  );
  assert.throws(
    () => bad({ limit: 'vegas', aimd: { backoffRatio: 0.8 } }),
    /options\.downstreams\[0\]\.aimd applies only with limit "aimd", got limit "vegas"/,
  );
  assert.throws(() => bad({ vegas: { smoothing: 0.5 } }), /vegas applies only with limit "vegas", got limit undefined/);
  assert.throws(() => bad({ limit: 'vegas', vegas: { random: 1 } }), /vegas: random is set only by the library/);
  assert.throws(
    () => bad({ limit: 'gradient2', gradient2: { driftMultiplier: 2 } }),
    /gradient2: driftMultiplier is not a Gradient2 limit option \(one of .*rttTolerance/,
  );
  assert.throws(() => bad({ limit: 'gradient2', gradient2: { rttTolerance: 0.5 } }), /options\.rttTolerance must be/);
  assert.throws(
    () => bad({ limit: 'gradient2', gradient2: { queueSize: () => 4 } }),
    /gradient2: queueSize is set only by the library/,
  );
  assert.throws(() => bad({ limit: 'vegas', vegas: { decrease: 3 } }), /vegas: decrease is set only by the library/);
  assert.throws(() => bad({ limit: 'vegas', vegas: { alpha: () => 3 } }), /vegas: alpha is set only by the library/);
  assert.throws(() => bad({ limit: 'vegas', vegas: { beta: -1 } }), /options\.beta must be a number in \[0, /);
  const schema = JSON.stringify(routerConfigSchema());
  for (const k of [
    '"aimd"',
    '"vegas"',
    '"gradient2"',
    '"backoffRatio"',
    '"queueSize"',
    '"rttTolerance"',
    '"alpha"',
    '"threshold"',
    '"window"',
    '"windowSamples"',
  ])
    assert.ok(schema.includes(k), k);
  // Any adaptive limit runs on windows of samples when `window` is given.
  const windowed = buildDownstreams(
    downstreamSpecs(
      resolveRouterOptions({
        downstreams: [{ kind: 'ndjson', name: 'w', path: '-', limit: 'vegas', window: { windowSamples: 20 } }],
      }),
    ),
    null,
  );
  const w = windowed[0]!.limit;
  assert.ok(w instanceof WindowedLimit && w.inner instanceof VegasLimit);
  void windowed[0]!.sink.close();
  assert.throws(() => bad({ limit: 8, window: {} }), /window applies only to an adaptive limit, got the fixed limit 8/);
  assert.throws(() => bad({ window: { windowSize: 3 } }), /window: windowSize is not a windowed limit option/);
});

test('each thread gets the options tagged for it, and nothing it cannot clone', () => {
  const o = resolveRouterOptions({
    downstreams: [{ kind: 'callback', name: 'cb', callback: () => undefined }],
  } as RouterOptionsInput);
  const ingest = threadOptions(o, 'ingest');
  assert.ok('admission' in ingest && 'ingest' in ingest && 'listenHost' in ingest && 'crossMaxGapMs' in ingest);
  assert.ok(!('downstreams' in ingest) && !('adminToken' in ingest) && !('stateDir' in ingest));
  assert.doesNotThrow(() => structuredClone(ingest));
  const dispatcher = threadOptions(o, 'dispatcher');
  assert.deepEqual(Object.keys(dispatcher).sort(), ['deadLetter', 'downstreams']);
});

test('a webhook with request headers: every request a real server receives carries them, and the delivery contract holds', async () => {
  const traffic = cityTraffic({
    seed: 5,
    fences: 150,
    devices: 300,
    pingsPerDevice: 12,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  const http = new TriggerServer();
  await http.start();
  const dir = mkdtempSync(join(tmpdir(), 'gr-headers-'));
  // The server is stopped whatever happens, so a router that fails to start does not keep the test alive.
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: join(dir, 'state'),
    downstreams: [
      {
        name: 'hook',
        kind: 'webhook',
        url: http.url,
        headers: { 'X-Api-Key': 'k-123', Authorization: 'Bearer abc' },
        maxBatchTriggers: 16,
      },
    ],
    log: () => undefined,
  }).catch(async (err: unknown) => {
    await http.stop();
    throw err;
  });
  try {
    await sendPaced(router.ingestPort!, traffic, 20_000);
    await waitFor(() => router.stats().accepted === traffic.pings, 30_000, 'every ping read');
    const summary = await router.close();
    assert.equal(summary.processed, traffic.pings);
    assert.ok(summary.triggersTotal > 200, `${summary.triggersTotal} triggers`);
    assert.equal(summary.deadLettered, 0);
    assert.equal(summary.delivered, summary.triggersTotal);
    assert.equal(http.received.length, summary.triggersTotal, 'one delivery per trigger');
    assert.ok(http.requestHeaders.length > 10, `${http.requestHeaders.length} requests`);
    for (const h of http.requestHeaders) {
      assert.equal(h['x-api-key'], 'k-123');
      assert.equal(h['authorization'], 'Bearer abc');
      assert.equal(h['content-type'], 'application/json', 'the router still sets its own');
    }
    assert.deepEqual(checkDeliveryContract(http.received, { complete: true, stays: true }).problems, []);
  } finally {
    await router.close();
    await http.stop();
  }
});
