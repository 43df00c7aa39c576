/**
 * Restarts of the real binary on one state directory: (a) SIGTERM, then a restart: no second ENTER for a device
 * already inside, DWELL once per stay, seq continues; (b) kill -9 under load, then a restart with the fences file
 * reordered: no (deviceId, seq) names two triggers across the runs, every dead letter is replayed with its original
 * device and fence ids, and what the crash lost is printed and fits the checkpoint interval; (c) a second process on
 * the same directory is refused, naming it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { SEQ_EPOCH } from '../../src/durable/checkpoint.js';
import { checkDeliveryContract, contentOf } from '../support/delivery-contract.js';
import { at, sendOverTcp, square, T0, TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';

/** Starts the binary on `stateDir` with `downstream` flags; resolves with the process and its telemetry port. */
async function startRouter(
  fences: string,
  stateDir: string,
  downstream: string[],
): Promise<{ p: CliProcess; port: number }> {
  const p = new CliProcess(
    ['--fences', fences, '--state-dir', stateDir, '--listen', '127.0.0.1:0', '--no-admin', ...downstream],
    60_000,
  );
  await p.waitFor('the telemetry port', (x) => /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr));
  return { p, port: Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]) };
}

/** MessagePack frames of pings (device, east/north metres from the test origin, ms after T0). */
function frames(pings: [string, number, number, number][]): Buffer {
  return Buffer.concat(
    pings.map(([id, e, n, dt]) => {
      const [lat, lon] = at(e, n);
      return pack({ id, lat, lon, ts: T0 + dt });
    }),
  );
}

test('(a) SIGTERM, then a restart on the same state directory: no second ENTER, DWELL once per stay, seq continues', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-restart-a-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(
    fences,
    JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100, { dwellMs: 3000 })] }),
  );
  const stateDir = join(dir, 'state');
  const hook = new TriggerServer();
  await hook.start();
  const devices = Array.from({ length: 40 }, (_, i) => `dev-${i}`);
  try {
    // Run 1: every device enters A at 1 s; the even ones stay to 5 s (DWELL before the stop).
    const r1 = await startRouter(fences, stateDir, ['--webhook', hook.url]);
    await sendOverTcp(
      r1.port,
      frames(
        devices.flatMap((d, i) => {
          const out: [string, number, number, number][] = [
            [d, -300, 0, 0],
            [d, 0, 0, 1000],
          ];
          if (i % 2 === 0) out.push([d, 5, 5, 5000]);
          return out;
        }),
      ),
      4096,
    );
    await waitFor(() => hook.received.length === devices.length * 1.5, 20_000, 'run 1 triggers');
    r1.p.child.kill('SIGTERM');
    const e1 = await r1.p.exited;
    assert.equal(e1.code, 0, r1.p.stderr);
    assert.match(r1.p.stdout, /drained cleanly/);
    const firstRun = hook.received.length;

    // Run 2: still inside at 6 s (no ENTER again; the odd ones DWELL now, the even ones did already), out at 8 s.
    const r2 = await startRouter(fences, stateDir, ['--webhook', hook.url]);
    assert.match(r2.p.stderr, /restored 40 devices from checkpoint #\d+ \(clean stop\)/);
    await sendOverTcp(
      r2.port,
      frames(
        devices.flatMap((d): [string, number, number, number][] => [
          [d, 10, 0, 6000],
          [d, 400, 0, 8000],
        ]),
      ),
      4096,
    );
    await waitFor(() => hook.received.length === firstRun + devices.length * 1.5, 20_000, 'run 2 triggers');
    r2.p.child.kill('SIGTERM');
    const e2 = await r2.p.exited;
    assert.equal(e2.code, 0, r2.p.stderr);

    const report = checkDeliveryContract(hook.received, { complete: true, stays: true });
    assert.deepEqual(report.problems, []);
    for (const d of devices) {
      const mine = hook.received.filter((t) => t.deviceId === d).map((t) => `${t.seq}:${t.type}`);
      assert.deepEqual(
        mine,
        ['1:ENTER', '2:DWELL', '3:EXIT'],
        `${d}: one ENTER, one DWELL, seq continues across the restart`,
      );
    }
  } finally {
    await hook.stop();
  }
});

/** A webhook that refuses (500) every batch holding a trigger of a device in `failing`, and records what it refused. */
class FlakyHook extends TriggerServer {
  readonly refusedTimes = new Map<string, number>();
  readonly refused = new Map<string, Trigger>();
  failing = new Set<string>();

  constructor() {
    super((batch) => {
      if (!batch.some((t) => this.failing.has(String(t.deviceId)))) return 200;
      for (const t of batch) {
        const key = `${String(t.deviceId)}/${t.seq}`;
        this.refusedTimes.set(key, (this.refusedTimes.get(key) ?? 0) + 1);
        this.refused.set(key, t);
      }
      return 500;
    });
  }

  /** What was received (answered 200). */
  get accepted(): Trigger[] {
    return this.received;
  }
}

test('(b) kill -9 under load, then a restart with the fences reordered: no (deviceId, seq) names two triggers, every dead letter is replayed under its original ids, the loss is printed and fits the checkpoint interval', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-restart-b-'));
  const features: Record<string, unknown>[] = [];
  for (let i = 0; i < 20; i++) features.push(square(`lane-${i}`, i * 100, 0, 30, { dwellMs: 60_000 }));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features }));
  const config = join(dir, 'config.json');
  // One trigger per request: a refusing device fails only its own deliveries, so the breaker stays closed.
  const hook = new FlakyHook();
  await hook.start();
  writeFileSync(
    config,
    JSON.stringify({ downstreams: [{ name: 'hook', kind: 'webhook', url: hook.url, maxBatchTriggers: 1 }] }),
  );
  const stateDir = join(dir, 'state');
  const DEVICES = 200;
  const flaky = Array.from({ length: 10 }, (_, i) => `dev-${i * 20}`);
  hook.failing = new Set(flaky);
  const CHECKPOINT_MS = 1000;
  let t = 0;
  /** One round: every device moves 50 m east along the row of fences (in or out of a fence each time). */
  const round = (): Buffer => {
    t += 1000;
    return frames(
      Array.from({ length: DEVICES }, (_, i): [string, number, number, number] => [
        `dev-${i}`,
        ((t / 1000) * 50 + i * 7) % 2000,
        0,
        t,
      ]),
    );
  };
  try {
    const r1 = await startRouter(fences, stateDir, [
      '--config',
      config,
      '--checkpoint-interval-ms',
      String(CHECKPOINT_MS),
    ]);
    const end = Date.now() + 4500;
    while (Date.now() < end) {
      await sendOverTcp(r1.port, round(), 65536);
      await new Promise((r) => setTimeout(r, 40));
    }
    // Give the parked dead letters their flush (50 ms), then crash without any chance to clean up.
    await new Promise((r) => setTimeout(r, 300));
    r1.p.child.kill('SIGKILL');
    await r1.p.exited;
    const run1LastEventMs = T0 + t;
    const deadLetters = [...hook.refusedTimes].filter(([, n]) => n >= 3).map(([k]) => hook.refused.get(k)!);
    assert.ok(deadLetters.length >= flaky.length / 2, `dead letters to replay: ${deadLetters.length}`);
    const firstRun = [...hook.accepted];
    const firstRunTriggers = hook.accepted.length;

    // The fences file reordered (the same ids at other indices); the downstream healthy again.
    writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [...features].reverse() }));
    hook.failing = new Set();
    const r2 = await startRouter(fences, stateDir, [
      '--config',
      config,
      '--checkpoint-interval-ms',
      String(CHECKPOINT_MS),
    ]);
    assert.match(r2.p.stderr, /stopped without a clean shutdown/);
    const lost =
      /lost: the device state of the last (\d+) ms before the stop \(checkpoint interval (\d+) ms\): (\d+) pings processed and (\d+) triggers produced after the checkpoint/.exec(
        r2.p.stderr,
      );
    assert.ok(lost !== null, r2.p.stderr);
    console.log(`kill -9: ${lost[0]}; ${deadLetters.length} dead letters to replay`);
    assert.equal(Number(lost[2]), CHECKPOINT_MS);
    // About the interval: a tick whose checkpoint is still being written is skipped, so up to two on a loaded host.
    assert.ok(Number(lost[1]) <= 2 * CHECKPOINT_MS + 1000, `the lost window fits the interval: ${lost[1]} ms`);
    assert.match(r2.p.stderr, /seq continues above \d+/);
    for (let k = 0; k < 5; k++) {
      await sendOverTcp(r2.port, round(), 65536);
      await new Promise((r) => setTimeout(r, 40));
    }
    await waitFor(
      () =>
        deadLetters.every((d) =>
          hook.accepted.slice(firstRunTriggers).some((x) => x.deviceId === d.deviceId && x.seq === d.seq),
        ),
      20_000,
      'every dead letter replayed',
    );
    r2.p.child.kill('SIGTERM');
    const e2 = await r2.p.exited;
    assert.ok(e2.code === 0 || e2.code === 3, `${e2.code}: ${r2.p.stdout}`);

    // Across both runs: per device in order, and no (deviceId, seq) for two different triggers.
    const report = checkDeliveryContract(hook.accepted, { allowRedelivery: true });
    assert.deepEqual(report.problems, []);
    const secondRun = hook.accepted.slice(firstRunTriggers);
    for (const d of deadLetters) {
      const again = secondRun.find((x) => x.deviceId === d.deviceId && x.seq === d.seq)!;
      assert.equal(again.replay, true, `${String(d.deviceId)}/${d.seq} came through the replay lane`);
      assert.equal(
        contentOf(again),
        contentOf(d),
        `${String(d.deviceId)}/${d.seq}: the same trigger, its original fence id ${d.fenceId}`,
      );
    }
    // After an unclean stop every trigger the new run issues is above the raised floor; below it come only triggers
    // of the first run: its dead letters, deliveries repeated after the crash (each under its first content), and
    // triggers the first run had made durable in its backlog log but not yet sent (made from a first-run ping).
    const floor = Number(/seq continues above (\d+)/.exec(r2.p.stderr)![1]);
    assert.ok(floor >= SEQ_EPOCH);
    const firstContent = new Map<string, string>();
    for (const x of [...firstRun, ...hook.refused.values()])
      firstContent.set(`${String(x.deviceId)}/${x.seq}`, contentOf(x));
    let issuedByRun2 = 0;
    let keptUnsent = 0;
    for (const x of secondRun) {
      if (x.seq > floor) {
        issuedByRun2++;
        continue;
      }
      const key = `${String(x.deviceId)}/${x.seq}`;
      assert.ok(
        x.eventTimeMs <= run1LastEventMs,
        `${key} below the floor comes from a first-run ping: ${contentOf(x)}`,
      );
      const first = firstContent.get(key);
      if (first === undefined) keptUnsent++;
      else assert.equal(contentOf(x), first, `${key} is the trigger the first run sent`);
    }
    console.log(
      `kill -9: the second run issued ${issuedByRun2} triggers above the floor ${floor}; ${keptUnsent} kept by the first run and sent only by the second`,
    );
    assert.ok(issuedByRun2 > 0, 'the second run issued triggers above the floor');
  } finally {
    await hook.stop();
  }
});

test('(c) a second process on the same state directory is refused, naming the directory', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-restart-c-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const stateDir = join(dir, 'state');
  const hook = new TriggerServer();
  await hook.start();
  try {
    const first = await startRouter(fences, stateDir, ['--webhook', hook.url]);
    const second = new CliProcess([
      '--fences',
      fences,
      '--state-dir',
      stateDir,
      '--listen',
      '127.0.0.1:0',
      '--no-admin',
      '--webhook',
      hook.url,
    ]);
    const { code } = await second.exited;
    assert.equal(code, 1, second.stderr);
    assert.match(
      second.stderr,
      new RegExp(
        `state directory ${stateDir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is in use by process ${first.p.child.pid}`,
      ),
    );
    first.p.child.kill('SIGTERM');
    assert.equal((await first.p.exited).code, 0, first.p.stderr);
    // Once the first has stopped, the directory is free again.
    const third = await startRouter(fences, stateDir, ['--webhook', hook.url]);
    third.p.child.kill('SIGTERM');
    assert.equal((await third.p.exited).code, 0, third.p.stderr);
  } finally {
    await hook.stop();
  }
});
