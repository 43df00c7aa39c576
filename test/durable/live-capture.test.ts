import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { once } from 'node:events';
import { DeviceStateCopy } from '../../src/durable/checkpoint.js';
import { allocateDeviceState, DeviceState } from '../../src/fences/device-state.js';
import { nowNs } from '../../src/shm/clock.js';
import {
  DEV_ENTRY_COUNT_I32,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_VERSION_I32,
  ENTRY_FENCE_I32,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
} from '../../src/shm/layout.js';

const DEVICES = 64;
const MAX_FENCES = 24;

/** Problems of a copy whose devices were each written with one value everywhere (fixtures/state-writer.ts). */
function tornDevices(copy: DeviceStateCopy): string[] {
  const problems: string[] = [];
  for (let d = 0; d < copy.count; d++) {
    const v = copy.devF64[d * DEV_STRIDE_F64]!;
    if (v === -Infinity) continue; // never written
    for (let c = 1; c < DEV_STRIDE_F64; c++)
      if (copy.devF64[d * DEV_STRIDE_F64 + c] !== v)
        problems.push(`device ${d}: cell ${c} is ${copy.devF64[d * DEV_STRIDE_F64 + c]}, cell 0 is ${v}`);
    const n = copy.devI32[d * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32]!;
    if (n !== 1 + (v % MAX_FENCES)) problems.push(`device ${d}: ${n} entries for update ${v}`);
    if (copy.entryStart[d + 1]! - copy.entryStart[d]! !== n)
      problems.push(`device ${d}: ${copy.entryStart[d + 1]! - copy.entryStart[d]!} entries copied, count ${n}`);
    for (let e = copy.entryStart[d]!; e < copy.entryStart[d + 1]!; e++) {
      const parts = [
        copy.entryF64[e * ENTRY_STRIDE_F64]!,
        copy.entryF64[e * ENTRY_STRIDE_F64 + 1]!,
        copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32]!,
        copy.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_STATE_I32]!,
      ];
      if (parts.some((p) => p !== v)) problems.push(`device ${d} entry ${e}: ${parts.join(',')} in update ${v}`);
    }
    if (problems.length > 5) break;
  }
  return problems;
}

test('a copy taken while another thread rewrites the devices is never torn, and it did have to copy devices again', async () => {
  const descriptor = allocateDeviceState(DEVICES, MAX_FENCES, { entriesPerDevice: MAX_FENCES + 8 });
  const state = DeviceState.open(descriptor);
  const control = new SharedArrayBuffer(8);
  const worker = new Worker(new URL('./fixtures/state-writer.js', import.meta.url), {
    workerData: { state: descriptor, control },
  });
  // Wait for the writer to be going.
  const ctl = new Int32Array(control);
  while (state.writeVersion(0) === 0 && state.writeVersion(1) === 0 && state.writeVersion(2) === 0)
    await new Promise((r) => setTimeout(r, 5));
  const copy = new DeviceStateCopy(DEVICES);
  let captures = 0;
  let retries = 0;
  const until = Date.now() + 1500;
  while (Date.now() < until) {
    assert.equal(copy.captureLive(state, DEVICES, 1, null, nowNs() + 2e9), true, 'settles');
    captures++;
    retries += copy.lastRetries;
    assert.deepEqual(tornDevices(copy), [], `capture ${captures}`);
    if (captures % 16 === 0) await new Promise((r) => setImmediate(r));
  }
  Atomics.store(ctl, 0, 1);
  await once(worker, 'message');
  await worker.terminate();
  assert.ok(Atomics.load(ctl, 1) > 10_000, `the writer made ${Atomics.load(ctl, 1)} updates`);
  assert.ok(captures > 20, `${captures} captures`);
  // The point of the versions: some copies met an update in progress and were taken again.
  assert.ok(retries > 0, `${retries} devices copied again in ${captures} captures`);
});

test('a device whose update never closes makes the live copy give up by its deadline; the next update heals it', () => {
  const state = DeviceState.open(allocateDeviceState(8, 4));
  const copy = new DeviceStateCopy(8);
  assert.equal(copy.captureLive(state, 8, 1, null, nowNs() + 1e9), true);
  assert.equal(copy.lastRetries, 0);
  // A worker that ended between beginWrite and endWrite.
  state.beginWrite(3);
  const t0 = nowNs();
  assert.equal(copy.captureLive(state, 8, 1, null, t0 + 20e6), false);
  assert.ok(nowNs() - t0 < 1e9, 'gave up near its deadline');
  // The next update of that device (beginWrite keeps the odd version, endWrite closes it) makes it copyable again.
  state.beginWrite(3);
  state.endWrite(3);
  assert.equal(state.writeVersion(3) % 2, 0);
  assert.equal(state.devI32[3 * DEV_STRIDE_I32 + DEV_VERSION_I32], state.writeVersion(3));
  assert.equal(copy.captureLive(state, 8, 1, null, nowNs() + 1e9), true);
});
