/**
 * The ingest path after msgpackr stays allocation-free for a fleet of numeric ids past the small-integer range (IMEI-
 * like, up to 2^53 - 1) sent as uint64 with integer `ts`, `speed` and `heading`. Decoded objects whose ids were all
 * such numbers hold the id in a double field; the edge reads it into a cell and the registry looks it up from there,
 * so it is never boxed into a heap number per ping. (A file of its own: each test file runs in its own process, so
 * the objects the path sees are only these, as in a process whose senders all use numeric ids.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encode } from '@msgpack/msgpack';
import type { Unpackr } from 'msgpackr';
import { TEL_DEVICE_SLOT_I32, TEL_EVENT_TIME_MS_F64 } from '../../src/shm/layout.js';
import { FrameDecoder } from '../../src/ingest/frame-decoder.js';
import { PingFields, validatePingInto, PING_VALID } from '../../src/ingest/ping-fields.js';
import { KeyBit } from '../../src/ingest/wire-format.js';
import { assertAllocationFree } from '../support/alloc-free.js';
import { ringSinkEdge } from './support.js';

const IMEI = 358_240_051_111_110;

test('uint64 numeric ids and integer fields: validate + registry + classify + ring write allocate nothing per ping', async () => {
  const { ring, fx } = ringSinkEdge();
  // Decoded by the decoder's own Unpackr (its settings, its object shapes) from frames @msgpack/msgpack wrote.
  const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
  const unpackr = (
    new FrameDecoder({ maxFrameBytes: 1024, sharedStructures: false, limits }) as unknown as { unpackr: Unpackr }
  ).unpackr;
  const ids = Array.from({ length: 1000 }, (_, i) => (i === 999 ? Number.MAX_SAFE_INTEGER : IMEI + i * 4_294_967_311));
  const objects = ids.map((id, i) => {
    const frame = Buffer.from(
      encode({ id, lat: 52.5, lon: 13 + i * 1e-4, ts: 1_735_689_600_000 + i, speed: i % 4, heading: i % 360 }),
    );
    assert.equal(frame.includes(Buffer.from([0xa2, 0x69, 0x64, 0xcf])), true, 'the id is a uint64');
    return unpackr.unpack(frame) as object;
  });
  const mask = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS | KeyBit.SPEED | KeyBit.HEADING;
  const fields = new PingFields();
  for (const o of objects) fx.edge.accept((validatePingInto(o, mask, limits, fields), fields), 'warm');
  assert.equal(fx.registry.size, 1000);
  assert.equal(fx.registry.lookup(Number.MAX_SAFE_INTEGER), 999);
  let bad = 0;
  const body = (i: number): void => {
    if (validatePingInto(objects[i % 1000]!, mask, limits, fields) !== PING_VALID) bad++;
    if (fx.edge.accept(fields, 'bench') !== PING_VALID) bad++;
  };
  await assertAllocationFree(body);
  assert.equal(bad, 0);
  const last = ring.slotOf(ring.writeSeq() - 1);
  assert.equal(ring.i32[last * ring.strideI32 + TEL_DEVICE_SLOT_I32], (3_000_000 - 1) % 1000);
  assert.equal(ring.f64[last * ring.strideF64 + TEL_EVENT_TIME_MS_F64], 1_735_689_600_000 + ((3_000_000 - 1) % 1000));
  assert.equal(fields.id(), ids[(3_000_000 - 1) % 1000]);
});
