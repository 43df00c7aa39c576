/**
 * Authenticated, encrypted ingest through the real binary: a CA and a certificate generated here (openssl), the listener on
 * TLS with a producer token, triggers delivered end to end to a real webhook under the delivery contract; a
 * plain-TCP client and a TLS client with a wrong token are refused and counted, and pings they sent are not taken.
 * Also: a non-loopback bind without TLS or a token refuses to start, naming the options; the admin server's
 * mutating route needs its token.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { makeCertificates } from '../support/tls-certs.js';
import { frameOf, square, TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess, hasLogLine, runCli } from './support.js';

const TOKEN = 'producer-token-0123456789abcdef';
const ADMIN_TOKEN = 'admin-token-0123456789abcdef';

/** Frames of `devices` devices each moving into square A and out again (ENTER then EXIT each). */
function traffic(prefix: string, devices: number): Buffer {
  const out: Buffer[] = [];
  for (let k = 0; k < 3; k++) {
    for (let d = 0; d < devices; d++)
      out.push(frameOf({ id: `${prefix}${d}`, eastM: k === 1 ? 0 : -400, northM: 0, dtMs: k * 1000 + d }));
  }
  return Buffer.concat(out);
}

async function scrape(port: number): Promise<string> {
  return (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
}

/** Value of one series (`name{labels}` exactly as exposed) in a Prometheus text exposition. */
function valueOf(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  if (line === undefined) throw new Error(`no ${series} in the exposition`);
  return Number(line.slice(series.length + 1));
}

test('TLS ingest with a producer token delivers end to end; plain TCP and a wrong token are refused and counted', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-tls-'));
  const certs = makeCertificates(dir);
  const cert = certs.certFile;
  const key = certs.keyFile;
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${TOKEN}\n`);
  const hook = new TriggerServer();
  await hook.start();
  const p = new CliProcess(
    [
      '--fences',
      fences,
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
      '--tls-cert',
      cert,
      '--tls-key',
      key,
      '--ingest-token-file',
      tokenFile,
      '--webhook',
      `http://127.0.0.1:${hook.port}/`,
      '--state-dir',
      join(dir, 'state'),
    ],
    60_000,
    dir,
  );
  await p.waitFor(
    'ports',
    (x) => /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr) && /admin http:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr),
  );
  const port = Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
  const admin = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);

  // A producer over TLS (verifying the server's certificate) with the token: 40 devices, an ENTER and an EXIT each.
  const good = tlsConnect({ host: '127.0.0.1', port, ca: [certs.caPem], servername: 'localhost' });
  await new Promise<void>((resolve, reject) => {
    good.once('secureConnect', resolve);
    good.once('error', reject);
  });
  good.write(`AUTH ${TOKEN}\n`);
  good.write(traffic('good', 40));
  // A plain-TCP client on the TLS port, and a TLS client with a wrong token, both sending pings of other devices.
  const plain = netConnect({ host: '127.0.0.1', port });
  plain.on('error', () => undefined);
  plain.write(traffic('plain', 5));
  const wrong = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
  wrong.on('error', () => undefined);
  await new Promise<void>((resolve) => wrong.once('secureConnect', () => resolve()));
  wrong.write(`AUTH not-the-token-at-all-xx\n`);
  wrong.write(traffic('wrong', 5));
  await waitFor(() => hook.received.length >= 80, 20_000, '80 triggers at the webhook');
  const m = await scrape(admin);
  assert.equal(valueOf(m, 'geofence_ingest_connections_dropped_total{reason="unauthenticated"}'), 1, 'the wrong token');
  assert.equal(
    valueOf(m, 'geofence_ingest_connections_dropped_total{reason="tls_handshake"}'),
    1,
    'the plain-TCP client',
  );
  good.end();
  p.child.kill('SIGTERM');
  const exit = await p.exited;
  await hook.stop();
  assert.equal(exit.code, 0, p.stderr);
  assert.equal(hook.received.length, 80);
  assert.ok(
    hook.received.every((t) => String(t.deviceId).startsWith('good')),
    'no ping of a refused connection was taken',
  );
  const report = checkDeliveryContract(hook.received, { complete: true, stays: true });
  assert.deepEqual(report.problems, []);
  assert.equal(report.devices, 40);
});

test('a non-loopback bind without TLS or a token refuses to start, naming the options; --allow-unauthenticated starts with a warning', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-bind-'));
  const r = await runCli(['--listen', '0.0.0.0:0', '--no-admin', '--state-dir', join(dir, 'state')]);
  assert.notEqual(r.code, 0);
  assert.match(
    r.stderr,
    /options\.listenHost 0\.0\.0\.0 is not a loopback address.*options\.ingest\.tls.*options\.ingest\.authToken.*--allow-unauthenticated/,
  );
  const a = await runCli(['--no-listen', '--admin', '0.0.0.0:0', '--state-dir', join(dir, 'state')]);
  assert.notEqual(a.code, 0);
  assert.match(a.stderr, /options\.adminHost 0\.0\.0\.0 is not a loopback address.*options\.adminToken/);
  const p = new CliProcess(
    ['--listen', '0.0.0.0:0', '--no-admin', '--allow-unauthenticated', '--state-dir', join(dir, 'state2')],
    30_000,
    dir,
  );
  await p.waitFor('the warning', (x) =>
    hasLogLine(x.stderr, 'warn', /^the telemetry listener on 0\.0\.0\.0 takes pings from anyone/),
  );
  p.child.kill('SIGTERM');
  assert.equal((await p.exited).code, 0);
});

test('admin: the reload route needs the bearer token; a large body is refused; answers carry no file path; reloads are rate limited', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-admin-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const tokenFile = join(dir, 'admin-token');
  writeFileSync(tokenFile, ADMIN_TOKEN);
  const p = new CliProcess(
    [
      '--fences',
      fences,
      '--no-listen',
      '--admin',
      '127.0.0.1:0',
      '--admin-token-file',
      tokenFile,
      '--state-dir',
      join(dir, 'state'),
    ],
    60_000,
    dir,
  );
  await p.waitFor('the admin port', (x) => /admin http:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr));
  const admin = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
  const url = `http://127.0.0.1:${admin}/admin/reload-fences`;
  const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
  assert.equal((await fetch(url, { method: 'POST' })).status, 401, 'no token');
  assert.equal(
    (await fetch(url, { method: 'POST', headers: { authorization: 'Bearer wrong-token-wrong-token' } })).status,
    401,
    'a wrong token',
  );
  assert.equal(
    (await fetch(url, { method: 'POST', headers: auth, body: Buffer.alloc(1 << 20) })).status,
    413,
    'a 1 MiB body',
  );
  assert.equal((await fetch(`http://127.0.0.1:${admin}/metrics`)).status, 200, 'reads need no token');
  const ok = await fetch(url, { method: 'POST', headers: auth });
  assert.equal(ok.status, 200, await ok.clone().text());
  // A file that no longer parses: the failure names no path.
  writeFileSync(fences, '{ not json');
  const failed = await fetch(url, { method: 'POST', headers: auth });
  const body = await failed.text();
  assert.equal(failed.status, 500);
  assert.ok(!body.includes(dir), `no path in ${body}`);
  // The bucket allows 12 a minute: 2 taken, the rest of a burst of 20 is refused with Retry-After.
  const statuses: number[] = [];
  for (let i = 0; i < 20; i++) statuses.push((await fetch(url, { method: 'POST', headers: auth })).status);
  assert.ok(statuses.filter((s) => s === 429).length >= 8, statuses.join(','));
  const m = await scrape(admin);
  assert.equal(valueOf(m, 'geofence_admin_requests_refused_total{reason="unauthorized"}'), 2);
  assert.ok(valueOf(m, 'geofence_admin_requests_refused_total{reason="rate_limited"}') >= 8);
  assert.ok(valueOf(m, 'geofence_admin_requests_refused_total{reason="body_too_large"}') >= 1);
  p.child.kill('SIGTERM');
  await p.exited;
});
