import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repository root: this file runs from dist/test/. */
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Every `*.node` file and `binding.gyp` under `dir`, walking symlinked packages' real files too. */
function nativeArtefacts(dir: string, found: string[]): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) nativeArtefacts(path, found);
    else if (entry.name.endsWith('.node') || entry.name === 'binding.gyp') found.push(path);
  }
  return found;
}

test('node_modules holds no compiled addon (*.node) and no binding.gyp', () => {
  const nodeModules = join(ROOT, 'node_modules');
  const packages = readdirSync(nodeModules);
  assert.ok(packages.includes('msgpackr') && packages.includes('piscina'), 'expected an installed node_modules');
  assert.deepEqual(nativeArtefacts(nodeModules, []), []);
});

test('the optional native accelerators are not installed', () => {
  const packages = new Set(readdirSync(join(ROOT, 'node_modules')));
  assert.equal(packages.has('msgpackr-extract'), false, 'msgpackr-extract is installed');
  const scoped = packages.has('@napi-rs') ? readdirSync(join(ROOT, 'node_modules', '@napi-rs')) : [];
  assert.deepEqual(
    scoped.filter((name) => name.startsWith('nice')),
    [],
  );
});

test('.npmrc keeps optional dependencies out of every install', () => {
  const npmrc = readFileSync(join(ROOT, '.npmrc'), 'utf8');
  assert.match(npmrc, /^omit=optional$/m);
});

test('msgpackr reports no native acceleration and still decodes', async () => {
  const msgpackr = await import('msgpackr');
  assert.equal(msgpackr.isNativeAccelerationEnabled, false);
  const value = { device: 'd-1', lat: 52.52, lon: 13.405, speed: 3.5, heading: 270, accuracy: 4, t: 1_735_689_600_123 };
  assert.deepEqual(msgpackr.unpack(msgpackr.pack(value)), value);
});
