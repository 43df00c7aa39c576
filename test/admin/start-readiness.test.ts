/**
 * The admin server is up before the pipeline: while a router starts on a large fences file (read, checked and indexed
 * on the loader thread), `/healthz` answers 200 and `/readyz` 503 naming the start phase; once started `/readyz` is
 * 200; while draining it is 503 again; a start that fails closes the admin port.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import { generateSyntheticCity } from '../../src/fences/synthetic-city.js';
import { freePort } from '../support/nats-server.js';

/** One GET; status and body, or null when nothing listens. */
async function get(url: string): Promise<{ status: number; body: string } | null> {
  try {
    const r = await fetch(url);
    return { status: r.status, body: await r.text() };
  } catch {
    return null;
  }
}

test('while a router starts, /healthz is 200 and /readyz 503 with the phase; then 200; 503 while draining', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-ready-'));
  const fencesFile = join(dir, 'city.geojson');
  writeFileSync(fencesFile, JSON.stringify(generateSyntheticCity({ seed: 3, fenceCount: 40_000 })));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const starting = createRouter({ fencesFile, adminPort: port, stateDir: null, log: () => undefined });
  let started = false;
  void starting.then(() => (started = true));
  const ready: string[] = [];
  let healthy = 0;
  let answeredWhileStarting = 0;
  while (!started) {
    const [r, h] = await Promise.all([get(`${base}/readyz`), get(`${base}/healthz`)]);
    if (r !== null && !started) {
      answeredWhileStarting++;
      ready.push(`${r.status} ${r.body.trim()}`);
      if (h?.status === 200) healthy++;
    }
    await new Promise((res) => setTimeout(res, 20));
  }
  const router = await starting;
  try {
    assert.ok(answeredWhileStarting >= 5, `answers while starting: ${answeredWhileStarting}`);
    assert.equal(healthy, answeredWhileStarting, '/healthz 200 throughout the start');
    assert.ok(
      ready.some(
        (l) => l === '503 not ready: starting: reading, checking and indexing the fences file (loader thread)',
      ),
      ready.join('\n'),
    );
    assert.ok(
      ready.every((l) => /^503 not ready: starting: /.test(l)),
      ready.filter((l) => !l.startsWith('503')).join('\n'),
    );
    assert.equal((await get(`${base}/readyz`))?.status, 200);
    const metrics = await get(`${base}/metrics`);
    assert.match(metrics!.body, /geofence_admin_requests_refused_total/);
    const draining = router.drain();
    const during = await get(`${base}/readyz`);
    assert.deepEqual(during, { status: 503, body: 'not ready: draining\n' });
    await draining;
  } finally {
    await router.close();
  }
  assert.equal(await get(`${base}/healthz`), null, 'the admin server is closed with the router');
});

test('a start that fails closes the admin port', async () => {
  const port = await freePort();
  await assert.rejects(
    createRouter({ fences: { type: 'FeatureCollection', features: [{}] }, adminPort: port, log: () => undefined }),
    /feature 0/,
  );
  const refused = await new Promise<boolean>((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => resolve(false));
    s.once('error', () => resolve(true));
  });
  assert.equal(refused, true);
});
