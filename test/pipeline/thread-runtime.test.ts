import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import {
  allocateThreadRuntimeRegion,
  claimPoolBlock,
  readThreadRuntime,
  startThreadRuntimeReporter,
} from '../../src/pipeline/thread-runtime.js';
import { RT_REPORTED_AT_MS_F64, RT_STRIDE_F64, RT_THREAD_POOL_FIRST } from '../../src/shm/layout.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, square, T0, waitFor } from './support.js';

test("pool blocks: claimed free first, none while every owner reports, a silent owner's block taken over", () => {
  const region = allocateThreadRuntimeRegion(2);
  const f64 = new Float64Array(region);
  const now = 1_000_000;
  const claimed = [0, 1, 2, 3].map(() => claimPoolBlock(region, now, 1000));
  assert.deepEqual(claimed, [
    RT_THREAD_POOL_FIRST,
    RT_THREAD_POOL_FIRST + 1,
    RT_THREAD_POOL_FIRST + 2,
    RT_THREAD_POOL_FIRST + 3,
  ]);
  for (const b of claimed) f64[b * RT_STRIDE_F64 + RT_REPORTED_AT_MS_F64] = now;
  assert.equal(claimPoolBlock(region, now + 1000, 1000), -1, 'every owner reported a second ago');
  // The owner of the second block stops (a terminated worker): five intervals later its block is free again, cleared.
  f64[(RT_THREAD_POOL_FIRST + 1) * RT_STRIDE_F64 + RT_REPORTED_AT_MS_F64] = now - 10_000;
  assert.equal(claimPoolBlock(region, now + 1000, 1000), RT_THREAD_POOL_FIRST + 1);
  assert.equal(f64[(RT_THREAD_POOL_FIRST + 1) * RT_STRIDE_F64 + RT_REPORTED_AT_MS_F64], 0);
  // A block that never reported is not read.
  assert.deepEqual(
    readThreadRuntime(region, now + 1000, 1000)
      .map((r) => r.thread)
      .sort(),
    ['containment-0', 'containment-2', 'containment-3'],
  );
});

test("a reporter writes its thread's heap and loop figures, and its block drops out when stopped", async () => {
  const region = allocateThreadRuntimeRegion(1);
  const reporter = startThreadRuntimeReporter(region, 0, 50);
  const busyUntil = Date.now() + 120;
  const keep: number[][] = [];
  while (Date.now() < busyUntil) keep.push(new Array(64).fill(1));
  await sleep(120);
  const [main] = readThreadRuntime(region, Date.now(), 50);
  assert.ok(main !== undefined && main.thread === 'main');
  assert.ok(main.heapUsedBytes > 1e6 && main.heapTotalBytes >= main.heapUsedBytes, JSON.stringify(main));
  assert.ok(main.heapLiveBytes > 0 && main.gcs > 0 && main.gcNs > 0, JSON.stringify(main));
  assert.ok(main.loopUtilization > 0 && main.loopUtilization <= 1, JSON.stringify(main));
  // CPU time of this thread (Linux): it follows the process's CPU time while only this thread works.
  const cpuBefore = main.cpuSeconds;
  const processBefore = process.cpuUsage();
  // Arithmetic only: no garbage, so no collector threads share the process's CPU time meanwhile.
  let x = 0;
  for (let spin = Date.now() + 150; Date.now() < spin;) x += Math.sqrt(x + 1);
  assert.ok(x > 0);
  const processSeconds = (() => {
    const d = process.cpuUsage(processBefore);
    return (d.user + d.system) / 1e6;
  })();
  const [after] = readThreadRuntime(region, Date.now(), 1000);
  assert.ok(cpuBefore !== null && after?.cpuSeconds != null && after.cpuWaitSeconds != null, JSON.stringify(after));
  const threadSeconds = after.cpuSeconds - cpuBefore;
  assert.ok(
    threadSeconds > 0.5 * processSeconds && threadSeconds <= processSeconds + 0.02,
    `thread ${threadSeconds} s of the process's ${processSeconds} s`,
  );
  reporter.stop();
  assert.deepEqual(readThreadRuntime(region, Date.now(), 50), []);
  assert.ok(keep.length > 0);
});

test('a running router exports heap and loop figures for each of its threads, pool workers included', async () => {
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features: [square('yard', 0, 0, 200)] },
    listenHost: null,
    adminHost: null,
    poolSize: 2,
    complianceWorker: true,
    shards: 2,
    maxDevices: 100,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-runtime-')),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
  });
  for (let i = 0; i < 20; i++) {
    for (let d = 0; d < 10; d++) {
      const [lat, lon] = at(i % 2 === 0 ? 0 : 400, 0);
      router.push({ id: `car-${d}`, lat, lon, ts: T0 + 1000 * i });
    }
  }
  await waitFor(() => got.length === 200, 10_000, 'every trigger delivered');
  // Every thread reports once a second.
  await sleep(1300);
  const text = await router.metricsText();
  await router.close();
  const heap = new Map<string, number>();
  for (const m of text.matchAll(/^geofence_thread_heap_used_bytes\{thread="([^"]+)"\} (\d+)/gm))
    heap.set(m[1]!, Number(m[2]));
  // Two pool workers for the shards and one for the COMPLIANCE ring.
  assert.deepEqual([...heap.keys()].sort(), [
    'containment-0',
    'containment-1',
    'containment-2',
    'dispatcher',
    'ingest',
    'main',
  ]);
  for (const [thread, bytes] of heap) assert.ok(bytes > 1e6, `${thread}: ${bytes}`);
  for (const name of [
    'geofence_thread_heap_live_bytes',
    'geofence_thread_event_loop_utilization_ratio',
    'geofence_thread_event_loop_delay_p99_seconds',
    'geofence_thread_gc_seconds_total',
  ]) {
    assert.match(text, new RegExp(`^${name}\\{thread="ingest"\\} `, 'm'), name);
  }
  // CPU time read from the system at the scrape, for every thread: each has done some work by now.
  const cpu = new Map<string, number>();
  for (const m of text.matchAll(/^geofence_thread_cpu_seconds_total\{thread="([^"]+)"\} ([\d.e-]+)/gm))
    cpu.set(m[1]!, Number(m[2]));
  assert.deepEqual([...cpu.keys()].sort(), [...heap.keys()].sort());
  for (const [thread, seconds] of cpu) assert.ok(seconds > 0 && seconds < 60, `${thread}: ${seconds} s`);
  assert.match(text, /^geofence_thread_cpu_wait_seconds_total\{thread="ingest"\} /m);
  const report = checkDeliveryContract(got, { complete: true, stays: true });
  assert.deepEqual(report.problems, []);
  assert.equal(report.devices, 10);
});
