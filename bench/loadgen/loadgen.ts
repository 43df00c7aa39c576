/**
 * Load generator (its own process): sends MessagePack telemetry for a seeded simulated fleet over TCP at a set rate
 * for a set time, and prints one JSON summary line on stdout.
 *
 *   node dist/bench/loadgen/loadgen.js --port 7070 --rate 500000 --seconds 30 --devices 10000 --connections 8
 *
 * Devices are assigned to connections by index, so each device's pings travel in order on one connection. Event
 * time follows the wall clock, or with `--event-step-ms S` advances S per ping of a device (a fleet seen through sparse
 * pings: hops of speed x S, which cross fences between pings and give a trigger-rich workload); `--radius-m` and
 * `--bound-m` keep the fleet within the city. Pacing:
 * every tick the generator encodes (directly, see encode.ts) and sends what the rate says is due, at most 50 ms worth; when a socket's send buffer is full it waits for
 * 'drain' instead of buffering without bound, and the summary reports the rate actually achieved.
 */
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from '../../src/ingest/ping-encoder.js';
import { Fleet, type FleetPing } from '../../src/fences/synthetic-fleet.js';

const { values } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '7070' },
    rate: { type: 'string', default: '100000' },
    seconds: { type: 'string', default: '10' },
    devices: { type: 'string', default: '10000' },
    connections: { type: 'string', default: '4' },
    seed: { type: 'string', default: '42' },
    encoding: { type: 'string', default: 'maps' },
    'tick-ms': { type: 'string', default: '2' },
    'event-step-ms': { type: 'string', default: '0' },
    'radius-m': { type: 'string', default: '15000' },
    'bound-m': { type: 'string', default: '0' },
  },
});

const positive = (name: string, text: string | undefined): number => {
  const v = Number(text);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`--${name} must be a positive number, got ${String(text)}`);
  return v;
};
const host = values.host!;
const port = positive('port', values.port);
const ratePerSec = positive('rate', values.rate);
const seconds = positive('seconds', values.seconds);
const devices = Math.floor(positive('devices', values.devices));
const connections = Math.floor(positive('connections', values.connections));
const seed = Math.floor(Number(values.seed));
const tickMs = positive('tick-ms', values['tick-ms']);
const encoding = values.encoding!;
const eventStepMs = Number(values['event-step-ms']);
const radiusM = positive('radius-m', values['radius-m']);
const boundM = Number(values['bound-m']);
if (!['maps', 'records', 'shared'].includes(encoding))
  throw new RangeError(`--encoding must be maps, records or shared, got ${encoding}`);

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port, noDelay: false }, () => resolve(s));
    s.once('error', reject);
  });
}

async function main(): Promise<void> {
  const sockets = await Promise.all(Array.from({ length: connections }, () => open()));
  const fleet = new Fleet({
    devices,
    seed,
    radiusM,
    boundRadiusM: boundM > 0 ? boundM : Infinity,
    parkedFraction: eventStepMs > 0 ? 0 : 1 / 3,
  });
  const rounds = new Float64Array(devices);
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  // One send buffer per connection per tick, sized for the most pings a tick can carry.
  const perTickMax = Math.ceil((ratePerSec * Math.max(tickMs, 50)) / 1000) + 1;
  const pending = sockets.map(() => Buffer.allocUnsafe(perTickMax * MAX_PING_BYTES));
  const pendingLen = new Array<number>(connections).fill(0);
  let sent = 0;
  let bytes = 0;
  let stalls = 0;
  const startMs = performance.now();
  const endMs = startMs + seconds * 1000;
  const epochStart = Date.now();
  // Per connection: waiting for 'drain'. A connection the router closes drains no more: it stops counting as
  // blocked and its share goes to the others (counted in `closed`).
  const waiting = new Array<boolean>(connections).fill(false);
  const isOpen = new Array<boolean>(connections).fill(true);
  let closed = 0;
  sockets.forEach((s, c) => {
    s.on('drain', () => (waiting[c] = false));
    s.on('close', () => {
      if (isOpen[c]) closed++;
      isOpen[c] = false;
      waiting[c] = false;
    });
  });
  const blocked = (): boolean => waiting.some(Boolean);
  while (performance.now() < endMs) {
    const now = performance.now();
    const due = Math.min(Math.floor(((now - startMs) / 1000) * ratePerSec), Math.ceil(seconds * ratePerSec)) - sent;
    if (closed === connections) throw new Error('the router closed every connection');
    if (blocked()) {
      stalls++;
      await new Promise((r) => setTimeout(r, 1));
      continue;
    }
    const n = Math.min(due, perTickMax);
    for (let k = 0; k < n; k++) {
      const device = fleet.nextDevice;
      let conn = device % connections;
      // A device keeps its connection while it is open (per-device order); a closed one's devices move to the next.
      while (!isOpen[conn]) conn = (conn + 1) % connections;
      fleet.next(ping, eventStepMs > 0 ? epochStart + ++rounds[device]! * eventStepMs : epochStart + (now - startMs));
      pendingLen[conn] = encodePingInto(pending[conn]!, pendingLen[conn]!, ping, encoding as LoadEncoding);
    }
    sent += n;
    for (let c = 0; c < connections; c++) {
      if (pendingLen[c] === 0) continue;
      // Copy out: the socket keeps the buffer it is given until it is flushed.
      const buf = Buffer.from(pending[c]!.subarray(0, pendingLen[c]));
      pendingLen[c] = 0;
      bytes += buf.length;
      if (isOpen[c] && !sockets[c]!.write(buf)) waiting[c] = true;
    }
    await new Promise((r) => setTimeout(r, tickMs));
  }
  const elapsedS = (performance.now() - startMs) / 1000;
  await Promise.all(
    sockets.map((s, c) => (isOpen[c] ? new Promise<void>((r) => s.end(() => r())) : Promise.resolve())),
  );
  process.stdout.write(
    `${JSON.stringify({ sent, bytes, elapsedS, achievedPerSec: Math.round(sent / elapsedS), targetPerSec: ratePerSec, stalls, closedConnections: closed, encoding, devices, connections })}\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`loadgen: ${(err as Error).message}\n`);
  process.exit(1);
});
