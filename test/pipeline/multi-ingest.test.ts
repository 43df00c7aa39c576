/**
 * Several ingest threads through a real router over TCP: connections spread over two ingest threads, each writing
 * telemetry rings of its own into every shard.
 * - Device churn: ten waves of `maxDevices` devices, half on each thread, each entering a fence and going quiet; idle
 *   devices expire (ingest thread 0's sweep), their slots are freed and reused by devices of either thread, and
 *   devices of an earlier wave come back on the other thread. None is rejected, every trigger names its device and
 *   fence, and the delivery contract holds at a real webhook and at a callback.
 * - One device on two connections (so on two threads): one slot, pings older than the device's last recognised as
 *   stale, and the contract holds (no second ENTER for a stay); each ingest thread reports its heap and event loop.
 * - A fence reload reaches every ingest thread's lane classification.
 * - A client trickling a frame on a forwarded connection is closed at the frame deadline.
 * - A restart with two ingest threads: ids, seq and stays carry over.
 * - A connection spread to a stalled ingest thread waits in order while thread 0 reads its own and takes new ones.
 * - Admission under overload through both threads: every ping accounted for (offered = admitted + shed, every admitted
 *   ping processed), COMPLIANCE shed only when its rings are full, and the delivery contract holds.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type Socket } from 'node:net';
import { pack } from 'msgpackr';
import { createRouter, type Router } from '../../src/index.js';
import { generateSyntheticCity, mulberry32, syntheticCityBounds } from '../../src/fences/synthetic-city.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, byDevice, sendOverTcp, square, T0, TriggerServer, waitFor } from './support.js';
import { CHURN_CITY, CHURN_FENCES, churnIds } from './churn-fleet.js';

const MAX_DEVICES = 200;
const WAVES = 10;
const FENCES = CHURN_FENCES;
const CITY = CHURN_CITY;
const IDLE_MS = 300;

function idsOf(w: number): (string | number)[] {
  return churnIds(w, MAX_DEVICES);
}

/** What createRouter takes. */
type RouterInput = NonNullable<Parameters<typeof createRouter>[0]>;

/** A router on 127.0.0.1 with two ingest threads, one pool worker and two shards, delivering to `callback`. */
function twoThreadRouter(
  fences: unknown,
  dirPrefix: string,
  callback: (triggers: readonly Trigger[]) => void,
  extra: Partial<RouterInput> = {},
): Promise<Router> {
  return createRouter({
    fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    ingestThreads: 2,
    poolSize: 1,
    shards: 2,
    stateDir: mkdtempSync(join(tmpdir(), dirPrefix)),
    downstreams: [{ name: 'cb', kind: 'callback', callback }],
    log: () => undefined,
    ...extra,
  });
}

/** Fence a device of wave `w` enters (by its place in the wave, so a trigger naming another fence is wrong). */
function fenceOf(i: number, w: number): number {
  return (i * 7 + w * 11) % FENCES;
}

test('devices churn through two ingest threads: none rejected, every trigger attributed right, contract held', async () => {
  const server = new TriggerServer();
  await server.start();
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: CITY,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    ingestThreads: 2,
    poolSize: 1,
    shards: 4,
    maxDevices: MAX_DEVICES,
    deviceIdleTimeoutMs: IDLE_MS,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-multi-churn-')),
    downstreams: [
      { name: 'hook', kind: 'webhook', url: server.url },
      { name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) },
    ],
    log: () => undefined,
  });
  const expected = new Map<string | number, string[]>();
  try {
    for (let w = 0; w < WAVES; w++) {
      // Two connections a wave: the router spreads them over its two ingest threads. A returning device is sent on
      // the connection its wave place gives, not the one it used before: the other thread meets it.
      const frames: Buffer[][] = [[], []];
      idsOf(w).forEach((id, i) => {
        const k = fenceOf(i, w);
        const [lat, lon] = at((k % 5) * 400, Math.floor(k / 5) * 400);
        const [outLat, outLon] = at((k % 5) * 400 + 150, Math.floor(k / 5) * 400);
        const ts = T0 + w * 60_000 + i;
        const conn = (i + w) % 2;
        frames[conn]!.push(pack({ id, lat: outLat, lon: outLon, ts }), pack({ id, lat, lon, ts: ts + 1000 }));
        const list = expected.get(id) ?? [];
        list.push(`ENTER f${k}`, `EXIT f${k} expired`);
        expected.set(id, list);
      });
      await Promise.all(frames.map((f) => sendOverTcp(router.ingestPort!, Buffer.concat(f), 997)));
      await waitFor(
        () => router.stats().deviceLifecycle.freed >= (w + 1) * MAX_DEVICES,
        20_000,
        `wave ${w}'s slots freed`,
      );
    }
    await waitFor(
      () => server.received.length === got.length && got.length >= WAVES * MAX_DEVICES * 2,
      20_000,
      'every trigger delivered',
    );
    const s = router.stats();
    assert.equal(s.rejectedTotal, 0, `rejected: ${JSON.stringify(s.rejected)}`);
    assert.equal(s.shedTotal, 0);
    assert.equal(s.admittedByIngestThread.length, 2);
    for (const n of s.admittedByIngestThread) assert.ok(n >= WAVES * MAX_DEVICES * 0.9, `each thread admitted (${n})`);
    assert.equal(s.deviceLifecycle.expired, WAVES * MAX_DEVICES);
    assert.equal(s.deviceLifecycle.reused, (WAVES - 1) * MAX_DEVICES, 'every later registration took a freed slot');
    for (const [name, received] of [
      ['webhook', server.received],
      ['callback', got],
    ] as const) {
      const report = checkDeliveryContract(received, { stays: true });
      assert.deepEqual(report.problems, [], `${name}: ${report.problems.join('\n')}`);
      const devices = byDevice(received);
      assert.equal(devices.size, expected.size, `${name}: devices`);
      for (const [id, want] of expected) {
        const seen = (devices.get(id) ?? []).map(
          (t) => `${t.type} ${t.fenceId}${t.reason === 'expired' ? ' expired' : ''}`,
        );
        assert.deepEqual(seen, want, `${name}: device ${JSON.stringify(id)}`);
      }
    }
  } finally {
    await router.close();
    await server.stop();
  }
});

test('one device on two connections read by two ingest threads keeps one slot and one stay', async () => {
  const got: Trigger[] = [];
  const router = await twoThreadRouter(
    { type: 'FeatureCollection', features: [square('a', 0, 0, 100)] },
    'gr-multi-two-',
    (ts) => void got.push(...ts),
  );
  const PINGS = 4000;
  try {
    // The device walks in and out of fence `a` every 100 pings; even pings go on one connection, odd on the other.
    const frames: Buffer[][] = [[], []];
    for (let k = 0; k < PINGS; k++) {
      const inside = Math.floor(k / 100) % 2 === 1;
      const [lat, lon] = at(inside ? 0 : 400, 0);
      frames[k % 2]!.push(pack({ id: 'truck-1', lat, lon, ts: T0 + k * 1000 }));
    }
    await Promise.all(frames.map((f) => sendOverTcp(router.ingestPort!, Buffer.concat(f), 4096)));
    await waitFor(() => router.stats().processed === PINGS, 10_000, 'every ping processed');
    // Each ingest thread reports its heap and event loop (once a second).
    await new Promise((r) => setTimeout(r, 1300));
    const metrics = await router.metricsText();
    assert.match(metrics, /^geofence_thread_heap_used_bytes\{thread="ingest"\} \d+/m);
    assert.match(metrics, /^geofence_thread_heap_used_bytes\{thread="ingest-1"\} \d+/m);
    assert.match(metrics, /^geofence_thread_event_loop_utilization_ratio\{thread="ingest-1"\} /m);
    const s = await router.close();
    assert.equal(s.admittedTotal, PINGS);
    assert.deepEqual(s.admittedByIngestThread, [PINGS / 2, PINGS / 2], 'each thread admitted its connection');
    assert.equal(s.devices, 1, 'one slot');
    const report = checkDeliveryContract(got, { stays: true, complete: true });
    assert.deepEqual(report.problems, [], report.problems.join('\n'));
    // Every trigger comes from a ping processed in event-time order; the rest were recognised as stale.
    const processedInOrder = PINGS - s.stale;
    assert.ok(processedInOrder > 0);
    assert.ok(got.length <= 40, `at most one ENTER and one EXIT per stay (${got.length})`);
    for (let i = 1; i < got.length; i++) {
      assert.ok(got[i]!.eventTimeMs > got[i - 1]!.eventTimeMs, 'triggers in event-time order');
      assert.notEqual(got[i]!.type, got[i - 1]!.type, 'ENTER and EXIT alternate');
    }
  } finally {
    await router.close();
  }
});

test('a reload reaches every ingest thread: pings near a new compliance fence travel in the COMPLIANCE lane', async () => {
  const router = await twoThreadRouter(
    { type: 'FeatureCollection', features: [square('a', 0, 0, 50)] },
    'gr-multi-reload-',
    () => undefined,
  );
  // Pings of 100 devices at 3 km from fence `a`, on two connections (one per ingest thread), `round` apart in time.
  const send = async (round: number): Promise<void> => {
    const frames: Buffer[][] = [[], []];
    for (let d = 0; d < 100; d++) {
      const [lat, lon] = at(3000 + d, 0);
      frames[d % 2]!.push(pack({ id: `d${d}`, lat, lon, ts: T0 + round * 60_000, speed: 5 }));
    }
    await Promise.all(frames.map((f) => sendOverTcp(router.ingestPort!, Buffer.concat(f), 4096)));
  };
  try {
    await send(0);
    await waitFor(() => router.stats().admittedTotal === 100, 10_000, 'first pings admitted');
    assert.equal(router.stats().admitted.compliance, 0, 'no compliance fence near them yet');
    await router.reloadFences({
      type: 'FeatureCollection',
      features: [square('a', 0, 0, 50), square('port', 3050, 0, 200, { compliance: true })],
    });
    await send(1);
    await waitFor(() => router.stats().admittedTotal === 200, 10_000, 'second pings admitted');
    const s = router.stats();
    assert.deepEqual(s.admittedByIngestThread, [100, 100]);
    assert.equal(s.admitted.compliance, 100, 'both threads classify against the new fences');
  } finally {
    await router.close();
  }
});

test('admission under overload with connections spread over two ingest threads: every ping accounted for, COMPLIANCE shed only with its rings full', async () => {
  // A dense city (about 70 fences at any point) makes containment far slower than two ingest threads.
  const city = {
    seed: 7,
    fenceCount: 3019,
    fencesPerKm2: 3019 / 4,
    minRadiusM: 60,
    maxRadiusM: 300,
    // A few compliance fences: most pings TRANSITION, some COMPLIANCE.
    complianceFraction: 0.002,
  };
  const b = syntheticCityBounds(city);
  const got: Trigger[] = [];
  const router = await twoThreadRouter(
    generateSyntheticCity(city),
    'gr-multi-overload-',
    (ts) => void got.push(...ts),
    { ringCapacitySlots: 1024, maxDevices: 2000 },
  );
  const rnd = mulberry32(3);
  const DEVICES = 2000;
  const STEPS = 20;
  try {
    // Four connections (two per ingest thread), each device on one, sent as fast as the router reads them.
    const frames: Buffer[][] = [[], [], [], []];
    for (let k = 0; k < STEPS; k++) {
      for (let d = 0; d < DEVICES; d++) {
        const lat = b.minLat + rnd() * (b.maxLat - b.minLat);
        const lon = b.minLon + rnd() * (b.maxLon - b.minLon);
        frames[d % 4]!.push(pack({ id: d, lat, lon, ts: T0 + k * 1000, speed: 3 }));
      }
    }
    await Promise.all(frames.map((f) => sendOverTcp(router.ingestPort!, Buffer.concat(f), 65_536)));
    await waitFor(() => router.stats().accepted === DEVICES * STEPS, 30_000, 'every ping read');
    const s = await router.close();
    assert.equal(s.accepted, DEVICES * STEPS);
    assert.equal(s.offeredTotal, s.accepted, 'every accepted ping offered to admission');
    assert.equal(s.offeredTotal, s.admittedTotal + s.shedTotal, 'offered = admitted + shed');
    assert.equal(s.processed, s.admittedTotal, 'every admitted ping processed');
    assert.ok(s.shedTotal > 0, `overloaded (${s.shedTotal} shed)`);
    assert.equal(s.admittedByIngestThread.length, 2);
    for (const n of s.admittedByIngestThread) assert.ok(n > 0, 'both threads admitted');
    for (const [reason, n] of Object.entries(s.shed.compliance)) {
      if (reason !== 'ring_full') assert.equal(n, 0, `COMPLIANCE shed as ${reason}`);
    }
    const report = checkDeliveryContract(got, { complete: true, stays: true });
    assert.deepEqual(report.problems, [], report.problems.join('\n'));
    console.log(
      `overload through two ingest threads: ${s.accepted} pings, admitted ${s.admittedByIngestThread.join(' + ')}, shed ${s.shedTotal} (COMPLIANCE ${JSON.stringify(s.shed.compliance)}), ${got.length} triggers`,
    );
  } finally {
    await router.close();
  }
});

test('a client trickling a frame on a connection decoded by another ingest thread is closed at the frame deadline', async () => {
  const got: Trigger[] = [];
  const router = await twoThreadRouter(
    { type: 'FeatureCollection', features: [square('a', 0, 0, 50)] },
    'gr-multi-trickle-',
    (ts) => void got.push(...ts),
    { ingest: { frameDeadlineMs: 400 } },
  );
  const open = async (): Promise<Socket> => {
    const socket = connect({ host: '127.0.0.1', port: router.ingestPort! });
    socket.on('error', () => undefined);
    await new Promise((resolve) => socket.once('connect', resolve));
    // The router takes the connection before the next one is opened: the first stays with ingest thread 0, the
    // second is forwarded to ingest thread 1.
    await new Promise((r) => setTimeout(r, 50));
    return socket;
  };
  try {
    const honest = await open();
    const trickler = await open();
    const t0 = Date.now();
    const closed = new Promise<number>((resolve) => trickler.once('close', () => resolve(Date.now() - t0)));
    const [lat, lon] = at(0, 0);
    const frame = pack({ id: 'slow', lat, lon, ts: T0 });
    // One byte every 100 ms: the frame would take seconds to complete.
    let i = 0;
    const drip = setInterval(() => {
      if (i < frame.length - 1 && !trickler.destroyed) trickler.write(frame.subarray(i, ++i));
    }, 100);
    for (let k = 0; k < 20; k++) {
      honest.write(pack({ id: 'honest', lat, lon, ts: T0 + k * 1000 }));
      await new Promise((r) => setTimeout(r, 30));
    }
    const closedAfterMs = await closed;
    clearInterval(drip);
    // Not before the deadline; loose above: a late sweep and the bytes' time in transit push the close back.
    assert.ok(closedAfterMs >= 400 && closedAfterMs < 15_000, `closed after ${closedAfterMs} ms`);
    assert.equal(honest.destroyed, false, 'the honest connection stays open');
    honest.end();
    await waitFor(() => router.stats().admittedTotal === 20, 10_000, "the honest connection's pings");
    const metrics = await router.metricsText();
    assert.match(metrics, /^geofence_ingest_connections_dropped_total\{reason="frame_deadline"\} 1$/m);
    const s = await router.close();
    assert.deepEqual(s.admittedByIngestThread, [20, 0]);
    assert.equal(s.rejected.truncated_frame, 1, "the trickler's partial frame counted as truncated");
    // The honest device, inside the fence from its first ping, got its one ENTER; the trickler's ping made nothing.
    assert.deepEqual(
      got.map((t) => `${String(t.deviceId)} ${t.type} ${t.fenceId} ${t.seq}`),
      ['honest ENTER a 1'],
    );
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  } finally {
    await router.close();
  }
});

test('across a restart with two ingest threads: devices keep their ids, seq continues, no second ENTER for a stay', async () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'gr-multi-restart-'));
  const got: Trigger[] = [];
  const DEVICES = 200;
  // Each device on one of four connections (two per thread); half numeric ids, half strings.
  const idOf = (d: number): string | number => (d % 2 === 0 ? 5_000_000_000 + d : `truck-${d}`);
  const send = async (router: Router, from: number, to: number): Promise<void> => {
    const frames: Buffer[][] = [[], [], [], []];
    for (let k = from; k < to; k++) {
      for (let d = 0; d < DEVICES; d++) {
        // In and out of fence `a` every 4 steps.
        const [lat, lon] = at(Math.floor(k / 4) % 2 === 1 ? 0 : 400, d);
        frames[d % 4]!.push(pack({ id: idOf(d), lat, lon, ts: T0 + k * 1000 }));
      }
    }
    await Promise.all(frames.map((f) => sendOverTcp(router.ingestPort!, Buffer.concat(f), 8192)));
    await waitFor(() => router.stats().processed === DEVICES * (to - from), 20_000, 'every ping processed');
  };
  const fences = { type: 'FeatureCollection', features: [square('a', 0, 100, 200)] };
  const first = await twoThreadRouter(fences, 'gr-multi-unused-', (ts) => void got.push(...ts), { stateDir });
  let s: Awaited<ReturnType<Router['close']>>;
  try {
    await send(first, 0, 6);
  } finally {
    s = await first.close();
  }
  assert.equal(s.shedTotal, 0);
  const before = got.length;
  const second = await twoThreadRouter(fences, 'gr-multi-unused-', (ts) => void got.push(...ts), { stateDir });
  try {
    await send(second, 6, 14);
  } finally {
    s = await second.close();
  }
  assert.equal(s.shedTotal, 0);
  assert.equal(s.devices, DEVICES, 'the restored devices and their pings after the restart share slots');
  assert.ok(got.length > before, 'triggers after the restart');
  // At the receiver, over both runs: ids as sent (numbers stay numbers), seq complete and in order per device, one
  // ENTER per stay (the device inside at the restart gets no second ENTER), fence ids as in the file.
  const report = checkDeliveryContract(got, { complete: true, stays: true });
  assert.deepEqual(report.problems, [], report.problems.join('\n'));
  const devices = byDevice(got);
  assert.equal(devices.size, DEVICES);
  for (let d = 0; d < DEVICES; d++) {
    const list = devices.get(idOf(d)) ?? [];
    // Steps 4-7 inside (ENTER at 4, EXIT at 8), steps 12-13 inside again (ENTER at 12): the restart at step 6.
    assert.deepEqual(
      list.map((t) => `${t.type} ${t.fenceId} ${(t.eventTimeMs - T0) / 1000}`),
      ['ENTER a 4', 'EXIT a 8', 'ENTER a 12'],
      `device ${JSON.stringify(idOf(d))}`,
    );
  }
});

test('a connection spread to a stalled ingest thread waits, in order; thread 0 goes on reading its own and takes new ones', async () => {
  const got: Trigger[] = [];
  // Ingest thread 1 stalls (its event loop blocked) from its start for 6 s: its input ring fills.
  process.env.GEOFENCE_DRILL_BLOCK = 'ingest-1:0:6000';
  let router: Router;
  try {
    router = await twoThreadRouter(
      { type: 'FeatureCollection', features: [square('yard', 0, 0, 300)] },
      'gr-multi-stall-',
      (ts) => void got.push(...ts),
      { ringCapacitySlots: 131_072 },
    );
  } finally {
    delete process.env.GEOFENCE_DRILL_BLOCK;
  }
  const openSocket = async (): Promise<Socket> => {
    const socket = connect({ host: '127.0.0.1', port: router.ingestPort! });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return socket;
  };
  const ping = (id: string, inside: boolean, k: number): Buffer => {
    const [lat, lon] = at(inside ? 0 : 600, k % 50);
    return pack({ id, lat, lon, ts: T0 + k * 1000, speed: 5 });
  };
  try {
    // The first connection is ingest thread 0's own; it works.
    const own = await openSocket();
    own.write(ping('own-0', true, 1));
    await waitFor(() => got.some((t) => t.deviceId === 'own-0'), 10_000, "the first device's ENTER");
    // The second is spread to the stalled thread: 1,000 devices x 120 pings (about 5.6 MB, more than its 4 MiB ring),
    // each device in and out of the yard every 40 pings.
    const spread = await openSocket();
    const DEVICES = 1000;
    const ROUNDS = 120;
    const frames: Buffer[] = [];
    for (let k = 0; k < ROUNDS; k++) {
      for (let d = 0; d < DEVICES; d++) frames.push(ping(`far-${d}`, Math.floor(k / 40) % 2 === 1, k));
    }
    spread.write(Buffer.concat(frames));
    const pauses = async (): Promise<number> =>
      Number(/^geofence_ingest_forward_pauses_total (\d+)/m.exec(await router.metricsText())?.[1] ?? 0);
    let paused = 0;
    await waitFor(
      () => {
        void pauses().then((n) => (paused = n));
        return paused > 0;
      },
      10_000,
      'the spread connection paused: its thread has no room',
    );
    // Thread 0 still reads its own connection: 100 devices enter while thread 1 has admitted nothing yet.
    for (let d = 1; d <= 100; d++) own.write(ping(`own-${d}`, true, 1));
    await waitFor(
      () => new Set(got.filter((t) => String(t.deviceId).startsWith('own-')).map((t) => t.deviceId)).size === 101,
      10_000,
      "every ENTER of thread 0's devices",
    );
    assert.equal(router.stats().admittedByIngestThread[1], 0, 'thread 1 is still stalled');
    // New connections pass over the saturated thread: the third is thread 0's turn, the fourth would be thread 1's.
    const third = await openSocket();
    const fourth = await openSocket();
    for (let d = 0; d < 50; d++) fourth.write(ping(`late-${d}`, true, 1));
    await waitFor(
      () => new Set(got.filter((t) => String(t.deviceId).startsWith('late-')).map((t) => t.deviceId)).size === 50,
      10_000,
      'every ENTER of the fourth connection, read by ingest thread 0',
    );
    assert.equal(router.stats().admittedByIngestThread[1], 0, 'thread 1 is still stalled');
    // Thread 1 wakes up: every byte of the spread connection went through, in order.
    await waitFor(() => router.stats().processed === 151 + DEVICES * ROUNDS, 30_000, 'every ping processed');
    for (const socket of [own, spread, third, fourth]) socket.end();
    const s = await router.close();
    assert.equal(s.shedTotal, 0);
    assert.deepEqual(s.admittedByIngestThread, [151, DEVICES * ROUNDS]);
    const far = got.filter((t) => String(t.deviceId).startsWith('far-'));
    assert.equal(far.length, DEVICES * 2, 'ENTER at ping 40, EXIT at ping 80, per device');
    const report = checkDeliveryContract(got, { stays: true, complete: true });
    assert.deepEqual(report.problems, [], report.problems.join('\n'));
  } finally {
    await router.close();
  }
});
