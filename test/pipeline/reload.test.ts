/**
 * Fence reload through the router: device state carries over by fence id (no second ENTER for a kept fence), a
 * removed fence gives its inside devices an EXIT, an added fence works at once, and bad GeoJSON is refused with the
 * old fences still serving.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, FenceValidationError } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, orderProblem, square, waitFor } from './support.js';
import { holeCity } from '../../src/fences/hole-city.js';

const fc = (...features: unknown[]): unknown => ({ type: 'FeatureCollection', features });

/** A small embedded router (no listener, no admin server, 2 shards, 256-slot rings) with `options` on top. */
function smallRouter(options: Parameters<typeof createRouter>[0]): ReturnType<typeof createRouter> {
  return createRouter({
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    log: () => undefined,
    ...options,
  });
}

test('reload keeps state, emits EXIT for a removed fence, and refuses bad GeoJSON', async () => {
  const got: Trigger[] = [];
  const router = await smallRouter({
    fences: fc(square('A', 0, 0, 50), square('B', 0, 0, 80, { compliance: true })),
    stateDir: mkdtempSync(join(tmpdir(), 'gr-rl-')),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
  });
  try {
    router.ingest(frameOf({ id: 'd', eastM: -300, northM: 0, dtMs: 0 }));
    router.ingest(frameOf({ id: 'd', eastM: 0, northM: 0, dtMs: 1000 }));
    await waitFor(() => got.length === 2, 10_000, 'two ENTERs');
    assert.deepEqual(got.map((t) => `${t.type} ${t.fenceId}`).sort(), ['ENTER A', 'ENTER B']);

    // Bad GeoJSON: refused, generation unchanged, the old fences keep serving.
    await assert.rejects(
      router.reloadFences(fc(square('A', 0, 0, 50), { type: 'Feature', properties: {}, geometry: null })),
      (err: unknown) => {
        assert.ok(err instanceof FenceValidationError);
        assert.equal(err.featureIndex, 1);
        return true;
      },
    );

    // Keep A (moved index), drop B, add C where the device is.
    const r = await router.reloadFences(fc(square('C', 0, 0, 30), square('A', 0, 0, 50)));
    assert.deepEqual(r, { generation: 2, fenceCount: 2 });
    await waitFor(() => got.length === 3, 10_000, 'the reload EXIT');
    const exit = got[2]!;
    assert.equal(`${exit.type} ${exit.fenceId}`, 'EXIT B');
    assert.equal(exit.lane, 'compliance');
    assert.equal(exit.insideMs, 0);

    // Next ping inside: ENTER C only (A carried over); then leave: EXIT of both.
    router.ingest(frameOf({ id: 'd', eastM: 5, northM: 0, dtMs: 2000 }));
    router.ingest(frameOf({ id: 'd', eastM: 300, northM: 0, dtMs: 3000 }));
    const s = await router.close();
    assert.deepEqual(
      got
        .slice(3)
        .map((t) => `${t.type} ${t.fenceId}`)
        .sort(),
      ['ENTER C', 'EXIT A', 'EXIT C'],
    );
    assert.equal(got.find((t) => t.type === 'EXIT' && t.fenceId === 'A')!.insideMs, 2000);
    assert.equal(orderProblem(got), null);
    assert.equal(s.reloads, 1);
    assert.equal(s.triggersTotal, 6);
    assert.equal(s.delivered, 6);
    assert.equal(s.processed, s.admittedTotal);
  } finally {
    await router.close();
  }
});

test('after a reload, workers that did not get the new store ask for it, and every ping is processed on it', async () => {
  const got: Trigger[] = [];
  // 3 workers for 2 shard groups: tasks carry the store only to the workers that ask, so some must ask.
  const router = await smallRouter({
    fences: fc(square('A', 0, 0, 50)),
    poolSize: 3,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-rl2-')),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
  });
  try {
    await router.reloadFences(fc(square('B', 0, 0, 50)));
    // Devices step in and out of B one at a time, each ping in its own task, so tasks land on every worker.
    const devices = 20;
    for (let round = 0; round < 4; round++) {
      for (let d = 0; d < devices; d++) {
        router.ingest(frameOf({ id: `d${d}`, eastM: round % 2 === 0 ? 0 : 300, northM: 0, dtMs: round * 1000 }));
        await waitFor(
          () => router.stats().processed === round * devices + d + 1,
          10_000,
          `ping ${round}/${d} processed`,
        );
      }
    }
    const s = await router.close();
    assert.equal(s.lost, 0);
    assert.equal(s.processed, 4 * devices);
    // On the new generation: ENTER B, EXIT B, ENTER B, EXIT B per device, and nothing of A.
    assert.equal(got.length, 4 * devices);
    assert.ok(got.every((t) => t.fenceId === 'B'));
    assert.equal(orderProblem(got), null);
  } finally {
    await router.close();
  }
});

test('triggers queued across reloads keep their fence ids and their per-device order when the downstream catches up', async () => {
  const got: Trigger[] = [];
  let open: () => void = () => undefined;
  const gate = new Promise<void>((r) => (open = r));
  const router = await smallRouter({
    fences: fc(square('A', 0, 0, 50, { tags: ['a'] }), square('B', 1000, 0, 50, { compliance: true, tags: ['b'] })),
    stateDir: null,
    // A downstream that holds every batch until the gate opens: everything queues meanwhile.
    downstreams: [
      {
        name: 'slow',
        kind: 'callback',
        callback: async (ts) => {
          await gate;
          got.push(...ts);
        },
      },
    ],
  });
  try {
    for (let d = 0; d < 20; d++) {
      // From 300 m south of A (even devices) or of B (odd ones), into it.
      const east = d % 2 === 0 ? 0 : 1000;
      router.ingest(frameOf({ id: `d${d}`, eastM: east, northM: -300, dtMs: 0 }));
      router.ingest(frameOf({ id: `d${d}`, eastM: east, northM: 0, dtMs: 1000 }));
    }
    await waitFor(() => router.stats().triggersTotal === 20, 10_000, 'the ENTERs');
    // Reload twice while nothing is delivered: B goes (its devices get an EXIT), A moves index, C arrives.
    await router.reloadFences(fc(square('C', 2000, 300, 50), square('A', 0, 0, 50, { tags: ['a'] })));
    await router.reloadFences(fc(square('A', 0, 0, 50, { tags: ['a'] }), square('C', 2000, 300, 50)));
    // Then up north into C, 300 m north of the row (no fence on the way).
    for (let d = 0; d < 20; d++) router.ingest(frameOf({ id: `d${d}`, eastM: 2000, northM: 300, dtMs: 2000 }));
    await waitFor(
      () => router.stats().triggersTotal === 20 + 10 + 10 + 20,
      10_000,
      'EXITs and ENTERs after the reloads',
    );
    open();
    const s = await router.close();
    assert.equal(s.delivered, 60);
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    for (let d = 0; d < 20; d++) {
      const mine = got.filter((t) => t.deviceId === `d${d}`).map((t) => `${t.type} ${t.fenceId} [${t.tags.join()}]`);
      assert.deepEqual(
        mine,
        d % 2 === 0 ? ['ENTER A [a]', 'EXIT A [a]', 'ENTER C []'] : ['ENTER B [b]', 'EXIT B [b]', 'ENTER C []'],
        `d${d}`,
      );
    }
  } finally {
    open();
    await router.close();
  }
});

test('reloadFences(object) validates and indexes off the calling thread: its event loop keeps turning through a 10 MB hole collection', async () => {
  const router = await smallRouter({
    fences: fc(square('A', 0, 0, 50)),
    stateDir: null,
  });
  try {
    const big = holeCity({ polygons: 4, vertices: 33_000 });
    let turns = 0;
    let done = false;
    const spin = (): void => {
      if (done) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const result = await router.reloadFences(big);
    done = true;
    assert.equal(result.fenceCount, 4);
    // Validated here, the whole check would run between two turns; off the thread, the loop turns throughout.
    assert.ok(turns > 20, `event-loop turns during the reload: ${turns}`);
    // A collection that fails validation comes back as the FenceValidationError it was.
    await assert.rejects(
      router.reloadFences({
        type: 'FeatureCollection',
        features: [{ type: 'Feature', properties: {}, geometry: null }],
      }),
      FenceValidationError,
    );
  } finally {
    await router.close();
  }
});

test('a router reading its fences from a file reloads that file; reloadFences(object), which a restart would undo, is refused', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-reload-file-'));
  const file = join(dir, 'fences.geojson');
  writeFileSync(file, JSON.stringify(fc(square('A', 0, 0, 50))));
  const got: Trigger[] = [];
  const router = await smallRouter({
    fencesFile: file,
    stateDir: join(dir, 'state'),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
  });
  try {
    await assert.rejects(
      router.reloadFences(fc(square('B', 0, 0, 50))),
      /reads its fences from options\.fencesFile .*: write the fences there and call reloadFencesFile\(\)/,
    );
    router.ingest(frameOf({ id: 'd', eastM: 0, northM: 0, dtMs: 0 }));
    await waitFor(() => got.length === 1, 10_000, 'ENTER A: the fences did not change');
    writeFileSync(file, JSON.stringify(fc(square('A', 0, 0, 50), square('B', 0, 0, 60))));
    const r = await router.reloadFencesFile();
    assert.equal(r.fenceCount, 2);
    router.ingest(frameOf({ id: 'd', eastM: 1, northM: 0, dtMs: 1000 }));
    await waitFor(() => got.length === 2, 10_000, 'ENTER B');
    assert.deepEqual(
      got.map((t) => `${t.type} ${t.fenceId}`),
      ['ENTER A', 'ENTER B'],
    );
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  } finally {
    await router.close();
  }
});
