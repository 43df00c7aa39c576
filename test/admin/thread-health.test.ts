/**
 * A pipeline thread stopped on purpose turns /healthz red: the drill blocks the dispatcher thread's event loop for 9 s
 * from 1 s after its start; its heartbeat (the runtime report, every second) goes stale after 5 s, so /healthz answers
 * 503 naming the thread within 5-7 s of the block, /readyz with it, and both turn 200 again once the thread runs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';

const BLOCK_AFTER_MS = 1000;
const BLOCK_FOR_MS = 9000;

test('a blocked dispatcher thread turns /healthz red within 7 s, and green again when it runs', async () => {
  process.env['GEOFENCE_DRILL_BLOCK'] = `dispatcher:${BLOCK_AFTER_MS}:${BLOCK_FOR_MS}`;
  let router;
  try {
    router = await createRouter({ adminPort: 0, stateDir: null, log: () => undefined });
  } finally {
    delete process.env['GEOFENCE_DRILL_BLOCK'];
  }
  const startedMs = performance.now();
  const base = `http://127.0.0.1:${router.adminPort!}`;
  try {
    const seen: { atMs: number; status: number; body: string }[] = [];
    while (performance.now() - startedMs < BLOCK_AFTER_MS + BLOCK_FOR_MS + 3000) {
      const r = await fetch(`${base}/healthz`);
      seen.push({ atMs: performance.now() - startedMs, status: r.status, body: (await r.text()).trim() });
      if (r.status === 503) assert.equal((await fetch(`${base}/readyz`)).status, 503, 'not ready while unhealthy');
      await new Promise((res) => setTimeout(res, 200));
    }
    const red = seen.filter((s) => s.status === 503);
    assert.ok(red.length > 0, 'went red');
    const firstRed = red[0]!;
    // The dispatcher's start came before the router's: its block began at most BLOCK_AFTER_MS after startedMs.
    assert.ok(firstRed.atMs <= BLOCK_AFTER_MS + 7000, `red ${firstRed.atMs.toFixed(0)} ms after the start`);
    assert.match(
      firstRed.body,
      /^unhealthy: the dispatcher thread has not reported for \d+\.\d s \(its event loop is blocked\)$/,
    );
    assert.equal(seen[0]!.status, 200, 'healthy before the block');
    assert.equal(seen.at(-1)!.status, 200, 'healthy again after it');
    console.log(
      `/healthz red from ${firstRed.atMs.toFixed(0)} ms to ${red.at(-1)!.atMs.toFixed(0)} ms after the start (block from about ${BLOCK_AFTER_MS} ms for ${BLOCK_FOR_MS} ms)`,
    );
  } finally {
    await router.close();
  }
});
