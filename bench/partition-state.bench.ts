/**
 * What keeping each partition's device state in JetStream costs, and how long a router on another state directory
 * takes to pick the partitions up, against a local nats-server started here.
 *
 * Per `--devices` count: a seeded fleet sends `--pings-per-device` pings each, 50 to a message, over 16 partitions
 * (the backlog is published first). Router A (all partitions, `checkpointIntervalMs` 1000) reads it; then, while it
 * idles, `--checkpoints` checkpoints are sampled: the local checkpoint's duration (geofence_checkpoint_last_duration
 * _seconds) and the store of the 16 partitions' state in the bucket (geofence_source_checkpoint_write_seconds, bytes).
 * A is closed (its last checkpoint stored), another `--tail` pings are published, and router B, on a new state
 * directory, starts on the same partitions: its start (reading the 16 stored checkpoints, restoring the devices) and
 * the time until it has read the tail are reported. A takeover after a crash adds the time to notice it.
 *
 *   node dist/bench/partition-state.bench.js [--devices 10000,100000] [--pings-per-device 2] [--checkpoints 5]
 *       [--tail 20000]
 *
 * Prints one JSON line per device count; writes bench/out/partition-state.json.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createRouter, type Router } from '../src/index.js';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { startNats } from './support/nats-server.js';
import { PartitionBatches } from './support/partition-batches.js';

const { values } = parseArgs({
  options: {
    devices: { type: 'string', default: '10000,100000' },
    'pings-per-device': { type: 'string', default: '2' },
    checkpoints: { type: 'string', default: '5' },
    tail: { type: 'string', default: '20000' },
  },
});
const PARTITIONS = 16;
const PER_MESSAGE = 50;
const fences = generateSyntheticCity({ seed: 1, fenceCount: 10_000 });
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Publishes `pings` pings of `fleet` from time `t0`, PER_MESSAGE a message grouped by partition, to `stream`. */
async function publish(url: string, fleet: Fleet, devices: number, pings: number, t0: number): Promise<void> {
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 5 };
  const nc = await connect({ servers: url });
  const batches = new PartitionBatches(jetstream(nc), PARTITIONS, PER_MESSAGE);
  for (let k = 0; k < pings; k++) {
    fleet.next(ping, t0 + Math.floor(k / devices) * 5000);
    batches.add(ping);
    if (batches.acks.length >= 2000) await Promise.all(batches.acks.splice(0));
  }
  batches.flush();
  await Promise.all(batches.acks);
  await nc.close();
}

function router(url: string, devices: number, log: (line: string) => void): Promise<Router> {
  return createRouter({
    fences,
    stateDir: join(mkdtempSync(join(tmpdir(), 'bench-pstate-')), 'state'),
    maxDevices: Math.max(65_536, 2 * devices),
    checkpointIntervalMs: 1000,
    jetstreamSource: { servers: [url], stream: 'TEL', partitionCount: PARTITIONS, createStream: false },
    log: (line) => log(line),
  });
}

/** A gauge's value in a metrics text (the first sample of `name`). */
function gauge(text: string, name: string): number {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
  return m === null ? NaN : Number(m[1]);
}

const results: object[] = [];
const nats = await startNats();
try {
  for (const devices of values.devices.split(',').map(Number)) {
    const nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    for await (const name of jsm.streams.names()) await jsm.streams.delete(name);
    await jsm.streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
    // Partition state of an earlier device count is left behind by deleting its bucket.
    await jsm.streams.delete('KV_GEOFENCE_PARTITION_STATE').catch(() => undefined);
    await nc.close();
    const fleet = new Fleet({ devices, seed: 3 });
    const pings = devices * Number(values['pings-per-device']);
    const t0 = Date.UTC(2026, 0, 1);
    await publish(nats.url, fleet, devices, pings, t0);
    const a = await router(nats.url, devices, () => undefined);
    while (a.stats().accepted < pings) await new Promise((r) => setTimeout(r, 20));
    const local: number[] = [];
    const stored: number[] = [];
    let bytes = 0;
    let seen = gauge(await a.metricsText(), 'geofence_checkpoints_total');
    while (local.length < Number(values.checkpoints)) {
      await new Promise((r) => setTimeout(r, 50));
      const text = await a.metricsText();
      const n = gauge(text, 'geofence_checkpoints_total');
      if (n === seen) continue;
      seen = n;
      // The partitions' store follows the local checkpoint in the same step: wait for it.
      await new Promise((r) => setTimeout(r, 400));
      const after = await a.metricsText();
      local.push(gauge(after, 'geofence_checkpoint_last_duration_seconds') * 1000);
      stored.push(gauge(after, 'geofence_source_checkpoint_write_seconds') * 1000);
      bytes = gauge(after, 'geofence_source_checkpoint_bytes');
    }
    await a.close();
    const tail = Number(values.tail);
    await publish(nats.url, fleet, devices, tail, t0 + Number(values['pings-per-device']) * 5000);
    const lines: string[] = [];
    const s0 = performance.now();
    const b = await router(nats.url, devices, (line) => lines.push(line));
    const startedMs = performance.now() - s0;
    while (b.stats().accepted < tail) await new Promise((r) => setTimeout(r, 5));
    const caughtUpMs = performance.now() - s0;
    const phase = (name: string): number => {
      const m = new RegExp(`${name} (\\d+) ms`).exec(lines.find((l) => l.startsWith('started in')) ?? '');
      return m === null ? NaN : Number(m[1]);
    };
    const restored = /(\d+) devices restored from the stored checkpoints of (\d+) partitions/.exec(lines.join('\n'));
    const summary = await b.close();
    const line = {
      devices,
      pingsRead: pings,
      localCheckpointMs: round(median(local)),
      partitionStoreMs: round(median(stored)),
      partitionStoreBytes: bytes,
      bytesPerDevice: round(bytes / devices, 1),
      takeover: {
        restoredDevices: restored === null ? 0 : Number(restored[1]),
        partitions: restored === null ? 0 : Number(restored[2]),
        readStoredMs: phase("reading the partitions' stored checkpoints from JetStream"),
        restoreMs: phase('allocating memory and restoring device state'),
        startMs: Math.round(startedMs),
        tailPings: tail,
        tailReadMs: Math.round(caughtUpMs),
        shed: summary.shedTotal,
      },
    };
    console.log(JSON.stringify(line));
    results.push(line);
  }
} finally {
  nats.stop();
}
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/partition-state.json', `${JSON.stringify(results, null, 2)}\n`);
