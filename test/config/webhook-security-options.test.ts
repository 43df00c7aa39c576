/**
 * The webhook's security options from every side a user sets them: flags (secrets from files or the environment,
 * never from argv), the config file (a CA path relative to the file), the library, and the rules between them.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { loadConfigFile } from '../../src/config/config-file.js';
import { resolveRouterOptions } from '../../src/config/options.js';

const TOKEN = 'bearer-token-0123456789';
const SECRET = 'signing-secret-0123456789';

test('flags: the CA bundle, the connect timeout, and the token and secret read from files (or the environment)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wh-opts-'));
  writeFileSync(join(dir, 'token'), `${TOKEN}\n`);
  writeFileSync(join(dir, 'secret'), `${SECRET}\n`);
  const o = optionsFromCli(
    parseCliArgs([
      '--webhook',
      'https://127.0.0.1:9/a',
      '--webhook-ca-file',
      '/etc/ca.pem',
      '--webhook-connect-timeout-ms',
      '750',
      '--webhook-bearer-token-file',
      join(dir, 'token'),
      '--webhook-signing-secret-file',
      join(dir, 'secret'),
    ]),
  );
  const d = o.downstreams[0]!;
  assert.equal(d.kind, 'webhook');
  if (d.kind !== 'webhook') return;
  assert.equal(d.caFile, '/etc/ca.pem');
  assert.equal(d.connectTimeoutMs, 750);
  assert.equal(d.bearerToken, TOKEN);
  assert.equal(d.signingSecret, SECRET);
  const saved = process.env['GEOFENCE_WEBHOOK_SIGNING_SECRET'];
  process.env['GEOFENCE_WEBHOOK_SIGNING_SECRET'] = SECRET;
  try {
    const e = optionsFromCli(parseCliArgs(['--webhook', 'http://127.0.0.1:9/a'])).downstreams[0]!;
    assert.ok(e.kind === 'webhook' && e.signingSecret === SECRET && e.bearerToken === null);
  } finally {
    if (saved === undefined) delete process.env['GEOFENCE_WEBHOOK_SIGNING_SECRET'];
    else process.env['GEOFENCE_WEBHOOK_SIGNING_SECRET'] = saved;
  }
  assert.throws(
    () => parseCliArgs(['--webhook', 'http://x/', '--webhook-bearer-token-file', join(dir, 'missing')]),
    /^OptionError: --webhook-bearer-token-file: cannot read .*missing: ENOENT$/,
  );
});

test('rules: https: accepted, other schemes refused; a CA bundle needs https:; a bearer token and an authorization header exclude each other', () => {
  const ok = resolveRouterOptions({ downstreams: [{ kind: 'webhook', name: 'h', url: 'https://example.com/hook' }] });
  assert.equal(ok.downstreams[0]!.kind, 'webhook');
  assert.throws(
    () => resolveRouterOptions({ downstreams: [{ kind: 'webhook', name: 'h', url: 'ftp://example.com/' }] }),
    /options\.downstreams\[0\]\.url/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        downstreams: [{ kind: 'webhook', name: 'h', url: 'http://example.com/', caFile: '/etc/ca.pem' }],
      }),
    /options\.downstreams\[0\]\.caFile applies to an https: url only/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        downstreams: [
          {
            kind: 'webhook',
            name: 'h',
            url: 'https://example.com/',
            bearerToken: TOKEN,
            headers: { Authorization: 'Basic abc' },
          },
        ],
      }),
    /options\.downstreams\[0\]\.bearerToken and an authorization entry in options\.downstreams\[0\]\.headers both set/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        downstreams: [
          { kind: 'webhook', name: 'h', url: 'https://example.com/', headers: { 'X-Geofence-Signature': 'x' } },
        ],
      }),
    /headers/,
  );
});

test('config file: a relative caFile is relative to the file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wh-cfg-'));
  const file = join(dir, 'router.json');
  writeFileSync(
    file,
    JSON.stringify({
      downstreams: [{ kind: 'webhook', name: 'h', url: 'https://example.com/', caFile: 'certs/ca.pem' }],
    }),
  );
  const input = loadConfigFile(file);
  const d = (input.downstreams as { caFile?: string }[])[0]!;
  assert.equal(d.caFile, join(dir, 'certs', 'ca.pem'));
});
