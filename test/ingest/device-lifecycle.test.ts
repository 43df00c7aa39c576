/**
 * Device lifecycle in the registry: idle devices expire through the port, a revived device keeps its slot, a freed
 * slot is taken back and reused with a bumped generation (a cached name of the old device is never returned for the
 * new one), numeric ids leave the open-addressing index without breaking other probe chains, and a new device, in a
 * reused slot or a fresh one, starts above every seq a freed device of its partition had.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  DeviceIdReader,
  DeviceRegistry,
  allocateDeviceIdTable,
  freedSeqHighOf,
  seqFloorsOf,
  type ExpiryPort,
} from '../../src/ingest/device-registry.js';
import { partitionOf, partitionOfNumericId } from '../../src/ingest/sources/partitions.js';
import { DeviceLife } from '../../src/shm/layout.js';
import { PF_NUMERIC_ID_F64, type PingFields } from '../../src/ingest/ping-fields.js';

/** A port that records expiries and keeps a seq per slot. */
class Port implements ExpiryPort {
  readonly expired: [number, number][] = [];
  readonly seq = new Float64Array(64);
  room = true;
  expire(slot: number, _shard: number, epoch: number): boolean {
    if (!this.room) return false;
    this.expired.push([slot, epoch]);
    return true;
  }
  finalSeqOf(slot: number): number {
    return this.seq[slot]!;
  }
  reused(slot: number, seqFloor: number): void {
    this.seq[slot] = seqFloor;
  }
}

function fieldsOf(id: string | number): PingFields {
  const values = new Float64Array(16);
  if (typeof id === 'number') values[PF_NUMERIC_ID_F64] = id;
  return {
    idIsNumber: typeof id === 'number',
    idKey: typeof id === 'string' ? id : '',
    values,
  } as unknown as PingFields;
}

function setup(
  maxDevices: number,
  partitionCount = 1,
): {
  reg: DeviceRegistry;
  ids: DeviceIdReader;
  port: Port;
  table: SharedArrayBuffer;
} {
  const table = allocateDeviceIdTable(maxDevices, 16, partitionCount);
  const reg = new DeviceRegistry(table, 4);
  const port = new Port();
  reg.setExpiryPort(port);
  return { reg, ids: new DeviceIdReader(table), port, table };
}

test('idle devices expire after the idle ticks; a device that sends again stays', () => {
  const { reg, ids, port } = setup(8);
  assert.equal(reg.slotOf(fieldsOf('a')), 0);
  assert.equal(reg.slotOf(fieldsOf('b')), 1);
  assert.equal(reg.sweep(3), 0);
  reg.slotOf(fieldsOf('b'));
  assert.equal(reg.sweep(3), 0);
  assert.equal(reg.sweep(3), 1, 'a: idle for 3 ticks');
  assert.deepEqual(port.expired, [[0, 1]]);
  assert.equal(ids.lifeStateOf(0), DeviceLife.RETIRING);
  assert.equal(ids.lifeStateOf(1), DeviceLife.ACTIVE);
  // A ring without room: the expiry waits for the next sweep.
  port.room = false;
  assert.equal(reg.sweep(3), 0);
  assert.equal(ids.lifeStateOf(1), DeviceLife.ACTIVE);
});

test('a revived device keeps its slot; the dispatcher cannot free it for the old epoch', () => {
  const { reg, ids } = setup(4);
  reg.slotOf(fieldsOf('a'));
  reg.sweep(1);
  reg.sweep(1);
  assert.equal(ids.lifeStateOf(0), DeviceLife.RETIRING);
  assert.equal(reg.slotOf(fieldsOf('a')), 0, 'same slot');
  assert.equal(ids.lifeStateOf(0), DeviceLife.ACTIVE);
  assert.equal(ids.free(0, 1), false, 'its retire marker is stale now');
  assert.equal(reg.life.revived, 1);
});

test('a freed slot is taken back and reused: new generation, new name, seq above every freed device', () => {
  const { reg, ids, port } = setup(2);
  assert.equal(reg.slotOf(fieldsOf('old-a')), 0);
  assert.equal(reg.slotOf(fieldsOf(123456789012345)), 1);
  assert.equal(ids.deviceIdOf(0), 'old-a', 'cached by the reader');
  port.seq[0] = 40;
  port.seq[1] = 900;
  reg.sweep(1);
  reg.sweep(1);
  assert.equal(reg.slotOf(fieldsOf('new')), -1, 'full until a slot is freed');
  const gen0 = ids.generationOf(0);
  assert.equal(ids.free(0, 1), true);
  assert.equal(ids.free(1, 1), true);
  reg.sweep(1000);
  assert.equal(reg.life.freed, 2);
  assert.equal(reg.lookup('old-a'), -1);
  assert.equal(reg.lookup(123456789012345), -1);
  const slot = reg.slotOf(fieldsOf('new'));
  assert.ok(slot === 0 || slot === 1);
  assert.notEqual(ids.generationOf(slot), slot === 0 ? gen0 : -1);
  assert.equal(ids.deviceIdOf(slot), 'new', 'the reader does not return the cached old name');
  assert.equal(port.seq[slot], 900, 'starts above the highest seq a freed device had');
  assert.equal(ids.lifeStateOf(slot), DeviceLife.ACTIVE);
  // The old numeric id comes back: a new registration, above its old seqs too.
  const back = reg.slotOf(fieldsOf(123456789012345));
  assert.ok(back >= 0 && back !== slot);
  assert.ok(port.seq[back]! >= 900);
  assert.equal(reg.life.reused, 2);
  assert.equal(reg.size, 2);
});

test('a device freed and back while fresh slots remain: the table holds the freed seq at once, and the fresh slot starts above it', () => {
  const { reg, ids, port, table } = setup(8);
  assert.equal(freedSeqHighOf(table), -Infinity, 'nothing freed yet');
  assert.equal(reg.slotOf(fieldsOf('a')), 0);
  assert.equal(reg.slotOf(fieldsOf('b')), 1);
  port.seq[0] = 40;
  port.seq[1] = 7;
  reg.sweep(1);
  reg.sweep(1);
  assert.equal(ids.free(0, 1), true);
  reg.sweep(1000);
  assert.equal(reg.life.freed, 1);
  assert.equal(freedSeqHighOf(table), 40, 'what a checkpoint reads for its floor');
  const again = reg.slotOf(fieldsOf('a'));
  assert.equal(again, 2, 'a fresh slot, not the freed one');
  assert.equal(port.seq[again], 40, 'starts above its old seqs');
  assert.equal(reg.life.reused, 0);
  const other = reg.slotOf(fieldsOf('c'));
  assert.equal(port.seq[other], 40, 'every new device does: it may be one that was freed');
});

test('with partitions, a freed device raises only its own partition floor: a new device of another partition starts where that partition stands', () => {
  const partitions = 16;
  const { reg, ids, port, table } = setup(8, partitions);
  const floors = seqFloorsOf(table);
  assert.equal(floors.length, partitions);
  // Three ids: two of one partition (q), one of another (p).
  const names = Array.from({ length: 200 }, (_, i) => `dev-${i}`);
  const q = partitionOf(names[0]!, partitions);
  const sameQ = names.find((n, i) => i > 0 && partitionOf(n, partitions) === q)!;
  const inP = names.find((n) => partitionOf(n, partitions) !== q)!;
  const p = partitionOf(inP, partitions);
  floors[p] = 5; // as a restore sets it from the partition's checkpoint
  assert.equal(reg.slotOf(fieldsOf(names[0]!)), 0);
  port.seq[0] = 40;
  reg.sweep(1);
  reg.sweep(1);
  assert.equal(ids.free(0, 1), true);
  reg.sweep(1000);
  assert.equal(reg.life.freed, 1);
  assert.equal(floors[q], 40, "the freed device's partition");
  assert.equal(floors[p], 5, 'another partition keeps its floor');
  assert.equal(freedSeqHighOf(table), 40, 'the whole table still knows the highest (the local checkpoint floor)');
  assert.equal(port.seq[reg.slotOf(fieldsOf(inP))], 5, 'a new device of p starts at p');
  assert.equal(port.seq[reg.slotOf(fieldsOf(sameQ))], 40, 'one of q above the freed device (it may be that one)');
  assert.equal(port.seq[reg.slotOf(fieldsOf(names[0]!))], 40, 'the freed device itself, back');
  // Numeric ids: their partition from their decimal digits, as the publisher computes it.
  const n = 2 ** 40 + 12345;
  floors[partitionOf(n, partitions)] = 77;
  assert.equal(port.seq[reg.slotOf(fieldsOf(n))], 77);
});

test('partitionOfNumericId agrees with partitionOf over the whole range of numeric ids', () => {
  const samples = [0, 1, 9, 10, 99, 100, 4294967295, 4294967296, 2 ** 53 - 1, 123456789012345];
  // A fixed sequence (xorshift32): the same ids every run.
  let x = 0x9e3779b9;
  const next = (): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
  for (let i = 0; i < 2000; i++) samples.push(Math.floor(next() * 2 ** (1 + (i % 53))));
  for (const count of [1, 2, 7, 16, 4096])
    for (const id of samples)
      assert.equal(partitionOfNumericId(id, count), partitionOf(id, count), `id ${id} of ${count}`);
});

test('numeric ids leave the index without breaking the probe chains of others', () => {
  const { reg, ids } = setup(64);
  const n = 60;
  const idOf = (i: number): number => 2 ** 40 + i * 64;
  for (let i = 0; i < n; i++) assert.equal(reg.slotOf(fieldsOf(idOf(i))), i);
  // Expire and free every third device.
  reg.sweep(1);
  for (let i = 0; i < n; i++) if (i % 3 !== 0) reg.slotOf(fieldsOf(idOf(i)));
  reg.sweep(1);
  for (let i = 0; i < n; i += 3) assert.equal(ids.free(i, 1), true);
  reg.sweep(1000);
  for (let i = 0; i < n; i++) assert.equal(reg.lookup(idOf(i)), i % 3 === 0 ? -1 : i, `id ${i}`);
});
