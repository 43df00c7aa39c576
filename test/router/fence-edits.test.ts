/**
 * Live fence edits through the router: add, replace and remove one fence (library and admin routes), with the state
 * carried over as for a reload (EXIT for devices inside a removed fence, no second ENTER for a kept one), validation
 * as for a fences file, expiry by `expiresAt`, and an edit that outgrows the store's headroom (a full build instead).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter, FenceValidationError, type Trigger } from '../../src/index.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, square, waitFor } from '../pipeline/support.js';

const fc = (...features: unknown[]): unknown => ({ type: 'FeatureCollection', features });
const TOKEN = 'edit-token-0123456789abcdef';

function routerWith(
  got: Trigger[],
  lines: string[] = [],
  admin = false,
  extra: Parameters<typeof createRouter>[0] = {},
): ReturnType<typeof createRouter> {
  return createRouter({
    fences: fc(square('A', 0, 0, 50), square('B', 0, 0, 80, { compliance: true })),
    listenHost: null,
    adminHost: admin ? '127.0.0.1' : null,
    adminPort: 0,
    adminToken: admin ? TOKEN : null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    stateDir: null,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: (line) => void lines.push(line),
    ...extra,
  });
}

const names = (ts: readonly Trigger[]): string[] => ts.map((t) => `${t.type} ${t.fenceId}`).sort();

test('upsert adds and replaces, remove gives an EXIT, bad fences are refused: the stays stay valid', async () => {
  const got: Trigger[] = [];
  const router = await routerWith(got);
  try {
    router.ingest(frameOf({ id: 'd', eastM: -300, northM: 0, dtMs: 0 }));
    router.ingest(frameOf({ id: 'd', eastM: 0, northM: 0, dtMs: 1000 }));
    await waitFor(() => got.length === 2, 10_000, 'two ENTERs');

    // Add C where the device is: its next ping enters C only (A and B carried over).
    const added = await router.upsertFence(square('C', 0, 0, 30, { tags: ['new'] }));
    assert.equal(added.action, 'created');
    assert.equal(added.generation, 2);
    assert.equal(added.fenceCount, 3);
    assert.equal(added.exits, 0);
    assert.equal(added.fullBuild, false);
    router.ingest(frameOf({ id: 'd', eastM: 5, northM: 0, dtMs: 2000 }));
    await waitFor(() => got.length === 3, 10_000, 'ENTER C');
    assert.deepEqual(names(got.slice(2)), ['ENTER C']);
    assert.deepEqual(got[2]!.tags, ['new']);
    assert.deepEqual(
      router.fenceOccupants('C')?.map((o) => o.deviceId),
      ['d'],
    );

    // Replace A by a square 1 km away: the stay is kept by the edit, and the next ping decides (EXIT A).
    const replaced = await router.upsertFence(square('A', 1000, 0, 50));
    assert.equal(replaced.action, 'replaced');
    assert.equal(replaced.fenceCount, 3);
    assert.equal(replaced.exits, 0);
    router.ingest(frameOf({ id: 'd', eastM: 6, northM: 0, dtMs: 3000 }));
    await waitFor(() => got.length === 4, 10_000, 'EXIT A');
    assert.deepEqual(names(got.slice(3)), ['EXIT A']);
    assert.equal(got[3]!.insideMs, 2000);

    // Remove B (compliance): an EXIT at once, in the COMPLIANCE lane, at the device's last event time.
    const removed = await router.removeFence('B');
    assert.equal(removed.action, 'removed');
    assert.equal(removed.exits, 1);
    assert.equal(removed.fenceCount, 2);
    await waitFor(() => got.length === 5, 10_000, 'EXIT B');
    assert.equal(`${got[4]!.type} ${got[4]!.fenceId} ${got[4]!.lane}`, 'EXIT B compliance');
    assert.equal(got[4]!.eventTimeMs, got[3]!.eventTimeMs);
    assert.equal(router.fenceOccupants('B'), null);

    // Removing an id not in force changes nothing; a bad feature is refused with its problems and changes nothing.
    const absent = await router.removeFence('B');
    assert.equal(absent.action, 'absent');
    assert.equal(absent.generation, removed.generation);
    await assert.rejects(
      router.upsertFence({ type: 'Feature', properties: { id: 'X', dwellMs: -1 }, geometry: null }),
      (err: unknown) => {
        assert.ok(err instanceof FenceValidationError);
        assert.match(err.message, /dwellMs must be a non-negative finite number/);
        return true;
      },
    );
    await assert.rejects(router.removeFence(''), /fenceId must be a non-empty string/);

    // The device re-enters where B was: no trigger for B; leaving gives EXIT C.
    router.ingest(frameOf({ id: 'd', eastM: 60, northM: 0, dtMs: 4000 }));
    const s = await router.close();
    assert.deepEqual(names(got.slice(5)), ['EXIT C']);
    const report = checkDeliveryContract(got, { complete: true, stays: true });
    assert.deepEqual(report.problems, []);
    assert.equal(s.delivered, got.length);
    assert.equal(s.fenceEditsFailed, 1, 'the refused upsert is counted');
    assert.equal(s.fenceEdits, 3);
    assert.ok(s.fenceEditLastMs > 0);
  } finally {
    await router.close();
  }
});

test('a fence with expiresAt is removed at that time, with an EXIT for the devices inside it', async () => {
  const got: Trigger[] = [];
  const lines: string[] = [];
  const router = await routerWith(got, lines);
  try {
    const expiresAt = new Date(Date.now() + 600).toISOString();
    const r = await router.upsertFence(square('T', 0, 0, 20, { expiresAt }));
    assert.equal(r.action, 'created');
    router.ingest(frameOf({ id: 'e', eastM: 0, northM: 0, dtMs: 0 }));
    await waitFor(() => got.length === 3, 10_000, 'ENTER A, B, T');
    await waitFor(() => got.length === 4, 10_000, 'the expiry EXIT');
    assert.equal(`${got[3]!.type} ${got[3]!.fenceId}`, 'EXIT T');
    // The EXIT can reach the callback a moment before the removal's generation is in force for the queries.
    await waitFor(() => router.fenceOccupants('T') === null, 10_000, 'T gone from the queries');
    assert.ok(
      lines.some((l) => /fence "T" expired .* removed, 1 EXIT/.test(l)),
      lines.join('\n'),
    );
    // A bad expiresAt is refused like any other property.
    await assert.rejects(router.upsertFence(square('U', 0, 0, 20, { expiresAt: 'tomorrow' })), /expiresAt must be/);
  } finally {
    await router.close();
  }
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});

test('a fence whose tags change mid-stay: the stay under the old tags ends (EXIT where its ENTER went), a new one begins', async () => {
  const zoneA: Trigger[] = [];
  const zoneB: Trigger[] = [];
  const all: Trigger[] = [];
  const router = await routerWith([], [], false, {
    fences: fc(square('A', 0, 0, 50, { tags: ['zoneA'] })),
    downstreams: [
      { name: 'a', kind: 'callback', subscribe: { tags: ['zoneA'] }, callback: (ts) => void zoneA.push(...ts) },
      { name: 'b', kind: 'callback', subscribe: { tags: ['zoneB'] }, callback: (ts) => void zoneB.push(...ts) },
      { name: 'all', kind: 'callback', callback: (ts) => void all.push(...ts) },
    ],
    log: () => undefined,
  });
  try {
    router.ingest(frameOf({ id: 'd', eastM: 0, northM: 0, dtMs: 0 }));
    await waitFor(() => zoneA.length === 1, 10_000, 'ENTER A at zone-a');
    const r = await router.upsertFence(square('A', 0, 0, 50, { tags: ['zoneB'] }));
    assert.equal(r.exits, 1);
    router.ingest(frameOf({ id: 'd', eastM: 5, northM: 0, dtMs: 1000 }));
    router.ingest(frameOf({ id: 'd', eastM: 500, northM: 0, dtMs: 20_000 }));
    await waitFor(() => all.length === 4, 10_000, 'four triggers');
  } finally {
    await router.close();
  }
  const shown = (ts: readonly Trigger[]): string[] => ts.map((t) => `${t.type} ${t.fenceId} ${t.tags.join(',')}`);
  assert.deepEqual(shown(zoneA), ['ENTER A zoneA', 'EXIT A zoneA']);
  assert.deepEqual(shown(zoneB), ['ENTER A zoneB', 'EXIT A zoneB']);
  assert.deepEqual(shown(all), ['ENTER A zoneA', 'EXIT A zoneA', 'ENTER A zoneB', 'EXIT A zoneB']);
  for (const ts of [zoneA, zoneB, all]) assert.deepEqual(checkDeliveryContract(ts, { stays: true }).problems, []);
});

test('edits past the store headroom switch to a full build, and every fence still works', async () => {
  const got: Trigger[] = [];
  const router = await routerWith(got);
  try {
    // The store leaves room for 256 more fences: the 257th edit (or one before, if rings run out) is a full build.
    const results = [];
    for (let i = 0; i < 260; i++) results.push(await router.upsertFence(square(`s${i}`, 2000 + i * 10, 0, 3)));
    const full = results.filter((r) => r.fullBuild);
    assert.ok(full.length >= 1, 'a full build happened');
    assert.ok(
      results.slice(0, 200).every((r) => !r.fullBuild),
      'the first 200 edits went over the same store',
    );
    assert.equal(results.at(-1)!.fenceCount, 262);
    // A device through the first, a middle and the last added fence gets ENTER/EXIT for each, and nothing else.
    const xs = [2000, 2000 + 130 * 10, 2000 + 259 * 10];
    let dt = 0;
    for (const x of xs) {
      router.ingest(frameOf({ id: 'w', eastM: x, northM: 0, dtMs: (dt += 1000) }));
      router.ingest(frameOf({ id: 'w', eastM: x, northM: 50, dtMs: (dt += 1000) }));
    }
    await waitFor(() => got.length === 6, 10_000, 'three stays');
    assert.deepEqual(
      got.map((t) => `${t.type} ${t.fenceId}`),
      ['ENTER s0', 'EXIT s0', 'ENTER s130', 'EXIT s130', 'ENTER s259', 'EXIT s259'],
    );
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  } finally {
    await router.close();
  }
});

test('PUT and DELETE /admin/fences/:id: token, validation, 404, and the edit applied', async () => {
  const got: Trigger[] = [];
  const router = await routerWith(got, [], true);
  const base = `http://127.0.0.1:${router.adminPort!}`;
  const auth = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
  try {
    const body = JSON.stringify(square('Z', 0, 0, 20, { tags: ['z'] }));
    assert.equal((await fetch(`${base}/admin/fences/Z`, { method: 'PUT', body })).status, 401);
    const put = await fetch(`${base}/admin/fences/Z`, { method: 'PUT', body, headers: auth });
    assert.equal(put.status, 200);
    const answer = (await put.json()) as { ok: boolean; result: { action: string; fenceCount: number } };
    assert.equal(answer.result.action, 'created');
    assert.equal(answer.result.fenceCount, 3);

    // The path's id wins when the body has none; a different one is refused.
    const noId = square('ignored', 0, 0, 25) as { properties: Record<string, unknown> };
    delete noId.properties['id'];
    const put2 = await fetch(`${base}/admin/fences/${encodeURIComponent('Z 2')}`, {
      method: 'PUT',
      body: JSON.stringify(noId),
      headers: auth,
    });
    assert.equal(put2.status, 200);
    const clash = await fetch(`${base}/admin/fences/Y`, { method: 'PUT', body, headers: auth });
    assert.equal(clash.status, 400);
    assert.match(((await clash.json()) as { error: string }).error, /differs from the id in the path/);

    const bad = await fetch(`${base}/admin/fences/Q`, {
      method: 'PUT',
      body: JSON.stringify({ type: 'Feature', properties: {}, geometry: { type: 'Polygon', coordinates: [[[0, 0]]] } }),
      headers: auth,
    });
    assert.equal(bad.status, 400);
    const badBody = (await bad.json()) as { problems: { reason: string }[] };
    assert.match(badBody.problems[0]!.reason, /polygon ring 0 has 1 positions/);
    assert.equal((await fetch(`${base}/admin/fences/Q`, { method: 'PUT', body: '{', headers: auth })).status, 400);

    router.ingest(frameOf({ id: 'h', eastM: 0, northM: 0, dtMs: 0 }));
    await waitFor(() => got.length === 4, 10_000, 'ENTER A, B, Z, Z 2');
    assert.deepEqual(names(got), ['ENTER A', 'ENTER B', 'ENTER Z', 'ENTER Z 2']);

    const del = await fetch(`${base}/admin/fences/Z`, { method: 'DELETE', headers: auth });
    assert.equal(del.status, 200);
    assert.equal(((await del.json()) as { result: { exits: number } }).result.exits, 1);
    assert.equal((await fetch(`${base}/admin/fences/Z`, { method: 'DELETE', headers: auth })).status, 404);
    assert.equal((await fetch(`${base}/admin/fences/Z`, { method: 'POST', headers: auth })).status, 405);
    await waitFor(() => got.length === 5, 10_000, 'EXIT Z');
    assert.equal(`${got[4]!.type} ${got[4]!.fenceId}`, 'EXIT Z');
  } finally {
    await router.close();
  }
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});
