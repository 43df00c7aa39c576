/**
 * Test and benchmark fixtures for the dispatcher: trigger records in a scratch buffer, and a real HTTP downstream
 * whose capacity (concurrent workers), service time and failure mode change at run time.
 */
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TriggerNamer } from '../../src/dispatch/sinks/format.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';
import { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import type { TriggerIdentitySource } from '../../src/durable/trigger-codec.js';
import {
  DREC_ATTEMPTS_I32,
  DREC_FENCE_HANDLE_I32,
  DREC_REASON_I32,
  DREC_STRIDE_BYTES,
  TRG_ADMIT_TIME_NS_F64,
  TRG_DEVICE_SLOT_I32,
  TRG_EVENT_TIME_MS_F64,
  TRG_FENCE_INDEX_I32,
  TRG_GENERATION_I32,
  TRG_INSIDE_MS_F64,
  TRG_LANE_SHIFT,
  TRG_LAT_F64,
  TRG_LON_F64,
  TRG_SEQ_F64,
  TRG_TYPE_I32,
  TRIGGER_STRIDE_F64,
  TRIGGER_STRIDE_I32,
  Lane,
  TriggerType,
} from '../../src/shm/layout.js';

/** One trigger record in its own 64-byte buffer (as if read from a trigger ring's slot 0). */
export class TriggerRecord {
  readonly buffer = new ArrayBuffer(TRIGGER_STRIDE_F64 * 8);
  readonly f64 = new Float64Array(this.buffer);
  readonly i32 = new Int32Array(this.buffer);
  /** Fills the record; `seq` is what tests use to identify a trigger. */
  set(
    seq: number,
    type: number,
    lane: number,
    fenceIndex: number,
    deviceSlot: number,
    admitNs = 0,
    generation = 1,
  ): this {
    this.f64[TRG_LAT_F64] = 52.5 + (seq % 100) * 1e-4;
    this.f64[TRG_LON_F64] = 13.4;
    this.f64[TRG_EVENT_TIME_MS_F64] = 1.7e12 + seq;
    this.f64[TRG_ADMIT_TIME_NS_F64] = admitNs;
    this.f64[TRG_SEQ_F64] = seq;
    this.f64[TRG_INSIDE_MS_F64] = 0;
    this.i32[TRG_GENERATION_I32] = generation;
    this.i32[TRG_TYPE_I32] = type;
    this.i32[TRG_DEVICE_SLOT_I32] = deviceSlot;
    this.i32[TRG_FENCE_INDEX_I32] = fenceIndex | (lane << TRG_LANE_SHIFT);
    return this;
  }
}
void TRIGGER_STRIDE_I32;

/** A one-trigger batch: ENTER of device 7 into fence A (COMPLIANCE lane) under `seq`. */
export function oneTriggerBatch(seq = 1): TriggerBatch {
  return triggerBatch([TriggerType.ENTER], seq);
}

/** A batch of device 7's triggers in fence A (COMPLIANCE lane), of `types` in order, under seqs from `firstSeq` on. */
export function triggerBatch(types: readonly number[], firstSeq = 1): TriggerBatch {
  const f64 = new Float64Array((types.length * DREC_STRIDE_BYTES) / 8);
  const i32 = new Int32Array(f64.buffer);
  const batch = new TriggerBatch(f64, i32, types.length, {
    deviceId: () => 7,
    fenceId: () => 'A',
    fenceTags: () => [],
    fenceJson: () => '"fenceId":"A","tags":[]',
  });
  for (let i = 0; i < types.length; i++) {
    const rec = dispatchRecord(new TriggerRecord().set(firstSeq + i, types[i]!, Lane.COMPLIANCE, 0, 0), 0);
    f64.set(rec.f64, (i * DREC_STRIDE_BYTES) / 8);
    batch.add(i);
  }
  return batch;
}

/** A dispatch record (DREC_* layout) holding `r`'s trigger, named by fence handle `handle`, with `reason`. */
export function dispatchRecord(
  r: TriggerRecord,
  handle: number,
  reason = -1,
  attempts = 0,
): { f64: Float64Array; i32: Int32Array } {
  const buf = new ArrayBuffer(DREC_STRIDE_BYTES);
  const f64 = new Float64Array(buf);
  const i32 = new Int32Array(buf);
  for (let k = 0; k < 6; k++) f64[k] = r.f64[k]!;
  for (let k = 12; k < 16; k++) i32[k] = r.i32[k]!;
  i32[DREC_FENCE_HANDLE_I32] = handle;
  i32[DREC_REASON_I32] = reason;
  i32[DREC_ATTEMPTS_I32] = attempts;
  return { f64, i32 };
}

/** The device part of a trigger identity source, from a namer. */
export function namerIdentity(
  namer: TriggerNamer,
): Pick<TriggerIdentitySource, 'isNumeric' | 'copyNumericId' | 'copyIdBytes'> {
  return {
    isNumeric: (slot) => namer.isNumeric(slot),
    copyNumericId: (slot, dst, index) => namer.copyNumericId(slot, dst, index),
    copyIdBytes: (slot, dst, at) => namer.copyIdBytes(slot, dst, at),
  };
}

/** Run-time settings of the capacity server. */
export interface CapacitySettings {
  /** Concurrent workers; requests beyond them wait in FIFO order. */
  workers: number;
  /** Service time per request, ms. */
  serviceMs: number;
  /** 'ok' serves normally; 'error' answers 500 at once; 'retry-after' answers 503 with Retry-After at once. */
  mode: 'ok' | 'error' | 'retry-after';
  /** A trigger this receiver cannot handle: a request holding one is answered 500, as a whole, after its service time. */
  poison?: (t: ReceivedRecord) => boolean;
  /** The status a request holding a poison trigger is answered with (default 500). */
  poisonStatus?: number;
  /** The share of requests answered 500 after their service time, drawn from a fixed seed (a flaky receiver). */
  failRate?: number;
}

/** What the server saw. */
export interface CapacityStats {
  requests: number;
  triggers: number;
  /** Sum of queue wait over requests, ms. */
  waitSumMs: number;
  /** Requests that waited more than `overloadWaitMs`. */
  overWait: number;
  maxConcurrent: number;
  /** Requests answered 500 for a poison trigger in them or by `failRate` (see CapacitySettings). */
  poisoned: number;
}

/**
 * A real HTTP server on 127.0.0.1 that models a downstream with `workers` concurrent workers and a fixed service
 * time: requests beyond the workers queue. Records every received trigger's `seq` (and whether it was a replay).
 */
export class CapacityServer {
  readonly settings: CapacitySettings;
  readonly stats: CapacityStats = {
    requests: 0,
    triggers: 0,
    waitSumMs: 0,
    overWait: 0,
    maxConcurrent: 0,
    poisoned: 0,
  };
  /** seq -> times received live. */
  readonly liveSeqs = new Map<number, number>();
  /** seq -> times received by replay. */
  readonly replaySeqs = new Map<number, number>();
  /** Every trigger received, in the order the server answered for it. */
  readonly received: { deviceId: string | number; fenceId: string; seq: number; replay: boolean }[] = [];
  /** Queue waits of recent requests, ms, with their start times: [startMs, waitMs] pairs. */
  readonly waits: number[] = [];
  overloadWaitMs = Infinity;
  recordWaits = false;
  private busy = 0;
  private readonly waiting: (() => void)[] = [];
  /** Seeded draws in [0, 1) for `failRate`. */
  private readonly draw = mulberry32(7);
  private server: http.Server | undefined;
  port = 0;

  constructor(settings: Partial<CapacitySettings> = {}) {
    this.settings = { workers: 8, serviceMs: 10, mode: 'ok', ...settings };
  }

  /** Listens on 127.0.0.1 (port 0 = any; pass the old port to come back on it). */
  async start(port = 0): Promise<void> {
    const server = http.createServer((req, res) => this.handle(req, res));
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
  }

  /** Stops listening and cuts every connection (a downstream that dies). */
  async kill(): Promise<void> {
    const s = this.server;
    if (s === undefined) return;
    this.server = undefined;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  /** URL of the server. */
  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** Changes the number of workers at run time; waiting requests start if workers were added. */
  setWorkers(n: number): void {
    this.settings.workers = n;
    while (this.busy < this.settings.workers && this.waiting.length > 0) this.waiting.shift()!();
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = this.settings.mode;
      if (mode === 'error') {
        res.statusCode = 500;
        res.end();
        return;
      }
      if (mode === 'retry-after') {
        res.statusCode = 503;
        res.setHeader('retry-after', '1');
        res.end();
        return;
      }
      const arrived = performance.now();
      const run = (): void => {
        this.busy++;
        if (this.busy > this.stats.maxConcurrent) this.stats.maxConcurrent = this.busy;
        const waitMs = performance.now() - arrived;
        this.stats.waitSumMs += waitMs;
        if (waitMs > this.overloadWaitMs) this.stats.overWait++;
        if (this.recordWaits) this.waits.push(arrived, waitMs);
        const server = this.server;
        setTimeout(() => {
          this.busy--;
          if (server !== this.server) return; // killed meanwhile: the answer never left, nothing was delivered
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
            deviceId: string | number;
            fenceId: string;
            seq: number;
            replay: boolean;
          }[];
          this.stats.requests++;
          const poison = this.settings.poison;
          const failRate = this.settings.failRate ?? 0;
          const poisoned = poison !== undefined && body.some((t) => poison(t));
          if ((failRate > 0 && this.draw() < failRate) || poisoned) {
            this.stats.poisoned++;
            res.statusCode = poisoned ? (this.settings.poisonStatus ?? 500) : 500;
            res.end();
            if (this.busy < this.settings.workers && this.waiting.length > 0) this.waiting.shift()!();
            return;
          }
          this.stats.triggers += body.length;
          for (const t of body) {
            this.received.push({ deviceId: t.deviceId, fenceId: t.fenceId, seq: t.seq, replay: t.replay });
            const m = t.replay ? this.replaySeqs : this.liveSeqs;
            m.set(t.seq, (m.get(t.seq) ?? 0) + 1);
          }
          res.statusCode = 200;
          res.end();
          // A finished worker takes the next waiting request.
          if (this.busy < this.settings.workers && this.waiting.length > 0) this.waiting.shift()!();
        }, this.settings.serviceMs);
      };
      if (this.busy < this.settings.workers) run();
      else this.waiting.push(run);
    });
  }
}

/** A trigger as a receiver of these tests records it (its identity), in arrival order. */
export interface ReceivedRecord {
  deviceId: string | number;
  seq: number;
}

/**
 * Fails unless each device's triggers arrived with strictly increasing seq; with `complete`, also unless they ran 1, 2,
 * 3, ... with no gap (the receiver got every trigger of every device, each once).
 */
export function assertPerDeviceOrder(seen: readonly ReceivedRecord[], label: string, complete = false): void {
  const last = new Map<string | number, number>();
  for (const t of seen) {
    const prev = last.get(t.deviceId) ?? (complete ? 0 : -Infinity);
    if (!(t.seq > prev)) assert.fail(`${label}: device ${String(t.deviceId)} got seq ${t.seq} after ${prev}`);
    if (complete && t.seq !== prev + 1)
      assert.fail(`${label}: device ${String(t.deviceId)} got seq ${t.seq} after ${prev}: a gap`);
    last.set(t.deviceId, t.seq);
  }
}

/** Fails unless every trigger of `expected` arrived exactly once. */
export function assertEachOnce(
  seen: readonly ReceivedRecord[],
  expected: readonly { deviceId: string; seq: number }[],
  label: string,
): void {
  const counts = new Map<string, number>();
  for (const t of seen)
    counts.set(`${String(t.deviceId)}/${t.seq}`, (counts.get(`${String(t.deviceId)}/${t.seq}`) ?? 0) + 1);
  for (const e of expected) {
    const n = counts.get(`${e.deviceId}/${e.seq}`) ?? 0;
    if (n !== 1) assert.fail(`${label}: ${e.deviceId} seq ${e.seq} arrived ${n} times`);
  }
  assert.equal(seen.length, expected.length, `${label}: nothing else arrived`);
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
