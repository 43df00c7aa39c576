/** Two router processes on one JetStream telemetry stream, the first stopped mid-stream (for the source's tests). */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { NatsServer } from '../support/nats-server.js';
import { sinkTraffic, tcpReferenceTriggers } from '../support/sink-run.js';
import type { Trigger } from '../../src/index.js';
import type { CityTraffic } from '../support/city-traffic.js';
import { oncePerIdentity, publishPaced, whole } from '../support/jetstream-publish.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';

/** What two runs across a stop wrote. */
export interface RunsAcrossStop {
  /** Triggers the first router wrote. */
  run1: Trigger[];
  /** Triggers the second router wrote. */
  run2: Trigger[];
  /** The second router's stderr. */
  stderr2: string;
}

/**
 * Starts the first router (`first` arguments), publishes two thirds of `traffic` over about 2 s and stops the router
 * with `stop` after 1.8 s (later when a hold waits to be ready); publishes the rest, starts the second router (`second`) and stops it (SIGTERM) once every
 * trigger of `expected` is written by one of them, as named by `key` (or after 30 s).
 */
export async function runAcrossStop(o: {
  natsUrl: string;
  traffic: CityTraffic;
  devices: number;
  expected: readonly Trigger[];
  key: (t: Trigger) => string;
  first: string[];
  second: string[];
  /** What the first (1) or the second (2) router has written so far (the first is read once it is stopped). */
  written: (which: 1 | 2) => Trigger[];
  /** How long after the first router's stop its output is read (a receiver may still answer its requests), ms. */
  firstSettleMs?: number;
  /**
   * `hold` is called `heldMs` before the first router's stop (a receiver stops answering), once `ready` (when given)
   * has resolved; `release` after the first router's output is read.
   */
  hold?: { heldMs: number; ready?: () => Promise<void>; hold: () => void; release: () => void };
  /** Without a hold: the first router is stopped once this resolves (default: once `written(1)` has a trigger). */
  ready?: () => Promise<void>;
  stop: 'SIGKILL' | 'SIGTERM';
  after: (fn: () => void) => void;
}): Promise<RunsAcrossStop> {
  const a = new CliProcess(o.first, 60_000);
  o.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const cut = Math.floor((o.traffic.pings * 2) / 3);
  const publishing = publishPaced(o.natsUrl, o.traffic, o.devices, 0, cut, 2000);
  const heldMs = o.hold?.heldMs ?? 0;
  await new Promise((r) => setTimeout(r, 1800 - heldMs));
  // Stopped once `ready` (the hold's) resolves, by default once it has written a trigger (a slow host may not have yet).
  const ready =
    o.hold?.ready ?? o.ready ?? (() => waitFor(() => o.written(1).length > 0, 20_000, 'the first router writing'));
  await ready();
  o.hold?.hold();
  await new Promise((r) => setTimeout(r, heldMs));
  a.child.kill(o.stop);
  const exit = await a.exited;
  assert.equal(o.stop === 'SIGKILL' ? exit.signal : exit.code, o.stop === 'SIGKILL' ? 'SIGKILL' : 0, a.stderr);
  await publishing;
  await new Promise((r) => setTimeout(r, o.firstSettleMs ?? 0));
  const run1 = o.written(1);
  o.hold?.release();
  await publishPaced(o.natsUrl, o.traffic, o.devices, cut, o.traffic.pings, 20_000);
  const b = new CliProcess(o.second, 60_000);
  o.after(() => b.child.kill('SIGKILL'));
  const want = new Set(o.expected.map(o.key));
  const complete = (): boolean => {
    const have = new Set([...run1, ...o.written(2)].map(o.key));
    return [...want].every((w) => have.has(w));
  };
  await waitFor(complete, 30_000, 'every reference trigger written').catch(() => undefined);
  b.child.kill('SIGTERM');
  await b.exited;
  assert.ok(run1.length > 0 && run1.length < o.expected.length, `the first router was cut short: ${run1.length}`);
  return { run1, run2: o.written(2), stderr2: b.stderr };
}

/**
 * Arguments of a router process on stream TEL of the NATS server at `natsPort`: fences file, state directory, no
 * listener (unless `extra` names one with `--listen`) or admin server, checkpoints every 500 ms, NDJSON to `out` (null:
 * no NDJSON), then `extra` (--partitions ...).
 */
export function jetstreamRouterArgs(o: {
  fences: string;
  stateDir: string;
  natsPort: number;
  out: string | null;
  extra: readonly string[];
}): string[] {
  return [
    '--fences',
    o.fences,
    '--state-dir',
    o.stateDir,
    ...(o.extra.some((a) => a === '--listen' || a.startsWith('--listen=')) ? [] : ['--no-listen']),
    '--no-admin',
    '--source',
    `jetstream://127.0.0.1:${o.natsPort}/TEL`,
    '--checkpoint-interval-ms',
    '500',
    ...(o.out === null ? [] : ['--ndjson', o.out]),
    ...o.extra,
  ];
}

/**
 * One scenario's setting: the seeded traffic of `devices` devices and its reference triggers (the same pings through
 * one router over TCP), a fresh NATS server (stopped after the test), and a directory holding the fences file.
 */
export async function jetstreamScenario(
  t: TestContext,
  seed: number,
  devices: number,
): Promise<{ traffic: CityTraffic; expected: Trigger[]; nats: NatsServer; dir: string; fences: string }> {
  const traffic = sinkTraffic(seed, devices);
  const expected = await tcpReferenceTriggers(traffic);
  const nats = await NatsServer.start();
  t.after(() => nats.stop());
  const dir = mkdtempSync(join(tmpdir(), 'gr-js-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify(traffic.fences));
  return { traffic, expected, nats, dir, fences };
}

/**
 * Writes a config file (in `dir`) with one webhook downstream `hook` to `url` whose memory holds only 512 triggers, so
 * what the receiver does not take spills to the backlog log (a durable file) early, and the downstream options
 * `extra`; returns its path.
 */
export function smallQueueWebhookConfig(dir: string, url: string, extra: Record<string, unknown> = {}): string {
  const config = join(dir, 'router.json');
  writeFileSync(
    config,
    JSON.stringify({ downstreams: [{ name: 'hook', kind: 'webhook', url, queueCapacitySlots: 512, ...extra }] }),
  );
  return config;
}

/**
 * The arguments of a router of scenario `s` (jetstreamScenario) on state directory `dir/state`, delivering to one
 * webhook at `url` (smallQueueWebhookConfig with the downstream options `downstream`), then `extra`.
 */
export function webhookRouterArgs(
  s: { fences: string; dir: string; nats: NatsServer },
  url: string,
  downstream: Record<string, unknown> = {},
  extra: readonly string[] = [],
): string[] {
  return jetstreamRouterArgs({
    fences: s.fences,
    stateDir: join(s.dir, 'state'),
    natsPort: s.nats.port,
    out: null,
    extra: ['--config', smallQueueWebhookConfig(s.dir, url, downstream), ...extra],
  });
}

/**
 * Starts member `name` of a partition group on stream TEL (`--partitions auto`, 2 s leases, state directory
 * `dir/name`), `extra` naming its downstreams; killed after the test.
 */
export function startGroupMember(
  t: TestContext,
  o: { fences: string; dir: string; natsPort: number; name: string; extra: readonly string[] },
): CliProcess {
  const p = new CliProcess(
    jetstreamRouterArgs({
      fences: o.fences,
      stateDir: join(o.dir, o.name),
      natsPort: o.natsPort,
      out: null,
      extra: [...o.extra, '--partitions', 'auto', '--lease-ms', '2000', '--member-name', o.name],
    }),
    240_000,
  );
  t.after(() => p.child.kill('SIGKILL'));
  return p;
}

/** How many partitions member `p` reads now (its last "reading partitions" line; 0 before one). */
export function partitionsRead(p: CliProcess): number {
  const lines = [...p.stderr.matchAll(/partition group: reading partitions ([\d,]+)/g)];
  return lines.length === 0 ? 0 : lines.at(-1)![1]!.split(',').length;
}

/**
 * Checks the drain summary of a stopped router: `offered + recovered = delivered + replayed + final + kept`, nothing
 * dead-lettered for good or left undelivered (final + kept = 0), and no ping shed, lost or rejected (the stream is a
 * pausable source: it waits for room).
 */
export function assertDeliveredEverything(p: CliProcess): void {
  const pings = /pings +accepted=\d+ .* lost=(\d+) rejected=(\d+)/.exec(p.stdout);
  const shed = /\n +shed .* total=(\d+) /.exec(p.stdout);
  assert.ok(pings !== null && shed !== null, p.stdout);
  assert.deepEqual(
    [Number(pings[1]), Number(pings[2]), Number(shed[1])],
    [0, 0, 0],
    `lost, rejected, shed: ${p.stdout}`,
  );
  const line = /offered=(\d+) recovered=(\d+) delivered=(\d+) replayed=(\d+) final=(\d+) kept=(\d+)/.exec(p.stdout);
  assert.ok(line !== null, p.stdout);
  const [offered, recovered, delivered, replayed, final, kept] = line.slice(1).map(Number) as number[];
  assert.equal(offered! + recovered!, delivered! + replayed! + final! + kept!, line[0]);
  assert.equal(final! + kept!, 0, line[0]);
}

/**
 * Checks what a receiver got across routers against the reference `expected`: each device's triggers in seq order
 * (one received again is the same trigger under the same seq), none of the reference missing, and once per
 * `(deviceId, seq)` exactly the reference. Returns how many distinct identities that is.
 */
export function assertReceivedReference(received: readonly Trigger[], expected: readonly Trigger[]): number {
  assert.deepEqual(checkDeliveryContract(received, { allowRedelivery: true }).problems, []);
  const stored = oncePerIdentity(received);
  const have = new Set(stored.map(whole));
  const want = expected.map(whole);
  assert.deepEqual(
    want.filter((w) => !have.has(w)),
    [],
    'no reference trigger is missing',
  );
  assert.deepEqual(stored.map(whole).sort(), want.sort(), 'once per (deviceId, seq): exactly the reference');
  return stored.length;
}

/**
 * Starts a router with `args` (killed after the test), waits up to 60 s for `server` to have received every trigger
 * of `expected` (as `key` tells triggers apart: by default whole, seq included), runs `beforeStop`, stops it with
 * SIGTERM and checks it exits 0; returns it.
 */
export async function runUntilReceived(
  t: TestContext,
  args: readonly string[],
  server: { received: Trigger[] },
  expected: readonly Trigger[],
  beforeStop: (p: CliProcess) => Promise<void> = async () => undefined,
  key: (x: Trigger) => string = whole,
): Promise<CliProcess> {
  const p = new CliProcess([...args], 120_000);
  t.after(() => p.child.kill('SIGKILL'));
  const want = expected.map(key);
  const complete = (): boolean => {
    const have = new Set(server.received.map(key));
    return want.every((w) => have.has(w));
  };
  // What the router said is what tells a slow run from a lost trigger: printed when the wait runs out.
  await waitFor(complete, 60_000, 'every reference trigger received').catch(() =>
    console.log(`not every reference trigger received within 60 s; the router's log so far:\n${p.stderr}`),
  );
  await beforeStop(p);
  p.child.kill('SIGTERM');
  assert.equal((await p.exited).code, 0, p.stderr);
  return p;
}

/** `args` (of jetstreamRouterArgs) with an admin server on a free port instead of none. */
export function withAdmin(args: readonly string[]): string[] {
  return args.flatMap((a) => (a === '--no-admin' ? ['--admin', '127.0.0.1:0'] : [a]));
}

/**
 * The samples of metric `name` on the `/metrics` of router process `p` (started with withAdmin), by their label text
 * (`read_from="newest_state_gap"`; '' for none).
 */
export async function scrapeMetric(p: CliProcess, name: string): Promise<Map<string, number>> {
  await p.waitFor('the admin server', (x) => /admin http:\/\/127\.0\.0\.1:\d+/.test(x.stderr));
  const port = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\w+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (m !== null && m[1] === name) out.set(m[2] ?? '', Number(m[3]));
  }
  return out;
}

/** A trigger without its seq: what a re-derivation under a new seq repeats. */
export const content = (x: Trigger): string => `${String(x.deviceId)} ${x.type} ${x.fenceId} ${x.eventTimeMs}`;

/** What killWithWebhookHeld leaves: the router's arguments, the receiver, the reference, the first router's output. */
export interface HeldWebhookKill {
  args: string[];
  server: TriggerServer;
  expected: Trigger[];
  /** What the killed router wrote to stderr. */
  firstStderr: string;
  /** Triggers the receiver had taken when the first router was killed. */
  firstReceived: number;
}

/**
 * A router of a fresh scenario (seed `seed`, `devices` devices) delivering to a webhook receiver, with `extra`
 * arguments: the first half of the pings published, `settled()` awaited, then the receiver holds every request while
 * the second half is published; after several checkpoint intervals the router is killed (SIGKILL) with triggers in its
 * memory, and the receiver's held requests are answered 503.
 */
export async function killWithWebhookHeld(
  t: TestContext,
  o: { seed: number; devices: number; extra: readonly string[]; settled: (natsUrl: string) => Promise<void> },
): Promise<HeldWebhookKill> {
  const { traffic, expected, nats, dir, fences } = await jetstreamScenario(t, o.seed, o.devices);
  let held: (() => void)[] | null = null;
  const server = new TriggerServer(() => (held === null ? 200 : new Promise<number>((r) => held!.push(() => r(503)))));
  await server.start();
  t.after(() => server.stop());
  const args = webhookRouterArgs({ fences, dir, nats }, server.url, {}, o.extra);
  const a = new CliProcess(args, 60_000);
  t.after(() => a.child.kill('SIGKILL'));
  await a.waitFor('the source', (p) => /telemetry jetstream/.test(p.stderr));
  const half = Math.floor(traffic.pings / 2);
  await publishPaced(nats.url, traffic, o.devices, 0, half, 5000);
  await o.settled(nats.url);
  held = [];
  await publishPaced(nats.url, traffic, o.devices, half, traffic.pings, 5000);
  // Several checkpoint intervals with the receiver holding every request: triggers wait in memory.
  await new Promise((r) => setTimeout(r, 1500));
  a.child.kill('SIGKILL');
  await a.exited;
  const waiting = held;
  held = null;
  for (const answer of waiting) answer();
  return { args, server, expected, firstStderr: a.stderr, firstReceived: server.received.length };
}
