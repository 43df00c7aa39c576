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
import { createRouter, type Router } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, frameOf, sendOverTcp, square, T0, waitFor, type ScriptedPing } from './support.js';

/** A router with fence A (50 m around the origin), a TCP listener and a callback receiver collecting into `got`. */
function rejectsRouter(got: Trigger[], log: (line: string) => void): Promise<Router> {
  return createRouter({
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
    log,
  });
}

test('bad frames and pings are rejected by reason over TCP and in-process while the valid ones flow', async () => {
  const got: Trigger[] = [];
  const router = await rejectsRouter(got, () => undefined);
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

/** A telemetry frame whose id is the string of exactly `idBytes` (valid UTF-8 or not), in MessagePack form `form`. */
function frameWithIdBytes(idBytes: number[], form: 'fixstr' | 'str8' | 'str16' | 'str32', p: ScriptedPing): Buffer {
  const n = idBytes.length;
  const header =
    form === 'fixstr'
      ? [0xa0 | n]
      : form === 'str8'
        ? [0xd9, n]
        : form === 'str16'
          ? [0xda, n >> 8, n & 0xff]
          : [0xdb, 0, 0, n >> 8, n & 0xff];
  const [lat, lon] = at(p.eastM, p.northM);
  return Buffer.concat([
    Buffer.from([0x84]),
    pack('id'),
    Buffer.from([...header, ...idBytes]),
    pack('lat'),
    pack(lat),
    pack('lon'),
    pack(lon),
    pack('ts'),
    pack(T0 + p.dtMs),
  ]);
}

test('ids that are not valid UTF-8 (or hold a lone surrogate) are invalid_id, never one device with another', async () => {
  const got: Trigger[] = [];
  const logLines: string[] = [];
  const router = await rejectsRouter(got, (line) => void logLines.push(line));
  try {
    // "\ufffdA" is a valid id (U+FFFD is EF BF BD); FF 41 and FE 41 are not UTF-8, and msgpackr reads both as
    // "\ufffdA". The valid device stays inside A while the other two ping 500 m away, in every string form.
    const forms = ['fixstr', 'str8', 'str16', 'str32'] as const;
    const frames: Buffer[] = [];
    for (let i = 0; i < 8; i++) {
      frames.push(
        frameWithIdBytes([0xef, 0xbf, 0xbd, 0x41], forms[i % 4]!, { id: '', eastM: 0, northM: 0, dtMs: i * 1000 }),
      );
      frames.push(
        frameWithIdBytes([0xff, 0x41], forms[i % 4]!, { id: '', eastM: 500, northM: 0, dtMs: i * 1000 + 300 }),
      );
      frames.push(
        frameWithIdBytes([0xfe, 0x41], forms[(i + 1) % 4]!, { id: '', eastM: 500, northM: 0, dtMs: i * 1000 + 600 }),
      );
      frames.push(frameOf({ id: 'Zürich-7', eastM: 10, northM: 10, dtMs: i * 1000 + 700 }));
    }
    await sendOverTcp(router.ingestPort!, Buffer.concat(frames), 29);
    await waitFor(
      () => router.stats().accepted + (router.stats().rejected['invalid_id'] ?? 0) === 32,
      10_000,
      'the 32 frames',
    );
    // In-process: lone surrogates have no UTF-8 form of their own ("\ud800A" and "\udc00A" would both be EF BF BD 41).
    const [lat, lon] = at(500, 0);
    router.push({ id: '\ud800A', lat, lon, ts: T0 + 9000 });
    router.push({ id: '\udc00A', lat, lon, ts: T0 + 9100 });
    const s = await router.close();
    // One ENTER each for the two valid devices: no EXIT from another sender's pings.
    assert.deepEqual(got.map((t) => `${t.deviceId} ${t.type} ${t.fenceId}`).sort(), [
      'Zürich-7 ENTER A',
      '\ufffdA ENTER A',
    ]);
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    assert.equal(s.rejected['invalid_id'], 18);
    assert.equal(s.accepted, 16);
    assert.ok(
      logLines.some((l) => l.includes('rejected invalid_id') && l.includes('is not valid UTF-8')),
      logLines.join('\n'),
    );
  } finally {
    await router.close();
  }
});
