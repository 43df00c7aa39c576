/**
 * The Grafana dashboard (src/metrics/grafana-dashboard.json) asks only for what the router exports: every metric name
 * in every panel's PromQL (functions, labels, grouping clauses, durations and Grafana variables left out; `_bucket`,
 * `_sum` and `_count` taken as series of a histogram or summary family) is a family of a scrape of a router under
 * load, every panel has a query, and its variables are the `${datasource}` Prometheus data source and a
 * `downstream` variable from label_values over a family that carries that label. A renamed metric fails here.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { scrapeUntil, startLoadedRouter, sumOf } from './loaded-router.js';

/** The dashboard, read from the repository (this file runs from dist/test/metrics). */
const DASHBOARD = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  'src',
  'metrics',
  'grafana-dashboard.json',
);

interface Target {
  expr?: string;
  refId?: string;
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
}
interface Variable {
  name: string;
  type: string;
  query?: unknown;
  definition?: string;
}
interface Dashboard {
  schemaVersion: number;
  panels: Panel[];
  templating: { list: Variable[] };
}

/** PromQL words that are not metric names: keywords, set operators, modifiers. */
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'offset',
  'and',
  'or',
  'unless',
  'inf',
  'nan',
  'atan2',
]);

/**
 * The metric names a PromQL expression selects: string literals, label matchers (`{...}`), range and subquery
 * selectors (`[...]`), grouping and matching clauses (`by (...)`, `on (...)`, ...), Grafana variables and numbers
 * removed; a word followed by `(` is a function or aggregation.
 */
function metricNamesOf(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ');
  const names = new Set<string>();
  // A word starts after no word character: the `m` of `5m` and the `e` of `1e3` are not names.
  for (const m of bare.matchAll(/(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    if (m[2] !== undefined) continue;
    const word = m[1]!;
    if (KEYWORDS.has(word.toLowerCase())) continue;
    names.add(word);
  }
  return [...names];
}

/** `# TYPE` lines of a scrape: family name -> type. */
function familiesOf(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}

/** The family a selected name belongs to, or null: itself, or a histogram's or summary's `_bucket`/`_sum`/`_count`. */
function familyOf(name: string, families: ReadonlyMap<string, string>): string | null {
  if (families.has(name)) return name;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  if (m === null) return null;
  const type = families.get(m[1]!);
  if (type === 'histogram') return m[1]!;
  if (type === 'summary' && m[2] !== 'bucket') return m[1]!;
  return null;
}

test('metricNamesOf finds the selected names and nothing else', () => {
  assert.deepEqual(
    metricNamesOf(
      'histogram_quantile(0.99, sum by (downstream, le) (rate(a_seconds_bucket{downstream=~"$downstream", x="by (y)"}[$__rate_interval])))',
    ),
    ['a_seconds_bucket'],
  );
  assert.deepEqual(
    metricNamesOf('2 * sum without (state) (b{state="open"}) + on (downstream) group_left c_total offset 5m'),
    ['b', 'c_total'],
  );
  assert.deepEqual(metricNamesOf('d > bool 1e3 and e unless ${v:regex}'), ['d', 'e']);
});

test('the Grafana dashboard uses only families a router under load exports; every panel has a query', async () => {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;
  assert.ok(dashboard.schemaVersion >= 36, `schemaVersion ${dashboard.schemaVersion}`);
  const vars = new Map(dashboard.templating.list.map((v) => [v.name, v]));
  assert.equal(vars.get('datasource')?.type, 'datasource');
  assert.equal(vars.get('datasource')?.query, 'prometheus');
  const downstreamVar = vars.get('downstream');
  assert.equal(downstreamVar?.type, 'query');
  const labelValues = /^label_values\((\w+),\s*(\w+)\)$/.exec(downstreamVar.definition ?? '');
  assert.ok(labelValues !== null, `downstream from label_values: ${downstreamVar.definition}`);

  const uses: { panel: string; expr: string; names: string[] }[] = [];
  for (const p of dashboard.panels) {
    assert.ok((p.targets ?? []).length > 0, `panel ${p.id} "${p.title}" has a query`);
    assert.equal(p.datasource?.uid, '${datasource}', `panel ${p.id} "${p.title}" uses the datasource variable`);
    for (const t of p.targets!) {
      assert.ok(typeof t.expr === 'string' && t.expr.length > 0, `panel "${p.title}" target ${t.refId}: an expr`);
      const names = metricNamesOf(t.expr);
      assert.ok(names.length > 0, `panel "${p.title}": no metric in ${t.expr}`);
      uses.push({ panel: p.title, expr: t.expr, names });
    }
  }
  assert.ok(dashboard.panels.length >= 10, `panels: ${dashboard.panels.length}`);

  const loaded = await startLoadedRouter();
  try {
    const { text, samples } = await scrapeUntil(loaded, (s) =>
      sumOf(s, 'geofence_triggers_total') > 0 && sumOf(s, 'geofence_dispatch_held_time_seconds_count') > 0
        ? null
        : 'triggers delivered',
    );
    const families = familiesOf(text);
    const unknown: string[] = [];
    const used = new Set<string>();
    for (const u of uses) {
      for (const name of u.names) {
        const family = familyOf(name, families);
        if (family === null) unknown.push(`${name} (panel "${u.panel}": ${u.expr})`);
        else used.add(family);
      }
    }
    assert.deepEqual(unknown, [], 'every name the dashboard uses is a family the router exports');
    const [, variableMetric, variableLabel] = labelValues;
    assert.ok(
      samples.some((s) => s.name === variableMetric && s.labels[variableLabel!] !== undefined),
      `${variableMetric} has series with the label ${variableLabel}`,
    );
    console.log(`dashboard: ${dashboard.panels.length} panels, ${uses.length} queries, ${used.size} router families`);
  } finally {
    await loaded.stop();
  }
});
