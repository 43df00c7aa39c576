/**
 * Device registry: dense slot assignment, full registry and too-long ids rejected and counted, stable shards, and
 * the shared id table read from another worker_thread.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ING_DEVICES_F64, RejectReason } from '../../src/shm/layout.js';
import { DeviceIdReader, DeviceRegistry, allocateDeviceIdTable, shardOfId } from '../../src/ingest/device-registry.js';
import { makeEdge, ping } from './support.js';

test('slots are dense, in order of first appearance, and stable', () => {
  const fx = makeEdge({}, { maxDevices: 100 });
  const ids: (string | number)[] = ['a', 7, 'b', '7', 'ünïcødé-✓', 0];
  for (const id of ids) fx.edge.push(ping(id, 1) as never);
  for (const id of ids) fx.edge.push(ping(id, 2) as never);
  assert.deepEqual(
    fx.sink.pings.map((p) => p.slot),
    [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5],
  );
  assert.equal(fx.registry.size, 6);
  assert.equal(fx.registry.lookup(7), 1);
  assert.equal(fx.registry.lookup('7'), 3, 'numeric and string ids are different devices');
  assert.equal(fx.pipeline.f64[ING_DEVICES_F64], 6);
});

test('a full registry rejects new devices, counted, and keeps serving known ones', () => {
  const fx = makeEdge({}, { maxDevices: 3 });
  for (const id of ['a', 'b', 'c', 'd', 'e']) fx.edge.push(ping(id, 1) as never);
  fx.edge.push(ping('a', 2) as never);
  assert.deepEqual(
    fx.sink.pings.map((p) => p.id),
    ['a', 'b', 'c', 'a'],
  );
  assert.equal(fx.rejected(RejectReason.REGISTRY_FULL), 2);
});

test('an id longer than the table slot in UTF-8 bytes is rejected as too long', () => {
  const fx = makeEdge({}, { idBytes: 8 });
  // 8 UTF-16 units but 24 UTF-8 bytes.
  assert.equal(fx.edge.push(ping('€€€€€€€€', 1) as never), RejectReason.ID_TOO_LONG);
  assert.equal(fx.edge.push(ping('12345678', 1) as never), -1);
  assert.equal(fx.rejected(RejectReason.ID_TOO_LONG), 1);
  assert.equal(fx.registry.size, 1);
});

test('shards follow the documented hash, spread devices, and agree with shardOfId', () => {
  const fx = makeEdge({}, { shards: 8, maxDevices: 5000 });
  const counts = new Array<number>(8).fill(0);
  for (let i = 0; i < 4000; i++) {
    const id = i % 2 === 0 ? `vehicle-${i}` : i * 7919;
    fx.edge.push(ping(id, 1) as never);
    const p = fx.sink.pings[i]!;
    assert.equal(p.shard, shardOfId(id, 8));
    counts[p.shard]!++;
  }
  for (const c of counts) assert.ok(c > 350 && c < 650, `balanced shards: ${counts.join(',')}`);
  // Fixed values: the hash is part of the contract (same shard in every process).
  assert.equal(shardOfId('vehicle-1', 16), shardOfId('vehicle-1', 16));
  const again = new DeviceRegistry(allocateDeviceIdTable(10, 16), 8);
  const other = makeEdge({}, { shards: 8 });
  other.edge.push(ping('vehicle-0', 1) as never);
  assert.equal(other.sink.pings[0]!.shard, fx.sink.pings[0]!.shard);
  assert.equal(again.size, 0);
});

test('the id table names devices from another worker_thread', async () => {
  const fx = makeEdge({}, { maxDevices: 2000, idBytes: 48 });
  const ids: (string | number)[] = [];
  for (let i = 0; i < 1500; i++) ids.push(i % 3 === 0 ? 2 ** 40 + i : `truck-${i}-ä`);
  for (const id of ids) fx.edge.push(ping(id, 1) as never);
  const worker = new Worker(new URL('./fixtures/id-reader-thread.js', import.meta.url), {
    workerData: { idTable: fx.idTable },
  });
  try {
    const reply = await new Promise<{ count: number; first: unknown[]; second: unknown[] }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.postMessage({ slots: [...ids.keys(), 1500, 1999, -1] });
    });
    assert.equal(reply.count, 1500);
    assert.deepEqual(reply.first, [...ids, null, null, null]);
    assert.deepEqual(reply.second, reply.first);
  } finally {
    await worker.terminate();
  }
  // The same reader API on this thread.
  const reader = new DeviceIdReader(fx.idTable);
  assert.equal(reader.deviceIdOf(1), 'truck-1-ä');
});

test('bad registry sizes are refused with the option named', () => {
  assert.throws(() => allocateDeviceIdTable(0, 16), /maxDevices must be an integer in \[1, /);
  assert.throws(() => allocateDeviceIdTable(10, 0), /idBytesPerSlot must be an integer in \[1, 1024\]/);
  assert.throws(
    () => new DeviceRegistry(allocateDeviceIdTable(10, 16), 0),
    /shards must be an integer in \[1, 65535\]/,
  );
  assert.throws(() => new DeviceIdReader(new SharedArrayBuffer(64)), /bad magic/);
});
