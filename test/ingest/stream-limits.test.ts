/**
 * Flood budgets of a connection and its address: a ping the address's budget refuses does not spend the connection's
 * own, so once the address has room again the connection sends its full share.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FloodGuard } from '../../src/ingest/stream-limits.js';

test("a ping or new device the address's budget refuses leaves the connection's budget as it was", () => {
  const clock = new Float64Array([1e12]);
  const guard = new FloodGuard(
    {
      maxPingsPerSecPerConnection: 10,
      maxNewDevicesPerSecPerConnection: 10,
      maxPingsPerSecPerAddress: 100,
      maxNewDevicesPerSecPerAddress: 100,
    },
    clock,
  );
  // Ten connections from one address spend its 100 pings and 100 new devices.
  for (let k = 0; k < 10; k++) {
    const c = guard.open('10.0.0.1');
    for (let n = 0; n < 10; n++) {
      assert.equal(c.takePing(), true);
      assert.equal(c.takeNewDevice(), true);
    }
  }
  const late = guard.open('10.0.0.1');
  for (let n = 0; n < 10; n++) {
    assert.equal(late.takePing(), false, 'the address has no pings left');
    assert.equal(late.takeNewDevice(), false, 'nor new devices');
  }
  // A tenth of a second later the address has 10 of each again; the late connection its own 10 untouched.
  clock[0] = clock[0]! + 0.1e9;
  let pings = 0;
  let devices = 0;
  for (let n = 0; n < 10; n++) {
    if (late.takePing()) pings++;
    if (late.takeNewDevice()) devices++;
  }
  assert.equal(pings, 10, 'its full share of pings');
  assert.equal(devices, 10, 'and of new devices');
});
