import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The built CLI behind `npm run sim` (this file runs from dist/test/sim). */
const CLI = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'sim.js');

function run(args: string[]): { out: string; files: Map<string, Buffer> } {
  const dir = mkdtempSync(join(tmpdir(), 'sim-cli-'));
  try {
    const out = execFileSync(process.execPath, [CLI, ...args, '--out', dir], { encoding: 'utf8' });
    const files = new Map(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f))]));
    return { out, files };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('npm run sim writes byte-identical JSON and SVG for one seed, and different files for another', () => {
  const args = ['--scenario', 'all', '--minutes', '0.3'];
  const a = run([...args, '--seed', '5']);
  const b = run([...args, '--seed', '5']);
  const c = run([...args, '--seed', '6']);
  assert.deepEqual([...a.files.keys()].sort(), [
    'burst.json',
    'burst.svg',
    'gradient.svg',
    'limiters.json',
    'limiters.svg',
  ]);
  for (const [name, bytes] of a.files) assert.ok(bytes.equals(b.files.get(name)!), `${name} differs between runs`);
  assert.ok(!a.files.get('limiters.json')!.equals(c.files.get('limiters.json')!));
  assert.ok(!a.files.get('burst.json')!.equals(c.files.get('burst.json')!));
  for (const name of ['burst.svg', 'gradient.svg', 'limiters.svg']) {
    const svg = a.files.get(name)!.toString('utf8');
    assert.match(svg, /^<svg xmlns/);
    assert.ok(svg.trimEnd().endsWith('</svg>'), name);
  }
  const limiters = JSON.parse(a.files.get('limiters.json')!.toString('utf8')) as { seed: number; rows: unknown[] };
  assert.equal(limiters.seed, 5);
  assert.equal(limiters.rows.length, 10);
  assert.match(a.out, /\| gradient \| /);
  assert.match(a.out, /\| lane admission \| /);
});

test('npm run sim refuses a wrong flag or option with a message naming it', () => {
  const fails = (args: string[]): string => {
    try {
      execFileSync(process.execPath, [CLI, ...args], { encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      return String((e as { stderr: string }).stderr);
    }
    assert.fail(`${args.join(' ')} was accepted`);
  };
  assert.match(fails(['--scenario', 'nope']), /--scenario must be limiters, burst or all/);
  assert.match(fails(['--scenario', 'burst', '--minutes', '0']), /options\.minutes must be a number/);
  assert.match(
    fails(['--scenario', 'burst', '--minutes', '0.1', '--options', '{"shards":0}']),
    /options\.shards must be an integer in \[1, 1024\], got 0/,
  );
});
