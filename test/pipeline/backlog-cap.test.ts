/**
 * A downstream down long enough to fill its backlog log to `backlogMaxBytes`, through the router's real threads and a
 * real HTTP receiver: the dispatcher holds the trigger rings back (containment pauses; the live TCP edge sheds, counted),
 * and `close()` still finishes: the drain lifts the cap as soon as it begins (not only once the telemetry rings are
 * empty, which they cannot be while the trigger rings are held), so what the rings hold goes to the log. The next
 * start delivers every trigger once, in per-device order.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Trigger } from '../../src/index.js';
import { sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { sinkTraffic } from '../support/sink-run.js';
import { TriggerServer, waitFor, within } from './support.js';

test('a backlog log at its cap holds the trigger rings, and close() still finishes: the drain lifts the cap at once; the next start delivers every trigger once, in per-device order', async (t) => {
  let down = true;
  const receiver = new TriggerServer(() => (down ? 503 : 200));
  await receiver.start();
  t.after(() => receiver.stop());
  const traffic = sinkTraffic(24, 3000);
  const options = {
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-cap-')), 'state'),
    drainDeadlineMs: 500,
    downstreams: [
      {
        name: 'hook',
        kind: 'webhook' as const,
        url: receiver.url,
        queueCapacitySlots: 64,
        backlogMaxBytes: 1 << 20,
      },
    ],
    log: () => undefined,
  };
  const first = await createRouter(options);
  await sendPaced(first.ingestPort!, traffic, 20_000);
  await waitFor(() => first.stats().accepted + first.stats().shedTotal >= traffic.pings, 60_000, 'every ping read');
  await waitFor(() => first.stats().downstreams[0]!.backpressureWaits > 0, 30_000, 'the log reached its cap');
  const before = first.stats();
  assert.ok(
    before.processed < before.accepted,
    `containment paused behind the held rings: ${before.processed} of ${before.accepted} processed`,
  );
  const one = await within(first.close(), 30_000, 'close() with the backlog log at its cap');
  const d1 = one.downstreams[0]!;
  assert.equal(d1.delivered, 0, 'the receiver was down');
  assert.equal(d1.final, 0, 'nothing settled for good');
  assert.equal(d1.carriedOver, one.triggersTotal, 'every trigger kept for the next start');
  assert.ok(d1.backlogBytes > 1 << 20, `the drain took the rings' triggers past the cap: ${d1.backlogBytes} bytes`);

  down = false;
  const second = await createRouter(options);
  await waitFor(
    () => second.stats().downstreams[0]!.delivered + second.stats().downstreams[0]!.replayed >= d1.carriedOver,
    60_000,
    'the next start delivered what was kept',
  );
  const two = await second.close();
  assert.equal(two.downstreams[0]!.final, 0);
  const got: Trigger[] = receiver.received;
  assert.equal(got.length, one.triggersTotal, 'each once');
  assert.deepEqual(checkDeliveryContract(got, { complete: true }).problems, []);
  console.log(
    `backlog cap: ${one.triggersTotal} triggers, ${before.processed} of ${before.accepted} pings processed when ` +
      `close began, ${d1.backpressureWaits} waits at the cap; ${d1.backlogBytes} bytes in the log at close; all ` +
      `delivered at the next start`,
  );
});
