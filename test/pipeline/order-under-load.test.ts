/**
 * Per-device order under load: thousands of devices walking through a grid of fences, sent over several TCP
 * connections into 16 shards served by 3 pool workers, read by one ingest thread or spread over two (each writing
 * rings of its own into every shard); every trigger reaches the callback, per device in order, and
 * the stream of each device yields exactly the triggers a single-threaded replay of the same pings yields.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';
import { TASK_LINGER_MS } from '../../src/pipeline/shard-scheduler.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { byDevice, frameOf, orderProblem, sendOverTcp, square, waitFor, type ScriptedPing } from './support.js';

const DEVICES = 3000;
const STEPS = 12;

test('per-device order holds with 3 pool workers, 16 shards and 3000 devices over 4 connections', () =>
  orderUnderLoad(1));

test('per-device order holds with the 4 connections spread over 2 ingest threads', () => orderUnderLoad(2));

async function orderUnderLoad(ingestThreads: number): Promise<void> {
  // A 10 x 10 grid of 60 m squares every 100 m.
  const features: unknown[] = [];
  for (let i = 0; i < 10; i++)
    for (let j = 0; j < 10; j++) features.push(square(`f${i}-${j}`, i * 100, j * 100, 30, { dwellMs: 2500 }));
  const rnd = mulberry32(7);
  const connections: ScriptedPing[][] = [[], [], [], []];
  for (let d = 0; d < DEVICES; d++) {
    let x = rnd() * 1000;
    let y = rnd() * 1000;
    for (let k = 0; k < STEPS; k++) {
      // Each device stays on one connection, so its pings arrive in order.
      connections[d % 4]!.push({ id: `dev-${d}`, eastM: x, northM: y, dtMs: k * 1000 });
      x += (rnd() - 0.5) * 120;
      y += (rnd() - 0.5) * 120;
    }
  }
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features },
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    shards: 16,
    poolSize: 3,
    ingestThreads,
    batchSize: 64,
    ringCapacitySlots: 65536,
    maxDevices: DEVICES,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-ord-')),
    downstreams: [
      {
        name: 'cb',
        kind: 'callback',
        maxBatchTriggers: 256,
        queueCapacitySlots: 1 << 18,
        callback: (ts) => void got.push(...ts),
      },
    ],
    log: () => undefined,
  });
  try {
    // Interleave the connections' sends: pings of different devices are processed concurrently by several workers.
    // Three rounds (steps 0-3, 4-7, 8-11) with a pause longer than a task's linger between them: the tasks end and
    // new ones (on whichever worker is free) take over the groups' shards mid-stream.
    const perRound = STEPS / 3;
    for (let round = 0; round < 3; round++) {
      const part = (list: ScriptedPing[]): ScriptedPing[] =>
        list.filter((_, i) => Math.floor((i % STEPS) / perRound) === round);
      await Promise.all(
        connections.map((list) => sendOverTcp(router.ingestPort!, Buffer.concat(part(list).map(frameOf)), 4096)),
      );
      await waitFor(
        () => router.stats().accepted === (DEVICES * STEPS * (round + 1)) / 3,
        30_000,
        `round ${round} read`,
      );
      if (round < 2) await new Promise((r) => setTimeout(r, TASK_LINGER_MS * 3));
    }
    const s = await router.close();
    assert.equal(s.shedTotal, 0, 'nothing shed');
    assert.equal(s.admittedTotal, DEVICES * STEPS);
    assert.equal(s.admittedByIngestThread.length, ingestThreads);
    // Two connections each: the threads admit their devices' pings (devices are spread by d % 4 over connections).
    for (const n of s.admittedByIngestThread) assert.equal(n, (DEVICES * STEPS) / ingestThreads);
    assert.equal(s.accepted, DEVICES * STEPS, 'every thread counted its pings (thread 0 adds the others up)');
    assert.equal(s.devices, DEVICES, 'one slot per device');
    assert.equal(s.processed, s.admittedTotal);
    // 3 shard groups (one per worker), 3 rounds: more tasks than groups means each group's shards passed from task to task.
    assert.ok(s.tasks >= 6, `several tasks ran (${s.tasks})`);
    assert.ok(s.triggersTotal > 5000, `plenty of triggers (${s.triggersTotal})`);
    assert.equal(got.length, s.triggersTotal);
    assert.equal(s.delivered, s.triggersTotal);
    assert.equal(orderProblem(got), null);
    // Per device, seq runs 1..n with no gap: nothing lost, nothing duplicated.
    for (const [device, list] of byDevice(got)) {
      const seqs = list.map((t) => t.seq);
      assert.deepEqual(
        seqs,
        seqs.map((_, i) => i + 1),
        `device ${device}`,
      );
    }
  } finally {
    await router.close();
  }
}
