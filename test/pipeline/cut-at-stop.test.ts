/**
 * A stop that cuts a frame: connections still open when the router stops, each holding the first bytes of a frame,
 * have those frames counted as `cut_at_stop` (the router's stop ended them, not their senders), never as
 * `truncated_frame`, which stays the sender's fault (a connection that closed inside a frame). The same through one
 * ingest thread, through a connection forwarded to a second ingest thread, and with `overload: 'backpressure'`; the
 * complete frames sent before the cut are delivered, each device's ENTER once.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { createRouter, type Router } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { parseExposition, sampleValue } from '../metrics/exposition.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { frameOf, sendOverTcp, square, waitFor } from './support.js';

/** What createRouter takes. */
type RouterInput = NonNullable<Parameters<typeof createRouter>[0]>;

function cutRouter(got: Trigger[], extra: Partial<RouterInput>): Promise<Router> {
  return createRouter({
    fences: { type: 'FeatureCollection', features: [square('A', 0, 0, 50)] },
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    shards: 1,
    poolSize: 1,
    stateDir: null,
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
    ...extra,
  });
}

async function openSocket(port: number): Promise<Socket> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('connect', resolve));
  return socket;
}

/** The router's received-bytes counter (folded from every ingest thread). */
async function receivedBytes(router: Router): Promise<number> {
  return sampleValue(parseExposition(await router.metricsText()), 'geofence_ingest_received_bytes_total') ?? 0;
}

async function waitForBytes(router: Router, bytes: number): Promise<void> {
  const end = Date.now() + 10_000;
  while ((await receivedBytes(router)) < bytes) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${bytes} bytes received`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// No frame deadline: the partial frames wait for the stop however slow the host.
const SETUPS: { name: string; extra: Partial<RouterInput> }[] = [
  { name: 'one ingest thread', extra: { ingestThreads: 1, ingest: { frameDeadlineMs: 0 } } },
  {
    name: 'a connection forwarded to a second ingest thread',
    extra: { ingestThreads: 2, ingest: { frameDeadlineMs: 0 } },
  },
  {
    name: "overload 'backpressure'",
    extra: { ingestThreads: 1, ingest: { overload: 'backpressure', frameDeadlineMs: 0 } },
  },
];

for (const { name, extra } of SETUPS) {
  test(`${name}: frames cut by the stop are cut_at_stop, a frame its sender cut short is truncated_frame`, async () => {
    const got: Trigger[] = [];
    const router = await cutRouter(got, extra);
    const open: Socket[] = [];
    try {
      const port = router.ingestPort!;
      // A sender that closes inside a frame: its fault, truncated_frame.
      const short = Buffer.concat([
        frameOf({ id: 'short', eastM: 0, northM: 0, dtMs: 0 }),
        frameOf({ id: 'x', eastM: 0, northM: 0, dtMs: 0 }).subarray(0, 9),
      ]);
      await sendOverTcp(port, short);
      await waitFor(() => (router.stats().rejected['truncated_frame'] ?? 0) === 1, 10_000, 'the short frame');
      // Two connections left open, each a whole frame then the first bytes of the next (one after the other, so with
      // two ingest threads the second is forwarded).
      let sent = await receivedBytes(router);
      for (const id of ['open-1', 'open-2']) {
        const socket = await openSocket(port);
        open.push(socket);
        const bytes = Buffer.concat([
          frameOf({ id, eastM: 0, northM: 0, dtMs: 0 }),
          frameOf({ id, eastM: 1, northM: 0, dtMs: 1000 }).subarray(0, 12),
        ]);
        socket.write(bytes);
        sent += bytes.length;
        await waitForBytes(router, sent);
      }
      await waitFor(() => router.stats().accepted === 3, 10_000, 'the three whole frames');
      // The reason is a label of its own, nothing cut yet.
      const before = parseExposition(await router.metricsText());
      assert.equal(sampleValue(before, 'geofence_ingest_rejected_total', { reason: 'cut_at_stop' }), 0);
      const s = await router.close();
      assert.equal(s.rejected['cut_at_stop'], 2, JSON.stringify(s.rejected));
      assert.equal(s.rejected['truncated_frame'], 1, JSON.stringify(s.rejected));
      assert.equal(s.rejectedTotal, 3);
      if (extra.ingestThreads === 2) assert.ok(s.admittedByIngestThread[1]! > 0, 'a connection was forwarded');
      assert.deepEqual(got.map((t) => `${String(t.deviceId)} ${t.type} ${t.fenceId} ${t.seq}`).sort(), [
        'open-1 ENTER A 1',
        'open-2 ENTER A 1',
        'short ENTER A 1',
      ]);
      assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    } finally {
      for (const s of open) s.destroy();
      await router.close();
    }
  });
}
