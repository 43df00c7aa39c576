/**
 * Containment throughput on one thread: points/s for (a) query + exact test, with the per-thread grid and edge
 * bands (the default) and without them (flatbush walk, every edge read) at several flatbush node sizes, and
 * (b) the full engine, with and without grid and bands (query, exact test, state machine, trigger writes) over telemetry ring batches, against a
 * seeded synthetic city of 10,000 and of 100,000 fences of 32-64 vertices.
 *
 * Also (c) the exact test alone, our Float64Array loop against @thi.ng/geom-isec's pointInPolygon2 on the same
 * (point, single-ring polygon) pairs.
 *
 * Run: npx tsc -p tsconfig.json && node --expose-gc dist/bench/fences.bench.js [--quick] [--fences 10000|100000]
 * (one fence count per process keeps the index's element type monomorphic). Writes bench/out/fences-<n>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Bench } from 'tinybench';
import { FenceStore, buildFenceStore, generateSyntheticCity, parseFences } from '../src/fences/index.js';
import { pointInPolygon2 } from '@thi.ng/geom-isec/point';
import { BATCH, DEVICES, cityOptions, engineRunner, queryBlock, randomPoints } from './fences-workload.js';

const quick = process.argv.includes('--quick');
const fencesArg = process.argv.indexOf('--fences');
const fenceCounts = fencesArg > 0 ? [Number(process.argv[fencesArg + 1])] : [10_000, 100_000];
let sink = 0;

async function main(): Promise<void> {
  const results: Record<string, unknown>[] = [];
  const bench = new Bench({ time: quick ? 300 : 1500, warmupTime: quick ? 100 : 500 });
  for (const fenceCount of fenceCounts) {
    const t0 = performance.now();
    const geojson = generateSyntheticCity(cityOptions(fenceCount));
    const parsed = parseFences(geojson);
    const parseMs = performance.now() - t0;
    const pts = randomPoints(fenceCount, 99);
    const out = new Int32Array(fenceCount);
    const sizes = fenceCount === 10_000 ? [4, 8, 16] : [8];
    for (const nodeSize of sizes) {
      const t1 = performance.now();
      const descriptor = buildFenceStore(parsed, 1, { nodeSize });
      const buildMs = performance.now() - t1;
      const t2 = performance.now();
      const fast = FenceStore.open(descriptor);
      const openMs = performance.now() - t2;
      const store = FenceStore.open(descriptor, { grid: false, edgeBands: false });
      console.log(
        `${fenceCount} fences: parse ${parseMs.toFixed(0)} ms, build (nodeSize ${nodeSize}) ${buildMs.toFixed(0)} ms, ` +
          `open with grid + bands ${openMs.toFixed(0)} ms (grid ${fast.grid === null ? 'declined' : `${fast.grid.entryCount} entries, mean occupancy ${fast.grid.meanOccupancy.toFixed(2)}`})`,
      );
      if (nodeSize === 8) {
        bench.add(`query+exact ${fenceCount} fences grid+bands`, () => {
          sink += queryBlock(fast, pts, out);
        });
      }
      bench.add(`query+exact ${fenceCount} fences flatbush nodeSize=${nodeSize}, all edges`, () => {
        sink += queryBlock(store, pts, out);
      });
      if (nodeSize === 8) {
        // Exact test alone: (point, fence) pairs of single-ring polygons whose box holds the point.
        const pairPoint: number[] = [];
        const pairFence: number[] = [];
        for (let i = 0; i < pts.length; i += 2) {
          const n = store.candidatesInto(pts[i]!, pts[i + 1]!, out);
          for (let k = 0; k < n; k++) {
            const g = geojson.features[out[k]!]!['geometry'] as { type: string; coordinates: number[][][] };
            if (g.type === 'Polygon' && g.coordinates.length === 1) {
              pairPoint.push(i);
              pairFence.push(out[k]!);
            }
          }
        }
        const rings = pairFence.map((f) =>
          (geojson.features[f]!['geometry'] as { coordinates: number[][][] }).coordinates[0]!.slice(0, -1),
        );
        const pointsXY = pairPoint.map((i) => [pts[i + 1]!, pts[i]!]);
        console.log(`exact-only pairs: ${pairPoint.length}`);
        bench.add(`exact only, own loop ${fenceCount} fences (${pairPoint.length} pairs)`, () => {
          let h = 0;
          for (let k = 0; k < pairPoint.length; k++)
            if (store.contains(pairFence[k]!, pts[pairPoint[k]!]!, pts[pairPoint[k]! + 1]!)) h++;
          sink += h;
        });
        bench.add(`exact only, own loop with edge bands ${fenceCount} fences (${pairPoint.length} pairs)`, () => {
          let h = 0;
          for (let k = 0; k < pairPoint.length; k++)
            if (fast.contains(pairFence[k]!, pts[pairPoint[k]!]!, pts[pairPoint[k]! + 1]!)) h++;
          sink += h;
        });
        bench.add(`exact only, geom-isec pointInPolygon2 ${fenceCount} fences (${pairPoint.length} pairs)`, () => {
          let h = 0;
          for (let k = 0; k < rings.length; k++) if (pointInPolygon2(pointsXY[k]!, rings[k]!)) h++;
          sink += h;
        });
      }
      if (nodeSize === 8) {
        const fastRun = engineRunner(fast, fenceCount);
        bench.add(`engine ${fenceCount} fences grid+bands`, () => {
          sink += fastRun();
        });
        const accountedRun = engineRunner(fast, fenceCount, true);
        bench.add(`engine ${fenceCount} fences grid+bands, records accounted`, () => {
          sink += accountedRun();
        });
        const run = engineRunner(store, fenceCount);
        bench.add(`engine ${fenceCount} fences flatbush nodeSize=${nodeSize}, all edges`, () => {
          sink += run();
        });
      }
    }
  }
  await bench.run();
  const table = bench.tasks.map((task) => {
    const r = task.result;
    if (r.state !== 'completed') throw new Error(`${task.name}: ${r.state}`);
    const row = {
      task: task.name,
      medianMsPerBlock: Number(r.latency.p50.toFixed(4)),
      meanMsPerBlock: Number(r.latency.mean.toFixed(4)),
      rmePercent: Number(r.latency.rme.toFixed(2)),
      medianPointsPerSec: task.name.startsWith('exact only') ? null : Math.round((BATCH * 1000) / r.latency.p50),
    };
    results.push(row);
    return row;
  });
  console.table(table);
  mkdirSync('bench/out', { recursive: true });
  writeFileSync(
    `bench/out/fences-${fenceCounts.join('-')}.json`,
    JSON.stringify({ batch: BATCH, devices: DEVICES, quick, results }, null, 2),
  );
  console.log(`sink ${sink}`);
}

await main();
