/**
 * The frame reader (values read from the bytes) against msgpackr (an object decoded, then validated), on seeded
 * random frames: every telemetry key in any order and subset, each value in any MessagePack type and width (numbers in
 * and out of range, nil, booleans, binary, ASCII, non-ASCII, empty and long strings), unknown and repeated keys, maps,
 * inline records and shared-structure records, and the same frames with bytes changed, cut or inserted. For every
 * frame both decoders give the same result, the same frame end and, for a valid ping, the same fields.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FrameDecoder, PING_VALID } from '../../src/ingest/frame-decoder.js';
import { TELEMETRY_KEYS, TELEMETRY_SHARED_STRUCTURES } from '../../src/ingest/wire-format.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';

const limits = { maxIdLength: 32, minTsMs: Date.UTC(2000, 0, 1), maxTsMs: Date.UTC(2100, 0, 1) };

/** Writes MessagePack by hand, so every type and width can be chosen. */
class Bytes {
  readonly out: number[] = [];
  u8(...b: number[]): void {
    for (const x of b) this.out.push(x & 0xff);
  }
  be(value: bigint, bytes: number): void {
    for (let i = bytes - 1; i >= 0; i--) this.out.push(Number((value >> BigInt(8 * i)) & 0xffn));
  }
  f64(x: number): void {
    const b = Buffer.alloc(8);
    b.writeDoubleBE(x);
    this.out.push(...b);
  }
  f32(x: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatBE(x);
    this.out.push(...b);
  }
  str(s: string, form: number): void {
    const b = Buffer.from(s, 'utf8');
    if (form === 0 && b.length < 32) this.u8(0xa0 | b.length);
    else if (form <= 1 && b.length < 256) this.u8(0xd9, b.length);
    else this.u8(0xda, b.length >> 8, b.length);
    this.out.push(...b);
  }
}

test('the frame reader and msgpackr agree on 120,000 seeded frames per mode, valid and damaged', () => {
  for (const shared of [false, true]) {
    const rng = mulberry32(shared ? 7 : 3);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
    const reader = new FrameDecoder({ maxFrameBytes: 512, sharedStructures: shared, limits });
    const plain = new FrameDecoder({ maxFrameBytes: 512, sharedStructures: shared, limits, reader: false });

    const number = (key: string): number => {
      const r = rng();
      if (key === 'ts') return r < 0.8 ? Date.UTC(2026, 0, 1) + Math.floor(rng() * 1e10) : pick([0, -1, 9e15, 1.5]);
      if (key === 'lat') return r < 0.8 ? (rng() - 0.5) * 180 : pick([90.5, -91, 90, -90]);
      if (key === 'lon') return r < 0.8 ? (rng() - 0.5) * 360 : pick([180.01, -181, 180]);
      if (key === 'id')
        return r < 0.5 ? Math.floor(rng() * 2 ** 20) : pick([2 ** 53 - 1, 2 ** 53, 2 ** 60, -5, 0, 3.5]);
      if (key === 'lane') return pick([0, 1, 2, 3, -1, 1.5]);
      return r < 0.8 ? rng() * 400 : pick([-0.5, 361, 0, 360]);
    };
    /** One value of `key` in a random type and width. */
    const value = (w: Bytes, key: string): void => {
      if (rng() < 0.85) return good(w, key);
      const kind = Math.floor(rng() * 20);
      const x = number(key);
      const int = BigInt(Math.trunc(x));
      switch (kind) {
        case 0:
          return w.u8(Math.abs(Number(int)) & 0x3f); // positive fixint (below the record range)
        case 1:
          return w.u8(0xe0 | (Math.floor(rng() * 32) & 0x1f)); // negative fixint
        case 2:
          return w.u8(0xcc, Number(int & 0xffn));
        case 3:
          w.u8(0xcd);
          return w.be(int & 0xffffn, 2);
        case 4:
          w.u8(0xce);
          return w.be(int & 0xffffffffn, 4);
        case 5:
          w.u8(0xcf);
          return w.be(BigInt.asUintN(64, int < 0n ? -int : int) | (rng() < 0.2 ? 1n << 63n : 0n), 8);
        case 6:
          return w.u8(0xd0, Number(BigInt.asUintN(8, int)));
        case 7:
          w.u8(0xd1);
          return w.be(BigInt.asUintN(16, int), 2);
        case 8:
          w.u8(0xd2);
          return w.be(BigInt.asUintN(32, int), 4);
        case 9:
          w.u8(0xd3);
          return w.be(BigInt.asUintN(64, int), 8);
        case 10:
          w.u8(0xca);
          return w.f32(x);
        case 11:
        case 12:
        case 13:
          w.u8(0xcb);
          return w.f64(rng() < 0.03 ? pick([Number.NaN, Infinity, -Infinity, -0]) : x);
        case 14:
          return w.u8(0xc0);
        case 15:
          return w.u8(pick([0xc2, 0xc3]));
        case 16:
          w.u8(0xc4, 2);
          return w.u8(1, 2);
        case 17:
          return w.str(pick(['idle', 'transition', 'compliance', 'Idle', '']), Math.floor(rng() * 3));
        case 18:
          return w.str(
            pick(['dev-1', 'd', '', 'x'.repeat(31), 'y'.repeat(33), 'z'.repeat(70), 'gerät-7', '車両', 'a\u0000b']),
            Math.floor(rng() * 3),
          );
        default:
          return w.str(`v${Math.floor(rng() * 1e6)}`, Math.floor(rng() * 3));
      }
    };
    /** A value as encoders write it: the right kind, mostly in range (out of range now and then). */
    const good = (w: Bytes, key: string): void => {
      const x = number(key);
      if (key === 'id') {
        if (rng() < 0.6) return w.str(`dev-${Math.floor(rng() * 1e5)}`, rng() < 0.9 ? 0 : 1);
        w.u8(0xcf);
        return w.be(BigInt(Math.floor(rng() * 2 ** 40)), 8);
      }
      if (key === 'lane')
        return rng() < 0.5
          ? w.str(pick(['idle', 'transition', 'compliance']), 0)
          : w.u8(rng() < 0.9 ? Math.floor(rng() * 3) : 7);
      if (key === 'ts' && rng() < 0.5) {
        w.u8(pick([0xcf, 0xd3]));
        return w.be(BigInt(Math.trunc(Math.abs(x))), 8);
      }
      if (rng() < 0.15) {
        w.u8(0xca);
        return w.f32(x);
      }
      w.u8(0xcb);
      return w.f64(x);
    };
    const frame = (): number[] => {
      const w = new Bytes();
      const form = rng();
      if (shared && form < 0.3) {
        const index = Math.floor(rng() * TELEMETRY_SHARED_STRUCTURES.length);
        w.u8(0x40 + index);
        for (const key of TELEMETRY_SHARED_STRUCTURES[index]!) value(w, key);
        return w.out;
      }
      const keys: string[] = TELEMETRY_KEYS.filter(
        (k) => k === 'id' || k === 'lat' || k === 'lon' || k === 'ts' || rng() < 0.5,
      )
        .filter(() => rng() < 0.97)
        .sort(() => rng() - 0.5);
      if (rng() < 0.03) keys.push(pick(['speed', 'id', 'colour']));
      if (form < 0.55) {
        // Inline record definition: id 0x40 + keys, then the values.
        w.u8(0xd4, 0x72, 0x40, 0x90 | keys.length);
        for (const k of keys) w.str(k, 0);
        for (const k of keys) value(w, k);
      } else {
        if (rng() < 0.1) w.u8(0xde, 0, keys.length);
        else w.u8(0x80 | keys.length);
        for (const k of keys) {
          w.str(k, rng() < 0.9 ? 0 : 1);
          value(w, k);
        }
      }
      return w.out;
    };
    const damage = (bytes: number[]): number[] => {
      const b = [...bytes];
      const what = rng();
      const at = Math.floor(rng() * b.length);
      if (what < 0.5) b[at] = Math.floor(rng() * 256);
      else if (what < 0.75) b.splice(at, 1 + Math.floor(rng() * 3));
      else b.splice(at, 0, Math.floor(rng() * 256));
      return b;
    };

    let valid = 0;
    let rejected = 0;
    const byReason = new Map<number, number>();
    for (let i = 0; i < 120_000; i++) {
      const bytes = rng() < 0.25 ? damage(frame()) : frame();
      const buf = Buffer.from(bytes);
      const a = reader.decode(buf, 0, buf.length);
      const b = plain.decode(buf, 0, buf.length);
      const what = `frame ${i} (${buf.toString('hex')})`;
      assert.equal(a, b, `result of ${what}`);
      if (a === PING_VALID) {
        valid++;
        assert.equal(reader.frameEnd, plain.frameEnd, `end of ${what}`);
        const fa = reader.fields;
        const fb = plain.fields;
        assert.equal(fa.idIsNumber, fb.idIsNumber, `id kind of ${what}`);
        if (!fa.idIsNumber) assert.equal(fa.idString(), fb.idString(), `id of ${what}`);
        assert.equal(fa.explicitLane, fb.explicitLane, `lane of ${what}`);
        for (let c = 0; c < 6; c++) assert.ok(Object.is(fa.values[c], fb.values[c]), `value ${c} of ${what}`);
        if (fa.idIsNumber) assert.equal(fa.values[7], fb.values[7], `numeric id of ${what}`);
      } else if (a >= 0) {
        rejected++;
        byReason.set(a, (byReason.get(a) ?? 0) + 1);
      }
    }
    // The run means something: many valid pings, many kinds of reject, and most frames read without msgpackr.
    assert.ok(valid > 10_000, `valid pings: ${valid}`);
    assert.ok(byReason.size >= 10, `reject reasons seen: ${[...byReason.keys()].join(',')}`);
    assert.ok(reader.readFrames > 0.8 * (reader.readFrames + reader.unpackedFrames), 'the reader took most frames');
    assert.equal(plain.readFrames, 0);
    console.log(
      `${shared ? 'shared' : 'plain'} mode: ${valid} valid, ${rejected} rejected (${byReason.size} reasons); the reader read ${reader.readFrames} and left ${reader.unpackedFrames} to msgpackr`,
    );
  }
});
