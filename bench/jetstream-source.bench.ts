/**
 * The JetStream telemetry source against a local nats-server started here (JetStream on, store in a scratch
 * directory): how fast one and two routers work through a backlog, what a ping costs in CPU, and the held time from
 * publish to trigger.
 *
 * Backlog: `--pings` pings of a seeded fleet (`--devices`, around the synthetic city of `--fences` fences) are
 * published first, `--per-message` pings a message, to 16 partitions; then 1 router (all partitions) or 2 routers
 * (0-7 and 8-15, in this process, each with its own threads) read them. Timed from the first ping accepted to the
 * last; CPU is this process's (every thread of every router, and the NATS client) over the same span, so CPU per ping
 * is what a host spends and what a core count projects from.
 *
 * Live: one router reads while this process publishes at `--live-rate` pings/s for `--live-seconds`, one ping a
 * message, each ping's time the wall clock at publish; the latency of a trigger is its arrival at a callback
 * downstream minus its ping's time (publish, store, fetch, rings, containment, dispatch). The publisher shares the
 * host's two cores with the router and the server.
 *
 * With `--live-sink jetstream` the router delivers to a JetStream trigger sink instead (stream TRIGGERS, subjects
 * `gf.<type>`), and a trigger's latency is its arrival on a core subscription to those subjects: publish to stored
 * trigger.
 *
 *   node dist/bench/jetstream-source.bench.js [--pings 200000] [--per-message 1,50] [--routers 1,2]
 *       [--live-rate 20000] [--live-seconds 10] [--live-sink callback|jetstream]
 *
 * Prints one JSON line per run; writes bench/out/jetstream-source.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import {
  createRouter,
  partitionConsumerName,
  partitionOf,
  type Router,
  type RouterOptionsInput,
  type Trigger,
} from '../src/index.js';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { encodePingInto, MAX_PING_BYTES } from '../src/ingest/ping-encoder.js';
import { startNats } from './support/nats-server.js';

const { values } = parseArgs({
  options: {
    pings: { type: 'string', default: '200000' },
    devices: { type: 'string', default: '10000' },
    fences: { type: 'string', default: '10000' },
    'per-message': { type: 'string', default: '1,50' },
    routers: { type: 'string', default: '1,2' },
    'live-rate': { type: 'string', default: '20000' },
    'live-seconds': { type: 'string', default: '10' },
    'live-sink': { type: 'string', default: 'callback' },
  },
});
const PINGS = Number(values.pings);
const DEVICES = Number(values.devices);
const PARTITIONS = 16;
const fences = generateSyntheticCity({ seed: 1, fenceCount: Number(values.fences) });
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;
const pct = (xs: Float64Array | number[], q: number): number => {
  const s = Float64Array.from(xs).sort();
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

/** Pings of the fleet grouped by partition, `perMessage` to a message, in fleet order within each partition. */
function backlogMessages(perMessage: number): { subject: string; data: Buffer }[] {
  const fleet = new Fleet({ devices: DEVICES, seed: 3 });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 5 };
  const open: { buf: Buffer; pos: number; n: number }[] = [];
  for (let p = 0; p < PARTITIONS; p++) open.push({ buf: Buffer.alloc(perMessage * MAX_PING_BYTES), pos: 0, n: 0 });
  const out: { subject: string; data: Buffer }[] = [];
  const t0 = Date.UTC(2026, 0, 1);
  for (let k = 0; k < PINGS; k++) {
    fleet.next(ping, t0 + Math.floor(k / DEVICES) * 5000);
    const p = partitionOf(ping.id, PARTITIONS);
    const m = open[p]!;
    m.pos = encodePingInto(m.buf, m.pos, ping, 'maps');
    if (++m.n === perMessage) {
      out.push({ subject: `telemetry.${p}.x`, data: Buffer.from(m.buf.subarray(0, m.pos)) });
      m.pos = 0;
      m.n = 0;
    }
  }
  open.forEach((m, p) => {
    if (m.n > 0) out.push({ subject: `telemetry.${p}.x`, data: Buffer.from(m.buf.subarray(0, m.pos)) });
  });
  return out;
}

function router(
  url: string,
  stream: string,
  partitions: string,
  prefix: string,
  onTriggers?: (ts: readonly Trigger[]) => void,
  downstream?: RouterOptionsInput['downstreams'],
): Promise<Router> {
  return createRouter({
    fences,
    stateDir: null,
    maxDevices: Math.max(65_536, 2 * DEVICES),
    jetstreamSource: {
      servers: [url],
      stream,
      partitionCount: PARTITIONS,
      partitions,
      consumerPrefix: prefix,
      createStream: false,
    },
    downstreams: downstream ?? [{ name: 'cb', kind: 'callback', callback: onTriggers ?? (() => undefined) }],
    log: () => undefined,
  });
}

const results: object[] = [];
const nats = await startNats();
try {
  let run = 0;
  // `--per-message none`: the live run only.
  for (const perMessage of values['per-message']
    .split(',')
    .filter((x) => x !== 'none')
    .map(Number)) {
    const messages = backlogMessages(perMessage);
    for (const routers of values.routers.split(',').map(Number)) {
      const stream = `TEL${run++}`;
      // The stream is created and filled before any router reads it.
      await publishBacklog(nats.url, stream, messages);
      const parts = routers === 1 ? ['all'] : ['0-7', '8-15'];
      // The routers start on consumers made beforehand with at most one message unacknowledged (a trickle), which
      // are opened up once every router runs; the rate is taken between 10 % and 90 % of the pings accepted
      // (sampled every 5 ms), so neither the start nor the last partition's tail counts.
      const prefixes = parts.map((_, i) => `bench-${stream}-${i}`);
      const owner = (p: number): number => (routers === 1 ? 0 : p < 8 ? 0 : 1);
      await gateConsumers(nats.url, stream, (p) => prefixes[owner(p)]!, 1);
      const rs = await Promise.all(parts.map((p, i) => router(nats.url, stream, p, prefixes[i]!)));
      // Opened up as the source makes them: messages wait for a checkpoint before their acknowledgement.
      await gateConsumers(nats.url, stream, (p) => prefixes[owner(p)]!, -1);
      const accepted = (): number => rs.reduce((a, r) => a + r.stats().accepted, 0);
      let from: { n: number; t: number; cpu: NodeJS.CpuUsage } | null = null;
      let to: { n: number; t: number; cpu: NodeJS.CpuUsage } | null = null;
      for (;;) {
        const n = accepted();
        const sample = { n, t: performance.now(), cpu: process.cpuUsage() };
        if (from === null && n < 0.9 * PINGS) from = sample;
        if (from !== null && n < 0.1 * PINGS) from = sample;
        if (n >= 0.9 * PINGS) {
          to = sample;
          break;
        }
        await new Promise((r) => setTimeout(r, 5));
      }
      while (accepted() < PINGS) await new Promise((r) => setTimeout(r, 5));
      if (from === null) throw new Error('the routers read 90 % of the backlog while starting: use more --pings');
      const wallMs = to.t - from.t;
      const counted = to.n - from.n;
      const shed = rs.reduce((a, r) => a + r.stats().shedTotal, 0);
      for (const r of rs) await r.close();
      const cpuMs = (to.cpu.user - from.cpu.user + to.cpu.system - from.cpu.system) / 1000;
      const line = {
        kind: 'backlog',
        perMessage,
        messages: messages.length,
        routers,
        pings: PINGS,
        measured: counted,
        startedAt: round(from.n / PINGS),
        pingsPerSec: Math.round((counted / wallMs) * 1000),
        cpuUsPerPing: round((cpuMs * 1000) / counted),
        cpuCores: round(cpuMs / wallMs),
        shed,
      };
      console.log(JSON.stringify(line));
      results.push(line);
    }
  }
  results.push(await live(nats.url));
} finally {
  nats.stop();
}
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/jetstream-source.json', `${JSON.stringify(results, null, 2)}\n`);

/**
 * Creates (or updates) the durable consumer of every partition as the source makes it, with `maxAckPending` messages
 * unacknowledged at most: 1 holds a router back to a trickle until the consumers are opened up (-1: no limit).
 */
async function gateConsumers(
  url: string,
  stream: string,
  prefixOf: (partition: number) => string,
  maxAckPending: number,
): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const { jetstreamManager, AckPolicy, DeliverPolicy } = await import('@nats-io/jetstream');
    const jsm = await jetstreamManager(nc);
    for (let p = 0; p < PARTITIONS; p++) {
      const name = partitionConsumerName(prefixOf(p), p);
      if (maxAckPending === 1) {
        await jsm.consumers.add(stream, {
          durable_name: name,
          filter_subject: `telemetry.${p}.>`,
          ack_policy: AckPolicy.All,
          deliver_policy: DeliverPolicy.All,
          ack_wait: 30_000_000_000,
          max_ack_pending: 1,
        });
      } else {
        await jsm.consumers.update(stream, name, { max_ack_pending: maxAckPending });
      }
    }
  } finally {
    await nc.close();
  }
}

/** Creates `stream` and publishes `messages` to it. */
async function publishBacklog(
  url: string,
  stream: string,
  messages: { subject: string; data: Buffer }[],
): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const jsm = await jetstreamManager(nc);
    // Streams of earlier runs are removed: one stream captures telemetry.> at a time.
    for await (const name of jsm.streams.names()) await jsm.streams.delete(name);
    await jsm.streams.add({ name: stream, subjects: ['telemetry.>'] });
    const js = jetstream(nc);
    const acks: Promise<unknown>[] = [];
    for (const m of messages) {
      acks.push(js.publish(m.subject, m.data));
      if (acks.length >= 2000) await Promise.all(acks.splice(0));
    }
    await Promise.all(acks);
  } finally {
    await nc.close();
  }
}

/** The live run: publish at a rate while one router reads; latency from publish to trigger. */
async function live(url: string): Promise<object> {
  const rate = Number(values['live-rate']);
  const seconds = Number(values['live-seconds']);
  const nc = await connect({ servers: url });
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const jsm = await jetstreamManager(nc);
  for await (const name of jsm.streams.names()) await jsm.streams.delete(name);
  await jsm.streams.add({ name: 'LIVE', subjects: ['telemetry.>'] });
  const latencies: number[] = [];
  // To the JetStream trigger sink's stream: each trigger's arrival on a subscription to its subjects.
  const toStream = values['live-sink'] === 'jetstream';
  if (toStream) {
    nc.subscribe('gf.>', {
      callback: (_err, m) => {
        latencies.push(Date.now() - m.json<{ eventTimeMs: number }>().eventTimeMs);
      },
    });
    await nc.flush();
  }
  const r = await router(
    url,
    'LIVE',
    'all',
    'bench-live',
    (ts) => {
      const now = Date.now();
      for (const t of ts) latencies.push(now - t.eventTimeMs);
    },
    toStream
      ? [{ name: 'js', kind: 'jetstream', servers: [url], subject: 'gf.{type}', stream: 'TRIGGERS' }]
      : undefined,
  );
  const total = rate * seconds;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    [
      new URL('./loadgen/jetstream-publisher.js', import.meta.url).pathname,
      ...['--url', url, '--rate', String(rate), '--seconds', String(seconds), '--devices', String(DEVICES)],
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise((res) => child.once('exit', res));
  const publisher = JSON.parse(out.trim()) as { achievedPerSec: number; cpuCores: number };
  while (r.stats().accepted < total) await new Promise((res) => setTimeout(res, 5));
  const routerCpuCores = round(
    (process.cpuUsage(cpu0).user + process.cpuUsage(cpu0).system) / 1000 / (performance.now() - t0),
  );
  await new Promise((res) => setTimeout(res, 500));
  const summary = await r.close();
  await nc.close();
  const line = {
    kind: 'live',
    sink: toStream ? 'jetstream stream' : 'callback',
    offeredPerSec: rate,
    achievedPerSec: publisher.achievedPerSec,
    publisherCpuCores: publisher.cpuCores,
    routerCpuCores,
    pings: total,
    triggers: latencies.length,
    publishToTriggerMs: {
      p50: pct(latencies, 0.5),
      p90: pct(latencies, 0.9),
      p99: pct(latencies, 0.99),
      max: pct(latencies, 1),
    },
    routerHeldP99Ms: round(summary.heldTimeP99Ms),
    shed: summary.shedTotal,
  };
  console.log(JSON.stringify(line));
  return line;
}
