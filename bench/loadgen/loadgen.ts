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
import { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from '../../src/ingest/ping-encoder.js';
import type { FleetPing } from '../../src/fences/synthetic-fleet.js';
import { fleetOf, openLoadConnections, parseTcpLoadArgs, positiveFlag } from './tcp-args.js';

const args = parseTcpLoadArgs();
const { seconds, devices, connections, tickMs, encoding, eventStepMs } = args;
const ratePerSec = positiveFlag('rate', args.rateText);

async function main(): Promise<void> {
  const { sockets, waiting, isOpen, closed, end } = await openLoadConnections(args);
  const fleet = fleetOf(args);
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
  // A connection the router closes drains no more: it stops counting as blocked and its share goes to the others.
  const blocked = (): boolean => waiting.some(Boolean);
  while (performance.now() < endMs) {
    const now = performance.now();
    const due = Math.min(Math.floor(((now - startMs) / 1000) * ratePerSec), Math.ceil(seconds * ratePerSec)) - sent;
    if (closed() === connections) throw new Error('the router closed every connection');
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
  await end();
  process.stdout.write(
    `${JSON.stringify({ sent, bytes, elapsedS, achievedPerSec: Math.round(sent / elapsedS), targetPerSec: ratePerSec, stalls, closedConnections: closed(), encoding, devices, connections })}\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`loadgen: ${(err as Error).message}\n`);
  process.exit(1);
});
