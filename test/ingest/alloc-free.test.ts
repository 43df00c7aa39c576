/**
 * The ingest path after msgpackr: validation into the reused fields, registry lookup of a known device, lane
 * classification and the ring record write allocate nothing per ping, on the only ingest thread and on one of two
 * (whose registry takes the shared path: generation, stamp and life word read with atomics).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TEL_ADMIT_TIME_NS_F64, TEL_DEVICE_SLOT_I32, TEL_LAT_F64 } from '../../src/shm/layout.js';
import { PingFields, validatePingInto, PING_VALID } from '../../src/ingest/ping-fields.js';
import { KeyBit } from '../../src/ingest/wire-format.js';
import { assertAllocationFree } from '../support/alloc-free.js';
import { ringSinkEdge } from './support.js';

test('validate + registry + classify + ring write allocate nothing per ping', () => allocationFreePath([0, 1]));

test('the same on ingest thread 1 of 2 (its registry confirms cached slots against the shared table)', () =>
  allocationFreePath([1, 2]));

async function allocationFreePath(ingestThread: [number, number]): Promise<void> {
  const { ring, fx } = ringSinkEdge(ingestThread);
  // Decoded objects as msgpackr would return them, built once: the measured path starts after decoding.
  const objects = Array.from({ length: 1000 }, (_, i) => ({
    id: `dev-${i}`,
    lat: 52 + i * 1e-4,
    lon: 13,
    ts: 1_735_689_600_000 + i,
    speed: i % 4,
  }));
  const mask = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS | KeyBit.SPEED;
  const fields = new PingFields();
  const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
  for (const o of objects) fx.edge.accept((validatePingInto(o, mask, limits, fields), fields), 'warm');
  let bad = 0;
  const body = (i: number): void => {
    if (validatePingInto(objects[i % 1000]!, mask, limits, fields) !== PING_VALID) bad++;
    if (fx.edge.accept(fields, 'bench') !== PING_VALID) bad++;
  };
  await assertAllocationFree(body);
  assert.equal(bad, 0);
  const last = ring.slotOf(ring.writeSeq() - 1);
  assert.equal(ring.i32[last * ring.strideI32 + TEL_DEVICE_SLOT_I32], (3_000_000 - 1) % 1000);
  assert.ok(ring.f64[last * ring.strideF64 + TEL_LAT_F64]! > 52);
  assert.equal(ring.f64[last * ring.strideF64 + TEL_ADMIT_TIME_NS_F64], 1e15 + last);
}
