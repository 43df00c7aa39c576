/**
 * A pipeline thread stopped on purpose turns /healthz red: the drill blocks the dispatcher thread's event loop for 9 s
 * from 1 s after its start; its heartbeat (the runtime report, every second) goes stale after 5 s, so /healthz answers
 * 503 naming the thread within 5-7 s of the block, /readyz with it, and both turn 200 again once the thread runs.
 * A thread that exits (the exit drill) turns /healthz red at once, is logged as an error, and the router cannot drain:
 * close() rejects naming it, and the binary exits with its failure code for a supervisor to restart it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import { EXIT_FAILURE } from '../../src/router/status.js';
import { CliProcess, hasLogLine } from '../cli/support.js';

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
      // Not ready while unhealthy: a ready answer right after a red one only once the thread has reported again.
      if (r.status === 503 && (await fetch(`${base}/readyz`)).status !== 503)
        assert.equal((await fetch(`${base}/healthz`)).status, 200, 'ready again only once healthy again');
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

test('a dispatcher thread that exits turns /healthz red at its next answer, says so in the log, and close() stops the router with an error', async () => {
  // Well after the start returns on a busy host (the dispatcher thread starts before the ingest thread and its warm-up).
  const EXIT_AFTER_MS = 4000;
  process.env['GEOFENCE_DRILL_EXIT'] = `dispatcher:${EXIT_AFTER_MS}`;
  const lines: { line: string; level: string }[] = [];
  let router;
  try {
    router = await createRouter({
      adminPort: 0,
      stateDir: null,
      log: (line, level) => void lines.push({ line, level }),
    });
  } finally {
    delete process.env['GEOFENCE_DRILL_EXIT'];
  }
  const startedMs = performance.now();
  const base = `http://127.0.0.1:${router.adminPort!}`;
  try {
    assert.equal((await fetch(`${base}/healthz`)).status, 200, 'healthy before the exit');
    let red: { atMs: number; body: string } | null = null;
    while (red === null && performance.now() - startedMs < EXIT_AFTER_MS + 5000) {
      const r = await fetch(`${base}/healthz`);
      if (r.status === 503) red = { atMs: performance.now() - startedMs, body: (await r.text()).trim() };
      else await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(red !== null, 'went red');
    assert.equal(red.body, 'unhealthy: the dispatcher thread has exited');
    // Within a few seconds of the exit (its teardown and the HTTP round trip included, on a loaded host).
    assert.ok(red.atMs <= EXIT_AFTER_MS + 4000, `red ${red.atMs.toFixed(0)} ms after the start`);
    assert.equal((await fetch(`${base}/readyz`)).status, 503, 'not ready either');
    assert.ok(
      lines.some((l) => l.level === 'error' && l.line === 'dispatcher thread exited with code 70'),
      lines.map((l) => `${l.level} ${l.line}`).join('\n'),
    );
    console.log(
      `/healthz red ${red.atMs.toFixed(0)} ms after the start (the thread exited about ${EXIT_AFTER_MS} ms in)`,
    );
  } finally {
    // A pipeline missing a thread cannot drain: close() stops it as after a crash and says so.
    await assert.rejects(
      router.close(),
      /^Error: the dispatcher thread exited with code 70: the router cannot drain; it stops without its final checkpoint/,
    );
  }
});

test('the binary exits with its failure code when its dispatcher thread exits, saying why', async () => {
  process.env['GEOFENCE_DRILL_EXIT'] = 'dispatcher:1500';
  let p: CliProcess;
  try {
    p = new CliProcess(['--no-listen', '--no-admin'], 60_000);
  } finally {
    delete process.env['GEOFENCE_DRILL_EXIT'];
  }
  const { code } = await p.exited;
  assert.equal(code, EXIT_FAILURE, p.stderr);
  assert.ok(hasLogLine(p.stderr, 'error', /^dispatcher thread exited with code 70$/), p.stderr);
  assert.ok(
    hasLogLine(
      p.stderr,
      'error',
      /^close failed: Error: the dispatcher thread exited with code 70: the router cannot drain/,
    ),
    p.stderr,
  );
});
