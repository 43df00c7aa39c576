/**
 * Bad input through the whole router: corrupt, truncated and oversized frames, NaN and out-of-range coordinates,
 * unknown keys and huge ids are rejected and counted by reason, and the stream goes on with the next valid frame
 * (each valid ping is admitted, processed and its trigger delivered).
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, frameOf, sendOverTcp, square, T0, waitFor } from './support.js';

test('bad frames and pings are rejected by reason over TCP and in-process while the valid ones flow', async () => {
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features: [square('A', 0, 0, 50)] },
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    idBytesPerSlot: 16,
    ingest: { maxFrameBytes: 128 },
    stateDir: mkdtempSync(join(tmpdir(), 'gr-rej-')),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
  });
  try {
    const [lat, lon] = at(0, 0);
    const good = (id: string, dtMs: number): Buffer => frameOf({ id, eastM: 0, northM: 0, dtMs });
    const stream = Buffer.concat([
      good('g1', 0),
      Buffer.from([0xc1, 0xc1, 0xc1]), // never-used byte: corrupt
      good('g2', 0),
      pack({ id: 'x'.repeat(200), lat, lon, ts: T0 }), // oversized (> 128 bytes)
      good('g3', 0),
      pack({ id: 'n', lat: Number.NaN, lon, ts: T0 }), // NaN latitude
      pack({ id: 'n', lat: 91, lon, ts: T0 }), // out of range
      pack({ id: 'n', lat, lon: -181, ts: T0 }), // out of range
      pack({ id: 'u', lat, lon, ts: T0, colour: 'red' }), // unknown key
      pack({ id: 'z'.repeat(40), lat, lon, ts: T0 }), // id longer than idBytesPerSlot
      good('g4', 0),
      pack({ id: 'cut', lat, lon, ts: T0 }).subarray(0, 10), // truncated by the end of the connection
    ]);
    await sendOverTcp(router.ingestPort!, stream, 23);
    // The connection's end (its truncated frame counted) is seen before the drain closes the listener.
    await waitFor(() => (router.stats().rejected['truncated_frame'] ?? 0) === 1, 10_000, 'the end of the connection');
    // In-process: a point with a huge id and one valid point.
    router.push({ id: 'h'.repeat(5000), lat, lon, ts: T0 });
    router.push({ id: 'p1', lat, lon, ts: T0 });
    router.ingest(Buffer.concat([good('i1', 0), Buffer.from([0xc1])]));
    const s = await router.close();
    assert.equal(s.rejected['corrupt_frame'], 2);
    assert.equal(s.rejected['oversized_frame'], 1);
    assert.equal(s.rejected['invalid_lat'], 2);
    assert.equal(s.rejected['invalid_lon'], 1);
    assert.equal(s.rejected['unknown_key'], 1);
    assert.equal((s.rejected['id_too_long'] ?? 0) + (s.rejected['invalid_id'] ?? 0), 2);
    assert.equal(s.rejected['truncated_frame'], 1);
    assert.equal(s.accepted, 6);
    assert.equal(s.admittedTotal, 6);
    assert.equal(s.processed, 6);
    assert.deepEqual(got.map((t) => t.deviceId).sort(), ['g1', 'g2', 'g3', 'g4', 'i1', 'p1']);
    assert.ok(got.every((t) => t.type === 'ENTER' && t.fenceId === 'A'));
    // Nothing else lost or reordered around the rejects: each valid device's ENTER under seq 1.
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  } finally {
    await router.close();
  }
});
