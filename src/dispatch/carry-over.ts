/**
 * What one run of a downstream hands to the next, through its directory: at close, every trigger still in memory goes
 * (with those set aside in the backlog log) to the pending file, in per-device FIFO order (those loaded from the
 * backlog log too; then the log's cursor passes them), except parked dead letters, which stay in the dead-letter file
 * as PENDING; at start, the pending file, the set-aside files a crash left and the PENDING dead letters are taken back
 * into memory in front of everything else, sorted by seq per device, and the backlog log's pending records are counted
 * per device so that device's new triggers queue behind them. A device's pending triggers so stay "memory, then the
 * log" across the restart.
 *
 * Dispatcher thread, at start and at close only (allocates freely).
 */
import { DeadLetterStatus, DREC_DLQ_POS_F64, DREC_STRIDE_F64, DREC_STRIDE_I32, TRG_SEQ_F64 } from '../shm/layout.js';
import { errorText } from '../durable/fs-util.js';
import { scanPendingFile, writePendingFile } from '../durable/pending-file.js';
import { scanSetAsideFiles } from '../durable/set-aside-files.js';
import { TREC_MAX_BYTES, TREC_SEQ_F64 } from '../durable/file-layout.js';
import { RecordBuffer, type TriggerCodec, type TriggerResolver } from '../durable/trigger-codec.js';
import type { Downstream } from './downstream.js';

/** A record carried over from an earlier run, copied out of its file. */
export interface CarriedRecord {
  /** The record's bytes (in their own aligned buffer, at 0). */
  buf: RecordBuffer;
  /** Its position in the dead-letter file (a PENDING dead letter), or -1 (the pending file). */
  dlqPosition: number;
  /** Its seq (the sort key within a device). */
  seq: number;
}

/** Copies the record at `at` of `buf` (of `length` bytes) into a buffer of its own. */
export function copyRecord(
  buf: RecordBuffer,
  at: number,
  length: number,
  dlqPosition: number,
  seq: number,
): CarriedRecord {
  const own = new RecordBuffer(length);
  own.bytes.set(buf.bytes.subarray(at, at + length));
  return { buf: own, dlqPosition, seq };
}

/**
 * Reads the pending file of `dir` into carried records; `damagedSpans` counts the damaged stretches skipped (their
 * triggers are lost: the caller counts and alarms them).
 */
export function readPendingRecords(
  dir: string,
  downstreamName: string,
): { records: CarriedRecord[]; damagedSpans: number } {
  const records: CarriedRecord[] = [];
  const scan = scanPendingFile(dir, downstreamName, (buf, at, _pos, length) =>
    records.push(copyRecord(buf, at, length, -1, buf.f64[(at + TREC_SEQ_F64) >> 3]!)),
  );
  return { records, damagedSpans: scan.damagedSpans };
}

/**
 * Reads the set-aside files of `dir` (held backlog records a crash left there: see set-aside-files.ts) into carried
 * records; `files` names them (removed once the pending file holds what was taken of them), `damagedSpans` counts the
 * damaged stretches skipped (their triggers are lost: the caller counts and alarms them).
 */
export function readSetAsideRecords(
  dir: string,
  downstreamName: string,
): { records: CarriedRecord[]; files: number[]; damagedSpans: number } {
  const records: CarriedRecord[] = [];
  const scan = scanSetAsideFiles(dir, downstreamName, (buf, at, _pos, length) =>
    records.push(copyRecord(buf, at, length, -1, buf.f64[(at + TREC_SEQ_F64) >> 3]!)),
  );
  return { records, files: scan.files, damagedSpans: scan.damagedSpans };
}

/**
 * Takes carried records into `ds`'s memory: sorted by seq (stable, so per device in seq order), one per (device,
 * seq) (a trigger in both files is taken once), each decoded through `codec` and `resolver`. Returns how many were
 * taken and how many named a device this run cannot resolve (dropped, counted by the caller). A PENDING dead letter
 * not taken is settled in its file (FINAL when its device is unknown, RESOLVED when it was a second copy), so it no
 * longer holds its segment back from compaction.
 */
export function takeOver(
  ds: Downstream,
  records: CarriedRecord[],
  codec: TriggerCodec,
  resolver: TriggerResolver,
  nowNs: number,
): { taken: number; unresolved: number } {
  // By seq; of two copies of one trigger (a crash between writing one file and settling the other) the dead-letter
  // copy comes first and is the one kept: settling it settles its file record.
  records.sort((a, b) => a.seq - b.seq || (b.dlqPosition >= 0 ? 1 : 0) - (a.dlqPosition >= 0 ? 1 : 0));
  const scratch = new ArrayBuffer(DREC_STRIDE_F64 * 8);
  const f64 = new Float64Array(scratch);
  const i32 = new Int32Array(scratch);
  const seen = new Set<string>();
  let taken = 0;
  let unresolved = 0;
  for (const r of records) {
    f64.fill(0);
    const device = codec.decode(r.buf, 0, f64, i32, 0, 0, resolver);
    if (device < 0) {
      unresolved++;
      if (r.dlqPosition >= 0) ds.deadLetterFile?.setStatus(r.dlqPosition, DeadLetterStatus.FINAL);
      continue;
    }
    const key = `${device}:${f64[TRG_SEQ_F64]!}`;
    if (seen.has(key)) {
      if (r.dlqPosition >= 0) ds.deadLetterFile?.setStatus(r.dlqPosition, DeadLetterStatus.RESOLVED);
      continue;
    }
    seen.add(key);
    ds.acceptCarriedOver(f64, i32, device, r.dlqPosition, nowNs);
    taken++;
  }
  return { taken, unresolved };
}

/**
 * Writes every trigger `ds` still holds in memory, except parked dead letters (the dead-letter file holds those), to
 * its pending file in per-device FIFO order, each device's records set aside in the backlog log behind them (read
 * again from the log; then its stashed record, if any), replacing the old file (removing it when there are none),
 * durably. The caller then lets the backlog log's cursor pass every loaded record (`releaseLoaded`). Returns how many
 * were written, how many set aside could not be read again (`lostSetAside`: damaged, unreadable or unnamed; counted
 * in the log's reloadDamaged), the error text when the file could not be written, and then how many of those written
 * no other durable file holds (`lostWithoutFile`: lost; the others come back at the next start from the backlog log
 * and the files carried over at this start, which stay).
 */
export function carryOver(
  ds: Downstream,
  dir: string,
  codec: TriggerCodec,
): { written: number; lostSetAside: number; error: string | null; lostWithoutFile: number } {
  const q = ds.queues;
  let buf = new RecordBuffer(1 << 20);
  let length = 0;
  let written = 0;
  let lostSetAside = 0;
  let lostWithoutFile = 0;
  const encode = (f64: Float64Array, i32: Int32Array, f: number, i: number): void => {
    if (length + TREC_MAX_BYTES > buf.byteLength) {
      const grown = new RecordBuffer(buf.byteLength * 2);
      grown.bytes.set(buf.bytes.subarray(0, length));
      buf = grown;
    }
    length += codec.encode(f64, i32, f, i, buf, length, buf.byteLength, 0);
    written++;
  };
  const scratch = new ArrayBuffer(DREC_STRIDE_F64 * 8);
  const f64 = new Float64Array(scratch);
  const i32 = new Int32Array(scratch);
  const aside = ds.setAside;
  for (let device = 0; device < q.maxDevices; device++) {
    for (let slot = q.headOf(device); slot >= 0; slot = q.nextInFifo(slot)) {
      const f = slot * DREC_STRIDE_F64;
      if (q.f64[f + DREC_DLQ_POS_F64]! !== -1) continue;
      encode(q.f64, q.i32, f, slot * DREC_STRIDE_I32);
      if (ds.lostWithoutPendingFile(slot)) lostWithoutFile++;
    }
    if (aside !== null) {
      for (let h = aside.peek(device); h >= 0; h = aside.after(h)) {
        if (ds.readSetAside(h, f64, i32) < 0) lostSetAside++;
        else {
          encode(f64, i32, 0, 0);
          if (ds.setAsideLostWithoutPendingFile(h)) lostWithoutFile++;
        }
      }
    }
    // The record loaded when none more could be set aside comes after its device's set-aside ones.
    if (ds.stashedDevice === device) {
      encode(q.f64, q.i32, ds.stashedSlot * DREC_STRIDE_F64, ds.stashedSlot * DREC_STRIDE_I32);
      if (ds.lostWithoutPendingFile(ds.stashedSlot)) lostWithoutFile++;
    }
  }
  try {
    writePendingFile(dir, ds.name, buf, length);
  } catch (err) {
    return { written, lostSetAside, error: errorText(err), lostWithoutFile };
  }
  return { written, lostSetAside, error: null, lostWithoutFile: 0 };
}
