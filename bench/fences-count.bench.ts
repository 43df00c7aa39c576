/**
 * A fixed, repeatable containment workload for instruction counting (valgrind --tool=callgrind): builds the seeded
 * city, warms the hot loop up, then runs exactly `--blocks` blocks of 4,096 points through either query + exact test
 * (`--mode query`) or the full engine (`--mode engine`). No tinybench (one clock read around the loop), so two runs
 * that differ only in `--blocks` differ only in the measured loop: instructions per point = (Ir(b2) - Ir(b1)) / ((b2 - b1) * 4096).
 *
 * Run: npx tsc -p tsconfig.json && node dist/bench/fences-count.bench.js --callgrind --mode query|engine
 *   [--fences 10000] [--blocks 2,12] [--warmup 20]
 * which runs this file twice under `valgrind --tool=callgrind` (node --no-concurrent-recompilation --single-threaded,
 * so optimisation happens at the same point in both), prints the difference per point and writes
 * bench/out/fences-count-<mode>-<fences>.json. Also usable alone for
 * `node --cpu-prof` / `--prof`:
 *   node --no-concurrent-recompilation dist/bench/fences-count.bench.js --mode query --fences 10000 --blocks 400
 */
import { FenceStore, buildFenceStore, generateSyntheticCity, parseFences } from '../src/fences/index.js';
import { BATCH, cityOptions, engineRunner, queryBlock, randomPoints } from './fences-workload.js';
import { callgrindInstructions } from './support/callgrind.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

if (process.argv.includes('--callgrind')) {
  const [b1, b2] = arg('blocks', '2,12').split(',').map(Number) as [number, number];
  const self = fileURLToPath(import.meta.url);
  const counts: number[] = [];
  for (const blocks of [b1, b2]) {
    const n = callgrindInstructions(self, [
      ...['--mode', arg('mode', 'query'), '--fences', arg('fences', '10000')],
      ...['--blocks', String(blocks), '--warmup', arg('warmup', '20')],
    ]);
    counts.push(n);
    console.log(`${blocks} blocks: ${n} instructions`);
  }
  const perPoint = (counts[1]! - counts[0]!) / ((b2 - b1) * 4096);
  console.log(
    `${arg('mode', 'query')} ${arg('fences', '10000')} fences: ${perPoint.toFixed(0)} instructions per point`,
  );
  mkdirSync('bench/out', { recursive: true });
  writeFileSync(
    `bench/out/fences-count-${arg('mode', 'query')}-${arg('fences', '10000')}.json`,
    JSON.stringify(
      {
        blocks: [b1, b2],
        warmup: Number(arg('warmup', '20')),
        instructions: counts,
        instructionsPerPoint: Math.round(perPoint),
      },
      null,
      2,
    ),
  );
  process.exit(0);
}

const mode = arg('mode', 'query');
const fenceCount = Number(arg('fences', '10000'));
const blocks = Number(arg('blocks', '4'));
const warmupBlocks = Number(arg('warmup', '60'));

const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity(cityOptions(fenceCount))), 1));
/** The same seeded points as fences.bench.ts (seed 99). */
const pts = randomPoints(fenceCount, 99);
const out = new Int32Array(fenceCount);

const run = mode === 'engine' ? engineRunner(store, fenceCount) : (): number => queryBlock(store, pts, out);
let sink = 0;
for (let i = 0; i < warmupBlocks; i++) sink += run();
const t0 = process.hrtime.bigint();
for (let i = 0; i < blocks; i++) sink += run();
const ns = Number(process.hrtime.bigint() - t0);
const perSec = Math.round((blocks * BATCH * 1e9) / ns);
console.log(
  `${mode} ${fenceCount} fences: ${warmupBlocks} warm-up + ${blocks} blocks, ${perSec} points/s, sink ${sink}`,
);
