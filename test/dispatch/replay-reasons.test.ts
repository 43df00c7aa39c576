/**
 * Replays carry the reason their trigger was dead-lettered with: a parked (undeliverable) trigger re-delivered counts
 * under `geofence_dispatch_replayed_total{reason="undeliverable"}`, one the replay lane finds refused for good under
 * `geofence_dispatch_replay_rejected_total{reason="undeliverable"}`; per downstream the by-reason cells sum to the
 * totals, in the dispatcher's cells and in the scrape.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DEAD_LETTER_REASON_COUNT,
  DEAD_LETTER_REASON_NAMES,
  DeadLetterReason,
  DS_BLOCK_F64,
  DS_REPLAY_REJECTED_BY_REASON_F64,
  DS_REPLAY_REJECTED_F64,
  DS_REPLAYED_BY_REASON_F64,
  DS_REPLAYED_F64,
  Lane,
  TriggerType,
} from '../../src/shm/layout.js';
import { Dispatcher, metricsCells } from '../../src/dispatch/dispatcher.js';
import { METRIC_REPLAY_REJECTED, METRIC_REPLAYED } from '../../src/dispatch/metric-names.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import { RouterMetrics } from '../../src/metrics/router-metrics.js';
import { allocatePipelineRegion } from '../../src/shm/pipeline-region.js';
import { parseExposition, sampleValue } from '../metrics/exposition.js';
import { sleep, TriggerRecord } from './fixtures.js';

/** Answers each batch with the status its first device is given (200 when none is). */
class ScriptedSink implements Sink {
  readonly statusOf = new Map<string | number, number>();
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await sleep(1);
    return { status: this.statusOf.get(batch.deviceId(0)) ?? 200 };
  }
  async close(): Promise<void> {}
}

/** Pumps until `done` holds (fails after 5 s, saying `what`). */
async function pumpUntil(d: Dispatcher, done: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 5000;
  while (!done()) {
    if (Date.now() > end) assert.fail(`timed out: ${what}`);
    d.pump();
    await sleep(2);
  }
}

test('replayed and replay-rejected dead letters are counted by the reason they were dead-lettered with; the reasons sum to the totals', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-reasons-'));
  const sink = new ScriptedSink();
  // Devices 7 and 9 fail until parked; 8 always goes through.
  sink.statusOf.set('device-7', 500);
  sink.statusOf.set('device-9', 500);
  const metricsBuffer = new SharedArrayBuffer(metricsCells(1) * 8);
  const d = new Dispatcher({
    stateDir: dir,
    namer: new IndexNamer(),
    maxDevices: 16,
    flushIntervalMs: 20,
    metricsBuffer,
    downstreams: [
      {
        name: 'app',
        sink,
        maxBatchTriggers: 1,
        maxAttempts: 2,
        breaker: { minimumRequests: 100_000, windowSize: 100_000 },
      },
    ],
  });
  const scrape = new RouterMetrics({
    pipeline: allocatePipelineRegion(1),
    dispatchMetrics: metricsBuffer,
    downstreamNames: ['app'],
    defaultMetrics: false,
  });
  try {
    const r = new TriggerRecord();
    for (const device of [7, 8, 9])
      for (let seq = 1; seq <= 3; seq++)
        d.offer(r.set(seq, TriggerType.ENTER, Lane.TRANSITION, seq, device).f64, r.i32, 0, 0);
    const ds = d.downstreams[0]!;
    await pumpUntil(d, () => ds.parked === 2, 'devices 7 and 9 parked');
    // Device 7 recovers (its dead letter is re-delivered); device 9's is refused for good by the replay lane.
    sink.statusOf.delete('device-7');
    sink.statusOf.set('device-9', 422);
    await pumpUntil(d, () => d.isIdle, 'everything settled');
    d.publishMetrics();

    const undeliverable = DeadLetterReason.UNDELIVERABLE;
    assert.equal(ds.replayed, 1);
    assert.equal(ds.replayRejected, 1);
    assert.equal(ds.replayedByReason[undeliverable], 1);
    assert.equal(ds.replayRejectedByReason[undeliverable], 1);
    const cells = d.metrics;
    let replayed = 0;
    let rejected = 0;
    for (let reason = 0; reason < DEAD_LETTER_REASON_COUNT; reason++) {
      replayed += cells[DS_REPLAYED_BY_REASON_F64 + reason]!;
      rejected += cells[DS_REPLAY_REJECTED_BY_REASON_F64 + reason]!;
    }
    assert.equal(replayed, cells[DS_REPLAYED_F64], 'replayed: the reasons sum to the total');
    assert.equal(rejected, cells[DS_REPLAY_REJECTED_F64], 'replay rejected: the reasons sum to the total');
    assert.ok(DS_REPLAY_REJECTED_BY_REASON_F64 + DEAD_LETTER_REASON_COUNT <= DS_BLOCK_F64, 'inside the block');

    const s = parseExposition(await scrape.metrics());
    for (const [reason, name] of DEAD_LETTER_REASON_NAMES.entries()) {
      const want = reason === undeliverable ? 1 : 0;
      assert.equal(sampleValue(s, METRIC_REPLAYED, { downstream: 'app', reason: name }), want, `replayed ${name}`);
      assert.equal(
        sampleValue(s, METRIC_REPLAY_REJECTED, { downstream: 'app', reason: name }),
        want,
        `replay rejected ${name}`,
      );
    }
  } finally {
    await d.close(100);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
