/**
 * The warm-up before `createRouter` resolves (the ingest path and every pool worker run synthetic pings on scratch
 * regions) leaves no trace: every counter reads zero, no device is registered, no trigger reaches a downstream, and
 * the first real device gets the first slot and its first trigger sequence number.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { frameOf, sendOverTcp, square, waitFor } from './support.js';

for (const sharedStructures of [true, false]) {
  test(`the warm-up touches no counter, device or downstream (sharedStructures ${sharedStructures})`, async () => {
    const got: Trigger[] = [];
    const router = await createRouter({
      fences: {
        type: 'FeatureCollection',
        features: [square('a', 0, 0, 50), square('c', 500, 0, 50, { compliance: true })],
      },
      listenHost: '127.0.0.1',
      listenPort: 0,
      adminHost: null,
      shards: 4,
      poolSize: 2,
      ingest: { sharedStructures },
      stateDir: mkdtempSync(join(tmpdir(), 'gr-warm-')),
      downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
      log: () => undefined,
    });
    try {
      const s = router.stats();
      assert.deepEqual(
        [
          s.frames,
          s.accepted,
          s.rejectedTotal,
          s.devices,
          s.offeredTotal,
          s.admittedTotal,
          s.processed,
          s.triggersTotal,
          s.tasks,
          s.heldTimeSamples,
        ],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
      );
      await sendOverTcp(router.ingestPort!, Buffer.concat([frameOf({ id: 'dev-1', eastM: 0, northM: 0, dtMs: 0 })]));
      await waitFor(() => router.stats().delivered === 1, 10_000, 'the ENTER delivered');
      const after = router.stats();
      assert.equal(after.devices, 1);
      assert.equal(after.processed, 1);
      assert.deepEqual(
        got.map((t) => [t.type, t.deviceId, t.fenceId, t.seq]),
        [['ENTER', 'dev-1', 'a', 1]],
      );
    } finally {
      await router.close();
    }
  });
}
