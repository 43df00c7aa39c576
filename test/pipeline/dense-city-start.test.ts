import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRouter } from '../../src/index.js';
import { generateSyntheticCity, syntheticCityBounds } from '../../src/fences/synthetic-city.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { waitFor } from './support.js';

/** 3,019 fences of 60-300 m packed into 2 x 2 km: a point there is inside about 70 of them. */
const DENSE = { seed: 7, fenceCount: 3019, fencesPerKm2: 3019 / 4, minRadiusM: 60, maxRadiusM: 300 };

test(
  'a dense city (3,019 fences in 2 x 2 km, ~70 at any point) starts, and its triggers are delivered in order',
  { timeout: 120_000 },
  async () => {
    // Each pool worker warms up on the fences before the router reports it started; one warm-up batch here writes
    // several times more triggers than the scratch ring holds.
    const got: Trigger[] = [];
    const router = await createRouter({
      fences: generateSyntheticCity(DENSE),
      listenHost: null,
      adminHost: null,
      shards: 2,
      poolSize: 2,
      maxDevices: 1000,
      stateDir: mkdtempSync(join(tmpdir(), 'gr-dense-')),
      downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
      log: () => undefined,
    });
    const b = syntheticCityBounds(DENSE);
    const devices = 50;
    const pings = 20;
    const t0 = Date.UTC(2025, 0, 1);
    for (let p = 0; p < pings; p++) {
      for (let d = 0; d < devices; d++) {
        // Device d crosses the city west to east along its own latitude.
        const lat = b.minLat + ((d + 0.5) / devices) * (b.maxLat - b.minLat);
        const lon = b.minLon + (p / (pings - 1)) * (b.maxLon - b.minLon);
        router.push({ id: `d${d}`, lat, lon, ts: t0 + p * 1000 });
      }
    }
    await waitFor(() => router.stats().processed === devices * pings, 30_000, 'every ping processed');
    const summary = await router.close();
    assert.equal(summary.processed, devices * pings);
    assert.equal(summary.delivered, summary.triggersTotal);
    assert.ok(summary.triggers.ENTER > devices * 40, `ENTER ${summary.triggers.ENTER}`);
    assert.equal(got.length, summary.triggersTotal);
    // Per-device seq order, no gap, no (deviceId, seq) twice, and every stay valid (an EXIT only after its ENTER).
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  },
);
