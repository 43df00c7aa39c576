/**
 * Delivery through a broker that refuses single messages for the moment: the router's MQTT 5 sink against the
 * tests' MQTT 5 server (test/support/mqtt-test-server.ts, over real TCP; Receive Maximum 64, PUBACK after 1 ms)
 * refusing one message in N once (151 quota exceeded and 128 unspecified error, by turns). For each N (0: none), a
 * seeded city's traffic sent over TCP at --rate pings/s; the figure is the time from the first ping until every
 * trigger is acknowledged, and triggers per second over it, with the refusals, the device holds, the whole-downstream
 * backoffs and the breaker's opens. Every run checks that each trigger was accepted once, in per-device order.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/transient-refusals.bench.js [--devices 300] [--every 0,40,4]
 *       [--rate 5000] [--runs 3]
 *
 * Writes bench/out/transient-refusals.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { DownstreamOptions } from '../src/config/options.js';
import type { Trigger } from '../src/index.js';
import { sendPaced } from '../test/support/city-traffic.js';
import { checkDeliveryContract } from '../test/support/delivery-contract.js';
import { MqttTestServer } from '../test/support/mqtt-test-server.js';
import { routerFor, sinkTraffic } from '../test/support/sink-run.js';
import { waitFor } from '../test/pipeline/support.js';

const { values } = parseArgs({
  options: {
    devices: { type: 'string', default: '300' },
    every: { type: 'string', default: '0,40,4' },
    rate: { type: 'string', default: '5000' },
    runs: { type: 'string', default: '3' },
  },
});
const devices = Number(values.devices);
const rate = Number(values.rate);
const runs = Number(values.runs);
const everies = values.every.split(',').map(Number);

/** What one run measured. */
interface RunResult {
  every: number;
  triggers: number;
  drainMs: number;
  triggersPerSec: number;
  refusals: number;
  deviceHolds: number;
  backoffs: number;
  breakerOpens: number;
  deadLettered: number;
  shed: number;
  /** Pings lost with a containment task the watchdog gave up on. */
  lost: number;
}

/** A stable hash of a trigger's identity, for choosing the ones refused. */
function hashOf(t: Trigger): number {
  return [...String(t.deviceId)].reduce((a, c) => (a * 31 + c.charCodeAt(0)) % 9973, t.seq * 7919);
}

async function runOnce(every: number, seed: number): Promise<RunResult> {
  const server = await MqttTestServer.start({
    receiveMaximum: 64,
    ackDelayMs: 1,
    reasonCode: (payload, seenBefore) => {
      if (every === 0 || seenBefore > 0) return 0;
      const t = JSON.parse(payload) as Trigger;
      return hashOf(t) % every === 0 ? (t.seq % 2 === 0 ? 151 : 128) : 0;
    },
  });
  const traffic = sinkTraffic(seed, devices);
  const router = await routerFor(traffic, {
    name: 'mq',
    kind: 'mqtt',
    url: server.url,
    topic: 'gf/{type}/{fenceId}',
    maxAttempts: 10,
  } as DownstreamOptions);
  try {
    const t0 = performance.now();
    await sendPaced(router.ingestPort!, traffic, rate);
    await waitFor(() => router.stats().accepted === traffic.pings, 120_000, 'every ping read');
    await waitFor(
      () => {
        const s = router.stats();
        const d = s.downstreams[0]!;
        return s.processed + s.lost === traffic.pings && d.delivered + d.replayed + d.final === s.triggersTotal;
      },
      300_000,
      'every trigger settled',
    ).catch((e: Error) => {
      const s = router.stats();
      throw new Error(
        `${e.message}: ${traffic.pings} pings, ${s.processed} processed, ${s.lost} lost, ${s.triggersTotal} triggers; ` +
          `${JSON.stringify(s.downstreams[0])}; server: ${server.accepted.length} accepted, ` +
          `${server.connections} connection(s), at most ${server.maxUnacked} unacknowledged, ` +
          `${server.receiveMaximumExceeded} past the Receive Maximum`,
      );
    });
    const drainMs = performance.now() - t0;
    const s = router.stats();
    const d = s.downstreams[0]!;
    const received = server.accepted.map((m) => JSON.parse(m.payload) as Trigger);
    const problems = checkDeliveryContract(received, { complete: true, stays: true }).problems;
    if (problems.length > 0 || received.length !== s.triggersTotal)
      throw new Error(`delivery contract broken: ${received.length} of ${s.triggersTotal}; ${problems.slice(0, 3)}`);
    return {
      every,
      triggers: s.triggersTotal,
      drainMs,
      triggersPerSec: s.triggersTotal / (drainMs / 1000),
      refusals: [...server.refusedByCode.values()].reduce((a, b) => a + b, 0),
      // Absent from builds without device holds.
      deviceHolds: d.deviceHolds ?? NaN,
      backoffs: d.backoffs ?? NaN,
      breakerOpens: d.breakerOpens ?? NaN,
      deadLettered: s.deadLettered,
      shed: s.shedTotal,
      lost: s.lost,
    };
  } finally {
    await router.close();
    await server.stop();
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const results: RunResult[] = [];
for (let r = 0; r < runs; r++) {
  // Interleaved, so the host's drift touches every share alike.
  for (const every of everies) {
    const res = await runOnce(every, 41 + r);
    results.push(res);
    console.log(
      `one in ${every || 'none'}: ${res.triggers} triggers in ${res.drainMs.toFixed(0)} ms = ` +
        `${res.triggersPerSec.toFixed(0)}/s; ${res.refusals} refusals, ${res.deviceHolds} device holds, ` +
        `${res.backoffs} backoffs, breaker opened ${res.breakerOpens}, ${res.deadLettered} dead-lettered, ${res.shed} shed, ${res.lost} lost`,
    );
  }
}
const summary = everies.map((every) => {
  const of = results.filter((r) => r.every === every);
  return {
    every,
    medianTriggersPerSec: median(of.map((r) => r.triggersPerSec)),
    medianDrainMs: median(of.map((r) => r.drainMs)),
  };
});
for (const s of summary)
  console.log(
    `median, one in ${s.every || 'none'} refused once: ${s.medianTriggersPerSec.toFixed(0)} triggers/s (${s.medianDrainMs.toFixed(0)} ms)`,
  );
const outDir = fileURLToPath(new URL('../../bench/out/', import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, 'transient-refusals.json'),
  JSON.stringify({ devices, rate, runs, results, summary }, null, 2),
);
