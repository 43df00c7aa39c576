/**
 * What a scrape holds, value by value: no sample is NaN (a gauge with nothing measured or configured has no series),
 * the circuit breaker is one series per state with exactly one at 1, and names agree (`in_flight`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';

test('a scrape has no NaN sample, one breaker series per state, and consistent in-flight names', async () => {
  const router = await createRouter({
    stateDir: null,
    downstreams: [
      { name: 'a', kind: 'callback', callback: () => undefined },
      { name: 'b', kind: 'callback', callback: () => undefined },
    ],
    log: () => undefined,
  });
  try {
    const text = await router.metricsText();
    const samples = text.split('\n').filter((l) => l.length > 0 && !l.startsWith('#'));
    assert.ok(samples.length > 100, `samples: ${samples.length}`);
    assert.deepEqual(
      samples.filter((l) => /\sNaN$/.test(l)),
      [],
    );
    for (const ds of ['a', 'b']) {
      const states = samples.filter((l) => l.startsWith(`geofence_dispatch_breaker_state{downstream="${ds}",`));
      assert.deepEqual(states.sort(), [
        `geofence_dispatch_breaker_state{downstream="${ds}",state="closed"} 1`,
        `geofence_dispatch_breaker_state{downstream="${ds}",state="half_open"} 0`,
        `geofence_dispatch_breaker_state{downstream="${ds}",state="open"} 0`,
      ]);
      assert.equal(
        samples.filter((l) => l.startsWith(`geofence_dispatch_credits_remaining{downstream="${ds}"}`)).length,
        0,
        'no credit window: no series',
      );
    }
    assert.ok(samples.some((l) => l.startsWith('geofence_dispatch_in_flight_requests{')));
    assert.ok(!samples.some((l) => /inflight/.test(l)), 'one spelling: in_flight');
    assert.ok(samples.some((l) => l.startsWith('geofence_dispatch_dead_letter_flush_seconds_total ')));
  } finally {
    await router.close();
  }
});
