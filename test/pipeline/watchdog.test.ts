/**
 * The containment watchdog and the task failure path, through real threads and real pool workers: the drill hook
 * (GEOFENCE_FAULT_INJECT, read by each pool worker when it starts) makes one worker hang, throw or end on one device's
 * ping. The pipeline must keep going: the hung task is aborted and its group resubmitted, /healthz answers 503
 * meanwhile and 200 after, every later ping is processed and its triggers delivered in per-device order, and the
 * dropped ping is counted with its reason.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Router } from '../../src/index.js';
import { shardOfId } from '../../src/ingest/device-registry.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { createDrilledRouter, devicesOnShard } from './drill-support.js';
import { byDevice, frameOf, orderProblem, square, waitFor, type ScriptedPing } from './support.js';

/** A, and far from it a compliance fence C, whose pings take the COMPLIANCE ring. */
const C_EAST_M = 3000;
const FENCES = {
  type: 'FeatureCollection',
  features: [square('A', 0, 0, 50), square('C', C_EAST_M, 0, 50, { compliance: true })],
};
const SHARDS = 2;

/** Numeric device ids that hash to `shard`, `n` of them, none equal to `except`. */
function devicesOn(shard: number, n: number, except: number): number[] {
  return devicesOnShard(shard, SHARDS, n, except);
}

/** Each device walks through A (or the fence centred `centreM` east): outside, inside, outside (ENTER, EXIT). */
function walkThrough(ids: readonly number[], startMs: number, centreM = 0): ScriptedPing[] {
  const out: ScriptedPing[] = [];
  for (const [k, eastM] of [-200, 0, 200].entries())
    for (const id of ids) out.push({ id, eastM: centreM + eastM, northM: 0, dtMs: startMs + k * 1000 });
  return out;
}

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `metrics lack ${name}`);
  return Number(m[1]);
}

function startRouter(fault: string, called: Trigger[]): Promise<Router> {
  return createDrilledRouter(fault, FENCES, SHARDS, called, { adminPort: 0, complianceWorker: true });
}

function expectWalks(called: readonly Trigger[], ids: readonly number[], fence = 'A'): void {
  const seen = byDevice(called);
  for (const id of ids) {
    const list = (seen.get(id) ?? []).map((t) => `${t.type} ${t.fenceId}`);
    assert.deepEqual(list, [`ENTER ${fence}`, `EXIT ${fence}`], `device ${id}`);
  }
  assert.equal(orderProblem(called), null);
}

test('a hung containment task is aborted by the watchdog; /healthz is 503 meanwhile; the pipeline keeps going', async () => {
  const HUNG = 777;
  const hungShard = shardOfId(HUNG, SHARDS);
  const called: Trigger[] = [];
  const router = await startRouter(`hang-on-device:${HUNG}`, called);
  const health = `http://127.0.0.1:${router.adminPort}/healthz`;
  try {
    assert.equal((await fetch(health)).status, 200);
    // Devices on the hung group's shard and on the other one, before the hang (processed normally).
    const before = [...devicesOn(hungShard, 3, HUNG), ...devicesOn(1 - hungShard, 3, HUNG)];
    for (const p of walkThrough(before, 0)) router.ingest(frameOf(p));
    await waitFor(
      () => byDevice(called).size === before.length && called.length === 2 * before.length,
      10_000,
      'triggers before the hang',
    );

    // The hang: alone in its batch, so the batch the watchdog drops is that one ping.
    router.ingest(frameOf({ id: HUNG, eastM: 0, northM: 0, dtMs: 10_000 }));
    await new Promise((r) => setTimeout(r, 150));
    const t0 = Date.now();
    const after = [
      ...devicesOn(hungShard, 4, HUNG).slice(3),
      ...devicesOn(1 - hungShard, 4, HUNG).slice(3),
      ...devicesOn(hungShard, 6, HUNG).slice(4),
    ];
    for (const p of walkThrough(after, 20_000)) router.ingest(frameOf(p));

    // Detection: /healthz turns 503 naming the stalled shard, and /readyz agrees.
    let body = '';
    while (Date.now() - t0 < 5000) {
      const res = await fetch(health);
      const text = await res.text();
      if (res.status === 503) {
        body = text;
        assert.equal((await fetch(`http://127.0.0.1:${router.adminPort}/readyz`)).status, 503);
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.match(body, new RegExp(`stalled on shards ${hungShard}\\b`));
    assert.ok(Date.now() - t0 >= 300, 'not declared hung before the stall timeout');

    // Continuity: every later device's walk is delivered, the hung group's shard included.
    await waitFor(
      () => after.every((id) => (byDevice(called).get(id)?.length ?? 0) === 2),
      10_000,
      'triggers after the hang',
    );
    expectWalks(called, [...before, ...after]);
    // Healthy again once the replacement task made progress.
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; i++) {
      status = (await fetch(health)).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(status, 200);
    assert.equal((await fetch(`http://127.0.0.1:${router.adminPort}/readyz`)).status, 200);

    const text = await router.metricsText();
    assert.equal(metric(text, 'geofence_containment_tasks_aborted_total'), 1);
    assert.equal(metric(text, 'geofence_containment_lost_pings_hung_total'), 1);
    assert.equal(metric(text, 'geofence_containment_lost_pings_total'), 1);
    assert.equal(metric(text, 'geofence_containment_stalled_groups'), 0);
    assert.equal(metric(text, 'geofence_containment_tasks_failed_total'), 0);
    const summary = await router.close();
    assert.equal(summary.lost, 1);
    assert.equal(summary.processed + summary.lost, summary.admittedTotal);
  } finally {
    await router.close();
  }
});

for (const [mode, BAD, what] of [
  ['throw', 778, 'a containment task that throws mid-batch'],
  ['exit', 779, 'a containment worker that ends mid-batch'],
] as const) {
  test(`${what} loses only the ping it was in, counted; the pipeline keeps going`, async () => {
    const badShard = shardOfId(BAD, SHARDS);
    const called: Trigger[] = [];
    const router = await startRouter(`${mode}-on-device:${BAD}`, called);
    try {
      const before = [...devicesOn(badShard, 2, BAD), ...devicesOn(1 - badShard, 2, BAD)];
      for (const p of walkThrough(before, 0)) router.ingest(frameOf(p));
      await waitFor(() => called.length === 2 * before.length, 10_000, `triggers before the ${mode}`);
      router.ingest(frameOf({ id: BAD, eastM: 0, northM: 0, dtMs: 10_000 }));
      await waitFor(() => router.stats().lost === 1, 5000, 'the lost batch counted');
      const after = [...devicesOn(badShard, 5, BAD).slice(2), ...devicesOn(1 - badShard, 5, BAD).slice(2)];
      for (const p of walkThrough(after, 20_000)) router.ingest(frameOf(p));
      await waitFor(
        () => after.every((id) => (byDevice(called).get(id)?.length ?? 0) === 2),
        10_000,
        `triggers after the ${mode}`,
      );
      expectWalks(called, [...before, ...after]);
      assert.equal((await fetch(`http://127.0.0.1:${router.adminPort}/healthz`)).status, 200);
      const text = await router.metricsText();
      assert.equal(metric(text, 'geofence_containment_tasks_failed_total'), 1);
      assert.equal(metric(text, 'geofence_containment_lost_pings_total'), 1);
      assert.equal(metric(text, 'geofence_containment_lost_pings_hung_total'), 0);
      assert.equal(metric(text, 'geofence_containment_tasks_aborted_total'), 0);
      const summary = await router.close();
      assert.equal(summary.lost, 1);
      assert.equal(summary.processed + summary.lost, summary.admittedTotal);
    } finally {
      await router.close();
    }
  });
}

test('a hung task on the COMPLIANCE ring is aborted too; /healthz names it; COMPLIANCE pings go on', async () => {
  const HUNG = 780;
  const called: Trigger[] = [];
  const router = await startRouter(`hang-on-device:${HUNG}`, called);
  const health = `http://127.0.0.1:${router.adminPort}/healthz`;
  /**
   * Each device's first ping is inside C (a new device has nothing pending: it takes the COMPLIANCE ring), its second
   * outside (a device that was inside C: a COMPLIANCE ping too, on the same ring).
   */
  const walk = (ids: readonly number[], startMs: number): void => {
    for (const [k, eastM] of [0, 200].entries())
      for (const id of ids)
        router.ingest(frameOf({ id, eastM: C_EAST_M + eastM, northM: 0, dtMs: startMs + k * 1000 }));
  };
  try {
    const ids = devicesOn(0, 3, HUNG).concat(devicesOn(1, 3, HUNG));
    const before = ids.slice(0, 3);
    walk(before, 0);
    await waitFor(() => called.length === 2 * before.length, 10_000, 'triggers before the hang');
    // The hung device's first ping is inside C: it takes the COMPLIANCE ring, alone in its batch.
    router.ingest(frameOf({ id: HUNG, eastM: C_EAST_M, northM: 0, dtMs: 10_000 }));
    await new Promise((r) => setTimeout(r, 150));
    // These wait behind the hung ping in the COMPLIANCE ring until the watchdog has replaced its task.
    const after = ids.slice(3);
    walk(after, 20_000);
    let body = '';
    for (const t0 = Date.now(); Date.now() - t0 < 5000 && body === '';) {
      const res = await fetch(health);
      if (res.status === 503) body = await res.text();
      else await new Promise((r) => setTimeout(r, 20));
    }
    assert.match(body, /stalled on the COMPLIANCE ring/);
    await waitFor(
      () => after.every((id) => (byDevice(called).get(id)?.length ?? 0) === 2),
      10_000,
      'COMPLIANCE triggers after the hang',
    );
    expectWalks(called, [...before, ...after], 'C');
    const text = await router.metricsText();
    assert.equal(metric(text, 'geofence_containment_tasks_aborted_total'), 1);
    assert.equal(metric(text, 'geofence_containment_lost_pings_hung_total'), 1);
    // Two pings of each of six devices, and the hung ping: all on the COMPLIANCE ring.
    assert.equal(Number(/^geofence_compliance_path_pings_total\{lane="compliance"\} (\d+)/m.exec(text)?.[1]), 13);
    const summary = await router.close();
    assert.equal(summary.lost, 1);
    assert.equal(summary.processed + summary.lost, summary.admittedTotal);
  } finally {
    await router.close();
  }
});
