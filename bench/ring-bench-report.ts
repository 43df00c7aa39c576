/**
 * Reporting shared by the ring and admission benchmarks: turns tinybench tasks that each run `opsPerCall`
 * operations into ops/s figures (median and p75 of per-call latency), prints a table, writes bench/out/<name>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import type { Bench } from 'tinybench';

/** One row of a ring/admission benchmark report. */
export interface OpsRow {
  task: string;
  opsPerCall: number;
  samples: number;
  medianMsPerCall: number;
  medianOpsPerSecond: number;
  p75OpsPerSecond: number;
}

/** Builds rows from a finished bench whose task `name` runs `opsPerCall[name]` operations per call. */
export function opsRows(bench: Bench, opsPerCall: Readonly<Record<string, number>>): OpsRow[] {
  const rows: OpsRow[] = [];
  for (const task of bench.tasks) {
    const result = task.result;
    if (result.state !== 'completed') throw new Error(`bench task ${task.name} ended ${result.state}`);
    const ops = opsPerCall[task.name] ?? 1;
    rows.push({
      task: task.name,
      opsPerCall: ops,
      samples: result.latency.samplesCount,
      medianMsPerCall: result.latency.p50,
      medianOpsPerSecond: ops / (result.latency.p50 / 1000),
      p75OpsPerSecond: ops / (result.latency.p75 / 1000),
    });
  }
  return rows;
}

/** Prints the rows (M ops/s) and writes them, with the machine, to bench/out/<fileStem>.json. */
export function reportOps(fileStem: string, rows: OpsRow[], extra: Record<string, unknown> = {}): void {
  console.table(
    rows.map((r) => ({
      task: r.task,
      'median M ops/s': (r.medianOpsPerSecond / 1e6).toFixed(1),
      'p75 M ops/s': (r.p75OpsPerSecond / 1e6).toFixed(1),
      'median ms/call': r.medianMsPerCall.toFixed(3),
      samples: r.samples,
    })),
  );
  const outDir = new URL('../../bench/out/', import.meta.url);
  mkdirSync(outDir, { recursive: true });
  const machine = { cpus: os.cpus().length, model: os.cpus()[0]?.model ?? 'unknown', node: process.version };
  writeFileSync(
    new URL(`${fileStem}.json`, outDir),
    JSON.stringify({ date: new Date().toISOString(), machine, ...extra, rows }, null, 2),
  );
}
