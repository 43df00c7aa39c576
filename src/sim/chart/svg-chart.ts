/**
 * A small SVG line-chart writer in plain TypeScript (no canvas, no dependency): stacked panels sharing one x axis,
 * each with its own y axis (ticks at 1-2-5 steps, grid lines, a unit label), any number of series (lines, or steps
 * for values that hold until they change, such as a concurrency limit), a legend per panel, and optional labelled
 * vertical marks. A series longer than `maxPoints` is averaged over equal buckets so a file stays small. Returns the
 * SVG text; deterministic (the same input gives the same bytes).
 */

/** One series of a panel: a value per x (null or NaN: no point, the line breaks). */
export interface ChartSeries {
  label: string;
  values: readonly (number | null)[];
  /** CSS colour; default: the next colour of the palette. */
  colour?: string;
  /** Draw as steps (the value holds until the next point). */
  step?: boolean;
  /** SVG dash pattern, e.g. '5 3'. */
  dash?: string;
  /** Line width, px (default 1.4). */
  width?: number;
}

/** One panel: a title, a y-axis label and its series. */
export interface ChartPanel {
  title: string;
  /** Unit or meaning of the y axis. */
  yLabel?: string;
  series: ChartSeries[];
  /** Lower end of the y axis (default 0, or the smallest value when it is negative). */
  yMin?: number;
  /** Upper end of the y axis (default: a round number above the largest value). */
  yMax?: number;
}

/** A labelled vertical line across every panel. */
export interface ChartMark {
  x: number;
  label: string;
}

/** A chart: panels stacked over one x axis. */
export interface ChartSpec {
  title: string;
  /** Optional second line under the title. */
  subtitle?: string;
  /** The x value of every point (shared by all series). */
  x: readonly number[];
  /** Label of the x axis. */
  xLabel: string;
  panels: ChartPanel[];
  marks?: ChartMark[];
  /** Width of the SVG, px (default 960). */
  width?: number;
  /** Height of each panel's plot area, px (default 150). */
  panelHeight?: number;
  /** Most points drawn per series (default 1200). */
  maxPoints?: number;
}

/** Distinguishable colours, in order. */
const PALETTE = [
  '#1f77b4',
  '#d62728',
  '#2ca02c',
  '#ff7f0e',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#17becf',
  '#7f7f7f',
  '#bcbd22',
] as const;

const LEFT = 72;
const RIGHT = 24;
const TITLE_HEIGHT = 44;
const PANEL_GAP = 42;
const BOTTOM = 46;

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A short label for a tick value: no more digits than the step needs, k / M for thousands and millions. */
function tickText(v: number, step: number): string {
  const a = Math.abs(v);
  if (a >= 1e6 && step >= 1e5) return `${trim(v / 1e6, step / 1e6)}M`;
  if (a >= 1e3 && step >= 100) return `${trim(v / 1e3, step / 1e3)}k`;
  return trim(v, step);
}

function trim(v: number, step: number): string {
  const decimals = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9));
  return v.toFixed(decimals);
}

/** Tick step of about `target` ticks over `span`: 1, 2 or 5 times a power of ten. */
function niceStep(span: number, target: number): number {
  if (!(span > 0)) return 1;
  const raw = span / target;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/** The series averaged over equal buckets of x indices when longer than `maxPoints` (nulls are left out). */
function thin(
  x: readonly number[],
  values: readonly (number | null)[],
  maxPoints: number,
): { x: number[]; y: (number | null)[] } {
  const n = Math.min(x.length, values.length);
  if (n <= maxPoints) return { x: x.slice(0, n), y: values.slice(0, n) };
  const bucket = Math.ceil(n / maxPoints);
  const xs: number[] = [];
  const ys: (number | null)[] = [];
  for (let i = 0; i < n; i += bucket) {
    let sum = 0;
    let count = 0;
    const end = Math.min(n, i + bucket);
    for (let j = i; j < end; j++) {
      const v = values[j];
      if (v !== null && v !== undefined && Number.isFinite(v)) {
        sum += v;
        count++;
      }
    }
    xs.push(x[end - 1]!);
    ys.push(count === 0 ? null : sum / count);
  }
  return { x: xs, y: ys };
}

/** Renders `spec` as an SVG document. */
export function renderChart(spec: ChartSpec): string {
  const width = spec.width ?? 960;
  const panelHeight = spec.panelHeight ?? 150;
  const maxPoints = spec.maxPoints ?? 1200;
  const titleHeight = spec.subtitle === undefined ? TITLE_HEIGHT - 14 : TITLE_HEIGHT;
  const height = titleHeight + spec.panels.length * (panelHeight + PANEL_GAP) - PANEL_GAP + BOTTOM + 10;
  const plotW = width - LEFT - RIGHT;
  const xs = spec.x;
  const xMin = xs.length === 0 ? 0 : xs[0]! < 0 ? xs[0]! : 0;
  const xMax = xs.length === 0 ? 1 : Math.max(xMin + 1e-9, xs[xs.length - 1]!);
  const px = (v: number): number => LEFT + ((v - xMin) / (xMax - xMin)) * plotW;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${LEFT}" y="20" font-size="14" font-weight="bold">${esc(spec.title)}</text>`,
  ];
  if (spec.subtitle !== undefined) out.push(`<text x="${LEFT}" y="36" fill="#444">${esc(spec.subtitle)}</text>`);
  const xStep = niceStep(xMax - xMin, 10);
  spec.panels.forEach((panel, pi) => {
    const top = titleHeight + pi * (panelHeight + PANEL_GAP) + 16;
    const thinned = panel.series.map((s) => thin(xs, s.values, maxPoints));
    let lo = Infinity;
    let hi = -Infinity;
    for (const t of thinned)
      for (const v of t.y) {
        if (v === null || !Number.isFinite(v)) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    if (lo === Infinity) {
      lo = 0;
      hi = 1;
    }
    const yMin = panel.yMin ?? (lo < 0 ? lo : 0);
    let yMax = panel.yMax ?? hi;
    if (!(yMax > yMin)) yMax = yMin + 1;
    const yStep = niceStep(yMax - yMin, 5);
    if (panel.yMax === undefined) yMax = Math.ceil(yMax / yStep - 1e-9) * yStep;
    const py = (v: number): number => top + panelHeight - ((v - yMin) / (yMax - yMin)) * panelHeight;
    out.push(`<text x="${LEFT}" y="${top - 6}" font-weight="bold">${esc(panel.title)}</text>`);
    // Grid and y ticks.
    for (let v = Math.ceil(yMin / yStep - 1e-9) * yStep; v <= yMax + yStep * 1e-9; v += yStep) {
      const y = py(v).toFixed(1);
      out.push(`<line x1="${LEFT}" y1="${y}" x2="${LEFT + plotW}" y2="${y}" stroke="#e4e4e4"/>`);
      out.push(`<text x="${LEFT - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end">${tickText(v, yStep)}</text>`);
    }
    for (let v = Math.ceil(xMin / xStep) * xStep; v <= xMax + xStep * 1e-9; v += xStep) {
      const x = px(v).toFixed(1);
      out.push(`<line x1="${x}" y1="${top}" x2="${x}" y2="${top + panelHeight}" stroke="#f0f0f0"/>`);
      const last = pi === spec.panels.length - 1;
      if (last)
        out.push(`<text x="${x}" y="${top + panelHeight + 15}" text-anchor="middle">${tickText(v, xStep)}</text>`);
    }
    if (panel.yLabel !== undefined) {
      const cy = top + panelHeight / 2;
      out.push(
        `<text x="16" y="${cy}" text-anchor="middle" transform="rotate(-90 16 ${cy})" fill="#444">${esc(panel.yLabel)}</text>`,
      );
    }
    for (const m of spec.marks ?? []) {
      const x = px(m.x).toFixed(1);
      out.push(
        `<line x1="${x}" y1="${top}" x2="${x}" y2="${top + panelHeight}" stroke="#888" stroke-dasharray="4 3"/>`,
      );
      // Below the legend band, beside the line.
      if (pi === 0)
        out.push(`<text x="${(px(m.x) + 4).toFixed(1)}" y="${top + 32}" fill="#666">${esc(m.label)}</text>`);
    }
    // Series, clipped to the plot area.
    out.push(
      `<clipPath id="clip${pi}"><rect x="${LEFT}" y="${top}" width="${plotW}" height="${panelHeight}"/></clipPath>`,
    );
    panel.series.forEach((s, si) => {
      const colour = s.colour ?? PALETTE[si % PALETTE.length]!;
      const t = thinned[si]!;
      let d = '';
      let pen = false;
      for (let i = 0; i < t.x.length; i++) {
        const v = t.y[i];
        if (v === null || v === undefined || !Number.isFinite(v)) {
          pen = false;
          continue;
        }
        const x = px(t.x[i]!).toFixed(1);
        const y = py(v).toFixed(1);
        if (!pen) d += `M${x},${y}`;
        else if (s.step === true) d += `H${x}V${y}`;
        else d += `L${x},${y}`;
        pen = true;
      }
      if (d === '') return;
      const dash = s.dash === undefined ? '' : ` stroke-dasharray="${s.dash}"`;
      out.push(
        `<path d="${d}" fill="none" stroke="${colour}" stroke-width="${s.width ?? 1.4}"${dash} clip-path="url(#clip${pi})"/>`,
      );
    });
    out.push(`<rect x="${LEFT}" y="${top}" width="${plotW}" height="${panelHeight}" fill="none" stroke="#999"/>`);
    // Legend: one row of swatches and labels across the top of the plot area, on a white band.
    let lx = LEFT + 8;
    const ly = top + 14;
    const items = panel.series.map((s, si) => ({ s, colour: s.colour ?? PALETTE[si % PALETTE.length]! }));
    const legendW = items.reduce((w, it) => w + 26 + it.s.label.length * 6.2 + 12, 0);
    out.push(
      `<rect x="${LEFT + 2}" y="${top + 2}" width="${Math.min(plotW - 4, legendW)}" height="17" fill="white" fill-opacity="0.85"/>`,
    );
    for (const it of items) {
      const dash = it.s.dash === undefined ? '' : ` stroke-dasharray="${it.s.dash}"`;
      out.push(
        `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 20}" y2="${ly - 4}" stroke="${it.colour}" stroke-width="2"${dash}/>`,
      );
      out.push(`<text x="${lx + 26}" y="${ly}">${esc(it.s.label)}</text>`);
      lx += 26 + it.s.label.length * 6.2 + 12;
    }
  });
  const axisY = titleHeight + spec.panels.length * (panelHeight + PANEL_GAP) - PANEL_GAP + 16 + 34;
  out.push(`<text x="${LEFT + plotW / 2}" y="${axisY}" text-anchor="middle" fill="#444">${esc(spec.xLabel)}</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}
