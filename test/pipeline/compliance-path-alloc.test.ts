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
import { KeyBit } from '../../src/ingest/wire-format.js';
import { buildIngestPath } from '../../src/pipeline/ingest-path.js';
import { allocatePipelineMemory, pipelineMemorySpecOf } from '../../src/pipeline/memory.js';
import { ingestThreadData } from '../../src/router/thread-data.js';
import { Lane } from '../../src/shm/layout.js';
import { at, collection, square } from '../fences/helpers.js';
import { containmentPool } from './support.js';
import { assertAllocationFree } from '../support/alloc-free.js';

const DEVICES = 1000;

test('ingest with the COMPLIANCE path: choosing the path and admitting into either ring allocate nothing per ping', async () => {
  const o = resolveRouterOptions({ shards: 2, poolSize: 1, maxDevices: DEVICES, stateDir: null });
  assert.equal(o.complianceWorker, true);
  const m = allocatePipelineMemory(pipelineMemorySpecOf(o));
  assert.equal(m.complianceRings.length, 1);
  const descriptor = buildFenceStore(parseFences(collection(square('port', 0, 0, 100, { compliance: true }))), 1);
  const d = ingestThreadData(o, m, descriptor);
  const pool = containmentPool(m, descriptor);
  try {
    const quiet = (): void => undefined;
    const path = buildIngestPath(m, d, pool, { error: quiet, warn: quiet }, false);
    // No task runs: this test consumes the records itself, as containment would.
    await path.scheduler.pause();
    const paths = path.paths!;
    const rings = [...path.scheduler.rings, paths.ring];
    // Each device inside the compliance fence on one visit and 2 km away on the next: its lane changes every time.
    const objects = Array.from({ length: 2 * DEVICES }, (_, k) => {
      const [lat, lon] = at(k < DEVICES ? 0 : 2000, (k % DEVICES) % 50);
      return { id: `dev-${k % DEVICES}`, lat, lon, ts: 1_735_689_600_000 };
    });
    const mask = KeyBit.ID | KeyBit.LAT | KeyBit.LON | KeyBit.TS;
    const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
    const fields = new PingFields();
    let bad = 0;
    let compliance = 0;
    const body = (i: number): void => {
      const o = objects[(i % DEVICES) + (((i / DEVICES) | 0) & 1) * DEVICES]!;
      if (validatePingInto(o, mask, limits, fields) !== PING_VALID) bad++;
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
    await pool.destroy();
  }
});
