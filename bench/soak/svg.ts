/**
 * A plain SVG of a benchmark's time series (the soak's, the burst bench's): one panel per quantity, stacked, sharing
 * the time axis.
 */

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
  /** Top of the y axis (default: the largest value; 1 when every value is 0). */
  yMax?: number;
}

/** How the time axis and the marks are drawn. */
export interface SvgOptions {
  /** Unit of the time axis labels (default 'min'). */
  timeUnit?: 's' | 'min';
  /** Label the marks in every panel (default: the first panel only). */
  labelMarksInEveryPanel?: boolean;
  /** A caption under the time axis (none by default). */
  xLabel?: string;
}

const WIDTH = 900;
const PANEL_HEIGHT = 150;
const LEFT = 70;
const RIGHT = 20;
const TOP = 30;
const GAP = 45;

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number): string =>
  Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);

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
  const inSeconds = options.timeUnit === 's';
  const height = TOP + panels.length * (PANEL_HEIGHT + GAP) + (options.xLabel === undefined ? 0 : 14);
  const tMax = Math.max(1, ...tS);
  const plotW = WIDTH - LEFT - RIGHT;
  const x = (t: number): number => LEFT + (t / tMax) * plotW;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${LEFT}" y="18" font-size="13" font-weight="bold">${esc(title)}</text>`,
  ];
  panels.forEach((p, i) => {
    const top = TOP + i * (PANEL_HEIGHT + GAP) + 15;
    let yMax = p.yMax ?? 0;
    if (p.yMax === undefined)
      for (const l of p.lines) for (const v of l.values) if (Number.isFinite(v) && v > yMax) yMax = v;
    if (yMax === 0) yMax = 1;
    const y = (v: number): number => top + PANEL_HEIGHT - (v / yMax) * PANEL_HEIGHT;
    parts.push(`<text x="${LEFT}" y="${top - 5}" font-weight="bold">${esc(p.title)}</text>`);
    parts.push(`<rect x="${LEFT}" y="${top}" width="${plotW}" height="${PANEL_HEIGHT}" fill="none" stroke="#999"/>`);
    for (const frac of [0, 0.5, 1]) {
      parts.push(`<text x="${LEFT - 5}" y="${y(yMax * frac) + 4}" text-anchor="end">${fmt(yMax * frac)}</text>`);
    }
    for (const m of marks) {
      parts.push(
        `<line x1="${x(m.atS)}" y1="${top}" x2="${x(m.atS)}" y2="${top + PANEL_HEIGHT}" stroke="#bbb" stroke-dasharray="4 3"/>`,
      );
      if (i === 0 || options.labelMarksInEveryPanel === true)
        parts.push(`<text x="${x(m.atS) + 3}" y="${top + 12}" fill="#777">${esc(m.label)}</text>`);
    }
    p.lines.forEach((l, k) => {
      let d = '';
      l.values.forEach((v, j) => {
        if (!Number.isFinite(v)) return;
        d += `${d === '' ? 'M' : 'L'}${x(tS[j]!).toFixed(1)},${y(v).toFixed(1)}`;
      });
      if (d !== '') parts.push(`<path d="${d}" fill="none" stroke="${l.colour}" stroke-width="1.3"/>`);
      parts.push(
        `<text x="${LEFT + plotW - 6}" y="${top + 14 + k * 13}" text-anchor="end" fill="${l.colour}">${esc(l.label)}</text>`,
      );
    });
    if (i === panels.length - 1) {
      for (let k = 0; k <= 5; k++) {
        const t = (tMax * k) / 5;
        parts.push(
          `<text x="${x(t)}" y="${top + PANEL_HEIGHT + 14}" text-anchor="middle">${inSeconds ? `${t.toFixed(0)} s` : `${(t / 60).toFixed(1)} min`}</text>`,
        );
      }
      if (options.xLabel !== undefined) {
        parts.push(
          `<text x="${LEFT + plotW / 2}" y="${top + PANEL_HEIGHT + 30}" text-anchor="middle">${esc(options.xLabel)}</text>`,
        );
      }
    }
  });
  parts.push('</svg>');
  return parts.join('\n');
}
