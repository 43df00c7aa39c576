/**
 * A signed HTTPS webhook end to end through the router's threads: the receiver (its certificate from a CA made
 * here, which the router is given as its CA bundle) checks the bearer token and verifies every signature with the
 * documented check, and answers 401 to anything else; every trigger arrives once, in per-device order. A request
 * replayed with a tampered body, or replayed after the replay window, is refused by the same check.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import * as https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { SIGNATURE_HEADER, SIGNATURE_TIMESTAMP_HEADER, verifyWebhookSignature, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { routerFor, runThrough, sinkTraffic } from '../support/sink-run.js';
import { makeCertificates } from '../support/tls-certs.js';

const SECRET = 'whsec-9f8e7d6c5b4a39281706f5e4d3c2b1a0';
const TOKEN = 'receiver-token-0123456789abcdef';

/** An HTTPS receiver that accepts only requests with the token and a valid signature. */
class VerifyingReceiver {
  readonly received: Trigger[] = [];
  readonly requests: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
  readonly refused: string[] = [];
  /** Added to the receiver's clock (a receiver checking a request long after it was signed). */
  clockAheadMs = 0;
  private readonly server: https.Server;
  port = 0;

  constructor(cert: string, key: string) {
    this.server = https.createServer({ cert, key }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const verdict =
          req.headers['authorization'] !== `Bearer ${TOKEN}`
            ? 'no token'
            : verifyWebhookSignature({
                secret: SECRET,
                body,
                timestamp: req.headers[SIGNATURE_TIMESTAMP_HEADER],
                signature: req.headers[SIGNATURE_HEADER],
                nowMs: Date.now() + this.clockAheadMs,
              });
        if (verdict !== 'ok') {
          this.refused.push(verdict);
          res.writeHead(401, { 'content-length': 0 }).end();
          return;
        }
        this.requests.push({ headers: req.headers, body });
        for (const t of JSON.parse(body.toString('utf8')) as Trigger[]) this.received.push(t);
        res.writeHead(200, { 'content-length': 0 }).end();
      });
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** POSTs `body` with `headers` to the receiver, trusting `ca`; resolves with the status. */
function post(port: number, ca: string, headers: IncomingHttpHeaders, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/hook',
        ca,
        headers: {
          authorization: headers['authorization'],
          'content-type': 'application/json',
          [SIGNATURE_TIMESTAMP_HEADER]: headers[SIGNATURE_TIMESTAMP_HEADER],
          [SIGNATURE_HEADER]: headers[SIGNATURE_HEADER],
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

test('a signed HTTPS webhook through the router: every request verified, every trigger once and in per-device order; a tampered body and an old timestamp are refused', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-https-'));
  const certs = makeCertificates(dir);
  const receiver = new VerifyingReceiver(certs.certPem, certs.keyPem);
  await receiver.start();
  t.after(() => receiver.stop());
  const traffic = sinkTraffic(5);
  const router = await routerFor(
    traffic,
    {
      name: 'signed',
      kind: 'webhook',
      url: `https://127.0.0.1:${receiver.port}/hook`,
      caFile: certs.caFile,
      bearerToken: TOKEN,
      signingSecret: SECRET,
    },
    join(dir, 'state'),
  );
  const summary = await runThrough(router, traffic, 10_000);
  assert.equal(summary.shedTotal, 0);
  assert.ok(summary.triggersTotal > 1000, `triggers: ${summary.triggersTotal}`);
  assert.equal(summary.deadLettered, 0, 'no dead letter');
  assert.deepEqual(receiver.refused, [], 'every request carried the token and a valid signature');
  assert.equal(receiver.received.length, summary.triggersTotal);
  assert.deepEqual(checkDeliveryContract(receiver.received, { complete: true, stays: true }).problems, []);

  // A captured request, replayed at once, passes (the receiver de-duplicates by deviceId and seq); tampered, it fails.
  const captured = receiver.requests[0]!;
  assert.equal(await post(receiver.port, certs.caPem, captured.headers, captured.body), 200);
  const tampered = Buffer.from(captured.body.toString('utf8').replace('"seq":1', '"seq":9'));
  assert.notDeepEqual(tampered, captured.body);
  assert.equal(await post(receiver.port, certs.caPem, captured.headers, tampered), 401);
  assert.deepEqual(receiver.refused, ['mismatch']);
  // The same request checked 6 minutes later: outside the 5-minute window.
  receiver.clockAheadMs = 6 * 60_000;
  assert.equal(await post(receiver.port, certs.caPem, captured.headers, captured.body), 401);
  assert.deepEqual(receiver.refused, ['mismatch', 'stale']);
  console.log(
    `signed https: ${summary.triggersTotal} triggers in ${receiver.requests.length - 1} verified requests, 0 refused; tampered and stale replays refused`,
  );
});
