/**
 * Router options: defaults validate, bad options fail naming the option and range, config file + flags merge with
 * flags winning, --help text, unknown names refused.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { HELP_TEXT, optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { loadConfigFile } from '../../src/config/config-file.js';
import { ROUTER_DEFAULTS, resolveRouterOptions, type RouterOptionsInput } from '../../src/config/options.js';

test('defaults resolve and are sensible', () => {
  const o = resolveRouterOptions();
  assert.equal(o.adminHost, '127.0.0.1');
  assert.ok(o.batchSize >= 1);
  assert.ok(o.poolSize >= 1);
  assert.equal(o.admission.reservedFraction, 0.05);
  assert.deepEqual(o.downstreams, []);
  assert.notEqual(o.admission, ROUTER_DEFAULTS.admission, 'nested objects are copies');
});

test('bad options fail with the option and its range named', () => {
  const cases: [RouterOptionsInput, RegExp][] = [
    [{ shards: 0 }, /options\.shards must be an integer in \[1, 1024\], got 0$/],
    [{ ringCapacitySlots: 1000 }, /options\.ringCapacitySlots must be a power of two in \[64, 16777216\], got 1000/],
    [
      { admission: { reservedFraction: 0.7 } },
      /options\.admission\.reservedFraction must be a number in \[0, 0\.5\], got 0\.7/,
    ],
    [
      { admission: { watermarkFraction: 1.5 } },
      /options\.admission\.watermarkFraction must be a number in \[0, 1\], got 1\.5/,
    ],
    [
      { admission: { idleBucketRatePerSec: -1 } },
      /options\.admission\.idleBucketRatePerSec must be a number in \[0, 1000000000\], got -1/,
    ],
    [{ poolSize: 1.5 }, /options\.poolSize must be an integer in \[1, 256\], got 1\.5/],
    [{ containmentStallMs: 50 }, /options\.containmentStallMs must be an integer in \[100, 3600000\], got 50/],
    [{ listenPort: 70000 }, /options\.listenPort must be an integer in \[0, 65535\]/],
    [{ adminHost: '' }, /options\.adminHost must be a host name or address, or null/],
    [
      { deadLetter: { capacityRecords: 0 } },
      /options\.deadLetter\.capacityRecords must be an integer in \[1, 1048576\]/,
    ],
    [{ ingest: { maxFrameBytes: 8 } }, /options\.ingest\.maxFrameBytes must be an integer in \[16, 16777216\], got 8/],
    [{ ingest: { colour: 1 } as never }, /options\.ingest\.colour is not an option/],
    [{ bogus: 1 } as never, /options\.bogus is not an option/],
    [
      { downstreams: [{ name: 'a', kind: 'webhook', url: 'ftp://x' }] },
      /options\.downstreams\[0\]\.url must be an http/,
    ],
    [{ downstreams: [{ name: 'a', kind: 'carrier-pigeon' } as never] }, /options\.downstreams\[0\]\.kind must be/],
    [
      {
        downstreams: [
          { name: 'a', kind: 'ndjson', path: '-' },
          { name: 'a', kind: 'ndjson', path: 'x' },
        ],
      },
      /options\.downstreams\[1\]\.name must be unique/,
    ],
    [
      { downstreams: [{ name: 'a', kind: 'ndjson', path: '-', fsync: true }] },
      /options\.downstreams\[0\]\.fsync applies to a file, not to stdout \("-"\)/,
    ],
    [
      { downstreams: [{ name: 'a', kind: 'ndjson', path: '-', subscribe: { types: ['ENTER', 'LEAVE' as never] } }] },
      /options\.downstreams\[0\]\.subscribe\.types\[1\] must be one of "ENTER", "EXIT", "DWELL", "CROSS", got "LEAVE"/,
    ],
  ];
  for (const [input, re] of cases) assert.throws(() => resolveRouterOptions(input), re, JSON.stringify(input));
});

test('a callback downstream is accepted from the library', () => {
  const o = resolveRouterOptions({
    downstreams: [{ name: 'cb', kind: 'callback', callback: () => undefined, subscribe: { tags: ['depot'] } }],
  });
  assert.equal(o.downstreams[0]!.kind, 'callback');
});

test('config file then flags: flags override, nested objects merge, relative paths resolve', () => {
  const dir = mkdtempSync(join(tmpdir(), 'router-config-'));
  const file = join(dir, 'router.json');
  writeFileSync(
    file,
    JSON.stringify({
      shards: 4,
      fencesFile: 'fences.geojson',
      admission: { reservedFraction: 0.1, idleBucketCapacity: 50 },
      downstreams: [{ name: 'audit', kind: 'ndjson', path: 'out/triggers.ndjson', subscribe: { types: ['ENTER'] } }],
    }),
  );
  const o = optionsFromCli(
    parseCliArgs(['--config', file, '--shards', '16', '--reserved-fraction', '0.2', '--admin', '127.0.0.1:0']),
  );
  assert.equal(o.shards, 16);
  assert.equal(o.admission.reservedFraction, 0.2);
  assert.equal(o.admission.idleBucketCapacity, 50, 'file value kept where no flag');
  assert.equal(o.fencesFile, join(dir, 'fences.geojson'));
  assert.equal(o.adminPort, 0);
  assert.equal(o.downstreams.length, 1);
  assert.equal((o.downstreams[0] as { path: string }).path, join(dir, 'out/triggers.ndjson'));
  const replaced = optionsFromCli(
    parseCliArgs(['-c', file, '--webhook', 'http://127.0.0.1:8080/hook', '--ndjson', '-']),
  );
  assert.deepEqual(
    replaced.downstreams.map((d) => d.name),
    ['webhook-1', 'ndjson-1'],
    'flag downstreams replace the file list',
  );
});

test('bad flags and bad files are named', () => {
  assert.equal(optionsFromCli(parseCliArgs(['--containment-stall-ms', '2500'])).containmentStallMs, 2500);
  assert.throws(() => parseCliArgs(['--shards', 'many']), /--shards must be a number, got "many"/);
  assert.throws(() => parseCliArgs(['--listen', '7070']), /--listen must be HOST:PORT/);
  assert.throws(() => parseCliArgs(['--frobnicate']), /Unknown option '--frobnicate'.*see --help/);
  assert.throws(
    () => parseCliArgs(['--shards', '0']),
    /^OptionError: --shards must be an integer in \[1, 1024\], got 0$/,
  );
  const dir = mkdtempSync(join(tmpdir(), 'router-config-'));
  const bad = join(dir, 'bad.json');
  writeFileSync(bad, '{ "shards": ');
  assert.throws(() => loadConfigFile(bad), /config file .*bad\.json: not valid JSON/);
  writeFileSync(bad, '[1]');
  assert.throws(() => loadConfigFile(bad), /must hold a JSON object/);
  assert.throws(() => loadConfigFile(join(dir, 'missing.json')), /cannot read/);
  writeFileSync(bad, '{ "shard": 3 }');
  assert.throws(
    () => optionsFromCli(parseCliArgs(['-c', bad])),
    /^OptionError: config file .*bad\.json: shard is not an option$/,
  );
});

test('--help and --demo are reported, and the help text lists every flag', () => {
  const r = parseCliArgs(['--help', '--demo', '--no-listen', '--no-admin']);
  assert.equal(r.help, true);
  assert.equal(r.demo, true);
  assert.equal(r.overrides.listenHost, null);
  assert.equal(r.overrides.adminHost, null);
  for (const flag of [
    '--config',
    '--listen',
    '--admin',
    '--shards',
    '--ring-capacity',
    '--pool-size',
    '--batch-size',
    '--containment-stall-ms',
    '--max-devices',
    '--max-fences-per-device',
    '--fences',
    '--webhook',
    '--ndjson',
    '--state-dir',
    '--checkpoint-interval-ms',
    '--input',
    '--compliance-margin-m',
    '--reserved-fraction',
    '--watermark-fraction',
    '--idle-bucket-capacity',
    '--idle-bucket-rate',
    '--max-frame-bytes',
    '--shared-structures',
  ]) {
    assert.ok(HELP_TEXT.includes(flag), flag);
  }
});

test('gradient limit tuning per downstream: accepted, and bad names, values or a non-gradient limit are refused by name', () => {
  const ok = resolveRouterOptions({
    downstreams: [
      {
        name: 'hook',
        kind: 'webhook',
        url: 'http://127.0.0.1:9/x',
        gradient: { fastDecreaseRttRatio: 2, minLimit: 2 },
      },
    ],
  });
  assert.deepEqual(ok.downstreams[0]!.gradient, { fastDecreaseRttRatio: 2, minLimit: 2 });
  const bad = (gradient: unknown, limit?: unknown): void => {
    const d: Record<string, unknown> = { name: 'hook', kind: 'webhook', url: 'http://127.0.0.1:9/x', gradient };
    if (limit !== undefined) d['limit'] = limit;
    resolveRouterOptions({ downstreams: [d] } as unknown as RouterOptionsInput);
  };
  assert.throws(
    () => bad({ fastDecrease: 2 }),
    /options\.downstreams\[0\]\.gradient: fastDecrease is not a gradient limit option/,
  );
  assert.throws(() => bad({ fastDecreaseRttRatio: 0.5 }), /downstreams\[0\]\.gradient: options\.fastDecreaseRttRatio/);
  assert.throws(
    () => bad({ minLimit: 2 }, 'aimd'),
    /options\.downstreams\[0\]\.gradient applies only with limit "gradient"/,
  );
  assert.throws(() => bad(7), /gradient must be an object/);
});

test('dead-letter budgets: defaults, flags, and out-of-range values named', () => {
  const o = resolveRouterOptions({});
  assert.equal(o.deadLetter.maxBytesPerDownstream, 256 * 1024 * 1024);
  assert.equal(o.deadLetter.maxAgeMs, 7 * 24 * 3600 * 1000);
  const flags = parseCliArgs(['--dead-letter-max-bytes', '4194304', '--dead-letter-max-age-ms', '60000']).overrides;
  assert.deepEqual(flags.deadLetter, { maxBytesPerDownstream: 4194304, maxAgeMs: 60000 });
  const merged = resolveRouterOptions(flags);
  assert.equal(merged.deadLetter.capacityRecords, 4096, 'the other dead-letter options keep their defaults');
  assert.throws(
    () => resolveRouterOptions({ deadLetter: { maxBytesPerDownstream: 1000 } }),
    /options\.deadLetter\.maxBytesPerDownstream must be an integer in \[1048576, /,
  );
  assert.throws(
    () => resolveRouterOptions({ deadLetter: { maxAgeMs: 0 } }),
    /options\.deadLetter\.maxAgeMs must be an integer in \[1, /,
  );
  assert.match(HELP_TEXT, /--dead-letter-max-bytes N/);
  assert.match(HELP_TEXT, /--dead-letter-max-age-ms N/);
});
