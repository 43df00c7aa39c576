/**
 * The package as a consumer gets it: `npm pack`, then `npm install <tarball>` into a scratch project with npm's default
 * settings (so the optional native packages of msgpackr and piscina are installed there), then a router started from
 * it routes a ping to an ENTER (its threads load the decoder as for any input), and the process report lists no
 * compiled add-on loaded (while a process that deliberately loads msgpackr's native entry is seen to, and the router
 * logs an error about it at start); the installed CLI answers
 * --version with the package's version; the tarball holds the compiled library, its types, README, LICENSE and the
 * Grafana dashboard, and no other source, no test, benchmark or source map.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The environment without the npm settings `npm test` passes down (the scratch install gets npm's defaults). */
function defaultNpmEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return env;
}

/** The consumer: a router from the installed package; with ALLOW_NATIVE it loads msgpackr's native entry itself first. */
const CONSUMER = `
if (process.env.ALLOW_NATIVE === '1') await import('msgpackr');
const { createRouter } = await import('geofence-trigger-router');
const lines = [];
const square = [[13.0, 52.0], [13.01, 52.0], [13.01, 52.01], [13.0, 52.01], [13.0, 52.0]];
const got = [];
const router = await createRouter({
  fences: { type: 'FeatureCollection', features: [
    { type: 'Feature', properties: { id: 'sq' }, geometry: { type: 'Polygon', coordinates: [square] } } ] },
  downstreams: [{ name: 'app', kind: 'callback', callback: (ts) => void got.push(...ts) }],
  log: (line, level) => void lines.push(level + ': ' + line),
});
router.push({ id: 'd1', lat: 52.005, lon: 13.005, ts: Date.now() });
for (let i = 0; i < 200 && got.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
await router.close();
const addons = (process.report.getReport().sharedObjects ?? []).filter((p) => p.endsWith('.node'));
console.log(JSON.stringify({ triggers: got.map((t) => t.type + ' ' + t.fenceId), addons, lines }));
`;

/** The one file under src/ the package ships: the Grafana dashboard (JSON, imported into Grafana as it is). */
const GRAFANA_DASHBOARD = 'src/metrics/grafana-dashboard.json';

test('installed from its tarball with default npm settings: a router runs, and no compiled add-on is loaded', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-pack-'));
  const env = defaultNpmEnv();
  const packed = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, env, encoding: 'utf8' }),
  ) as { filename: string; files: { path: string }[] }[];
  const files = packed[0]!.files.map((f) => f.path);
  assert.ok(files.includes('LICENSE') && files.includes('README.md') && files.includes('package.json'));
  assert.ok(files.includes('dist/src/index.js') && files.includes('dist/src/index.d.ts'));
  assert.ok(files.includes('dist/src/cli/main.js'));
  assert.ok(files.includes(GRAFANA_DASHBOARD), 'the Grafana dashboard');
  assert.deepEqual(
    files.filter((f) => f !== GRAFANA_DASHBOARD && /^(src|test|bench)\/|^dist\/(test|bench)\/|\.map$/.test(f)),
    [],
    'no sources, tests, benchmarks or source maps',
  );

  const app = join(dir, 'app');
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', join(dir, packed[0]!.filename)], {
    cwd: app,
    env,
    stdio: 'pipe',
  });
  // The point of the test: npm's defaults did install the optional native packages next to the router.
  assert.ok(existsSync(join(app, 'node_modules', 'msgpackr-extract')), 'msgpackr-extract installed');
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  writeFileSync(join(app, 'consumer.mjs'), CONSUMER);
  const out = execFileSync(process.execPath, ['consumer.mjs'], { cwd: app, env, encoding: 'utf8' });
  const result = JSON.parse(out.trim().split('\n').at(-1)!) as {
    triggers: string[];
    addons: string[];
    lines: string[];
  };
  assert.deepEqual(result.triggers, ['ENTER sq']);
  assert.deepEqual(result.addons, [], 'no .node file loaded');
  assert.ok(!result.lines.some((l) => /compiled add-on/.test(l)), result.lines.join('\n'));

  // With the native extension deliberately allowed (the process loads msgpackr's native entry), the same check sees
  // the add-on, and the router says so at start.
  const allowed = execFileSync(process.execPath, ['consumer.mjs'], {
    cwd: app,
    env: { ...env, ALLOW_NATIVE: '1' },
    encoding: 'utf8',
  });
  const native = JSON.parse(allowed.trim().split('\n').at(-1)!) as { addons: string[]; lines: string[] };
  assert.ok(
    native.addons.some((a) => a.includes('msgpackr-extract')),
    `the add-on is seen when allowed: ${native.addons.join(', ')}`,
  );
  assert.ok(
    native.lines.some((l) => /error: a compiled add-on of a dependency is loaded.*msgpackr-extract/.test(l)),
    native.lines.join('\n'),
  );
  const version = execFileSync(join(app, 'node_modules', '.bin', 'geofence-router'), ['--version'], {
    cwd: app,
    env,
    encoding: 'utf8',
  });
  assert.equal(version.trim(), `geofence-router ${pkg.version}`);
});
