/**
 * The Netflix concurrency-limits library's own unit tests of its limits (concurrency-limits-core, test package
 * `com.netflix.concurrency.limits.limit`), replayed against our classes: same inputs, same expected limits. Each test is
 * named after the Java case it reproduces. The Java `onSample(startTime, rtt, inflight, didDrop)` takes nanoseconds, as
 * ours does, so `TimeUnit.MILLISECONDS.toNanos(10)` is `10 * MS` here and `TimeUnit.SECONDS.toNanos(10)` is `10 * S`.
 *
 * The library has no unit test of Gradient2Limit; its long RTT is the library's ExpAvgMeasurement, whose test is
 * replayed here through Gradient2Limit's `referenceRttNs`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AimdLimit, Gradient2Limit, VegasLimit } from '../../src/dispatch/limits/index.js';

const MS = 1e6;
const S = 1e9;

/** Asserts `actual` within `delta` of `expected`, as JUnit's assertEquals(double, double, delta). */
function assertWithin(actual: number, expected: number, delta: number, what: string): void {
  assert.ok(Math.abs(actual - expected) <= delta, `${what}: ${actual} is not within ${delta} of ${expected}`);
}

// AIMDLimitTest. The Java builder's floor is 20 by default, ours 1.

test('AIMDLimitTest.testDefault', () => {
  // In Java the initial limit 10 sits under the default floor of 20 (a logged warning) until the first sample; our
  // floor defaults to 1, so 10 is a valid start. The case asserts the limit before any sample.
  const limit = new AimdLimit({ initialLimit: 10 });
  assert.equal(limit.limit, 10);
});

test('AIMDLimitTest.increaseOnSuccess', () => {
  const limit = new AimdLimit({ initialLimit: 20 });
  limit.onSample(0, 1 * MS, 10, false);
  assert.equal(limit.limit, 21);
});

test('AIMDLimitTest.decreaseOnDrops', () => {
  const limit = new AimdLimit({ initialLimit: 30 });
  limit.onSample(0, 0, 0, true);
  assert.equal(limit.limit, 27);
});

test('AIMDLimitTest.successOverflow', () => {
  // The Java case sets minLimit(0); our floor is at least 1 (a limit of 0 admits nothing), and the case is about the
  // ceiling, which a floor of 1 does not touch.
  const limit = new AimdLimit({ initialLimit: 21, maxLimit: 21, minLimit: 1 });
  limit.onSample(0, 1 * MS, 10, false);
  // After a success the limit is still at the ceiling.
  assert.equal(limit.limit, 21);
});

// VegasLimitTest. The Java probe jitter is random in [0.5, 1); none of these cases runs long enough to probe
// (the first probe comes after at least 0.5 * 30 * L samples), so our seeded jitter changes nothing.

/** VegasLimitTest.create(): alpha 3, beta 6 (constants), smoothing 1, initial limit 10, ceiling 20. */
function create(): VegasLimit {
  return new VegasLimit({ alpha: 3, beta: 6, smoothing: 1, initialLimit: 10, maxLimit: 20 });
}

test('VegasLimitTest.largeLimitIncrease', () => {
  const limit = new VegasLimit({ initialLimit: 10000, maxLimit: 20000 });
  limit.onSample(0, 10 * S, 5000, false);
  assert.equal(limit.limit, 10000);
  limit.onSample(0, 10 * S, 6000, false);
  assert.equal(limit.limit, 10024);
});

test('VegasLimitTest.increaseLimit', () => {
  const limit = create();
  limit.onSample(0, 10 * MS, 10, false);
  assert.equal(limit.limit, 10);
  limit.onSample(0, 10 * MS, 11, false);
  assert.equal(limit.limit, 16);
});

test('VegasLimitTest.decreaseLimit', () => {
  const limit = create();
  limit.onSample(0, 10 * MS, 10, false);
  assert.equal(limit.limit, 10);
  limit.onSample(0, 50 * MS, 11, false);
  assert.equal(limit.limit, 9);
});

test('VegasLimitTest.noChangeIfWithinThresholds', () => {
  const limit = create();
  limit.onSample(0, 10 * MS, 10, false);
  assert.equal(limit.limit, 10);
  limit.onSample(0, 14 * MS, 14, false);
  assert.equal(limit.limit, 10);
});

/** The two smoothing cases, each run through the current and the deprecated Java builder method. */
function decreaseHalving(smoothing: number | undefined, expected: readonly [number, number, number]): void {
  const limit = new VegasLimit({
    decrease: (current) => current / 2,
    ...(smoothing === undefined ? {} : { smoothing }),
    initialLimit: 100,
    maxLimit: 200,
  });
  // Pick up the first min RTT.
  limit.onSample(0, 10 * MS, 100, false);
  assert.equal(limit.limit, expected[0]);
  // First decrease.
  limit.onSample(0, 20 * MS, 100, false);
  assert.equal(limit.limit, expected[1]);
  // Second decrease.
  limit.onSample(0, 20 * MS, 100, false);
  assert.equal(limit.limit, expected[2]);
}

test('VegasLimitTest.decreaseSmoothing', () => {
  decreaseHalving(0.5, [100, 75, 56]);
});

test('VegasLimitTest.decreaseSmoothingDeprecatedBuilderMethod', () => {
  // The Java case differs from decreaseSmoothing only by the deprecated builder method `decrease(Function)`; ours has
  // one option, `decrease`, so this is the same run.
  decreaseHalving(0.5, [100, 75, 56]);
});

test('VegasLimitTest.decreaseWithoutSmoothing', () => {
  decreaseHalving(undefined, [100, 50, 25]);
});

test('VegasLimitTest.decreaseWithoutSmoothingDeprecatedBuilderMethod', () => {
  // As decreaseWithoutSmoothing (the deprecated `decrease(Function)` builder method has no counterpart here).
  decreaseHalving(undefined, [100, 50, 25]);
});

// ExpAvgMeasurementTest, through Gradient2Limit: its long RTT is an ExpAvgMeasurement(longWindow, 10). With no RTT
// twice the long RTT, the long-RTT cut never applies, so `referenceRttNs` is the measurement itself. The samples are
// unitless in Java; here they are nanoseconds.

test('ExpAvgMeasurementTest.testWarmup (as the long RTT of Gradient2Limit)', () => {
  const limit = new Gradient2Limit({ longWindow: 100, warmupWindow: 10 });
  const expected = [10.0, 10.5, 11, 11.5, 12, 12.5, 13, 13.5, 14, 14.5];
  for (let i = 0; i < 10; i++) {
    limit.onSample(0, i + 10, 0, false);
    assertWithin(limit.referenceRttNs, expected[i]!, 0.01, `after sample ${i}`);
  }
  limit.onSample(0, 100, 0, false);
  assertWithin(limit.referenceRttNs, 16.2, 0.1, 'after the sample of 100');
});
