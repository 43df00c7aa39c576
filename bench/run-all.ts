/**
 * Runs every benchmark of the suite, one process each (so one benchmark's JIT state and heap never colour another's),
 * in sequence, and prints where each one wrote its JSON results (bench/out/).
 *
 * Run: npm run bench            (builds first)
 *      node dist/bench/run-all.js ring admission   (only the benchmarks whose names contain one of the words)
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));

/** Each benchmark: its compiled file and the arguments it is run with. */
const BENCHMARKS: ReadonlyArray<{ name: string; file: string; args: string[] }> = [
  { name: 'admission', file: 'admission.bench.js', args: [] },
  { name: 'ring', file: 'ring.bench.js', args: [] },
  { name: 'ring-cross-thread', file: 'ring-cross-thread.bench.js', args: [] },
  { name: 'fences-10k', file: 'fences.bench.js', args: ['--fences', '10000'] },
  { name: 'fences-100k', file: 'fences.bench.js', args: ['--fences', '100000'] },
  { name: 'ingest-decode', file: 'ingest-decode.bench.js', args: [] },
  { name: 'ingest-tcp', file: 'ingest-tcp.bench.js', args: [] },
  { name: 'limiters', file: 'limiters.bench.js', args: [] },
  { name: 'pipeline-load', file: 'pipeline-load.bench.js', args: [] },
  {
    name: 'pipeline-load-webhook',
    file: 'pipeline-load.bench.js',
    args: ['--downstream', 'webhook', '--rates', '25000,50000,100000', '--event-step-ms', '8000', '--radius-m', '6000'],
  },
  { name: 'dispatch-ops', file: 'dispatch-ops.bench.js', args: [] },
  { name: 'checkpoint', file: 'checkpoint.bench.js', args: [] },
  { name: 'fence-edit', file: 'fence-edit.bench.js', args: [] },
  { name: 'replay', file: 'replay.bench.js', args: [] },
  { name: 'burst', file: 'burst.bench.js', args: [] },
];

const filters = process.argv.slice(2);
let failed = 0;
for (const b of BENCHMARKS) {
  if (filters.length > 0 && !filters.some((f) => b.name.includes(f))) continue;
  process.stdout.write(`\n=== ${b.name}\n`);
  const r = spawnSync(process.execPath, ['--expose-gc', join(here, b.file), ...b.args], { stdio: 'inherit' });
  if (r.status !== 0) {
    failed++;
    process.stdout.write(`=== ${b.name} exited with ${String(r.status ?? r.signal)}\n`);
  }
}
process.exitCode = failed === 0 ? 0 : 1;
