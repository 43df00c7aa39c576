/**
 * Router metrics without HTTP: conventional names, every ingest reject reason and every lane/reason pair present,
 * added shared series read at scrape time, and the exposition parses.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ING_BYTES_F64, REJECT_REASON_NAMES } from '../../src/shm/layout.js';
import { allocatePipelineRegion, PipelineRegion } from '../../src/shm/pipeline-region.js';
import { MetricNames } from '../../src/metrics/metric-names.js';
import { RouterMetrics } from '../../src/metrics/router-metrics.js';
import { parseExposition, sampleValue } from './exposition.js';

test('names follow Prometheus conventions', () => {
  for (const name of Object.values(MetricNames)) {
    assert.match(name, /^geofence_[a-z0-9_]+$/);
    if (name.endsWith('_total')) assert.ok(!/_total_/.test(name), name);
  }
});

test('collectors read cells at scrape time; added series appear', async () => {
  const sab = allocatePipelineRegion(1);
  const m = new RouterMetrics({ pipeline: sab, defaultMetrics: false });
  const cells = new Float64Array(4);
  m.addSharedCounter(
    'geofence_test_triggers_total',
    'Test triggers.',
    ['type'],
    [
      { labels: { type: 'ENTER' }, read: () => cells[0]! },
      { labels: { type: 'EXIT' }, read: () => cells[1]! },
    ],
  );
  let s = parseExposition(await m.metrics());
  for (const reason of REJECT_REASON_NAMES)
    assert.equal(sampleValue(s, MetricNames.INGEST_REJECTED, { reason }), 0, reason);
  assert.equal(sampleValue(s, 'geofence_test_triggers_total', { type: 'EXIT' }), 0);
  PipelineRegion.wrap(sab).f64[ING_BYTES_F64] = 12345;
  cells[1] = 7;
  s = parseExposition(await m.metrics());
  assert.equal(sampleValue(s, MetricNames.INGEST_RECEIVED_BYTES), 12345);
  assert.equal(sampleValue(s, 'geofence_test_triggers_total', { type: 'EXIT' }), 7);
  assert.equal(
    sampleValue(s, MetricNames.PINGS_OFFERED, { lane: 'idle' }),
    undefined,
    'no admission series without its region',
  );
});
