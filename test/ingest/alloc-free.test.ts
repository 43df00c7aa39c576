/**
 * The ingest path after msgpackr: validation into the reused fields, registry lookup of a known device, lane
 * classification and the ring record write allocate nothing per ping.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  RingKind,
  TELEMETRY_STRIDE_BYTES,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_LAT_F64,
} from '../../src/shm/layout.js';
import { allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { PF_ADMIT_TIME_NS_F64, PingFields, validatePingInto, PING_VALID } from '../../src/ingest/ping-fields.js';
import { KeyBit } from '../../src/ingest/wire-format.js';
import { writeTelemetryRecord } from '../../src/ingest/telemetry-record.js';
import type { PingSink } from '../../src/ingest/ingest-edge.js';
import { ALLOCATION_SLACK_BYTES, measureAllocations } from '../support/alloc-free.js';
import { makeEdge } from './support.js';

test('validate + registry + classify + ring write allocate nothing per ping', async () => {
  const ring = SpscRing.wrap(allocateRingRegion({ capacitySlots: 1024, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }));
  // A sink that writes every ping into the ring and consumes it at once (stands in for admission + the pool).
  const sink: PingSink = {
    offer(f) {
      const s = ring.claim();
      // A double admission time (not a small integer), handed over in its cell as admission does.
      f.values[PF_ADMIT_TIME_NS_F64] = 1e15 + s;
      writeTelemetryRecord(ring, s, f);
      ring.publish();
      ring.release(1);
    },
  };
  const fx = makeEdge({}, { maxDevices: 2048 });
  (fx.edge as unknown as { sink: PingSink }).sink = sink;
  // Decoded objects as msgpackr would return them, built once: the measured path starts after decoding.
  const objects = Array.from({ length: 1000 }, (_, i) => ({ id: `dev-${i}`, lat: 52 + i * 1e-4, lon: 13, ts: 1_735_689_600_000 + i, speed: i % 4 }));
  const mask = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS | KeyBit.SPEED;
  const fields = new PingFields();
  const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
  for (const o of objects) fx.edge.accept((validatePingInto(o, mask, limits, fields), fields), 'warm');
  let bad = 0;
  const body = (i: number): void => {
    if (validatePingInto(objects[i % 1000]!, mask, limits, fields) !== PING_VALID) bad++;
    if (fx.edge.accept(fields, 'bench') !== PING_VALID) bad++;
  };
  // A first run lets every function on the path reach optimised code on its own (not only inlined into a loop).
  await measureAllocations(500_000, body);
  const report = await measureAllocations(3_000_000, body);
  assert.equal(bad, 0);
  assert.equal(report.gcCount, 0);
  assert.ok(report.newSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `new space grew ${report.newSpaceGrowthBytes}`);
  assert.ok(report.oldSpaceGrowthBytes < ALLOCATION_SLACK_BYTES, `old space grew ${report.oldSpaceGrowthBytes}`);
  const last = ring.slotOf(ring.writeSeq() - 1);
  assert.equal(ring.i32[last * ring.strideI32 + TEL_DEVICE_SLOT_I32], (3_000_000 - 1) % 1000);
  assert.ok(ring.f64[last * ring.strideF64 + TEL_LAT_F64]! > 52);
  assert.equal(ring.f64[last * ring.strideF64 + TEL_ADMIT_TIME_NS_F64], 1e15 + last);
});
