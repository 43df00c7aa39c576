/**
 * Benchmark downstream, run as a separate process (child_process.fork): an HTTP server on 127.0.0.1 with `workers`
 * concurrent workers and a fixed service time; requests beyond the workers wait in a FIFO queue of at most
 * `queueLimit` requests, past which it answers 503. The parent changes `workers` at run time over IPC and asks for
 * the figures of each run.
 *
 * Figures: busy worker time (for utilisation), served requests, 503s, and overload episodes: a maximal period in
 * which every request that started service (or was refused) had waited longer than `overloadWaitMs`, lasting at
 * least `overloadMinMs`.
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
let busyMs = 0;
let served = 0;
let refused = 0;
let episodes = 0;
let episodeStart = -1;
let maxWaitMs = 0;

function noteWait(nowMs: number, waitMs: number): void {
  if (waitMs > maxWaitMs) maxWaitMs = waitMs;
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
      busy++;
      const start = performance.now();
      noteWait(start, start - arrived);
      setTimeout(() => {
        busy--;
        busyMs += cfg.serviceMs;
        served++;
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

process.on('message', (m: { op: string; workers?: number; config?: Partial<Config> }) => {
  if (m.op === 'config') Object.assign(cfg, m.config);
  if (m.op === 'workers') {
    cfg.workers = m.workers!;
    next();
  }
  if (m.op === 'reset') {
    busyMs = 0;
    served = 0;
    refused = 0;
    episodes = 0;
    episodeStart = -1;
    maxWaitMs = 0;
  }
  if (m.op === 'stats') {
    const now = performance.now();
    const open = episodeStart >= 0 && now - episodeStart >= cfg.overloadMinMs ? 1 : 0;
    process.send!({ op: 'stats', busyMs, served, refused, episodes: episodes + open, maxWaitMs });
  }
  if (m.op === 'exit') process.exit(0);
});

server.listen(0, '127.0.0.1', () => {
  process.send!({ op: 'ready', port: (server.address() as AddressInfo).port });
});
