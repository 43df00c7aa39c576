/**
 * A numeric device id keeps all 53 bits everywhere it travels: sent as uint64 (as @msgpack/msgpack and Python's
 * msgpack write an IMEI), through the device registry and shared id table, trigger records in the backlog log and
 * the dead-letter file (read back by this run and by a later one), the checkpoint, the sink JSON, and a restart of
 * the router that restores the devices from the checkpoint.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { encode } from '@msgpack/msgpack';
import { DeadLetterStatus, Lane, TriggerType } from '../../src/shm/layout.js';
import { DeviceIdReader, shardOfId } from '../../src/ingest/device-registry.js';
import { FenceCatalog } from '../../src/dispatch/fence-catalog.js';
import { IndexNamer, triggerJson } from '../../src/dispatch/sinks/format.js';
import { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { BacklogLog, scanBacklog } from '../../src/durable/backlog-log.js';
import {
  decodeCheckpoint,
  DeviceStateCopy,
  encodeCheckpoint,
  readLatestCheckpoint,
} from '../../src/durable/checkpoint.js';
import { DeadLetterFile } from '../../src/durable/dead-letter-file.js';
import { readTriggerIdentity, RecordBuffer, TriggerCodec } from '../../src/durable/trigger-codec.js';
import { buildFenceStore, FenceStore, parseFences } from '../../src/fences/index.js';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { collection } from '../fences/helpers.js';
import { dispatchRecord, TriggerRecord } from '../dispatch/fixtures.js';
import { makeEdge } from '../ingest/support.js';
import { at, square, T0, TriggerServer } from '../pipeline/support.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';

const IMEI = 358_240_051_111_110;
const MAX_ID = Number.MAX_SAFE_INTEGER;
/** Ids whose low bits alone would collide or whose high bits matter: every one must come back as itself. */
const IDS = [IMEI, MAX_ID, MAX_ID - 1, 2 ** 32, 2 ** 32 - 1, 2 ** 52 + 1, 0];

function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** A real edge that registered IDS from uint64-encoded frames, and a reader over its id table. */
function registered(): { reader: DeviceIdReader; slots: number[]; shards: number[] } {
  const fx = makeEdge({}, { maxDevices: 64, shards: 8 });
  fx.edge.ingest(Buffer.concat(IDS.map((id) => encode({ id, lat: 52.5, lon: 13.4, ts: T0 }))));
  assert.deepEqual(fx.logLines, []);
  const slots = IDS.map((id) => fx.registry.lookup(id));
  return { reader: new DeviceIdReader(fx.idTable), slots, shards: slots.map((s) => fx.registry.shardOfSlot[s]!) };
}

test('registry and shared id table: every id is its own device, read back exactly, on the documented shard', () => {
  const { reader, slots, shards } = registered();
  assert.deepEqual(
    slots,
    IDS.map((_, i) => i),
    'one slot per id, none merged with a neighbour',
  );
  for (let i = 0; i < IDS.length; i++) {
    assert.equal(reader.deviceIdOf(slots[i]!), IDS[i]);
    assert.equal(reader.isNumeric(slots[i]!), true);
    assert.equal(reader.numericId(slots[i]!), IDS[i]);
    const cell = new Float64Array(1);
    reader.copyNumericId(slots[i]!, cell, 0);
    assert.equal(cell[0], IDS[i]);
    assert.equal(shards[i], shardOfId(IDS[i]!, 8), `shard of ${IDS[i]}`);
  }
});

test('trigger records, the backlog log and the dead-letter file keep the id, for this run and a later one', () => {
  const { reader, slots } = registered();
  const catalog = new FenceCatalog(new IndexNamer());
  const identity = {
    isNumeric: (slot: number) => reader.isNumeric(slot),
    copyNumericId: (slot: number, dst: Float64Array, index: number) => reader.copyNumericId(slot, dst, index),
    copyIdBytes: (slot: number, dst: Uint8Array, at: number) => reader.copyIdBytes(slot, dst, at),
    fenceIdBytes: (h: number) => catalog.idBytes(h),
    fenceTagsBytes: (h: number) => catalog.tagsBytes(h),
  };
  const codec = new TriggerCodec(1, identity, 0);
  const buf = new RecordBuffer(1 << 16);
  const record = new TriggerRecord();
  let length = 0;
  const dir = tmp('numeric-ids-');
  const backlog = new BacklogLog({ dir: path.join(dir, 'hook'), downstreamName: 'hook', codec, maxBytes: 1 << 30 });
  IDS.forEach((_, i) => {
    const rec = dispatchRecord(
      record.set(i + 1, TriggerType.EXIT, Lane.TRANSITION, 1, slots[i]!),
      catalog.handleOf(1, 1),
    );
    length += codec.encode(rec.f64, rec.i32, 0, 0, buf, length, buf.byteLength, DeadLetterStatus.PENDING);
    assert.equal(backlog.append(rec.f64, rec.i32, 0, 0), true);
  });
  backlog.flush();
  backlog.close();
  // The records themselves.
  const fromRecords: (string | number)[] = [];
  for (let at = 0; at < length; at += buf.i32[at >> 2]!) fromRecords.push(readTriggerIdentity(buf, at).deviceId);
  assert.deepEqual(fromRecords, IDS);
  // A later run resolves the record's device by its id.
  const asked: (string | number)[] = [];
  const later = new TriggerCodec(2, null, 0);
  const out = dispatchRecord(new TriggerRecord(), 0);
  for (let at = 0; at < length; at += buf.i32[at >> 2]!) {
    later.decode(buf, at, out.f64, out.i32, 0, 0, { deviceSlot: (id) => (asked.push(id), 0), fenceHandle: () => 0 });
  }
  assert.deepEqual(asked, IDS);
  // The backlog log's segments.
  const fromBacklog: (string | number)[] = [];
  scanBacklog(path.join(dir, 'hook'), 'hook', (b, at) => void fromBacklog.push(readTriggerIdentity(b, at).deviceId));
  assert.deepEqual(fromBacklog, IDS);
  // The dead-letter file, reopened.
  const dlq = new DeadLetterFile(path.join(dir, 'dlq'), 'hook', null);
  dlq.ensureRoom();
  dlq.append(buf, length, IDS.length, IDS.length, 0);
  dlq.close();
  const fromDlq: (string | number)[] = [];
  new DeadLetterFile(
    path.join(dir, 'dlq'),
    'hook',
    (b, at) => void fromDlq.push(readTriggerIdentity(b, at).deviceId),
  ).close();
  assert.deepEqual(fromDlq, IDS);
});

test('the checkpoint keeps the id', () => {
  const { reader } = registered();
  const store = FenceStore.open(buildFenceStore(parseFences(collection(square('A', 0, 0, 100))), 1));
  const copy = new DeviceStateCopy(64);
  copy.count = IDS.length;
  copy.generation = store.generation;
  copy.entryStart.fill(0);
  const cp = decodeCheckpoint(
    encodeCheckpoint(copy, reader, store, {
      seqFloor: 0,
      number: 1,
      pingsProcessed: 0,
      triggersProduced: 0,
      clean: true,
    }),
    'cp',
  );
  assert.deepEqual(
    cp.devices.map((d) => d.id),
    IDS,
  );
});

test('the sink JSON writes the id as a JSON number with every digit', () => {
  const { reader, slots } = registered();
  const record = new TriggerRecord();
  IDS.forEach((id, i) => {
    const rec = dispatchRecord(record.set(1, TriggerType.ENTER, Lane.TRANSITION, 0, slots[i]!), 0);
    const batch = new TriggerBatch(rec.f64, rec.i32, 1, {
      deviceId: (slot) => reader.deviceIdOf(slot)!,
      fenceId: () => 'A',
      fenceTags: () => [],
      fenceJson: () => '"fenceId":"A","tags":[]',
    });
    batch.add(0);
    const json = triggerJson(batch, 0);
    assert.ok(json.includes(`"deviceId":${BigInt(id).toString()},`), json);
    assert.equal((JSON.parse(json) as Trigger).deviceId, id);
  });
});

test('a router restart restores uint64-sent devices from the checkpoint and names them exactly in its triggers', async () => {
  const dir = tmp('numeric-restart-');
  const stateDir = path.join(dir, 'state');
  const fences = { type: 'FeatureCollection', features: [square('A', 0, 0, 50)] };
  const ids = [IMEI, MAX_ID, 2 ** 32];
  const frame = (id: number, eastM: number, dtMs: number): Uint8Array => {
    const [lat, lon] = at(eastM, 0);
    return encode({ id, lat, lon, ts: T0 + dtMs, speed: 4 });
  };
  const run = async (bytes: Buffer): Promise<{ called: Trigger[]; hook: Trigger[]; raw: string[] }> => {
    const http = new TriggerServer();
    await http.start();
    const called: Trigger[] = [];
    const router = await createRouter({
      fences,
      listenHost: null,
      adminHost: null,
      shards: 2,
      poolSize: 1,
      ringCapacitySlots: 256,
      maxDevices: 100,
      stateDir,
      downstreams: [
        { name: 'cb', kind: 'callback', callback: (ts) => void called.push(...ts) },
        { name: 'hook', kind: 'webhook', url: http.url, limit: 1 },
      ],
      log: () => undefined,
    });
    try {
      router.ingest(bytes);
      await router.close();
      return { called, hook: http.received.slice(), raw: http.rawDeviceIds };
    } finally {
      await router.close();
      await http.stop();
    }
  };
  // First run: every device enters A and stays inside.
  const first = await run(Buffer.concat(ids.flatMap((id) => [frame(id, -200, 0), frame(id, 0, 1000)])));
  // Devices on different shards may arrive in any order: compared sorted.
  assert.deepEqual(
    first.called.map((t) => [t.deviceId, t.type, t.seq]).sort(),
    ids.map((id) => [id, 'ENTER', 1]).sort(),
  );
  const cp = readLatestCheckpoint(stateDir);
  assert.ok(cp !== null);
  assert.deepEqual(cp.devices.map((d) => d.id).sort(), [...ids].sort());
  // Second run: they leave; the EXIT comes from the restored inside state, under the exact id.
  const second = await run(Buffer.concat(ids.map((id) => frame(id, 200, 2000))));
  assert.deepEqual(
    second.called.map((t) => [t.deviceId, t.type, t.seq]).sort(),
    ids.map((id) => [id, 'EXIT', 2]).sort(),
  );
  assert.deepEqual(second.raw.sort(), ids.map((id) => String(id)).sort());
  // At both receivers across the restart: ENTER 1 then EXIT 2 per device, in order, each (deviceId, seq) once.
  for (const [name, got] of [
    ['callback', [...first.called, ...second.called]],
    ['webhook', [...first.hook, ...second.hook]],
  ] as const) {
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, [], name);
    assert.equal(got.length, 2 * ids.length, name);
  }
});
