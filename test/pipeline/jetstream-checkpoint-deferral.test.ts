/**
 * A JetStream source whose device state stays in the state directory, against a real nats-server, with a callback
 * that takes nothing (its calls never settle): checkpoints, and with them the acknowledgements, are deferred while the
 * triggers of their pings are held only in memory, but for at most half of `ackWaitMs` since the last one written;
 * then one is written all the same, an error line says what a crash would lose, and the messages are acknowledged
 * before the stream would deliver them again. Close lets the calls go and keeps their triggers for the next start.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import { NatsServer } from '../support/nats-server.js';
import { publishPaced } from '../support/jetstream-publish.js';
import { sinkTraffic } from '../support/sink-run.js';
import { parseExposition } from '../metrics/exposition.js';
import { waitFor, within } from './support.js';

const DEVICES = 100;

test('checkpoints of a JetStream source without a state bucket are deferred while triggers are held only in memory, for at most half of ackWaitMs', async (t) => {
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const traffic = sinkTraffic(61, DEVICES);
  const lines: string[] = [];
  const router = await createRouter({
    fences: traffic.fences,
    checkpointIntervalMs: 500,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-defer-')), 'state'),
    drainDeadlineMs: 500,
    jetstreamSource: { servers: [nats.url], stream: 'TEL', stateBucket: null, ackWaitMs: 4000 },
    downstreams: [{ name: 'cb', kind: 'callback', callback: () => new Promise<void>(() => undefined) }],
    log: (line, level) => lines.push(`${level} ${line}`),
  });
  try {
    await publishPaced(nats.url, traffic, DEVICES, 0, traffic.pings, 5000);
    await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
    // The first checkpoints after the start may already be past the bound (a busy host reading the stream slowly):
    // what is looked at is a deferral and the bound after it.
    const firstDeferred = (): number => lines.findIndex((l) => /^warn checkpoint deferred: /.test(l));
    const forcedAt = (): number =>
      firstDeferred() < 0
        ? -1
        : lines.findIndex(
            (l, i) => i > firstDeferred() && /^error checkpoint written \d+ ms after the last one/.test(l),
          );
    await waitFor(() => forcedAt() >= 0, 20_000, 'a checkpoint deferred, then one written at the bound');
    const deferred = lines.slice(0, forcedAt()).filter((l) => /^warn checkpoint deferred: /.test(l)).length;
    assert.ok(deferred >= 1, `checkpoints deferred before the bound: ${deferred}`);
    const forced = lines[forcedAt()]!;
    const afterMs = Number(/written (\d+) ms after/.exec(forced)![1]);
    assert.ok(afterMs >= 2000, `written at or past half of ackWaitMs (4000 ms): ${afterMs} ms`);
    assert.match(
      forced,
      /although not handed on yet: \d+ triggers of those pings are still held only in memory; a crash now would lose what is held only in memory$/,
    );
    // The messages are acknowledged now, before ackWaitMs would have the stream deliver them again.
    let samples = parseExposition(await router.metricsText());
    const acked = (): number[] =>
      samples.filter((s) => s.name === 'geofence_source_acked_stream_sequence').map((s) => s.value);
    for (let i = 0; i < 100 && !acked().some((v) => v > 0); i++) {
      await new Promise((r) => setTimeout(r, 50));
      samples = parseExposition(await router.metricsText());
    }
    assert.ok(
      acked().some((v) => v > 0),
      `some partition acknowledged: ${JSON.stringify(acked())}`,
    );
    const deferredTotal = samples.find((s) => s.name === 'geofence_checkpoints_deferred_total')?.value ?? 0;
    assert.ok(deferredTotal >= deferred, `geofence_checkpoints_deferred_total ${deferredTotal}`);
  } finally {
    const summary = await within(router.close(), 20_000, 'close()');
    assert.equal(summary.downstreams[0]!.delivered, 0);
    assert.ok(summary.downstreams[0]!.carriedOver > 0, 'what the callback never took is kept for the next start');
  }
});
