/**
 * With several ingest threads, a ping another thread confirmed (its device's tick stamped) but has not published yet
 * is under no sweep's ring marks. A device marked expired while such a ping may exist must not get its expiry record
 * until that ping is published and read: the other thread says how long it has held pings (its busy tick, written by
 * its publisher at the start of each read chunk and cleared at the end), and DeviceExpiry waits for a sweep that began
 * with nothing held from before the device was marked. Real wiring: thread 0's path and thread 1's path over one
 * pipeline memory, real rings and a real (paused) pool.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolveRouterOptions } from '../../src/config/options.js';
import { parseFences } from '../../src/fences/parse.js';
import { buildFenceStore } from '../../src/fences/store.js';
import { encodePingInto, MAX_PING_BYTES } from '../../src/ingest/ping-encoder.js';
import { DeviceExpiry } from '../../src/pipeline/device-expiry.js';
import { buildIngestPath, buildPeerPath } from '../../src/pipeline/ingest-path.js';
import { allocatePipelineMemory, pipelineMemorySpecOf } from '../../src/pipeline/memory.js';
import { ingestThreadData } from '../../src/router/thread-data.js';
import { DEVID_HEADER_BYTES, DEVID_TICK_I32, ICTL_BUSY_SINCE_TICK_I32 } from '../../src/shm/layout.js';
import { collection, square } from '../fences/helpers.js';
import { containmentPool } from './support.js';

async function rig(): Promise<{
  expiry: DeviceExpiry;
  peer: ReturnType<typeof buildPeerPath>;
  control: Int32Array;
  idHeader: Int32Array;
  drainRings: () => void;
  close: () => Promise<void>;
}> {
  const o = resolveRouterOptions({ shards: 2, poolSize: 1, ingestThreads: 2, maxDevices: 64, stateDir: null });
  const m = allocatePipelineMemory(pipelineMemorySpecOf(o));
  const descriptor = buildFenceStore(parseFences(collection(square('a', 0, 0, 100))), 1);
  const d = ingestThreadData(o, m, descriptor);
  const pool = containmentPool(m, descriptor);
  const quiet = (): void => undefined;
  const path = buildIngestPath(m, d, pool, { error: quiet, warn: quiet }, false);
  await path.scheduler.pause();
  const peer = buildPeerPath(m, d, 1, { error: quiet, warn: quiet });
  const expiry = new DeviceExpiry(
    {
      registry: path.registry,
      admissions: path.admissions,
      scheduler: path.scheduler,
      state: path.state,
      predicates: path.predicates,
      counters: new Float64Array(m.pipeline),
      allRings: path.scheduler.allRings,
      shards: m.shards,
      ingestControl: m.ingestControl,
    },
    60_000,
  );
  return {
    expiry,
    peer,
    control: new Int32Array(m.ingestControl),
    idHeader: new Int32Array(m.idTable, 0, DEVID_HEADER_BYTES / 4),
    // What containment does with the records: read them (every ring, every ingest thread's).
    drainRings: () => {
      for (const ring of path.scheduler.allRings) ring.release(ring.available());
    },
    close: () => pool.destroy(),
  };
}

/** One ping of device `id` as a frame. */
function frame(id: string, ts: number): Buffer {
  const buf = Buffer.alloc(MAX_PING_BYTES);
  const len = encodePingInto(buf, 0, { id, lat: 0.0001, lon: 0.0001, ts, speed: 1, heading: 0, accuracy: 5 }, 'maps');
  return buf.subarray(0, len);
}

test("an ingest thread's busy tick: set when a read chunk starts and after each publish within it, cleared at its end", async () => {
  const r = await rig();
  try {
    const cell = ICTL_BUSY_SINCE_TICK_I32 + 1 - 1;
    Atomics.store(r.idHeader, DEVID_TICK_I32, 7);
    r.peer.publisher.begin();
    assert.equal(Atomics.load(r.control, cell), 7, 'held since tick 7');
    Atomics.store(r.idHeader, DEVID_TICK_I32, 9);
    r.peer.publisher.flush();
    assert.equal(Atomics.load(r.control, cell), 0, 'nothing held after the chunk is published');
    // Through a stream: the chunk begins and ends inside write, so nothing is left held.
    const stream = r.peer.edge.openStream('held-test');
    stream.write(frame('dev-1', Date.UTC(2026, 0, 1)));
    assert.equal(Atomics.load(r.control, cell), 0);
    assert.ok(
      r.peer.rings.some((ring) => ring.available() === 1),
      'the ping was published into one of its rings',
    );
    // Tick 0 (no sweep yet) is noted as 1: 0 means "nothing held".
    Atomics.store(r.idHeader, DEVID_TICK_I32, 0);
    r.peer.publisher.begin();
    assert.equal(Atomics.load(r.control, cell), 1);
    r.peer.publisher.flush();
  } finally {
    await r.close();
  }
});

test('an expiry waits for a sweep that began with nothing held from before the device was marked', async () => {
  const r = await rig();
  try {
    const cell = ICTL_BUSY_SINCE_TICK_I32 + 1 - 1;
    r.drainRings();
    // Nothing held: a device marked at sweep 5 may get its record once the rings are read past sweep 5's marks.
    r.expiry.markSweep(5);
    assert.equal(r.expiry.consumedSince(5, 0), true);
    assert.equal(r.expiry.consumedSince(5, 1), true);
    // Ingest thread 1 holds pings since tick 3 (a chunk confirmed at tick 3, not published) when sweep 6 begins: a
    // device marked at sweep 6 may have such a ping, which no ring position of sweep 6 covers.
    Atomics.store(r.control, cell, 3);
    r.expiry.markSweep(6);
    assert.equal(r.expiry.consumedSince(6, 0), false, 'pings held from before the mark');
    // Still held at sweep 7 (a long chunk, or a thread paused): still waiting.
    r.expiry.markSweep(7);
    assert.equal(r.expiry.consumedSince(6, 0), false);
    // The chunk is published (a record in its ring), then sweep 8 begins with nothing held.
    Atomics.store(r.idHeader, DEVID_TICK_I32, 7);
    r.peer.publisher.begin();
    r.peer.edge.openStream('held-test').write(frame('dev-2', Date.UTC(2026, 0, 1)));
    assert.equal(Atomics.load(r.control, cell), 0);
    r.expiry.markSweep(8);
    assert.equal(r.expiry.consumedSince(6, 0) && r.expiry.consumedSince(6, 1), false, 'the published ping is not read');
    r.drainRings();
    assert.equal(r.expiry.consumedSince(6, 0), true, 'read past sweep 8: the expiry may follow');
    assert.equal(r.expiry.consumedSince(6, 1), true);
    // Held since a tick at or after the mark: only pings confirmed after the mark, which stamped the device (no wait).
    Atomics.store(r.control, cell, 9);
    r.expiry.markSweep(9);
    assert.equal(r.expiry.consumedSince(9, 0), true);
    Atomics.store(r.control, cell, 0);
  } finally {
    await r.close();
  }
});
