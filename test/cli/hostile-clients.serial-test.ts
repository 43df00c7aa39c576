/**
 * The hostile-client suite, through the real binary: one router (producer token, flood limits, frame deadline, idle
 * timeout, held-bytes budget) serving honest devices over one connection while, one after another, attackers flood
 * the registry, teleport across a grid of fences, trickle a frame, hold idle connections, hold partial frames, and
 * connect without the token. Each attack must be refused and counted for its reason; the honest devices' triggers
 * all arrive at a real webhook under the delivery contract; and the honest traffic's held-time P99 during each
 * attack is measured and printed (timing is reported, not asserted).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import { at, square } from '../fences/helpers.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { T0, TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';

const TOKEN = 'hostile-suite-token-0123456789';
const HONEST = 50;
const ATTACK_MS = 2500;

function series(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

/** Held-time bucket counts (cumulative, as exposed) of geofence_held_time_seconds. */
function heldBuckets(text: string): { le: number; count: number }[] {
  const out: { le: number; count: number }[] = [];
  for (const m of text.matchAll(/^geofence_held_time_seconds_bucket\{le="([^"]+)"\} (\d+)$/gm))
    out.push({ le: m[1] === '+Inf' ? Infinity : Number(m[1]), count: Number(m[2]) });
  return out;
}

function p99Between(before: string, after: string): number {
  const a = heldBuckets(before);
  const b = heldBuckets(after);
  const total = b[b.length - 1]!.count - a[a.length - 1]!.count;
  if (total <= 0) return Number.NaN;
  const rank = Math.ceil(0.99 * total);
  for (let i = 0; i < b.length; i++) if (b[i]!.count - a[i]!.count >= rank) return b[i]!.le * 1000;
  return Infinity;
}

async function open(port: number, token: string | null): Promise<Socket> {
  const s = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    s.once('connect', () => resolve());
    s.once('error', reject);
  });
  s.on('error', () => undefined);
  if (token !== null) s.write(`AUTH ${token}\n`);
  return s;
}

/** Resolves when the router has closed `s`; fails the test (naming `what`) if it has not within 15 s. */
const closed = (s: Socket, what: string): Promise<void> =>
  new Promise((resolve, reject) => {
    if (s.destroyed) return resolve();
    const timer = setTimeout(
      () => reject(new Error(`${what}: the router did not close the connection within 15 s`)),
      15_000,
    );
    s.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });

// Run alone (a serial test): its honest held-time figures mean little on a host shared with other tests; a stall
// fails it after three minutes instead of holding the suite.
test(
  'hostile clients are refused and counted, one attack after another, while honest devices keep flowing under the delivery contract',
  { timeout: 180_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gr-hostile-'));
    // Honest devices cross square h<d> (at 300 m spacing); a 10 x 10 grid of squares lies on the teleporter's path.
    const features = [];
    for (let d = 0; d < HONEST; d++)
      features.push(square(`h${d}`, (d % 10) * 300, Math.floor(d / 10) * 300 + 5000, 50));
    for (let i = 0; i < 10; i++) for (let j = 0; j < 10; j++) features.push(square(`g${i}-${j}`, i * 200, j * 200, 60));
    const fences = join(dir, 'fences.geojson');
    writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features }));
    const config = join(dir, 'router.json');
    writeFileSync(
      config,
      JSON.stringify({
        ingest: {
          authToken: TOKEN,
          maxNewDevicesPerSecPerConnection: 200,
          frameDeadlineMs: 1000,
          idleTimeoutMs: 1500,
          maxFrameBytes: 1 << 20,
          maxHeldBytes: 256 * 1024,
        },
      }),
    );
    const hook = new TriggerServer();
    await hook.start();
    const p = new CliProcess(
      [
        '--config',
        config,
        '--fences',
        fences,
        '--listen',
        '127.0.0.1:0',
        '--admin',
        '127.0.0.1:0',
        '--webhook',
        `http://127.0.0.1:${hook.port}/`,
        '--state-dir',
        join(dir, 'state'),
      ],
      120_000,
      dir,
    );
    await p.waitFor(
      'ports',
      (x) =>
        /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr) && /admin http:\/\/127\.0\.0\.1:(\d+)/.test(x.stderr),
    );
    const port = Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
    const admin = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
    const scrape = async (): Promise<string> => (await fetch(`http://127.0.0.1:${admin}/metrics`)).text();
    try {
      await runAttacks(p, port, hook, scrape);
    } catch (err) {
      p.child.kill('SIGKILL');
      throw new Error(`${(err as Error).message}\nrouter stderr:\n${p.stderr.slice(-4000)}`, { cause: err });
    }
  },
);

async function runAttacks(
  p: CliProcess,
  port: number,
  hook: TriggerServer,
  scrape: () => Promise<string>,
): Promise<void> {
  // Honest traffic: each device alternates inside and outside its square, one ping a second of event time, all
  // devices every 20 ms of wall time.
  const honest = await open(port, TOKEN);
  let round = 0;
  let sending = true;
  const honestLoop = (async () => {
    while (sending) {
      const frames: Buffer[] = [];
      for (let d = 0; d < HONEST; d++) {
        const [lat, lon] = at((d % 10) * 300 + (round % 2 === 0 ? 0 : 200), Math.floor(d / 10) * 300 + 5000);
        frames.push(pack({ id: `honest-${d}`, lat, lon, ts: T0 + round * 1000 }));
      }
      honest.write(Buffer.concat(frames));
      round++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  await waitFor(() => hook.received.length > HONEST * 4, 20_000, 'honest triggers flowing');

  const figures: string[] = [];
  const attack = async (
    name: string,
    run: () => Promise<void>,
    check: (before: string, after: string) => void,
  ): Promise<void> => {
    const before = await scrape();
    const honestBefore = hook.received.length;
    const startedMs = Date.now();
    await run();
    // Each attack window lasts at least ATTACK_MS, so the honest traffic measured during it is a sample worth having.
    const rest = ATTACK_MS - (Date.now() - startedMs);
    if (rest > 0) await new Promise((r) => setTimeout(r, rest));
    // What the router has not read yet when the attack ends (a loaded host) is counted within seconds: the check is
    // tried again on a fresh scrape until then (every assertion of it holding at one scrape).
    let after = await scrape();
    for (const end = Date.now() + 10_000; ;) {
      try {
        check(before, after);
        break;
      } catch (err) {
        if (Date.now() > end) throw err;
      }
      await new Promise((r) => setTimeout(r, 200));
      after = await scrape();
    }
    assert.ok(hook.received.length > honestBefore, `${name}: honest triggers kept arriving`);
    figures.push(
      `${name}: honest held P99 ${p99Between(before, after).toFixed(1)} ms, ${hook.received.length - honestBefore} honest triggers`,
    );
  };
  const delta = (before: string, after: string, name: string): number => series(after, name) - series(before, name);

  await attack(
    'registry flood (20,000 new ids from one connection)',
    async () => {
      const s = await open(port, TOKEN);
      const [lat, lon] = at(-3000, -3000);
      for (let k = 0; k < 20; k++) {
        s.write(
          Buffer.concat(
            Array.from({ length: 1000 }, (_, i) => pack({ id: `flood-${k * 1000 + i}`, lat, lon, ts: T0 + k })),
          ),
        );
        await new Promise((r) => setTimeout(r, ATTACK_MS / 20));
      }
      s.destroy();
    },
    (b, a) => {
      const rejected = delta(b, a, 'geofence_ingest_rejected_total{reason="new_device_rate"}');
      assert.ok(rejected >= 18_000, `new ids over the budget rejected: ${rejected}`);
      assert.ok(delta(b, a, 'geofence_devices') <= 2000, 'the registry took only the budget');
    },
  );
  await attack(
    'teleport (one device jumping 2 km across 10 x 10 fences each ping)',
    async () => {
      const s = await open(port, TOKEN);
      for (let k = 0; k < 200; k++) {
        const [lat, lon] = k % 2 === 0 ? at(-100, -100) : at(1900, 1900);
        s.write(pack({ id: 'teleporter', lat, lon, ts: T0 + k * 1000 }));
        await new Promise((r) => setTimeout(r, ATTACK_MS / 200));
      }
      s.destroy();
    },
    (b, a) => {
      assert.ok(delta(b, a, 'geofence_implausible_segments_total') >= 190, 'implausible moves counted');
      assert.ok(delta(b, a, 'geofence_triggers_total{type="CROSS"}') === 0, 'no CROSS amplification');
    },
  );
  await attack(
    'trickle (a frame one byte every 100 ms)',
    async () => {
      const s = await open(port, TOKEN);
      const [lat, lon] = at(0, 0);
      const frame = pack({ id: 'trickler', lat, lon, ts: T0 });
      for (let i = 0; i < frame.length - 1 && !s.destroyed; i++) {
        s.write(frame.subarray(i, i + 1));
        await new Promise((r) => setTimeout(r, 100));
      }
      await closed(s, 'trickle');
    },
    (b, a) => assert.equal(delta(b, a, 'geofence_ingest_connections_dropped_total{reason="frame_deadline"}'), 1),
  );
  await attack(
    'idle hold (40 connections that send nothing after the token)',
    async () => {
      const idle = await Promise.all(Array.from({ length: 40 }, () => open(port, TOKEN)));
      await Promise.all(idle.map((s) => closed(s, 'idle hold')));
    },
    (b, a) => assert.equal(delta(b, a, 'geofence_ingest_connections_dropped_total{reason="idle"}'), 40),
  );
  await attack(
    'held bytes (8 connections each holding 100 KB of a 900 KB frame, budget 256 KiB)',
    async () => {
      const big = pack({ id: 'x'.repeat(900_000), lat: 52.5, lon: 13.4, ts: T0 });
      const holders: Socket[] = [];
      for (let c = 0; c < 8; c++) {
        const s = await open(port, TOKEN);
        s.write(big.subarray(0, 100_000));
        holders.push(s);
        await new Promise((r) => setTimeout(r, 50));
      }
      // The budget holds about two of these partial frames: all but the newest few are closed.
      await waitFor(() => holders.filter((s) => s.destroyed).length >= 6, 15_000, 'held-bytes closures');
      for (const s of holders) s.destroy();
    },
    (b, a) => {
      assert.ok(delta(b, a, 'geofence_ingest_connections_dropped_total{reason="held_bytes"}') >= 6);
      assert.ok(series(a, 'geofence_ingest_held_bytes') <= 256 * 1024);
    },
  );
  await attack(
    'unauthenticated (a producer without the token)',
    async () => {
      const s = await open(port, null);
      const [lat, lon] = at(0, 5000);
      // Pings straight away, no AUTH line: refused once the first 512 bytes hold no line (or after 10 s).
      s.write(Buffer.concat(Array.from({ length: 20 }, (_, k) => pack({ id: 'intruder', lat, lon, ts: T0 + k }))));
      await closed(s, 'unauthenticated');
    },
    (b, a) => assert.equal(delta(b, a, 'geofence_ingest_connections_dropped_total{reason="unauthenticated"}'), 1),
  );

  sending = false;
  await honestLoop;
  const sentRounds = round;
  honest.end();
  // Every honest ping enters or leaves its square (the first is inside): one trigger per ping per device.
  await waitFor(
    () => hook.received.filter((t) => String(t.deviceId).startsWith('honest')).length >= HONEST * sentRounds,
    30_000,
    'every honest trigger',
  );
  p.child.kill('SIGTERM');
  await p.exited;
  await hook.stop();
  for (const f of figures) console.log(`# ${f}`);
  const honestTriggers = hook.received.filter((t) => String(t.deviceId).startsWith('honest'));
  assert.equal(honestTriggers.length, HONEST * sentRounds);
  assert.deepEqual(checkDeliveryContract(honestTriggers, { complete: true, stays: true }).problems, []);
  assert.ok(
    !hook.received.some((t) => ['intruder', 'trickler', 'teleporter'].includes(String(t.deviceId))),
    'no trigger for a refused attacker',
  );
}
