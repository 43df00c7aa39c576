/**
 * An in-process callback whose promise never settles, through the router's real threads: while the router runs, the
 * call fails at the downstream's `timeoutMs` (logged, its batch sent again, every trigger delivered once, in order);
 * at close, a call still running a second after the drain deadline leaves its batch for the next start instead of
 * holding `close()` for ever, and the next start delivers it, in order, under the same identities.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Trigger } from '../../src/index.js';
import { sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { sinkTraffic } from '../support/sink-run.js';
import { waitFor, within } from '../pipeline/support.js';

/** What createRouter takes. */
type CreateOptions = NonNullable<Parameters<typeof createRouter>[0]>;

/** A router over `fences` with one callback downstream `cb`. */
function callbackOptions(
  fences: unknown,
  stateDir: string,
  callback: (ts: readonly Trigger[]) => Promise<void> | void,
  timeoutMs: number | null,
  lines: string[],
): CreateOptions {
  return {
    fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir,
    drainDeadlineMs: 500,
    downstreams: [{ name: 'cb', kind: 'callback', callback, timeoutMs, maxBatchTriggers: 16 }],
    log: (line, level) => lines.push(`${level} ${line}`),
  };
}

/** A promise that never settles. */
const never = (): Promise<void> => new Promise<void>(() => undefined);

test('a callback call that never settles fails at timeoutMs: the log names it, its batch is sent again, and every trigger arrives once, in per-device order', async () => {
  const traffic = sinkTraffic(41, 200);
  const lines: string[] = [];
  const got: Trigger[] = [];
  let calls = 0;
  const router = await createRouter(
    callbackOptions(
      traffic.fences,
      join(mkdtempSync(join(tmpdir(), 'gr-cb-')), 'state'),
      async (ts) => {
        calls++;
        if (calls === 3) return never();
        got.push(...ts);
      },
      300,
      lines,
    ),
  );
  await sendPaced(router.ingestPort!, traffic, 20_000);
  await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(() => got.length === router.stats().triggersTotal, 60_000, 'every trigger delivered');
  const summary = await within(router.close(), 20_000, 'close()');
  const failures = lines.filter((l) => l.includes('its callback failed'));
  assert.equal(failures.length, 1, failures.join(' | '));
  assert.match(
    failures[0]!,
    /^warn downstream cb: its callback failed on a batch of \d+ trigger\(s\) .*CallbackTimeoutError: not settled within 300 ms \(timeoutMs\)$/,
  );
  const d = summary.downstreams[0]!;
  assert.equal(d.deadLettered, 0);
  assert.equal(d.carriedOver, 0);
  assert.equal(d.delivered, summary.triggersTotal);
  assert.equal(got.length, summary.triggersTotal);
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
});

test('a callback call still running at close: close() finishes a second after the drain deadline, the batch is kept, and the next start delivers what was kept once, in per-device order', async () => {
  const traffic = sinkTraffic(42, 200);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-cb-')), 'state');
  const lines: string[] = [];
  const got: Trigger[] = [];
  let calls = 0;
  let hung: readonly Trigger[] = [];
  const one = await createRouter(
    callbackOptions(
      traffic.fences,
      stateDir,
      async (ts) => {
        calls++;
        if (calls === 5) {
          hung = ts;
          return never();
        }
        got.push(...ts);
      },
      null,
      lines,
    ),
  );
  await sendPaced(one.ingestPort!, traffic, 20_000);
  await waitFor(() => one.stats().processed === traffic.pings, 60_000, 'every ping processed');
  await waitFor(() => hung.length > 0, 10_000, 'the fifth call running');
  const startMs = Date.now();
  const first = await within(one.close(), 20_000, 'close() with a callback call that never settles');
  const closeMs = Date.now() - startMs;
  // Bounded (the call never settles); loose, for thread joins and the final writes on a loaded host.
  assert.ok(closeMs < 15_000, `close() took ${closeMs} ms with a 500 ms drain deadline`);
  const d = first.downstreams[0]!;
  assert.ok(d.carriedOver >= hung.length, `the running call's batch is kept (${d.carriedOver} kept)`);
  assert.equal(d.delivered, got.length, 'what the callback took, and only that, counted delivered');
  assert.equal(d.delivered + d.carriedOver, first.triggersTotal);
  assert.equal(d.deadLettered, 0);
  assert.ok(
    lines.some((l) => /^warn 1 callback call\(s\) still running 1000 ms after the drain deadline \(500 ms\)/.test(l)),
    lines.filter((l) => l.startsWith('warn')).join(' | '),
  );

  const next: Trigger[] = [];
  const two = await createRouter(
    callbackOptions(
      traffic.fences,
      stateDir,
      (ts) => {
        next.push(...ts);
      },
      null,
      [],
    ),
  );
  try {
    await waitFor(() => next.length >= d.carriedOver, 60_000, 'the next start delivered what was kept');
  } finally {
    await two.close();
  }
  assert.equal(next.length, d.carriedOver);
  const again = new Set(next.map((t) => `${JSON.stringify(t.deviceId)}/${t.seq}`));
  for (const t of hung) assert.ok(again.has(`${JSON.stringify(t.deviceId)}/${t.seq}`), 'the hung batch comes again');
  assert.deepEqual(checkDeliveryContract([...got, ...next], { complete: true, stays: true }).problems, []);
  console.log(
    `callback never settling at close: close took ${closeMs} ms (deadline 500 ms), ${d.carriedOver} kept, all delivered by the next start`,
  );
});
