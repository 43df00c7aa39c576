/**
 * One live fence edit against a full rebuild, at 10,000 and 100,000 fences (synthetic cities).
 *
 * In-process parts, medians of `--runs` (each a fresh upsert of a new id over the generation the previous one made):
 * - edit: validate one Feature, write the new generation over the same region (editFenceStore), and open it as a
 *   containment worker does (grid and bands reused) and as the other threads do (lookup only);
 * - rebuild: what a reload of the same fences costs instead: parse + validate every feature, build the store, open it
 *   as a containment worker (its grid and bands built again) and lookup only.
 * Through a running router (1 containment worker, idle pipeline): `router.upsertFence` from call to the generation in
 * force, against `router.reloadFences` of the same collection plus one fence; and `upsertFence` with a state directory
 * (each edit appended to the fence edit journal and fsynced before it resolves).
 *
 *   node dist/bench/fence-edit.bench.js [--sizes 10000,100000] [--runs 15]
 *
 * Prints one JSON line per size; writes bench/out/fence-edit.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { createRouter } from '../src/index.js';
import { DEFAULT_FENCE_LIMITS, parseFence, parseFences } from '../src/fences/parse.js';
import { editFenceStore } from '../src/fences/store-edit.js';
import { buildFenceStore, FenceStore } from '../src/fences/store.js';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';

const { values } = parseArgs({
  options: { sizes: { type: 'string', default: '10000,100000' }, runs: { type: 'string', default: '15' } },
});
const sizes = values.sizes.split(',').map(Number);
const runs = Number(values.runs);
const LOOKUP_ONLY = { grid: false, edgeBands: false };

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const round = (x: number): number => Math.round(x * 100) / 100;

/** A copy of a city feature under a new id. */
function featureAs(f: unknown, id: string): unknown {
  const g = f as { properties: object };
  return { ...g, properties: { ...g.properties, id } };
}

const results: object[] = [];
for (const n of sizes) {
  const city = generateSyntheticCity({ seed: 1, fenceCount: n });
  const limits = { ...DEFAULT_FENCE_LIMITS };
  let store = FenceStore.open(buildFenceStore(parseFences(city, limits), 1));
  // The worker's view of the full build (grid, bands), derived once as a worker does at start.
  FenceStore.open(store.descriptor);
  const edit: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const parsed = parseFence(featureAs(city.features[i], `new-${i}`), limits);
    const made = editFenceStore(store, { upsert: parsed }, store.generation + 1);
    if (made === null || made === 'no-room') throw new Error('edit did not apply');
    FenceStore.open(made.descriptor);
    store = FenceStore.open(made.descriptor, LOOKUP_ONLY);
    edit.push(performance.now() - t0);
  }
  const rebuild: number[] = [];
  const rebuildRuns = n >= 100_000 ? 3 : 5;
  for (let i = 0; i < rebuildRuns; i++) {
    const t0 = performance.now();
    const d = buildFenceStore(parseFences(city, limits), 100 + i);
    FenceStore.open(d);
    FenceStore.open(d, LOOKUP_ONLY);
    rebuild.push(performance.now() - t0);
  }

  // Through a router.
  const router = await createRouter({
    fences: city,
    listenHost: null,
    adminHost: null,
    poolSize: 1,
    stateDir: null,
    downstreams: [{ name: 'none', kind: 'callback', callback: () => undefined }],
    log: () => undefined,
  });
  const routerEdit: number[] = [];
  for (let i = 0; i < runs; i++) {
    const r = await router.upsertFence(featureAs(city.features[i], `live-${i}`));
    routerEdit.push(r.elapsedMs);
  }
  const routerReload: number[] = [];
  const bigger = { ...city, features: [...city.features, featureAs(city.features[0], 'reloaded')] };
  for (let i = 0; i < (n >= 100_000 ? 2 : 3); i++) {
    const t0 = performance.now();
    await router.reloadFences(bigger);
    routerReload.push(performance.now() - t0);
  }
  await router.close();
  // The same edits with a state directory: each is journaled (appended and fsynced) before it resolves.
  const dir = mkdtempSync(join(tmpdir(), 'fence-edit-bench-'));
  const journaled = await createRouter({
    fences: city,
    listenHost: null,
    adminHost: null,
    poolSize: 1,
    stateDir: join(dir, 'state'),
    downstreams: [{ name: 'none', kind: 'callback', callback: () => undefined }],
    log: () => undefined,
  });
  const journaledEdit: number[] = [];
  for (let i = 0; i < runs; i++) {
    const r = await journaled.upsertFence(featureAs(city.features[i], `kept-${i}`));
    if (!r.persisted) throw new Error('edit not journaled');
    journaledEdit.push(r.elapsedMs);
  }
  await journaled.close();
  rmSync(dir, { recursive: true, force: true });
  const r = {
    fences: n,
    editMedianMs: round(median(edit)),
    editMaxMs: round(Math.max(...edit)),
    rebuildMedianMs: round(median(rebuild)),
    rebuildOverEdit: Math.round(median(rebuild) / median(edit)),
    routerUpsertMedianMs: round(median(routerEdit)),
    routerUpsertMaxMs: round(Math.max(...routerEdit)),
    journaledUpsertMedianMs: round(median(journaledEdit)),
    journaledUpsertMaxMs: round(Math.max(...journaledEdit)),
    routerReloadMedianMs: round(median(routerReload)),
    routerReloadOverUpsert: Math.round(median(routerReload) / median(routerEdit)),
    runs,
  };
  results.push(r);
  process.stdout.write(`${JSON.stringify(r)}\n`);
}
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/fence-edit.json', `${JSON.stringify(results, null, 2)}\n`);
