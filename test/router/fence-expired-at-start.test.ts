/**
 * A fence whose `expiresAt` has passed is never in force: not at a start (the router was stopped when it came due),
 * not in a reload, not in an upsert. A device inside it when it came due gets its EXIT at the start, as for a fence
 * removed from the file; a device that pings inside it afterwards gets nothing; the log names the fence.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Router, type Trigger } from '../../src/index.js';
import type { RouterOptionsInput } from '../../src/config/options.js';
import type { RouterExtras } from '../../src/router/api.js';
import { loadFenceStore, withoutExpiredFences } from '../../src/fences/fence-file.js';
import { DEFAULT_FENCE_LIMITS, parseFences } from '../../src/fences/parse.js';
import { buildFenceStore, FenceStore } from '../../src/fences/store.js';
import { LOOKUP_ONLY_STORE } from '../../src/pipeline/store-views.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, square, waitFor } from '../pipeline/support.js';

const fc = (...features: unknown[]): unknown => ({ type: 'FeatureCollection', features });

function start(got: Trigger[], lines: string[], options: RouterOptionsInput & RouterExtras): Promise<Router> {
  return createRouter({
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: (line) => void lines.push(line),
    ...options,
  });
}

const names = (ts: readonly Trigger[]): string[] => ts.map((t) => `${t.type} ${t.deviceId} ${t.fenceId}`).sort();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits for the triggers after the first `from` to be `expected` (a moment more, so that one too many shows). */
async function expectNext(got: readonly Trigger[], from: number, expected: string[]): Promise<void> {
  await waitFor(() => got.length >= from + expected.length, 10_000, expected.join(', '));
  await sleep(200);
  assert.deepEqual(names(got.slice(from)), expected);
}

test('loading fences leaves out those whose expiresAt has passed, and says which', () => {
  const past = Date.now() - 60_000;
  const loaded = loadFenceStore({
    geojson: fc(
      square('A', 0, 0, 50),
      square('gone', 1000, 0, 50, { expiresAt: past }),
      square('later', 2000, 0, 50, { expiresAt: Date.now() + 3_600_000 }),
    ),
    limits: { maxFileBytes: 1 << 20, maxFences: 100, maxVerticesPerRing: 100 },
    generation: 1,
  });
  const store = FenceStore.open(loaded.descriptor, LOOKUP_ONLY_STORE);
  assert.equal(store.liveFenceCount, 2);
  assert.equal(store.indexOfId('gone'), -1);
  assert.ok(store.indexOfId('later') >= 0);
  assert.deepEqual(loaded.expiredFences, [`fence "gone" expired at ${new Date(past).toISOString()}: not loaded`]);
});

test('a store carried over to a new router loses the fences that expired since; one with none expired is kept as it is', () => {
  const past = Date.now() - 1000;
  const parsed = parseFences(
    fc(square('A', 0, 0, 50), square('gone', 1000, 0, 50, { expiresAt: past })),
    DEFAULT_FENCE_LIMITS,
  );
  const carried = buildFenceStore(parsed, 7);
  const kept = withoutExpiredFences(carried, past - 1);
  assert.equal(kept.descriptor, carried, 'nothing expired: the same store');
  const left = withoutExpiredFences(carried, Date.now());
  const store = FenceStore.open(left.descriptor, LOOKUP_ONLY_STORE);
  assert.equal(store.indexOfId('gone'), -1);
  assert.ok(store.indexOfId('A') >= 0);
  assert.equal(store.generation, 8);
  assert.deepEqual(left.expiredFences, [`fence "gone" expired at ${new Date(past).toISOString()}: not loaded`]);
});

test('a fence that expired while the router was stopped: its stays end at the start, and nobody enters it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-expired-start-'));
  const stateDir = join(dir, 'state');
  const fencesFile = join(dir, 'fences.json');
  // Late enough that the first run starts, takes both ENTERs and stops before it, on a loaded host too.
  const expiresAt = Date.now() + 8000;
  const fences = fc(square('A', 0, 0, 50), square('T', 1000, 0, 50, { expiresAt }));
  const got: Trigger[] = [];
  const lines: string[] = [];

  const first = await start(got, lines, { fences, stateDir });
  first.ingest(frameOf({ id: 'd1', eastM: 1000, northM: 0, dtMs: 0 }));
  first.ingest(frameOf({ id: 'd2', eastM: 0, northM: 0, dtMs: 0 }));
  await waitFor(() => got.length === 2, 10_000, 'ENTER T, ENTER A');
  await first.close();
  assert.deepEqual(names(got), ['ENTER d1 T', 'ENTER d2 A']);
  await sleep(Math.max(0, expiresAt - Date.now()) + 50);

  // Started on the same fences (main-thread load): T is left out; d1's stay in it ends at the start.
  const second = await start(got, lines, { fences, stateDir });
  try {
    assert.equal(second.fenceOccupants('T'), null, 'T is not in force');
    assert.ok(
      lines.some((l) => l.includes(`fence "T" expired at ${new Date(expiresAt).toISOString()}: not loaded`)),
      lines.join('\n'),
    );
    await expectNext(got, 2, ['EXIT d1 T']);
    // A device pinging inside T now gets nothing; one inside A still gets its ENTER.
    second.ingest(frameOf({ id: 'd3', eastM: 1000, northM: 0, dtMs: 1000 }));
    second.ingest(frameOf({ id: 'd4', eastM: 0, northM: 0, dtMs: 1000 }));
    await expectNext(got, 3, ['ENTER d4 A']);
  } finally {
    await second.close();
  }

  // Started from a fences file (loader thread): T is still left out, and its stay is not ended twice.
  writeFileSync(fencesFile, JSON.stringify(fences));
  const third = await start(got, lines, { fencesFile, stateDir });
  try {
    assert.equal(third.fenceOccupants('T'), null);
    assert.deepEqual(
      third
        .fenceOccupants('A')
        ?.map((o) => String(o.deviceId))
        .sort(),
      ['d2', 'd4'],
    );
    third.ingest(frameOf({ id: 'd5', eastM: 1000, northM: 0, dtMs: 2000 }));
    third.ingest(frameOf({ id: 'd2', eastM: 500, northM: 0, dtMs: 2000 }));
    await expectNext(got, 4, ['EXIT d2 A']);
  } finally {
    await third.close();
  }
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});

test('a reload or an upsert with an expiresAt already passed: the fence is not in force, stays in it end', async () => {
  const got: Trigger[] = [];
  const lines: string[] = [];
  const router = await start(got, lines, {
    fences: fc(square('A', 0, 0, 50), square('B', 1000, 0, 50)),
    stateDir: null,
  });
  try {
    router.ingest(frameOf({ id: 'd1', eastM: 0, northM: 0, dtMs: 0 }));
    router.ingest(frameOf({ id: 'd2', eastM: 1000, northM: 0, dtMs: 0 }));
    await waitFor(() => got.length === 2, 10_000, 'ENTER A, ENTER B');
    const past = Date.now() - 1000;

    // A reload whose A has expired: A is removed (d1's EXIT); B stays.
    const reloaded = await router.reloadFences(
      fc(square('A', 0, 0, 50, { expiresAt: past }), square('B', 1000, 0, 50)),
    );
    assert.equal(reloaded.fenceCount, 1);
    assert.ok(
      lines.some((l) => l.includes('fence "A" expired at') && l.includes('not loaded')),
      lines.join('\n'),
    );
    await expectNext(got, 2, ['EXIT d1 A']);

    // An upsert of B that has already expired removes B; one of a new fence adds nothing.
    const ended = await router.upsertFence(square('B', 1000, 0, 50, { expiresAt: past }));
    assert.equal(ended.action, 'removed');
    assert.equal(ended.exits, 1);
    const none = await router.upsertFence(square('C', 2000, 0, 50, { expiresAt: past }));
    assert.equal(none.action, 'absent');
    assert.equal(router.fenceOccupants('C'), null);
    assert.ok(
      lines.some((l) => l.includes('fence "B" upserted with expiresAt') && l.includes('already passed')),
      lines.join('\n'),
    );
    router.ingest(frameOf({ id: 'd3', eastM: 2000, northM: 0, dtMs: 1000 }));
    router.ingest(frameOf({ id: 'd4', eastM: 1000, northM: 0, dtMs: 1000 }));
    await expectNext(got, 3, ['EXIT d2 B']);
  } finally {
    await router.close();
  }
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});
