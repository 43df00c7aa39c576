/**
 * Burst load generator (its own process): a seeded fleet sent as MessagePack maps over TCP along a rate schedule
 * (phases of constant rate, e.g. a baseline, a 3x burst, the baseline again), the way a live fleet sends: every
 * ping goes out at its due time whether or not the receiver keeps up.
 *
 *   node dist/bench/loadgen/burst-loadgen.js --port 7070 --schedule 15000:5,45000:15,15000:10 --devices 6000
 *
 * Ping k is due at the instant the schedule's cumulative count reaches k; its `ts` (event time) is that instant as
 * epoch ms, so a receiver can measure from the intended send time however late the ping actually left. Nothing ever
 * waits for a socket's 'drain': what the receiver does not read piles up in the kernel's socket buffers and then in
 * this process's memory (Node's writable queue grows without bound). Every `--report-ms` it prints one JSON line on
 * stdout with the pings sent so far, the bytes queued in this process (the sum of the sockets' `writableLength`) and
 * its RSS; after the schedule it ends the connections, keeps reporting until every byte has been handed to the
 * kernel, and prints a summary line with `"done": true` (peak queued bytes, peak RSS from /proc VmHWM, pings sent per
 * phase).
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { encodePingInto, MAX_PING_BYTES } from '../../src/ingest/ping-encoder.js';
import { Fleet, type FleetPing } from '../../src/fences/synthetic-fleet.js';

const { values } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    schedule: { type: 'string' },
    devices: { type: 'string', default: '6000' },
    connections: { type: 'string', default: '4' },
    seed: { type: 'string', default: '7' },
    'radius-m': { type: 'string', default: '2800' },
    'bound-m': { type: 'string', default: '2900' },
    'parked-fraction': { type: 'string', default: '0.56' },
    'tick-ms': { type: 'string', default: '2' },
    'report-ms': { type: 'string', default: '250' },
  },
});

const positive = (name: string, text: string | undefined): number => {
  const v = Number(text);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`--${name} must be a positive number, got ${String(text)}`);
  return v;
};

/** One phase of the schedule: `ratePerSec` pings a second for `seconds`. */
interface Phase {
  ratePerSec: number;
  seconds: number;
}

/** Parses `rate:seconds,rate:seconds,...`. */
function parseSchedule(text: string | undefined): Phase[] {
  if (text === undefined) throw new RangeError('--schedule is required (rate:seconds,...)');
  return text.split(',').map((part) => {
    const [rate, seconds] = part.split(':');
    return { ratePerSec: positive('schedule rate', rate), seconds: positive('schedule seconds', seconds) };
  });
}

const port = positive('port', values.port);
const phases = parseSchedule(values.schedule);
const devices = Math.floor(positive('devices', values.devices));
const connections = Math.floor(positive('connections', values.connections));
const tickMs = positive('tick-ms', values['tick-ms']);
const reportMs = positive('report-ms', values['report-ms']);
const parkedFraction = Number(values['parked-fraction']);
if (!(parkedFraction >= 0 && parkedFraction <= 1))
  throw new RangeError(`--parked-fraction must be in [0, 1], got ${String(values['parked-fraction'])}`);

/** Cumulative pings due at the start of each phase, and the schedule's end (ms) and total. */
const phaseStartMs: number[] = [];
const phaseStartCount: number[] = [];
let scheduleMs = 0;
let totalPings = 0;
for (const p of phases) {
  phaseStartMs.push(scheduleMs);
  phaseStartCount.push(totalPings);
  scheduleMs += p.seconds * 1000;
  totalPings += Math.round(p.ratePerSec * p.seconds);
}

/** Pings due by `ms` after the start. */
function dueBy(ms: number): number {
  if (ms >= scheduleMs) return totalPings;
  let i = phases.length - 1;
  while (phaseStartMs[i]! > ms) i--;
  return Math.floor(phaseStartCount[i]! + ((ms - phaseStartMs[i]!) / 1000) * phases[i]!.ratePerSec);
}

/** The phase holding ping `k`, advanced monotonically by the caller. */
let phaseOfNext = 0;
/** Due time of ping `k` (ms after the start); `k` must not decrease between calls. */
function dueTimeMs(k: number): number {
  while (phaseOfNext + 1 < phases.length && phaseStartCount[phaseOfNext + 1]! <= k) phaseOfNext++;
  const p = phases[phaseOfNext]!;
  return phaseStartMs[phaseOfNext]! + ((k - phaseStartCount[phaseOfNext]!) / p.ratePerSec) * 1000;
}

/** Peak resident set of this process, bytes (VmHWM), or NaN off Linux. */
function peakRssBytes(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? Number.NaN : Number(m[1]) * 1024;
  } catch {
    return Number.NaN;
  }
}

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: values.host!, port, noDelay: false }, () => resolve(s));
    s.once('error', reject);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const sockets = await Promise.all(Array.from({ length: connections }, () => open()));
  let closed = 0;
  for (const s of sockets) {
    s.on('close', () => closed++);
    s.on('error', () => undefined);
  }
  const fleet = new Fleet({
    devices,
    seed: Math.floor(Number(values.seed)),
    radiusM: positive('radius-m', values['radius-m']),
    boundRadiusM: positive('bound-m', values['bound-m']),
    parkedFraction,
  });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  // Encoding scratch per connection, one chunk at most: a late tick loops over chunks.
  const chunkPings = 4096;
  const scratch = sockets.map(() => Buffer.allocUnsafe(chunkPings * MAX_PING_BYTES));
  const scratchLen = new Array<number>(connections).fill(0);
  const sentPerPhase = new Array<number>(phases.length).fill(0);
  let sent = 0;
  let bytes = 0;
  let peakQueuedBytes = 0;
  const queuedBytes = (): number => sockets.reduce((a, s) => a + s.writableLength, 0);
  const startMs = performance.now();
  const epochStartMs = Date.now();
  process.stdout.write(`${JSON.stringify({ start: true, epochStartMs, totalPings, scheduleMs })}\n`);
  const report = (): void => {
    const q = queuedBytes();
    if (q > peakQueuedBytes) peakQueuedBytes = q;
    const line = {
      tS: (performance.now() - startMs) / 1000,
      sent,
      queuedBytes: q,
      rssBytes: process.memoryUsage.rss(),
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
  };
  const reporter = setInterval(report, reportMs);
  const flush = (): void => {
    for (let c = 0; c < connections; c++) {
      if (scratchLen[c] === 0) continue;
      // Copy out: the socket keeps the buffer it is given until the kernel has taken it.
      const buf = Buffer.from(scratch[c]!.subarray(0, scratchLen[c]));
      scratchLen[c] = 0;
      bytes += buf.length;
      // The return value (false: over the high-water mark) is ignored on purpose: a live source does not wait.
      sockets[c]!.write(buf);
    }
  };
  while (sent < totalPings) {
    if (closed === connections) throw new Error('the router closed every connection');
    const nowMs = performance.now() - startMs;
    let due = dueBy(nowMs) - sent;
    while (due > 0) {
      const n = Math.min(due, chunkPings);
      for (let k = 0; k < n; k++) {
        const conn = fleet.nextDevice % connections;
        const atMs = dueTimeMs(sent);
        sentPerPhase[phaseOfNext]!++;
        fleet.next(ping, epochStartMs + atMs);
        scratchLen[conn] = encodePingInto(scratch[conn]!, scratchLen[conn]!, ping, 'maps');
        sent++;
      }
      due -= n;
      flush();
    }
    await sleep(tickMs);
  }
  const scheduleEndS = (performance.now() - startMs) / 1000;
  // Hand every queued byte to the kernel, then close: 'finish' fires once the writable queue is empty.
  await Promise.all(sockets.map((s) => new Promise<void>((r) => s.end(() => r()))));
  clearInterval(reporter);
  report();
  const elapsedS = (performance.now() - startMs) / 1000;
  process.stdout.write(
    `${JSON.stringify({
      done: true,
      sent,
      bytes,
      sentPerPhase,
      scheduleEndS,
      flushedAtS: elapsedS,
      peakQueuedBytes,
      peakRssBytes: peakRssBytes(),
      closedConnections: closed,
    })}\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`burst-loadgen: ${(err as Error).message}\n`);
  process.exit(1);
});
