/**
 * Every MessagePack number type for every numeric telemetry key, from frames written byte by byte: positive and
 * negative fixint, uint8/16/32/64, int8/16/32/64, float32/64 are accepted wherever the value is in range, with the
 * value intact; numeric ids above 2^53 - 1 (and negative or fractional ones) are rejected as invalid_id, counted, and
 * logged with the exact value sent; 64-bit values also decode in inline and shared-structure records.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ING_ACCEPTED_F64, REJECT_REASON_COUNT, RejectReason } from '../../src/shm/layout.js';
import type { PingSink } from '../../src/ingest/ingest-edge.js';
import {
  PF_ACCURACY_M_F64,
  PF_HEADING_DEG_F64,
  PF_LAT_F64,
  PF_LON_F64,
  PF_SPEED_MPS_F64,
  PF_TS_MS_F64,
  type PingFields,
} from '../../src/ingest/ping-fields.js';
import { makeEdge, type EdgeFixture } from './support.js';

/** One MessagePack number type: its name and how it writes a value (throws when the value does not fit it). */
interface Width {
  name: string;
  write(value: bigint | number): Buffer;
}

function intIn(v: bigint | number, lo: bigint, hi: bigint, name: string): bigint {
  const b = typeof v === 'bigint' ? v : BigInt(v);
  if (b < lo || b > hi) throw new RangeError(`${String(v)} does not fit ${name}`);
  return b;
}

function header(type: number, bytes: number, fill: (b: Buffer) => void): Buffer {
  const b = Buffer.alloc(1 + bytes);
  b[0] = type;
  fill(b);
  return b;
}

const WIDTHS: readonly Width[] = [
  { name: 'positive fixint', write: (v) => Buffer.from([Number(intIn(v, 0n, 127n, 'positive fixint'))]) },
  { name: 'negative fixint', write: (v) => Buffer.from([0x100 + Number(intIn(v, -32n, -1n, 'negative fixint'))]) },
  { name: 'uint8', write: (v) => header(0xcc, 1, (b) => b.writeUInt8(Number(intIn(v, 0n, 0xffn, 'uint8')), 1)) },
  { name: 'uint16', write: (v) => header(0xcd, 2, (b) => b.writeUInt16BE(Number(intIn(v, 0n, 0xffffn, 'uint16')), 1)) },
  {
    name: 'uint32',
    write: (v) => header(0xce, 4, (b) => b.writeUInt32BE(Number(intIn(v, 0n, 0xffffffffn, 'uint32')), 1)),
  },
  {
    name: 'uint64',
    write: (v) => header(0xcf, 8, (b) => b.writeBigUInt64BE(intIn(v, 0n, 2n ** 64n - 1n, 'uint64'), 1)),
  },
  { name: 'int8', write: (v) => header(0xd0, 1, (b) => b.writeInt8(Number(intIn(v, -0x80n, 0x7fn, 'int8')), 1)) },
  {
    name: 'int16',
    write: (v) => header(0xd1, 2, (b) => b.writeInt16BE(Number(intIn(v, -0x8000n, 0x7fffn, 'int16')), 1)),
  },
  {
    name: 'int32',
    write: (v) => header(0xd2, 4, (b) => b.writeInt32BE(Number(intIn(v, -(2n ** 31n), 2n ** 31n - 1n, 'int32')), 1)),
  },
  {
    name: 'int64',
    write: (v) => header(0xd3, 8, (b) => b.writeBigInt64BE(intIn(v, -(2n ** 63n), 2n ** 63n - 1n, 'int64'), 1)),
  },
  {
    name: 'float32',
    write: (v) => {
      const n = Number(v);
      if (Math.fround(n) !== n && !Number.isNaN(n)) throw new RangeError(`${n} is not exact in float32`);
      return header(0xca, 4, (b) => b.writeFloatBE(n, 1));
    },
  },
  { name: 'float64', write: (v) => header(0xcb, 8, (b) => b.writeDoubleBE(Number(v), 1)) },
];

const byName = (name: string): Width => WIDTHS.find((w) => w.name === name)!;

/** A fixstr. */
function str(s: string): Buffer {
  const bytes = Buffer.from(s, 'utf8');
  if (bytes.length > 31) throw new RangeError('fixstr only');
  return Buffer.concat([Buffer.from([0xa0 | bytes.length]), bytes]);
}

/** A fixmap frame of already-encoded values, keys in the order given. */
function mapFrame(entries: [string, Buffer][]): Buffer {
  return Buffer.concat([Buffer.from([0x80 | entries.length]), ...entries.flatMap(([k, v]) => [str(k), v])]);
}

const f64 = (v: number): Buffer => byName('float64').write(v);

/** Event time used where `ts` is not the key under test, epoch ms. */
const TS_MS = 1_735_689_600_000;

/** The values every frame carries, encoded plainly; the key under test replaces its own entry. */
function baseEntries(): Map<string, Buffer> {
  return new Map<string, Buffer>([
    ['id', str('w')],
    ['lat', f64(52.5)],
    ['lon', f64(13.4)],
    ['ts', f64(TS_MS)],
  ]);
}

/** What the edge handed on for one ping (PingFields is reused, so it is copied). */
interface Seen {
  id: string | number;
  values: number[];
  lane: number;
}

/** A real edge (epoch-ms range opened to [0, 2^53) so small integer widths can carry a `ts`) collecting copies. */
function edge(options: { sharedStructures?: boolean } = {}): EdgeFixture & { seen: Seen[] } {
  const fx = makeEdge({ minTsMs: 0, maxTsMs: Number.MAX_SAFE_INTEGER, ...options }, { maxDevices: 100 });
  const seen: Seen[] = [];
  const sink: PingSink = {
    offer: (f: PingFields) => void seen.push({ id: f.id(), values: Array.from(f.values), lane: f.lane }),
  };
  (fx.edge as unknown as { sink: PingSink }).sink = sink;
  return Object.assign(fx, { seen });
}

/** Cell of PingFields.values holding each numeric key. */
const CELL: Record<string, number> = {
  lat: PF_LAT_F64,
  lon: PF_LON_F64,
  ts: PF_TS_MS_F64,
  speed: PF_SPEED_MPS_F64,
  heading: PF_HEADING_DEG_F64,
  accuracy: PF_ACCURACY_M_F64,
};

/**
 * For each key and width: values in range that the width can hold (each must be accepted, decoded to exactly that
 * number) and values out of range (each must be rejected with the key's reason). Widths that cannot hold a value are
 * skipped for it, so every width is tried with every value it can carry.
 */
const CASES: { key: string; good: (bigint | number)[]; bad: (bigint | number)[]; reason: RejectReason }[] = [
  {
    key: 'lat',
    good: [0, 52, 90, -33, -90, 45.5, 2n, -2n],
    bad: [91, -91, 200, -128, 2n ** 63n, -(2n ** 40n)],
    reason: RejectReason.INVALID_LAT,
  },
  {
    key: 'lon',
    good: [0, 13, 180, -1, -180, 127, -32, -128.25],
    bad: [181, -181, 0xffff, -0x8000, 2n ** 64n - 1n, Number.NaN],
    reason: RejectReason.INVALID_LON,
  },
  {
    key: 'ts',
    good: [0, 5, 127, 200, 60_000, 4_000_000_000, 1_735_689_600_000n, 2n ** 53n - 1n, 1_048_576, 1_735_689_600_000.5],
    bad: [-1, -20, -300, -70_000, -(2n ** 40n), 2n ** 53n + 2n, 2n ** 64n - 1n],
    reason: RejectReason.INVALID_TS,
  },
  {
    key: 'speed',
    good: [0, 3, 100, 255, 65_535, 4_294_967_295, 2n ** 40n, 12.5],
    bad: [-1, -32, -100, -40_000, -(2n ** 33n), Number.POSITIVE_INFINITY],
    reason: RejectReason.INVALID_SPEED,
  },
  {
    key: 'heading',
    good: [0, 90, 127, 255, 360, 359.5],
    bad: [-1, -30, 361, 1000, 2n ** 40n, -(2n ** 40n)],
    reason: RejectReason.INVALID_HEADING,
  },
  {
    key: 'accuracy',
    good: [0, 7, 250, 1000, 2n ** 35n, 0.75],
    bad: [-1, -2, -129, -(2n ** 35n), Number.NaN],
    reason: RejectReason.INVALID_ACCURACY,
  },
];

/** Encodes `v` in width `w`, or null when the width cannot carry it. */
function tryWrite(w: Width, v: bigint | number): Buffer | null {
  if (typeof v === 'number' && !Number.isInteger(v) && !w.name.startsWith('float')) return null;
  try {
    return w.write(v);
  } catch {
    return null;
  }
}

test('lat, lon, ts, speed, heading and accuracy accept every number width in range and reject out of range by reason', () => {
  for (const { key, good, bad, reason } of CASES) {
    const tried = new Set<string>();
    for (const w of WIDTHS) {
      for (const v of good) {
        const value = tryWrite(w, v);
        if (value === null) continue;
        tried.add(w.name);
        const entries = baseEntries();
        entries.set(key, value);
        const fx = edge();
        fx.edge.ingest(mapFrame([...entries]));
        const name = `${key} = ${String(v)} as ${w.name} (${value.toString('hex')})`;
        assert.equal(fx.seen.length, 1, `${name}: accepted (log: ${fx.logLines.join(' | ')})`);
        assert.equal(fx.seen[0]!.values[CELL[key]!], Number(v), `${name}: decoded value`);
      }
      for (const v of bad) {
        const value = tryWrite(w, v);
        if (value === null) continue;
        const entries = baseEntries();
        entries.set(key, value);
        const fx = edge();
        fx.edge.ingest(mapFrame([...entries]));
        const name = `${key} = ${String(v)} as ${w.name}`;
        assert.equal(fx.seen.length, 0, `${name}: rejected`);
        for (let r = 0; r < REJECT_REASON_COUNT; r++)
          assert.equal(fx.rejected(r as RejectReason), r === reason ? 1 : 0, `${name}: count of reason ${r}`);
        assert.match(fx.logLines[0]!, new RegExp(`: ${key} `), `${name}: the log line names the key`);
      }
    }
    // Every width carried at least one in-range value of this key; a negative fixint has none for non-negative keys.
    const nonNegative = key === 'ts' || key === 'speed' || key === 'heading' || key === 'accuracy';
    const expected = WIDTHS.map((w) => w.name).filter((n) => !(n === 'negative fixint' && nonNegative));
    assert.deepEqual([...tried].sort(), expected.sort(), `${key}: widths accepted`);
  }
});

test('numeric ids of every width up to 2^53 - 1 are accepted exactly and are one device whatever their width', () => {
  const ids: (bigint | number)[] = [
    0,
    7,
    127,
    200,
    65_535,
    4_294_967_295,
    4_294_967_296,
    358_240_051_111_110n,
    2n ** 53n - 2n,
    2n ** 53n - 1n,
    16_777_216,
  ];
  const fx = edge();
  const tried = new Set<string>();
  const sentIds: number[] = [];
  for (const w of WIDTHS) {
    for (const id of ids) {
      const value = tryWrite(w, id);
      if (value === null) continue;
      tried.add(w.name);
      const entries = baseEntries();
      entries.set('id', value);
      fx.edge.ingest(mapFrame([...entries]));
      sentIds.push(Number(id));
    }
  }
  assert.deepEqual(fx.logLines, []);
  assert.deepEqual(
    fx.seen.map((s) => s.id),
    sentIds,
    'every id decoded to exactly its value',
  );
  // Every width except negative fixint can carry some id.
  assert.deepEqual(
    [...tried].sort(),
    WIDTHS.map((w) => w.name)
      .filter((n) => n !== 'negative fixint')
      .sort(),
  );
  // 2^53 - 2 and 2^53 - 1 are two devices; the same value in another width is the same device.
  const distinct = new Set(sentIds);
  assert.equal(fx.registry.size, distinct.size);
  assert.notEqual(fx.registry.lookup(2 ** 53 - 1), fx.registry.lookup(2 ** 53 - 2));
  assert.equal(fx.registry.lookup(2 ** 53 - 1) >= 0, true);
});

test('numeric ids above 2^53 - 1, negative or fractional are invalid_id, counted, and logged with the exact value', () => {
  const cases: { width: string; id: bigint | number; why: string }[] = [
    { width: 'uint64', id: 2n ** 53n, why: 'id 9007199254740992 is above 2^53-1' },
    { width: 'uint64', id: 2n ** 53n + 1n, why: 'id 9007199254740993 is above 2^53-1' },
    { width: 'int64', id: 2n ** 53n + 1n, why: 'id 9007199254740993 is above 2^53-1' },
    { width: 'uint64', id: 2n ** 64n - 1n, why: 'id 18446744073709551615 is above 2^53-1' },
    { width: 'int64', id: 2n ** 63n - 1n, why: 'id 9223372036854775807 is above 2^53-1' },
    { width: 'float64', id: 2 ** 53 + 2, why: 'id 9007199254740994 is above 2^53-1' },
    { width: 'float32', id: 2 ** 60, why: 'id 1152921504606846976 is above 2^53-1' },
    { width: 'negative fixint', id: -1, why: 'id -1 is negative' },
    { width: 'int8', id: -100, why: 'id -100 is negative' },
    { width: 'int16', id: -1000, why: 'id -1000 is negative' },
    { width: 'int32', id: -100_000, why: 'id -100000 is negative' },
    { width: 'int64', id: -358_240_051_111_110n, why: 'id -358240051111110 is negative' },
    { width: 'float64', id: 1.5, why: 'id 1.5 is not an integer' },
    { width: 'float32', id: 0.5, why: 'id 0.5 is not an integer' },
    { width: 'float64', id: Number.NaN, why: 'id NaN is not an integer' },
  ];
  for (const { width, id, why } of cases) {
    const fx = edge();
    const entries = baseEntries();
    entries.set('id', byName(width).write(id));
    const frame = mapFrame([...entries]);
    // A valid ping after it: the rejected frame is well delimited, the stream goes on.
    fx.edge.ingest(Buffer.concat([frame, mapFrame([...baseEntries()])]));
    const name = `${String(id)} as ${width}`;
    assert.deepEqual(
      fx.seen.map((s) => s.id),
      ['w'],
      `${name}: only the valid ping passes`,
    );
    for (let r = 0; r < REJECT_REASON_COUNT; r++) {
      assert.equal(
        fx.rejected(r as RejectReason),
        r === RejectReason.INVALID_ID ? 1 : 0,
        `${name}: count of reason ${r}`,
      );
    }
    assert.equal(fx.pipeline.f64[ING_ACCEPTED_F64], 1);
    assert.equal(fx.logLines.length, 1, name);
    assert.ok(
      fx.logLines[0]!.startsWith(`ingest: rejected invalid_id from in-process: ${why} (first bytes: `),
      `${name}: ${fx.logLines[0]}`,
    );
  }
});

test('the lane key accepts 0, 1 and 2 in every integer width and as floats', () => {
  for (const w of WIDTHS) {
    if (w.name === 'negative fixint') continue;
    const fx = edge();
    for (const lane of [0, 1, 2]) {
      const entries = baseEntries();
      entries.set('id', str(`lane-${lane}`));
      entries.set('lane', w.write(lane));
      fx.edge.ingest(mapFrame([...entries]));
    }
    assert.deepEqual(
      fx.seen.map((s) => s.lane),
      [0, 1, 2],
      w.name,
    );
    const entries = baseEntries();
    entries.set('lane', w.write(3));
    fx.edge.ingest(mapFrame([...entries]));
    assert.equal(fx.rejected(RejectReason.INVALID_LANE), 1, `${w.name}: lane 3`);
    assert.match(fx.logLines[0]!, /: lane 3 is not one of "idle", "transition", "compliance", 0, 1, 2 /);
  }
});

test('64-bit ids and times decode in inline records and shared-structure records too', () => {
  const u64 = byName('uint64');
  // Inline record: fixext1 0x72, record id 0x40, the keys, then the values in that order.
  const keys = ['id', 'lat', 'lon', 'ts'];
  const values = [u64.write(358_240_051_111_110n), f64(52.5), byName('int8').write(13), u64.write(BigInt(TS_MS))];
  const inline = Buffer.concat([Buffer.from([0xd4, 0x72, 0x40, 0x90 | keys.length]), ...keys.map(str), ...values]);
  // Shared structure 0 is exactly these keys.
  const shared = Buffer.concat([Buffer.from([0x40]), ...values]);
  const plain = edge();
  plain.edge.ingest(inline);
  const sharedMode = edge({ sharedStructures: true });
  sharedMode.edge.ingest(Buffer.concat([shared, inline]));
  for (const s of [...plain.seen, ...sharedMode.seen]) {
    assert.equal(s.id, 358_240_051_111_110);
    assert.equal(s.values[PF_TS_MS_F64], TS_MS);
    assert.equal(s.values[PF_LON_F64], 13);
  }
  assert.equal(plain.seen.length, 1);
  assert.equal(sharedMode.seen.length, 2);
  // The exact value of a rejected 64-bit id is quoted from a shared-structure record as well.
  const tooBig = Buffer.concat([Buffer.from([0x40]), u64.write(2n ** 53n + 1n), ...values.slice(1)]);
  sharedMode.edge.ingest(tooBig);
  assert.equal(sharedMode.rejected(RejectReason.INVALID_ID), 1);
  assert.match(sharedMode.logLines[0]!, /: id 9007199254740993 is above 2\^53-1 /);
});

test('value reject log lines name the key and why', () => {
  const fx = edge();
  const frame = (key: string, value: Buffer): Buffer => {
    const entries = baseEntries();
    entries.set(key, value);
    return mapFrame([...entries]);
  };
  fx.edge.ingest(frame('lat', byName('uint8').write(91)));
  fx.edge.ingest(frame('lon', str('east')));
  fx.edge.ingest(frame('ts', byName('int64').write(-5n)));
  fx.edge.ingest(frame('speed', byName('int8').write(-3)));
  fx.edge.ingest(frame('heading', byName('uint16').write(400)));
  fx.edge.ingest(frame('accuracy', f64(Number.POSITIVE_INFINITY)));
  fx.edge.ingest(frame('id', str('')));
  fx.edge.ingest(frame('id', Buffer.from([0xc3])));
  fx.edge.ingest(
    mapFrame([
      ['id', str('x')],
      ['lon', f64(1)],
      ['ts', f64(TS_MS)],
    ]),
  );
  const details = fx.logLines.map((l) => /^ingest: rejected \w+ from in-process: (.*) \(first bytes: /.exec(l)?.[1]);
  assert.deepEqual(details, [
    'lat 91 is outside [-90, 90]',
    'lon is a string, not a number',
    'ts -5 is outside the accepted epoch-ms range',
    'speed -3 is negative',
    'heading 400 is outside [0, 360]',
    'accuracy Infinity is not finite',
    'id is an empty string',
    'id is a boolean (true), not a string or an unsigned integer',
    'lat is missing',
  ]);
});
