/**
 * Fence-file load time on the seeded synthetic city (default options: star polygons of 32-64 positions, a tenth with
 * a hole, 5 % two-part MultiPolygons, 5 % circles): the whole load (read + JSON.parse + validate, `readFenceFile`),
 * the validation alone (`parseFences` on the already-parsed object), and the ring validity checks alone (each ring
 * against itself, holes against holes, parts against parts: what ring-validity.ts adds to the validation), median,
 * min and max of `--runs` runs after one warm-up, one line of JSON per fence count; writes bench/out/fence-parse.json.
 *
 *   node --expose-gc dist/bench/fence-parse.bench.js [--fences 10000,100000] [--runs 7]
 */
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { readFenceFile } from '../src/fences/fence-file.js';
import { DEFAULT_FENCE_LIMITS, parseFences } from '../src/fences/parse.js';
import type { ParsedFences } from '../src/fences/parse.js';
import { firstOverlap, ringSelfProblem } from '../src/fences/ring-validity.js';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';

const { values } = parseArgs({
  options: {
    fences: { type: 'string', default: '10000,100000' },
    runs: { type: 'string', default: '7' },
  },
});
const fenceCounts = values.fences.split(',').map(Number);
const runs = Number(values.runs);
if (!fenceCounts.every((n) => Number.isInteger(n) && n > 0)) {
  throw new RangeError(`--fences must be a comma-separated list of positive integers, got ${values.fences}`);
}
if (!Number.isInteger(runs) || runs < 1) throw new RangeError(`--runs must be a positive integer, got ${values.runs}`);

const gc = (globalThis as { gc?: () => void }).gc;
const dir = mkdtempSync(join(tmpdir(), 'gr-fence-parse-'));
const limits = { ...DEFAULT_FENCE_LIMITS, maxFileBytes: 2 ** 30 };
const results: object[] = [];
// Keeps every result reachable so the optimizer cannot drop the work.
let sink = 0;

/** Median, min and max of `samplesMs`, rounded to 0.1 ms. */
function summary(samplesMs: number[]): { medianMs: number; minMs: number; maxMs: number } {
  const s = [...samplesMs].sort((a, b) => a - b);
  const round = (v: number): number => Math.round(v * 10) / 10;
  return { medianMs: round(s[s.length >> 1]!), minMs: round(s[0]!), maxMs: round(s[s.length - 1]!) };
}

/** One polygon fence as the ring checks see it: every ring, its parts (rings per part), each part's holes as regions. */
interface CheckInput {
  rings: readonly Float64Array[];
  parts: Float64Array[][];
  holeRegions: Float64Array[][][];
}

/** The fences of `city` (parsed as `parsed`) split into parts and holes, outside the timed loop. */
function checkInputs(city: ReturnType<typeof generateSyntheticCity>, parsed: ParsedFences): CheckInput[] {
  return parsed.fences.map((fence, f) => {
    const geometry = city.features[f]!['geometry'] as { type: string; coordinates: unknown[][] };
    const ringsPerPart =
      geometry.type === 'MultiPolygon' ? geometry.coordinates.map((part) => part.length) : [fence.rings.length];
    const parts: Float64Array[][] = [];
    let first = 0;
    for (const count of ringsPerPart) {
      parts.push(fence.rings.slice(first, first + count));
      first += count;
    }
    const holeRegions = parts.filter((part) => part.length > 2).map((part) => part.slice(1).map((hole) => [hole]));
    return { rings: fence.rings, parts, holeRegions };
  });
}

/** The ring validity checks parseFences runs (ring-validity.ts), alone; returns the problems found. */
function ringChecks(inputs: readonly CheckInput[]): number {
  let problems = 0;
  for (const input of inputs) {
    for (const ring of input.rings) if (ringSelfProblem(ring) !== null) problems++;
    for (const holes of input.holeRegions) if (firstOverlap(holes) !== null) problems++;
    if (input.parts.length > 1 && firstOverlap(input.parts) !== null) problems++;
  }
  return problems;
}

for (const fenceCount of fenceCounts) {
  const city = generateSyntheticCity({ seed: 1, fenceCount });
  const file = join(dir, `city-${fenceCount}.geojson`);
  writeFileSync(file, JSON.stringify(city));
  sink += readFenceFile(file, limits).fences.length + parseFences(city).fences.length;
  const inputs = checkInputs(city, parseFences(city));
  if (ringChecks(inputs) !== 0) throw new Error('the synthetic city has an invalid ring');
  const loadMs: number[] = [];
  const validateMs: number[] = [];
  const checksMs: number[] = [];
  for (let r = 0; r < runs; r++) {
    gc?.();
    const t0 = performance.now();
    sink += readFenceFile(file, limits).fences.length;
    loadMs.push(performance.now() - t0);
    gc?.();
    const t1 = performance.now();
    sink += parseFences(city).fences.length;
    validateMs.push(performance.now() - t1);
    gc?.();
    const t2 = performance.now();
    sink += ringChecks(inputs) + 1;
    checksMs.push(performance.now() - t2);
  }
  const result = {
    fences: fenceCount,
    bytes: statSync(file).size,
    runs,
    load: summary(loadMs),
    validate: summary(validateMs),
    ringChecks: summary(checksMs),
  };
  results.push(result);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
rmSync(dir, { recursive: true, force: true });
if (sink === 0) throw new Error('no fence parsed');
mkdirSync(join('bench', 'out'), { recursive: true });
writeFileSync(join('bench', 'out', 'fence-parse.json'), `${JSON.stringify(results, null, 2)}\n`);
