/**
 * Frame decoding through the real edge (in-process streams): plain maps, inline records, shared-structure records,
 * every reject reason counted, resynchronisation after structural damage, and byte-boundary splits.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Packr } from 'msgpackr';
import {
  ING_ACCEPTED_F64,
  ING_FRAMES_F64,
  ING_RESYNCS_F64,
  ING_RESYNC_SKIPPED_BYTES_F64,
  REJECT_REASON_COUNT,
  RejectReason,
} from '../../src/shm/layout.js';
import { TELEMETRY_SHARED_STRUCTURES, telemetrySharedStructures } from '../../src/ingest/wire-format.js';
import { concat, makeEdge, mapPackr, ping, recordPackr, type EdgeFixture } from './support.js';
import { FrameDecoder, PING_VALID } from '../../src/ingest/frame-decoder.js';

const TS = 1_735_689_600_000;

test('plain maps and inline records decode to the same pings', () => {
  const a = makeEdge();
  const b = makeEdge();
  const objs = [ping('dev-1', 1), ping(42, 2, { heading: 90, accuracy: 3.5, lane: 'idle' }), ping('dev-2', 3)];
  a.edge.ingest(concat(objs.map((o) => mapPackr.pack(o))));
  b.edge.ingest(concat(objs.map((o) => recordPackr.pack(o))));
  assert.equal(a.sink.pings.length, 3);
  assert.deepEqual(a.sink.pings, b.sink.pings);
  assert.equal(a.sink.pings[1]!.id, 42);
  assert.equal(a.sink.pings[1]!.lane, 0, 'explicit lane idle honoured');
  // The inline-record encoder really wrote records (fixext1 type 0x72), not maps.
  const rec = recordPackr.pack(objs[0]!);
  assert.equal(rec[0], 0xd4);
  assert.equal(rec[1], 0x72);
});

test('shared-structure records decode when the mode is on, and are not maps when it is off', () => {
  const sender = new Packr({
    structures: telemetrySharedStructures(),
    maxSharedStructures: TELEMETRY_SHARED_STRUCTURES.length,
  });
  const frames = [ping('s-1', 1), { id: 's-2', lat: 1, lon: 2, ts: TS }].map((o) => sender.pack(o));
  assert.ok(
    frames.every((f) => f[0]! >= 0x40 && f[0]! < 0x44),
    'frames start with a shared reference byte',
  );
  const on = makeEdge({ sharedStructures: true });
  on.edge.ingest(concat(frames));
  assert.deepEqual(
    on.sink.pings.map((p) => p.id),
    ['s-1', 's-2'],
  );
  // Maps and inline records still work in shared mode.
  on.edge.ingest(concat([mapPackr.pack(ping('m', 1)), recordPackr.pack(ping('r', 1))]));
  assert.deepEqual(
    on.sink.pings.map((p) => p.id),
    ['s-1', 's-2', 'm', 'r'],
  );
  const off = makeEdge();
  off.edge.ingest(frames[0]!);
  assert.equal(off.sink.pings.length, 0);
  assert.equal(off.rejected(RejectReason.NOT_A_MAP), 1);
});

/** One frame per reject reason reachable from bytes, each followed by a valid frame. */
function badFrames(): { reason: RejectReason; bytes: Buffer }[] {
  const p = (o: unknown): Buffer => mapPackr.pack(o);
  const base = ping('x', 0);
  const truncated = p(ping('t', 0)).subarray(0, 10);
  return [
    { reason: RejectReason.CORRUPT_FRAME, bytes: Buffer.from([0xc1, 0xc1, 0x00]) },
    { reason: RejectReason.OVERSIZED_FRAME, bytes: p({ ...base, id: 'y'.repeat(5000) }) },
    { reason: RejectReason.NOT_A_MAP, bytes: p([1, 2, 3]) },
    { reason: RejectReason.UNKNOWN_KEY, bytes: p({ ...base, altitude: 30 }) },
    { reason: RejectReason.UNSUPPORTED_VALUE, bytes: p({ ...base, lat: [1, 2] }) },
    { reason: RejectReason.MISSING_ID, bytes: p({ lat: 1, lon: 2, ts: TS }) },
    { reason: RejectReason.INVALID_ID, bytes: p({ ...base, id: -5 }) },
    { reason: RejectReason.INVALID_ID, bytes: p({ ...base, id: '' }) },
    { reason: RejectReason.ID_TOO_LONG, bytes: p({ ...base, id: 'z'.repeat(200) }) },
    { reason: RejectReason.INVALID_LAT, bytes: p({ ...base, lat: Number.NaN }) },
    { reason: RejectReason.INVALID_LAT, bytes: p({ ...base, lat: 90.5 }) },
    { reason: RejectReason.INVALID_LON, bytes: p({ ...base, lon: -181 }) },
    { reason: RejectReason.INVALID_LON, bytes: p({ ...base, lon: 'east' }) },
    { reason: RejectReason.INVALID_TS, bytes: p({ ...base, ts: -1 }) },
    { reason: RejectReason.INVALID_SPEED, bytes: p({ ...base, speed: -3 }) },
    { reason: RejectReason.INVALID_HEADING, bytes: p({ ...base, heading: 400 }) },
    { reason: RejectReason.INVALID_ACCURACY, bytes: p({ ...base, accuracy: Number.POSITIVE_INFINITY }) },
    { reason: RejectReason.INVALID_LANE, bytes: p({ ...base, lane: 'urgent' }) },
    // A frame cut short inside the stream swallows the next frame's first bytes: the walk fails there.
    { reason: RejectReason.UNKNOWN_KEY, bytes: truncated },
  ];
}

test('every bad frame is rejected and counted by reason, and the next valid frame still decodes', () => {
  for (const { reason, bytes } of badFrames()) {
    const fx = makeEdge({}, { idBytes: 64 });
    const stream = fx.edge.openStream('test');
    stream.write(concat([mapPackr.pack(ping('before', 1)), bytes, mapPackr.pack(ping('after', 2))]));
    stream.end();
    const name = `reason ${String(reason)} (${bytes.subarray(0, 8).toString('hex')})`;
    assert.deepEqual(
      fx.sink.pings.map((p) => p.id),
      ['before', 'after'],
      name,
    );
    for (let r = 0; r < REJECT_REASON_COUNT; r++) {
      assert.equal(fx.rejected(r as RejectReason), r === reason ? 1 : 0, `${name}: count of reason ${String(r)}`);
    }
    assert.equal(fx.pipeline.f64[ING_FRAMES_F64], 3, name);
    assert.equal(fx.pipeline.f64[ING_ACCEPTED_F64], 2, name);
    assert.equal(fx.logLines.length, 1, name);
  }
});

test('a frame left incomplete at the end of a stream is counted as truncated', () => {
  const fx = makeEdge();
  const whole = mapPackr.pack(ping('a', 1));
  fx.edge.ingest(concat([whole, whole.subarray(0, whole.length - 3)]));
  assert.equal(fx.sink.pings.length, 1);
  assert.equal(fx.rejected(RejectReason.TRUNCATED_FRAME), 1);
});

test('garbage between frames costs one reject and the stream resynchronises', () => {
  const fx = makeEdge();
  let seed = 12345;
  const rnd = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 24;
  const garbage = Buffer.alloc(2000);
  for (let i = 0; i < garbage.length; i++) garbage[i] = rnd();
  garbage[0] = 0xc1;
  const frames: Buffer[] = [];
  for (let i = 0; i < 50; i++) frames.push(mapPackr.pack(ping(`d${i % 5}`, i)));
  const stream = fx.edge.openStream('test');
  stream.write(concat([...frames.slice(0, 25), garbage, ...frames.slice(25)]));
  stream.end();
  const ids = fx.sink.pings.map((p) => `${String(p.id)}@${p.tsMs}`);
  const expected = frames.map((_, i) => `d${i % 5}@${TS + i * 1000}`);
  // Every valid frame decodes (random garbage may rarely hold a plausible frame of its own; this seed has none).
  assert.deepEqual(ids, expected);
  assert.equal(fx.pipeline.f64[ING_RESYNCS_F64], 1);
  assert.equal(fx.rejected(RejectReason.CORRUPT_FRAME), 1);
});

/** A ping map whose keys are str8-encoded (as some encoders write every string): id, lat, lon, ts. */
function str8KeyFrame(id: string, i: number): Buffer {
  const key = (k: string): Buffer => Buffer.concat([Buffer.from([0xd9, k.length]), Buffer.from(k)]);
  const f64 = (v: number): Buffer => {
    const b = Buffer.alloc(9);
    b[0] = 0xcb;
    b.writeDoubleBE(v, 1);
    return b;
  };
  return Buffer.concat([
    Buffer.from([0x84]),
    key('id'),
    Buffer.from([0xa0 | id.length]),
    Buffer.from(id),
    key('lat'),
    f64(52.5 + i * 1e-4),
    key('lon'),
    f64(13.4),
    key('ts'),
    f64(TS + i * 1000),
  ]);
}

test('a stream whose keys are str8-encoded resynchronises on its frames after damage: one reject, every frame after it decoded', () => {
  const fx = makeEdge();
  const frames = Array.from({ length: 103 }, (_, i) => str8KeyFrame(`d${i % 5}`, i));
  const stream = fx.edge.openStream('test');
  stream.write(concat([...frames.slice(0, 3), Buffer.from([0xc1]), ...frames.slice(3)]));
  stream.end();
  assert.equal(fx.sink.pings.length, 103, 'every frame decoded');
  assert.equal(fx.rejected(RejectReason.CORRUPT_FRAME), 1);
  assert.equal(fx.pipeline.f64[ING_RESYNCS_F64], 1);
});

/** Feeds `all` split in two at every byte: the pings and every counter are those of `reference` (fed it whole). */
function sameAtEverySplit(all: Buffer, reference: EdgeFixture): void {
  for (let k = 1; k < all.length; k++) {
    const fx = makeEdge();
    const s = fx.edge.openStream('split');
    s.write(all.subarray(0, k));
    s.write(all.subarray(k));
    s.end();
    assert.deepEqual(fx.sink.pings, reference.sink.pings, `split at ${k}`);
    assert.deepEqual(Array.from(fx.pipeline.f64), Array.from(reference.pipeline.f64), `counters, split at ${k}`);
  }
}

test('a stream split at every byte boundary decodes identically', () => {
  const frames = [
    mapPackr.pack(ping('a', 1)),
    recordPackr.pack(ping('b', 2)),
    Buffer.from([0xc1]),
    mapPackr.pack(ping(77, 3, { lat: 95 })),
    mapPackr.pack(ping('c', 4, { heading: 10, accuracy: 2, lane: 2 })),
  ];
  const all = concat(frames);
  const reference = makeEdge();
  reference.edge.ingest(all);
  assert.equal(reference.sink.pings.length, 3);
  sameAtEverySplit(all, reference);
  // One byte at a time.
  const fx = makeEdge();
  const s = fx.edge.openStream('bytes');
  for (let i = 0; i < all.length; i++) s.write(all.subarray(i, i + 1));
  s.end();
  assert.deepEqual(fx.sink.pings, reference.sink.pings);
});

test('frames with unknown keys or nested values, and a frame cut short, decode the same at every split', () => {
  const frames = [
    mapPackr.pack({ alt: 12, ...ping('a', 1) }),
    recordPackr.pack({ ...ping('b', 2), meta: { battery: 80, sats: [1, 2] } }),
    // Cut short inside the stream: it runs on into the next frame, which must still be found.
    mapPackr.pack(ping('t', 5)).subarray(0, 10),
    mapPackr.pack(ping('c', 3)),
    mapPackr.pack({ ...ping('d', 4), ts: new Date(TS) }),
    mapPackr.pack(ping('e', 5)),
  ];
  const all = concat(frames);
  const reference = makeEdge();
  reference.edge.ingest(all);
  assert.deepEqual(
    reference.sink.pings.map((p) => p.id),
    ['c', 'e'],
  );
  assert.equal(reference.rejected(RejectReason.UNSUPPORTED_VALUE), 1);
  sameAtEverySplit(all, reference);
});

test('a stream whose last frame has an extra key ending in a byte that could start a map: counted as that, not as truncated', () => {
  // alt 133 is uint8 0xcc 0x85, and 0x85 is a fixmap header: a look inside the frame waits for the byte after it.
  const last = mapPackr.pack({ ...ping('z', 1), alt: 133 });
  assert.equal(last[last.length - 1], 0x85);
  const fx = makeEdge();
  const s = fx.edge.openStream('ends');
  s.write(concat([mapPackr.pack(ping('y', 0)), last]));
  s.end();
  assert.deepEqual(
    fx.sink.pings.map((p) => p.id),
    ['y'],
  );
  assert.equal(fx.rejected(RejectReason.UNKNOWN_KEY), 1);
  assert.equal(fx.rejected(RejectReason.TRUNCATED_FRAME), 0);
});

test('a value nesting more than a few hundred values is a structural reject: no walk costs more than that', () => {
  const deep = { ...ping('x', 1), extra: Array.from({ length: 300 }, (_, i) => i) };
  const shallow = { ...ping('y', 1), extra: Array.from({ length: 200 }, (_, i) => i) };
  const fx = makeEdge({ maxFrameBytes: 4096 });
  fx.edge.ingest(concat([mapPackr.pack(deep), mapPackr.pack(ping('after-deep', 2))]));
  assert.equal(fx.rejected(RejectReason.UNSUPPORTED_VALUE), 1);
  assert.equal(fx.pipeline.f64[ING_RESYNCS_F64], 1, 'resynchronised: its end was not walked to');
  fx.edge.ingest(concat([mapPackr.pack(shallow), mapPackr.pack(ping('after-shallow', 3))]));
  assert.equal(fx.rejected(RejectReason.UNKNOWN_KEY), 1);
  assert.equal(fx.pipeline.f64[ING_RESYNCS_F64], 1, 'walked to its end and rejected alone');
  assert.deepEqual(
    fx.sink.pings.map((p) => p.id),
    ['after-deep', 'after-shallow'],
  );
});

test('buffered bytes per stream stay below the frame limit while an oversized frame streams in', () => {
  const fx = makeEdge({ maxFrameBytes: 256, readChunkBytes: 1024 });
  const s = fx.edge.openStream('big');
  const big = mapPackr.pack({ ...ping('x', 0), id: 'q'.repeat(100_000) });
  for (let i = 0; i < big.length; i += 700) {
    s.write(big.subarray(i, i + 700));
    assert.ok(s.bufferedBytes < 256, `buffered ${s.bufferedBytes}`);
  }
  s.write(mapPackr.pack(ping('next', 1)));
  s.end();
  assert.equal(fx.rejected(RejectReason.OVERSIZED_FRAME), 1);
  assert.deepEqual(
    fx.sink.pings.map((p) => p.id),
    ['next'],
  );
});

test('push() validates points like frames', () => {
  const fx = makeEdge();
  assert.equal(fx.edge.push({ id: 'p', lat: 1, lon: 2, ts: TS }), -1);
  assert.equal(fx.edge.push({ id: 'p', lat: Number.NaN, lon: 2, ts: TS }), RejectReason.INVALID_LAT);
  assert.equal(fx.edge.push({ id: 'p', lat: 1, lon: 2, ts: TS, extra: 1 } as never), RejectReason.UNKNOWN_KEY);
  assert.equal(fx.sink.pings.length, 1);
  assert.equal(fx.rejected(RejectReason.INVALID_LAT), 1);
});

test('shared mode: a frame whose inline record definition takes a shared id changes nothing for the frames after it (either decoder)', () => {
  const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
  const f64 = (x: number): number[] => {
    const b = Buffer.alloc(8);
    b.writeDoubleBE(x);
    return [0xcb, ...b];
  };
  const key = (k: string): number[] => [0xa0 | k.length, ...Buffer.from(k)];
  const id = [0xa1, 0x78]; // "x"
  // Shared id 0x40 redefined inline with lat and lon swapped: [id, lon, lat, ts].
  const redefined = Buffer.from([
    0xd4,
    0x72,
    0x40,
    0x94,
    ...key('id'),
    ...key('lon'),
    ...key('lat'),
    ...key('ts'),
    ...id,
    ...f64(13.4),
    ...f64(52.5),
    ...f64(TS),
  ]);
  // Then shared structure 0 as the wire contract defines it: [id, lat, lon, ts].
  const shared = Buffer.from([0x40, ...id, ...f64(48.1), ...f64(11.6), ...f64(TS + 1)]);
  for (const reader of [true, false]) {
    const d = new FrameDecoder({ maxFrameBytes: 512, sharedStructures: true, limits, reader });
    assert.equal(d.decode(redefined, 0, redefined.length), PING_VALID);
    assert.deepEqual([d.fields.lat, d.fields.lon], [52.5, 13.4], 'the inline definition holds for its own frame');
    assert.equal(d.decode(shared, 0, shared.length), PING_VALID, `reader ${reader}`);
    assert.deepEqual([d.fields.lat, d.fields.lon], [48.1, 11.6], `the shared structure is back (reader ${reader})`);
  }
});

test('a sender whose every frame has an extra key, a timestamp extension or a nested value has every frame counted, nothing skipped', () => {
  const plain = new Packr({ useRecords: false });
  const cases: { reason: RejectReason; frame: (i: number) => Record<string, unknown>; detail: string }[] = [
    // (An extra key before `id` whose value's last byte is 0x84-0x8f, e.g. alt 132, reads from there as a map of the
    // telemetry keys: taken as a frame cut short, its ping is decoded without the keys after `ts`.)
    {
      reason: RejectReason.UNKNOWN_KEY,
      frame: (i) => ({ alt: 30 + (i % 90), ...ping(`k${i}`, i), battery: 'full' }),
      detail: 'keys "alt", "battery" not in the wire format',
    },
    {
      reason: RejectReason.UNKNOWN_KEY,
      frame: (i) => ({ ...ping(`a${i}`, i), alt: i * 7, sats: [i, i + 1] }),
      detail: 'keys "alt", "sats" not in the wire format',
    },
    {
      reason: RejectReason.UNSUPPORTED_VALUE,
      frame: (i) => ({ ...ping(`t${i}`, i), ts: new Date(TS + i) }),
      detail: 'ts is a timestamp extension, not a number (epoch ms)',
    },
    {
      reason: RejectReason.UNSUPPORTED_VALUE,
      frame: (i) => ({ ...ping(`n${i}`, i), speed: { v: 3, unit: 'm/s' } }),
      detail: 'speed is a map or an extension, not a scalar',
    },
  ];
  for (const { reason, frame, detail } of cases) {
    for (const packr of [plain, recordPackr]) {
      const fx = makeEdge({}, { idBytes: 64 });
      // 200 such frames in a row, then 200 valid ones.
      const frames: Buffer[] = [];
      for (let i = 0; i < 200; i++) frames.push(packr.pack(frame(i)));
      for (let i = 0; i < 200; i++) frames.push(packr.pack(ping(`ok${i}`, i)));
      fx.edge.ingest(concat(frames));
      const name = `reason ${String(reason)}, ${packr === plain ? 'maps' : 'records'} (${frames[0]!.subarray(0, 8).toString('hex')})`;
      assert.equal(fx.sink.pings.length, 200, name);
      assert.equal(fx.rejected(reason), 200, name);
      assert.equal(fx.pipeline.f64[ING_RESYNCS_F64], 0, name);
      assert.equal(fx.pipeline.f64[ING_RESYNC_SKIPPED_BYTES_F64], 0, name);
      assert.equal(fx.pipeline.f64[ING_FRAMES_F64], 400, name);
      // The log line says what was wrong with the frame.
      assert.ok(fx.logLines[0]?.includes(`from in-process: ${detail}`), `${name}: ${fx.logLines[0]}`);
    }
  }
});

test('resynchronisation finds frames written with a 32-bit map header, and records whose key list has a 16-bit header', () => {
  const map32 = (o: Record<string, unknown>): Buffer => {
    const m = mapPackr.pack(o);
    assert.ok(m[0] === 0xde && m[1] === 0, 'a 16-bit map header to rewrite');
    return Buffer.concat([Buffer.from([0xdf, 0, 0, 0, m[2]!]), m.subarray(3)]);
  };
  const record16 = (o: Record<string, unknown>): Buffer => {
    const r = recordPackr.pack(o);
    assert.ok(r[0] === 0xd4 && r[1] === 0x72 && r[3]! >= 0x90 && r[3]! <= 0x9f, 'an inline record to rewrite');
    return Buffer.concat([r.subarray(0, 3), Buffer.from([0xdc, 0, r[3]! & 0x0f]), r.subarray(4)]);
  };
  for (const encode of [map32, record16]) {
    const fx = makeEdge({}, { idBytes: 64 });
    const frames = [encode(ping('a', 1)), Buffer.from([0xc1, 0x00, 0x13]), encode(ping('b', 2)), encode(ping('c', 3))];
    fx.edge.ingest(concat(frames));
    const name = frames[0]!.subarray(0, 6).toString('hex');
    assert.deepEqual(
      fx.sink.pings.map((p) => p.id),
      ['a', 'b', 'c'],
      name,
    );
    assert.equal(fx.rejected(RejectReason.CORRUPT_FRAME), 1, name);
    assert.equal(fx.pipeline.f64[ING_RESYNC_SKIPPED_BYTES_F64], 3, name);
  }
});
