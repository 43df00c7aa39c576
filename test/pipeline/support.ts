/** Test support for the pipeline: fences in metres around an origin, a trigger-collecting HTTP server, TCP sending. */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect } from 'node:net';
import { pack } from 'msgpackr';
import { Piscina } from 'piscina';
import type { Trigger } from '../../src/dispatch/trigger.js';
import type { FenceStoreDescriptor } from '../../src/fences/store.js';
import type { ContainmentTask } from '../../src/pipeline/containment-task.js';
import type { PipelineMemory } from '../../src/pipeline/memory.js';
import { at, square } from '../fences/helpers.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';

export { at, square };

/** Event time base of the scripted trajectories, epoch ms. */
export const T0 = Date.UTC(2025, 0, 1);

/** One scripted ping: device, position in metres from the origin, time offset in ms. */
export interface ScriptedPing {
  id: string | number;
  eastM: number;
  northM: number;
  dtMs: number;
}

/** MessagePack frame of a scripted ping (plain map). */
export function frameOf(p: ScriptedPing): Buffer {
  const [lat, lon] = at(p.eastM, p.northM);
  return pack({ id: p.id, lat, lon, ts: T0 + p.dtMs });
}

/** Sends bytes over one TCP connection in pieces of `pieceBytes` (so frames straddle reads), then ends it. */
export async function sendOverTcp(port: number, bytes: Buffer, pieceBytes = 37): Promise<void> {
  const socket = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  for (let i = 0; i < bytes.length; i += pieceBytes) {
    socket.write(bytes.subarray(i, Math.min(bytes.length, i + pieceBytes)));
    // A pause now and then so the router reads partial frames.
    if ((i / pieceBytes) % 16 === 0) await new Promise((r) => setTimeout(r, 1));
  }
  await new Promise<void>((resolve) => socket.end(resolve));
}

/**
 * Decides a webhook's answer to one batch: an HTTP status (2xx: the batch is received), or a promise of one (the
 * answer waits for it).
 */
export type BatchAnswer = (batch: Trigger[]) => number | Promise<number>;

/**
 * A real HTTP server on 127.0.0.1 collecting the JSON arrays POSTed to it, in the order it answered them: by default
 * every batch is received at once (200); `answer` can delay, refuse or fail batches.
 */
export class TriggerServer {
  /** Triggers of the batches answered 2xx, in answer order. */
  readonly received: Trigger[] = [];
  /** Wall time each received trigger's batch was answered, epoch ms (parallel to `received`). */
  readonly receivedAtMs: number[] = [];
  /** The `deviceId` of every received trigger as it appeared in the JSON text (`42` and `"42"` apart). */
  readonly rawDeviceIds: string[] = [];
  /** The headers of every request, in arrival order. */
  readonly requestHeaders: IncomingHttpHeaders[] = [];
  private readonly answer: BatchAnswer;
  private server: Server | null = null;
  port = 0;

  constructor(answer: BatchAnswer = () => 200) {
    this.answer = answer;
  }

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      this.requestHeaders.push(req.headers);
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        const batch = JSON.parse(body) as Trigger[];
        void Promise.resolve(this.answer(batch)).then((status) => {
          if (status >= 200 && status < 300) {
            const now = Date.now();
            for (const t of batch) {
              this.received.push(t);
              this.receivedAtMs.push(now);
            }
            for (const m of body.matchAll(/"deviceId":("(?:[^"\\]|\\.)*"|[0-9]+)/g)) this.rawDeviceIds.push(m[1]!);
          }
          res.writeHead(status, { 'content-length': 0 });
          res.end();
        });
      });
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const a = server.address();
    this.port = a !== null && typeof a === 'object' ? a.port : 0;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/triggers`;
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (server === null) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** Triggers grouped by device (42 and "42" apart), each group in arrival order. */
export function byDevice(triggers: readonly Trigger[]): Map<string | number, Trigger[]> {
  const m = new Map<string | number, Trigger[]>();
  for (const t of triggers) {
    let list = m.get(t.deviceId);
    if (list === undefined) m.set(t.deviceId, (list = []));
    list.push(t);
  }
  return m;
}

/**
 * Checks the delivery contract as a receiver sees it (checkDeliveryContract, each trigger once): a device's triggers
 * arrive with strictly increasing seq (whatever their lane: a device with a COMPLIANCE trigger waiting moves up as a
 * whole), no (deviceId, seq) arrives twice or names two triggers, and sorted by seq they form valid stays per fence
 * (ENTER before EXIT, no EXIT without ENTER, at most one DWELL per stay). Returns the first problem, or null.
 */
export function orderProblem(triggers: readonly Trigger[]): string | null {
  const contract = checkDeliveryContract(triggers, { maxProblems: 1 });
  if (contract.problems.length > 0) return contract.problems[0]!;
  for (const [device, list] of byDevice(triggers)) {
    let lastSeq = -Infinity;
    for (const t of list) {
      if (!(t.seq > lastSeq)) return `device ${JSON.stringify(device)}: seq ${t.seq} arrived after ${lastSeq}`;
      lastSeq = t.seq;
    }
    const stay = stayProblem(device, list);
    if (stay !== null) return stay;
  }
  return null;
}

/** Checks that one device's triggers, in seq order, form valid stays per fence. */
export function stayProblem(device: string | number, list: readonly Trigger[]): string | null {
  const sorted = [...list].sort((a, b) => a.seq - b.seq);
  const inside = new Map<string, { dwell: boolean }>();
  for (const t of sorted) {
    const stay = inside.get(t.fenceId);
    if (t.type === 'ENTER') {
      if (stay !== undefined) return `device ${JSON.stringify(device)}: ENTER ${t.fenceId} while inside`;
      inside.set(t.fenceId, { dwell: false });
    } else if (t.type === 'EXIT') {
      if (stay === undefined) return `device ${JSON.stringify(device)}: EXIT ${t.fenceId} without ENTER`;
      inside.delete(t.fenceId);
    } else if (t.type === 'DWELL') {
      if (stay === undefined) return `device ${JSON.stringify(device)}: DWELL ${t.fenceId} outside`;
      if (stay.dwell) return `device ${JSON.stringify(device)}: second DWELL ${t.fenceId} in one stay`;
      stay.dwell = true;
    }
  }
  return null;
}

/** Resolves with `p`, or fails naming `what` once `ms` have passed. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Resolves when `cond()` holds, polling; rejects after `timeoutMs`. */
export async function waitFor(cond: () => boolean, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A containment pool of one worker over `memory` and `fences`, for tests that build the ingest path themselves. */
export function containmentPool(
  memory: PipelineMemory,
  fences: FenceStoreDescriptor,
): Piscina<ContainmentTask, number> {
  return new Piscina<ContainmentTask, number>({
    filename: new URL('../../src/pipeline/containment-thread.js', import.meta.url).href,
    minThreads: 1,
    maxThreads: 1,
    workerData: { memory, fences, engine: {} },
  });
}
