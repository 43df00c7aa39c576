/**
 * SIGTERM under full load, through the real binary: telemetry pours in over TCP as fast as the sender can write,
 * the webhook is slow but live (one request at a time) and refuses every batch holding a trigger of a few devices,
 * so a backlog and a replay lane build up. The stop must end within the configured drain deadline (plus the calls
 * in flight and the file writes), keep what was not delivered in the state directory (exit 3, `kept=`), and the next
 * start must deliver all of it: across both runs every device's triggers arrive in seq order with no gap, each once
 * (re-delivery of the same trigger allowed), the dead letters through the replay lane.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { DOWNSTREAM_DEFAULTS } from '../../src/dispatch/downstream.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { cityTraffic } from '../support/city-traffic.js';
import { T0, TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess, valueOf } from './support.js';

const DRAIN_DEADLINE_MS = 2_000;
/** What the stop may take beyond the deadline: the calls in flight (one at a time, 40 ms each) and the file writes. */
const STOP_SLACK_MS = 15_000;
const SERVICE_MS = 40;

/** Starts the binary; resolves with the process and its telemetry port. */
async function startRouter(args: string[]): Promise<{ p: CliProcess; port: number }> {
  const p = new CliProcess(['--listen', '127.0.0.1:0', '--no-admin', ...args], 120_000);
  await p.waitFor('the telemetry port', (x) => /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr));
  return { p, port: Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]) };
}

/** Writes `frames` over one connection as fast as the socket takes them, until done or `stop()`; resolves with the bytes written. */
function pour(port: number, frames: Buffer): { stop(): void; done: Promise<number> } {
  const socket = connect({ host: '127.0.0.1', port });
  let stopped = false;
  const done = new Promise<number>((resolve) => {
    let pos = 0;
    socket.on('error', () => resolve(pos));
    socket.on('close', () => resolve(pos));
    socket.once('connect', () => {
      const next = (): void => {
        while (!stopped && pos < frames.length) {
          const end = Math.min(frames.length, pos + 65_536);
          const ok = socket.write(frames.subarray(pos, end));
          pos = end;
          if (!ok) {
            socket.once('drain', next);
            return;
          }
        }
        socket.end();
      };
      next();
    });
  });
  return { stop: () => (stopped = true), done };
}

test('SIGTERM under full load with a slow downstream and a replay backlog: the drain ends at its deadline, keeps the rest, and the restart delivers it all in order', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-sigterm-'));
  const traffic = cityTraffic({
    seed: 11,
    fences: 400,
    devices: 500,
    pingsPerDevice: 240,
    pingIntervalMs: 4000,
    speedMps: 14,
    dwellMs: 20_000,
    startMs: T0,
  });
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify(traffic.fences));
  const failing = new Set(['v7', 'v77', 'v177']);
  let slow = true;
  let queue: Promise<unknown> = Promise.resolve();
  let refusedBatches = 0;
  /** Refused attempts per failing device: two of them can share a batch, so batches alone do not say how far each got. */
  const refusedAttempts = new Map<string, number>();
  const hook = new TriggerServer((batch) => {
    if (!slow) return 200;
    // One request served at a time: a downstream with little capacity, which the gradient limit must find.
    const answer = queue.then(
      () =>
        new Promise<number>((r) =>
          setTimeout(() => {
            const refused = new Set(batch.map((t) => String(t.deviceId)).filter((id) => failing.has(id)));
            if (refused.size > 0) {
              refusedBatches++;
              for (const id of refused) refusedAttempts.set(id, (refusedAttempts.get(id) ?? 0) + 1);
              r(500);
            } else r(200);
          }, SERVICE_MS),
        ),
    );
    queue = answer;
    return answer;
  });
  await hook.start();
  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({ downstreams: [{ name: 'hook', kind: 'webhook', url: hook.url, maxBatchTriggers: 32 }] }),
  );
  const stateDir = join(dir, 'state');
  const args = [
    '--fences',
    fences,
    '--state-dir',
    stateDir,
    '--config',
    config,
    '--drain-deadline-ms',
    String(DRAIN_DEADLINE_MS),
  ];
  try {
    const r1 = await startRouter(args);
    const sender = pour(r1.port, traffic.frames);
    // Full load for a while: the slow receiver falls far behind, and once a failing device's first trigger has used
    // its attempts, that device waits in the replay lane behind live traffic (and is refused no more).
    // 12-15 s on a quiet 2-core host; more when other tests share it.
    await waitFor(
      () => [...failing].every((id) => (refusedAttempts.get(id) ?? 0) >= DOWNSTREAM_DEFAULTS.maxAttempts),
      60_000,
      'every failing device refused its attempts (dead letters for the replay lane)',
    );
    await new Promise((r) => setTimeout(r, 1500));
    const receivedBeforeStop = hook.received.length;
    const stopAt = performance.now();
    r1.p.child.kill('SIGTERM');
    const e1 = await r1.p.exited;
    const stopMs = performance.now() - stopAt;
    sender.stop();
    const bytesSent = await sender.done;
    const kept = valueOf(r1.p.stdout, 'kept');
    const offered1 = valueOf(r1.p.stdout, 'offered');
    const replayLane = valueOf(r1.p.stdout, 'undeliverable');
    console.log(
      `sigterm: stopped in ${stopMs.toFixed(0)} ms (deadline ${DRAIN_DEADLINE_MS} ms) with ${kept} of ${offered1} triggers kept ` +
        `(${receivedBeforeStop} received before the stop, ${replayLane} dead-lettered undeliverable, ${refusedBatches} batches refused); ` +
        `${(bytesSent / 1e6).toFixed(1)} MB of telemetry written by the sender`,
    );
    assert.equal(e1.code, 3, `kept triggers make a drain with loss by design\n${r1.p.stdout}\n${r1.p.stderr}`);
    assert.ok(stopMs < DRAIN_DEADLINE_MS + STOP_SLACK_MS, `the stop took ${stopMs} ms`);
    assert.ok(kept > 0, `a backlog was left at the deadline: ${r1.p.stdout}`);
    assert.ok(replayLane > 0, `dead letters waited in the replay lane: ${r1.p.stdout}`);
    const firstRun = hook.received.length;

    // Run 2: the downstream is healthy; no new telemetry. Everything kept must arrive.
    slow = false;
    const r2 = await startRouter(args);
    await waitFor(() => hook.received.length - firstRun >= kept, 60_000, `the ${kept} kept triggers`);
    await new Promise((r) => setTimeout(r, 500));
    r2.p.child.kill('SIGTERM');
    const e2 = await r2.p.exited;
    assert.equal(e2.code, 0, `${r2.p.stdout}\n${r2.p.stderr}`);
    assert.equal(valueOf(r2.p.stdout, 'recovered'), kept, r2.p.stdout);

    const report = checkDeliveryContract(hook.received, { complete: true, stays: true, allowRedelivery: true });
    assert.deepEqual(report.problems, []);
    const unique = new Set(hook.received.map((t: Trigger) => `${String(t.deviceId)}/${t.seq}`));
    assert.equal(unique.size, offered1, 'every trigger the first run made arrived, across both runs');
    const replayed = hook.received.slice(firstRun).filter((t) => t.replay === true);
    assert.ok(replayed.length > 0, 'the replay lane was delivered by the second run');
    console.log(
      `sigterm: the restart delivered ${hook.received.length - firstRun} triggers (${replayed.length} through the replay lane); ${unique.size} distinct across both runs`,
    );
  } finally {
    await hook.stop();
  }
});
