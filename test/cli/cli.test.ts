/**
 * The binary as a real child process: --help, bad flags, a bad config file and a bad GeoJSON file exit non-zero
 * naming the problem; a config file's options are applied.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCli } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'geofence-cli-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

test('--help exits 0 and lists the flags', async () => {
  const r = await runCli(['--help']);
  assert.equal(r.code, 0, r.stderr);
  for (const flag of [
    '--config',
    '--demo',
    '--demo-seconds',
    '--demo-devices',
    '--listen',
    '--admin',
    '--fences',
    '--webhook',
    '--ndjson',
    '--shards',
    '--pool-size',
    '--help',
  ]) {
    assert.ok(r.stdout.includes(flag), `--help lists ${flag}`);
  }
  assert.match(r.stdout, /SIGHUP/);
});

test('bad flags exit 2 with a message naming the flag', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['--no-such-flag'], /no-such-flag/],
    [['--shards', 'many'], /--shards must be a number/],
    [['--listen', 'nowhere'], /--listen must be HOST:PORT/],
    [['--demo-seconds', '3'], /--demo-seconds needs --demo/],
    [['--demo', '--demo-devices', '0'], /--demo-devices must be an integer in \[1, 1000000\]/],
    [['--shards', '0', '--no-listen', '--no-admin'], /: --shards must be an integer in \[1, 1024\], got 0$/m],
  ];
  for (const [args, message] of cases) {
    const r = await runCli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
    assert.match(r.stderr, /^geofence-router: /);
  }
});

test('a bad config file exits 2 naming the file and the problem', async () => {
  const missing = join(dir, 'absent.json');
  const cases: Array<[string, RegExp]> = [
    [missing, new RegExp(`config file ${missing}: cannot read`)],
    [file('broken.json', '{"shards": 4,'), /config file .*broken\.json: not valid JSON/],
    [file('array.json', '[1, 2]'), /config file .*array\.json: must hold a JSON object/],
    [file('unknown.json', '{"shardz": 4}'), /config file .*unknown\.json: shardz is not an option$/m],
    [
      file('range.json', '{"admission": {"reservedFraction": 0.7}}'),
      /config file .*range\.json: admission\.reservedFraction must be a number in \[0, 0\.5\], got 0\.7$/m,
    ],
  ];
  for (const [path, message] of cases) {
    const r = await runCli(['--config', path, '--no-listen', '--no-admin']);
    assert.equal(r.code, 2, `${path}: ${r.stderr}`);
    assert.match(r.stderr, message, path);
  }
});

test('a bad GeoJSON fences file exits 1 naming the file, the feature and the reason', async () => {
  const noGeometry = file(
    'no-geometry.geojson',
    JSON.stringify({ type: 'FeatureCollection', features: [{ type: 'Feature', properties: { id: 'a' } }] }),
  );
  let r = await runCli(['--fences', noGeometry, '--no-listen', '--no-admin']);
  assert.equal(r.code, 1, r.stderr);
  assert.ok(r.stderr.includes(noGeometry), r.stderr);
  assert.match(r.stderr, /feature 0: .*geometry/);

  const notJson = file('not-json.geojson', 'type: FeatureCollection');
  r = await runCli(['--fences', notJson, '--no-listen', '--no-admin']);
  assert.equal(r.code, 1, r.stderr);
  assert.ok(r.stderr.includes(notJson), r.stderr);

  const notCollection = file('not-collection.geojson', JSON.stringify({ type: 'Feature' }));
  r = await runCli(['--fences', notCollection, '--no-listen', '--no-admin']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /feature collection/);
});

test('a config file with valid options and fences starts, replays its input and drains cleanly', async () => {
  const fences = file(
    'fences.geojson',
    JSON.stringify({
      type: 'FeatureCollection',
      features: [
        {
          type: 'Feature',
          properties: { id: 'depot' },
          geometry: {
            type: 'Polygon',
            coordinates: [
              [
                [13.4, 52.5],
                [13.41, 52.5],
                [13.41, 52.51],
                [13.4, 52.51],
                [13.4, 52.5],
              ],
            ],
          },
        },
      ],
    }),
  );
  // An input file that is empty: the run ends when it has been read (no listener).
  const input = file('empty.msgpack', '');
  const config = file(
    'config.json',
    JSON.stringify({
      fencesFile: 'fences.geojson',
      shards: 2,
      inputs: ['empty.msgpack'],
      listenHost: null,
      adminHost: null,
    }),
  );
  const r = await runCli(['--config', config]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /drained cleanly/);
  assert.match(r.stderr, /inputs read: draining/);
  assert.ok(fences.length > 0 && input.length > 0);
});
