/**
 * The real binary, with its real threads, against a real local webhook that misbehaves for a while and then
 * recovers (hangs, resets connections, answers 429/503 with Retry-After, closes its port), beside a healthy one.
 * Both receivers must see the delivery contract: per device in seq order, every trigger, once (re-delivery of a
 * batch whose answer was lost is allowed at the misbehaving one only).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pack } from 'msgpackr';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { at, sendOverTcp, square, T0, TriggerServer, waitFor } from '../pipeline/support.js';
import { CliProcess } from './support.js';

const DEVICES = 100;
const PINGS_PER_DEVICE = 8;
const EXPECTED = DEVICES * (PINGS_PER_DEVICE - 1);
const FAULT_MS = 3_000;

type Mode = 'ok' | 'hang' | 'reset' | 'retry-after';

/** A webhook whose behaviour is switched by the test; it can close its port and listen again on the same one. */
class FaultyServer {
  readonly received: Trigger[] = [];
  mode: Mode = 'ok';
  refused = 0;
  port = 0;
  private server: Server | null = null;
  private readonly hung: ServerResponse[] = [];

  private handle(req: IncomingMessage, res: ServerResponse): void {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      if (this.mode === 'hang') {
        this.refused++;
        this.hung.push(res);
        return;
      }
      if (this.mode === 'reset') {
        this.refused++;
        req.socket.destroy();
        return;
      }
      if (this.mode === 'retry-after') {
        this.refused++;
        res.writeHead(this.refused % 2 === 0 ? 429 : 503, { 'retry-after': '1', 'content-length': 0 });
        res.end();
        return;
      }
      for (const t of JSON.parse(body) as Trigger[]) this.received.push(t);
      res.writeHead(200, { 'content-length': 0 });
      res.end();
    });
  }

  async listen(): Promise<void> {
    const server = createServer((req, res) => this.handle(req, res));
    this.server = server;
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    const a = server.address();
    this.port = a !== null && typeof a === 'object' ? a.port : 0;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server === null) return;
    this.server = null;
    for (const res of this.hung.splice(0)) res.socket?.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Ends the hung requests without an answer (their sockets close). */
  dropHung(): void {
    for (const res of this.hung.splice(0)) res.socket?.destroy();
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }
}

function frames(): Buffer {
  const out: Buffer[] = [];
  for (let k = 0; k < PINGS_PER_DEVICE; k++) {
    for (let d = 0; d < DEVICES; d++) {
      const [lat, lon] = k % 2 === 0 ? at(-300, 0) : at(0, 0);
      out.push(pack({ id: `dev-${d}`, lat, lon, ts: T0 + k * 1000 }));
    }
  }
  return Buffer.concat(out);
}

async function metric(adminPort: number, name: string, labelled = ''): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if ((line.startsWith(`${name}{`) || line.startsWith(`${name} `)) && line.includes(labelled))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** Runs one fault: the faulty downstream misbehaves from the start for FAULT_MS, then `recover` runs. */
async function runFault(
  label: string,
  start: (f: FaultyServer) => Promise<void>,
  recover: (f: FaultyServer) => Promise<void>,
  faultyOptions: Record<string, unknown> = {},
): Promise<{ pauses: number; code: number | null; deadLettered: number; replayed: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'gr-faults-'));
  const fences = join(dir, 'fences.geojson');
  writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
  const good = new TriggerServer();
  await good.start();
  const faulty = new FaultyServer();
  await faulty.listen();
  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      downstreams: [
        { name: 'good', kind: 'webhook', url: good.url },
        { name: 'faulty', kind: 'webhook', url: faulty.url, timeoutMs: 300, ...faultyOptions },
      ],
    }),
  );
  const p = new CliProcess(
    [
      '--config',
      config,
      '--fences',
      fences,
      '--state-dir',
      join(dir, 'state'),
      '--listen',
      '127.0.0.1:0',
      '--admin',
      '127.0.0.1:0',
    ],
    40_000,
    dir,
  );
  try {
    await p.waitFor(
      'the ports',
      (c) =>
        /telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.test(c.stderr) && /admin http:\/\/127\.0\.0\.1:(\d+)/.test(c.stderr),
    );
    const port = Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
    const adminPort = Number(/admin http:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
    await start(faulty);
    const t0 = Date.now();
    await sendOverTcp(port, frames(), 4096);
    await waitFor(() => good.received.length >= EXPECTED, 10_000, 'every trigger at the healthy downstream');
    const goodMs = Date.now() - t0;
    await new Promise((r) => setTimeout(r, Math.max(0, FAULT_MS - (Date.now() - t0))));
    const refusedDuringFault = faulty.refused;
    const pauses = await metric(adminPort, 'geofence_dispatch_retry_after_pauses_total');
    await recover(faulty);
    const tRecover = Date.now();
    await waitFor(
      () => new Set(faulty.received.map((t) => `${t.deviceId}/${t.seq}`)).size >= EXPECTED,
      12_000,
      `every trigger at the ${label} downstream after recovery (has ${faulty.received.length})`,
    );
    const catchUpMs = Date.now() - tRecover;
    const deadLettered = await metric(adminPort, 'geofence_dispatch_dead_lettered_total', 'downstream="faulty"');
    const replayed = faulty.received.filter((t) => t.replay).length;
    const goodReport = checkDeliveryContract(good.received, { complete: true, stays: true });
    assert.deepEqual(goodReport.problems, [], 'the healthy downstream');
    assert.equal(good.received.length, EXPECTED, 'the healthy downstream got each trigger once');
    // The faulty webhook's timeout is 300 ms: on a loaded machine an answer the receiver sent can arrive after it, in any
    // case, and the router sends the batch again. A re-delivery is the same trigger (same seq and content, per-device
    // order kept); a different trigger under a seq already seen would still fail.
    const faultyReport = checkDeliveryContract(faulty.received, { complete: true, stays: true, allowRedelivery: true });
    assert.deepEqual(faultyReport.problems, [], `the ${label} downstream`);
    p.child.kill('SIGTERM');
    const { code } = await p.exited;
    // Everything was delivered in the end (dead letters included, through the replay lane): a clean drain.
    assert.equal(code, 0, `drain after recovery, exit ${code}\n${p.stdout}\n${p.stderr}`);
    console.log(
      `${label}: ${EXPECTED} triggers; healthy got all in ${goodMs} ms; faulty refused ${refusedDuringFault} requests in ${FAULT_MS} ms, then got ${faulty.received.length} (${faulty.received.length - EXPECTED} re-deliveries) ${catchUpMs} ms after recovery; retry-after pauses ${pauses}; dead-lettered ${deadLettered}, ${replayed} re-delivered by the replay lane; exit ${code}`,
    );
    return { pauses, code, deadLettered, replayed };
  } finally {
    if (p.child.exitCode === null) p.child.kill('SIGKILL');
    await good.stop();
    await faulty.close();
  }
}

test('a downstream that hangs for 3 s, then recovers: timeouts are failures, nothing lost, in order, healthy one unaffected', async () => {
  await runFault(
    'hang',
    async (f) => void (f.mode = 'hang'),
    async (f) => {
      f.mode = 'ok';
      f.dropHung();
    },
  );
});

test('a downstream that resets every connection for 3 s, then recovers', async () => {
  await runFault(
    'reset',
    async (f) => void (f.mode = 'reset'),
    async (f) => void (f.mode = 'ok'),
  );
});

test('a downstream that answers 429/503 with Retry-After for 3 s: the router pauses, then delivers everything once in order, nothing dead-lettered', async () => {
  const { pauses, deadLettered, replayed } = await runFault(
    'retry-after',
    async (f) => void (f.mode = 'retry-after'),
    async (f) => void (f.mode = 'ok'),
    // Answers that come late on a loaded host must not count as failed attempts here: only the pauses are the point.
    { timeoutMs: 5000 },
  );
  assert.ok(pauses > 0, `geofence_dispatch_retry_after_pauses_total = ${pauses}`);
  // A pause the downstream asked for is not a failed attempt: the triggers wait, none becomes a dead letter.
  assert.equal(deadLettered, 0, 'no trigger dead-lettered for waiting out Retry-After');
  assert.equal(replayed, 0, 'no trigger re-delivered by the replay lane');
});

test('a downstream whose port closes for 3 s (connection refused), then listens again on the same port', async () => {
  await runFault(
    'port-closed',
    async (f) => f.close(),
    async (f) => f.listen(),
  );
});
