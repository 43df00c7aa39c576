/**
 * The ingest path with the COMPLIANCE path on allocates nothing per ping: validation, registry, classification, the
 * path choice (devices moving between their shard ring and the COMPLIANCE ring), admission and the record write,
 * over the router's real regions and admission sink.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { resolveRouterOptions } from '../../src/config/options.js';
import { buildFenceStore } from '../../src/fences/store.js';
import { parseFences } from '../../src/fences/parse.js';
import { PING_VALID, PingFields, validatePingInto } from '../../src/ingest/ping-fields.js';
import { shardOfId } from '../../src/ingest/device-registry.js';
import { KeyBit } from '../../src/ingest/wire-format.js';
import { buildIngestPath, type IngestPath } from '../../src/pipeline/ingest-path.js';
import { allocatePipelineMemory, pipelineMemorySpecOf } from '../../src/pipeline/memory.js';
import { ingestThreadData } from '../../src/router/thread-data.js';
import { Lane } from '../../src/shm/layout.js';
import { at, collection, square } from '../fences/helpers.js';
import { containmentPool } from './support.js';
import { assertAllocationFree } from '../support/alloc-free.js';

const DEVICES = 1000;

/** The router's real ingest path over its own regions, with the COMPLIANCE path on; no task runs (paused). */
async function rig(ringCapacitySlots = 4096): Promise<{ path: IngestPath; close: () => Promise<void> }> {
  const o = resolveRouterOptions({
    shards: 2,
    poolSize: 1,
    maxDevices: DEVICES,
    ringCapacitySlots,
    complianceWorker: true,
    stateDir: null,
  });
  const m = allocatePipelineMemory(pipelineMemorySpecOf(o));
  assert.equal(m.complianceRings.length, 1);
  const descriptor = buildFenceStore(parseFences(collection(square('port', 0, 0, 100, { compliance: true }))), 1);
  const pool = containmentPool(m, descriptor);
  const quiet = (): void => undefined;
  const path = buildIngestPath(m, ingestThreadData(o, m, descriptor), pool, { error: quiet, warn: quiet }, false);
  // No task runs: the tests consume the records themselves, as containment would.
  await path.scheduler.pause();
  return { path, close: () => pool.destroy() };
}

/** Device `d` inside the compliance fence (or 2 km away) at `ts`, as msgpackr would decode it. */
function ping(d: number, inside: boolean, ts = 1_735_689_600_000): Record<string, unknown> {
  const [lat, lon] = at(inside ? 0 : 2000, d % 50);
  return { id: `dev-${d}`, lat, lon, ts };
}

const MASK = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS;
const LIMITS = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };

test('ingest with the COMPLIANCE path: choosing the path and admitting into either ring allocate nothing per ping', async () => {
  const { path, close } = await rig();
  try {
    const paths = path.paths!;
    const rings = [...path.scheduler.rings, paths.ring];
    // Each device inside the compliance fence on one visit and 2 km away on the next: its lane changes every time.
    const objects = Array.from({ length: 2 * DEVICES }, (_, k) => ping(k % DEVICES, k < DEVICES));
    const fields = new PingFields();
    let bad = 0;
    let compliance = 0;
    const body = (i: number): void => {
      const o = objects[(i % DEVICES) + (((i / DEVICES) | 0) & 1) * DEVICES]!;
      if (validatePingInto(o, MASK, LIMITS, fields) !== PING_VALID) bad++;
      if (path.edge.accept(fields, 'bench') !== PING_VALID) bad++;
      if (fields.lane === Lane.COMPLIANCE) compliance++;
      if ((i & 255) === 255) {
        path.sink.tick();
        path.scheduler.flush();
        for (let r = 0; r < rings.length; r++) rings[r]!.release(rings[r]!.available());
      }
    };
    for (let i = 0; i < 4 * DEVICES; i++) body(i);
    const switchesBefore = paths.switches;
    await assertAllocationFree(body);
    assert.equal(bad, 0);
    assert.ok(compliance > 1_000_000, `COMPLIANCE pings: ${compliance}`);
    // Devices did move between the rings while measured, and both rings took pings.
    assert.ok(paths.switches - switchesBefore > 100_000, `path changes: ${paths.switches - switchesBefore}`);
    assert.ok(paths.ring.readSeq() > 100_000, `COMPLIANCE ring records: ${paths.ring.readSeq()}`);
  } finally {
    await close();
  }
});

test('a COMPLIANCE ring half full and deeper than the shard ring sends settled devices to their shard rings', async () => {
  // Half of 256 slots: fewer devices than the registry holds.
  const { path, close } = await rig(256);
  try {
    const paths = path.paths!;
    const own = paths.ring;
    const fields = new PingFields();
    let ts = 1_735_689_600_000;
    const offer = (d: number): void => {
      assert.equal(validatePingInto(ping(d, true, ts++), MASK, LIMITS, fields), PING_VALID);
      assert.equal(path.edge.accept(fields, 'test'), PING_VALID);
      assert.equal(fields.lane, Lane.COMPLIANCE);
    };
    path.sink.tick();
    // Fill the COMPLIANCE ring to half with COMPLIANCE pings of distinct devices (nothing consumes it).
    const half = own.capacitySlots >> 1;
    for (let d = 0; own.producerDepth() < half; d++) offer(d);
    const onOwn = own.producerDepth();
    assert.equal(onOwn, half);
    // A settled device's COMPLIANCE ping now takes its shard ring (both shard rings are empty).
    const shardDepth = (): number => path.scheduler.rings.reduce((n, r) => n + r.producerDepth(), 0);
    offer(DEVICES - 1);
    assert.equal(own.producerDepth(), onOwn);
    assert.equal(shardDepth(), 1);
    assert.equal(paths.pathOf(fields.slot), 0);
    // A device with its ping pending on the COMPLIANCE ring follows it there, full or not.
    offer(0);
    assert.equal(own.producerDepth(), onOwn + 1);
    // Once a settled device's shard ring is as deep as the COMPLIANCE ring, it takes the COMPLIANCE ring again.
    const next = DEVICES - 2;
    const ring = path.scheduler.rings[shardOfId(`dev-${next}`, path.scheduler.rings.length)]!;
    while (ring.producerDepth() < own.producerDepth()) ring.claim();
    const before = own.producerDepth();
    offer(next);
    assert.equal(own.producerDepth(), before + 1);
  } finally {
    await close();
  }
});
