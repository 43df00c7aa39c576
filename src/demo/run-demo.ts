/**
 * The embedded demo (main thread): a synthetic city's fences written to a temporary fences file (so SIGHUP reloads
 * work), a router listening on 127.0.0.1, a simulated fleet pinging it over TCP, an in-process downstream with
 * drifting latency and a fixed-limit NDJSON downstream, and one status line a second.
 */
import type { LoggerLike } from '../log/router-log.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DemoFlags } from '../config/cli-args.js';
import { mergeOptionInputs } from '../config/cli-args.js';
import type { DownstreamOptions, RouterOptionsInput } from '../config/options.js';
import { generateSyntheticCity, syntheticCityBounds } from '../fences/synthetic-city.js';
import { M_PER_DEG } from '../fences/geometry.js';
import type { RouterStats } from '../pipeline/stats.js';
import type { Router } from '../router/api.js';
import { createRouter } from '../router/create-router.js';
import { formatStatusLine } from '../router/status.js';
import { mulberry32 } from '../fences/synthetic-fleet.js';
import { SimulatedService } from './simulated-service.js';
import { DemoTraffic } from './traffic.js';

/** Settings of the demo (flags override them). */
export interface DemoSettings {
  /** Stop by itself after this many seconds (null: run until a signal). */
  seconds: number | null;
  /** Simulated devices. */
  devices: number;
  /** Synthetic-city fences. */
  fences: number;
  /** Seed of the city and the fleet. */
  seed: number;
  /** Time between status lines, ms. */
  statusIntervalMs: number;
  /** Share of the fences marked compliance. */
  complianceFraction: number;
  /** dwellMs of every fence (a DWELL after this long inside). */
  dwellMs: number;
  /** Concurrent batches the simulated service serves. */
  serviceCapacity: number;
}

/** Defaults: 3,000 fences (5 % compliance, DWELL after 5 s), 20,000 devices, a status line a second. */
const DEMO_DEFAULTS: Readonly<DemoSettings> = Object.freeze({
  seconds: null,
  devices: 20_000,
  fences: 3_000,
  seed: 7,
  statusIntervalMs: 1_000,
  complianceFraction: 0.05,
  dwellMs: 5_000,
  serviceCapacity: 16,
});

/** Name of the demo's in-process downstream. */
const DEMO_SERVICE_NAME = 'demo-service';
/** Name of the demo's NDJSON downstream. */
const DEMO_AUDIT_NAME = 'demo-audit';
/** Port the demo's admin server prefers (the router's default); a free one is taken when it is busy. */
const PREFERRED_ADMIN_PORT = 9464;

/** A running demo. */
export interface RunningDemo {
  /** The router it drives. */
  readonly router: Router;
  /** Resolves when `seconds` have passed (never when there is no limit). */
  readonly timeUp: Promise<void>;
  /** Stops the status lines and the fleet (before the router is closed). */
  stop(): Promise<void>;
  /** Lines describing what the demo did, for the summary. */
  summaryLines(): string[];
  /** Removes the demo's temporary directory. */
  cleanup(): void;
}

function portIsFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, host, () => probe.close(() => resolve(true)));
  });
}

/**
 * Starts the demo: `input` is what the config file and flags gave (they win over the demo's choices, except that the
 * demo needs the TCP listener); `flags` the demo flags; `print` receives the header and status lines.
 */
export async function startDemo(
  input: RouterOptionsInput,
  flags: DemoFlags,
  print: (line: string) => void,
  logger: LoggerLike,
): Promise<RunningDemo> {
  const settings: DemoSettings = { ...DEMO_DEFAULTS, ...flags };
  if (input.listenHost === null)
    throw new RangeError('the demo sends its fleet through the telemetry listener: drop --no-listen');
  const dir = mkdtempSync(join(tmpdir(), 'geofence-demo-'));
  try {
    const city = {
      seed: settings.seed,
      fenceCount: settings.fences,
      complianceFraction: settings.complianceFraction,
      dwellMs: settings.dwellMs,
    };
    const base: RouterOptionsInput = {
      listenHost: '127.0.0.1',
      listenPort: 0,
      adminHost: '127.0.0.1',
      adminPort: (await portIsFree('127.0.0.1', PREFERRED_ADMIN_PORT)) ? PREFERRED_ADMIN_PORT : 0,
      maxDevices: Math.max(100_000, settings.devices),
      stateDir: join(dir, 'state'),
    };
    const options = mergeOptionInputs(base, input);
    let fenceNote = `${settings.fences} synthetic-city fences (${Math.round(settings.complianceFraction * 100)} % compliance, DWELL after ${settings.dwellMs / 1000} s)`;
    if (input.fencesFile === undefined || input.fencesFile === null) {
      const geojson = generateSyntheticCity(city);
      options.fencesFile = join(dir, 'city-fences.geojson');
      writeFileSync(options.fencesFile, JSON.stringify(geojson));
    } else {
      fenceNote = `fences from ${input.fencesFile}`;
    }
    const service = new SimulatedService(
      { capacity: settings.serviceCapacity },
      () => performance.now(),
      mulberry32(settings.seed ^ 0x51ce),
    );
    const auditPath = join(dir, 'enter-exit.ndjson');
    const demoDownstreams: DownstreamOptions[] = [
      {
        name: DEMO_SERVICE_NAME,
        kind: 'callback',
        callback: (triggers) => service.handle(triggers.length),
        limit: 'gradient',
        queueCapacitySlots: 1 << 15,
      },
      {
        name: DEMO_AUDIT_NAME,
        kind: 'ndjson',
        path: auditPath,
        limit: 4,
        queueCapacitySlots: 1 << 15,
        subscribe: { types: ['ENTER', 'EXIT'] },
      },
    ];
    options.downstreams = [...(input.downstreams ?? []), ...demoDownstreams];
    const router = await createRouter({ ...options, logger });
    const b = syntheticCityBounds(city);
    const traffic = new DemoTraffic({
      devices: settings.devices,
      seed: settings.seed,
      centreLat: (b.minLat + b.maxLat) / 2,
      centreLon: (b.minLon + b.maxLon) / 2,
      radiusM: ((b.maxLat - b.minLat) / 2) * M_PER_DEG,
    });
    const o = router.options;
    const host =
      o.listenHost === '0.0.0.0' || o.listenHost === '::' || o.listenHost === null ? '127.0.0.1' : o.listenHost;
    try {
      await traffic.start(host, router.ingestPort!);
    } catch (err) {
      await router.close();
      throw err;
    }
    const t = traffic.options;
    print(
      `demo: ${fenceNote}; fleet of ${settings.devices} devices (${Math.round(t.parkedFraction * 100)} % parked), shift change every ${t.shiftPeriodMs / 1000} s from ${t.firstShiftAtMs / 1000} s`,
    );
    print(`demo: telemetry tcp://${host}:${router.ingestPort} (MessagePack over ${t.connections} connections)`);
    if (router.adminPort !== null) print(`demo: metrics http://${o.adminHost}:${router.adminPort}/metrics`);
    print(
      `demo: ${DEMO_SERVICE_NAME}: in-process callback, ${service.options.capacity} concurrent, service time drifting ${service.options.minServiceMs}-${service.options.maxServiceMs} ms, gradient limit`,
    );
    print(`demo: ${DEMO_AUDIT_NAME}: ENTER/EXIT to ${auditPath}, fixed limit 4`);
    print(
      `demo: Ctrl-C drains and prints a summary${settings.seconds !== null ? `; stops by itself after ${settings.seconds} s` : ''}; SIGHUP reloads ${options.fencesFile}`,
    );

    const startMs = performance.now();
    let previous: RouterStats = router.stats();
    let previousMs = performance.now();
    const status = setInterval(() => {
      const now = performance.now();
      const current = router.stats();
      const shift = traffic.inShiftChange ? ' SHIFT-CHANGE' : '';
      print(`${formatStatusLine(previous, current, now - previousMs, now - startMs)}${shift}`);
      previous = current;
      previousMs = now;
    }, settings.statusIntervalMs);
    let timer: NodeJS.Timeout | null = null;
    const timeUp = new Promise<void>((resolve) => {
      if (settings.seconds !== null) timer = setTimeout(resolve, settings.seconds * 1000);
    });
    return {
      router,
      timeUp,
      async stop() {
        clearInterval(status);
        if (timer !== null) clearTimeout(timer);
        await traffic.stop();
      },
      summaryLines: () => [
        `  demo       pings_sent=${traffic.sent} shift_changes=${traffic.shiftChanges} service_batches=${service.servedBatches} service_triggers=${service.servedTriggers} service_max_queued=${service.maxQueued}`,
      ],
      cleanup: () => rmSync(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
