/**
 * Backpressure of pausable sources at the edge (src/ingest/backpressure.ts), over a real edge and real sockets with
 * a ring room the test controls: a feed hands the edge no more pings than the room holds, keeps the rest in order and
 * says when to pause and resume; a waiting feed polls on a timer without holding the event loop; a TCP listener with
 * `overload: 'backpressure'` pauses the connection instead of dropping anything, and its option is validated.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import {
  MIN_PING_FRAME_BYTES,
  PausableFeed,
  RoomWaiter,
  type PausableFeedHooks,
  type RingRoom,
} from '../../src/ingest/backpressure.js';
import { IngestEdge } from '../../src/ingest/ingest-edge.js';
import { NO_COMPLIANCE } from '../../src/ingest/lane-classifier.js';
import { RejectLog } from '../../src/ingest/reject-log.js';
import { TcpSource } from '../../src/ingest/sources/tcp-source.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';
import { ING_REJECTED_F64, REJECT_REASON_COUNT } from '../../src/shm/layout.js';
import { TELEMETRY_SHARED_STRUCTURES } from '../../src/ingest/wire-format.js';
import { concat, makeEdge, mapPackr, ping, recordPackr, type EdgeFixture } from './support.js';

/** A room the test sets, which checks on every look that the pings offered since the last look fit what it said. */
class CheckedRoom implements RingRoom {
  room = 0;
  looks = 0;
  worstOverrun = 0;
  private lastGranted = Number.MAX_SAFE_INTEGER;
  private lastCount = 0;
  constructor(private readonly offered: () => number) {}
  pings(): number {
    this.looks++;
    const n = this.offered();
    this.worstOverrun = Math.max(this.worstOverrun, n - this.lastCount - this.lastGranted);
    this.lastCount = n;
    this.lastGranted = this.room;
    return this.room;
  }
  empty(): boolean {
    return false;
  }
}

function rejectedTotal(fx: EdgeFixture): number {
  let n = 0;
  for (let r = 0; r < REJECT_REASON_COUNT; r++) n += fx.pipeline.f64[ING_REJECTED_F64 + r]!;
  return n;
}

test('MIN_PING_FRAME_BYTES is a lower bound of every frame encoding the edge accepts', () => {
  const minimal = { id: 1, lat: 0, lon: 0, ts: 0 };
  assert.ok(mapPackr.pack(minimal).length >= MIN_PING_FRAME_BYTES);
  assert.ok(recordPackr.pack(minimal).length >= MIN_PING_FRAME_BYTES);
  // A shared-structure record: a one-byte reference and the four values, one byte each at the least.
  assert.equal(TELEMETRY_SHARED_STRUCTURES[0]!.length + 1, MIN_PING_FRAME_BYTES);
});

test('a feed hands the edge no more pings than the room holds, keeps the rest in order, and resumes', async () => {
  const fx = makeEdge({}, { maxDevices: 1000 });
  const room = new CheckedRoom(() => fx.sink.pings.length);
  const waiter = new RoomWaiter(1);
  let resumes = 0;
  const feed = new PausableFeed(fx.edge.openStream('replay'), room, waiter, { onResume: () => resumes++ });
  // Maps and records, ids of every length, so frames run from short to long.
  const rnd = mulberry32(3);
  const objects = Array.from({ length: 3000 }, (_, i) =>
    ping(i % 7 === 0 ? `device-${'x'.repeat(i % 20)}-${i % 50}` : i % 50, i),
  );
  const bytes = concat(objects.map((o, i) => (i % 3 === 0 ? recordPackr : mapPackr).pack(o)));
  let refusals = 0;
  let off = 0;
  // The room changes at every poll: sometimes none, sometimes a little, sometimes plenty.
  const churn = setInterval(() => (room.room = [0, 1, 3, 17, 200][Math.floor(rnd() * 5)]!), 1);
  try {
    while (off < bytes.length) {
      const n = Math.min(bytes.length - off, 1 + Math.floor(rnd() * 4096));
      if (!feed.write(bytes.subarray(off, off + n))) {
        refusals++;
        const before = resumes;
        while (resumes === before) await new Promise((r) => setTimeout(r, 1));
      }
      off += n;
    }
    await feed.end();
  } finally {
    clearInterval(churn);
  }
  assert.ok(refusals > 0, 'the feed made the source pause');
  assert.equal(resumes, refusals, 'one resume per pause');
  assert.equal(room.worstOverrun <= 0, true, `pings offered beyond the room: ${room.worstOverrun}`);
  assert.equal(rejectedTotal(fx), 0, 'no frame was cut');
  assert.deepEqual(
    fx.sink.pings.map((p) => `${String(p.id)}@${p.tsMs}`),
    objects.map((o) => `${String(o['id'])}@${String(o['ts'])}`),
    'every ping, once, in order',
  );
});

test('a waiting feed polls on a timer: the event loop keeps running, and the feed resumes when room comes', async () => {
  const fx = makeEdge();
  const room = new CheckedRoom(() => fx.sink.pings.length);
  const feed = new PausableFeed(fx.edge.openStream('replay'), room, new RoomWaiter(1), {});
  const bytes = concat(Array.from({ length: 100 }, (_, i) => mapPackr.pack(ping('d', i))));
  assert.equal(feed.write(bytes), false);
  assert.equal(feed.keptBytes, bytes.length);
  const looksBefore = room.looks;
  // Timers and immediates run while the feed waits.
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setTimeout(r, 80));
  const waitedMs = performance.now() - t0;
  assert.ok(waitedMs < 1000, `the event loop ran (${waitedMs.toFixed(0)} ms for 100 ms of timers)`);
  // One look per poll (about one a millisecond), not a spin.
  const looks = room.looks - looksBefore;
  assert.ok(looks >= 2 && looks <= 200, `${looks} looks in ${waitedMs.toFixed(0)} ms`);
  assert.equal(fx.sink.pings.length, 0);
  room.room = 1000;
  await feed.end();
  assert.equal(fx.sink.pings.length, 100);
  assert.equal(feed.keptBytes, 0);
});

test('with endAfter, a partial frame at the end of a call counts as truncated and the next call decodes from scratch', async () => {
  const fx = makeEdge();
  const room = new CheckedRoom(() => fx.sink.pings.length);
  room.room = 2;
  const feed = new PausableFeed(fx.edge.openStream('in-process'), room, new RoomWaiter(1), {});
  const frames = Array.from({ length: 10 }, (_, i) => mapPackr.pack(ping('d', i)));
  const first = concat([...frames.slice(0, 5), frames[5]!.subarray(0, 7)]);
  feed.write(first, true);
  feed.write(concat(frames.slice(6)), true);
  const done = feed.end();
  const widen = setTimeout(() => (room.room = 100), 30);
  await done;
  clearTimeout(widen);
  assert.equal(fx.sink.pings.length, 9);
  assert.equal(rejectedTotal(fx), 1, 'the cut frame of the first call');
  assert.ok(room.worstOverrun <= 0);
});

/** An edge whose feeds wait on a room the test sets. */
class RoomEdge extends IngestEdge {
  room: RingRoom = { pings: () => 0, empty: () => false };
  override openFeed(name: string, hooks: PausableFeedHooks = {}): PausableFeed {
    return new PausableFeed(this.openStream(name), this.room, this.feedWaiter, hooks);
  }
}

test("a TCP listener with overload 'backpressure' pauses a connection while the rings are full and loses nothing", async () => {
  const base = makeEdge({}, { maxDevices: 1000 });
  const edge = new RoomEdge(
    {},
    {
      pipeline: base.pipeline,
      registry: base.registry,
      predicates: NO_COMPLIANCE,
      sink: base.sink,
      log: new RejectLog({ intervalMs: 0, nowMs: () => 0, write: () => undefined }),
    },
  );
  let room = 0;
  edge.room = { pings: () => room, empty: () => false };
  const source = new TcpSource({ host: '127.0.0.1', port: 0, overload: 'backpressure', idleTimeoutMs: 200 });
  await source.start(edge);
  // More than the loopback socket buffers hold, so a paused connection backs up to the sender.
  const count = 200_000;
  const bytes = concat(Array.from({ length: count }, (_, i) => mapPackr.pack(ping(i % 100, i))));
  const socket = connect({ host: '127.0.0.1', port: source.port });
  try {
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(bytes);
    // No room: nothing is fed, the socket is paused, and the sender's bytes back up (TCP flow control).
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(base.sink.pings.length, 0);
    assert.ok(socket.writableLength > 0, `the sender is held back (${socket.writableLength} bytes unsent)`);
    assert.equal(
      source.connectionCount,
      1,
      'a connection the router paused is not idle: the idle timeout did not close it',
    );
    room = 500;
    const end = Date.now() + 20_000;
    while (base.sink.pings.length < count && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
    assert.equal(socket.writableLength, 0, 'the sender could send everything');
  } finally {
    socket.destroy();
    room = Number.MAX_SAFE_INTEGER;
    await source.stop();
  }
  assert.equal(base.sink.pings.length, count, 'every ping arrived');
  assert.ok(
    base.sink.pings.every((p, i) => p.tsMs === (ping(i % 100, i)['ts'] as number)),
    'in order',
  );
  assert.equal(rejectedTotal(base), 0);
});

test('the overload option is validated with a message naming it', () => {
  assert.throws(
    () => new TcpSource({ overload: 'drop' as never }),
    /options\.overload must be "shed" or "backpressure", got drop/,
  );
});
