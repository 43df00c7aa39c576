/**
 * The burst scenario's plot: the offered rate against the drain, the rings' fill and the unbounded queue's growth,
 * and what each bounded policy sheds by lane, over the run.
 */
import { renderChart } from '../../chart/svg-chart.js';
import type { BurstResult, BurstRowResult } from './burst-result.js';

const pct = (share: number): string => `${Number((share * 100).toFixed(2))} %`;

const LANE_COLOURS = { idle: '#7f7f7f', transition: '#1f77b4', compliance: '#d62728' } as const;

function row(result: BurstResult, policy: BurstRowResult['policy']): BurstRowResult {
  return result.rows.find((r) => r.policy === policy)!;
}

/** Offered vs drain, queue fill, unbounded growth, and shed per second by lane for both bounded policies. */
export function burstChartSvg(result: BurstResult): string {
  const x = result.timesS.map((t) => t / 60);
  const naive = row(result, 'naive tail shedding');
  const lanes = row(result, 'lane admission');
  const unbounded = row(result, 'unbounded queue');
  const fill = (r: BurstRowResult): number[] => r.series.depth.map((d) => (100 * d) / result.bufferSlots);
  const mib = result.options.bytesPerEntry / (1024 * 1024);
  const shedPanel = (r: BurstRowResult, title: string) => ({
    title,
    yLabel: 'pings shed / s',
    series: (['idle', 'transition', 'compliance'] as const).map((lane) => ({
      label: lane.toUpperCase(),
      values: r.series.shedPerSec[lane],
      colour: LANE_COLOURS[lane],
    })),
  });
  return renderChart({
    title: 'Telemetry burst: ring fill and shedding by lane',
    subtitle:
      `seed ${result.seed}, ${result.minutes} simulated minutes; ${result.options.shards} rings x ` +
      `${result.options.ringCapacitySlots} slots; drain ${result.drainPerSec}/s; ` +
      `lanes ${pct(result.options.complianceShare)} COMPLIANCE, ${pct(result.options.idleShare)} IDLE`,
    x,
    xLabel: 'simulated time, minutes',
    panelHeight: 120,
    panels: [
      {
        title: 'offered rate and drain capacity',
        yLabel: 'pings / s',
        series: [
          { label: 'offered', values: result.offeredPerSec, colour: '#1f77b4' },
          { label: 'drain capacity', values: x.map(() => result.drainPerSec), colour: '#555', dash: '5 3' },
        ],
      },
      {
        title: 'ring fill (share of every ring slot)',
        yLabel: '%',
        yMax: 100,
        series: [
          { label: 'naive tail shedding', values: fill(naive), colour: '#ff7f0e' },
          { label: 'lane admission', values: fill(lanes), colour: '#2ca02c' },
        ],
      },
      {
        title: `unbounded queue (${result.options.bytesPerEntry} bytes per entry)`,
        yLabel: 'MiB',
        series: [{ label: 'memory held', values: unbounded.series.depth.map((d) => d * mib), colour: '#9467bd' }],
      },
      shedPanel(lanes, 'lane admission: shed per second by lane'),
      shedPanel(naive, 'naive tail shedding: shed per second by lane'),
    ],
  });
}
