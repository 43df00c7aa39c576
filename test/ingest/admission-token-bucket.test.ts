import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TokenBucket } from '../../src/ingest/token-bucket.js';

const T0 = 1e15;

test('a bucket starts full and hands out exactly its capacity as a burst', () => {
  const bucket = new TokenBucket(5, 100, T0);
  assert.equal(bucket.tokens(T0), 5);
  let taken = 0;
  while (bucket.tryTake(T0)) taken++;
  assert.equal(taken, 5);
  assert.equal(bucket.tokens(T0), 0);
});

test('tokens refill lazily at the configured rate and never above capacity', () => {
  const bucket = new TokenBucket(10, 1000, T0);
  assert.equal(bucket.tryTake(T0, 10), true);
  // 1000 tokens/s = one token per ms.
  assert.equal(bucket.tryTake(T0 + 0.5e6), false);
  assert.equal(bucket.tryTake(T0 + 1e6), true);
  assert.ok(Math.abs(bucket.tokens(T0 + 4e6) - 3) < 1e-9);
  assert.equal(bucket.tokens(T0 + 60e9), 10);
});

test('taking several tokens at once needs that many', () => {
  const bucket = new TokenBucket(4, 0, T0);
  assert.equal(bucket.tryTake(T0, 3), true);
  assert.equal(bucket.tryTake(T0, 2), false);
  assert.equal(bucket.tryTake(T0, 1), true);
  assert.equal(bucket.tryTake(T0 + 1e12), false, 'a zero rate never refills');
});

test('a clock that steps back neither refills nor moves the reference point back', () => {
  const bucket = new TokenBucket(2, 1000, T0);
  bucket.tryTake(T0, 2);
  assert.equal(bucket.tokens(T0 - 5e6), 0);
  // Had the reference moved back to T0 - 5 ms, 6 tokens' worth of time would count here.
  assert.ok(Math.abs(bucket.tokens(T0 + 1e6) - 1) < 1e-9);
});

test('over a long run a bucket admits no more than capacity + rate * elapsed', () => {
  const bucket = new TokenBucket(8, 2500, T0);
  let taken = 0;
  let now = T0;
  for (let i = 0; i < 100_000; i++) {
    now += (i * 7919) % 100_000; // uneven steps, 0..100 µs
    if (bucket.tryTake(now)) taken++;
  }
  const allowed = 8 + (2500 * (now - T0)) / 1e9;
  assert.ok(taken <= allowed + 1e-6, `${taken} > ${allowed}`);
  assert.ok(taken >= allowed - 1 - 1e-6, `${taken} well under ${allowed}: the bucket throttles too hard`);
});

test('bad bucket parameters are rejected by name', () => {
  assert.throws(() => new TokenBucket(0, 1, T0), /capacityTokens must be a finite number > 0, got 0/);
  assert.throws(() => new TokenBucket(Infinity, 1, T0), /capacityTokens/);
  assert.throws(() => new TokenBucket(1, -1, T0), /refillPerSecond must be a finite number >= 0, got -1/);
  assert.throws(() => new TokenBucket(1, NaN, T0), /refillPerSecond/);
  assert.throws(() => new TokenBucket(1, 1, NaN), /nowNs must be a finite number/);
});
