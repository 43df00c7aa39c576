/**
 * The COMPLIANCE path through a real router's threads: devices whose lanes change ping by ping (in and out of a
 * compliance fence's margin) move between their shard ring and the COMPLIANCE ring, and each receives exactly the
 * triggers, in the same seq order, as with every lane in the shard rings.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, square, T0 } from './support.js';

const DEVICES = 300;
const PINGS_PER_DEVICE = 40;
/** Where a device stands at each step: inside the compliance fence, in its margin, far, inside the other fence. */
const STOPS_M = [0, 1000, 140, 0, 500, 1000, 0, 2000];

/** Runs the fleet through a router with the COMPLIANCE path on or off; returns what the receiver got and the metrics. */
async function run(complianceWorker: boolean): Promise<{ got: Trigger[]; metrics: string }> {
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: {
      type: 'FeatureCollection',
      features: [square('port', 0, 0, 100, { compliance: true }), square('yard', 1000, 0, 100)],
    },
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    complianceWorker,
    maxDevices: DEVICES,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-cpath-')),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
  });
  try {
    for (let i = 0; i < PINGS_PER_DEVICE; i++) {
      for (let d = 0; d < DEVICES; d++) {
        // Each device at its own point of the stops, so every ring holds both lanes at once.
        const [lat, lon] = at(STOPS_M[(i + d) % STOPS_M.length]!, (d % 7) * 5);
        router.push({ id: `car-${d}`, lat, lon, ts: T0 + 1000 * i });
      }
    }
    await router.drain();
    return { got, metrics: await router.metricsText() };
  } finally {
    await router.close();
  }
}

/** The sum of every series of counter `name` in a metrics text; fails when the router does not export it at all. */
function total(metrics: string, name: string): number {
  assert.match(metrics, new RegExp(`^# HELP ${name} `, 'm'), `${name} is exported`);
  let sum = 0;
  for (const m of metrics.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) sum += Number(m[1]);
  return sum;
}

/** Each device's triggers as the receiver got them, content and seq. */
function perDevice(got: readonly Trigger[]): Map<string | number, string[]> {
  const m = new Map<string | number, string[]>();
  for (const t of got) {
    let list = m.get(t.deviceId);
    if (list === undefined) m.set(t.deviceId, (list = []));
    list.push(`${t.seq} ${t.type} ${t.fenceId} ${t.eventTimeMs}`);
  }
  return m;
}

test('devices moving between the shard rings and the COMPLIANCE ring get the same triggers in the same order', async () => {
  const on = await run(true);
  const off = await run(false);
  for (const r of [on, off]) {
    const report = checkDeliveryContract(r.got, { complete: true, stays: true });
    assert.deepEqual(report.problems, []);
    assert.equal(report.devices, DEVICES);
    // A pausable input and a receiver that keeps up: nothing shed, nothing dead-lettered.
    assert.equal(total(r.metrics, 'geofence_triggers_total'), r.got.length, 'every trigger made was delivered');
    assert.equal(total(r.metrics, 'geofence_pings_shed_total'), 0, 'nothing shed');
    assert.equal(total(r.metrics, 'geofence_dispatch_dead_lettered_total'), 0, 'nothing dead-lettered');
  }
  // The path was taken: COMPLIANCE pings, and pings of other lanes that followed their device onto it.
  const pathPings = (lane: string): number =>
    Number(new RegExp(`^geofence_compliance_path_pings_total\\{lane="${lane}"\\} (\\d+)`, 'm').exec(on.metrics)?.[1]);
  assert.ok(pathPings('compliance') > DEVICES, `compliance pings on the path: ${pathPings('compliance')}`);
  assert.doesNotMatch(off.metrics, /^geofence_compliance_path_pings_total/m);
  assert.match(on.metrics, /^geofence_ring_capacity_slots\{ring="telemetry",shard="compliance",ingest_thread="0"\} /m);
  const a = perDevice(on.got);
  const b = perDevice(off.got);
  assert.equal(a.size, b.size);
  for (const [device, list] of b) assert.deepEqual(a.get(device), list, `device ${String(device)}`);
});
