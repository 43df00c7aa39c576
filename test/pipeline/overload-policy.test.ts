/**
 * Overload policy per source through real threads, with rings far smaller than the input: in-process `ingest()` and
 * `push()` called flat out are back-pressured (they return false, the caller awaits `inputDrained()`), nothing is
 * shed and every trigger the pings produce through one engine on this thread arrives once; a TCP flood with the
 * default policy is shed by lane at the edge, counted per lane, with COMPLIANCE shedding logged as an error; the same
 * flood with `ingest.overload: 'backpressure'` pauses the connection and loses nothing.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack, Unpackr } from 'msgpackr';
import { createRouter, type RouterOptionsInput, type RouterSummary } from '../../src/index.js';
import type { TelemetryPoint } from '../../src/ingest/ping-fields.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { cityTraffic, type CityTraffic } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { compareWithReference, referenceTriggers } from '../support/replay-fixture.js';
import { sendOverTcp, waitFor } from './support.js';

const TRAFFIC = cityTraffic({
  seed: 5,
  fences: 2000,
  devices: 2000,
  pingsPerDevice: 20,
  pingIntervalMs: 8000,
  speedMps: 25,
  dwellMs: 30_000,
  startMs: Date.UTC(2026, 0, 1),
});
const REFERENCE = referenceTriggers(TRAFFIC);
const POINTS = new Unpackr({ useRecords: false, mapsAsObjects: true }).unpackMultiple(
  TRAFFIC.frames,
) as TelemetryPoint[];

/** Options of a router with rings far smaller than the input (one worker, small batches). */
function smallRings(
  collect: Trigger[],
  logs: Array<{ line: string; level: string }>,
  extra: RouterOptionsInput = {},
): RouterOptionsInput & Parameters<typeof createRouter>[0] {
  return {
    fences: TRAFFIC.fences,
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    batchSize: 32,
    maxDevices: 4096,
    stateDir: mkdtempSync(join(tmpdir(), 'gr-overload-')),
    downstreams: [
      { name: 'app', kind: 'callback', queueCapacitySlots: 1 << 18, callback: (ts) => void collect.push(...ts) },
    ],
    log: (line, level) => logs.push({ line, level: level ?? 'info' }),
    ...extra,
  };
}

/** Checks that every ping was admitted and processed and that the triggers are exactly the reference's. */
function assertNothingLost(
  summary: RouterSummary,
  got: readonly Trigger[],
  traffic: CityTraffic,
  reference: readonly string[],
): void {
  assert.equal(summary.shedTotal, 0, `nothing shed: ${JSON.stringify(summary.shed)}`);
  assert.equal(summary.rejectedTotal, 0);
  assert.equal(summary.admittedTotal, traffic.pings);
  assert.equal(summary.processed, traffic.pings);
  const cmp = compareWithReference(got, reference);
  assert.deepEqual(
    { missing: cmp.missingCount, extra: cmp.extraCount },
    { missing: 0, extra: 0 },
    `missing ${cmp.missing.join(', ')}; extra ${cmp.extra.join(', ')}`,
  );
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
}

test('ingest() and push() flat out into small rings: false at the high-water mark, the caller waits, nothing shed, every trigger once', async () => {
  const got: Trigger[] = [];
  const logs: Array<{ line: string; level: string }> = [];
  const router = await createRouter(
    smallRings(got, logs, { ingest: { inputHighWaterBytes: 16 * 1024, inputHighWaterPoints: 256 } }),
  );
  let ingestRefusals = 0;
  let pushRefusals = 0;
  let waitedMs = 0;
  try {
    // The first half of the pings as byte chunks of 64 frames, the second half as points: per device, in order.
    const half = TRAFFIC.pings / 2;
    for (let k = 0; k < half; k += 64) {
      const from = k === 0 ? 0 : TRAFFIC.ends[k - 1]!;
      const to = TRAFFIC.ends[Math.min(half, k + 64) - 1]!;
      if (!router.ingest(TRAFFIC.frames.subarray(from, to))) {
        ingestRefusals++;
        const t0 = performance.now();
        await router.inputDrained();
        waitedMs += performance.now() - t0;
      }
    }
    for (let k = half; k < TRAFFIC.pings; k++) {
      if (!router.push(POINTS[k]!)) {
        pushRefusals++;
        await router.inputDrained();
      }
    }
    await waitFor(() => router.stats().accepted === TRAFFIC.pings, 60_000, 'every ping accepted');
    const summary = await router.close();
    assert.ok(ingestRefusals > 0, 'ingest() said to wait');
    assert.ok(pushRefusals > 0, 'push() said to wait');
    assertNothingLost(summary, got, TRAFFIC, REFERENCE);
    assert.deepEqual(
      logs.filter((l) => l.level === 'error'),
      [],
    );
    console.log(
      `${TRAFFIC.pings} pings in-process into 2 x 256 slots: ingest() false ${ingestRefusals} times (waited ${waitedMs.toFixed(0)} ms), ` +
        `push() false ${pushRefusals} times; ${summary.triggersTotal} triggers, shed ${summary.shedTotal}`,
    );
  } finally {
    await router.close();
  }
});

/** The traffic's frames with every other device asking for the COMPLIANCE lane. */
function withComplianceDevices(): Buffer {
  return Buffer.concat(
    POINTS.map((p) => (Number(String(p.id).slice(1)) % 2 === 1 ? pack({ ...p, lane: 'compliance' }) : pack(p))),
  );
}

test('a TCP flood into small rings with the default policy is shed by lane at the edge, and COMPLIANCE shedding is logged as an error', async () => {
  const got: Trigger[] = [];
  const logs: Array<{ line: string; level: string }> = [];
  const router = await createRouter(smallRings(got, logs, { listenHost: '127.0.0.1', listenPort: 0 }));
  try {
    assert.equal(router.options.ingest.overload, 'shed');
    await sendOverTcp(router.ingestPort!, withComplianceDevices(), 1 << 20);
    await waitFor(() => router.stats().accepted === TRAFFIC.pings, 60_000, 'every ping read');
    const s = await router.close();
    assert.ok(s.shedTotal > 0, 'the flood was shed');
    const lanes = ['idle', 'transition', 'compliance'] as const;
    for (const lane of lanes) {
      const shed = Object.values(s.shed[lane]).reduce((a, b) => a + b, 0);
      assert.equal(s.offered[lane], s.admitted[lane] + shed, `${lane}: offered = admitted + shed`);
    }
    assert.ok(
      Object.values(s.shed.compliance).reduce((a, b) => a + b, 0) > 0,
      'COMPLIANCE pings were shed too (the reserved slice filled)',
    );
    assert.ok(s.shed.compliance.ring_full! > 0);
    assert.equal(s.processed, s.admittedTotal);
    const alarms = logs.filter((l) => l.level === 'error' && /COMPLIANCE pings/.test(l.line));
    assert.ok(alarms.length >= 1, `an error line for the shed COMPLIANCE pings: ${JSON.stringify(logs.slice(-5))}`);
    assert.match(alarms[0]!.line, /^ingest: shed \d+ COMPLIANCE pings in the last \d+\.\ds \(ring_full=\d+/);
    // The lines add up to the COMPLIANCE pings shed (every one is reported, none twice).
    const reported = alarms.reduce((n, a) => n + Number(/shed (\d+) COMPLIANCE/.exec(a.line)![1]), 0);
    assert.equal(
      reported,
      Object.values(s.shed.compliance).reduce((a, b) => a + b, 0),
    );
    assert.ok(got.length < REFERENCE.length, 'triggers are missing, as the shed counts say');
    // A ping shed at the edge gets no seq: what was made is every device's whole run, in order, with valid stays.
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    console.log(
      `TCP flood of ${TRAFFIC.pings} pings into 2 x 256 slots, policy shed: shed ${JSON.stringify(s.shed)}; ` +
        `${alarms.length} COMPLIANCE alarm lines; ${got.length} of ${REFERENCE.length} triggers`,
    );
  } finally {
    await router.close();
  }
});

test("the same flood with ingest.overload 'backpressure' pauses the connection: nothing shed, every trigger once", async () => {
  const got: Trigger[] = [];
  const logs: Array<{ line: string; level: string }> = [];
  const router = await createRouter(
    smallRings(got, logs, { listenHost: '127.0.0.1', listenPort: 0, ingest: { overload: 'backpressure' } }),
  );
  try {
    await sendOverTcp(router.ingestPort!, withComplianceDevices(), 1 << 20);
    await waitFor(() => router.stats().accepted === TRAFFIC.pings, 60_000, 'every ping read');
    const summary = await router.close();
    assertNothingLost(summary, got, TRAFFIC, REFERENCE);
    assert.deepEqual(
      logs.filter((l) => l.level === 'error'),
      [],
    );
  } finally {
    await router.close();
  }
});

test('a connection the router holds back is not a slow client: a short frame deadline closes nothing while it is paused', async () => {
  const got: Trigger[] = [];
  const logs: Array<{ line: string; level: string }> = [];
  // The flood is paused mid-frame again and again, for far longer than 100 ms in all.
  const router = await createRouter(
    smallRings(got, logs, {
      listenHost: '127.0.0.1',
      listenPort: 0,
      ingest: { overload: 'backpressure', frameDeadlineMs: 100 },
    }),
  );
  try {
    await sendOverTcp(router.ingestPort!, withComplianceDevices(), 1 << 20);
    await waitFor(() => router.stats().accepted === TRAFFIC.pings, 60_000, 'every ping read');
    const summary = await router.close();
    assertNothingLost(summary, got, TRAFFIC, REFERENCE);
  } finally {
    await router.close();
  }
});

test('a bad overload policy is refused naming the option', async () => {
  await assert.rejects(
    createRouter({ listenHost: null, adminHost: null, ingest: { overload: 'drop' as never } }),
    /options\.ingest\.overload must be one of "shed", "backpressure", got "drop"/,
  );
  await assert.rejects(
    createRouter({ listenHost: null, adminHost: null, ingest: { inputHighWaterBytes: 10 } }),
    /options\.ingest\.inputHighWaterBytes must be an integer in \[1024, 1073741824\], got 10/,
  );
});
