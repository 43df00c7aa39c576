/**
 * A plain SVG of the soak's time series: one panel per quantity, stacked, sharing the time axis. Drawn by the
 * simulator's chart module (`src/sim/chart/svg-chart.ts`); this keeps the soak's own small interface.
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
}

/** Renders `panels` over the sample times `tS` (seconds); `marks` draws labelled vertical lines (warm-up end). */
export function renderSvg(
  title: string,
  tS: readonly number[],
  panels: readonly Panel[],
  marks: readonly { atS: number; label: string }[] = [],
): string {
  return renderChart({
    title,
    x: tS.map((t) => t / 60),
    xLabel: 'minutes',
    panels: panels.map((p) => ({
      title: p.title,
      series: p.lines.map((l) => ({ label: l.label, colour: l.colour, values: l.values })),
    })),
    marks: marks.map((m) => ({ x: m.atS / 60, label: m.label })),
  });
}
