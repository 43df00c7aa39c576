/** Bad options and bad GeoJSON make createRouter fail with errors naming what is wrong; nothing is left running. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter, FenceValidationError } from '../../src/index.js';

test('bad options name the option and its range', async () => {
  await assert.rejects(createRouter({ shards: 0 }), /options\.shards must be an integer in \[1, 1024\], got 0/);
  await assert.rejects(createRouter({ ringCapacitySlots: 1000 }), /options\.ringCapacitySlots must be a power of two/);
  await assert.rejects(
    createRouter({ complianceMarginM: -1 }),
    /options\.complianceMarginM must be a number in \[0, 100000\]/,
  );
  await assert.rejects(
    createRouter({ downstreams: [{ name: 'w', kind: 'webhook', url: 'http://127.0.0.1:1/', limit: 'fast' as never }] }),
    /options\.downstreams\[0\]\.limit/,
  );
  await assert.rejects(
    createRouter({ drainDeadlineMs: -5 }),
    /options\.drainDeadlineMs must be an integer in \[0, 3600000\], got -5/,
  );
  await assert.rejects(
    createRouter({ fencesFile: '/nonexistent/fences.json' }),
    /options\.fencesFile \/nonexistent\/fences\.json/,
  );
});

test('bad GeoJSON is refused with the feature index and the reason', async () => {
  const bad = {
    type: 'FeatureCollection',
    features: [{ type: 'Feature', properties: { id: 'ok' }, geometry: { type: 'Point', coordinates: [13.4, 52.5] } }],
  };
  await assert.rejects(createRouter({ fences: bad, listenHost: null, adminHost: null }), (err: unknown) => {
    assert.ok(err instanceof FenceValidationError);
    assert.equal(err.featureIndex, 0);
    assert.match(err.message, /^feature 0: /);
    return true;
  });
  await assert.rejects(
    createRouter({ fences: { type: 'Nope' }, listenHost: null, adminHost: null }),
    /input is not a GeoJSON FeatureCollection/,
  );
});

test('a port already in use fails the start and leaves no thread behind', async () => {
  const a = await createRouter({
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    shards: 1,
    poolSize: 1,
    ringCapacitySlots: 64,
    maxDevices: 10,
    stateDir: null,
  });
  try {
    await assert.rejects(
      createRouter({
        listenHost: '127.0.0.1',
        listenPort: a.ingestPort!,
        adminHost: null,
        shards: 1,
        poolSize: 1,
        ringCapacitySlots: 64,
        maxDevices: 10,
        stateDir: null,
      }),
      /ingest thread: .*EADDRINUSE/,
    );
  } finally {
    await a.close();
  }
});
