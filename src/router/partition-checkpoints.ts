/**
 * The main thread's side of a partitioned source's state in JetStream (see src/durable/partition-state-bucket.ts):
 * at start, the stored checkpoints of the partitions this router consumes, restored by the StateKeeper, and the
 * stream sequence each partition's consumer starts from; after every durable checkpoint, the devices of each owned
 * partition written back with the stream sequence the checkpoint covers.
 *
 * What a checkpoint covers per partition: the newest message the ingest thread had seen processed (every ping of it
 * released by containment) when the capture began (SRC_PROCESSED_STREAM_SEQ_F64). The state may hold more (pings of
 * later messages processed before the copy): a router that restores it reads those again and containment recognises
 * them (event time not newer than the device's last) and produces nothing; the pings after them give the same
 * triggers, with the same seqs, as they gave the writer.
 *
 * Which checkpoint a start restores: with exact replay (every ping from the stream) the partition's newest delivered
 * one (written when every trigger of the pings it covers had been delivered), read again from the message after it,
 * and from the stream's first message when the partition has none; so a trigger that some router held undelivered
 * (in memory or in its own files, when it was killed or its partitions moved) is derived again, in its device's
 * order, by whichever router reads the partition next, and that router's files' copies are passed over (see
 * StateKeeper.replayFloors). Otherwise the newest checkpoint, whose triggers were at least in a durable file.
 *
 * Exact replay falls back to a partition's newest checkpoint, with a warning, where reading again from the delivered
 * one cannot be exact: its head comes from an earlier version (which checkpoint had every trigger delivered is
 * unknown), or the stream no longer holds the messages after the delivered one (the stream's first message is past
 * it: retention removed them, e.g. while a downstream held a dead letter for days), or will expire too soon to be read
 * (within max(5 min, a tenth of the stream's age limit)). Its devices continue from the newest state as without exact
 * replay. `geofence_source_delivered_checkpoint_age_seconds` shows how far the oldest delivered checkpoint lags, to be
 * kept well inside the stream's retention.
 *
 * When the stream's first message is past even a partition's newest state (the routers were stopped, or the stream
 * could not be read, for longer than it keeps messages), the pings removed between are read by no one: the start is
 * no exact replay for any partition, every device's seq continues above a floor raised by 2^32 (no (deviceId, seq)
 * issued before is used again for another trigger), and every copy in the router's files is delivered.
 */
import { hostname } from 'node:os';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { isNotFound, partitionConsumerName } from '../ingest/sources/jetstream-source.js';
import { connectSourceServers, drainWithin } from '../ingest/sources/nats-connection.js';
import type { RouterOptions } from '../config/options.js';
import {
  PartitionStateBucket,
  type PartitionHeadSummary,
  type StoredPartitionCheckpoint,
} from '../durable/partition-state-bucket.js';
import type { FenceStore } from '../fences/store.js';
import { parsePartitionList } from '../ingest/sources/partitions.js';
import type { PartitionStateAtStart, StateKeeper } from '../pipeline/state-keeper.js';
import { nowNs } from '../shm/clock.js';
import {
  SRC_CHECKPOINT_CAPTURED_MS_F64,
  SRC_CHECKPOINT_STREAM_SEQ_F64,
  SRC_PROCESSED_STREAM_SEQ_F64,
  SRC_START_STREAM_SEQ_F64,
  SRC_STRIDE_F64,
  leaseGateOpen,
} from '../shm/layout.js';

/** How long closing the connection may take, ms. */
const CLOSE_WITHIN_MS = 2000;

/** The partitions' state in JetStream, for one router (see the module comment). */
export class PartitionCheckpoints {
  /** What the start restores. */
  readonly atStart: PartitionStateAtStart;
  /** Bytes written by the last store, and how long it took, ns. */
  lastBytes = 0;
  lastNs = 0;
  /**
   * Stores that were delivered checkpoints as well, and those that were not, for some partition (a trigger they cover
   * undelivered, or a device's expiry on its way).
   */
  storedDelivered = 0;
  storedUndelivered = 0;
  /** Checkpoints whose partition copies were not stored because triggers they cover were still only in memory. */
  deferred = 0;
  /**
   * Per owned partition (index as in `owned`): when its delivered checkpoint was captured, epoch ms; when this router
   * opened, for a partition with none it could read again from (none stored, or a fallback).
   */
  private readonly deliveredCapturedMs: Float64Array;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly bucket: PartitionStateBucket,
    private readonly owned: readonly number[],
    private readonly partitionCount: number,
    private readonly gate: Float64Array | null,
    atStart: PartitionStateAtStart,
    deliveredCapturedMs: Float64Array,
  ) {
    this.atStart = atStart;
    this.deliveredCapturedMs = deliveredCapturedMs;
  }

  /**
   * Seconds since the oldest owned partition's delivered checkpoint was captured (since this router opened, for one
   * with none to read again from): how far back a start with exact replay would read; 0 with no owned partition.
   */
  oldestDeliveredAgeS(nowMs: number): number {
    let oldest = nowMs;
    for (const ms of this.deliveredCapturedMs) if (ms < oldest) oldest = ms;
    return (nowMs - oldest) / 1000;
  }

  /**
   * Connects, opens (creates) the bucket and reads the checkpoints of the owned partitions; null when the options
   * keep no partition state. With a lease gate (leased partitions) each owned partition is claimed as well (see
   * PartitionStateBucket.claim), and nothing is stored while the gate is shut. Throws an Error naming the bucket or
   * the partition when one is unreadable or was written by another router meanwhile.
   */
  static async open(
    o: RouterOptions,
    leaseGate: SharedArrayBuffer | null = null,
  ): Promise<PartitionCheckpoints | null> {
    const js = o.jetstreamSource;
    if (js === null || js.stateBucket === null) return null;
    const owned = parsePartitionList(js.partitions, js.partitionCount, 'options.jetstreamSource.partitions');
    const nc = await connectSourceServers(js, 'partition state');
    try {
      const bucket = await openStateBucket(nc, js, js.stateBucket);
      const exactWanted = streamOnly(o);
      const jsm = await jetstreamManager(nc);
      const openedMs = Date.now();
      const { heads, gapped, exactReplay, fallbackReasons } = await replayPlan(
        bucket,
        jsm,
        js,
        owned,
        exactWanted,
        openedMs,
      );
      const stored: StoredPartitionCheckpoint[] = [];
      const fallback: { partition: number; reason: string }[] = [];
      const deliveredMs = new Float64Array(owned.length).fill(openedMs);
      for (let i = 0; i < owned.length; i++) {
        const p = owned[i]!;
        const reason = fallbackReasons[i]!;
        if (reason !== null) fallback.push({ partition: p, reason });
        else deliveredMs[i] = heads[i]?.delivered?.capturedMs ?? openedMs;
        const s = await bucket.readChunks(p, exactReplay && reason === null ? 'delivered' : 'newest');
        if (s !== null) stored.push(s);
        if (leaseGate !== null) await bucket.claim(p);
      }
      const gate = leaseGate === null ? null : new Float64Array(leaseGate);
      return new PartitionCheckpoints(
        nc,
        bucket,
        owned,
        js.partitionCount,
        gate,
        {
          partitionCount: js.partitionCount,
          owned,
          stored,
          exactReplay,
          streamOnly: exactWanted,
          fallback,
          gapped,
          raiseSeqFloor: gapped.length > 0,
        },
        deliveredMs,
      );
    } catch (err) {
      await nc.close().catch(() => undefined);
      throw new Error(`options.jetstreamSource.stateBucket ${js.stateBucket}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /**
   * Sets each restored partition's start position (before the ingest thread starts) and what its checkpoint covers;
   * with exact replay, a partition with no delivered checkpoint starts from the stream's first message (without it,
   * a gap included, a partition with no restored state keeps its consumer's own position).
   */
  seed(cells: Float64Array): void {
    if (this.atStart.exactReplay)
      for (const p of this.owned) {
        cells[p * SRC_STRIDE_F64 + SRC_START_STREAM_SEQ_F64] = 1;
      }
    for (const s of this.atStart.stored) {
      const b = s.partition * SRC_STRIDE_F64;
      cells[b + SRC_START_STREAM_SEQ_F64] = s.streamSeq + 1;
      cells[b + SRC_PROCESSED_STREAM_SEQ_F64] = s.streamSeq;
      cells[b + SRC_CHECKPOINT_STREAM_SEQ_F64] = s.streamSeq;
      cells[b + SRC_CHECKPOINT_CAPTURED_MS_F64] = s.capturedMs;
    }
  }

  /** Per owned partition, the stream sequence a checkpoint whose capture begins now covers. */
  coveredNow(cells: Float64Array): Float64Array {
    const out = new Float64Array(this.owned.length);
    for (let i = 0; i < this.owned.length; i++)
      out[i] = cells[this.owned[i]! * SRC_STRIDE_F64 + SRC_PROCESSED_STREAM_SEQ_F64]!;
    return out;
  }

  /**
   * Writes the devices of every owned partition from the checkpoint `keeper` just took over `store`, each with what
   * it covers (`covered`, from coveredNow at the capture's start), as the delivered checkpoint too when `delivered`
   * (every trigger of the pings the copy holds was delivered) and the partition's copy holds no device whose expiry was
   * on its way (StateKeeper.expiringByPartition: whether that expiry happens or a ping revives the device first is
   * decided after the copy, and the stream read again holds no trace of it). Throws on the first partition that
   * cannot be written (another router writing it included): the acknowledgements then wait for a checkpoint that is.
   */
  async store(
    keeper: StateKeeper,
    store: FenceStore,
    covered: Float64Array,
    capturedMs: number,
    cells: Float64Array,
    delivered: boolean,
  ): Promise<void> {
    if (this.gate !== null && !leaseGateOpen(this.gate))
      throw new Error('the partition leases are not known to hold (renewal overdue or lost): nothing stored');
    const t0 = nowNs();
    const encoded = await keeper.encodePartitions(store, this.partitionCount, this.owned);
    let bytes = 0;
    let all = true;
    for (let i = 0; i < this.owned.length; i++) {
      const p = this.owned[i]!;
      const b = encoded.get(p)!;
      const deliveredHere = delivered && (keeper.expiringByPartition.get(p) ?? 0) === 0;
      await this.bucket.write(p, covered[i]!, capturedMs, b, deliveredHere);
      bytes += b.length;
      cells[p * SRC_STRIDE_F64 + SRC_CHECKPOINT_STREAM_SEQ_F64] = covered[i]!;
      cells[p * SRC_STRIDE_F64 + SRC_CHECKPOINT_CAPTURED_MS_F64] = capturedMs;
      if (deliveredHere) this.deliveredCapturedMs[i] = capturedMs;
      else all = false;
    }
    this.lastBytes = bytes;
    this.lastNs = nowNs() - t0;
    if (all) this.storedDelivered++;
    else this.storedUndelivered++;
  }

  /** Closes the connection (after the last checkpoint). */
  async close(): Promise<void> {
    await drainWithin(this.nc, CLOSE_WITHIN_MS);
  }
}

/** The partition state bucket `bucket` of source `js`, opened (created) through `nc`, this process its writer. */
function openStateBucket(
  nc: NatsConnection,
  js: NonNullable<RouterOptions['jetstreamSource']>,
  bucket: string,
): Promise<PartitionStateBucket> {
  return PartitionStateBucket.open(nc, {
    bucket,
    scope: `${js.stream}.${js.consumerPrefix}`,
    replicas: js.streamReplicas,
    partitionCount: js.partitionCount,
    writer: `${hostname()}:${process.pid}`,
  });
}

/** Every ping comes through the partitions: nothing else can give a device a trigger the replay would not. */
export function streamOnly(o: RouterOptions): boolean {
  return o.listenHost === null && o.inputs.length === 0;
}

/**
 * How a start owning `partitions` reads them again, as the stream and the stored heads are now: their heads (read
 * through `bucket`, which remembers their revisions, in the order of `partitions`), the partitions with a gap
 * (gapReason), whether the start is an exact replay (`exactWanted` and no gap) and, then, per partition why it falls
 * back to its newest state (fallbackReason; null: read again from its delivered checkpoint; all null without exact
 * replay).
 */
async function replayPlan(
  bucket: PartitionStateBucket,
  jsm: JetStreamManager,
  js: NonNullable<RouterOptions['jetstreamSource']>,
  partitions: readonly number[],
  exactWanted: boolean,
  nowMs: number,
): Promise<{
  stream: StreamNow;
  heads: (PartitionHeadSummary | null)[];
  gapped: { partition: number; reason: string }[];
  exactReplay: boolean;
  fallbackReasons: (string | null)[];
}> {
  const stream = await streamNow(jsm, js.stream);
  const heads: (PartitionHeadSummary | null)[] = [];
  const readTo: (number | null)[] = [];
  for (const p of partitions) {
    heads.push(await bucket.readHead(p));
    readTo.push(await consumerReadTo(jsm, js.stream, partitionConsumerName(js.consumerPrefix, p)));
  }
  const gapped: { partition: number; reason: string }[] = [];
  partitions.forEach((p, i) => {
    const reason = gapReason(heads[i]!, stream, readTo[i]!);
    if (reason !== null) gapped.push({ partition: p, reason });
  });
  const exactReplay = exactWanted && gapped.length === 0;
  const fallbackReasons: (string | null)[] = [];
  for (let i = 0; i < partitions.length; i++) {
    const from = exactReplay ? await readFromMs(jsm, js.stream, heads[i]!, stream, readTo[i]!) : NaN;
    fallbackReasons.push(exactReplay ? fallbackReason(heads[i]!, stream, readTo[i]!, from, nowMs) : null);
  }
  return { stream, heads, gapped, exactReplay, fallbackReasons };
}

/**
 * Why the next owner of `partitions`, given up now, could not read them again exactly from their delivered
 * checkpoints (one line per partition, as its start would find it now: a gap, or a fallback to the newest state);
 * empty when every one of them can be. A gap in any partition of the stream counts: the next owner may read that one
 * as well, and a start with a gap is no exact replay for any of its partitions. Then the triggers of theirs that this router leaves undelivered are derived
 * again by that owner, under the same seqs and in each device's order, and this router's next start passes its own
 * copies over (StateKeeper.replayFloors), so a partition may move before they are delivered. Options that keep no
 * partition state, or read pings from more than the stream, give one line saying so, and so do other members that
 * may (`othersNotStreamOnly`, PartitionLeases.membersNotStreamOnly): any of them could be the next owner. Reads
 * through `nc`.
 */
export async function handOverReasons(
  nc: NatsConnection,
  o: RouterOptions,
  partitions: readonly number[],
  othersNotStreamOnly: readonly string[],
): Promise<string[]> {
  const js = o.jetstreamSource;
  if (js === null || js.stateBucket === null)
    return ['no partition state is kept (options.jetstreamSource.stateBucket)'];
  if (!streamOnly(o)) return ['pings come from more than the stream (a listener or inputs): there is no exact replay'];
  if (othersNotStreamOnly.length > 0)
    return [
      `members ${othersNotStreamOnly.join(',')} may read pings from more than the stream (their heartbeats do not say otherwise): a start of theirs is no exact replay`,
    ];
  const bucket = await openStateBucket(nc, js, js.stateBucket);
  const jsm = await jetstreamManager(nc);
  const plan = await replayPlan(bucket, jsm, js, partitions, true, Date.now());
  const limits = plan.stream.otherLimits;
  if (limits !== undefined && limits !== null)
    return [`the stream ${js.stream} also drops messages by ${limits}, at any time: the read again could miss them`];
  const gapped = plan.gapped.map((g) => `partition ${g.partition}: ${g.reason}`);
  for (let p = 0; p < js.partitionCount; p++) {
    if (partitions.includes(p)) continue;
    const head = await bucket.readHead(p);
    const reason = gapReason(
      head,
      plan.stream,
      await consumerReadTo(jsm, js.stream, partitionConsumerName(js.consumerPrefix, p)),
    );
    if (reason !== null)
      gapped.push(`partition ${p}: ${reason} (a next owner that reads it as well starts with no exact replay)`);
  }
  if (gapped.length > 0) return gapped;
  return partitions.flatMap((p, i) => {
    const reason = plan.fallbackReasons[i]!;
    return reason === null ? [] : [`partition ${p}: ${reason}`];
  });
}

/** What a start needs to know of the telemetry stream now. */
export interface StreamNow {
  /** Its first stored sequence (1 when it does not exist yet; past its last message when it is empty). */
  firstSeq: number;
  /** When its first stored message was published, epoch ms (NaN when it holds none). */
  firstMs: number;
  /** How long it keeps a message, ms (0: no age limit). */
  maxAgeMs: number;
  /**
   * Its limits other than age that remove messages (`max_msgs=N`, `max_bytes=N`, `max_msgs_per_subject=N`), null
   * (or absent) when none: under them a message may go at any time, which the age margin of fallbackReason cannot
   * foresee.
   */
  otherLimits?: string | null;
}

/** Shortest time left before a message expires for a start to read the stream again from it, ms. */
const EXPIRY_MARGIN_MIN_MS = 5 * 60_000;

/**
 * Why a start cannot continue a partition with `head` from its stored state exactly (null when it can): the stream's
 * first message is past what its newest state covers, and a router had read messages of the partition after that
 * state (`readTo`: the stream sequence of the last message its consumer delivered; null when unknown, counted as
 * after it), so their pings, removed since, are read by no one and triggers issued for them could be issued again
 * under the same seqs. A partition that had no message since its state (idle) is not one.
 */
export function gapReason(head: PartitionHeadSummary | null, stream: StreamNow, readTo: number | null): string | null {
  if (head === null || !head.hasState || head.streamSeq + 1 >= stream.firstSeq) return null;
  if (readTo !== null && readTo <= head.streamSeq) return null;
  return `its newest stored state covers up to stream sequence ${head.streamSeq}, its consumer had delivered ${readTo === null ? 'an unknown sequence (it is gone)' : `up to ${readTo}`}, and the stream's first message is now sequence ${stream.firstSeq} (retention removed the messages between)`;
}

/**
 * Why exact replay cannot read a partition with `head` again from its delivered checkpoint (null when it can): see
 * the module comment. `readTo` as for gapReason: when no router read a message after the delivered checkpoint, no
 * trigger was issued past it, and reading from the stream's first message is exact whatever retention removed. A
 * message the read would start from that expires within max(5 min, a tenth of the stream's age limit) counts as
 * removed already (it could be removed while the stream is read): `readFromMs` is when the stream's message after
 * the delivered checkpoint (its first, with none) was published (the partition's next one is no older), epoch ms.
 */
export function fallbackReason(
  head: PartitionHeadSummary | null,
  stream: StreamNow,
  readTo: number | null,
  readFromMs: number,
  nowMs: number,
): string | null {
  if (head === null || !head.hasState) return null;
  if (head.delivered === undefined)
    return 'its stored state was written by an earlier version, which kept no delivered checkpoint';
  const from = (head.delivered?.streamSeq ?? 0) + 1;
  if (readTo !== null && readTo < from) return null;
  const what =
    head.delivered === null
      ? 'it has no delivered checkpoint'
      : `its delivered checkpoint covers up to stream sequence ${from - 1}, captured ${new Date(head.delivered.capturedMs).toISOString()}`;
  if (from < stream.firstSeq)
    return `${what}, and the stream's first message is now sequence ${stream.firstSeq} (retention removed the messages ${head.delivered === null ? 'before it' : 'after the checkpoint'})`;
  if (stream.maxAgeMs === 0) return null;
  const marginMs = Math.max(EXPIRY_MARGIN_MIN_MS, stream.maxAgeMs / 10);
  if (!(nowMs - readFromMs > stream.maxAgeMs - marginMs)) return null;
  return `${what}, and the messages to read again from ${head.delivered === null ? "the stream's start" : 'there'} expire within ${Math.round(Math.max(0, stream.maxAgeMs - (nowMs - readFromMs)) / 60_000)} min (the stream keeps messages ${Math.round(stream.maxAgeMs / 60_000)} min)`;
}

/** StreamNow.otherLimits of a stream's configuration. */
function otherLimitsOf(c: { max_msgs?: number; max_bytes?: number; max_msgs_per_subject?: number }): string | null {
  const set = (
    [
      ['max_msgs', c.max_msgs],
      ['max_bytes', c.max_bytes],
      ['max_msgs_per_subject', c.max_msgs_per_subject],
    ] as const
  ).filter(([, v]) => typeof v === 'number' && v > 0);
  return set.length === 0 ? null : set.map(([k, v]) => `${k}=${v}`).join(', ');
}

/** The telemetry stream's first message and age limit now (see StreamNow). */
async function streamNow(jsm: JetStreamManager, stream: string): Promise<StreamNow> {
  try {
    const info = await jsm.streams.info(stream);
    const s = info.state;
    return {
      firstSeq: Math.max(1, s.first_seq),
      firstMs: s.messages > 0 ? Date.parse(s.first_ts) : NaN,
      maxAgeMs: info.config.max_age / 1e6,
      otherLimits: otherLimitsOf(info.config),
    };
  } catch (err) {
    if (isNotFound(err)) return { firstSeq: 1, firstMs: NaN, maxAgeMs: 0 };
    throw err;
  }
}

/**
 * When the stream message a read again from `head`'s delivered checkpoint starts at was published, epoch ms (the
 * stream's first message's with no delivered checkpoint; -Infinity when that message is gone; NaN when fallbackReason
 * does not need it: no age limit, or nothing read past the checkpoint per `readTo`, which asks the server nothing).
 */
async function readFromMs(
  jsm: JetStreamManager,
  stream: string,
  head: PartitionHeadSummary | null,
  now: StreamNow,
  readTo: number | null,
): Promise<number> {
  if (head === null || !head.hasState || head.delivered === undefined || now.maxAgeMs === 0) return NaN;
  const from = (head.delivered?.streamSeq ?? 0) + 1;
  if (readTo !== null && readTo < from) return NaN;
  if (head.delivered === null) return now.firstMs;
  if (from < now.firstSeq) return -Infinity;
  try {
    const m = await jsm.streams.getMessage(stream, { seq: from });
    return m === null ? -Infinity : m.time.getTime();
  } catch (err) {
    if (isNotFound(err)) return -Infinity;
    throw err;
  }
}

/**
 * The stream sequence of the last message partition consumer `name` delivered to a router (0 when none; null when
 * the consumer does not exist, but the stream does).
 */
async function consumerReadTo(jsm: JetStreamManager, stream: string, name: string): Promise<number | null> {
  try {
    return (await jsm.consumers.info(stream, name)).delivered.stream_seq;
  } catch (err) {
    if (isNotFound(err)) return null;
    throw err;
  }
}
