/**
 * A router under real load, for the scrape tests: seeded city traffic flooded over TCP into rings far smaller than it
 * (so pings are shed by lane), fresh devices every round until `stop()`; triggers go to a real HTTP webhook that
 * refuses some batches for good (403) and fails others (500: with one attempt per trigger they are dead-lettered as
 * undeliverable and parked, then re-delivered or refused by the replay lane), and to an in-process callback. The
 * scrape is `/metrics` of the router's admin server.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRouter, type Router } from '../../src/index.js';
import { cityTraffic } from '../support/city-traffic.js';
import { sendOverTcp, TriggerServer } from '../pipeline/support.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { parseExposition, type Sample } from './exposition.js';

/** Devices of each flood round (a fresh fleet each round, so triggers keep coming). */
const DEVICES_PER_ROUND = 200;
/** Fences of the synthetic city. */
const FENCES = 2000;
/** Pause between two flood rounds, ms: the webhook catches up, and the replay lane (behind live traffic) gets turns. */
const ROUND_PAUSE_MS = 100;

/** A running loaded router (see the module comment). */
export interface LoadedRouter {
  /** The router. */
  readonly router: Router;
  /** Flood rounds sent so far. */
  readonly rounds: () => number;
  /** The text of one `/metrics` scrape (over HTTP, as Prometheus reads it). */
  scrape(): Promise<string>;
  /** Stops the flood, closes the router and the webhook, removes the state directory. */
  stop(): Promise<void>;
}

/** Starts the router, its webhook and the flood. */
export async function startLoadedRouter(): Promise<LoadedRouter> {
  let batches = 0;
  // Batch by batch: some refused for good, some failed (their triggers parked for replay), the rest received.
  const webhook = new TriggerServer(() => {
    const n = batches++;
    return n % 9 === 4 ? 403 : n % 4 === 1 ? 500 : 200;
  });
  await webhook.start();
  const first = cityTraffic({
    seed: 11,
    fences: FENCES,
    devices: DEVICES_PER_ROUND,
    pingsPerDevice: 20,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
    idPrefix: 'r0-',
  });
  const stateDir = mkdtempSync(join(tmpdir(), 'gr-loaded-'));
  const router = await createRouter({
    fences: first.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: '127.0.0.1',
    adminPort: 0,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    batchSize: 32,
    maxDevices: 1 << 16,
    stateDir,
    downstreams: [
      {
        name: 'hook',
        kind: 'webhook',
        url: webhook.url,
        maxAttempts: 1,
        maxBatchTriggers: 128,
        breaker: { minimumRequests: 100_000, windowSize: 100_000 },
      },
      { name: 'app', kind: 'callback', callback: () => undefined },
    ],
    log: () => undefined,
  });
  let stopped = false;
  let round = 0;
  const flood = (async (): Promise<void> => {
    let traffic = first;
    while (!stopped) {
      await sendOverTcp(router.ingestPort!, traffic.frames, 1 << 20);
      round++;
      await new Promise((r) => setTimeout(r, ROUND_PAUSE_MS));
      if (stopped) break;
      traffic = cityTraffic({
        seed: 11 + round,
        fences: FENCES,
        devices: DEVICES_PER_ROUND,
        pingsPerDevice: 20,
        pingIntervalMs: 8000,
        speedMps: 25,
        dwellMs: 30_000,
        startMs: Date.UTC(2026, 0, 1),
        idPrefix: `r${round}-`,
      });
    }
  })();
  const url = `http://127.0.0.1:${router.adminPort!}/metrics`;
  return {
    router,
    rounds: () => round,
    async scrape(): Promise<string> {
      const res = await fetch(url);
      if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`);
      return res.text();
    },
    async stop(): Promise<void> {
      stopped = true;
      await flood.catch(() => undefined);
      await router.close();
      await webhook.stop();
      rmSync(stateDir, { recursive: true, force: true });
      // Refused batches leave gaps by design; what the webhook accepted is in each device's order (replays included).
      const problems = checkDeliveryContract(webhook.received, { allowRedelivery: true }).problems;
      if (problems.length > 0)
        throw new Error(`delivery contract at the loaded router's webhook: ${problems.join('; ')}`);
    },
  };
}

/** Sum of every sample of `name` whose labels include `match`. */
export function sumOf(samples: readonly Sample[], name: string, match: Record<string, string> = {}): number {
  let total = 0;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  }
  return total;
}

/**
 * Scrapes every 100 ms until `missing(samples)` returns null (nothing missing), and returns that scrape; throws after
 * `timeoutMs` with what the last scrape still missed.
 */
export async function scrapeUntil(
  loaded: LoadedRouter,
  missing: (samples: readonly Sample[]) => string | null,
  timeoutMs = 60_000,
): Promise<{ text: string; samples: Sample[] }> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const text = await loaded.scrape();
    const samples = parseExposition(text);
    const lack = missing(samples);
    if (lack === null) return { text, samples };
    if (Date.now() > end) throw new Error(`after ${timeoutMs} ms of load the scrape still lacks ${lack}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
