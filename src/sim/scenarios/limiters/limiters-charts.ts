/**
 * The limiters scenario's plots: every row's limit against the downstream's true capacity, and the gradient's limit,
 * in-flight and RTT-min together (the three signals the router exports per downstream).
 */
import { renderChart, type ChartMark, type ChartSeries } from '../../chart/svg-chart.js';
import type { LimitersResult } from './limiters-result.js';

const CAPACITY_COLOUR = '#555';

/** The downstream's true capacity (its workers) as a dashed step series. */
function capacitySeries(result: LimitersResult): ChartSeries {
  return {
    label: 'true capacity (workers)',
    values: result.capacityWorkers,
    step: true,
    colour: CAPACITY_COLOUR,
    dash: '5 3',
  };
}

function minutes(result: LimitersResult): number[] {
  return result.timesS.map((t) => t / 60);
}

function phaseMarks(result: LimitersResult): ChartMark[] {
  const n = result.phaseWorkers.length;
  const marks: ChartMark[] = [];
  for (let p = 1; p < n; p++) {
    marks.push({
      x: (result.minutes * p) / n,
      label: `${result.phaseWorkers[p - 1]} -> ${result.phaseWorkers[p]} workers`,
    });
  }
  return marks;
}

/** One panel per row: its effective limit (steps) over the downstream's worker count (true capacity). */
export function limitersChartSvg(result: LimitersResult): string {
  return renderChart({
    title: 'Limit vs true capacity, per limiter',
    subtitle:
      `seed ${result.seed}, ${result.minutes} simulated minutes; capacity in concurrent requests = workers ` +
      `(${result.phaseWorkers.join(' -> ')}); limit sampled every ${result.windowMs} ms`,
    x: minutes(result),
    xLabel: 'simulated time, minutes',
    marks: phaseMarks(result),
    panelHeight: 110,
    panels: result.rows.map((row) => ({
      title: `${row.name}: utilisation ${(row.utilisation * 100).toFixed(1)} %, P99 ${row.p99Ms.toFixed(1)} ms, overload episodes ${row.overloadEpisodes}`,
      yLabel: 'requests',
      series: [
        capacitySeries(result),
        { label: 'limit', values: row.series.limit, step: true, colour: '#1f77b4' },
        { label: 'in flight (mean)', values: row.series.inflight, colour: '#ff7f0e', width: 1 },
      ],
    })),
  });
}

/** The named row's limit, in-flight and capacity in one panel, its RTT-min and mean RTT in another. */
export function gradientChartSvg(result: LimitersResult, rowName = 'gradient'): string {
  const row = result.rows.find((r) => r.name === rowName) ?? result.rows[0]!;
  return renderChart({
    title: `${row.name}: limit, in flight and RTT-min together`,
    subtitle: `${row.limit}, safety cap ${row.safetyCap}; seed ${result.seed}, ${result.minutes} simulated minutes`,
    x: minutes(result),
    xLabel: 'simulated time, minutes',
    marks: phaseMarks(result),
    panels: [
      {
        title: 'concurrency',
        yLabel: 'requests',
        series: [
          capacitySeries(result),
          { label: 'limit', values: row.series.limit, step: true, colour: '#1f77b4' },
          { label: 'in flight (mean per window)', values: row.series.inflight, colour: '#ff7f0e', width: 1 },
        ],
      },
      {
        title: 'round-trip time',
        yLabel: 'ms',
        series: [
          { label: 'RTT-min (the limit\u2019s reference)', values: row.series.rttMinMs, step: true, colour: '#2ca02c' },
          { label: 'mean RTT per window', values: row.series.rttMeanMs, colour: '#9467bd', width: 1 },
        ],
      },
    ],
  });
}
