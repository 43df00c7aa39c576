import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The sources, read from the repository (this file runs from dist/test/layout). */
const SRC = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'src');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourcesUnder(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Part of the design a source belongs to: its top folder under src, or "." for the files at src's root. */
function partOf(file: string): string {
  const rel = relative(SRC, file).split(sep);
  return rel.length === 1 ? '.' : rel[0]!;
}

/** Every relative import of every source (static, re-export and dynamic), as resolved file paths. */
function importEdges(): { from: string; to: string }[] {
  const edges: { from: string; to: string }[] = [];
  for (const file of sourcesUnder(SRC)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:from|import\()\s*'(\.{1,2}\/[^']+)'/g)) {
      edges.push({ from: file, to: normalize(join(dirname(file), m[1]!.replace(/\.js$/, '.ts'))) });
    }
    // Worker entry points are loaded by URL: they are imports too.
    for (const m of text.matchAll(/new URL\(\s*'(\.{1,2}\/[^']+)',\s*import\.meta\.url\s*\)/g)) {
      edges.push({ from: file, to: normalize(join(dirname(file), m[1]!.replace(/\.js$/, '.ts'))) });
    }
  }
  return edges;
}

test('the import graph between the parts of src has no cycle', () => {
  const graph = new Map<string, Set<string>>();
  for (const e of importEdges()) {
    const a = partOf(e.from);
    const b = partOf(e.to);
    if (a === b) continue;
    if (!graph.has(a)) graph.set(a, new Set());
    graph.get(a)!.add(b);
  }
  assert.ok(graph.size >= 8, `read ${graph.size} parts with imports`);
  // Depth-first search; a grey node met again closes a cycle.
  const state = new Map<string, 'grey' | 'black'>();
  const cycles: string[] = [];
  const visit = (node: string, path: string[]): void => {
    state.set(node, 'grey');
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'grey')
        cycles.push([...path, node, next].slice([...path, node].indexOf(next)).join(' -> '));
      else if (state.get(next) === undefined) visit(next, [...path, node]);
    }
    state.set(node, 'black');
  };
  for (const node of [...graph.keys()].sort()) if (state.get(node) === undefined) visit(node, []);
  assert.deepEqual(cycles, []);
});

test('no production module imports demo/, config/ imports no thread module, option-schema/ imports nothing', () => {
  const wrong: string[] = [];
  for (const e of importEdges()) {
    const a = partOf(e.from);
    const b = partOf(e.to);
    // The command line starts the demo; the demo's own modules import each other.
    if (b === 'demo' && a !== 'demo' && a !== 'cli')
      wrong.push(`${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
    if (a === 'config' && (b === 'pipeline' || b === 'router' || b === '.' || b === 'cli' || b === 'demo'))
      wrong.push(`${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
    // The vocabulary options are declared in depends on nothing, so any part can declare its own options with it.
    if (a === 'option-schema' && b !== 'option-schema')
      wrong.push(`${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
  }
  assert.deepEqual(wrong, []);
});

test('src/sim imports only the modules it drives, and nothing in src but index.ts imports src/sim', () => {
  const wrong: string[] = [];
  for (const e of importEdges()) {
    const a = partOf(e.from);
    const b = partOf(e.to);
    // The simulator drives the production control modules; the router itself never depends on the simulator.
    if (b === 'sim' && a !== 'sim' && a !== '.') wrong.push(`${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
    if (a === 'sim' && !['sim', 'dispatch', 'ingest', 'shm'].includes(b))
      wrong.push(`${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
  }
  assert.deepEqual(wrong, []);
  assert.ok(
    importEdges().some((e) => partOf(e.from) === 'sim' && e.to.endsWith(join('dispatch', 'limiter.ts'))),
    'src/sim imports the production Limiter',
  );
});

test('every relative import names a source that exists', () => {
  const files = new Set(sourcesUnder(SRC));
  const missing = importEdges()
    .filter((e) => !files.has(e.to))
    .map((e) => `${relative(SRC, e.from)} -> ${relative(SRC, e.to)}`);
  assert.deepEqual(missing, []);
});
