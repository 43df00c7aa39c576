/**
 * The webhook sink's transport rules against real servers: https: with a CA bundle (and a TLS failure without it),
 * the bearer token and extra headers on every request, signatures a receiver verifies (and refuses when the body,
 * the timestamp or the secret differs), redirects not followed, and the two deadlines (connect, whole answer)
 * reported apart.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { WebhookSink } from '../../src/dispatch/sinks/webhook-sink.js';
import {
  signWebhook,
  SIGNATURE_HEADER,
  SIGNATURE_TIMESTAMP_HEADER,
  verifyWebhookSignature,
} from '../../src/dispatch/sinks/webhook-signature.js';
import { oneTriggerBatch } from './fixtures.js';
import { makeCertificates } from '../support/tls-certs.js';

const SECRET = 'whsec-0123456789abcdef0123456789abcdef';

interface Seen {
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** Starts `server` on 127.0.0.1, recording each request and answering with `answer`. */
async function listen(
  server: http.Server | https.Server,
  seen: Seen[],
  answer: (s: Seen, res: http.ServerResponse) => void = (_s, res) => res.writeHead(200).end(),
): Promise<number> {
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const s = { headers: req.headers, body };
      seen.push(s);
      answer(s, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

async function close(server: net.Server): Promise<void> {
  (server as http.Server).closeAllConnections?.();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

test('the signature is HMAC-SHA256 over "<timestamp>.<body>" (checked against openssl), and the check refuses what it should', () => {
  const body = '[{"deviceId":7,"seq":1}]';
  const ts = 1_790_000_000;
  const byOpenssl = execFileSync('openssl', ['dgst', '-sha256', '-hmac', SECRET, '-r'], {
    input: `${ts}.${body}`,
  })
    .toString()
    .split(' ')[0]!;
  assert.equal(signWebhook(SECRET, ts, body), `v1=${byOpenssl}`);
  const nowMs = ts * 1000 + 30_000;
  const sig = signWebhook(SECRET, ts, body);
  const check = (over: Partial<Parameters<typeof verifyWebhookSignature>[0]>): string =>
    verifyWebhookSignature({ secret: SECRET, body, timestamp: String(ts), signature: sig, nowMs, ...over });
  assert.equal(check({}), 'ok');
  assert.equal(check({ body: Buffer.from(body) }), 'ok', 'raw bytes as well as text');
  assert.equal(check({ body: body.replace('"seq":1', '"seq":2') }), 'mismatch', 'a tampered body');
  assert.equal(check({ timestamp: String(ts + 1) }), 'mismatch', 'a changed timestamp');
  assert.equal(check({ secret: `${SECRET}x` }), 'mismatch', 'another secret');
  assert.equal(check({ nowMs: ts * 1000 + 301_000 }), 'stale', 'older than the 5-minute window');
  assert.equal(check({ nowMs: ts * 1000 - 301_000 }), 'stale', 'from the future beyond the window');
  assert.equal(check({ nowMs: ts * 1000 + 301_000, toleranceS: 600 }), 'ok', 'a wider window');
  assert.equal(check({ signature: undefined }), 'missing');
  assert.equal(check({ timestamp: ['1', '2'] }), 'missing');
  assert.equal(check({ signature: 'v0=abc' }), 'malformed');
  assert.equal(check({ timestamp: '17e8' }), 'malformed');
});

test('https: with the CA bundle delivers, signed and with the bearer token and extra headers; without the bundle the TLS failure is reported as such', async (t) => {
  const certs = makeCertificates(mkdtempSync(join(tmpdir(), 'wh-tls-')));
  const seen: Seen[] = [];
  const server = https.createServer({ cert: certs.certPem, key: certs.keyPem });
  const port = await listen(server, seen);
  t.after(() => close(server));
  const url = `https://127.0.0.1:${port}/hook?x=1`;
  const sink = new WebhookSink({
    url,
    ca: certs.caPem,
    bearerToken: 'tok-abc',
    signingSecret: SECRET,
    headers: { 'x-api-key': 'k1' },
  });
  t.after(() => sink.close());
  const batch = oneTriggerBatch();
  for (let i = 0; i < 3; i++) assert.deepEqual(await sink.deliver(batch), { status: 200 });
  assert.equal(seen.length, 3);
  for (const s of seen) {
    assert.equal(s.headers['authorization'], 'Bearer tok-abc');
    assert.equal(s.headers['x-api-key'], 'k1');
    assert.equal(
      verifyWebhookSignature({
        secret: SECRET,
        body: s.body,
        timestamp: s.headers[SIGNATURE_TIMESTAMP_HEADER],
        signature: s.headers[SIGNATURE_HEADER],
      }),
      'ok',
    );
    assert.equal((JSON.parse(s.body) as { deviceId: number }[])[0]!.deviceId, 7);
  }
  const untrusting = new WebhookSink({ url });
  t.after(() => untrusting.close());
  assert.deepEqual(
    await untrusting.deliver(batch),
    { status: 0, error: 'tls' },
    'the system store does not know the CA',
  );
  assert.equal(seen.length, 3, 'nothing reached the server without a verified certificate');
  assert.throws(
    () => new WebhookSink({ url: 'http://127.0.0.1:1/', ca: certs.caPem }),
    /options\.ca applies to an https: URL only/,
  );
  assert.throws(() => new WebhookSink({ url: 'ftp://127.0.0.1/' }), /options\.url must be an http: or https: URL/);
  assert.throws(() => new WebhookSink({ url, bearerToken: 'a\nb' }), /options\.bearerToken must be a non-empty string/);
});

test('a redirect is not followed: the 302 comes back as the answer and its target receives nothing', async (t) => {
  const targetSeen: Seen[] = [];
  const target = http.createServer();
  const targetPort = await listen(target, targetSeen);
  const seen: Seen[] = [];
  const server = http.createServer();
  const port = await listen(server, seen, (_s, res) =>
    res.writeHead(302, { location: `http://127.0.0.1:${targetPort}/elsewhere` }).end(),
  );
  t.after(async () => {
    await close(server);
    await close(target);
  });
  const sink = new WebhookSink({ url: `http://127.0.0.1:${port}/` });
  t.after(() => sink.close());
  assert.deepEqual(await sink.deliver(oneTriggerBatch()), { status: 302 });
  assert.equal(seen.length, 1);
  assert.equal(targetSeen.length, 0);
});

test('two deadlines: a TLS handshake that never completes is a connect timeout; an answer trickled forever is an answer timeout', async (t) => {
  // Accepts TCP and never speaks: the TLS handshake cannot complete.
  const held = new Set<net.Socket>();
  const silent = net.createServer((socket) => {
    held.add(socket);
    socket.resume();
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  // Answers at once, then trickles one byte of body every 50 ms, forever: an idle timeout would never fire.
  const trickle = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-length': 1_000_000 });
    const timer = setInterval(() => res.write('x'), 50);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => trickle.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    trickle.closeAllConnections();
    await close(trickle);
    for (const socket of held) socket.destroy();
    await close(silent);
  });
  const tlsSink = new WebhookSink({
    url: `https://127.0.0.1:${(silent.address() as net.AddressInfo).port}/`,
    connectTimeoutMs: 200,
    timeoutMs: 60_000,
  });
  const slowSink = new WebhookSink({
    url: `http://127.0.0.1:${(trickle.address() as net.AddressInfo).port}/`,
    connectTimeoutMs: 60_000,
    timeoutMs: 400,
  });
  t.after(async () => {
    await tlsSink.close();
    await slowSink.close();
  });
  assert.deepEqual(await tlsSink.deliver(oneTriggerBatch()), { status: 0, error: 'connect-timeout' });
  assert.deepEqual(await slowSink.deliver(oneTriggerBatch()), { status: 0, error: 'timeout' });
});

test("the README's receiver snippet accepts what the router signs and refuses a tampered body and an old timestamp", async () => {
  const { readFileSync } = await import('node:fs');
  const { createHmac, timingSafeEqual } = await import('node:crypto');
  const readme = readFileSync(join(import.meta.dirname, '..', '..', '..', 'README.md'), 'utf8');
  const block =
    /```js\n(import \{ createHmac, timingSafeEqual \} from 'node:crypto';\n\nfunction verified[\s\S]*?)```/.exec(
      readme,
    );
  assert.ok(block !== null, 'the README has the snippet');
  const source = block[1]!.replace(/^import .*\n/, '');
  type Verified = (req: { headers: Record<string, string> }, raw: Buffer, secret: string) => boolean;
  const verified = new Function('createHmac', 'timingSafeEqual', `${source}\nreturn verified;`)(
    createHmac,
    timingSafeEqual,
  ) as Verified;
  const body = Buffer.from('[{"deviceId":7,"seq":1}]');
  const ts = Math.floor(Date.now() / 1000);
  const headers = { [SIGNATURE_TIMESTAMP_HEADER]: String(ts), [SIGNATURE_HEADER]: signWebhook(SECRET, ts, body) };
  assert.equal(verified({ headers }, body, SECRET), true);
  assert.equal(verified({ headers }, Buffer.from('[{"deviceId":7,"seq":2}]'), SECRET), false, 'tampered');
  const old = ts - 400;
  const oldHeaders = { [SIGNATURE_TIMESTAMP_HEADER]: String(old), [SIGNATURE_HEADER]: signWebhook(SECRET, old, body) };
  assert.equal(verified({ headers: oldHeaders }, body, SECRET), false, 'outside the window');
  assert.equal(verified({ headers }, body, `${SECRET}x`), false, 'another secret');
});
