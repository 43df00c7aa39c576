/**
 * End to end through real threads: scripted trajectories over a real TCP socket (frames split across reads) produce
 * exactly the expected triggers at a real HTTP webhook and at an in-process callback, in per-device order; after
 * close() every admitted ping and every trigger is accounted for; /metrics serves Prometheus text.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import {
  byDevice,
  frameOf,
  orderProblem,
  sendOverTcp,
  square,
  TriggerServer,
  waitFor,
  type ScriptedPing,
} from './support.js';

const FENCES = {
  type: 'FeatureCollection',
  features: [
    square('A', 0, 0, 50, { dwellMs: 1500, tags: ['depot'] }),
    square('C', 500, 0, 50, { compliance: true, tags: ['port'] }),
  ],
};

// d1 passes through A, then through the compliance fence C; 42 (a numeric id) stays in A long enough to DWELL;
// d3 jumps across A in one ping (CROSS, 400 m in 2 s: a plausible speed); "42" (a string id: another device than 42)
// jumps across A too.
const SCRIPT: ScriptedPing[] = [
  { id: 'd1', eastM: -200, northM: 0, dtMs: 0 },
  { id: 42, eastM: 0, northM: -200, dtMs: 0 },
  { id: 'd3', eastM: -200, northM: 0, dtMs: 0 },
  { id: '42', eastM: 0, northM: 200, dtMs: 0 },
  { id: 'd1', eastM: 0, northM: 0, dtMs: 1000 },
  { id: '42', eastM: 0, northM: -200, dtMs: 2000 },
  { id: 42, eastM: 0, northM: 0, dtMs: 1000 },
  { id: 'd3', eastM: 200, northM: 0, dtMs: 2000 },
  { id: 'd1', eastM: 200, northM: 0, dtMs: 2000 },
  { id: 42, eastM: 5, northM: 0, dtMs: 2000 },
  { id: 'd1', eastM: 500, northM: 0, dtMs: 3000 },
  { id: 42, eastM: 0, northM: 5, dtMs: 3000 },
  { id: 'd1', eastM: 800, northM: 0, dtMs: 4000 },
  { id: 42, eastM: 0, northM: 300, dtMs: 4000 },
];

/** Expected triggers per device, keyed by the device id as JSON (42 and "42" apart). */
const EXPECTED: Record<string, string[]> = {
  '"d1"': ['ENTER A', 'EXIT A', 'ENTER C', 'EXIT C'],
  '42': ['ENTER A', 'DWELL A', 'EXIT A'],
  '"42"': ['CROSS A'],
  '"d3"': ['CROSS A'],
};

function asExpected(triggers: readonly Trigger[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [device, list] of byDevice(triggers)) {
    out[JSON.stringify(device)] = [...list].sort((a, b) => a.seq - b.seq).map((t) => `${t.type} ${t.fenceId}`);
  }
  return out;
}

test('scripted trajectories over TCP reach a webhook and a callback exactly, in per-device order; close accounts for everything', async () => {
  const http = new TriggerServer();
  await http.start();
  const called: Trigger[] = [];
  const router = await createRouter({
    fences: FENCES,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminPort: 0,
    shards: 4,
    poolSize: 2,
    ringCapacitySlots: 1024,
    maxDevices: 1000,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-e2e-')),
    downstreams: [
      { name: 'hook', kind: 'webhook', url: http.url, limit: 1 },
      { name: 'cb', kind: 'callback', callback: (ts) => void called.push(...ts) },
    ],
    log: () => undefined,
  });
  try {
    assert.ok(router.ingestPort !== null && router.ingestPort > 0);
    await sendOverTcp(router.ingestPort!, Buffer.concat(SCRIPT.map(frameOf)));
    await waitFor(() => router.stats().accepted === SCRIPT.length, 10_000, 'every ping read');
    const summary = await router.close();

    assert.deepEqual(asExpected(called), EXPECTED);
    assert.deepEqual(asExpected(http.received), EXPECTED);
    assert.equal(orderProblem(called), null);
    assert.equal(orderProblem(http.received), null);
    // Each receiver gets every trigger of every device: seqs run 1, 2, 3, ... and the stays are whole.
    for (const got of [called, http.received])
      assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    // Lanes: the compliance fence's triggers travel in the COMPLIANCE lane, EXIT included.
    for (const t of called) if (t.fenceId === 'C') assert.equal(t.lane, 'compliance', `${t.type} C`);
    const c42 = called.find((t) => t.deviceId === 42 && t.type === 'DWELL')!;
    assert.ok(c42.insideMs >= 1500);
    // 42 and "42" are two devices, and the receiver can tell them apart: a JSON number and a JSON string.
    assert.deepEqual(http.rawDeviceIds.filter((id) => id.startsWith('42') || id.startsWith('"42"')).sort(), [
      '"42"',
      '42',
      '42',
      '42',
    ]);
    assert.deepEqual(
      called.filter((t) => t.deviceId === '42').map((t) => t.seq),
      [1],
      'each device its own seq',
    );
    assert.deepEqual(called.find((t) => t.fenceId === 'C')!.tags, ['port']);

    // Accounting after close.
    assert.equal(summary.accepted, SCRIPT.length);
    assert.equal(summary.admittedTotal, SCRIPT.length);
    assert.equal(summary.processed, summary.admittedTotal);
    assert.equal(summary.triggersTotal, 9);
    assert.deepEqual(summary.triggers, { ENTER: 3, EXIT: 3, DWELL: 1, CROSS: 2 });
    assert.equal(summary.triggersDispatched, summary.triggersTotal);
    assert.equal(summary.deliveriesOffered, 18);
    assert.equal(summary.delivered, 18);
    assert.equal(summary.deadLettered, 0);
    assert.equal(summary.inFlight, 0);
    assert.equal(summary.heldTimeSamples, 18);
    assert.ok(summary.heldTimeP99Ms >= summary.heldTimeP50Ms);
    // The histogram in the snapshot holds every sample (what status lines take windows of).
    assert.equal(
      summary.heldTimeBucketCounts.reduce((a, b) => a + b, 0),
      18,
    );
    assert.deepEqual(
      summary.downstreams.map((d) => [d.name, d.delivered, d.queueDepth, d.breakerState]),
      [
        ['hook', 9, 0, 'closed'],
        ['cb', 9, 0, 'closed'],
      ],
    );
  } finally {
    await router.close();
    await http.stop();
  }
});

test('metricsText and the admin server expose every part of the pipeline', async () => {
  const router = await createRouter({
    fences: FENCES,
    listenHost: null,
    adminPort: 0,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    log: () => undefined,
    downstreams: [{ name: 'cb', kind: 'callback', callback: () => undefined }],
    stateDir: mkdtempSync(join(tmpdir(), 'gr-m-')),
  });
  const startedMs = Date.now();
  try {
    for (const p of SCRIPT) router.ingest(frameOf(p));
    // The containment task lingers on the empty rings (parked) before it answers.
    await new Promise((r) => setTimeout(r, 300));
    await router.drain();
    const elapsedS = (Date.now() - startedMs) / 1000;
    const res = await fetch(`http://127.0.0.1:${router.adminPort}/metrics`);
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.ok((await router.metricsText()).includes(`geofence_ingest_accepted_total ${SCRIPT.length}`));
    // One pool worker (the COMPLIANCE ring's is not counted): parked for its linger at least, and never longer than the
    // router has run.
    const parked = Number(/^geofence_containment_parked_seconds_total (\S+)$/m.exec(text)?.[1]);
    assert.ok(parked >= 0.05 && parked <= elapsedS, `parked ${parked} s in ${elapsedS} s`);
    for (const needle of [
      `geofence_ingest_accepted_total ${SCRIPT.length}`,
      'geofence_pings_admitted_total{lane="compliance"}',
      `geofence_pings_processed_total ${SCRIPT.length}`,
      'geofence_triggers_total{type="ENTER"} 3',
      'geofence_dispatch_delivered_total{downstream="cb"} 9',
      'geofence_dispatch_concurrency_limit{downstream="cb"}',
      'geofence_held_time_seconds_count 9',
      // The pipeline's part of the held times, one per trigger taken and routed, in the lanes they were delivered in.
      'geofence_pipeline_time_seconds_count{lane="transition"} 7',
      'geofence_pipeline_time_seconds_count{lane="compliance"} 2',
      'geofence_dispatch_held_time_seconds_count{downstream="cb",lane="compliance"} 2',
      'geofence_held_time_seconds_bucket{le="+Inf"} 9',
      'geofence_dispatch_request_duration_seconds_count{downstream="cb"}',
      'geofence_dispatch_dead_lettered_total{downstream="cb",reason="undeliverable"} 0',
      'geofence_dispatch_pending_triggers{downstream="cb"} 0',
      'geofence_dispatch_spilled_total{downstream="cb"} 0',
      'geofence_replay_held_time_seconds_count 0',
      'geofence_checkpoints_total 1',
    ]) {
      assert.ok(text.includes(needle), `metrics lack ${needle}`);
    }
    // Taken before it was handed over: the pipeline's part is at most the whole.
    const sumOf = (re: RegExp): number => [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
    const pipelineS = sumOf(/^geofence_pipeline_time_seconds_sum\{lane="\w+"\} (\S+)$/gm);
    const heldS = sumOf(/^geofence_held_time_seconds_sum (\S+)$/gm);
    assert.ok(pipelineS > 0 && pipelineS <= heldS, `pipeline ${pipelineS} s of held ${heldS} s`);
    assert.equal((await fetch(`http://127.0.0.1:${router.adminPort}/healthz`)).status, 200);
    // Draining: not ready any more.
    assert.equal((await fetch(`http://127.0.0.1:${router.adminPort}/readyz`)).status, 503);
  } finally {
    await router.close();
  }
});
