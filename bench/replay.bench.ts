/**
 * Replay of a seeded trajectory file through the binary with default options: from a file (`--input PATH`) and from
 * stdin (`--input -`, piped), into an NDJSON downstream. For each: wall time, pings per second, shed pings per lane,
 * triggers delivered against the triggers the same pings produce through one engine on this thread (missing and
 * extra), the exit code and the summary's last line.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/replay.bench.js [--devices 10000] [--pings-per-device 20] [--fences 10000]
 *       [--runs 1]
 *
 * Writes bench/out/replay.json.
 */
import { spawn } from 'node:child_process';
import { createReadStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Trigger } from '../src/dispatch/trigger.js';
import { compareWithReference, referenceTriggers, writeReplayFixture } from '../test/support/replay-fixture.js';

const { values } = parseArgs({
  options: {
    devices: { type: 'string', default: '10000' },
    'pings-per-device': { type: 'string', default: '20' },
    fences: { type: 'string', default: '10000' },
    runs: { type: 'string', default: '1' },
  },
});

const MAIN = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

/** One run's outcome. */
interface RunResult {
  source: 'file' | 'stdin';
  exitCode: number | null;
  wallMs: number;
  pingsPerSec: number;
  shed: { idle: number; transition: number; compliance: number; total: number };
  delivered: number;
  missing: number;
  extra: number;
  lastLine: string;
}

function valueOf(text: string, name: string): number {
  const m = new RegExp(`(?:^|[ (])${name}=(\\d+)`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

async function run(
  source: 'file' | 'stdin',
  fencesPath: string,
  pingsPath: string,
  pings: number,
  reference: string[],
): Promise<RunResult> {
  const dir = mkdtempSync(join(tmpdir(), 'gr-replay-bench-'));
  const out = join(dir, 'triggers.ndjson');
  const args = [
    MAIN,
    '--fences',
    fencesPath,
    '--input',
    source === 'file' ? pingsPath : '-',
    '--no-listen',
    '--no-admin',
    '--ndjson',
    out,
    '--state-dir',
    join(dir, 'state'),
  ];
  const t0 = performance.now();
  const child = spawn(process.execPath, args, {
    stdio: [source === 'stdin' ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    cwd: dir,
  });
  if (source === 'stdin') createReadStream(pingsPath).pipe(child.stdin!);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const exitCode = await new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const wallMs = performance.now() - t0;
  const delivered = readFileSync(out, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Trigger);
  const cmp = compareWithReference(delivered, reference);
  const shedLine = stdout.split('\n').find((l) => l.trimStart().startsWith('shed')) ?? '';
  const lines = stdout.trim().split('\n');
  rmSync(dir, { recursive: true, force: true });
  if (exitCode !== 0 && exitCode !== 3) process.stderr.write(stderr);
  return {
    source,
    exitCode,
    wallMs: Math.round(wallMs),
    pingsPerSec: Math.round((pings * 1000) / wallMs),
    shed: {
      idle: valueOf(shedLine, 'idle'),
      transition: valueOf(shedLine, 'transition'),
      compliance: valueOf(shedLine, 'compliance'),
      total: valueOf(shedLine, 'total'),
    },
    delivered: delivered.length,
    missing: cmp.missingCount,
    extra: cmp.extraCount,
    lastLine: lines[lines.length - 1] ?? '',
  };
}

const dir = mkdtempSync(join(tmpdir(), 'gr-replay-fixture-'));
const fixture = writeReplayFixture(dir, {
  seed: 11,
  devices: Number(values.devices),
  pingsPerDevice: Number(values['pings-per-device']),
  fences: Number(values.fences),
});
const t0 = performance.now();
const reference = referenceTriggers(fixture.traffic);
process.stdout.write(
  `${fixture.traffic.pings} pings, ${reference.length} reference triggers (computed in ${Math.round(performance.now() - t0)} ms)\n`,
);
const results: RunResult[] = [];
for (let r = 0; r < Number(values.runs); r++) {
  for (const source of ['file', 'stdin'] as const) {
    const res = await run(source, fixture.fencesPath, fixture.pingsPath, fixture.traffic.pings, reference);
    results.push(res);
    process.stdout.write(
      `${source.padEnd(5)} exit=${String(res.exitCode)} ${res.wallMs} ms (${res.pingsPerSec} pings/s incl. start) shed idle=${res.shed.idle} transition=${res.shed.transition} ` +
        `compliance=${res.shed.compliance} total=${res.shed.total} delivered=${res.delivered} missing=${res.missing} extra=${res.extra}\n  ${res.lastLine}\n`,
    );
  }
}
rmSync(dir, { recursive: true, force: true });
const outDir = fileURLToPath(new URL('../../bench/out/', import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, 'replay.json'),
  JSON.stringify({ pings: fixture.traffic.pings, referenceTriggers: reference.length, results }, null, 2),
);
