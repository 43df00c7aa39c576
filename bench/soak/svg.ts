/**
 * A plain SVG of a benchmark's time series (the soak's, the burst bench's): one panel per quantity, stacked, sharing
 * the time axis. Drawn by the simulator's chart module (`src/sim/chart/svg-chart.ts`); this keeps the benchmarks'
 * own small interface.
 */
import { renderChart } from '../../src/sim/chart/svg-chart.js';

/** One line of a panel. */
export interface Line {
  label: string;
  colour: string;
  /** y per sample (NaN: no point). */
  values: number[];
}

/** One panel: a title with its unit, and its lines. */
export interface Panel {
  title: string;
  lines: Line[];
  /** Top of the y axis (default: a round number above the largest value). */
  yMax?: number;
}

/** How the time axis is drawn. */
export interface SvgOptions {
  /** Unit of the time axis (default 'min'). */
  timeUnit?: 's' | 'min';
  /** A caption under the time axis (default: the unit). */
  xLabel?: string;
}

/**
 * Renders `panels` over the sample times `tS` (seconds); `marks` draws labelled vertical lines (warm-up end, a
 * burst's start and end).
 */
export function renderSvg(
  title: string,
  tS: readonly number[],
  panels: readonly Panel[],
  marks: readonly { atS: number; label: string }[] = [],
  options: SvgOptions = {},
): string {
  const perUnit = options.timeUnit === 's' ? 1 : 60;
  return renderChart({
    title,
    x: tS.map((t) => t / perUnit),
    xLabel: options.xLabel ?? (perUnit === 1 ? 'seconds' : 'minutes'),
    panels: panels.map((p) => ({
      title: p.title,
      series: p.lines.map((l) => ({ label: l.label, colour: l.colour, values: l.values })),
      ...(p.yMax === undefined ? {} : { yMax: p.yMax }),
    })),
    marks: marks.map((m) => ({ x: m.atS / perUnit, label: m.label })),
  });
}
