/**
 * The TCP source over real sockets on 127.0.0.1: splits at every byte boundary (forced at the receiver), rejects
 * counted by reason with the stream continuing, many concurrent connections keeping per-device order, and the
 * connection limit.
 */
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { after, before, test } from 'node:test';
import {
  ConnectionDropReason,
  ING_BYTES_F64,
  ING_CONNECTIONS_CLOSED_F64,
  ING_CONNECTIONS_DROPPED_F64,
  ING_HELD_BYTES_F64,
  ING_CONNECTIONS_OPENED_F64,
  ING_CONNECTIONS_REFUSED_F64,
  RejectReason,
} from '../../src/shm/layout.js';
import { TcpSource } from '../../src/ingest/sources/tcp-source.js';
import { concat, makeEdge, mapPackr, openTcp as open, ping, recordPackr, until, type EdgeFixture } from './support.js';

async function closeAndWait(fx: EdgeFixture, s: Socket, closedBefore: number): Promise<void> {
  s.end();
  await until(() => fx.pipeline.f64[ING_CONNECTIONS_CLOSED_F64]! > closedBefore, 'connection close');
}

let fx: EdgeFixture;
let source: TcpSource;

before(async () => {
  fx = makeEdge({}, { maxDevices: 10_000 });
  source = new TcpSource({ host: '127.0.0.1', port: 0 });
  await source.start(fx.edge);
});

after(async () => {
  await source.stop();
});

test('frames split at every byte boundary over TCP decode identically', async () => {
  const script = concat([
    mapPackr.pack(ping('a', 1)),
    recordPackr.pack(ping('b', 2)),
    Buffer.from([0xc1, 0x00]),
    mapPackr.pack(ping(9, 3, { lon: 720 })),
    mapPackr.pack(ping('c', 4)),
  ]);
  const reference = makeEdge();
  reference.edge.ingest(script);
  const expected = reference.sink.pings.map((p) => [p.id, p.tsMs]);
  assert.equal(expected.length, 3);
  for (let k = 1; k < script.length; k++) {
    const start = fx.sink.pings.length;
    const bytesBefore = fx.pipeline.f64[ING_BYTES_F64]!;
    const closedBefore = fx.pipeline.f64[ING_CONNECTIONS_CLOSED_F64]!;
    const corruptBefore = fx.rejected(RejectReason.CORRUPT_FRAME);
    const lonBefore = fx.rejected(RejectReason.INVALID_LON);
    const s = await open(source.port);
    s.write(script.subarray(0, k));
    // Wait until the server has read exactly the first part, so the split really happens at the receiver.
    await until(() => fx.pipeline.f64[ING_BYTES_F64]! === bytesBefore + k, `first ${k} bytes`);
    s.write(script.subarray(k));
    await closeAndWait(fx, s, closedBefore);
    const got = fx.sink.pings.slice(start).map((p) => [p.id, p.tsMs]);
    assert.deepEqual(got, expected, `split at ${k}`);
    assert.equal(fx.rejected(RejectReason.CORRUPT_FRAME), corruptBefore + 1, `corrupt counted once, split at ${k}`);
    assert.equal(fx.rejected(RejectReason.INVALID_LON), lonBefore + 1, `invalid lon counted once, split at ${k}`);
  }
});

test('bad frames over TCP are counted by reason and the connection keeps decoding', async () => {
  const before = new Map<RejectReason, number>();
  const reasons = [
    RejectReason.CORRUPT_FRAME,
    RejectReason.OVERSIZED_FRAME,
    RejectReason.UNKNOWN_KEY,
    RejectReason.INVALID_LAT,
    RejectReason.INVALID_LON,
    RejectReason.ID_TOO_LONG,
    RejectReason.TRUNCATED_FRAME,
  ];
  for (const r of reasons) before.set(r, fx.rejected(r));
  const base = ping('x', 0);
  const parts = [
    mapPackr.pack(ping('ok-1', 1)),
    Buffer.from([0xc1, 0xff, 0xff]),
    mapPackr.pack(ping('ok-2', 2)),
    mapPackr.pack({ ...base, id: 'h'.repeat(100_000) }),
    mapPackr.pack(ping('ok-3', 3)),
    mapPackr.pack({ ...base, colour: 'red' }),
    mapPackr.pack(ping('ok-4', 4)),
    mapPackr.pack({ ...base, lat: Number.NaN }),
    mapPackr.pack({ ...base, lon: 181 }),
    mapPackr.pack({ ...base, id: 'i'.repeat(33) }),
    mapPackr.pack(ping('ok-5', 5)),
  ];
  const start = fx.sink.pings.length;
  const closedBefore = fx.pipeline.f64[ING_CONNECTIONS_CLOSED_F64]!;
  const s = await open(source.port);
  s.write(concat(parts));
  // A frame cut off by the connection's end is truncated.
  s.write(mapPackr.pack(ping('cut', 6)).subarray(0, 12));
  await closeAndWait(fx, s, closedBefore);
  assert.deepEqual(
    fx.sink.pings.slice(start).map((p) => p.id),
    ['ok-1', 'ok-2', 'ok-3', 'ok-4', 'ok-5'],
  );
  for (const r of reasons) assert.equal(fx.rejected(r), before.get(r)! + 1, `reason ${String(r)}`);
});

test('many concurrent connections keep each device in order', async () => {
  const conns = 40;
  const perConn = 200;
  const start = fx.sink.pings.length;
  const closedBefore = fx.pipeline.f64[ING_CONNECTIONS_CLOSED_F64]!;
  const sockets = await Promise.all(Array.from({ length: conns }, () => open(source.port)));
  // Interleave writes across connections in small pieces.
  const streams = sockets.map((_, c) =>
    concat(Array.from({ length: perConn }, (_, i) => mapPackr.pack(ping(`conn${c}`, i)))),
  );
  const longest = Math.max(...streams.map((b) => b.length));
  for (let off = 0; off < longest; off += 97) {
    for (let c = 0; c < conns; c++) sockets[c]!.write(streams[c]!.subarray(off, off + 97));
  }
  for (const s of sockets) s.end();
  await until(() => fx.pipeline.f64[ING_CONNECTIONS_CLOSED_F64]! >= closedBefore + conns, 'all connections closed');
  const got = fx.sink.pings.slice(start);
  assert.equal(got.length, conns * perConn);
  const lastTs = new Map<string | number, number>();
  for (const p of got) {
    assert.ok(p.tsMs > (lastTs.get(p.id) ?? 0), `order of ${String(p.id)}`);
    lastTs.set(p.id, p.tsMs);
  }
  assert.equal(lastTs.size, conns);
});

test('connections beyond the limit are refused and counted', async () => {
  const small = makeEdge();
  const src = new TcpSource({ host: '127.0.0.1', port: 0, maxConnections: 2 });
  await src.start(small.edge);
  const a = await open(src.port);
  const b = await open(src.port);
  await until(() => small.pipeline.f64[ING_CONNECTIONS_OPENED_F64] === 2, 'two accepted');
  const c = await open(src.port);
  await until(() => small.pipeline.f64[ING_CONNECTIONS_REFUSED_F64] === 1, 'third refused');
  await new Promise<void>((resolve) => {
    c.once('close', () => resolve());
  });
  a.destroy();
  b.destroy();
  await src.stop();
  assert.equal(src.connectionCount, 0);
});

test('a client trickling a frame is closed at the frame deadline, counted; other connections keep flowing', async () => {
  const small = makeEdge({}, { maxDevices: 100 });
  const src = new TcpSource({ host: '127.0.0.1', port: 0, frameDeadlineMs: 400 });
  await src.start(small.edge);
  const frame = mapPackr.pack(ping('slow', 1));
  const trickler = await open(src.port);
  const closed = new Promise<number>((resolve) => {
    const t0 = Date.now();
    trickler.once('close', () => resolve(Date.now() - t0));
  });
  trickler.on('error', () => undefined);
  // One byte every 100 ms: the frame would take seconds to complete.
  let i = 0;
  const drip = setInterval(() => {
    if (i < frame.length - 1 && !trickler.destroyed) trickler.write(frame.subarray(i, ++i));
  }, 100);
  const honest = await open(src.port);
  for (let k = 1; k <= 20; k++) {
    honest.write(mapPackr.pack(ping('honest', k)));
    await new Promise((r) => setTimeout(r, 30));
  }
  const closedAfterMs = await closed;
  clearInterval(drip);
  // Not before the deadline; the upper bound is loose: a late sweep (a loaded host) pushes the close back by its lateness.
  assert.ok(closedAfterMs >= 400 && closedAfterMs < 15_000, `closed after ${closedAfterMs} ms`);
  assert.equal(small.pipeline.f64[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.FRAME_DEADLINE], 1);
  await until(() => small.rejected(RejectReason.TRUNCATED_FRAME) === 1, 'the partial frame counted as truncated');
  await until(() => small.sink.pings.filter((p) => p.id === 'honest').length === 20, 'the honest connection delivered');
  assert.equal(small.sink.pings.filter((p) => p.id === 'slow').length, 0);
  honest.destroy();
  await src.stop();
});

test('partial frames across connections stay within maxHeldBytes: the oldest are closed, counted, and the gauge shows the bound', async () => {
  const small = makeEdge({ maxFrameBytes: 1 << 20 }, { maxDevices: 100 });
  const budget = 256 * 1024;
  const src = new TcpSource({ host: '127.0.0.1', port: 0, maxHeldBytes: budget, frameDeadlineMs: 0 });
  await src.start(small.edge);
  // Each client begins a 900 KB frame (a map whose id is a long string) and sends 100 KB of it.
  const big = mapPackr.pack({ id: 'x'.repeat(900_000), lat: 52.5, lon: 13.4, ts: 1.7e12 });
  const clients: Socket[] = [];
  let maxHeld = 0;
  for (let c = 0; c < 6; c++) {
    const s = await open(src.port);
    s.on('error', () => undefined);
    clients.push(s);
    s.write(big.subarray(0, 100_000));
    await until(() => small.pipeline.f64[ING_HELD_BYTES_F64]! > 0 || s.destroyed, 'held');
    await new Promise((r) => setTimeout(r, 50));
    maxHeld = Math.max(maxHeld, small.pipeline.f64[ING_HELD_BYTES_F64]!);
  }
  const dropped = small.pipeline.f64[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.HELD_BYTES]!;
  assert.ok(dropped >= 3, `closed over the budget: ${dropped}`);
  assert.ok(maxHeld <= budget, `held ${maxHeld} bytes, budget ${budget}`);
  assert.equal(
    clients[0]!.destroyed || (await new Promise((r) => setTimeout(() => r(clients[0]!.destroyed), 200))),
    true,
    'the oldest partial frame went first',
  );
  // A complete ping on a fresh connection is still taken.
  const honest = await open(src.port);
  honest.write(mapPackr.pack(ping('honest', 1)));
  await until(() => small.sink.pings.some((p) => p.id === 'honest'), 'an honest ping');
  for (const s of clients) s.destroy();
  honest.destroy();
  await src.stop();
  assert.equal(small.pipeline.f64[ING_HELD_BYTES_F64], 0, 'nothing held once every connection closed');
});

test('connections whose frames arrived split but complete hold nothing against maxHeldBytes: none is closed, and the gauge goes back to 0', async () => {
  const small = makeEdge({ maxFrameBytes: 16_384 }, { maxDevices: 1000 });
  const budget = 65_536;
  const src = new TcpSource({ host: '127.0.0.1', port: 0, maxHeldBytes: budget, frameDeadlineMs: 0 });
  await src.start(small.edge);
  const clients: Socket[] = [];
  const pingsPerClient = 401;
  for (let c = 0; c < 8; c++) {
    const s = await open(src.port);
    s.on('error', () => undefined);
    clients.push(s);
    // One frame split after 10 bytes, then its rest with 400 complete frames in one write (about 20 KB).
    const first = mapPackr.pack(ping(`c${c}`, 1));
    s.write(first.subarray(0, 10));
    await until(() => small.pipeline.f64[ING_HELD_BYTES_F64]! > 0, 'the split frame held');
    const rest = [first.subarray(10)];
    for (let k = 2; k <= pingsPerClient; k++) rest.push(mapPackr.pack(ping(`c${c}`, k)));
    s.write(concat(rest));
    await until(
      () => small.sink.pings.filter((p) => p.id === `c${c}`).length === pingsPerClient,
      `client ${c}'s pings taken`,
    );
  }
  assert.equal(small.pipeline.f64[ING_HELD_BYTES_F64], 0, 'no partial frame, nothing held');
  assert.equal(small.pipeline.f64[ING_CONNECTIONS_DROPPED_F64 + ConnectionDropReason.HELD_BYTES], 0, 'none closed');
  assert.ok(clients.every((s) => !s.destroyed));
  for (const s of clients) s.destroy();
  await src.stop();
});
