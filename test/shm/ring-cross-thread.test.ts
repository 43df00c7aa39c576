import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { allocateTelemetryRing } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import type { RingProducerData } from './fixtures/ring-producer-thread.js';
import type { RingConsumerData } from './fixtures/ring-consumer-thread.js';

interface ConsumerResult {
  ok: boolean;
  consumed?: number;
  batches?: number;
  seq?: number;
  field?: number;
}
interface ProducerResult {
  produced: number;
  batches: number;
  waits: number;
}

function resultOf<T>(worker: Worker): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`worker exited with code ${code} before reporting`)));
  });
}

/** Runs one producer worker and one consumer worker over a fresh ring; stops both if either fails. */
async function moveRecords(capacitySlots: number, count: number, batchSlots: number, seed: number) {
  const ringBuffer = allocateTelemetryRing(capacitySlots, 0);
  const controlBuffer = new SharedArrayBuffer(4);
  const consumerData: RingConsumerData = { ringBuffer, controlBuffer, count, seed };
  const producerData: RingProducerData = { ringBuffer, controlBuffer, count, seed, batchSlots };
  const consumer = new Worker(new URL('./fixtures/ring-consumer-thread.js', import.meta.url), {
    workerData: consumerData,
  });
  const producer = new Worker(new URL('./fixtures/ring-producer-thread.js', import.meta.url), {
    workerData: producerData,
  });
  const consumerResult = resultOf<ConsumerResult>(consumer);
  const producerResult = resultOf<ProducerResult>(producer);
  try {
    // A consumer that finds a wrong record stops; tell the producer (which may be blocked on a full ring) to stop too.
    const consumed = await consumerResult;
    if (!consumed.ok) Atomics.store(new Int32Array(controlBuffer), 0, 1);
    return { consumed, produced: await producerResult, ring: SpscRing.wrap(ringBuffer) };
  } finally {
    await Promise.allSettled([consumer.terminate(), producer.terminate()]);
  }
}

test('10 million seeded records cross a 1024-slot ring between two threads intact and in order', async () => {
  const count = 10_000_000;
  const { consumed, produced, ring } = await moveRecords(1024, count, 64, 0x5eed1234);
  assert.deepEqual(
    { ok: consumed.ok, seq: consumed.seq, field: consumed.field },
    { ok: true, seq: undefined, field: undefined },
  );
  assert.equal(consumed.consumed, count);
  assert.equal(produced.produced, count);
  // The ring wrapped count / capacity times and holds nothing extra.
  assert.equal(ring.writeSeq(), count);
  assert.equal(ring.readSeq(), count);
  assert.equal(ring.depth(), 0);
});

test('a 4-slot ring with odd batches forces the blocking paths on both sides and loses nothing', async () => {
  const count = 200_000;
  const { consumed, produced, ring } = await moveRecords(4, count, 3, 77);
  assert.equal(consumed.ok, true, `wrong record at seq ${String(consumed.seq)} field ${String(consumed.field)}`);
  assert.equal(consumed.consumed, count);
  assert.equal(produced.produced, count);
  assert.equal(ring.depth(), 0);
});

test('the verifier rejects a record written for a different sequence (a torn or reordered slot)', async () => {
  const { writeSeededRecord, verifySeededRecord } = await import('./fixtures/seeded-records.js');
  const ring = SpscRing.wrap(allocateTelemetryRing(2, 0));
  writeSeededRecord(ring.f64, ring.i32, 0, 0, 41, 9);
  assert.equal(verifySeededRecord(ring.f64, ring.i32, 0, 0, 41, 9), -1);
  assert.notEqual(verifySeededRecord(ring.f64, ring.i32, 0, 0, 42, 9), -1);
  // Tear it: one field from another record.
  writeSeededRecord(ring.f64, ring.i32, ring.strideF64, ring.strideI32, 42, 9);
  ring.f64[5] = ring.f64[ring.strideF64 + 5]!;
  assert.equal(verifySeededRecord(ring.f64, ring.i32, 0, 0, 41, 9), 5);
});
