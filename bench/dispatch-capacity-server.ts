/**
 * Benchmark downstream, run as a separate process (child_process.fork): an HTTP server on 127.0.0.1 with `workers`
 * concurrent workers and a fixed service time; requests beyond the workers wait in a FIFO queue of at most
 * `queueLimit` requests, past which it answers 503. The parent changes `workers` at run time over IPC and asks for
 * the figures of each run.
 *
 * Figures, all measured on this process's own clock (so the load generator's event-loop delays do not enter them):
 * - utilisation: the integral of min(busy workers, workers) over time divided by the integral of `workers` (the true
 *   capacity) since `reset`. Busy time is the real time a worker holds a request (a timer that fires late keeps the
 *   worker busy longer), and requests still in service after capacity drops count only up to the new worker count.
 *   `nominalBusyMs` (service time x requests served) is kept for comparison.
 * - queue waits (arrival to start of service) of every request, for their P99, and the residence time (arrival to
 *   answer) of every request served, for the server-side P99, over the whole run and over each phase (`mark`) from
 *   `settleMs` after its start (the settled P99);
 * - overload episodes: a maximal period in which every request that started service (or was refused) had waited
 *   longer than `overloadWaitMs`, lasting at least `overloadMinMs`.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

interface Config {
  workers: number;
  serviceMs: number;
  queueLimit: number;
  overloadWaitMs: number;
  overloadMinMs: number;
}

const cfg: Config = { workers: 16, serviceMs: 40, queueLimit: 64, overloadWaitMs: 40, overloadMinMs: 200 };
let busy = 0;
const waiting: (() => void)[] = [];
let nominalBusyMs = 0;
let served = 0;
let refused = 0;
let episodes = 0;
let episodeStart = -1;
let maxWaitMs = 0;
let lastAdvanceMs = performance.now();
let busyIntegralMs = 0;
let capacityIntegralMs = 0;
const waits = new Float64Array(400_000);
/** When each wait ended (service start or refusal), ms on this process's clock. */
const waitEnds = new Float64Array(400_000);
let nWaits = 0;
/** Residence times (arrival to answer) of served requests, ms. */
const residences = new Float64Array(400_000);
/** Arrival time of each residence sample, ms on this process's clock. */
const residenceArrivals = new Float64Array(400_000);
let nResidences = 0;
/** Phase starts (`mark`), ms on this process's clock. */
let marks: number[] = [];

/** Advances the busy and capacity integrals to `nowMs` (called before every change of `busy` or `workers`). */
function advance(nowMs: number): void {
  const dt = nowMs - lastAdvanceMs;
  busyIntegralMs += Math.min(busy, cfg.workers) * dt;
  capacityIntegralMs += cfg.workers * dt;
  lastAdvanceMs = nowMs;
}

function noteWait(nowMs: number, waitMs: number): void {
  if (waitMs > maxWaitMs) maxWaitMs = waitMs;
  if (Number.isFinite(waitMs) && nWaits < waits.length) {
    waitEnds[nWaits] = nowMs;
    waits[nWaits++] = waitMs;
  }
  if (waitMs > cfg.overloadWaitMs) {
    if (episodeStart < 0) episodeStart = nowMs;
    return;
  }
  if (episodeStart >= 0 && nowMs - episodeStart >= cfg.overloadMinMs) episodes++;
  episodeStart = -1;
}

function next(): void {
  while (busy < cfg.workers && waiting.length > 0) waiting.shift()!();
}

const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    const arrived = performance.now();
    if (waiting.length >= cfg.queueLimit) {
      refused++;
      noteWait(arrived, Infinity);
      res.statusCode = 503;
      res.end();
      return;
    }
    const run = (): void => {
      const start = performance.now();
      advance(start);
      busy++;
      noteWait(start, start - arrived);
      setTimeout(() => {
        advance(performance.now());
        busy--;
        nominalBusyMs += cfg.serviceMs;
        served++;
        if (nResidences < residences.length) {
          residenceArrivals[nResidences] = arrived;
          residences[nResidences++] = performance.now() - arrived;
        }
        res.statusCode = 200;
        res.end();
        next();
      }, cfg.serviceMs);
    };
    if (busy < cfg.workers && waiting.length === 0) run();
    else waiting.push(run);
  });
});
server.keepAliveTimeout = 60_000;

process.on('message', (m: { op: string; workers?: number; config?: Partial<Config>; settleMs?: number }) => {
  if (m.op === 'config') Object.assign(cfg, m.config);
  if (m.op === 'workers') {
    advance(performance.now());
    cfg.workers = m.workers!;
    next();
  }
  if (m.op === 'reset') {
    advance(performance.now());
    nominalBusyMs = 0;
    busyIntegralMs = 0;
    capacityIntegralMs = 0;
    served = 0;
    refused = 0;
    episodes = 0;
    episodeStart = -1;
    maxWaitMs = 0;
    nWaits = 0;
    nResidences = 0;
    marks = [];
  }
  if (m.op === 'mark') marks.push(performance.now());
  if (m.op === 'stats') {
    const now = performance.now();
    advance(now);
    const open = episodeStart >= 0 && now - episodeStart >= cfg.overloadMinMs ? 1 : 0;
    const sorted = waits.slice(0, nWaits).sort();
    const waitP99Ms = nWaits === 0 ? NaN : sorted[Math.min(nWaits - 1, Math.floor(0.99 * nWaits))]!;
    const res = residences.slice(0, nResidences).sort();
    const residenceP99Ms = nResidences === 0 ? NaN : res[Math.min(nResidences - 1, Math.floor(0.99 * nResidences))]!;
    // Settled P99: requests that arrived at least `settleMs` after a phase began (mark) and before the next one.
    const settled: number[] = [];
    for (let i = 0; i < nResidences; i++) {
      const a = residenceArrivals[i]!;
      let k = marks.length - 1;
      while (k >= 0 && marks[k]! > a) k--;
      if (k >= 0 && a - marks[k]! >= (m.settleMs ?? 2000)) settled.push(residences[i]!);
    }
    settled.sort((x, y) => x - y);
    // Per phase: the share of requests that waited over 1 ms, and the wait P99.
    const waitByPhase = marks.map((from, k) => {
      const to = k + 1 < marks.length ? marks[k + 1]! : Infinity;
      const w: number[] = [];
      for (let i = 0; i < nWaits; i++) if (waitEnds[i]! >= from && waitEnds[i]! < to) w.push(waits[i]!);
      w.sort((x, y) => x - y);
      return {
        requests: w.length,
        over1Ms: w.filter((x) => x > 1).length / Math.max(1, w.length),
        p99Ms: w.length === 0 ? NaN : w[Math.min(w.length - 1, Math.floor(0.99 * w.length))]!,
      };
    });
    const settledResidenceP99Ms =
      settled.length === 0 ? NaN : settled[Math.min(settled.length - 1, Math.floor(0.99 * settled.length))]!;
    process.send!({
      op: 'stats',
      busyIntegralMs,
      capacityIntegralMs,
      nominalBusyMs,
      served,
      refused,
      episodes: episodes + open,
      maxWaitMs,
      waitP99Ms,
      residenceP99Ms,
      settledResidenceP99Ms,
      waitByPhase,
    });
  }
  if (m.op === 'exit') process.exit(0);
});

server.listen(0, '127.0.0.1', () => {
  process.send!({ op: 'ready', port: (server.address() as AddressInfo).port });
});
