/**
 * What a start finds in the state directory beyond its own downstreams' work, through the router's real threads, and
 * how the drain reports it. A downstream renamed between runs: the start that no longer names it says, at error level,
 * in `recovery`, in `/metrics` and in its drain summary (outcome "kept", exit 3), how many undelivered triggers its
 * directory holds; its files stay as they are; a later start that names it again delivers every one of them once, in
 * per-device order. A pending file damaged on disk: the record skipped is a loss in the drain's outcome ("dropped"),
 * not "nothing lost", and every other trigger arrives once, in order.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { createRouter, type Trigger } from '../../src/index.js';
import { scanBacklog } from '../../src/durable/backlog-log.js';
import { scanPendingFile } from '../../src/durable/pending-file.js';
import { readTriggerIdentity } from '../../src/durable/trigger-codec.js';
import { drainOutcome, formatSummary } from '../../src/router/status.js';
import { sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { sinkTraffic } from '../support/sink-run.js';
import { waitFor, within } from '../pipeline/support.js';

/** What createRouter takes. */
type CreateOptions = NonNullable<Parameters<typeof createRouter>[0]>;

/** A router over `traffic`'s fences with one stream downstream `name`, its state in `stateDir`. */
function streamOptions(
  traffic: ReturnType<typeof sinkTraffic>,
  stateDir: string,
  name: string,
  lines: string[],
): CreateOptions {
  return {
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    stateDir,
    drainDeadlineMs: 500,
    downstreams: [{ name, kind: 'stream', maxBatchTriggers: 16 }],
    log: (line, level) => lines.push(`${level} ${line}`),
  };
}

test('a renamed downstream: the start without it names the undelivered triggers its directory holds (log, recovery, /metrics), and the start that names it again delivers each once, in per-device order', async () => {
  const traffic = sinkTraffic(31, 300);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-unconfigured-')), 'state');
  const lines: string[] = [];
  const options = (name: string): CreateOptions => streamOptions(traffic, stateDir, name, lines);

  // Run 1: stream "alerts" nobody reads; close keeps every trigger for the next start.
  const one = await createRouter(options('alerts'));
  await sendPaced(one.ingestPort!, traffic, 20_000);
  await waitFor(() => one.stats().processed === traffic.pings, 60_000, 'every ping processed');
  const first = await within(one.close(), 20_000, 'close() of run 1');
  const kept = first.downstreams[0]!.carriedOver;
  assert.ok(kept > 0 && kept === first.triggersTotal, `run 1 kept every trigger (${kept} of ${first.triggersTotal})`);

  // Run 2: the downstream is named "alerts-v2"; what "alerts" left is named, not read.
  lines.length = 0;
  const two = await createRouter(options('alerts-v2'));
  try {
    const found = two.recovery.unconfiguredDownstreams;
    assert.equal(found.length, 1, JSON.stringify(found));
    const u = found[0]!;
    assert.equal(u.directory, 'alerts');
    assert.equal(u.problem, null);
    assert.equal(u.deadLetters, 0);
    assert.equal(
      u.pending + u.backlog,
      kept,
      `pending file and backlog log hold what run 1 kept: ${JSON.stringify(u)}`,
    );
    const errors = lines.filter((l) => l.startsWith('error '));
    assert.ok(
      errors.some((l) =>
        l.includes(
          `${kept} undelivered triggers belong to downstreams the options no longer name, and nothing delivers them: downstreams/alerts: ${u.pending} pending, ${u.backlog} in its backlog log, 0 dead letters waiting`,
        ),
      ),
      `an error line names the directory and its counts: ${errors.join(' | ')}`,
    );
    const text = await two.metricsText();
    assert.match(
      text,
      new RegExp(`^geofence_state_unconfigured_downstream_triggers\\{directory="alerts"\\} ${kept}$`, 'm'),
    );
  } finally {
    const second = await two.close();
    assert.equal(second.triggersTotal, 0);
    assert.equal(second.unconfiguredTriggers, kept);
    assert.equal(drainOutcome(second), 'kept', 'the drain does not say every trigger was delivered');
    assert.match(
      formatSummary(second, 1).at(-1)!,
      new RegExp(
        `^drained, nothing lost: 0 triggers dead-lettered for good, 0 kept .*, ${kept} kept for downstreams the options no longer name$`,
      ),
    );
  }

  // Run 3: "alerts" again: its triggers come first, each once, in per-device order; nothing is named any more.
  lines.length = 0;
  const three = await createRouter(options('alerts'));
  const received: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of three.triggers('alerts')) received.push(...batch);
  })();
  try {
    assert.deepEqual(three.recovery.unconfiguredDownstreams, []);
    await waitFor(() => received.length >= kept, 60_000, 'run 3 delivered what run 1 kept');
  } finally {
    const third = await three.close();
    await loop;
    assert.equal(third.downstreams[0]!.final, 0);
    assert.equal(third.downstreams[0]!.deadLettered, 0, 'a reader that keeps up sees no dead letter');
    assert.equal(third.shedTotal, 0);
    assert.equal(third.downstreams[0]!.delivered, kept);
  }
  assert.equal(received.length, kept, 'each once');
  assert.deepEqual(checkDeliveryContract(received, { complete: true, stays: true }).problems, []);
  assert.ok(!lines.some((l) => l.includes('no longer name')), 'run 3 names nothing unconfigured');
  console.log(`renamed downstream: ${kept} kept by run 1 (named by run 2), delivered once each by run 3`);
});

test('a pending file damaged on disk: the next start skips the damaged record, and its drain reports a loss (damaged_records), not "nothing lost"; every other trigger arrives once, in per-device order', async () => {
  const traffic = sinkTraffic(32, 200);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-damaged-')), 'state');
  const options = streamOptions(traffic, stateDir, 'app', []);
  const one = await createRouter(options);
  await sendPaced(one.ingestPort!, traffic, 20_000);
  await waitFor(() => one.stats().processed === traffic.pings, 60_000, 'every ping processed');
  const first = await within(one.close(), 20_000, 'close() of run 1');
  const kept = first.downstreams[0]!.carriedOver;

  // One byte of the second record of the pending file flipped.
  const dir = join(stateDir, 'downstreams', 'app');
  const records: { position: number; length: number; key: string }[] = [];
  scanPendingFile(dir, 'app', (buf, at, position, length) => {
    const id = readTriggerIdentity(buf, at);
    records.push({ position, length, key: `${JSON.stringify(id.deviceId)}/${id.seq}` });
  });
  assert.ok(records.length >= 3, `the pending file holds ${records.length} records`);
  const damaged = records[1]!;
  const file = join(dir, 'pending.bin');
  const bytes = readFileSync(file);
  bytes[damaged.position + damaged.length - 4]! ^= 0xff;
  writeFileSync(file, bytes);

  const two = await createRouter(options);
  const received: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of two.triggers('app')) received.push(...batch);
  })();
  let second;
  try {
    await waitFor(() => received.length >= kept - 1, 60_000, 'run 2 delivered all but the damaged record');
  } finally {
    second = await two.close();
    await loop;
  }
  assert.equal(received.length, kept - 1, 'all but the damaged record');
  assert.ok(!received.some((t) => `${JSON.stringify(t.deviceId)}/${t.seq}` === damaged.key), 'the damaged one missing');
  assert.deepEqual(checkDeliveryContract(received).problems, [], 'each once, in per-device order');
  assert.equal(second.damagedLost, 1);
  assert.equal(second.deadLettered, 0, 'nothing else lost: no dead letter');
  assert.equal(second.shedTotal, 0);
  assert.match(formatSummary(second, 1).join('\n'), / {2}delivery .* damaged=1\n/);
  assert.equal(drainOutcome(second), 'dropped');
  assert.match(formatSummary(second, 1).at(-1)!, /^drained with loss: .* damaged_records=1: /);
  console.log(`damaged pending file: ${received.length} of ${kept} delivered, 1 skipped and reported as a loss`);
});

test("a start restored from an older checkpoint (the newest one lost) does not take an earlier run's records for its own: every trigger read back names the device and fence that record named", async () => {
  const traffic = sinkTraffic(33, 300);
  const stateDir = join(mkdtempSync(join(tmpdir(), 'gr-runid-')), 'state');
  const options = streamOptions(traffic, stateDir, 'app', []);
  // Run 0 leaves a clean checkpoint (number n) and nothing else.
  await (await createRouter(options)).close();
  const older = readFileSync(join(stateDir, 'checkpoint.bin'));
  // Run 1 (its records carry run id n + 1) spills triggers nobody reads to its backlog log, then stops as in a crash.
  const one = await createRouter(options);
  await sendPaced(one.ingestPort!, traffic, 20_000);
  await waitFor(() => one.stats().processed === traffic.pings, 60_000, 'every ping processed');
  const dir = join(stateDir, 'downstreams', 'app');
  const logged = new Map<string, string>();
  const readLog = (): void =>
    void scanBacklog(dir, 'app', (buf, at) => {
      const id = readTriggerIdentity(buf, at);
      logged.set(`${JSON.stringify(id.deviceId)}/${id.seq}`, `${id.fenceId}`);
    });
  await waitFor(
    () => {
      readLog();
      return logged.size > 500;
    },
    30_000,
    'run 1 spilled triggers to its backlog log',
  );
  await one.abandon();
  logged.clear();
  readLog();
  // The newest checkpoints lost: the start falls back to run 0's (number n), so its own first one is n + 1 again.
  writeFileSync(join(stateDir, 'checkpoint.bin'), older);
  rmSync(join(stateDir, 'checkpoint.prev'), { force: true });

  const two = await createRouter(options);
  const received: Trigger[] = [];
  const loop = (async () => {
    for await (const batch of two.triggers('app')) received.push(...batch);
  })();
  try {
    await waitFor(
      () => received.filter((t) => logged.has(`${JSON.stringify(t.deviceId)}/${t.seq}`)).length >= logged.size,
      60_000,
      'run 2 delivered what run 1 logged',
    );
  } finally {
    await two.close();
    await loop;
  }
  const wrong = received.filter((t) => {
    const fence = logged.get(`${JSON.stringify(t.deviceId)}/${t.seq}`);
    return fence !== undefined && fence !== t.fenceId;
  });
  assert.deepEqual(wrong.slice(0, 3), [], `${wrong.length} triggers named another record's fence`);
  assert.deepEqual(checkDeliveryContract(received).problems, [], 'each once, in per-device order');
  console.log(
    `older checkpoint restored: ${logged.size} logged triggers of the earlier run read back under their own ids`,
  );
});
