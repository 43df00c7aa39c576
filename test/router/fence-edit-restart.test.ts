/**
 * Live fence edits across a restart over the same state directory: the next start applies them again over the fences
 * it starts with, so a device inside an added fence gets neither an EXIT at start nor a second ENTER, a removed
 * fence stays removed and a replaced one keeps its new shape; a reload makes the reloaded fences the new base; a
 * stored edit that no longer validates, or a damaged journal line, is reported and skipped without losing the rest.
 * Every trigger of every run together keeps the delivery contract.
 */
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Router, type Trigger } from '../../src/index.js';
import type { RouterOptionsInput } from '../../src/config/options.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, square, waitFor } from '../pipeline/support.js';

const fc = (...features: unknown[]): unknown => ({ type: 'FeatureCollection', features });
const BASE = fc(square('A', 0, 0, 50), square('B', 1000, 0, 50), square('C', 2000, 0, 50));

function start(stateDir: string, got: Trigger[], lines: string[], extra: RouterOptionsInput = {}): Promise<Router> {
  return createRouter({
    fences: BASE,
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    stateDir,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: (line) => void lines.push(line),
    ...extra,
  });
}

const names = (ts: readonly Trigger[]): string[] => ts.map((t) => `${t.type} ${t.deviceId} ${t.fenceId}`).sort();
const occupants = (r: Router, id: string): string[] | null =>
  r.fenceOccupants(id)?.map((o) => String(o.deviceId)) ?? null;

test('fence edits survive a restart: no EXIT at start, no second ENTER, removed stays removed; a reload is the new base', async () => {
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-edit-restart-')), 'state');
  const got: Trigger[] = [];
  const lines: string[] = [];

  const first = await start(stateDir, got, lines);
  first.ingest(frameOf({ id: 'd1', eastM: 0, northM: 0, dtMs: 0 }));
  first.ingest(frameOf({ id: 'd2', eastM: 2000, northM: 0, dtMs: 0 }));
  await waitFor(() => got.length === 2, 10_000, 'ENTER A, ENTER C');
  const added = await first.upsertFence(square('D', 0, 0, 30));
  assert.equal(added.persisted, true);
  const removed = await first.removeFence('C');
  assert.equal(removed.exits, 1);
  assert.equal(removed.persisted, true);
  const replaced = await first.upsertFence(square('B', 3000, 0, 50, { tags: ['moved'] }));
  assert.equal(replaced.action, 'replaced');
  assert.equal((await first.removeFence('nothing')).persisted, false, 'an edit that changed nothing is not kept');
  first.ingest(frameOf({ id: 'd1', eastM: 1, northM: 0, dtMs: 1000 }));
  first.ingest(frameOf({ id: 'd3', eastM: 3000, northM: 0, dtMs: 1000 }));
  await waitFor(() => got.length === 5, 10_000, 'EXIT C, ENTER D, ENTER B');
  assert.deepEqual(names(got.slice(2)), ['ENTER d1 D', 'ENTER d3 B', 'EXIT d2 C']);
  await first.close();

  // The next start over the same directory: the base fences with the three edits applied, the stays restored.
  const atRestart = got.length;
  const second = await start(stateDir, got, lines);
  try {
    assert.ok(
      lines.some((l) => l.includes('fence edits since the last reload applied over the fences: 3')),
      lines.join('\n'),
    );
    assert.deepEqual(occupants(second, 'A'), ['d1']);
    assert.deepEqual(occupants(second, 'D'), ['d1']);
    assert.deepEqual(occupants(second, 'B'), ['d3']);
    assert.equal(occupants(second, 'C'), null, 'C stays removed');
    // Still inside A, D and B: nothing; then d1 leaves A and D, d3 leaves B (its new shape).
    second.ingest(frameOf({ id: 'd1', eastM: 2, northM: 0, dtMs: 2000 }));
    second.ingest(frameOf({ id: 'd3', eastM: 3001, northM: 0, dtMs: 2000 }));
    second.ingest(frameOf({ id: 'd1', eastM: 500, northM: 0, dtMs: 3000 }));
    second.ingest(frameOf({ id: 'd3', eastM: 3500, northM: 0, dtMs: 3000 }));
    await waitFor(() => got.length === atRestart + 3, 10_000, 'EXIT A, EXIT D, EXIT B');
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(names(got.slice(atRestart)), ['EXIT d1 A', 'EXIT d1 D', 'EXIT d3 B']);
    assert.deepEqual(got[got.length - 1]!.tags, got.find((t) => t.fenceId === 'B')!.tags);
    assert.deepEqual(got.find((t) => t.fenceId === 'B')!.tags, ['moved']);

    // A reload makes its fences the new base: the edits are dropped from the journal.
    await second.reloadFences(fc(square('A', 0, 0, 50), square('E', 5000, 0, 50)));
    const journal = readFileSync(join(stateDir, 'fence-edits.ndjson'), 'utf8').trim().split('\n');
    assert.equal(journal.length, 1, `only the header is left: ${journal.join(' | ')}`);
  } finally {
    await second.close();
  }
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);

  // And the start after: the base of the options again (the reload's fences are the caller's to pass), no edit.
  const third = await start(stateDir, got, lines);
  try {
    assert.deepEqual(
      ['A', 'B', 'C', 'D', 'E'].map((id) => occupants(third, id) !== null),
      [true, true, true, false, false],
    );
  } finally {
    await third.close();
  }
});

test('a stored edit that no longer validates, and damaged journal lines, are reported and skipped; the rest apply', async () => {
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-edit-journal-')), 'state');
  const got: Trigger[] = [];
  const lines: string[] = [];
  const first = await start(stateDir, got, lines);
  // A ring of 41 positions, then one of 5: both valid under the default limits.
  const ring = Array.from({ length: 40 }, (_, i) => {
    const a = (i / 40) * 2 * Math.PI;
    return [13.4 + 0.001 * Math.cos(a), 52.5 + 0.001 * Math.sin(a)];
  });
  ring.push(ring[0]!);
  await first.upsertFence({
    type: 'Feature',
    properties: { id: 'round' },
    geometry: { type: 'Polygon', coordinates: [ring] },
  });
  await first.upsertFence(square('F', 7000, 0, 50));
  await first.close();
  const file = join(stateDir, 'fence-edits.ndjson');
  assert.ok(existsSync(file));
  appendFileSync(file, '{"remove":\n{"upsert":{"type":"Feature","prop');

  // Restarted with a lower ring limit: "round" no longer validates, F still does; the damaged line and the cut
  // line are skipped.
  const second = await start(stateDir, got, lines, { maxVerticesPerRing: 20 });
  try {
    assert.deepEqual(
      ['A', 'B', 'C', 'F', 'round'].map((id) => occupants(second, id) !== null),
      [true, true, true, true, false],
    );
    const text = lines.join('\n');
    assert.match(
      text,
      /fence edit journal: stored edit 1 \(upsert of "round"\): .*maxVerticesPerRing 20.*: not applied/,
    );
    assert.match(text, /fence edit journal: 1 damaged lines skipped \(line 4: not a stored fence edit\)/);
    assert.match(text, /fence edit journal: its last line was cut short/);
    assert.match(text, /fence edits since the last reload applied over the fences: 1 \(from 3 journal lines\)/);
  } finally {
    await second.close();
  }
});

test('a fence whose tags changed across a restart: its stays under the old tags end at the start, routed as their ENTERs were', async () => {
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-retag-restart-')), 'state');
  const zoneA: Trigger[] = [];
  const all: Trigger[] = [];
  const lines: string[] = [];
  const startWithTag = (tag: string): Promise<Router> =>
    createRouter({
      fences: fc(square('A', 0, 0, 50, { tags: [tag] })),
      listenHost: null,
      adminHost: null,
      poolSize: 1,
      maxDevices: 100,
      stateDir,
      downstreams: [
        { name: 'a', kind: 'callback', subscribe: { tags: ['zoneA'] }, callback: (ts) => void zoneA.push(...ts) },
        { name: 'all', kind: 'callback', callback: (ts) => void all.push(...ts) },
      ],
      log: (line) => void lines.push(line),
    });
  const first = await startWithTag('zoneA');
  first.ingest(frameOf({ id: 'd1', eastM: 0, northM: 0, dtMs: 0 }));
  await waitFor(() => all.length === 1, 10_000, 'ENTER A');
  await first.close();
  const second = await startWithTag('zoneB');
  second.ingest(frameOf({ id: 'd1', eastM: 1, northM: 0, dtMs: 1000 }));
  await waitFor(() => all.length === 3, 10_000, 'EXIT A at the start, then ENTER A under the new tags');
  await second.close();
  const shown = (ts: readonly Trigger[]): string[] => ts.map((t) => `${t.type} ${t.fenceId} ${t.tags.join(',')}`);
  assert.deepEqual(shown(zoneA), ['ENTER A zoneA', 'EXIT A zoneA']);
  assert.deepEqual(shown(all), ['ENTER A zoneA', 'EXIT A zoneA', 'ENTER A zoneB']);
  assert.deepEqual(checkDeliveryContract(all, { complete: true, stays: true }).problems, []);
  // The subscription sees part of each device's run: in order, once, its stays whole.
  assert.deepEqual(checkDeliveryContract(zoneA, { stays: true }).problems, []);
  assert.ok(
    lines.some((l) => /1 devices were inside fences .*tags changed/.test(l)),
    lines.join('\n'),
  );
});

test('a crash just after a fence removal ends the stay once: the state is checkpointed as soon as the EXIT is handed on', async () => {
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-edit-crash-')), 'state');
  const got: Trigger[] = [];
  const lines: string[] = [];
  // No periodic checkpoint within the test: only the start's and the one after the removal.
  const slow = { checkpointIntervalMs: 600_000 };

  // Run 1: d1 enters C; a clean stop keeps it inside C.
  const first = await start(stateDir, got, lines, slow);
  first.ingest(frameOf({ id: 'd1', eastM: 2000, northM: 0, dtMs: 0 }));
  await waitFor(() => got.length === 1, 10_000, 'ENTER C');
  await first.close();

  // Run 2: C removed live (EXIT C), then the process dies before any periodic checkpoint.
  const second = await start(stateDir, got, lines, slow);
  const removed = await second.removeFence('C');
  assert.equal(removed.exits, 1);
  await waitFor(() => got.length === 2, 10_000, 'EXIT C');
  await waitFor(
    () => lines.some((l) => l.includes('checkpoint written after a fence change that ended 1 stays')),
    10_000,
    'the checkpoint after the removal',
  );
  await second.abandon();

  // Run 3: C stays removed and d1 is not inside it: no second EXIT at the restore.
  const third = await start(stateDir, got, lines, slow);
  try {
    assert.equal(third.recovery.restoredDevices, 1);
    third.ingest(frameOf({ id: 'd1', eastM: 0, northM: 0, dtMs: 1000 }));
    await waitFor(() => got.length >= 3, 10_000, 'ENTER A');
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(
      got.map((t) => `${t.seq} ${t.type} ${t.fenceId}`),
      ['1 ENTER C', '2 EXIT C', `${got[2]!.seq} ENTER A`],
    );
    assert.deepEqual(checkDeliveryContract(got, { stays: true }).problems, []);
  } finally {
    await third.close();
  }
});
