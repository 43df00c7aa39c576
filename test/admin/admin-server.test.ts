/**
 * The admin server over real HTTP on 127.0.0.1: /metrics is valid Prometheus text that follows counter cells
 * written in shared memory by another thread; /healthz; /readyz from the readiness function; reload-fences calls
 * the handler once at a time and reports failures.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ADM_BLOCK_F64, RingKind, TELEMETRY_STRIDE_BYTES } from '../../src/shm/layout.js';
import { allocateCounterRegion, allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { AdminServer } from '../../src/admin/admin-server.js';
import { allocatePipelineRegion } from '../../src/shm/pipeline-region.js';
import { MetricNames } from '../../src/metrics/metric-names.js';
import { RouterMetrics } from '../../src/metrics/router-metrics.js';
import { parseExposition, sampleValue } from '../metrics/exposition.js';

const pipeline = allocatePipelineRegion(2);
const admission = allocateCounterRegion(2, ADM_BLOCK_F64);
const ring = allocateRingRegion({ capacitySlots: 64, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY });
let ready: { ready: boolean; reason?: string } = { ready: false, reason: 'fences loading' };
let reloads = 0;
let failNext = false;
let releaseReload: (() => void) | null = null;
const metrics = new RouterMetrics({ pipeline, admissionCounters: admission, telemetryRings: [ring] });
const server = new AdminServer({
  host: '127.0.0.1',
  port: 0,
  registry: metrics.registry,
  readiness: () => ready,
  reloadFences: async () => {
    reloads++;
    if (releaseReload === null) await new Promise<void>((r) => (releaseReload = r));
    if (failNext) throw new Error('feature 3: ring has fewer than 4 positions');
    return { generation: reloads };
  },
});
let base = '';
let worker: Worker;

before(async () => {
  await server.start();
  base = `http://127.0.0.1:${server.port}`;
  worker = new Worker(new URL('../metrics/fixtures/counter-writer-thread.js', import.meta.url), {
    workerData: { pipeline, admission },
  });
});

after(async () => {
  await worker.terminate();
  await server.close();
});

async function scrape(): Promise<ReturnType<typeof parseExposition>> {
  const res = await fetch(`${base}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseExposition(await res.text());
}

async function writeFromWorker(step: number): Promise<void> {
  await new Promise<void>((resolve) => {
    worker.once('message', () => resolve());
    worker.postMessage(step);
  });
}

test('/metrics is valid exposition that follows shared counter cells written by another thread', async () => {
  const first = await scrape();
  assert.equal(sampleValue(first, MetricNames.INGEST_ACCEPTED), 0);
  assert.equal(sampleValue(first, MetricNames.INGEST_REJECTED, { reason: 'invalid_lat' }), 0);
  assert.equal(
    sampleValue(first, MetricNames.INGEST_REJECTED, { reason: 'corrupt_frame' }),
    0,
    'every reason is exported',
  );
  assert.equal(sampleValue(first, MetricNames.PINGS_SHED, { lane: 'compliance', reason: 'ring_full' }), 0);
  assert.ok(
    first.some((s) => s.name === 'process_cpu_seconds_total'),
    'default process metrics',
  );
  await writeFromWorker(1);
  await writeFromWorker(2);
  const second = await scrape();
  assert.equal(sampleValue(second, MetricNames.INGEST_ACCEPTED), 3000);
  assert.equal(sampleValue(second, MetricNames.INGEST_REJECTED, { reason: 'invalid_lat' }), 3);
  assert.equal(sampleValue(second, MetricNames.FENCE_GENERATION), 2);
  assert.equal(sampleValue(second, MetricNames.PINGS_OFFERED, { lane: 'idle' }), 30, 'summed over shards');
  assert.equal(sampleValue(second, MetricNames.PINGS_SHED, { lane: 'idle', reason: 'rate_limited' }), 6);
  // Ring depth is read through the ring header.
  const r = SpscRing.wrap(ring);
  for (let i = 0; i < 5; i++) r.claim();
  r.publish();
  const third = await scrape();
  assert.equal(sampleValue(third, MetricNames.RING_DEPTH, { ring: 'telemetry', shard: '0', ingest_thread: '0' }), 5);
  assert.equal(
    sampleValue(third, MetricNames.RING_CAPACITY, { ring: 'telemetry', shard: '0', ingest_thread: '0' }),
    64,
  );
});

test('/healthz and /readyz', async () => {
  assert.equal((await fetch(`${base}/healthz`)).status, 200);
  let res = await fetch(`${base}/readyz`);
  assert.equal(res.status, 503);
  assert.match(await res.text(), /not ready: fences loading/);
  ready = { ready: true };
  res = await fetch(`${base}/readyz`);
  assert.equal(res.status, 200);
  assert.equal((await fetch(`${base}/nowhere`)).status, 404);
  assert.equal((await fetch(`${base}/metrics`, { method: 'POST' })).status, 405);
});

test('POST /admin/reload-fences runs the handler once at a time and reports its result or error', async () => {
  assert.equal((await fetch(`${base}/admin/reload-fences`)).status, 405);
  const first = fetch(`${base}/admin/reload-fences`, { method: 'POST' });
  // Wait until the handler runs, then a second reload is refused while it is held.
  while (reloads === 0) await new Promise((r) => setTimeout(r, 2));
  const second = await fetch(`${base}/admin/reload-fences`, { method: 'POST' });
  assert.equal(second.status, 409);
  releaseReload!();
  const res = await first;
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { ok: true, result: { generation: 1 } });
  failNext = true;
  const bad = await fetch(`${base}/admin/reload-fences`, { method: 'POST' });
  assert.equal(bad.status, 500);
  assert.deepEqual(await bad.json(), { ok: false, error: 'feature 3: ring has fewer than 4 positions' });
  assert.equal(reloads, 2);
});

test("/healthz answers 503 with the health function's reason while it says unhealthy", async () => {
  let health = { ready: false, reason: 'containment stalled on shards 1,3' };
  const s = new AdminServer({
    port: 0,
    registry: metrics.registry,
    readiness: () => true,
    health: () => health,
    reloadFences: async () => null,
  });
  await s.start();
  try {
    const res = await fetch(`http://127.0.0.1:${s.port}/healthz`);
    assert.equal(res.status, 503);
    assert.equal(await res.text(), 'unhealthy: containment stalled on shards 1,3\n');
    health = { ready: true, reason: '' };
    assert.equal((await fetch(`http://127.0.0.1:${s.port}/healthz`)).status, 200);
  } finally {
    await s.close();
  }
});

test('the admin server binds 127.0.0.1 by default and refuses a bad port', () => {
  const s = new AdminServer({ registry: metrics.registry, readiness: () => true, reloadFences: async () => null });
  assert.equal((s as unknown as { options: { host: string } }).options.host, '127.0.0.1');
  assert.throws(
    () =>
      new AdminServer({
        port: 70000,
        registry: metrics.registry,
        readiness: () => true,
        reloadFences: async () => null,
      }),
    /options\.port must be an integer in \[0, 65535\]/,
  );
});
