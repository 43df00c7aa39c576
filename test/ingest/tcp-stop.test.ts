/**
 * Stopping the TCP source over real sockets: connections still presenting their token or in the TLS handshake are
 * ended with the live ones, so the stop does not wait for them (a client that authenticates once the stop has begun
 * is closed, and nothing it sends is read).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  ConnectionDropReason,
  ING_ACCEPTED_F64,
  ING_CONNECTIONS_DROPPED_F64,
  ING_CONNECTIONS_OPENED_F64,
} from '../../src/shm/layout.js';
import { TcpSource } from '../../src/ingest/sources/tcp-source.js';
import { makeCertificates } from '../support/tls-certs.js';
import { makeEdge, mapPackr, openTcp as open, ping, until } from './support.js';

const TOKEN = 'producer-token-0123456789abcdef';
/** Far past anything the test waits: a stop that needed the client to go away would show as 'hung'. */
const HUNG_AFTER_MS = 8000;

/** 'stopped' when `stop` resolves within HUNG_AFTER_MS, else 'hung'. */
function outcomeOf(stop: Promise<void>): Promise<'stopped' | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), HUNG_AFTER_MS)));
  return Promise.race([stop.then(() => 'stopped' as const), hung]).finally(() => clearTimeout(timer));
}

const closed = (s: Socket): Promise<void> => new Promise((resolve) => s.once('close', () => resolve()));

test('stop ends a connection still presenting its token; one that presents it after the stop began is not read', async () => {
  const fx = makeEdge({}, { maxDevices: 100 });
  const source = new TcpSource({ host: '127.0.0.1', port: 0, authToken: TOKEN, idleTimeoutMs: 600_000 });
  await source.start(fx.edge);
  const live = await open(source.port);
  live.on('error', () => undefined);
  live.write(`AUTH ${TOKEN}\n`);
  live.write(mapPackr.pack(ping('live', 0)));
  await until(() => fx.pipeline.f64[ING_ACCEPTED_F64] === 1, "the live connection's ping");
  const late = await open(source.port);
  late.on('error', () => undefined);
  const lateClosed = closed(late);
  const liveClosed = closed(live);

  const stop = source.stop();
  // The token and a ping arrive while the source stops, and the client keeps its end open.
  late.write(`AUTH ${TOKEN}\n`);
  late.write(mapPackr.pack(ping('late', 0)));
  assert.equal(await outcomeOf(stop), 'stopped');
  await Promise.all([lateClosed, liveClosed]);
  assert.equal(fx.pipeline.f64[ING_ACCEPTED_F64], 1, 'nothing of the late connection was taken');
  assert.equal(fx.pipeline.f64[ING_CONNECTIONS_OPENED_F64], 1, 'the late connection never opened');
  late.destroy();
  live.destroy();
});

test('stop ends a TLS connection still in its handshake', async () => {
  const certs = makeCertificates(mkdtempSync(join(tmpdir(), 'gr-tcp-stop-')));
  const fx = makeEdge({}, { maxDevices: 100 });
  const source = new TcpSource({
    host: '127.0.0.1',
    port: 0,
    idleTimeoutMs: 600_000,
    tls: { cert: readFileSync(certs.certFile), key: readFileSync(certs.keyFile), ca: null, requireClientCert: false },
  });
  await source.start(fx.edge);
  // A plain TCP client that sends the first bytes of a ClientHello and no more: the listener would otherwise wait
  // 10 s for the rest of its handshake.
  const raw = await open(source.port);
  raw.on('error', () => undefined);
  raw.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01]));
  await new Promise((r) => setTimeout(r, 100));
  const rawClosed = closed(raw);
  assert.equal(await outcomeOf(source.stop()), 'stopped');
  await rawClosed;
  assert.equal(
    fx.pipeline.f64[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.TLS_HANDSHAKE],
    0,
    'a handshake the stop ended is not counted as failed',
  );
  raw.destroy();
});
