/**
 * Clean restarts in the middle of everything: a seeded run of several dispatchers, one after the other on the same
 * directory, each closing with a short drain deadline while its downstream is slow and flaky, with a memory small
 * enough that triggers spill to the backlog log, load back, fail, park and wait for replay. Across all of them the
 * receiver gets every trigger exactly once and each device's triggers in seq order.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Lane, TriggerType } from '../../src/shm/layout.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';
import { sleep, TriggerRecord } from './fixtures.js';

const DEVICES = 40;

/** A seeded slow, flaky downstream: answers after 0-4 ms, 200 most of the time, 500 otherwise, while `flaky`. */
class SeededSink implements Sink {
  readonly seen: { device: string; seq: number; replay: boolean }[] = [];
  flaky = true;
  private readonly rnd: () => number;
  constructor(seed: number) {
    this.rnd = mulberry32(seed);
  }
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(Math.floor(this.rnd() * 5));
    if (this.flaky && this.rnd() < 0.25) return { status: 500 };
    for (let i = 0; i < batch.count; i++)
      this.seen.push({ device: String(batch.deviceId(i)), seq: batch.seq(i), replay: batch.replay(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

test('restarts with a flaky, slow downstream and a small memory: every trigger once, in per-device order, across five dispatchers', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'restarts-'));
  const sink = new SeededSink(5);
  const rnd = mulberry32(77);
  const r = new TriggerRecord();
  const seqs = new Int32Array(DEVICES);
  let sent = 0;
  for (let run = 0; run < 5; run++) {
    const last = run === 4;
    sink.flaky = !last;
    const d = new Dispatcher({
      stateDir: dir,
      namer: new IndexNamer(),
      maxDevices: DEVICES,
      deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
      runId: run + 1,
      flushIntervalMs: 5,
      downstreams: [
        {
          name: 'hook',
          sink,
          // A small memory: triggers spill to the log and load back; a few attempts: some park for the replay lane.
          queueCapacitySlots: 24,
          reservedComplianceSlots: 2,
          maxBatchTriggers: 6,
          maxAttempts: 2,
          breaker: { minimumRequests: 100_000, windowSize: 100_000 },
        },
      ],
    });
    const ds = d.downstreams[0]!;
    for (let step = 0; step < (last ? 0 : 60); step++) {
      for (let k = 0; k < 10; k++) {
        const device = Math.floor(rnd() * DEVICES);
        const seq = ++seqs[device]!;
        d.offer(
          r.set(seq, TriggerType.CROSS, seq % 7 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION, seq % 5, device).f64,
          r.i32,
          0,
          0,
        );
        sent++;
      }
      d.pump();
      await sleep(1);
    }
    assert.equal(
      ds.offered + ds.recovered,
      ds.delivered + ds.replayed + ds.final + ds.inFlightTriggers,
      `run ${run}: accounting`,
    );
    // A short deadline while the downstream is still slow and flaky: much is left for the next run.
    await d.close(last ? 30_000 : 20);
    assert.equal(ds.final, 0, `run ${run}: nothing final`);
    if (!last) assert.ok(d.carriedOver[0]! > 0, `run ${run}: something carried over (${d.carriedOver[0]})`);
    else assert.equal(d.carriedOver[0], 0, 'the last run delivers everything');
  }
  // Every trigger once, and each device's in seq order.
  const perDevice = new Map<string, number[]>();
  for (const t of sink.seen) {
    let list = perDevice.get(t.device);
    if (list === undefined) perDevice.set(t.device, (list = []));
    list.push(t.seq);
  }
  let total = 0;
  for (const [device, list] of perDevice) {
    const slot = Number(device.slice(7));
    assert.deepEqual(
      list,
      Array.from({ length: seqs[slot]! }, (_, i) => i + 1),
      `${device}: every seq once, in order`,
    );
    total += list.length;
  }
  assert.equal(total, sent);
  assert.ok(
    sink.seen.some((t) => t.replay),
    'some went through the replay lane',
  );
});
