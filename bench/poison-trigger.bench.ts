/**
 * Delivery past a trigger the downstream can never take, and the cost of sending such triggers alone: the dispatcher
 * with the product's downstream defaults (3 attempts, the breaker on, batches of up to 128) and its webhook sink
 * against a real HTTP receiver on loopback (test/dispatch/fixtures.ts, 8 workers, 1 ms a request).
 *
 * - `poison`: the receiver answers 500 to any request holding device 0's fourth trigger. --devices devices get
 *   --rounds triggers each, a round every 2 ms; the figure is the time until every other device's triggers are
 *   delivered (at most --limit-s), with the other devices' triggers parked or dead-lettered, the requests and the
 *   triggers per request.
 * - `poison-chatty`: as `poison`, but device 0 gets --chatty triggers a round (the others one): its triggers behind the
 *   parked poison outnumber half the memory (16,384 triggers by default) within the run.
 * - `outage`: the receiver fails every request (500) for the first --outage-ms, then takes everything; the figure is
 *   the time from its return until everything is delivered, with the requests and triggers per request after it.
 * - `flapping`: as `outage`, but for the first --outage-ms the receiver fails every request for 100 ms, then takes
 *   every request for 100 ms, by turns.
 * - `flaky10`, `flaky20`: the receiver fails one request in 10 (in 5) at random, throughout; the figure is the time
 *   until everything is delivered or parked, with the requests and triggers per request.
 *
 * Every run checks, at the receiver, that the other devices' triggers arrived each once and in per-device order, and
 * reports the backlog log's bytes on disk (segments and set-aside files): the most seen, and when the other devices'
 * triggers were all delivered (with `--segment-mib 1`, segments of 1 MiB instead of 64, so a run of seconds fills
 * several: what a parked device keeps on disk then shows).
 *
 *   npx tsc -p tsconfig.json && node dist/bench/poison-trigger.bench.js [--runs 3] [--devices 1000] [--rounds 50]
 *       [--outage-ms 2000] [--limit-s 20] [--segment-mib 64]
 *
 * Writes bench/out/poison-trigger.json.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Dispatcher } from '../src/dispatch/dispatcher.js';
import { IndexNamer } from '../src/dispatch/sinks/format.js';
import { WebhookSink } from '../src/dispatch/sinks/webhook-sink.js';
import { DeadLetterReason, Lane, TriggerType } from '../src/shm/layout.js';
import { assertPerDeviceOrder, CapacityServer, sleep, TriggerRecord } from '../test/dispatch/fixtures.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    devices: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '50' },
    'outage-ms': { type: 'string', default: '2000' },
    'limit-s': { type: 'string', default: '20' },
    chatty: { type: 'string', default: '200' },
    'segment-mib': { type: 'string', default: '64' },
    scenarios: { type: 'string', default: 'poison,poison-chatty,outage,flapping,flaky10,flaky20' },
  },
});
const runs = Number(values.runs);
const devices = Number(values.devices);
const rounds = Number(values.rounds);
const outageMs = Number(values['outage-ms']);
const limitMs = Number(values['limit-s']) * 1000;
const chatty = Number(values.chatty);
const segmentBytes = Number(values['segment-mib']) * 1024 * 1024;

/** What one run measured. */
interface RunResult {
  scenario: Scenario;
  /** poison: from the first trigger until the other devices had all of theirs; outage: from the receiver's return. */
  ms: number;
  /** The other devices' triggers delivered, of `expected`. */
  delivered: number;
  expected: number;
  /** Triggers parked at the end (poison: the poison itself is one). */
  parked: number;
  /** Dead letters, undeliverable. */
  undeliverable: number;
  /** Triggers the dispatcher wrote to the backlog log. */
  spilled: number;
  /** Requests answered 200, and the triggers they held. */
  requests: number;
  triggers: number;
  /** Bytes of the backlog log on disk: the most seen, and when `delivered` reached `expected` (or at the limit). */
  peakBacklogBytes: number;
  backlogBytes: number;
}

const POISON = { deviceId: 'device-0', seq: 4 };
const ALL_SCENARIOS = ['poison', 'poison-chatty', 'outage', 'flapping', 'flaky10', 'flaky20'] as const;
type Scenario = (typeof ALL_SCENARIOS)[number];
const SCENARIOS = values.scenarios.split(',').map((name) => {
  if (!(ALL_SCENARIOS as readonly string[]).includes(name)) throw new Error(`--scenarios: unknown scenario ${name}`);
  return name as Scenario;
});

async function runOnce(scenario: Scenario): Promise<RunResult> {
  const poisoned = scenario === 'poison' || scenario === 'poison-chatty';
  const server = new CapacityServer({
    workers: 8,
    serviceMs: 1,
    mode: scenario === 'outage' || scenario === 'flapping' ? 'error' : 'ok',
    ...(scenario === 'flaky10' ? { failRate: 0.1 } : scenario === 'flaky20' ? { failRate: 0.2 } : {}),
    ...(poisoned ? { poison: (t) => t.deviceId === POISON.deviceId && t.seq === POISON.seq } : {}),
  });
  await server.start();
  const d = new Dispatcher({
    stateDir: mkdtempSync(join(tmpdir(), 'poison-bench-')),
    namer: new IndexNamer(),
    maxDevices: devices,
    backlogSegmentMaxBytes: segmentBytes,
    deviceSlotOf: (id) => (typeof id === 'string' ? Number(id.slice(7)) : -1),
    downstreams: [{ name: 'hook', sink: new WebhookSink({ url: server.url, timeoutMs: 5000 }) }],
  });
  const ds = d.downstreams[0]!;
  const r = new TriggerRecord();
  const others = (): number => server.received.filter((t) => t.deviceId !== POISON.deviceId).length;
  const expected = poisoned ? (devices - 1) * rounds : devices * rounds;
  const delivered = (): number => (poisoned ? others() : server.received.length);
  const t0 = performance.now();
  let back = scenario === 'outage' || scenario === 'flapping' ? Infinity : t0;
  let requestsAtBack = 0;
  let triggersAtBack = 0;
  const comeBack = (): void => {
    if (back !== Infinity) return;
    if (performance.now() - t0 < outageMs) {
      if (scenario === 'flapping')
        server.settings.mode = Math.floor((performance.now() - t0) / 100) % 2 === 0 ? 'error' : 'ok';
      return;
    }
    server.settings.mode = 'ok';
    back = performance.now();
    requestsAtBack = server.stats.requests;
    triggersAtBack = server.stats.triggers;
  };
  let peakBacklogBytes = 0;
  const notePeak = (): void => {
    peakBacklogBytes = Math.max(peakBacklogBytes, ds.backlog!.liveBytes);
  };
  let deviceZeroSeq = 0;
  for (let seq = 1; seq <= rounds; seq++) {
    for (let k = scenario === 'poison-chatty' ? chatty : 1; k > 0; k--) {
      deviceZeroSeq++;
      d.offer(r.set(deviceZeroSeq, TriggerType.CROSS, Lane.TRANSITION, deviceZeroSeq % 16, 0).f64, r.i32, 0, 0);
    }
    for (let device = 1; device < devices; device++)
      d.offer(r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 16, device).f64, r.i32, 0, 0);
    d.pump();
    comeBack();
    notePeak();
    await sleep(2);
  }
  const end = performance.now() + limitMs + outageMs;
  while (delivered() < expected && performance.now() < end) {
    d.pump();
    comeBack();
    notePeak();
    await sleep(1);
  }
  const ms = performance.now() - back;
  const received = poisoned ? server.received.filter((t) => t.deviceId !== POISON.deviceId) : server.received;
  assertPerDeviceOrder(received, scenario);
  if (new Set(received.map((t) => `${String(t.deviceId)}/${t.seq}`)).size !== received.length)
    throw new Error(`${scenario}: a trigger arrived twice`);
  const result: RunResult = {
    scenario,
    ms: Math.round(ms),
    delivered: delivered(),
    expected,
    parked: ds.parked,
    undeliverable: ds.deadLetteredByReason[DeadLetterReason.UNDELIVERABLE]!,
    spilled: ds.spilled,
    requests: server.stats.requests - server.stats.poisoned - requestsAtBack,
    triggers: server.stats.triggers - triggersAtBack,
    peakBacklogBytes,
    backlogBytes: ds.backlog!.liveBytes,
  };
  await d.close(100);
  await server.kill();
  return result;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Bytes as MiB, two decimals. */
const mib = (bytes: number): string => (bytes / (1024 * 1024)).toFixed(2);

const results: RunResult[] = [];
for (let run = 0; run < runs; run++) {
  for (const scenario of SCENARIOS) {
    const r = await runOnce(scenario);
    results.push(r);
    console.log(
      `run ${run + 1} ${scenario}: ${r.ms} ms, delivered ${r.delivered} of ${r.expected}, parked ${r.parked}, ` +
        `undeliverable ${r.undeliverable}, spilled ${r.spilled}, ${r.requests} requests taken, ${(r.triggers / Math.max(1, r.requests)).toFixed(1)} triggers a request, ` +
        `backlog ${mib(r.backlogBytes)} MiB (most ${mib(r.peakBacklogBytes)})`,
    );
  }
}
for (const scenario of SCENARIOS) {
  const rs = results.filter((r) => r.scenario === scenario);
  console.log(
    `median ${scenario}: ${median(rs.map((r) => r.ms))} ms, delivered ${median(rs.map((r) => r.delivered))} of ${rs[0]!.expected}, ` +
      `parked ${median(rs.map((r) => r.parked))}, undeliverable ${median(rs.map((r) => r.undeliverable))}, ` +
      `spilled ${median(rs.map((r) => r.spilled))}, ` +
      `${median(rs.map((r) => r.requests))} requests, ${median(rs.map((r) => r.triggers / Math.max(1, r.requests))).toFixed(1)} triggers a request, ` +
      `backlog ${mib(median(rs.map((r) => r.backlogBytes)))} MiB (most ${mib(median(rs.map((r) => r.peakBacklogBytes)))})`,
  );
}
const out = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..', 'bench', 'out');
mkdirSync(out, { recursive: true });
writeFileSync(
  join(out, 'poison-trigger.json'),
  JSON.stringify({ devices, rounds, outageMs, segmentBytes, results }, null, 2),
);
