/**
 * Instructions a node script executes, counted by valgrind's callgrind (repeatable on a noisy machine): runs
 * `node --no-concurrent-recompilation --single-threaded <script> <args>` under `valgrind --tool=callgrind`, so
 * optimisation happens at the same point in every run and collection runs on the measured thread.
 */
import { spawnSync } from 'node:child_process';

/** Total instructions of one run of `script` with `args`; throws with valgrind's output if it fails. */
export function callgrindInstructions(script: string, args: readonly string[]): number {
  const r = spawnSync(
    'valgrind',
    [
      '--tool=callgrind',
      '--callgrind-out-file=/dev/null',
      process.execPath,
      '--no-concurrent-recompilation',
      '--single-threaded',
      script,
      ...args,
    ],
    { encoding: 'utf8' },
  );
  const m = /Collected : (\d+)/.exec(r.stderr);
  if (r.status !== 0 || m === null) throw new Error(`valgrind failed (${String(r.status)}): ${r.stderr.slice(-2000)}`);
  return Number(m[1]);
}
