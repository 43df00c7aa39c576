/**
 * The scenarios' results as Markdown tables (what `npm run sim` prints and bench/RESULTS.md quotes).
 */
import type { BurstResult, LaneFigures } from '../scenarios/burst/burst-result.js';
import type { LimitersResult } from '../scenarios/limiters/limiters-result.js';

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

/** 1234567 -> "1,234,567". */
function count(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

function pct(share: number, digits = 1): string {
  return `${(share * 100).toFixed(digits)} %`;
}

function msText(v: number | null): string {
  if (v === null) return '-';
  if (v >= 10_000) return `${(v / 1000).toFixed(1)} s`;
  if (v >= 1000) return `${(v / 1000).toFixed(2)} s`;
  if (v >= 100) return `${v.toFixed(0)} ms`;
  return `${v.toFixed(1)} ms`;
}

function growth(mibPerSec: number): string {
  if (Math.abs(mibPerSec) < 0.005) return 'flat';
  return `${mibPerSec > 0 ? '+' : ''}${mibPerSec.toFixed(2)} MiB/s`;
}

function lanes<T>(p: LaneFigures<T>, f: (v: T) => string): string {
  return `${f(p.idle)} / ${f(p.transition)} / ${f(p.compliance)}`;
}

/** The limiters scenario's table: one row per limiter. */
export function limitersTable(result: LimitersResult): string {
  return table(
    [
      'limiter',
      'utilisation of true capacity',
      'P50 / P99 latency',
      'overload episodes (overloaded s)',
      'triggers deferred (beyond capacity)',
      'mean limit per phase',
      '503s / breaker opens',
    ],
    result.rows.map((r) => [
      r.name,
      pct(r.utilisation),
      `${msText(r.p50Ms)} / ${msText(r.p99Ms)}`,
      `${r.overloadEpisodes} (${count(r.overloadSeconds)})`,
      `${count(r.deferred)} (${count(r.deferredBeyondCapacity)})`,
      r.meanLimitPerPhase.map((l) => l.toFixed(1)).join(' / '),
      `${count(r.refusals)} / ${r.breakerOpens}`,
    ]),
  );
}

/** The burst scenario's table: one row per policy, lanes as IDLE / TRANSITION / COMPLIANCE. */
export function burstTable(result: BurstResult): string {
  return table(
    [
      'policy',
      'held P99 (IDLE / TRANSITION / COMPLIANCE)',
      'shed (IDLE / TRANSITION / COMPLIANCE)',
      'shed, all lanes (x the minimum)',
      'COMPLIANCE lost',
      'peak memory (growth over the plateau)',
    ],
    result.rows.map((r) => [
      r.policy,
      lanes(r.heldP99Ms, msText),
      lanes(r.shedShare, (s) => pct(s, 2)),
      `${pct(r.shedShareTotal, 2)} (${r.shedOverMinimum === null ? '-' : `${r.shedOverMinimum.toFixed(3)}x`})`,
      count(r.complianceLost),
      `${r.peakMemoryMiB.toFixed(1)} MiB (${growth(r.memoryGrowthMiBPerSec)})`,
    ]),
  );
}
