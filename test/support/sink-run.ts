/**
 * One run of the sink tests: a seeded city (300 fences, 20 pings a device, CROSS-heavy), a router over it with one
 * downstream under test, the traffic sent over TCP, and the wait until every trigger is acknowledged there.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRouter, type Router, type RouterSummary, type Trigger } from '../../src/index.js';
import type { DownstreamOptions, RouterOptionsInput } from '../../src/config/options.js';
import { cityTraffic, sendPaced, type CityTraffic } from './city-traffic.js';
import { waitFor } from '../pipeline/support.js';
import { checkDeliveryContract } from './delivery-contract.js';

/** The sink tests' seeded city with `devices` devices. */
export function sinkTraffic(seed: number, devices = 500): CityTraffic {
  return cityTraffic({
    seed,
    fences: 300,
    devices,
    pingsPerDevice: 20,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
}

/** A router over `traffic`'s fences, listening on a free loopback port, delivering to `downstream` only (or to each). */
export function routerFor(
  traffic: CityTraffic,
  downstream: DownstreamOptions | DownstreamOptions[],
  stateDir?: string,
  extra: RouterOptionsInput = {},
): Promise<Router> {
  return createRouter({
    ...extra,
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    stateDir: stateDir ?? join(mkdtempSync(join(tmpdir(), 'gr-sink-')), 'state'),
    downstreams: Array.isArray(downstream) ? downstream : [downstream],
    log: () => undefined,
  });
}

/** Waits until every ping is read and every trigger delivered (or replayed) at the first downstream; then closes. */
export async function finishRun(router: Router, traffic: CityTraffic): Promise<RouterSummary> {
  await waitFor(() => router.stats().accepted === traffic.pings, 60_000, 'every ping read');
  await waitFor(
    () => {
      const d = router.stats().downstreams[0]!;
      return d.delivered + d.replayed === router.stats().triggersTotal;
    },
    60_000,
    'every trigger acknowledged',
  ).catch((e: Error) => {
    throw new Error(`${e.message}: ${JSON.stringify(router.stats().downstreams[0])}`);
  });
  return router.close();
}

/**
 * Waits until `pings` pings are processed and every trigger is settled at the first downstream (delivered, replayed or
 * dead-lettered for good); the downstream's figures in the error when it times out.
 */
export async function waitSettled(router: Router, pings: number, timeoutMs = 60_000): Promise<void> {
  const settled = (): boolean => {
    const s = router.stats();
    const d = s.downstreams[0]!;
    return s.processed === pings && d.delivered + d.replayed + d.final === s.triggersTotal;
  };
  await waitFor(settled, timeoutMs, 'every trigger settled').catch((e: Error) => {
    throw new Error(`${e.message}: ${JSON.stringify(router.stats().downstreams[0])}`);
  });
}

/** Sends `traffic` at `perSec` and finishes the run. */
export async function runThrough(router: Router, traffic: CityTraffic, perSec: number): Promise<RouterSummary> {
  await sendPaced(router.ingestPort!, traffic, perSec);
  return finishRun(router, traffic);
}

/** The triggers one router gives for `traffic` sent over TCP at 20,000 pings/s (a reference for other sources). */
export async function tcpReferenceTriggers(traffic: CityTraffic): Promise<Trigger[]> {
  const got: Trigger[] = [];
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    stateDir: join(mkdtempSync(join(tmpdir(), 'gr-reference-')), 'state'),
    downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void got.push(...ts) }],
    log: () => undefined,
  });
  await sendPaced(router.ingestPort!, traffic, 20_000);
  await waitFor(() => router.stats().accepted === traffic.pings, 60_000, 'reference: every ping read');
  await waitFor(
    () => router.stats().downstreams[0]!.delivered === router.stats().triggersTotal,
    60_000,
    'reference: every trigger delivered',
  );
  const summary = await router.close();
  if (summary.shedTotal !== 0) throw new Error(`the reference run shed ${summary.shedTotal} pings`);
  // A reference others are held to keeps the contract itself: each device's seqs 1, 2, 3 ... in order.
  const problems = checkDeliveryContract(got, { complete: true }).problems;
  if (problems.length > 0) throw new Error(`the reference run broke the delivery contract: ${problems.join('; ')}`);
  return got;
}
