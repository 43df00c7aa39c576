/**
 * Cross-thread ring throughput: this thread writes telemetry records (9 fields) and publishes them in batches; a
 * consumer worker_thread reads them and releases each batch it sees. One call moves RECORDS_PER_CALL records and
 * returns once the consumer has released them all. Rows vary ring size, batch size and consumer spin count.
 * Run: npx tsc -p tsconfig.json && node --expose-gc dist/bench/ring-cross-thread.bench.js
 */
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import { Bench } from 'tinybench';
import { allocateTelemetryRing } from '../src/shm/regions.js';
import { SpscRing } from '../src/shm/ring.js';
import {
  TEL_ACCURACY_M_F64,
  TEL_ADMIT_TIME_NS_F64,
  TEL_DEVICE_SLOT_I32,
  TEL_EVENT_TIME_MS_F64,
  TEL_HEADING_DEG_F64,
  TEL_LANE_I32,
  TEL_LAT_F64,
  TEL_LON_F64,
  TEL_SPEED_MPS_F64,
} from '../src/shm/layout.js';
import type { RingDrainData } from './fixtures/ring-drain-thread.js';
import { opsRows, reportOps } from './ring-bench-report.js';

const RECORDS_PER_CALL = 1 << 21;

interface Config {
  capacitySlots: number;
  batchSlots: number;
  spinIterations: number;
}
const CONFIGS: Config[] = [
  { capacitySlots: 1024, batchSlots: 1, spinIterations: 200 },
  { capacitySlots: 1024, batchSlots: 64, spinIterations: 200 },
  { capacitySlots: 4096, batchSlots: 256, spinIterations: 200 },
  { capacitySlots: 16384, batchSlots: 1024, spinIterations: 200 },
  { capacitySlots: 16384, batchSlots: 1024, spinIterations: 2000 },
];

/** Writes `count` records through `ring`, `batchSlots` per publish, blocking while it is full; waits for the drain. */
function produce(ring: SpscRing, count: number, batchSlots: number, spinIterations: number, seq0: number): void {
  const { f64, i32, strideF64, strideI32, capacitySlots } = ring;
  let seq = seq0;
  const end = seq0 + count;
  while (seq < end) {
    let free = ring.freeSlots(batchSlots);
    // Why: wait for room for a whole batch (fewer, larger publishes), but take what there is after a timeout.
    if (free < batchSlots) free = ring.waitForSpace(batchSlots, 20, spinIterations);
    let n = end - seq;
    if (n > free) n = free;
    if (n > batchSlots) n = batchSlots;
    for (let k = 0; k < n; k++) {
      const slot = ring.claim();
      const b = slot * strideF64;
      f64[b + TEL_LAT_F64] = 52 + (seq & 1023) * 1e-5;
      f64[b + TEL_LON_F64] = 13 + (seq & 511) * 1e-5;
      f64[b + TEL_EVENT_TIME_MS_F64] = 1.7e12 + seq;
      f64[b + TEL_ADMIT_TIME_NS_F64] = 3e16 + seq;
      f64[b + TEL_SPEED_MPS_F64] = seq & 31;
      f64[b + TEL_HEADING_DEG_F64] = seq % 360;
      f64[b + TEL_ACCURACY_M_F64] = 5;
      i32[slot * strideI32 + TEL_DEVICE_SLOT_I32] = seq & 0xffff;
      i32[slot * strideI32 + TEL_LANE_I32] = seq & 1;
      seq++;
    }
    ring.publish();
  }
  // The call ends when the consumer has released everything.
  while (ring.freeSlots(capacitySlots) < capacitySlots) ring.waitForSpace(capacitySlots, 20, spinIterations);
}

const results: Array<{ config: Config; consumed: number }> = [];
const opsPerCall: Record<string, number> = {};
const bench = new Bench({ name: 'ring (two threads)', time: 2000, warmupTime: 300, iterations: 10 });
const workers: Array<{ worker: Worker; control: Int32Array; config: Config }> = [];
for (const config of CONFIGS) {
  const ringBuffer = allocateTelemetryRing(config.capacitySlots, 0);
  const controlBuffer = new SharedArrayBuffer(4);
  const data: RingDrainData = { ringBuffer, controlBuffer, spinIterations: config.spinIterations };
  const worker = new Worker(new URL('./fixtures/ring-drain-thread.js', import.meta.url), { workerData: data });
  await once(worker, 'online');
  workers.push({ worker, control: new Int32Array(controlBuffer), config });
  const ring = SpscRing.wrap(ringBuffer);
  const name = `ring ${config.capacitySlots}, batch ${config.batchSlots}, spin ${config.spinIterations}`;
  opsPerCall[name] = RECORDS_PER_CALL;
  let seq = 0;
  bench.add(name, () => {
    produce(ring, RECORDS_PER_CALL, config.batchSlots, config.spinIterations, seq);
    seq += RECORDS_PER_CALL;
  });
}
bench.runSync();
for (const { worker, control, config } of workers) {
  const reply = once(worker, 'message');
  Atomics.store(control, 0, 1);
  const [msg] = (await reply) as [{ consumed: number }];
  results.push({ config, consumed: msg.consumed });
  await worker.terminate();
}
reportOps('ring-cross-thread', opsRows(bench, opsPerCall), { recordsPerCall: RECORDS_PER_CALL, consumed: results });
