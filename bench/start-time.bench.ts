/**
 * Start time of the CLI on large and dense fence files: a dense city (3,019 fences of 60-300 m packed into 2 x 2 km,
 * about 70 fences at any point) and a 100,000-fence city at the default density, each started `--starts` times as a
 * real process (`--fences FILE --no-listen --no-admin`, an NDJSON sink, a fresh state directory). A start is timed
 * from the spawn to the line the CLI prints once the router has started; then SIGTERM, and the exit code must be 0.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/start-time.bench.js [--starts 10]
 *
 * Writes bench/out/start-time.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { generateSyntheticCity, type SyntheticCityOptions } from '../src/fences/synthetic-city.js';

const { values } = parseArgs({ options: { starts: { type: 'string', default: '10' } } });
const STARTS = Number(values.starts);
const CLI = new URL('../src/cli/main.js', import.meta.url).pathname;
/** A start that has not printed its started line by then counts as hung. */
const HUNG_AFTER_MS = 180_000;

interface StartResult {
  ms: number;
  exitCode: number | null;
}

/** Starts the CLI once on `fencesPath`; resolves with the time to started and the exit code after SIGTERM. */
function startOnce(fencesPath: string): Promise<StartResult> {
  const stateDir = mkdtempSync(join(tmpdir(), 'gr-start-'));
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    [
      CLI,
      '--fences',
      fencesPath,
      '--no-listen',
      '--no-admin',
      '--state-dir',
      stateDir,
      '--ndjson',
      join(stateDir, 'out.ndjson'),
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  return new Promise((resolve, reject) => {
    let ms = -1;
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no start within ${HUNG_AFTER_MS} ms; stderr: ${stderr.slice(-2000)}`));
    }, HUNG_AFTER_MS);
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (ms < 0 && stderr.includes('downstreams:')) {
        ms = performance.now() - t0;
        clearTimeout(timer);
        child.kill('SIGTERM');
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      rmSync(stateDir, { recursive: true, force: true });
      if (ms < 0) reject(new Error(`exited (${String(code)}) before starting; stderr: ${stderr.slice(-2000)}`));
      else resolve({ ms, exitCode: code });
    });
  });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const dir = mkdtempSync(join(tmpdir(), 'gr-start-fences-'));
const cities: { name: string; options: SyntheticCityOptions }[] = [
  {
    name: 'dense city: 3,019 fences in 2 x 2 km',
    options: { seed: 7, fenceCount: 3019, fencesPerKm2: 3019 / 4, minRadiusM: 60, maxRadiusM: 300 },
  },
  { name: '100,000 fences', options: { seed: 7, fenceCount: 100_000 } },
];
const rows: Record<string, unknown>[] = [];
for (const city of cities) {
  const path = join(dir, `${city.options.fenceCount}.json`);
  writeFileSync(path, JSON.stringify(generateSyntheticCity(city.options)));
  const bytes = statSync(path).size;
  const times: number[] = [];
  const codes: (number | null)[] = [];
  for (let i = 0; i < STARTS; i++) {
    const r = await startOnce(path);
    times.push(r.ms);
    codes.push(r.exitCode);
  }
  const row = {
    city: city.name,
    fileMB: +(bytes / 1e6).toFixed(1),
    starts: STARTS,
    started: times.length,
    exitCodes: codes,
    medianMs: Math.round(median(times)),
    minMs: Math.round(Math.min(...times)),
    maxMs: Math.round(Math.max(...times)),
  };
  rows.push(row);
  console.log(
    `${row.city} (${row.fileMB} MB): ${row.started}/${row.starts} started; start time median ${row.medianMs} ms, min ${row.minMs}, max ${row.maxMs}; exit codes ${codes.join(' ')}`,
  );
}
rmSync(dir, { recursive: true, force: true });
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(
  new URL('../../bench/out/start-time.json', import.meta.url),
  `${JSON.stringify({ date: new Date().toISOString(), rows }, null, 2)}\n`,
);
