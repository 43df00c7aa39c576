/**
 * One row of the burst bench (bench/burst.bench.ts) in a process of its own, so that each row's router starts fresh
 * and its RSS is its own: `createRouter` with its TCP listener on loopback and one in-process callback downstream.
 *
 *   node dist/bench/burst/router-row.js '<RowSpec as JSON>'
 *
 * Protocol (lines of JSON on stdout): first `{"port": N}` once the router listens; then, after the parent writes
 * `finish <pings sent>` on stdin, it waits until the router has taken every ping sent (accepted or rejected) and
 * processed and delivered everything it admitted, closes the router and prints one RowReport line.
 *
 * Every `sampleMs` it reads the router's own `/metrics` text (`router.metricsText()`, the exposition the admin server
 * would serve) and keeps a sample: telemetry ring fill, offered / admitted / shed per lane, processed, the held-time
 * histograms (admission -> handed to the downstream) overall and per lane, and this process's RSS. The callback
 * measures, per trigger, the time from the ping's event time (the generator's intended send time) to its delivery,
 * per lane: the wait in front of the router (socket buffers, the generator's queue) plus the held time.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRouter, type RouterOptionsInput, type Trigger } from '../../src/index.js';
import { histogramOf, parseMetrics, shardRings, sumOf, type Series } from '../soak/scrape.js';
import { E2E_BUCKET_COUNT, e2eBucketOf } from './e2e-histogram.js';

/** What the parent asks of one row. */
export interface RowSpec {
  /** The row's name (for logs). */
  row: string;
  /** Path of the fences file (GeoJSON). */
  fencesPath: string;
  /** Router options of the row beyond the common ones (admission, ingest.overload, ...). */
  options: RouterOptionsInput;
  /** Sampling period, ms. */
  sampleMs: number;
}

/** Trigger lanes as the held-time histograms label them (a trigger's lane is its fence's class). */
const TRIGGER_LANES = ['compliance', 'transition'] as const;
const PING_LANES = ['idle', 'transition', 'compliance'] as const;

/** One sample of the row's time series (counters cumulative since the router started). */
export interface RowSample {
  /** Epoch ms of the read. */
  atMs: number;
  /** Telemetry records in the rings / their capacity, all shards. */
  ringDepth: number;
  ringCapacity: number;
  offered: Record<string, number>;
  admitted: Record<string, number>;
  shed: Record<string, number>;
  processed: number;
  delivered: number;
  /** Connections the router closed, by reason (only reasons seen). */
  connectionsDropped: Record<string, number>;
  rssBytes: number;
  /** Held-time bucket counts (not cumulative over buckets), overall and per trigger lane. */
  held: Record<string, number[]>;
  /** Intended-send -> delivered bucket counts per trigger lane (see e2e-histogram.ts). */
  e2e: Record<string, number[]>;
}

/** What a row reports at the end. */
export interface RowReport {
  row: string;
  /** Upper bounds of the held-time buckets, seconds (Infinity last). */
  heldBounds: number[];
  samples: RowSample[];
  /** Peak resident set of the router process (VmHWM), bytes. */
  peakRssBytes: number;
  /** Final counts from close(). */
  final: {
    accepted: number;
    rejected: number;
    offered: Record<string, number>;
    admitted: Record<string, number>;
    shed: Record<string, Record<string, number>>;
    processed: number;
    triggers: number;
    delivered: number;
    deadLettered: number;
    /** Pings that found a device inside a fence it had no entry left for (untracked stays). */
    fenceOverflows: number;
  };
  /** Error-level log lines (COMPLIANCE shed alarms), counted, and the first few. */
  errorLines: number;
  errorExamples: string[];
  /** True when the router took every ping sent and delivered what it admitted before the deadlines. */
  settled: boolean;
}

function peakRssBytes(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? Number.NaN : Number(m[1]) * 1024;
  } catch {
    return Number.NaN;
  }
}

/** `geofence_ingest_connections_dropped_total` by reason, the non-zero ones. */
function droppedByReason(s: Series): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, v] of s) {
    const m = /^geofence_ingest_connections_dropped_total\{reason="([^"]+)"\}$/.exec(key);
    if (m !== null && v > 0) out[m[1]!] = v;
  }
  return out;
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2]!) as RowSpec;
  const e2e: Record<string, number[]> = Object.fromEntries(
    TRIGGER_LANES.map((l) => [l, new Array<number>(E2E_BUCKET_COUNT).fill(0)]),
  );
  let errorLines = 0;
  const errorExamples: string[] = [];
  const router = await createRouter({
    fences: JSON.parse(readFileSync(spec.fencesPath, 'utf8')) as unknown,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir: null,
    ...spec.options,
    downstreams: [
      {
        name: 'sink',
        kind: 'callback',
        callback: (triggers: readonly Trigger[]) => {
          const now = Date.now();
          for (const t of triggers) e2e[t.lane]![e2eBucketOf(now - t.eventTimeMs)]!++;
        },
      },
    ],
    log: (line, level) => {
      if (level !== 'error') return;
      errorLines++;
      if (errorExamples.length < 3) errorExamples.push(line);
    },
  });
  process.stdout.write(`${JSON.stringify({ port: router.ingestPort })}\n`);

  const samples: RowSample[] = [];
  let heldBounds: number[] = [];
  const take = async (): Promise<void> => {
    const s: Series = parseMetrics(await router.metricsText());
    const held: Record<string, number[]> = {};
    const all = histogramOf(s, 'geofence_held_time_seconds', {});
    heldBounds = all.bounds;
    held.all = all.counts;
    for (const lane of TRIGGER_LANES)
      held[lane] = histogramOf(s, 'geofence_dispatch_held_time_seconds', { downstream: 'sink', lane }).counts;
    const perLane = (name: string): Record<string, number> =>
      Object.fromEntries(PING_LANES.map((lane) => [lane, sumOf(s, name, { lane })]));
    samples.push({
      atMs: Date.now(),
      ringDepth: shardRings(s, 'geofence_ring_depth_slots'),
      ringCapacity: shardRings(s, 'geofence_ring_capacity_slots'),
      offered: perLane('geofence_pings_offered_total'),
      admitted: perLane('geofence_pings_admitted_total'),
      shed: perLane('geofence_pings_shed_total'),
      processed: sumOf(s, 'geofence_pings_processed_total'),
      delivered: sumOf(s, 'geofence_dispatch_delivered_total'),
      connectionsDropped: droppedByReason(s),
      rssBytes: process.memoryUsage.rss(),
      held,
      e2e: Object.fromEntries(TRIGGER_LANES.map((l) => [l, [...e2e[l]!]])),
    });
  };
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const next = Date.now() + spec.sampleMs;
      await take();
      await sleep(Math.max(1, next - Date.now()));
    }
  })();

  const sent = await new Promise<number>((resolve) => {
    const rl = createInterface({ input: process.stdin });
    rl.on('line', (line) => {
      const m = /^finish (\d+)$/.exec(line.trim());
      if (m !== null) {
        rl.close();
        resolve(Number(m[1]));
      }
    });
  });
  // Everything sent reaches admission (or is rejected), then everything admitted is processed and delivered. Pings
  // that never arrive (a connection the router closed) stop the wait once nothing has arrived for 5 s.
  let settled = false;
  let lastTaken = -1;
  let lastProgressMs = Date.now();
  for (;;) {
    const st = router.stats();
    const taken = st.accepted + st.rejectedTotal;
    if (taken >= sent) break;
    if (taken !== lastTaken) {
      lastTaken = taken;
      lastProgressMs = Date.now();
    } else if (Date.now() - lastProgressMs > 5000) break;
    await sleep(20);
  }
  const deliveredBy = Date.now() + 60_000;
  for (;;) {
    const st = router.stats();
    if (st.processed >= st.admittedTotal && st.inFlight === 0) {
      settled = st.accepted + st.rejectedTotal >= sent;
      break;
    }
    if (Date.now() > deliveredBy) break;
    await sleep(20);
  }
  sampling = false;
  await sampler;
  await take();
  const summary = await router.close();
  const report: RowReport = {
    row: spec.row,
    heldBounds,
    samples,
    peakRssBytes: peakRssBytes(),
    final: {
      accepted: summary.accepted,
      rejected: summary.rejectedTotal,
      offered: summary.offered,
      admitted: summary.admitted,
      shed: summary.shed,
      processed: summary.processed,
      triggers: summary.triggersTotal,
      delivered: summary.delivered,
      deadLettered: summary.deadLettered,
      fenceOverflows: summary.fenceOverflows,
    },
    errorLines,
    errorExamples,
    settled,
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`router-row: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
