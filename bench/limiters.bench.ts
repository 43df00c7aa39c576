/**
 * Limiter comparison against a real HTTP downstream in a separate process whose capacity changes during each run:
 * 1x (16 workers), then 2x (32), then 0.6x (10 workers); service time 40 ms. For each limiter a fresh Dispatcher
 * offers triggers at a fixed rate above the largest capacity and the figures are taken side by side:
 * utilisation of true capacity, P99 trigger latency (send to acknowledgment), overload episodes, deferred triggers.
 *
 * Run: npm run build && node --expose-gc dist/bench/limiters.bench.js   (writes bench/out/limiters.json)
 */
import { fork, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Lane, TriggerType } from '../src/shm/layout.js';
import { nowNs } from '../src/shm/clock.js';
import { Dispatcher } from '../src/dispatch/dispatcher.js';
import { AimdLimit, FixedLimit, Gradient2Limit, GradientLimit, VegasLimit, type Limit } from '../src/dispatch/limits/index.js';
import { IndexNamer } from '../src/dispatch/sinks/format.js';
import { WebhookSink } from '../src/dispatch/sinks/webhook-sink.js';
import { TriggerRecord } from '../test/dispatch/fixtures.js';

const SERVICE_MS = 40;
const BASE_WORKERS = 16;
const PHASES: [string, number, number][] = [
  ['1x', BASE_WORKERS, 6000],
  ['2x', BASE_WORKERS * 2, 6000],
  ['0.6x', Math.round(BASE_WORKERS * 0.6), 6000],
];
const OFFER_PER_S = 1000; // above the 2x capacity of 800 requests/s
const TICK_MS = 5;
const SEED = 0x5eed;

interface Row {
  limiter: string;
  utilisation: number;
  p50Ms: number;
  p99Ms: number;
  overloadEpisodes: number;
  deferred: number;
  delivered: number;
  refused503: number;
  meanLimitPerPhase: number[];
}

function rpc<T>(child: ChildProcess, msg: object, reply?: string): Promise<T> {
  return new Promise((resolve) => {
    if (reply === undefined) {
      child.send(msg);
      resolve(undefined as T);
      return;
    }
    const on = (m: { op: string }): void => {
      if (m.op !== reply) return;
      child.off('message', on);
      resolve(m as T);
    };
    child.on('message', on);
    child.send(msg);
  });
}

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

async function runOne(child: ChildProcess, port: number, name: string, limit: Limit, safetyCap: number, phases: [string, number, number][]): Promise<Row> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `bench-${name}-`));
  const namer = new IndexNamer();
  const rtts = new Float64Array(200_000);
  let nRtt = 0;
  const d = new Dispatcher({
    deadLetterDir: dir,
    namer,
    downstreams: [
      {
        name,
        sink: new WebhookSink({ url: `http://127.0.0.1:${port}/`, timeoutMs: 1000, maxSockets: 256 }, namer),
        limit,
        safetyCap,
        maxBatchTriggers: 1,
        queueCapacitySlots: 256,
        maxQueueAgeMs: 250,
        replay: false,
        breaker: { minimumRequests: 1000, windowSize: 1000, failureRateThreshold: 0.9 },
      },
    ],
    onDelivered: (_d, batch, now) => {
      if (nRtt < rtts.length) rtts[nRtt++] = (now - batch.sentAtNs) / 1e6;
    },
  });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  let seq = 0;
  let rand = SEED;
  await rpc(child, { op: 'workers', workers: phases[0]![1] });
  await rpc(child, { op: 'reset' });
  let capacityMs = 0;
  const meanLimits: number[] = [];
  for (const [, workers, ms] of phases) {
    await rpc(child, { op: 'workers', workers });
    const start = performance.now();
    let offeredInPhase = 0;
    let limitSum = 0;
    let limitN = 0;
    while (performance.now() - start < ms) {
      const due = Math.floor(((performance.now() - start) / 1000) * OFFER_PER_S);
      while (offeredInPhase < due) {
        offeredInPhase++;
        seq++;
        // Seeded lane mix: one in ten is COMPLIANCE.
        rand = (Math.imul(rand, 1103515245) + 12345) >>> 0;
        const lane = rand % 10 === 0 ? Lane.COMPLIANCE : Lane.TRANSITION;
        d.offer(r.set(seq, TriggerType.ENTER, lane, seq & 1023, seq & 4095, nowNs()).f64, r.i32, 0, 0);
      }
      d.pump();
      limitSum += ds.limiter.limit;
      limitN++;
      await new Promise((res) => setTimeout(res, TICK_MS));
    }
    capacityMs += workers * (performance.now() - start);
    meanLimits.push(limitSum / limitN);
  }
  const stats = await rpc<{ busyMs: number; served: number; refused: number; episodes: number }>(child, { op: 'stats' }, 'stats');
  await d.close(2000);
  fs.rmSync(dir, { recursive: true, force: true });
  const sorted = rtts.slice(0, nRtt).sort();
  return {
    limiter: name,
    utilisation: stats.busyMs / capacityMs,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    overloadEpisodes: stats.episodes,
    deferred: ds.deadLettered,
    delivered: ds.delivered,
    refused503: stats.refused,
    meanLimitPerPhase: meanLimits,
  };
}

async function main(): Promise<void> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const child = fork(path.join(here, 'dispatch-capacity-server.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = await new Promise<{ port: number }>((resolve) => child.once('message', (m) => resolve(m as { port: number })));
  await rpc(child, { op: 'config', config: { serviceMs: SERVICE_MS, queueLimit: 64, overloadWaitMs: SERVICE_MS, overloadMinMs: 200 } });
  // Unloaded latency: one request at a time.
  const unloaded = await runOne(child, ready.port, 'unloaded', new FixedLimit(1), 1, [['1x', BASE_WORKERS, 2000]]);
  const candidates: [string, () => Limit, number][] = [
    ['fixed-low (10)', () => new FixedLimit(10), 256],
    ['fixed-high (32)', () => new FixedLimit(32), 256],
    ['aimd', () => new AimdLimit({ initialLimit: 10, minLimit: 2, maxLimit: 200 }), 256],
    ['vegas', () => new VegasLimit({ initialLimit: 10, minLimit: 2, maxLimit: 200 }), 256],
    ['gradient2', () => new Gradient2Limit({ initialLimit: 10, minLimit: 2, maxLimit: 200 }), 256],
    ['gradient', () => new GradientLimit({ initialLimit: 10, minLimit: 2, maxLimit: 200 }), 256],
    ['gradient + cap 48', () => new GradientLimit({ initialLimit: 10, minLimit: 2, maxLimit: 200 }), 48],
  ];
  const rows: Row[] = [];
  for (const [name, make, cap] of candidates) rows.push(await runOne(child, ready.port, name, make(), cap, PHASES));
  child.send({ op: 'exit' });
  const base = unloaded.p99Ms;
  console.log(`unloaded latency (1 in flight): P50 ${unloaded.p50Ms.toFixed(1)} ms, P99 ${base.toFixed(1)} ms`);
  console.table(
    rows.map((r) => ({
      limiter: r.limiter,
      'utilisation %': (r.utilisation * 100).toFixed(1),
      'P50 ms': r.p50Ms.toFixed(1),
      'P99 ms': r.p99Ms.toFixed(1),
      'P99 / unloaded': (r.p99Ms / base).toFixed(2),
      'overload episodes': r.overloadEpisodes,
      deferred: r.deferred,
      delivered: r.delivered,
      '503s': r.refused503,
      'mean limit 1x/2x/0.6x': r.meanLimitPerPhase.map((x) => x.toFixed(1)).join(' / '),
    })),
  );
  fs.mkdirSync('bench/out', { recursive: true });
  fs.writeFileSync('bench/out/limiters.json', JSON.stringify({ unloaded, rows, serviceMs: SERVICE_MS, baseWorkers: BASE_WORKERS, offerPerS: OFFER_PER_S }, null, 2));
}

await main();
