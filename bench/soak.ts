/**
 * The soak: the real binary under a 3x overload over TCP for minutes, with one healthy and one misbehaving webhook.
 *
 *   npm run soak                      # 10 minutes after a 2-minute warm-up; writes bench/soak.json and bench/soak.svg
 *   npm run soak -- --quick           # about 2 minutes in all; writes bench/out/soak-quick.json and .svg
 *
 * Set-up: a dense city (3,019 fences of 60-300 m in 2 x 2 km, a few of them compliance fences covering about
 * `--compliance-share` of the area, margin 0), a fleet of `--devices` devices inside it sent by the load generator
 * (its own process, `bench/loadgen`), two webhooks served by this process: `steady` (answers at once) and `flaky`
 * (a cycle of jittered 5-40 ms answers, 503 with Retry-After on a third of requests, hangs, connection resets, a
 * closed port, recovery). First a calibration at `--probe-rate` finds the rate the router processes on this host
 * (its capacity C, the median of the processed rate over the probe's second half); then the soak offers
 * `--multiple` x C for `--minutes` (C can be given with `--capacity` to skip the probe).
 *
 * Every `--scrape-ms` it scrapes `/metrics` and checks the accounting identities (scrape.ts) on that scrape. At the end
 * it stops the router with SIGTERM and reports: RSS and heap after warm-up (median of the first and the last minute,
 * growth in %: the main thread's heap in use, and per router thread the heap in use, the heap committed and the live
 * heap, what survived the thread's latest full collection, from `geofence_thread_*`; the heap check takes every
 * thread's live heap together and fails on growth over 5 %), COMPLIANCE pings shed (must be 0) and the compliance share of the capacity against
 * the reserved slice, held-time P99 per downstream and lane over the soak and, at `steady`, per 10 s window (the
 * `geofence_dispatch_held_time_seconds` histogram, bucket upper bounds), and its pipeline part's P99 per lane
 * (`geofence_pipeline_time_seconds`), identity violations (must be 0), a memory
 * series every 10 s, the containment workers' time parked waiting for records per second (median after warm-up;
 * near 0: the workers are the constraint), and each receiver's contract check (order
 * violations must be 0). Exit code 0 when every check holds, 1 otherwise. `--router-log <file>` keeps the router's
 * stderr; `--config-extra '<json>'` adds router options to its config file (`--downstream-extra '<json>'` to each of the
 * two downstreams); the router's node runs with the flags the binary
 * is meant to run with (CLI_NODE_FLAGS) and `--router-node-flags '<flags>'` (a profile, a heap setting).
 * `--generator-nice N` runs the load generator at niceness N, so on a host with fewer cores than the router has busy
 * threads the generator waits for a core rather than the router (the receivers keep theirs: their answers are part of
 * what the router measures).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { CLI_NODE_FLAGS } from '../src/cli/node-flags.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { generateSyntheticCity, mulberry32 } from '../src/fences/synthetic-city.js';
import { CheckingReceiver, type Behaviour } from './soak/receiver.js';
import {
  histogramOf,
  identityViolations,
  LANES,
  parseMetrics,
  quantileBetween,
  shardRings,
  sumOf,
  type Series,
} from './soak/scrape.js';
import { renderSvg } from './soak/svg.js';
import { coordinateBox } from './support/coordinate-box.js';

const here = dirname(fileURLToPath(import.meta.url));
const MAIN = join(here, '..', 'src', 'cli', 'main.js');
const LOADGEN = join(here, 'loadgen', 'loadgen.js');
const REPO = join(here, '..', '..');

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    minutes: { type: 'string' },
    'warmup-seconds': { type: 'string' },
    'probe-seconds': { type: 'string' },
    'probe-rate': { type: 'string', default: '60000' },
    capacity: { type: 'string' },
    multiple: { type: 'string', default: '3' },
    devices: { type: 'string', default: '1000' },
    connections: { type: 'string', default: '4' },
    'compliance-share': { type: 'string', default: '0.012' },
    'flaky-period-s': { type: 'string' },
    'scrape-ms': { type: 'string', default: '1000' },
    'queue-delay-target-ms': { type: 'string' },
    out: { type: 'string' },
    'router-log': { type: 'string' },
    city: { type: 'string', default: 'district' },
    'config-extra': { type: 'string' },
    'downstream-extra': { type: 'string' },
    'malloc-arena-max': { type: 'string' },
    'router-node-flags': { type: 'string' },
    'generator-nice': { type: 'string' },
  },
});

const num = (name: string, text: string | undefined, fallback: number): number => {
  const v = text === undefined ? fallback : Number(text);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`--${name} must be a positive number, got ${String(text)}`);
  return v;
};
const quick = values.quick!;
const soakS = num('minutes', values.minutes, quick ? 1 : 10) * 60;
const warmupS = num('warmup-seconds', values['warmup-seconds'], quick ? 20 : 120);
const probeS = num('probe-seconds', values['probe-seconds'], quick ? 10 : 20);
const probeRate = num('probe-rate', values['probe-rate'], 60_000);
const multiple = num('multiple', values.multiple, 3);
const devices = Math.floor(num('devices', values.devices, 1000));
const connections = Math.floor(num('connections', values.connections, 4));
const complianceShare = num('compliance-share', values['compliance-share'], 0.012);
const flakyPeriodS = num('flaky-period-s', values['flaky-period-s'], quick ? 20 : 60);
const scrapeMs = num('scrape-ms', values['scrape-ms'], 1000);
const generatorNiceText = values['generator-nice'] ?? '0';
const generatorNice = Number(generatorNiceText);
if (!Number.isInteger(generatorNice) || generatorNice < 0 || generatorNice > 19)
  throw new RangeError(`--generator-nice must be an integer in [0, 19], got ${generatorNiceText}`);
const outPrefix = values.out ?? (quick ? join(REPO, 'bench', 'out', 'soak-quick') : join(REPO, 'bench', 'soak'));

/** The misbehaving downstream's cycle, by phase of `flakyPeriodS`. */
function flakyBehaviour(rng: () => number, startMs: number): (nowMs: number) => Behaviour {
  return (nowMs) => {
    const phase = (((nowMs - startMs) / 1000) % flakyPeriodS) / flakyPeriodS;
    if (phase < 0.4) return { kind: 'ok', delayMs: 5 + Math.floor(rng() * 35) };
    if (phase < 0.55) return rng() < 1 / 3 ? { kind: 'unavailable', retryAfterS: 1 } : { kind: 'ok', delayMs: 10 };
    if (phase < 0.65) return { kind: 'hang' };
    if (phase < 0.75) return { kind: 'reset' };
    if (phase < 0.85) return { kind: 'down' };
    return { kind: 'ok', delayMs: 2 };
  };
}

/**
 * The fences the fleet drives through, all in the same 2 x 2 km: `district` (400 fences of 30-150 m: about three
 * overlap at a point, the delivery zones and depots of a busy district) or `dense` (3,019 fences of 60-300 m: about
 * 24 overlap at a point, and at some points more than maxFencesPerDevice; the start-up stress case, whose containment
 * pass costs some 30 times more per ping). Compliance fences are marked until their boxes cover `complianceShare` of
 * the area.
 */
const CITIES: Record<string, { fenceCount: number; minRadiusM: number; maxRadiusM: number }> = {
  district: { fenceCount: 400, minRadiusM: 30, maxRadiusM: 150 },
  dense: { fenceCount: 3019, minRadiusM: 60, maxRadiusM: 300 },
};
const cityName = values.city!;
if (CITIES[cityName] === undefined)
  throw new RangeError(`--city must be one of ${Object.keys(CITIES).join(', ')}, got ${cityName}`);

/** Builds the city and marks compliance fences until their boxes cover `complianceShare` of its area. */
function buildCity(seed: number): object {
  const shape = CITIES[cityName]!;
  const city = generateSyntheticCity({ seed, ...shape, fencesPerKm2: shape.fenceCount / 4, complianceFraction: 0 });
  const rng = mulberry32(seed + 1);
  const features = city.features as {
    properties: Record<string, unknown>;
    geometry: { type: string; coordinates: unknown };
  }[];
  const cityAreaKm2 = 4;
  let covered = 0;
  let marked = 0;
  while (covered < complianceShare * cityAreaKm2 && marked < features.length) {
    const f = features[Math.floor(rng() * features.length)]!;
    // Polygons only: a circle's box is not in its coordinates.
    if (f.properties.compliance === true || f.geometry.type !== 'Polygon') continue;
    const box = coordinateBox(f.geometry.coordinates);
    const areaKm2 = (box[2] - box[0]) * 111.32 * Math.cos((52.52 * Math.PI) / 180) * ((box[3] - box[1]) * 110.57);
    if (covered + areaKm2 > complianceShare * cityAreaKm2 * 1.2) continue;
    f.properties.compliance = true;
    covered += areaKm2;
    marked++;
  }
  return city;
}

/**
 * Resident memory of a process by kind of mapping, from /proc/<pid>/smaps (Linux; null elsewhere), MiB: the brk
 * heap, anonymous mappings (malloc arenas of other threads, V8's spaces, ArrayBuffer backing stores), file-backed
 * mappings (code, shared libraries), and the thread stacks.
 */
function residentByKind(pid: number): Record<string, number> | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  } catch {
    return null;
  }
  const out: Record<string, number> = { brkHeap: 0, anonymous: 0, fileBacked: 0, stacks: 0, anonymousMappings: 0 };
  let kind = 'anonymous';
  for (const line of text.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head !== null) {
      const name = head[1]!;
      kind =
        name === '[heap]'
          ? 'brkHeap'
          : name.startsWith('[stack')
            ? 'stacks'
            : name === ''
              ? 'anonymous'
              : name.startsWith('/')
                ? 'fileBacked'
                : 'anonymous';
      if (name === '') out.anonymousMappings!++;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss !== null) out[kind] = out[kind]! + Number(rss[1]) / 1024;
  }
  for (const k of Object.keys(out)) out[k] = round(out[k]!);
  return out;
}

/** Starts the router binary; resolves with the process, its ports and a reader of its stderr. */
async function startRouter(
  args: string[],
): Promise<{ child: ChildProcess; port: number; admin: number; stderr: () => string; exited: Promise<number | null> }> {
  const arenas = values['malloc-arena-max'];
  const env = arenas === undefined ? process.env : { ...process.env, MALLOC_ARENA_MAX: arenas };
  // The flags the binary is meant to run with (as npm start passes them), then any given here.
  const nodeFlags = [...CLI_NODE_FLAGS, ...(values['router-node-flags']?.split(' ').filter((f) => f !== '') ?? [])];
  const child = spawn(process.execPath, [...nodeFlags, MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let err = '';
  let out = '';
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (err += s));
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
  const exited = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
  const deadline = Date.now() + 120_000;
  for (;;) {
    const t = /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(err);
    const a = /admin http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
    if (t !== null && a !== null)
      return { child, port: Number(t[1]), admin: Number(a[1]), stderr: () => err + out, exited };
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`router did not start:\n${err}`);
    await sleep(50);
  }
}

/** Runs the load generator at `rate` for `seconds`; resolves with its JSON summary. */
function loadgen(port: number, rate: number, seconds: number): Promise<{ sent: number; achievedPerSec: number }> {
  // Through nice(1), so every thread of the generator has the niceness from its start.
  const niced = generatorNice > 0 ? ['-n', String(generatorNice), process.execPath] : [];
  const child = spawn(
    generatorNice > 0 ? 'nice' : process.execPath,
    [
      ...niced,
      LOADGEN,
      '--port',
      String(port),
      '--rate',
      String(Math.round(rate)),
      '--seconds',
      String(seconds),
      '--devices',
      String(devices),
      '--connections',
      String(connections),
      '--encoding',
      'maps',
      '--radius-m',
      '950',
      '--bound-m',
      '980',
      '--seed',
      '7',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
  return new Promise((resolve, reject) => {
    child.once('close', (code) =>
      code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop()!)) : reject(new Error(`loadgen exited ${code}`)),
    );
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function scrape(admin: number): Promise<Series> {
  const res = await fetch(`http://127.0.0.1:${admin}/metrics`);
  return parseMetrics(await res.text());
}

const median = (xs: number[]): number => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length === 0
    ? Number.NaN
    : s.length % 2 === 1
      ? s[(s.length - 1) / 2]!
      : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Lanes whose held time at `steady` is followed per 10 s window. */
const HELD_WINDOW_LANES = ['transition', 'compliance'] as const;

/** Top of the plot's held-time panel, ms (a window above it is drawn at it). */
const HELD_PLOT_MAX_MS = 250;

/** One sample of the time series. */
interface Sample {
  tS: number;
  rssMiB: number;
  /** Main thread's heap in use (prom-client's nodejs_heap_size_used_bytes). */
  heapMiB: number;
  /** Heap in use and live heap (after the latest full collection) per router thread, MiB. */
  heapByThread: Record<string, number>;
  liveByThread: Record<string, number>;
  /** V8 heap committed (reserved pages) per router thread, MiB. */
  committedByThread: Record<string, number>;
  /** Memory outside the V8 heap per router thread, MiB. */
  externalByThread: Record<string, number>;
  /** Event-loop utilisation per router thread, 0..1. */
  loopByThread: Record<string, number>;
  /** The latest checkpoint's containment pause, ms. */
  checkpointPauseMs: number;
  fill: number;
  processed: number;
  /** The containment workers' time parked waiting for records, s (cumulative). */
  parkedS: number;
  offered: Record<string, number>;
  shed: Record<string, number>;
  /** The held-time histogram at `steady` per lane (cumulative counts), for the P99 of each 10 s window. */
  heldSteady: Record<string, { bounds: number[]; counts: number[] }>;
  /** Concurrency limit and requests in flight per downstream. */
  limit: Record<string, number>;
  inflight: Record<string, number>;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gr-soak-'));
  const fencesPath = join(dir, 'fences.geojson');
  writeFileSync(fencesPath, JSON.stringify(buildCity(7)));
  const t0 = Date.now();
  const steady = new CheckingReceiver(() => ({ kind: 'ok', delayMs: 0 }));
  const flaky = new CheckingReceiver(flakyBehaviour(mulberry32(3), t0));
  await steady.start();
  await flaky.start();
  const downstreams = ['steady', 'flaky'];
  const downstreamExtra =
    values['downstream-extra'] === undefined ? {} : (JSON.parse(values['downstream-extra']) as object);
  const config = {
    fencesFile: fencesPath,
    complianceMarginM: 0,
    ...(values['queue-delay-target-ms'] === undefined
      ? {}
      : { admission: { queueDelayTargetMs: Number(values['queue-delay-target-ms']) } }),
    stateDir: join(dir, 'state'),
    drainDeadlineMs: 10_000,
    downstreams: [
      { kind: 'webhook', name: 'steady', url: `http://127.0.0.1:${steady.port}/hook`, ...downstreamExtra },
      {
        kind: 'webhook',
        name: 'flaky',
        url: `http://127.0.0.1:${flaky.port}/hook`,
        timeoutMs: 2000,
        ...downstreamExtra,
      },
    ],
    ...(values['config-extra'] === undefined ? {} : (JSON.parse(values['config-extra']) as object)),
  };
  const configPath = join(dir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  // The flaky server's down phase closes its port.
  const downTimer = setInterval(() => {
    const b = flakyBehaviour(() => 0, t0)(Date.now());
    void flaky.setDown(b.kind === 'down');
  }, 100);

  const router = await startRouter(['--config', configPath, '--listen', '127.0.0.1:0', '--admin', '127.0.0.1:0']);
  // A soak that fails part-way must not leave the router running.
  process.once('exit', () => router.child.kill('SIGKILL'));
  log(`router up (telemetry ${router.port}, admin ${router.admin}); state ${dir}`);

  const samples: Sample[] = [];
  const violations: string[] = [];
  let scrapes = 0;
  let last: Series | null = null;
  let scraping = true;
  // The first scrape at or after the end of the warm-up (the held-time window starts there).
  let warmEndS = Infinity;
  let atWarmEnd: Series | null = null;
  let residentAtWarmEnd: Record<string, number> | null = null;
  const scrapeStart = Date.now();
  const scraper = (async () => {
    while (scraping) {
      const s = await scrape(router.admin).catch(() => null);
      if (s !== null) {
        scrapes++;
        last = s;
        for (const v of identityViolations(s, downstreams))
          if (violations.length < 50) violations.push(`scrape ${scrapes}: ${v}`);
        // The shard rings' fill (the COMPLIANCE ring's, nearly always empty, apart).
        const depth = shardRings(s, 'geofence_ring_depth_slots');
        const cap = shardRings(s, 'geofence_ring_capacity_slots');
        const tS = (Date.now() - scrapeStart) / 1000;
        if (atWarmEnd === null && tS >= warmEndS) {
          atWarmEnd = s;
          residentAtWarmEnd = residentByKind(router.child.pid!);
        }
        samples.push({
          tS,
          rssMiB: sumOf(s, 'process_resident_memory_bytes') / 2 ** 20,
          heapMiB: sumOf(s, 'nodejs_heap_size_used_bytes') / 2 ** 20,
          heapByThread: byThread(s, 'geofence_thread_heap_used_bytes'),
          liveByThread: byThread(s, 'geofence_thread_heap_live_bytes'),
          committedByThread: byThread(s, 'geofence_thread_heap_total_bytes'),
          loopByThread: byThread(s, 'geofence_thread_event_loop_utilization_ratio', 1),
          externalByThread: byThread(s, 'geofence_thread_external_memory_bytes'),
          checkpointPauseMs: sumOf(s, 'geofence_checkpoint_last_pause_seconds') * 1000,
          fill: cap > 0 ? depth / cap : 0,
          processed: sumOf(s, 'geofence_pings_processed_total'),
          parkedS: sumOf(s, 'geofence_containment_parked_seconds_total'),
          offered: Object.fromEntries(LANES.map((l) => [l, sumOf(s, 'geofence_pings_offered_total', { lane: l })])),
          shed: Object.fromEntries(LANES.map((l) => [l, sumOf(s, 'geofence_pings_shed_total', { lane: l })])),
          heldSteady: Object.fromEntries(
            HELD_WINDOW_LANES.map((lane) => [
              lane,
              histogramOf(s, 'geofence_dispatch_held_time_seconds', { downstream: 'steady', lane }),
            ]),
          ),
          limit: Object.fromEntries(
            downstreams.map((ds) => [ds, sumOf(s, 'geofence_dispatch_concurrency_limit', { downstream: ds })]),
          ),
          inflight: Object.fromEntries(
            downstreams.map((ds) => [ds, sumOf(s, 'geofence_dispatch_in_flight_requests', { downstream: ds })]),
          ),
        });
      }
      await sleep(scrapeMs);
    }
  })();

  // Calibration: the processed rate at the probe rate.
  let capacity = values.capacity === undefined ? Number.NaN : num('capacity', values.capacity, 1);
  let probe: { sent: number; achievedPerSec: number } | null = null;
  if (!Number.isFinite(capacity)) {
    const from = samples.length;
    probe = await loadgen(router.port, probeRate, probeS);
    const window = samples.slice(from).filter((x) => x.tS >= samples[from]!.tS + probeS / 2);
    const rates = window.slice(1).map((x, i) => (x.processed - window[i]!.processed) / (x.tS - window[i]!.tS));
    capacity = median(rates);
    log(`probe: offered ${probe.achievedPerSec}/s, processed ${Math.round(capacity)}/s (median)`);
    await sleep(3000);
  }
  const rate = capacity * multiple;
  const soakStartIdx = samples.length;
  const soakStartS = samples.length > 0 ? samples[samples.length - 1]!.tS : 0;
  warmEndS = soakStartS + warmupS;
  log(
    `soak: ${multiple} x ${Math.round(capacity)}/s = ${Math.round(rate)}/s for ${soakS + warmupS} s (warm-up ${warmupS} s)`,
  );
  const gen = await loadgen(router.port, rate, soakS + warmupS);
  const soakEndS = samples[samples.length - 1]!.tS;
  const atEnd = last!;
  const residentAtEnd = residentByKind(router.child.pid!);
  scraping = false;
  await scraper;
  router.child.kill('SIGTERM');
  const code = await router.exited;
  clearInterval(downTimer);
  await steady.stop();
  await flaky.stop();

  // Figures.
  const soak = samples.slice(soakStartIdx);
  const warmEnd = warmEndS;
  const after = soak.filter((x) => x.tS >= warmEnd);
  const firstMin = after.filter((x) => x.tS < warmEnd + 60);
  const lastMin = after.filter((x) => x.tS >= soakEndS - 60);
  const growth = (f: (x: Sample) => number): { first: number; last: number; pct: number } => {
    const a = median(firstMin.map(f));
    const b = median(lastMin.map(f));
    return { first: round(a), last: round(b), pct: round(((b - a) / a) * 100) };
  };
  const threads = [...new Set(after.flatMap((x) => Object.keys(x.heapByThread)))].sort();
  const total = (r: Record<string, number>): number => Object.values(r).reduce((a, v) => a + v, 0);
  const warmSample = after[0] ?? soak[0]!;
  const endSample = soak[soak.length - 1]!;
  const d = (lane: string, k: 'offered' | 'shed'): number => endSample[k][lane]! - warmSample[k][lane]!;
  const offeredAll = LANES.reduce((a, l) => a + d(l, 'offered'), 0);
  const soakSeconds = endSample.tS - warmSample.tS;
  const held: Record<string, Record<string, number>> = {};
  // The held-time window: from the first scrape after warm-up to the end of the soak.
  const warmSeries: Series | null = atWarmEnd;
  for (const ds of downstreams) {
    held[ds] = {};
    for (const lane of LANES) {
      const h1 = histogramOf(atEnd, 'geofence_dispatch_held_time_seconds', { downstream: ds, lane });
      const h0 =
        warmSeries === null
          ? { counts: [] }
          : histogramOf(warmSeries, 'geofence_dispatch_held_time_seconds', { downstream: ds, lane });
      held[ds]![lane] = round(quantileBetween(h0, h1, 0.99) * 1000);
    }
  }
  // The pipeline's part of it (admission to the dispatcher's take), per lane over the same window.
  const pipeline: Record<string, number> = {};
  for (const lane of LANES) {
    const h1 = histogramOf(atEnd, 'geofence_pipeline_time_seconds', { lane });
    const h0 =
      warmSeries === null ? { counts: [] } : histogramOf(warmSeries, 'geofence_pipeline_time_seconds', { lane });
    pipeline[lane] = round(quantileBetween(h0, h1, 0.99) * 1000);
  }
  const reservedFraction = 0.05;
  const complianceOfCapacity = d('compliance', 'offered') / soakSeconds / capacity;
  const summaryLine = /drained[^\n]*|kept=[^\n]*/.exec(router.stderr())?.[0] ?? '';
  const result = {
    command: `node dist/bench/soak.js ${process.argv.slice(2).join(' ')}`.trim(),
    host: { loadavgAtEnd: (await import('node:os')).loadavg().map(round) },
    city: cityName,
    capacityPerSec: Math.round(capacity),
    probe,
    offeredTargetPerSec: Math.round(rate),
    generator: gen,
    soakSeconds: round(soakSeconds),
    warmupSeconds: warmupS,
    scrapes,
    identityViolations: violations.length,
    identityExamples: violations.slice(0, 5),
    rssMiB: growth((x) => x.rssMiB),
    mallocArenaMax: values['malloc-arena-max'] ?? null,
    generatorNice,
    residentByKindMiB: { atWarmUpEnd: residentAtWarmEnd, atEnd: residentAtEnd },
    heapMiB: growth((x) => x.heapMiB),
    heapAllThreadsMiB: growth((x) => total(x.heapByThread)),
    liveHeapAllThreadsMiB: growth((x) => total(x.liveByThread)),
    heapCommittedAllThreadsMiB: growth((x) => total(x.committedByThread)),
    heapCommittedByThreadMiB: Object.fromEntries(
      threads.map((t) => [t, growth((x) => x.committedByThread[t] ?? Number.NaN)]),
    ),
    heapByThreadMiB: Object.fromEntries(threads.map((t) => [t, growth((x) => x.heapByThread[t] ?? Number.NaN)])),
    externalAllThreadsMiB: growth((x) => total(x.externalByThread)),
    externalByThreadMiB: Object.fromEntries(
      threads.map((t) => [t, growth((x) => x.externalByThread[t] ?? Number.NaN)]),
    ),
    loopUtilizationMedianByThread: Object.fromEntries(
      threads.map((t) => [t, round(median(after.map((x) => x.loopByThread[t] ?? Number.NaN)))]),
    ),
    liveHeapByThreadMiB: Object.fromEntries(threads.map((t) => [t, growth((x) => x.liveByThread[t] ?? Number.NaN)])),
    lanes: Object.fromEntries(
      LANES.map((l) => [
        l,
        {
          offered: d(l, 'offered'),
          shed: d(l, 'shed'),
          shedPct: round((d(l, 'shed') / Math.max(1, d(l, 'offered'))) * 100),
        },
      ]),
    ),
    shedPct: round((LANES.reduce((a, l) => a + d(l, 'shed'), 0) / Math.max(1, offeredAll)) * 100),
    complianceShareOfOffered: round(d('compliance', 'offered') / Math.max(1, offeredAll)),
    complianceShareOfCapacity: round(complianceOfCapacity),
    reservedFraction,
    complianceShedWholeRun: sumOf(atEnd, 'geofence_pings_shed_total', { lane: 'compliance' }),
    fenceEntryOverflowsWholeRun: sumOf(atEnd, 'geofence_fence_entry_overflows_total'),
    heldP99MsByDownstreamAndLane: held,
    pipelineP99MsByLane: pipeline,
    checkpointPauseMs: {
      median: round(median(after.map((x) => x.checkpointPauseMs))),
      max: round(Math.max(...after.map((x) => x.checkpointPauseMs))),
    },
    heldP99MsAllLanes: round(
      quantileBetween(
        warmSeries === null ? { counts: [] } : histogramOf(warmSeries, 'geofence_held_time_seconds', {}),
        histogramOf(atEnd, 'geofence_held_time_seconds', {}),
        0.99,
      ) * 1000,
    ),
    processedPerSecMedian: Math.round(
      median(after.slice(1).map((x, i) => (x.processed - after[i]!.processed) / (x.tS - after[i]!.tS))),
    ),
    // Worker-seconds the containment workers spent waiting for records per second (with one worker: the share of its
    // time), median of the scrape intervals after warm-up: near 0, the workers are the constraint.
    containmentParkedPerSecMedian: round(
      median(after.slice(1).map((x, i) => (x.parkedS - after[i]!.parkedS) / (x.tS - after[i]!.tS))),
    ),
    limitMedian: Object.fromEntries(downstreams.map((ds) => [ds, median(after.map((x) => x.limit[ds]!))])),
    inflightMedian: Object.fromEntries(downstreams.map((ds) => [ds, median(after.map((x) => x.inflight[ds]!))])),
    receivers: { steady: steady.counts, flaky: flaky.counts },
    exitCode: code,
    summary: summaryLine,
  };
  const checks = {
    identityEveryScrape: violations.length === 0,
    rssFlatWithin5Pct: Math.abs(result.rssMiB.pct) <= 5,
    // What every router thread holds: the live heap, what survives a full collection (the heap in use counts garbage
    // not collected yet and rises and falls with the timing of the collections). Less held is not a leak.
    liveHeapGrowthUnder5Pct: result.liveHeapAllThreadsMiB.pct <= 5,
    noComplianceShed: result.complianceShedWholeRun === 0,
    complianceWithinReservedSlice: complianceOfCapacity <= reservedFraction,
    complianceHeldP99Under10MsAtSteady: held.steady!.compliance! < 10,
    orderHeldAtEveryReceiver: steady.counts.orderViolations === 0 && flaky.counts.orderViolations === 0,
    noGapAtSteady: steady.counts.gapSeqs === 0,
    everyStayTracked: result.fenceEntryOverflowsWholeRun === 0,
  };
  // Every 10th sample of the memory figures, for a reader who wants the curve and not only its two ends.
  const memorySeries = soak
    .filter((_, i) => i % 10 === 0)
    .map((x) => ({
      tS: round(x.tS - soakStartS),
      rssMiB: round(x.rssMiB),
      committedMiB: Object.fromEntries(Object.entries(x.committedByThread).map(([k, v]) => [k, round(v)])),
      inUseMiB: round(total(x.heapByThread)),
      externalMiB: round(total(x.externalByThread)),
    }));
  // Held-time P99 at `steady` per window of 10 scrapes (about 10 s) after warm-up: whether the tail is spread over the run or comes in spells.
  const heldWindows: { tS: number; p99Ms: Record<string, number> }[] = [];
  for (let i = 10; i < after.length; i += 10) {
    const a = after[i - 10]!;
    const b = after[i]!;
    heldWindows.push({
      tS: round(b.tS - soakStartS),
      p99Ms: Object.fromEntries(
        HELD_WINDOW_LANES.map((lane) => [
          lane,
          round(quantileBetween(a.heldSteady[lane]!, b.heldSteady[lane]!, 0.99) * 1000),
        ]),
      ),
    });
  }
  // A window whose P99 is in the overflow bucket (Infinity) counts; one without samples (NaN) does not.
  const complianceWindows = heldWindows.map((w) => w.p99Ms.compliance!).filter((v) => !Number.isNaN(v));
  const heldP99MsSteadyBy10sWindow = {
    windows: heldWindows.length,
    complianceWindowsOver10Ms: complianceWindows.filter((v) => v > 10).length,
    complianceMedianOfWindowsMs: round(median(complianceWindows)),
    series: heldWindows,
  };
  const report = { ...result, checks, heldP99MsSteadyBy10sWindow, memorySeries };
  mkdirSync(dirname(outPrefix), { recursive: true });
  writeFileSync(`${outPrefix}.json`, `${JSON.stringify(report, null, 2)}\n`);
  const tS = soak.map((x) => x.tS - soakStartS);
  const shedRate = (lane: string): number[] =>
    soak.map((x, i) =>
      i === 0 ? Number.NaN : (x.shed[lane]! - soak[i - 1]!.shed[lane]!) / (x.tS - soak[i - 1]!.tS) / 1000,
    );
  writeFileSync(
    `${outPrefix}.svg`,
    renderSvg(
      `Soak: ${multiple} x ${Math.round(capacity).toLocaleString('en-US')} pings/s over TCP, steady + flaky webhook`,
      tS,
      [
        { title: 'RSS, MiB', lines: [{ label: 'rss', colour: '#1f77b4', values: soak.map((x) => x.rssMiB) }] },
        {
          title: 'Every router thread: heap and external memory, MiB',
          lines: [
            { label: 'committed', colour: '#17becf', values: soak.map((x) => total(x.committedByThread)) },
            { label: 'in use', colour: '#9467bd', values: soak.map((x) => total(x.heapByThread)) },
            { label: 'live (after full GC)', colour: '#8c564b', values: soak.map((x) => total(x.liveByThread)) },
            { label: 'external', colour: '#e377c2', values: soak.map((x) => total(x.externalByThread)) },
          ],
        },
        {
          title: `Held-time P99 at steady per 10 s, ms (drawn up to ${HELD_PLOT_MAX_MS})`,
          yMax: HELD_PLOT_MAX_MS,
          lines: HELD_WINDOW_LANES.map((lane) => ({
            label: lane,
            colour: lane === 'compliance' ? '#d62728' : '#ff7f0e',
            values: soak.map((x) => {
              const w = heldWindows.find((h) => h.tS >= x.tS - soakStartS);
              return w === undefined || x.tS < warmEnd ? Number.NaN : Math.min(HELD_PLOT_MAX_MS, w.p99Ms[lane]!);
            }),
          })),
        },
        {
          title: 'Telemetry ring fill, %',
          lines: [{ label: 'fill', colour: '#2ca02c', values: soak.map((x) => x.fill * 100) }],
        },
        {
          title: 'Shed, thousand pings/s by lane',
          lines: [
            { label: 'idle', colour: '#7f7f7f', values: shedRate('idle') },
            { label: 'transition', colour: '#ff7f0e', values: shedRate('transition') },
            { label: 'compliance', colour: '#d62728', values: shedRate('compliance') },
          ],
        },
      ],
      [{ atS: warmupS, label: 'warm-up ends' }],
    ),
  );
  if (values['router-log'] !== undefined) writeFileSync(values['router-log'], router.stderr());
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  rmSync(dir, { recursive: true, force: true });
  process.exitCode = Object.values(checks).every(Boolean) ? 0 : 1;
}

/** Per-thread values of a `thread`-labelled gauge, in units of `unit` (MiB by default). */
function byThread(s: Series, name: string, unit = 2 ** 20): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, v] of s) {
    const m = new RegExp(`^${name}\\{thread="([^"]+)"\\}$`).exec(key);
    if (m !== null) out[m[1]!] = v / unit;
  }
  return out;
}

const round = (v: number): number => (Number.isFinite(v) ? Math.round(v * 100) / 100 : v);
const log = (s: string): void => void process.stderr.write(`soak: ${s}\n`);

main().catch((e: unknown) => {
  process.stderr.write(`soak: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
