/**
 * Load generator that costs little (its own process): encodes `--rounds` pings per device of a seeded simulated fleet
 * once, before the clock starts, and then replays those bytes over TCP at a set rate (or `--rate max`: as fast as the
 * sockets take them) for a set time, printing one JSON summary line on stdout with its own CPU time.
 *
 *   node dist/bench/loadgen/replay-loadgen.js --port 7070 --rate 1000000 --seconds 10 --devices 10000 --connections 4
 *       [--encoding maps|records|shared] [--rounds 16] [--event-step-ms S] [--radius-m M] [--bound-m M]
 *
 * Sending a ping costs a copy of its bytes and one rewrite of its timestamp: each connection carries the devices whose
 * index falls to it (each device's pings in order on one connection), and every pass over its encoded pings moves
 * their timestamps on by the span the pass covers, so a device's event times keep rising and no replayed ping is
 * stale. Event time advances `--event-step-ms` per ping of a device, or (0) the interval between a device's pings at
 * the target rate, so it follows the wall clock. The pass's wrap is a jump back to the fleet's first positions (a
 * device "teleports" once per pass; with wall-clock steps over a few seconds the jump is a few metres).
 */
import { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from '../../src/ingest/ping-encoder.js';
import type { FleetPing } from '../../src/fences/synthetic-fleet.js';
import { fleetOf, openLoadConnections, parseTcpLoadArgs, positiveFlag } from './tcp-args.js';

const args = parseTcpLoadArgs({ rounds: '16' });
const { seconds, devices, connections, encoding, tickMs, eventStepMs } = args;
const flatOut = args.rateText === 'max';
const ratePerSec = flatOut ? Infinity : positiveFlag('rate', args.rateText);
const rounds = Math.floor(positiveFlag('rounds', args.extra.rounds));
/** Pings one connection sends at most per send when flat out. */
const FLAT_OUT_CHUNK_PINGS = 8192;

/** Bytes from the end of an encoded ping back to its timestamp's 8 bytes (the same for every ping of an encoding). */
function tsFromEnd(enc: LoadEncoding): number {
  const probe = Buffer.alloc(MAX_PING_BYTES);
  const sentinel = 1234567.890625;
  const end = encodePingInto(
    probe,
    0,
    { id: 'probe', lat: 1, lon: 2, ts: sentinel, speed: 3, heading: 4, accuracy: 5 },
    enc,
  );
  for (let at = 0; at + 8 <= end; at++) if (probe.readDoubleBE(at) === sentinel) return end - at;
  throw new Error(`no timestamp found in a ${enc} ping`);
}

/** One connection's encoded pings and where each ends and keeps its timestamp. */
interface Track {
  bytes: Buffer;
  ends: Int32Array;
  tsAt: Int32Array;
  count: number;
  /** Next ping to send, and how many passes were completed before it. */
  next: number;
  pass: number;
  sent: number;
}

function encodeTracks(stepMs: number, epochStart: number): Track[] {
  const fleet = fleetOf(args);
  const perConnection = Array.from({ length: connections }, (_, c) => Math.ceil((devices - c) / connections) * rounds);
  const tracks: Track[] = perConnection.map((n) => ({
    bytes: Buffer.allocUnsafe(n * MAX_PING_BYTES),
    ends: new Int32Array(n),
    tsAt: new Int32Array(n),
    count: 0,
    next: 0,
    pass: 0,
    sent: 0,
  }));
  const back = tsFromEnd(encoding);
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  const pingsOf = new Float64Array(devices);
  for (let k = 0; k < devices * rounds; k++) {
    const device = fleet.nextDevice;
    const t = tracks[device % connections]!;
    fleet.next(ping, epochStart + ++pingsOf[device]! * stepMs);
    const start = t.count === 0 ? 0 : t.ends[t.count - 1]!;
    const end = encodePingInto(t.bytes, start, ping, encoding);
    t.ends[t.count] = end;
    t.tsAt[t.count] = end - back;
    t.count++;
  }
  for (const t of tracks) t.bytes = t.bytes.subarray(0, t.ends[t.count - 1]!);
  return tracks;
}

/** Copies pings [t.next, t.next + n) of `t` (within one pass) with their timestamps moved on by the passes done. */
function take(t: Track, n: number, passSpanMs: number): Buffer {
  const from = t.next === 0 ? 0 : t.ends[t.next - 1]!;
  const to = t.ends[t.next + n - 1]!;
  const out = Buffer.from(t.bytes.subarray(from, to));
  const shift = t.pass * passSpanMs;
  if (shift !== 0) {
    for (let k = t.next; k < t.next + n; k++) {
      const at = t.tsAt[k]! - from;
      out.writeDoubleBE(out.readDoubleBE(at) + shift, at);
    }
  }
  t.next += n;
  t.sent += n;
  if (t.next === t.count) {
    t.next = 0;
    t.pass++;
  }
  return out;
}

async function main(): Promise<void> {
  const epochStart = Date.now();
  // Event time between two pings of a device: as asked, or what the target rate gives (1 ms when flat out).
  const stepMs = eventStepMs > 0 ? eventStepMs : flatOut ? 1 : (devices / ratePerSec) * 1000;
  const encodeStart = performance.now();
  const tracks = encodeTracks(stepMs, epochStart);
  const encodeMs = performance.now() - encodeStart;
  const passSpanMs = rounds * stepMs;
  const { sockets, waiting, isOpen, closed, end } = await openLoadConnections(args);
  const cpuStart = process.cpuUsage();
  const startMs = performance.now();
  const endMs = startMs + seconds * 1000;
  const perConnectionRate = ratePerSec / connections;
  let bytes = 0;
  let stalls = 0;
  while (performance.now() < endMs) {
    if (closed() === connections) throw new Error('the router closed every connection');
    const now = performance.now();
    let wrote = false;
    for (let c = 0; c < connections; c++) {
      const t = tracks[c]!;
      if (!isOpen[c] || waiting[c]) continue;
      let due = flatOut
        ? FLAT_OUT_CHUNK_PINGS
        : Math.min(Math.floor(((now - startMs) / 1000) * perConnectionRate), Math.ceil(seconds * perConnectionRate)) -
          t.sent;
      while (due > 0 && !waiting[c]) {
        // Up to the end of this pass; the rest from the start of the next.
        const n = Math.min(due, t.count - t.next);
        const buf = take(t, n, passSpanMs);
        due -= n;
        bytes += buf.length;
        wrote = true;
        if (!sockets[c]!.write(buf)) waiting[c] = true;
      }
    }
    if (waiting.some(Boolean)) stalls++;
    if (flatOut && wrote) await new Promise((r) => setImmediate(r));
    else await new Promise((r) => setTimeout(r, flatOut ? 1 : tickMs));
  }
  const elapsedS = (performance.now() - startMs) / 1000;
  const cpu = process.cpuUsage(cpuStart);
  await end();
  const sent = tracks.reduce((n, t) => n + t.sent, 0);
  const cpuS = (cpu.user + cpu.system) / 1e6;
  process.stdout.write(
    `${JSON.stringify({
      generator: 'replay',
      sent,
      bytes,
      elapsedS,
      achievedPerSec: Math.round(sent / elapsedS),
      targetPerSec: flatOut ? 'max' : ratePerSec,
      stalls,
      closedConnections: closed(),
      encoding,
      devices,
      connections,
      preEncodedPings: devices * rounds,
      preEncodeMs: Math.round(encodeMs),
      cpuSeconds: Number(cpuS.toFixed(3)),
      cpuShareOfOneCore: Number((cpuS / elapsedS).toFixed(3)),
      cpuUsPerPing: Number(((cpuS / Math.max(1, sent)) * 1e6).toFixed(3)),
    })}\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`replay-loadgen: ${(err as Error).message}\n`);
  process.exit(1);
});
