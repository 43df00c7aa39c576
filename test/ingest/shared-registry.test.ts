/**
 * Several ingest threads' registries over one id table: two real worker threads register overlapping ids at once,
 * and every id gets one slot whichever thread saw it; an expiry takes two steps and a device pinged on another thread
 * in between stays live; a slot that changes hands while a thread resolves an id is not cached for it;
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

/** Ingest threads 0 and 1's registries over one table of `maxDevices` slots, thread 0's with the expiry port. */
function twoRegistries(maxDevices: number): {
  first: DeviceRegistry;
  second: DeviceRegistry;
  port: Port;
  reader: DeviceIdReader;
} {
  const table = allocateDeviceIdTable(maxDevices, 16);
  const first = new DeviceRegistry(table, 2, 0, 2);
  const second = new DeviceRegistry(table, 2, 1, 2);
  const port = new Port();
  first.setExpiryPort(port);
  return { first, second, port, reader: new DeviceIdReader(table) };
}

function fieldsOf(id: number): PingFields {
  const values = new Float64Array(16);
  values[PF_NUMERIC_ID_F64] = id;
  return { idIsNumber: true, idInBytes: false, idKey: '', values } as unknown as PingFields;
}

test('with several ingest threads an expiry is two steps; a device pinged on another thread in between stays live', () => {
  const { first, second, port, reader } = twoRegistries(8);
  assert.equal(first.slotOf(fieldsOf(7)), 0);
  assert.equal(first.slotOf(fieldsOf(8)), 1);
  assert.equal(first.sweep(2), 0);
  // Idle for two ticks: RETIRING, and no record yet (the rings are read past this sweep first).
  assert.equal(first.sweep(2), 0);
  assert.deepEqual(port.expired, []);
  assert.equal(reader.lifeStateOf(0), DeviceLife.RETIRING);
  assert.equal(reader.lifeStateOf(1), DeviceLife.RETIRING);
  assert.equal(first.life.expired, 2);
  // Device 7 pings on the second thread meanwhile: revived, so it gets no record.
  assert.equal(second.slotOf(fieldsOf(7)), 0);
  assert.equal(reader.lifeStateOf(0), DeviceLife.ACTIVE);
  assert.equal(first.life.revived, 1);
  // The next sweep writes the record of device 8 only.
  assert.equal(first.sweep(5), 1);
  assert.deepEqual(port.expired, [1]);
  assert.equal(reader.lifeStateOf(0), DeviceLife.ACTIVE);
});

test('at a drain, devices marked expired whose record is not written yet are put back', () => {
  const { first, port, reader } = twoRegistries(4);
  assert.equal(first.slotOf(fieldsOf(9)), 0);
  first.sweep(2);
  first.sweep(2);
  assert.equal(reader.lifeStateOf(0), DeviceLife.RETIRING);
  assert.equal(first.life.expired, 1);
  assert.equal(first.cancelPendingExpiries(), 1);
  assert.equal(reader.lifeStateOf(0), DeviceLife.ACTIVE);
  assert.equal(first.life.expired, 0);
  // Nothing is left for a later sweep to write.
  assert.equal(first.sweep(100), 0);
  assert.deepEqual(port.expired, []);
});

test('a device found free in the shared index and given to another device before it is cached is not taken for it', () => {
  const { first, second, reader } = twoRegistries(2);
  assert.equal(first.slotOf(fieldsOf(100)), 0);
  assert.equal(first.slotOf(fieldsOf(200)), 1);
  first.sweep(2);
  first.slotOf(fieldsOf(200));
  assert.equal(first.sweep(2), 0, '100 RETIRING');
  first.slotOf(fieldsOf(200));
  assert.equal(first.sweep(2), 1, "100's record");
  assert.ok(reader.free(0, 1));
  // Device 100 comes back on the second thread, which has not met it: it finds slot 0 (FREE) in the shared index.
  // Right after it lets the registration lock go, the first thread takes slot 0 back and gives it to device 300.
  const lock = (second as unknown as { lock: { release(): void } }).lock;
  const release = lock.release.bind(lock);
  let once = true;
  lock.release = () => {
    release();
    if (!once) return;
    once = false;
    first.slotOf(fieldsOf(200));
    first.sweep(2);
    assert.equal(reader.lifeStateOf(0), DeviceLife.RECLAIMED);
    assert.equal(first.slotOf(fieldsOf(300)), 0);
  };
  // Not slot 0 (device 300's): the table is full, so 100 is refused, now and on its next ping.
  assert.equal(second.slotOf(fieldsOf(100)), -1);
  assert.equal(reader.deviceIdOf(0), 300);
  assert.equal(second.slotOf(fieldsOf(100)), -1);
  assert.equal(second.slotOf(fieldsOf(300)), 0);
});

test('a slot reused for a new device is never taken for the old one by a thread that had it cached', () => {
  const { first, second, reader } = twoRegistries(2);
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
