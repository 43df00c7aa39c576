/**
 * Several ingest threads' registries over one id table: two real worker threads register overlapping ids at once,
 * and every id gets one slot whichever thread saw it; a device pinged on another thread while it expires stays live;
 * a slot taken back and reused is never taken for its old device by a thread that had it cached.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import {
  DeviceIdReader,
  DeviceRegistry,
  allocateDeviceIdTable,
  type ExpiryPort,
} from '../../src/ingest/device-registry.js';
import { PF_NUMERIC_ID_F64, type PingFields } from '../../src/ingest/ping-fields.js';
import { DeviceLife } from '../../src/shm/layout.js';

function run(job: object): Promise<Int32Array> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL('./shared-registry-worker.js', import.meta.url), { workerData: job });
    w.once('message', (m: { slots: Int32Array }) => resolve(m.slots));
    w.once('error', reject);
  });
}

/** A seeded shuffle (mulberry32). */
function shuffled<T>(items: T[], seed: number): T[] {
  let a = seed >>> 0;
  const rand = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = items.slice();
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

test('two threads registering overlapping ids at once give each id one slot', async () => {
  const n = 40_000;
  const table = allocateDeviceIdTable(2 * n, 24);
  // Ids 0 .. 1.5n (strings and numbers): the middle third is sent by both threads, in different orders.
  const all: (string | number)[] = [];
  for (let i = 0; i < 1.5 * n; i++) all.push(i % 2 === 0 ? `veh-${i}` : 1e12 + i);
  const a = shuffled(all.slice(0, n), 1);
  const b = shuffled(all.slice(n / 2), 2);
  const start = new SharedArrayBuffer(4);
  const [sa, sb] = await Promise.all([
    run({ table, member: 0, ids: a, passes: 3, start }),
    run({ table, member: 1, ids: b, passes: 3, start }),
  ]);
  const slotOf = new Map<string | number, number>();
  a.forEach((id, i) => slotOf.set(id, sa[i]!));
  let shared = 0;
  b.forEach((id, i) => {
    const s = slotOf.get(id);
    if (s !== undefined) {
      shared++;
      assert.equal(sb[i], s, `id ${String(id)}: the two threads got different slots`);
    } else slotOf.set(id, sb[i]!);
  });
  assert.equal(shared, n / 2);
  const slots = new Set(slotOf.values());
  assert.equal(slots.size, all.length, 'one slot per id');
  for (const s of slots) assert.ok(s >= 0 && s < all.length, `slot ${s} in [0, ${all.length})`);
  const reader = new DeviceIdReader(table);
  assert.equal(reader.deviceCount(), all.length);
  for (const [id, s] of slotOf) assert.equal(reader.deviceIdOf(s), id);
  const registry = new DeviceRegistry(table, 8, 2, 3);
  assert.equal(registry.size, all.length);
  for (const [id, s] of slotOf) assert.equal(registry.lookup(id), s);
});

class Port implements ExpiryPort {
  readonly seq = new Float64Array(16);
  readonly expired: number[] = [];
  beforeExpire: () => void = () => undefined;
  expire(slot: number): boolean {
    this.beforeExpire();
    this.expired.push(slot);
    return true;
  }
  finalSeqOf(slot: number): number {
    return this.seq[slot]!;
  }
  reused(slot: number, floor: number): void {
    this.seq[slot] = floor;
  }
}

function fieldsOf(id: number): PingFields {
  const values = new Float64Array(16);
  values[PF_NUMERIC_ID_F64] = id;
  return { idIsNumber: true, idInBytes: false, idKey: '', values } as unknown as PingFields;
}

test('a device pinged on another ingest thread while it expires stays live', () => {
  const table = allocateDeviceIdTable(8, 16);
  const first = new DeviceRegistry(table, 2, 0, 2);
  const second = new DeviceRegistry(table, 2, 1, 2);
  const port = new Port();
  first.setExpiryPort(port);
  assert.equal(first.slotOf(fieldsOf(7)), 0);
  first.sweep(2);
  const reader = new DeviceIdReader(table);
  // The second thread pings the device while the sweep writes its expiry record: it finds it RETIRING and revives it.
  port.beforeExpire = () => {
    assert.equal(reader.lifeStateOf(0), DeviceLife.RETIRING);
    assert.equal(second.slotOf(fieldsOf(7)), 0);
  };
  assert.equal(first.sweep(1), 1);
  assert.equal(reader.lifeStateOf(0), DeviceLife.ACTIVE, 'revived');
  assert.equal(reader.free(0, 1), false, 'the dispatcher cannot free it for that expiry');
  assert.equal(first.life.revived, 1);
  // Stamped by the second thread in this sweep's tick: not idle at the next sweep, whichever thread stamped it.
  port.beforeExpire = () => undefined;
  assert.equal(first.sweep(2), 0);
});

test('a slot reused for a new device is never taken for the old one by a thread that had it cached', () => {
  const table = allocateDeviceIdTable(2, 16);
  const first = new DeviceRegistry(table, 2, 0, 2);
  const second = new DeviceRegistry(table, 2, 1, 2);
  const port = new Port();
  first.setExpiryPort(port);
  const reader = new DeviceIdReader(table);
  assert.equal(second.slotOf(fieldsOf(100)), 0);
  assert.equal(first.slotOf(fieldsOf(200)), 1);
  // 100 goes idle: expired, freed by the dispatcher, taken back.
  first.sweep(1);
  first.slotOf(fieldsOf(200));
  assert.equal(first.sweep(1), 1);
  assert.ok(reader.free(0, 1));
  first.slotOf(fieldsOf(200));
  first.sweep(1);
  assert.equal(reader.lifeStateOf(0), DeviceLife.RECLAIMED);
  // A new device takes slot 0 through the first thread; the second thread still has 100 cached in slot 0.
  assert.equal(first.slotOf(fieldsOf(300)), 0);
  assert.equal(reader.deviceIdOf(0), 300);
  // 100 comes back on the second thread: not slot 0 (300's); the table is full, so it is refused.
  assert.equal(second.slotOf(fieldsOf(100)), -1);
  assert.equal(second.slotOf(fieldsOf(300)), 0, '300 found through the shared index');
  assert.equal(second.purgeStale(), 0, 'the stale entry was dropped when it failed to confirm');
  assert.equal(first.life.reused, 1);
});
