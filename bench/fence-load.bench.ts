/**
 * Fence-file loading on hostile input: a file of large polygons with large holes (the hole check), and a single
 * polygon over the vertex limit. Prints one JSON line per case; writes bench/out/fence-load.json.
 *
 *   node dist/bench/fence-load.bench.js [--polygons 4] [--vertices 33000] [--quadratic]
 *
 * `--quadratic` also times the check as it was (every hole vertex against every outer edge) on the file's first
 * polygon, for the before-and-after.
 */
import { mkdirSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { containsRings, Q_CELLS, Q_X, Q_Y } from '../src/fences/geometry.js';
import { readFenceFile } from '../src/fences/fence-file.js';
import { holeCity } from '../src/fences/hole-city.js';
import { DEFAULT_FENCE_LIMITS } from '../src/fences/parse.js';

const { values } = parseArgs({
  options: {
    polygons: { type: 'string', default: '4' },
    vertices: { type: 'string', default: '33000' },
    quadratic: { type: 'boolean', default: false },
  },
});
const polygons = Number(values.polygons);
const vertices = Number(values.vertices);
const dir = mkdtempSync(join(tmpdir(), 'gr-fence-load-'));
const limits = { ...DEFAULT_FENCE_LIMITS, maxFileBytes: 2 ** 30 };
const results: object[] = [];
const report = (r: object): void => {
  results.push(r);
  process.stdout.write(`${JSON.stringify(r)}\n`);
};

const city = holeCity({ polygons, vertices });
const holes = join(dir, 'holes.geojson');
writeFileSync(holes, JSON.stringify(city));
const runs: number[] = [];
for (let i = 0; i < 5; i++) {
  const t0 = performance.now();
  readFenceFile(holes, limits);
  runs.push(performance.now() - t0);
}
runs.sort((a, b) => a - b);
report({
  case: 'hole file: read + parse + validate',
  bytes: statSync(holes).size,
  polygons,
  verticesPerRing: vertices,
  medianMs: Math.round(runs[2]!),
  minMs: Math.round(runs[0]!),
  maxMs: Math.round(runs[4]!),
});

if (values.quadratic) {
  // The check as it was, on the first polygon: each hole vertex against the whole outer ring.
  const coords = (city.features[0] as { geometry: { coordinates: number[][][] } }).geometry.coordinates;
  const outer = Float64Array.from(coords[0]!.flat());
  const hole = coords[1]!;
  const offsets = Int32Array.of(0, outer.length / 2);
  const q = new Float64Array(Q_CELLS);
  const t0 = performance.now();
  let outside = 0;
  for (const [x, y] of hole) {
    q[Q_X] = x!;
    q[Q_Y] = y!;
    if (!containsRings(outer, offsets, 0, 1, q)) outside++;
  }
  const ms = performance.now() - t0;
  report({
    case: 'quadratic hole check (as before), first polygon only',
    verticesPerRing: vertices,
    outside,
    ms: Math.round(ms),
    wholeFileEstimateMs: Math.round(ms * polygons),
  });
}

// One polygon of 10 million positions: refused by the default limit before anything is allocated for it.
const big = join(dir, 'big.geojson');
const n = 10_000_000;
const parts: string[] = [
  '{"type":"FeatureCollection","features":[{"type":"Feature","properties":{"id":"huge"},"geometry":{"type":"Polygon","coordinates":[[',
];
const step = (2 * Math.PI) / (n - 1);
const pos: string[] = [];
for (let i = 0; i < n - 1; i++)
  pos.push(`[${(13.4 + 0.01 * Math.cos(i * step)).toFixed(7)},${(52.5 + 0.01 * Math.sin(i * step)).toFixed(7)}]`);
pos.push(pos[0]!);
parts.push(pos.join(','), ']]}}]}');
writeFileSync(big, parts.join(''));
const t1 = performance.now();
let message = '';
try {
  readFenceFile(big, limits);
} catch (err) {
  message = (err as Error).message;
}
report({
  case: '10-million-position polygon',
  bytes: statSync(big).size,
  refusedInMs: Math.round(performance.now() - t1),
  message,
});

mkdirSync(join('bench', 'out'), { recursive: true });
writeFileSync(join('bench', 'out', 'fence-load.json'), `${JSON.stringify(results, null, 2)}\n`);
