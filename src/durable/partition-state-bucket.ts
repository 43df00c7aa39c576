/**
 * Partition checkpoints kept in a JetStream key-value bucket (main thread): per partition of a partitioned source,
 * the device state of the partition's devices paired with the stream sequence it covers, so that whichever router
 * reads the partition next (this one after a restart, or another on another host) restores the state and re-reads the
 * stream from the message after it.
 *
 * Keys of the bucket, per partition N of a stream read by the routers of one consumer prefix (`<scope>` is
 * `<stream>.<consumerPrefix>`: routers reading the same stream under another prefix keep state of their own):
 * - `<scope>.p<N>`: the head, a JSON object: format, partition, partitionCount, streamSeq (the newest message the state
 *   covers; every earlier one too), capturedMs, writer (the router that wrote it), epoch, bytes, chunks; and
 *   `delivered`: the same fields (streamSeq, capturedMs, epoch, bytes, chunks) of the newest checkpoint written while
 *   every trigger of the pings it covers had been delivered (null when there is none; the head's own when it is one).
 *   The head's checkpoint is what the partition's acknowledgements follow; the delivered one is what a router
 *   restores when every ping comes from the stream (exact replay): reading again from it derives every trigger that
 *   may not have reached a receiver, in its device's order, whoever held it undelivered.
 * - `<scope>.p<N>.e<epoch>.c<k>`: the checkpoint (src/durable/checkpoint.ts format, checksummed) in chunks of CHUNK_BYTES, so
 *   a partition of any size fits under the server's largest message. A write stores the chunks of a new epoch, then
 *   the head naming them, then purges the previous epoch's chunks: a reader sees either the old head and its chunks or
 *   the new ones. The delivered checkpoint's chunks stay until a later delivered one replaces it.
 *
 * A head is written only over the revision its writer last saw (created when there was none): a second router writing
 * the same partition fails instead of overwriting the first one's state, and the failure names the partition. Each
 * write's epoch is new and random, so a writer that loses that race never overwrites the winner's chunks. A router
 * that takes a leased partition claims it first (`claim`: the head written again, naming it, over the revision it
 * read, or an empty head when there was none), so a previous owner that resumes after its lease expired fails its
 * next write even if it had read the same revision.
 */
import { randomBytes } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import { StorageType } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { decodeCheckpoint, type Checkpoint } from './checkpoint.js';

/** Bytes of one chunk of a partition checkpoint (below the 1 MiB default largest message of a NATS server). */
const CHUNK_BYTES = 256 * 1024;
/** Format of the head. */
const HEAD_FORMAT = 1;

/** A partition checkpoint read back from the bucket. */
export interface StoredPartitionCheckpoint {
  /** The partition. */
  partition: number;
  /** Newest stream sequence the state covers (every message up to it). */
  streamSeq: number;
  /** When the writer's capture began, epoch ms. */
  capturedMs: number;
  /** The writer's name. */
  writer: string;
  /** The device state. */
  checkpoint: Checkpoint;
}

/** Which of a partition's checkpoints to read: the head's (newest) or the newest delivered one. */
export type PartitionCheckpointKind = 'newest' | 'delivered';

/** What a partition's head names (see PartitionStateBucket.headOf). */
export interface PartitionHeadSummary {
  /** Stream sequence the newest checkpoint covers (0 for an empty head). */
  streamSeq: number;
  /** Whether the newest checkpoint holds state (false for an empty head, written by a claim). */
  hasState: boolean;
  /** The delivered checkpoint: null when none was stored, undefined when unknown (a head of an earlier version). */
  delivered: { streamSeq: number; capturedMs: number } | null | undefined;
}

/** Where a head's delivered checkpoint is. */
interface DeliveredPart {
  streamSeq: number;
  capturedMs: number;
  epoch: string | number;
  bytes: number;
  chunks: number;
}

/** The head of a partition checkpoint (JSON). */
interface Head {
  format: number;
  partition: number;
  partitionCount: number;
  streamSeq: number;
  capturedMs: number;
  writer: string;
  /** The chunks' epoch (random hex; a number in heads of earlier versions). */
  epoch: string | number;
  /** Bytes of the checkpoint (0 with 0 chunks: an empty head, written by a claim of a partition with no state). */
  bytes: number;
  chunks: number;
  /** The newest checkpoint written with every trigger it covers delivered (absent in heads of earlier versions). */
  delivered?: DeliveredPart | null | undefined;
}

/** Settings of a bucket the router creates. */
export interface PartitionStateBucketOptions {
  /** Bucket name. */
  bucket: string;
  /** Key prefix of this stream and consumer prefix: `<stream>.<consumerPrefix>`. */
  scope: string;
  /** Replicas of a bucket the router creates. */
  replicas: number;
  /** Partitions of the source (a head written for another count is refused). */
  partitionCount: number;
  /** This router's name, written into every head. */
  writer: string;
}

/** The bucket of partition checkpoints (see the module comment). */
export class PartitionStateBucket {
  /** Per partition: the head revision this router last read or wrote (0: none existed). */
  private readonly revisions = new Map<number, number>();
  /** Per partition: the epoch and chunk count of the head this router last read or wrote. */
  private readonly heads = new Map<number, { epoch: string | number; chunks: number; head: Head }>();

  private constructor(
    private readonly kv: KV,
    private readonly o: PartitionStateBucketOptions,
  ) {}

  /** Opens the bucket over `nc`, creating it (file storage, one value per key) when missing. */
  static async open(nc: NatsConnection, o: PartitionStateBucketOptions): Promise<PartitionStateBucket> {
    const kv = await new Kvm(nc).create(o.bucket, {
      history: 1,
      replicas: o.replicas,
      storage: StorageType.File,
      description: 'geofence router: device state per telemetry partition',
    });
    return new PartitionStateBucket(kv, o);
  }

  /**
   * Reads partition `partition`'s checkpoint of `kind` (null when none was written) and remembers the head's revision
   * for the next write. Throws an Error naming the partition when the head or its chunks are unreadable.
   */
  async read(partition: number, kind: PartitionCheckpointKind = 'newest'): Promise<StoredPartitionCheckpoint | null> {
    await this.readHead(partition);
    return this.readChunks(partition, kind);
  }

  /**
   * Reads partition `partition`'s head alone (see headOf; null when none was written) and remembers its revision for
   * the next write. Throws an Error naming the partition when it is unreadable.
   */
  async readHead(partition: number): Promise<PartitionHeadSummary | null> {
    const key = `${this.o.scope}.p${partition}`;
    const e = await this.kv.get(key);
    if (e === null || e.operation !== 'PUT') {
      this.revisions.set(partition, e?.revision ?? 0);
      this.heads.delete(partition);
      return null;
    }
    const where = `bucket ${this.o.bucket} key ${key}`;
    let head: Head;
    try {
      head = e.json<Head>();
    } catch (err) {
      throw new Error(`${where}: not a partition checkpoint head (${(err as Error).message})`, { cause: err });
    }
    if (head.format !== HEAD_FORMAT || head.partition !== partition) {
      throw new Error(
        `${where}: head format ${head.format} for partition ${head.partition}, not ${HEAD_FORMAT} / ${partition}`,
      );
    }
    if (head.partitionCount !== this.o.partitionCount) {
      throw new Error(
        `${where}: written for ${head.partitionCount} partitions, not ${this.o.partitionCount} (the partition count of a stream cannot change under its checkpoints)`,
      );
    }
    this.revisions.set(partition, e.revision);
    this.heads.set(partition, { epoch: head.epoch, chunks: head.chunks, head });
    return this.headOf(partition);
  }

  /**
   * Reads the checkpoint of `kind` that partition `partition`'s head, as last read by readHead, names (null when
   * none, or when readHead did not read one). Throws an Error naming the partition when its chunks are missing or not a checkpoint.
   */
  async readChunks(partition: number, kind: PartitionCheckpointKind): Promise<StoredPartitionCheckpoint | null> {
    const head = this.heads.get(partition)?.head ?? null;
    if (head === null) return null;
    const where = `bucket ${this.o.bucket} key ${this.o.scope}.p${partition}`;
    const part: DeliveredPart | null = kind === 'newest' ? head : (head.delivered ?? null);
    // An empty head (claimed, no state stored yet), or no delivered checkpoint yet.
    if (part === null || part.chunks === 0) return null;
    const bytes = new Uint8Array(part.bytes);
    let at = 0;
    for (let k = 0; k < part.chunks; k++) {
      const c = await this.kv.get(chunkKey(this.o.scope, partition, part.epoch, k));
      if (c === null || c.operation !== 'PUT')
        throw new Error(`${where}: chunk ${k} of epoch ${part.epoch} is missing`);
      if (at + c.value.length > bytes.length)
        throw new Error(`${where}: chunks longer than the ${part.bytes} bytes named`);
      bytes.set(c.value, at);
      at += c.value.length;
    }
    if (at !== bytes.length) throw new Error(`${where}: chunks hold ${at} bytes, the head names ${part.bytes}`);
    const checkpoint = decodeCheckpoint(bytes, kind === 'newest' ? where : `${where} (delivered checkpoint)`);
    return { partition, streamSeq: part.streamSeq, capturedMs: part.capturedMs, writer: head.writer, checkpoint };
  }

  /**
   * What the partition's head, as last read or written by this router, names (null when there was none): its newest
   * checkpoint's stream sequence and whether it holds state, and its delivered checkpoint: null when none was stored,
   * undefined when the head comes from an earlier version that did not keep one (unknown).
   */
  headOf(partition: number): PartitionHeadSummary | null {
    const h = this.heads.get(partition)?.head ?? null;
    if (h === null) return null;
    const d = h.delivered;
    return {
      streamSeq: h.streamSeq,
      hasState: h.chunks > 0,
      delivered: d === undefined ? undefined : d === null ? null : { streamSeq: d.streamSeq, capturedMs: d.capturedMs },
    };
  }

  /**
   * Stores `bytes` (an encoded checkpoint of the partition's devices) as covering stream sequence `streamSeq`, and as
   * the delivered checkpoint too when `delivered` (every trigger of the pings it covers was delivered; otherwise the
   * head keeps naming the previous delivered one). Throws when another writer changed the head since this router last
   * read or wrote it (the partition is consumed twice).
   */
  async write(
    partition: number,
    streamSeq: number,
    capturedMs: number,
    bytes: Uint8Array,
    delivered: boolean,
  ): Promise<void> {
    const previous = this.heads.get(partition) ?? null;
    const epoch = randomBytes(6).toString('hex');
    const chunks = Math.max(1, Math.ceil(bytes.length / CHUNK_BYTES));
    for (let k = 0; k < chunks; k++)
      await this.kv.put(
        chunkKey(this.o.scope, partition, epoch, k),
        bytes.subarray(k * CHUNK_BYTES, (k + 1) * CHUNK_BYTES),
      );
    const head: Head = {
      format: HEAD_FORMAT,
      partition,
      partitionCount: this.o.partitionCount,
      streamSeq,
      capturedMs,
      writer: this.o.writer,
      epoch,
      bytes: bytes.length,
      chunks,
      // A head of an earlier version (no delivered field) keeps naming none until a delivered store: which of its
      // checkpoints had every trigger delivered is unknown (see headOf).
      delivered: delivered
        ? { streamSeq, capturedMs, epoch, bytes: bytes.length, chunks }
        : previous === null
          ? null
          : previous.head.delivered,
    };
    try {
      await this.writeHead(partition, head);
    } catch (err) {
      // Refused: this write's chunks are named by no head.
      for (let k = 0; k < chunks; k++)
        await this.kv.purge(chunkKey(this.o.scope, partition, epoch, k)).catch(() => undefined);
      throw err;
    }
    this.heads.set(partition, { epoch, chunks, head });
    if (previous === null) return;
    // The previous head's chunks, and its delivered checkpoint's, that the new head no longer names (a purge that
    // fails leaves a few unnamed bytes behind).
    const named = new Set([String(epoch), String(head.delivered?.epoch ?? '')]);
    const before: { epoch: string | number; chunks: number }[] = [previous];
    const d = previous.head.delivered ?? null;
    if (d !== null && String(d.epoch) !== String(previous.epoch)) before.push(d);
    for (const b of before) {
      if (named.has(String(b.epoch))) continue;
      for (let k = 0; k < b.chunks; k++)
        await this.kv.purge(chunkKey(this.o.scope, partition, b.epoch, k)).catch(() => undefined);
    }
  }

  /**
   * Writes the partition's head again, unchanged but for its writer (this router), over the revision last read; an
   * empty head when none existed. Throws like `write` when another router wrote it since.
   */
  async claim(partition: number): Promise<void> {
    const known = this.heads.get(partition)?.head ?? null;
    const head: Head =
      known === null
        ? {
            format: HEAD_FORMAT,
            partition,
            partitionCount: this.o.partitionCount,
            streamSeq: 0,
            capturedMs: 0,
            writer: this.o.writer,
            epoch: randomBytes(6).toString('hex'),
            bytes: 0,
            chunks: 0,
            delivered: null,
          }
        : { ...known, writer: this.o.writer };
    await this.writeHead(partition, head);
    this.heads.set(partition, { epoch: head.epoch, chunks: head.chunks, head });
  }

  /** Writes `head` over the revision last read or written (creates it when none), and notes the new revision. */
  private async writeHead(partition: number, head: Head): Promise<void> {
    const key = `${this.o.scope}.p${partition}`;
    const revision = this.revisions.get(partition) ?? 0;
    let next: number;
    try {
      next =
        revision === 0
          ? await this.kv.create(key, JSON.stringify(head))
          : await this.kv.update(key, JSON.stringify(head), revision);
    } catch (err) {
      const m = (err as Error).message;
      if (/wrong last sequence|key exists/i.test(m)) {
        throw new Error(
          `partition ${partition}: its checkpoint in bucket ${this.o.bucket} was written by another router since this one read it (revision ${revision}): the partition is consumed twice`,
          { cause: err },
        );
      }
      throw err;
    }
    this.revisions.set(partition, next);
  }
}

function chunkKey(scope: string, partition: number, epoch: string | number, k: number): string {
  return `${scope}.p${partition}.e${epoch}.c${k}`;
}
