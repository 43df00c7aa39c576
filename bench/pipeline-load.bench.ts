/**
 * End-to-end load: the load generator (its own process, msgpack over TCP at a set rate) against a router with 10,000
 * fences (seeded synthetic city) and one downstream: an in-process callback (default), or with `--downstream webhook`
 * a real local webhook (a receiver process of its own answering 200 at once) with the default downstream options. For each rate: sustained accepted and
 * processed events/s (medians of 250 ms samples while the generator runs), shed pings, and held time
 * (admission -> handed to the downstream) P50 / P99 / max (bucket upper bounds) from the router's histogram between
 * `--warmup-seconds` (default 1) after the router accepted its first ping and the end of the run (steady state), and
 * P99 and max over the whole run (cold start included).
 *
 *   npx tsc -p tsconfig.json && node dist/bench/pipeline-load.bench.js [--rates 100000,200000] [--seconds 6]
 *       [--encoding shared] [--pool-size N] [--ingest-threads N] [--shards N] [--connections N] [--warmup-seconds S]
 *       [--downstream webhook|jetstream|mqtt|ndjson] [--event-step-ms 8000 --radius-m 6000]   (a trigger-rich fleet, see loadgen.ts)
 *       [--mqtt-url mqtt://127.0.0.1:1883] [--mqtt-version 5|4]   (the MQTT broker, and MQTT 5 or 3.1.1)
 *       [--webhook-limit gradient|aimd|...|N]   (the webhook's concurrency limit; a number is a fixed limit)
 *       [--generator replay|encode] [--rounds 16] [--thread-cpu]
 *
 * The generator (default `replay`, loadgen/replay-loadgen.ts) encodes `--rounds` pings per device before the clock
 * starts and replays them, reporting its own CPU (`generatorCpuShare` of one core, `generatorCpuUsPerPing`); a rate of
 * `max` sends flat out. `--generator encode` (loadgen/loadgen.ts) encodes each ping as it sends it. With event steps,
 * a replay that wraps within the run sends the whole fleet back to its first positions at once (see `warnOfWrap`):
 * give `--rounds` enough to cover the run (at least rate x seconds / devices) to measure a steady fleet.
 *
 * Writes bench/out/pipeline-load.json (pipeline-load-webhook.json with the webhook). A rate "holds" when nothing was
 * shed, every ping sent was processed, and the held-time P99 is at most 10 ms. With the webhook it also reports the
 * triggers delivered per second while the generator ran (median of 250 ms samples), the live share (triggers
 * delivered without passing through the backlog log), the spilled triggers, and how long after the generator stopped
 * the last trigger was delivered.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createRouter, generateSyntheticCity, heldTimeWindow } from '../src/index.js';
import type { DownstreamOptions } from '../src/config/options.js';

const { values } = parseArgs({
  options: {
    rates: { type: 'string', default: '100000,200000,300000,400000,500000' },
    seconds: { type: 'string', default: '6' },
    encoding: { type: 'string', default: 'shared' },
    'pool-size': { type: 'string', default: '1' },
    'ingest-threads': { type: 'string', default: '1' },
    shards: { type: 'string', default: '8' },
    connections: { type: 'string', default: '4' },
    devices: { type: 'string', default: '10000' },
    'warmup-seconds': { type: 'string', default: '1' },
    downstream: { type: 'string', default: 'callback' },
    'mqtt-url': { type: 'string', default: 'mqtt://127.0.0.1:1883' },
    'mqtt-version': { type: 'string', default: '5' },
    'webhook-limit': { type: 'string' },
    // Passed to the generator: event time per ping of a device (0: the wall clock) and the fleet's radius.
    'event-step-ms': { type: 'string', default: '0' },
    'radius-m': { type: 'string', default: '15000' },
    // Per-thread CPU (router threads from /proc/self/task, the generator from /proc/<pid>/stat) over the steady window.
    'thread-cpu': { type: 'boolean', default: false },
    // replay: frames encoded before the clock starts and replayed (loadgen/replay-loadgen.ts); encode: encoded as sent.
    generator: { type: 'string', default: 'replay' },
    // Pings per device the replay generator encodes before it starts.
    rounds: { type: 'string', default: '16' },
  },
});
// A rate, or "max" (the replay generator flat out).
const rates = values.rates!.split(',').map((r) => (r === 'max' ? r : Number(r)));
if (!['replay', 'encode'].includes(values.generator!))
  throw new RangeError(`--generator must be replay or encode, got ${values.generator}`);
if (rates.includes('max') && values.generator !== 'replay')
  throw new RangeError('--rates max needs --generator replay');
const seconds = Number(values.seconds);
const warmupMs = Number(values['warmup-seconds']) * 1000;
const fences = generateSyntheticCity({ seed: 42, fenceCount: 10_000 });
const webhook = values.downstream === 'webhook';
/** The webhook's concurrency limit (`--webhook-limit`: a limit's name or a fixed number; default: the product's). */
const webhookLimit =
  values['webhook-limit'] === undefined
    ? null
    : /^\d+$/.test(values['webhook-limit'])
      ? Number(values['webhook-limit'])
      : // The router refuses a name it does not know, naming the option.
        (values['webhook-limit'] as 'gradient');
const SINK_KINDS = ['callback', 'webhook', 'jetstream', 'mqtt', 'ndjson'];
if (!SINK_KINDS.includes(values.downstream!))
  throw new RangeError(`--downstream must be one of ${SINK_KINDS.join(', ')}, got ${values.downstream}`);

/**
 * The downstream under test other than the callback and the webhook: NATS JetStream on 127.0.0.1:4222 (stream
 * GFBENCH, created on first use), Mosquitto on 127.0.0.1:1883 (QoS 1), or an NDJSON file in a scratch folder; each
 * with the default downstream options. Delivered = acknowledged by the server (written, for the file).
 */
function brokerDownstream(rate: number | 'max'): DownstreamOptions {
  if (values.downstream === 'jetstream') {
    return {
      name: 'js',
      kind: 'jetstream',
      servers: ['nats://127.0.0.1:4222'],
      subject: `gfbench${rate}.{type}`,
      stream: `GFBENCH${rate}`,
    };
  }
  if (values.downstream === 'mqtt')
    return {
      name: 'mqtt',
      kind: 'mqtt',
      url: values['mqtt-url'],
      protocolVersion: values['mqtt-version'] === '4' ? 4 : 5,
      topic: 'gfbench/{type}',
      clientId: `gf-bench-${rate}`,
    };
  return {
    name: 'file',
    kind: 'ndjson',
    path: join(mkdtempSync(join(tmpdir(), 'gr-bench-ndjson-')), 'triggers.ndjson'),
  };
}

/** The receiver process (webhook runs only) and its port. */
async function startReceiver(): Promise<{
  port: number;
  count: () => Promise<{ triggers: number }>;
  stop: () => void;
}> {
  const child = spawn(process.execPath, [fileURLToPath(new URL('./fixtures/webhook-receiver.js', import.meta.url))], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines: ((line: string) => void)[] = [];
  let buf = '';
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.shift()?.(line);
    }
  });
  const next = (): Promise<string> => new Promise((resolve) => lines.push(resolve));
  const port = (JSON.parse(await next()) as { port: number }).port;
  return {
    port,
    count: async () => {
      const p = next();
      child.stdin.write('count\n');
      return JSON.parse(await p) as { triggers: number };
    },
    stop: () => child.stdin.end(),
  };
}

/** One number per thread of `pid` ('self' for this process), read from `/proc/<pid>/task/<tid>/<file>`. */
function perThread(pid: string, file: string, read: (text: string) => number): Map<string, number> {
  const m = new Map<string, number>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return m;
  }
  for (const tid of tids) {
    try {
      m.set(tid, read(readFileSync(`/proc/${pid}/task/${tid}/${file}`, 'utf8')));
    } catch {
      // The thread exited between the listing and the read.
    }
  }
  return m;
}

/** CPU and wait-for-a-core seconds per router thread, by name (`geofence_thread_cpu*_seconds_total` of a scrape). */
async function namedThreadCpu(router: { metricsText(): Promise<string> }): Promise<Map<string, [number, number]>> {
  const text = await router.metricsText();
  const m = new Map<string, [number, number]>();
  for (const x of text.matchAll(/^geofence_thread_cpu(_wait)?_seconds_total\{thread="([^"]+)"\} (\S+)$/gm)) {
    const v = m.get(x[2]!) ?? [0, 0];
    v[x[1] === undefined ? 0 : 1] = Number(x[3]);
    m.set(x[2]!, v);
  }
  return m;
}

/** CPU ticks (user + system, 1/CLK_TCK s) per thread of `pid`. */
function threadTicks(pid: string): Map<string, number> {
  return perThread(pid, 'stat', (text) => {
    const f = text.split(') ')[1]!.split(' ');
    return Number(f[11]) + Number(f[12]);
  });
}

/** Nanoseconds each thread of `pid` spent runnable but waiting for a CPU (schedstat, field 2). */
function threadRunqueueWaitNs(pid: string): Map<string, number> {
  return perThread(pid, 'schedstat', (text) => Number(text.split(' ')[1]));
}

/** Ticks per second of /proc stat times (getconf CLK_TCK; 100 on Linux). */
const CLK_TCK = 100;

function median(xs: number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function runRate(rate: number | 'max'): Promise<Record<string, unknown>> {
  let delivered = 0;
  const receiver = webhook ? await startReceiver() : null;
  const router = await createRouter({
    fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    shards: Number(values.shards),
    poolSize: Number(values['pool-size']),
    ingestThreads: Number(values['ingest-threads']),
    ringCapacitySlots: 65536,
    maxDevices: 50_000,
    ingest: { sharedStructures: values.encoding === 'shared' },
    stateDir: null,
    downstreams: !['callback', 'webhook'].includes(values.downstream!)
      ? [brokerDownstream(rate)]
      : receiver === null
        ? [
            {
              name: 'sink',
              kind: 'callback',
              maxBatchTriggers: 256,
              queueCapacitySlots: 1 << 16,
              callback: (ts) => void (delivered += ts.length),
            },
          ]
        : [
            {
              name: 'hook',
              kind: 'webhook',
              url: `http://127.0.0.1:${receiver.port}/hook`,
              ...(webhookLimit === null ? {} : { limit: webhookLimit }),
            },
          ],
    log: () => undefined,
  });
  const replay = values.generator === 'replay';
  warnOfWrap(replay, rate);
  const script = fileURLToPath(
    new URL(replay ? './loadgen/replay-loadgen.js' : './loadgen/loadgen.js', import.meta.url),
  );
  const child = spawn(
    process.execPath,
    [
      script,
      '--port',
      String(router.ingestPort),
      '--rate',
      String(rate),
      '--seconds',
      String(seconds),
      '--encoding',
      values.encoding!,
      '--connections',
      values.connections!,
      '--devices',
      values.devices!,
      '--event-step-ms',
      values['event-step-ms']!,
      '--radius-m',
      values['radius-m']!,
      '--bound-m',
      values['radius-m']!,
      ...(replay ? ['--rounds', values.rounds!] : []),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let cpuAtWarm = new Map<string, number>();
  let namedAtWarm: Promise<Map<string, [number, number]>> | null = null;
  let genWaitAtWarm = 0;
  let genWaitLast = 0;
  let genAtWarm = 0;
  let processedAtWarm = 0;
  let warmAtMs = 0;
  const genTicks = (): number => [...threadTicks(String(child.pid)).values()].reduce((a, b) => a + b, 0);
  // The status line's view: held-time P99 of each second (histogram deltas).
  const perSecondP99: number[] = [];
  // The same before the steady window (the cold start).
  const coldSecondsP99: number[] = [];
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  // Steady state: held times are taken from `warmup-seconds` after the router first accepted a ping (not after the
  // spawn: the generator process takes up to a second to start on a busy host) to the end of the generator's run.
  let warm = router.stats();
  let firstAcceptedMs = -1;
  let warmTaken = false;
  const accepted: number[] = [];
  const processed: number[] = [];
  const deliveredPerSec: number[] = [];
  // The first downstream's limit and requests in flight at each sample after the warm-up: whether the limit held
  // delivery back (pressed: every permit in use).
  const limitSamples: number[] = [];
  let pressedSamples = 0;
  let last = router.stats();
  let lastT = performance.now();
  let ticks = 0;
  let lastSecond = last;
  let genLast = 0;
  const timer = setInterval(() => {
    const s = router.stats();
    const t = performance.now();
    const dt = (t - lastT) / 1000;
    if (firstAcceptedMs < 0 && s.accepted > 0) firstAcceptedMs = t;
    if (!warmTaken && firstAcceptedMs >= 0 && t - firstAcceptedMs >= warmupMs) {
      warmTaken = true;
      warm = s;
      cpuAtWarm = threadTicks('self');
      if (values['thread-cpu']) namedAtWarm = namedThreadCpu(router);
      genWaitAtWarm = [...threadRunqueueWaitNs(String(child.pid)).values()].reduce((a, b) => a + b, 0);
      genAtWarm = genTicks();
      processedAtWarm = s.processed;
      warmAtMs = t;
    }
    if (++ticks % 4 === 0) {
      const w = heldTimeWindow(lastSecond, s);
      lastSecond = s;
      if (warmTaken && w.samples > 0) perSecondP99.push(w.p99Ms);
      else if (w.samples > 0) coldSecondsP99.push(w.p99Ms);
    }
    if (s.accepted > 0 && last.accepted > 0) {
      accepted.push((s.accepted - last.accepted) / dt);
      processed.push((s.processed - last.processed) / dt);
      deliveredPerSec.push((s.delivered - last.delivered) / dt);
    }
    if (warmTaken) {
      const d0 = s.downstreams[0];
      if (d0 !== undefined) {
        limitSamples.push(d0.limit);
        if (d0.inflight >= d0.limit) pressedSamples++;
      }
      genLast = genTicks() || genLast;
      genWaitLast = [...threadRunqueueWaitNs(String(child.pid)).values()].reduce((a, b) => a + b, 0) || genWaitLast;
    }
    last = s;
    lastT = t;
  }, 250);
  await new Promise<void>((resolve) => child.once('exit', () => resolve()));
  clearInterval(timer);
  const steady = heldTimeWindow(warm, router.stats());
  const cpuEnd = threadTicks('self');
  const processedEnd = router.stats().processed;
  const windowS = (performance.now() - warmAtMs) / 1000;
  const steadyPings = processedEnd - processedAtWarm;
  // CPU per thread over the steady window: share of one core, and microseconds per ping processed.
  const threadCpu: Record<string, string> = {};
  if (values['thread-cpu']) {
    // Router threads by name (the router's own per-thread CPU metrics), the rest of the process (V8's and libuv's
    // helper threads) together.
    const namedEnd = await namedThreadCpu(router);
    const namedWarm = (await namedAtWarm) ?? new Map<string, [number, number]>();
    let namedSeconds = 0;
    for (const [name, [cpu, wait]] of [...namedEnd].sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }))) {
      const [cpu0, wait0] = namedWarm.get(name) ?? [cpu, wait];
      const d = cpu - cpu0;
      namedSeconds += d;
      // CPU share of one core, CPU per ping, and time runnable but waiting for a core (ms per second).
      threadCpu[name] =
        `${((d / windowS) * 100).toFixed(0)}% ${((d / steadyPings) * 1e6).toFixed(2)}us wait=${(((wait - wait0) / windowS) * 1000).toFixed(0)}ms/s`;
    }
    let routerTicks = 0;
    for (const [tid, v] of cpuEnd) routerTicks += v - (cpuAtWarm.get(tid) ?? 0);
    const other = routerTicks / CLK_TCK - namedSeconds;
    threadCpu.otherThreads = `${((other / windowS) * 100).toFixed(0)}%`;
    // Ingest thread 0 also submits the containment tasks: its event-loop delay (last second) delays them.
    const loop = /^geofence_thread_event_loop_delay_p99_seconds\{thread="ingest"\} (\S+)$/m.exec(
      await router.metricsText(),
    );
    if (loop !== null) threadCpu.ingestLoopDelayP99 = `${(Number(loop[1]) * 1000).toFixed(1)}ms`;
    threadCpu.generator = `${(((genLast - genAtWarm) / CLK_TCK / windowS) * 100).toFixed(0)}% wait=${((genWaitLast - genWaitAtWarm) / 1e6 / windowS).toFixed(0)}ms/s`;
    threadCpu.router = `${((routerTicks / CLK_TCK / windowS) * 100).toFixed(0)}% ${((routerTicks / CLK_TCK / steadyPings) * 1e6).toFixed(2)}us`;
  }
  const gen = JSON.parse(out.trim()) as {
    sent: number;
    achievedPerSec: number;
    cpuShareOfOneCore?: number;
    cpuUsPerPing?: number;
  };
  const generatorDoneMs = performance.now();
  const deadline = Date.now() + 10_000;
  while (router.stats().accepted + router.stats().rejectedTotal < gen.sent && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  // Every trigger delivered (the backlog drained): how long after the generator stopped.
  const deliveredBy = Date.now() + 120_000;
  while (router.stats().delivered < router.stats().triggersTotal && Date.now() < deliveredBy)
    await new Promise((r) => setTimeout(r, 20));
  const lastDeliveredAfterMs = performance.now() - generatorDoneMs;
  const s = await router.close();
  if (receiver !== null) {
    delivered = (await receiver.count()).triggers;
    receiver.stop();
  } else if (values.downstream !== 'callback') {
    delivered = s.downstreams[0]!.delivered;
  }
  const hook = s.downstreams[0]!;
  return {
    targetPerSec: rate,
    generator: values.generator,
    generatorPerSec: gen.achievedPerSec,
    // The replay generator's own CPU while it sent (share of one core, and per ping).
    ...(gen.cpuShareOfOneCore === undefined
      ? {}
      : { generatorCpuShare: gen.cpuShareOfOneCore, generatorCpuUsPerPing: gen.cpuUsPerPing }),
    medianAcceptedPerSec: Math.round(median(accepted)),
    medianProcessedPerSec: Math.round(median(processed)),
    sent: gen.sent,
    accepted: s.accepted,
    processed: s.processed,
    shed: s.shedTotal,
    rejected: s.rejectedTotal,
    triggers: s.triggersTotal,
    delivered,
    ...(values.downstream !== 'callback'
      ? {
          medianDeliveredPerSec: Math.round(median(deliveredPerSec)),
          spilled: hook.spilled,
          liveShare: Number((1 - hook.spilled / Math.max(1, hook.delivered)).toFixed(4)),
          deadLettered: hook.deadLettered,
          lastDeliveredAfterGeneratorMs: Math.round(lastDeliveredAfterMs),
          limitAtEnd: hook.limit,
          limitMedian: median(limitSamples),
          pressedShare: Number((pressedSamples / Math.max(1, limitSamples.length)).toFixed(3)),
        }
      : {}),
    steadyHeldP50Ms: Number(steady.p50Ms.toFixed(3)),
    steadyHeldP99Ms: Number(steady.p99Ms.toFixed(3)),
    steadyHeldMaxMs: Number(steady.maxMs.toFixed(3)),
    steadyTriggers: steady.samples,
    wholeRunHeldP99Ms: Number(s.heldTimeP99Ms.toFixed(3)),
    heldMaxMs: Number(s.heldTimeMaxMs.toFixed(1)),
    coldSecondsHeldP99Ms: coldSecondsP99.map((v) => Number(v.toFixed(1))),
    perSecondHeldP99Ms: perSecondP99.map((v) => Number(v.toFixed(1))),
    checkpoints: s.checkpoints,
    lastCheckpointPauseMs: Number(s.checkpointPauseMs.toFixed(2)),
    lastCheckpointMs: Number(s.checkpointLastMs.toFixed(2)),
    loadAvg1: Number(loadavg()[0]!.toFixed(2)),
    ...(values['thread-cpu'] ? { threadCpu } : {}),
    ...(s.admittedByIngestThread.length > 1 ? { admittedByIngestThread: s.admittedByIngestThread } : {}),
    holds: s.shedTotal === 0 && s.processed === gen.sent && steady.p99Ms <= 10,
  };
}

const rows: Record<string, unknown>[] = [];
/**
 * The replay generator sends its `--rounds` pings per device again and again, and at each wrap every device jumps back
 * to its first position at once: with event steps (`--event-step-ms`) over a pass that covers kilometres, that is a
 * burst of ENTER / EXIT triggers from the whole fleet within a fraction of a second (about 100,000 at 50,000 pings/s
 * with the defaults), which the router takes as the overload it is. Says so when a run will wrap.
 */
function warnOfWrap(replay: boolean, rate: number | 'max'): void {
  const devices = Number(values.devices);
  if (!replay || rate === 'max' || !(Number(values['event-step-ms']) > 0)) return;
  if (Number(values.rounds) * devices >= rate * seconds) return;
  const needed = Math.ceil((rate * seconds) / devices) + 1;
  console.warn(
    `--rounds ${values.rounds} at ${rate} pings/s: the replay wraps within the ${seconds} s run, and at each wrap ` +
      `every device jumps back to its first position at once (a burst of triggers); --rounds ${needed} does not wrap`,
  );
}

for (const rate of rates) rows.push(await runRate(rate));
console.table(rows);
mkdirSync(new URL('../../bench/out/', import.meta.url), { recursive: true });
writeFileSync(
  new URL(`../../bench/out/pipeline-load${webhook ? '-webhook' : ''}.json`, import.meta.url),
  `${JSON.stringify({ date: new Date().toISOString(), seconds, encoding: values.encoding, poolSize: values['pool-size'], ingestThreads: values['ingest-threads'], shards: values.shards, downstream: values.downstream, eventStepMs: values['event-step-ms'], radiusM: values['radius-m'], rows }, null, 2)}\n`,
);
