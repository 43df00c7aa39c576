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
import { ContainmentEngine, DeviceState, FenceStore, allocateDeviceState, buildFenceStore, generateSyntheticCity, mulberry32, parseFences, syntheticCityBounds, type SyntheticCityOptions } from '../src/fences/index.js';
import { allocateCounterRegion, allocateRingRegion } from '../src/shm/regions.js';
import { SpscRing } from '../src/shm/ring.js';
import { CNT_BLOCK_F64, Lane, RingKind, TEL_ADMIT_TIME_NS_F64, TEL_DEVICE_SLOT_I32, TEL_EVENT_TIME_MS_F64, TEL_LANE_I32, TEL_LAT_F64, TEL_LON_F64, TELEMETRY_STRIDE_BYTES, TRIGGER_STRIDE_BYTES } from '../src/shm/layout.js';
import { M_PER_DEG } from '../src/fences/geometry.js';
import { spawnSync } from 'node:child_process';
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
    const r = spawnSync(
      'valgrind',
      ['--tool=callgrind', '--callgrind-out-file=/dev/null', process.execPath, '--no-concurrent-recompilation', '--single-threaded', self,
        '--mode', arg('mode', 'query'), '--fences', arg('fences', '10000'), '--blocks', String(blocks), '--warmup', arg('warmup', '20')],
      { encoding: 'utf8' },
    );
    const m = /Collected : (\d+)/.exec(r.stderr);
    if (r.status !== 0 || m === null) throw new Error(`valgrind failed (${String(r.status)}): ${r.stderr.slice(-2000)}`);
    counts.push(Number(m[1]));
    console.log(`${blocks} blocks: ${m[1]} instructions`);
  }
  const perPoint = (counts[1]! - counts[0]!) / ((b2 - b1) * 4096);
  console.log(`${arg('mode', 'query')} ${arg('fences', '10000')} fences: ${perPoint.toFixed(0)} instructions per point`);
  mkdirSync('bench/out', { recursive: true });
  writeFileSync(
    `bench/out/fences-count-${arg('mode', 'query')}-${arg('fences', '10000')}.json`,
    JSON.stringify({ blocks: [b1, b2], warmup: Number(arg('warmup', '20')), instructions: counts, instructionsPerPoint: Math.round(perPoint) }, null, 2),
  );
  process.exit(0);
}

const mode = arg('mode', 'query');
const fenceCount = Number(arg('fences', '10000'));
const blocks = Number(arg('blocks', '4'));
const warmupBlocks = Number(arg('warmup', '60'));
const BATCH = 4096;
const DEVICES = 2048;

const options: SyntheticCityOptions = { seed: 42, fenceCount, circleFraction: 0, dwellMs: 60_000 };
const store = FenceStore.open(buildFenceStore(parseFences(generateSyntheticCity(options)), 1));
const b = syntheticCityBounds(options);

/** The same seeded points as fences.bench.ts (seed 99). */
const rng = mulberry32(99);
const pts = new Float64Array(BATCH * 2);
for (let i = 0; i < BATCH; i++) {
  pts[i * 2] = b.minLat + rng() * (b.maxLat - b.minLat);
  pts[i * 2 + 1] = b.minLon + rng() * (b.maxLon - b.minLon);
}
const out = new Int32Array(fenceCount);

function queryBlock(): number {
  let hits = 0;
  for (let i = 0; i < pts.length; i += 2) {
    const lat = pts[i]!;
    const lon = pts[i + 1]!;
    const n = store.candidatesInto(lat, lon, out);
    for (let k = 0; k < n; k++) if (store.contains(out[k]!, lat, lon)) hits++;
  }
  return hits;
}

/** The engine workload of fences.bench.ts: 2,048 devices random-walking ~10 m per 1 s ping, replayed per block. */
function engineRunner(): () => number {
  const walk = mulberry32(7);
  const tel = SpscRing.wrap(allocateRingRegion({ capacitySlots: BATCH, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }));
  const trg = SpscRing.wrap(allocateRingRegion({ capacitySlots: 1 << 16, strideBytes: TRIGGER_STRIDE_BYTES, kind: RingKind.TRIGGER }));
  const state = DeviceState.open(allocateDeviceState(DEVICES, 16));
  const counters = new Float64Array(allocateCounterRegion(1, CNT_BLOCK_F64));
  const engine = new ContainmentEngine(store, state, counters, 0);
  const lat = new Float64Array(DEVICES);
  const lon = new Float64Array(DEVICES);
  for (let d = 0; d < DEVICES; d++) {
    lat[d] = b.minLat + walk() * (b.maxLat - b.minLat);
    lon[d] = b.minLon + walk() * (b.maxLon - b.minLon);
  }
  const step = 10 / M_PER_DEG;
  for (let k = 0; k < BATCH; k++) {
    const d = k % DEVICES;
    lat[d]! += (walk() - 0.5) * 2 * step;
    lon[d]! += (walk() - 0.5) * 2 * step * 1.6;
    const s = tel.claim();
    tel.f64[s * tel.strideF64 + TEL_LAT_F64] = lat[d]!;
    tel.f64[s * tel.strideF64 + TEL_LON_F64] = lon[d]!;
    tel.f64[s * tel.strideF64 + TEL_EVENT_TIME_MS_F64] = Math.floor(k / DEVICES) * 1000;
    tel.f64[s * tel.strideF64 + TEL_ADMIT_TIME_NS_F64] = 0;
    tel.i32[s * tel.strideI32 + TEL_DEVICE_SLOT_I32] = d;
    tel.i32[s * tel.strideI32 + TEL_LANE_I32] = Lane.TRANSITION;
  }
  tel.publish();
  const shiftMs = (BATCH / DEVICES) * 1000;
  return () => {
    // Times move forward each pass so no ping is stale (positions replay).
    for (let k = 0; k < BATCH; k++) tel.f64[k * tel.strideF64 + TEL_EVENT_TIME_MS_F64]! += shiftMs;
    const n = engine.processBatch(tel, 0, BATCH, trg);
    trg.release(trg.available());
    return n;
  };
}

const run = mode === 'engine' ? engineRunner() : queryBlock;
let sink = 0;
for (let i = 0; i < warmupBlocks; i++) sink += run();
const t0 = process.hrtime.bigint();
for (let i = 0; i < blocks; i++) sink += run();
const ns = Number(process.hrtime.bigint() - t0);
const perSec = Math.round((blocks * BATCH * 1e9) / ns);
console.log(`${mode} ${fenceCount} fences: ${warmupBlocks} warm-up + ${blocks} blocks, ${perSec} points/s, sink ${sink}`);
