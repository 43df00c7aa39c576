/**
 * Fence files that cannot stall the process, through the real binary: a SIGHUP reload of a 10 MB file of large
 * polygons with large holes is read, validated and indexed off the main thread, so `/healthz` answers every request
 * made during it; a file over a limit (positions per ring) is refused naming the feature and the limit, and the
 * previous fences keep serving.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { holeCity } from '../../src/fences/hole-city.js';
import { square } from '../pipeline/support.js';
import { CliProcess } from './support.js';

test('a SIGHUP reload of a 10 MB hole file runs off the main thread: /healthz answers throughout; a ring over the limit is refused by name', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-reload-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const p = new CliProcess(
    [
      '--fences',
      fences,
      '--no-listen',
      '--admin',
      '127.0.0.1:0',
      '--max-vertices-per-ring',
      '50000',
      '--state-dir',
      join(dir, 'state'),
    ],
    120_000,
    dir,
  );
  await p.waitFor('the admin port', (x) => /admin http:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr));
  const admin = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);

  const polled = async (until: RegExp): Promise<{ statuses: number[]; maxMs: number }> => {
    const statuses: number[] = [];
    let maxMs = 0;
    while (!until.test(p.stderr)) {
      const t0 = performance.now();
      statuses.push((await fetch(`http://127.0.0.1:${admin}/healthz`)).status);
      maxMs = Math.max(maxMs, performance.now() - t0);
      await new Promise((r) => setTimeout(r, 20));
    }
    return { statuses, maxMs };
  };

  writeFileSync(fences, JSON.stringify(holeCity({ polygons: 4, vertices: 33_000 })));
  p.child.kill('SIGHUP');
  const during = await polled(/fences reloaded: generation 2, 4 fences|fences reload failed/);
  assert.match(p.stderr, /fences reloaded: generation 2, 4 fences/);
  assert.ok(during.statuses.length >= 3, `polled ${during.statuses.length} times during the reload`);
  assert.deepEqual([...new Set(during.statuses)], [200], 'every /healthz during the reload answered 200');
  console.log(
    `# reload of the hole file: ${during.statuses.length} /healthz requests during it, slowest ${during.maxMs.toFixed(1)} ms`,
  );

  writeFileSync(fences, JSON.stringify(holeCity({ polygons: 1, vertices: 60_000 })));
  p.child.kill('SIGHUP');
  await polled(/fences reload failed/);
  assert.match(
    p.stderr,
    /fences reload failed, the previous fences keep serving: feature 0: polygon ring 0 has 60000 positions, over the limit maxVerticesPerRing 50000/,
  );
  const m = await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
  assert.match(m, /^geofence_fence_generation 2$/m, 'the previous fences keep serving');
  assert.match(m, /^geofence_fence_reloads_failed_total 1$/m);
  p.child.kill('SIGTERM');
  assert.equal((await p.exited).code, 0);
});
