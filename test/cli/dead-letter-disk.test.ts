/**
 * The real binary, with its real threads, on a disk that refuses to grow a file: the process runs under a file-size
 * limit (`ulimit -f`), so the kernel fails the dead-letter writes of a downstream that refuses every trigger (EFBIG)
 * once its dead-letter file reaches the limit. The healthy downstream still receives every trigger, the dispatcher
 * thread goes on, the failure is logged as an error with its counts, SIGTERM drains and exits promptly, and the
 * summary counts the write errors and the dead letters the disk did not take.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, sendOverTcp, square, T0, TriggerServer, waitFor } from '../pipeline/support.js';
import { hasLogLine, MAIN_PATH } from './support.js';

/** File-size limit of the child, KiB (bash's `ulimit -f` unit): the dead-letter file passes it, nothing else does. */
const FILE_LIMIT_KIB = 64;
const DEVICES = 200;
const PINGS_PER_DEVICE = 10;

test('a file-size limit fails the dead-letter writes of one downstream (EFBIG): the other gets every trigger, the error is logged and counted, SIGTERM exits promptly', async (t) => {
  if (!existsSync('/usr/bin/bash') && !existsSync('/bin/bash')) {
    t.skip('needs bash for ulimit');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'gr-efbig-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const good = new TriggerServer();
  await good.start();
  const refusing = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(400, { 'content-length': 0 });
      res.end();
    });
  });
  await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    await good.stop();
    refusing.closeAllConnections();
    await new Promise<void>((resolve) => refusing.close(() => resolve()));
  });
  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      downstreams: [
        { name: 'good', kind: 'webhook', url: good.url },
        {
          name: 'refuses',
          kind: 'webhook',
          url: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}/hook`,
          maxBatchTriggers: 16,
        },
      ],
      deadLetter: { maxBytesPerDownstream: 1024 * 1024 },
    }),
  );
  const args = [
    '--config',
    config,
    '--fences',
    fences,
    '--state-dir',
    join(dir, 'state'),
    '--listen',
    '127.0.0.1:0',
    '--admin',
    '127.0.0.1:0',
  ];
  const child = spawn(
    'bash',
    ['-c', `ulimit -f ${FILE_LIMIT_KIB} && exec "$0" "$@"`, process.execPath, MAIN_PATH, ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const killer = setTimeout(() => child.kill('SIGKILL'), 90_000);
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  try {
    await waitFor(
      () => /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(stderr) || child.exitCode !== null,
      30_000,
      'the telemetry port',
    );
    const port = Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(stderr)?.[1]);
    assert.ok(port > 0, stderr);
    // Every device goes in and out of A, a second apart: one trigger per ping after the first.
    const frames: Buffer[] = [];
    for (let k = 0; k < PINGS_PER_DEVICE; k++) {
      for (let d = 0; d < DEVICES; d++) {
        const [lat, lon] = k % 2 === 0 ? at(-300, 0) : at(0, 0);
        frames.push(pack({ id: `dev-${d}`, lat, lon, ts: T0 + k * 1000 }));
      }
    }
    await sendOverTcp(port, Buffer.concat(frames), 4096);
    const expected = DEVICES * (PINGS_PER_DEVICE - 1);
    await waitFor(() => good.received.length >= expected, 30_000, 'every trigger at the healthy downstream');
    await waitFor(() => /durable writes failing \(EFBIG/.test(stderr), 20_000, 'the alarm line');
    // While its writes fail the router is not ready (delivery goes on; what it cannot keep is counted).
    const adminPort = Number(/admin http:\/\/127\.0\.0\.1:(\d+)\//.exec(stderr)?.[1]);
    assert.ok(adminPort > 0, stderr);
    let readyz = '';
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !readyz.startsWith('503')) {
      const res = await fetch(`http://127.0.0.1:${adminPort}/readyz`);
      readyz = `${res.status} ${await res.text()}`;
      if (!readyz.startsWith('503')) await new Promise((r) => setTimeout(r, 100));
    }
    assert.match(readyz, /^503 .*durable writes failing for 1 downstream/);
    const t0 = Date.now();
    child.kill('SIGTERM');
    const code = await exited;
    const drainMs = Date.now() - t0;
    assert.ok(drainMs < 20_000, `SIGTERM to exit: ${drainMs} ms`);
    assert.equal(code, 3, `drained, with dead letters\n${stdout}\n${stderr}`);
    assert.equal(good.received.length, expected, 'the healthy downstream got every trigger, once');
    assert.deepEqual(checkDeliveryContract(good.received, { complete: true, stays: true }).problems, []);
    assert.ok(
      hasLogLine(
        stderr,
        'error',
        /^downstream refuses: durable writes failing \(EFBIG: file too large[^)]*\): \d+ failed writes/,
      ),
      stderr,
    );
    const line = stdout.split('\n').find((l) => l.trimStart().startsWith('refuses '));
    assert.ok(line !== undefined, stdout);
    const writeErrors = Number(/write_errors=(\d+)/.exec(line)![1]);
    const diskError = Number(/disk_error=(\d+)/.exec(line)![1]);
    assert.ok(writeErrors > 0, line);
    assert.ok(diskError > 0, `dead letters the disk did not take are counted: ${line}`);
    assert.match(line, new RegExp(`final=${expected} `), 'every refused trigger settled');
    console.log(
      `EFBIG (ulimit -f ${FILE_LIMIT_KIB} KiB): ${expected} triggers, healthy downstream got ${good.received.length}; ${writeErrors} write errors, ${diskError} dead letters not kept; SIGTERM to exit ${drainMs} ms`,
    );
  } finally {
    clearTimeout(killer);
    if (child.exitCode === null) child.kill('SIGKILL');
  }
});
