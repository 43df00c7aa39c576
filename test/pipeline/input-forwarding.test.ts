/**
 * Ingest thread 0's end of a forwarded-input ring when the receiving thread falls behind: a write that finds the ring
 * full is kept (a copy) and goes in later, in order, without blocking the writer; the stream says it holds bytes back
 * and calls back once they are in; a closed connection's number is given to a new one only once its END record is in
 * the ring (so the receiving thread never mixes the two); a dead receiver releases every waiter. Real rings and
 * SharedArrayBuffers; the receiving side is an InputReader drained by the test.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InputForwarder, InputReader } from '../../src/pipeline/input-forwarding.js';
import {
  ICTL_PEER_DEAD_I32,
  ICTL_REGION_I32,
  INP_CONN_STRIDE_F64,
  INP_STRIDE_BYTES,
  RingKind,
} from '../../src/shm/layout.js';
import { allocateRingRegion } from '../../src/shm/regions.js';

/** A forwarder over an INPUT ring of `slots` records with room for `connections` connections, and its reader. */
function rig(slots: number, connections = 4): { forwarder: InputForwarder; reader: InputReader; control: Int32Array } {
  const ring = allocateRingRegion({ capacitySlots: slots, strideBytes: INP_STRIDE_BYTES, kind: RingKind.INPUT });
  const control = new SharedArrayBuffer(ICTL_REGION_I32 * 4);
  const cells = new SharedArrayBuffer(connections * INP_CONN_STRIDE_F64 * 8);
  return {
    forwarder: new InputForwarder(ring, cells, control, 1),
    reader: new InputReader(ring),
    control: new Int32Array(control),
  };
}

/** Everything the reader hands over, as lines ("open 0 a", "data 0 <bytes>", "end 0"). */
function readAll(reader: InputReader, into: string[]): void {
  while (
    reader.drain(
      {
        open: (conn, name) => into.push(`open ${conn} ${name}`),
        data: (conn, bytes) => into.push(`data ${conn} ${bytes.length}:${bytes[0]}`),
        end: (conn) => into.push(`end ${conn}`),
      },
      1 << 20,
    ) > 0
  ) {
    // Each pass reads what the ring holds.
  }
}

const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5));

test('a full ring: the write is kept and goes in later, in order, and the stream says so until it has', async () => {
  const { forwarder, reader } = rig(8);
  const a = forwarder.open('a');
  // 6 records of 4 KiB each, then 4 more: the second write does not fit (one slot holds the OPEN record).
  a.write(new Uint8Array(6 * 4096).fill(1));
  assert.equal(a.holdsBack!(), false);
  a.write(new Uint8Array(4 * 4096).fill(2));
  assert.equal(a.holdsBack!(), true, 'kept, not written');
  assert.equal(forwarder.bytesWaiting, 4 * 4096);
  let resumed = 0;
  a.whenHandedOn!(() => resumed++);
  // More bytes while some wait: they wait behind them, whatever room there is.
  const seen: string[] = [];
  readAll(reader, seen);
  a.write(new Uint8Array(10).fill(3));
  assert.equal(a.holdsBack!(), true);
  for (let i = 0; i < 20 && resumed === 0; i++) await tick();
  assert.equal(resumed, 1, 'called back once everything went in');
  assert.equal(a.holdsBack!(), false);
  a.end();
  readAll(reader, seen);
  assert.deepEqual(seen, ['open 0 a', `data 0 ${6 * 4096}:1`, `data 0 ${4 * 4096 + 10}:2`, 'end 0']);
});

test("a closed connection's number is given to a new one only once its END record is in the ring", async () => {
  const { forwarder, reader } = rig(4);
  const a = forwarder.open('a');
  a.write(new Uint8Array(3 * 4096).fill(7));
  a.write(new Uint8Array(100).fill(8));
  assert.equal(a.holdsBack!(), true);
  a.end();
  // A's END waits: the next connection must not get A's number (the reader would take B's bytes for A's).
  const b = forwarder.open('b');
  b.write(new Uint8Array(5).fill(9));
  const seen: string[] = [];
  for (let i = 0; i < 20 && forwarder.waitingRecords > 0; i++) {
    readAll(reader, seen);
    await tick();
  }
  readAll(reader, seen);
  const bOpen = seen.find((l) => l.startsWith('open ') && l.endsWith(' b'));
  assert.ok(bOpen !== undefined, seen.join(' | '));
  assert.notEqual(bOpen!.split(' ')[1], '0', 'B has a number of its own');
  assert.deepEqual(seen.slice(0, 4), ['open 0 a', `data 0 ${3 * 4096}:7`, 'data 0 100:8', 'end 0']);
  // Once A's END is in, its number is free again.
  const c = forwarder.open('c');
  b.end();
  c.end();
  readAll(reader, seen);
  assert.ok(seen.includes('open 0 c'), seen.join(' | '));
});

test('a receiving thread that died: the waiting bytes are dropped and every waiter is called back', async () => {
  const { forwarder, control } = rig(2);
  const a = forwarder.open('a');
  a.write(new Uint8Array(2 * 4096).fill(1));
  assert.equal(a.holdsBack!(), true);
  const done = forwarder.handedOnAll();
  Atomics.store(control, ICTL_PEER_DEAD_I32, 1);
  // A pending Atomics.waitAsync does not keep the event loop alive (a router always has handles that do).
  const alive = setInterval(() => undefined, 10);
  await done;
  clearInterval(alive);
  assert.equal(forwarder.waitingRecords, 0);
  assert.equal(a.holdsBack!(), false);
});
