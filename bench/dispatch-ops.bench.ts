/**
 * Dispatcher hot-path micro-benchmarks, one thread: a dead-letter ring put (copy of one trigger record with its
 * reason), and a limiter acquire + release carrying one sample into each limit algorithm (gradient, gradient2,
 * vegas, aimd). Inputs are seeded (xorshift32) RTTs and outcomes; results go to a sink so no work is dropped.
 *
 * Run: npx tsc -p tsconfig.json && node --expose-gc dist/bench/dispatch-ops.bench.js   (bench/out/dispatch-ops.json)
 */
import { Bench } from 'tinybench';
import { DeadLetterStatus, Lane, TriggerType } from '../src/shm/layout.js';
import { DeadLetterRing } from '../src/dispatch/dead-letter/ring.js';
import { Limiter, RELEASE_DROPPED, RELEASE_SUCCESS } from '../src/dispatch/limiter.js';
import { AimdLimit, Gradient2Limit, GradientLimit, VegasLimit, type Limit } from '../src/dispatch/limits/index.js';
import { TriggerRecord } from '../test/dispatch/fixtures.js';
import { opsRows, reportOps } from './ring-bench-report.js';

const OPS_PER_CALL = 1 << 16;
const sink = new Float64Array(1);

// Seeded RTTs around 40 ms with a queueing tail, and a 1-in-64 loss pattern.
const RTT_TABLE = new Float64Array(4096);
const DROP_TABLE = new Uint8Array(4096);
let x = 0x2545f491;
for (let k = 0; k < RTT_TABLE.length; k++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  const u = (x >>> 0) / 4294967296;
  RTT_TABLE[k] = 40e6 * (1 + u * u * 1.5);
  DROP_TABLE[k] = (x & 63) === 0 ? 1 : 0;
}

const ring = new DeadLetterRing(4096);
const rec = new TriggerRecord().set(1, TriggerType.ENTER, Lane.COMPLIANCE, 7, 3);
let putTime = 0;

function ringPuts(): void {
  for (let k = 0; k < OPS_PER_CALL; k++) {
    // A flush empties the ring in the dispatcher; here it is cleared when full.
    if (ring.put(rec.f64, rec.i32, 0, 0, k & 7, DeadLetterStatus.PENDING, -1, putTime++) < 0) ring.clear();
  }
  sink[0] = sink[0]! + ring.depth;
}

/** One acquire + release per op at a simulated 1 ms spacing, so the algorithm updates as it would live. */
function limiterTask(limit: Limit): () => void {
  const limiter = new Limiter(limit, 256);
  const cell = limiter.timeCell;
  let t = 0;
  let j = 0;
  return () => {
    for (let k = 0; k < OPS_PER_CALL; k++) {
      t += 1e6;
      cell[0] = t;
      const p = limiter.tryAcquireNow();
      if (p < 0) continue;
      const slot = j++ & 4095;
      cell[0] = t + RTT_TABLE[slot]!;
      limiter.releaseNow(p, DROP_TABLE[slot] === 1 ? RELEASE_DROPPED : RELEASE_SUCCESS);
    }
    sink[0] = sink[0]! + limiter.limit;
  };
}

const names = {
  put: 'dead-letter ring put',
  gradient: 'limiter acquire+release, gradient',
  gradient2: 'limiter acquire+release, gradient2',
  vegas: 'limiter acquire+release, vegas',
  aimd: 'limiter acquire+release, aimd',
} as const;
const bench = new Bench({ name: 'dispatch ops (one thread)', time: 1500, warmupTime: 300, iterations: 10 });
bench.add(names.put, ringPuts);
bench.add(names.gradient, limiterTask(new GradientLimit({ initialLimit: 20, maxLimit: 200 })));
bench.add(names.gradient2, limiterTask(new Gradient2Limit({ initialLimit: 20, maxLimit: 200 })));
bench.add(names.vegas, limiterTask(new VegasLimit({ initialLimit: 20, maxLimit: 200 })));
bench.add(names.aimd, limiterTask(new AimdLimit({ initialLimit: 20, maxLimit: 200 })));
bench.runSync();
const perCall: Record<string, number> = {};
for (const n of Object.values(names)) perCall[n] = OPS_PER_CALL;
reportOps('dispatch-ops', opsRows(bench, perCall), { opsPerCall: OPS_PER_CALL, sink: sink[0] });
