/**
 * Fixtures for the dead-letter tests: a codec over the IndexNamer (devices `device-<slot>`, fences `fence-1-<i>`),
 * dead letters written through the store's own append path, the bytes on disk, and a sink that records what it got.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DeadLetterReason, DeadLetterStatus, Lane, TriggerType } from '../../src/shm/layout.js';
import { FenceCatalog } from '../../src/dispatch/fence-catalog.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import type { Sink, SinkResult } from '../../src/dispatch/sinks/sink.js';
import type { TriggerBatch } from '../../src/dispatch/sinks/trigger-batch.js';
import {
  deadLetterSegmentName,
  listDeadLetterSegments,
  type DeadLetterFile,
} from '../../src/durable/dead-letter-file.js';
import { encodeDeadLetterStatus } from '../../src/durable/file-layout.js';
import { RecordBuffer, TriggerCodec } from '../../src/durable/trigger-codec.js';
import { dispatchRecord, namerIdentity, TriggerRecord } from '../dispatch/fixtures.js';

/** A codec of run `runId` naming devices and fences as the IndexNamer does. */
export function deadLetterCodec(runId = 1): { codec: TriggerCodec; catalog: FenceCatalog } {
  const namer = new IndexNamer();
  const catalog = new FenceCatalog(namer);
  const codec = new TriggerCodec(
    runId,
    { ...namerIdentity(namer), fenceIdBytes: (h) => catalog.idBytes(h), fenceTagsBytes: (h) => catalog.tagsBytes(h) },
    0,
  );
  return { codec, catalog };
}

/**
 * Appends dead letters seq `from` .. `from + count - 1` (device `seq % devices`, fence `seq % 5`, reason
 * undeliverable) with the status `statusOf(seq)` gives, through `ensureRoom` / `room` / `append` as the dispatcher's
 * flush does. Returns their positions, in seq order.
 */
export function appendDeadLetters(
  file: DeadLetterFile,
  codec: TriggerCodec,
  catalog: FenceCatalog,
  from: number,
  count: number,
  devices: number,
  statusOf: (seq: number) => number = () => DeadLetterStatus.PENDING,
): number[] {
  const buf = new RecordBuffer(1 << 20);
  const r = new TriggerRecord();
  const positions: number[] = [];
  let seq = from;
  const end = from + count;
  while (seq < end) {
    if (!file.ensureRoom()) throw new Error(`ensureRoom failed: ${file.lastError}`);
    const limit = Math.min(buf.byteLength, file.room);
    let length = 0;
    let records = 0;
    let pending = 0;
    let final = 0;
    const offsets: number[] = [];
    for (; seq < end; seq++) {
      const rec = dispatchRecord(
        r.set(seq, TriggerType.CROSS, Lane.TRANSITION, seq % 5, seq % devices),
        catalog.handleOf(1, seq % 5),
        DeadLetterReason.UNDELIVERABLE,
        3,
      );
      const status = statusOf(seq);
      const n = codec.encode(rec.f64, rec.i32, 0, 0, buf, length, limit, encodeDeadLetterStatus(status));
      if (n === 0) break;
      offsets.push(length);
      length += n;
      records++;
      if (status === DeadLetterStatus.PENDING) pending++;
      else if (status === DeadLetterStatus.FINAL) final++;
    }
    const base = file.append(buf, length, records, pending, final);
    if (base < 0) throw new Error(`append failed: ${file.lastError}`);
    for (const o of offsets) positions.push(base + o / 8);
  }
  return positions;
}

/** Bytes of the dead-letter files in `dir`, as the file system reports them. */
export function deadLetterBytesOnDisk(dir: string): number {
  let bytes = 0;
  for (const n of listDeadLetterSegments(dir)) {
    try {
      bytes += fs.statSync(path.join(dir, deadLetterSegmentName(n))).size;
    } catch {
      // Deleted between the listing and the stat.
    }
  }
  return bytes;
}

/** What a recording sink received. */
export interface Received {
  deviceId: string | number;
  seq: number;
  replay: boolean;
}

/** An in-process sink that records every trigger it accepts; `failing` makes it answer 500. */
export class RecordingSink implements Sink {
  readonly seen: Received[] = [];
  failing = false;
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    await new Promise((r) => setImmediate(r));
    if (this.failing) return { status: 500 };
    for (let i = 0; i < batch.count; i++)
      this.seen.push({ deviceId: batch.deviceId(i), seq: batch.seq(i), replay: batch.replay(i) });
    return { status: 200 };
  }
  async close(): Promise<void> {}
}

/** Fails unless each device's triggers arrived with strictly increasing seq; returns how many arrived per seq. */
export function checkPerDeviceOrder(seen: readonly Received[]): Map<number, number> {
  const last = new Map<string | number, number>();
  const counts = new Map<number, number>();
  for (const t of seen) {
    const prev = last.get(t.deviceId) ?? -Infinity;
    if (!(t.seq > prev)) throw new Error(`device ${String(t.deviceId)} got seq ${t.seq} after ${prev}`);
    last.set(t.deviceId, t.seq);
    counts.set(t.seq, (counts.get(t.seq) ?? 0) + 1);
  }
  return counts;
}
