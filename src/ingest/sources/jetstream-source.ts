/**
 * A NATS JetStream stream as a telemetry source (ingest thread): one durable pull consumer per partition this router
 * owns, each read at the router's own pace.
 *
 * Subjects are `<subjectPrefix>.<partition>.<deviceId>` (see partitions.ts); a message holds one or more whole frames,
 * the same MessagePack bytes as over TCP. The log absorbs overload, so a partition's messages go through a pausable
 * feed: when the rings have no room the partition stops fetching and nothing is shed. A message older than
 * `maxBacklogAgeMs` when it is taken (the router has fallen that far behind) is fed as live traffic instead, so the
 * lane admission decides what of it to keep, and counted (SRC_AGED_MESSAGES_F64): a backlog that old is worth less
 * than the present, and COMPLIANCE still keeps its reserved slice.
 *
 * Acknowledgement (none while the lease gate is shut): a message is acknowledged once its pings are in a stored
 * checkpoint of the device state. Every
 * ACK_INTERVAL_MS each partition notes the last message whose bytes have all been fed, with the telemetry rings'
 * write positions then (a candidate); a candidate is processed once containment has released every ring past those
 * positions (its stream sequence is then published in SRC_PROCESSED_STREAM_SEQ_F64), and covered once a checkpoint
 * whose capture began after that has been stored (the main thread publishes the capture time of each checkpoint in
 * the region's checkpoint cell once it is on disk and, with a state bucket, once every owned partition's state is in
 * JetStream). The consumer then acknowledges it cumulatively (AckPolicy.All). So a crash loses no ping: what no
 * checkpoint covers is delivered again, and a ping delivered again whose event time is older than its device's last
 * (its effect already in the restored state) is recognised by containment and produces nothing.
 *
 * A start on a partition with a stored checkpoint (src/router/partition-checkpoints.ts) reads from the message after
 * the one it covers (SRC_START_STREAM_SEQ_F64). A stop waits for containment to process what was fed, so the stop's
 * final checkpoint covers every message taken. A stored partition checkpoint waits for the dispatcher to hand on the
 * triggers of the pings it covers (see PipelineRouter.checkpointNow), so a crash loses none of them either.
 *
 * Deliveries lost on the way: a fetch that fails part way (heartbeats missed while this thread was busy, a connection
 * lost) leaves the messages the server had already sent it with the consumer as delivered, and the next fetch goes on
 * after them; acknowledging a later message (AckPolicy.All) would acknowledge them too, and their pings would be read
 * by no one. The consumer's delivery sequence counts every delivery, so a message whose delivery sequence skips is
 * not taken: the partition waits until everything it took is acknowledged, makes its consumer again from the message
 * after the last one it took, and reads on from there (PartitionReader.rewind, counted in SRC_REWINDS_F64). A
 * delivery sequence below the next one is met the same way: the consumer was made again behind this reader's back (by
 * a router paused past the partition's lease that has not noticed yet), from a position this reader cannot vouch for.
 *
 * Per partition, the SRC_* cells (shared, read by the metrics collectors) count messages, bytes, redeliveries, aged
 * messages and rewinds, and keep the consumer lag (messages not yet delivered, and the age of the last message taken)
 * and the stream sequence last acknowledged.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type Consumer,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import type { IngestEdge, IngestStream } from '../ingest-edge.js';
import type { PausableFeed } from '../backpressure.js';
import {
  SRC_ACKED_STREAM_SEQ_F64,
  SRC_AGED_MESSAGES_F64,
  SRC_BYTES_F64,
  SRC_LAG_AGE_MS_F64,
  SRC_LAG_MESSAGES_F64,
  SRC_MESSAGES_F64,
  SRC_OWNED_F64,
  SRC_PROCESSED_STREAM_SEQ_F64,
  SRC_REDELIVERED_F64,
  SRC_REWINDS_F64,
  SRC_START_STREAM_SEQ_F64,
  SRC_STRIDE_F64,
  sourceCheckpointCell,
  LEASE_GATE_F64,
  leaseGateOpen,
} from '../../shm/layout.js';
import type { SpscRing } from '../../shm/ring.js';
import { parsePartitionList } from './partitions.js';
import type { TelemetrySource } from './source.js';
import { drainWithin } from './nats-connection.js';

/** How often each partition acknowledges what it has fed, ms (also after every fetch). */
const ACK_INTERVAL_MS = 250;
/** How long one fetch waits for messages on an empty partition, ms (also bounds how long a stop waits for it). */
const FETCH_EXPIRES_MS = 1000;
/** How often a partition looks at a shut lease gate again before fetching, ms. */
const GATE_POLL_MS = 50;
/** Pause before fetching again after a fetch failed (server away, consumer being created), ms. */
const FETCH_RETRY_MS = 500;
/** How long a stop waits for containment to process what the partition fed, ms. */
const STOP_SETTLE_MS = 5000;
/** How long the connection's drain may take at a stop before it is closed, ms. */
const CLOSE_WITHIN_MS = 2000;

/** Environment variable of the source's drill hook (see `parseSourceDrill`). */
const SOURCE_DRILL_ENV = 'GEOFENCE_SOURCE_FAULT_INJECT';

/** The source drill's setting: in `partition`, the first fetch that reaches `afterMessages` messages. */
interface SourceDrill {
  partition: number;
  afterMessages: number;
}

/**
 * DRILL HOOK, off by default. `GEOFENCE_SOURCE_FAULT_INJECT=drop-deliveries:<partition>:<n>` (n >= 1) makes the
 * first fetch of that partition that reaches its n-th message stop there, as a fetch that fails part way does: what
 * the server sent that fetch after it was delivered, and this router never sees it (a real loss on the way, for the
 * rewind's test, when the fetch held more). Read when the first partition reader starts (so only a router with a
 * JetStream source reads it), and fires once per ingest thread (a router of a partition group starts a new one at
 * each balance). Null when the variable is absent or empty; throws on anything else.
 */
function parseSourceDrill(value: string | undefined): SourceDrill | null {
  if (value === undefined || value === '') return null;
  const m = /^drop-deliveries:(\d+):([1-9]\d*)$/.exec(value);
  if (m === null)
    throw new Error(
      `${SOURCE_DRILL_ENV} must be drop-deliveries:<partition>:<messages, at least 1>, got ${JSON.stringify(value)}`,
    );
  return { partition: Number(m[1]), afterMessages: Number(m[2]) };
}

/** The source drill (undefined: not read yet). */
let sourceDrill: SourceDrill | null | undefined;

/** Options of a JetStream telemetry source (options.jetstreamSource). */
export interface JetStreamSourceOptions {
  /** NATS servers, nats://host:port. */
  servers: readonly string[];
  /** Stream holding the telemetry. */
  stream: string;
  /** Subject prefix: pings are published to `<subjectPrefix>.<partition>.<deviceId>`. */
  subjectPrefix: string;
  /** Partitions the stream's subjects are split into. */
  partitionCount: number;
  /**
   * Partitions this router consumes: "all", numbers and ranges ("0-7,12"), or "auto": taken through leases with the
   * other routers of the stream and consumer prefix (createPartitionGroup; see src/durable/partition-leases.ts).
   */
  partitions: string;
  /** Durable consumer names are `<consumerPrefix>-p<partition>`. */
  consumerPrefix: string;
  /** Create the stream when it does not exist. */
  createStream: boolean;
  /** Replicas of a stream the router creates. */
  streamReplicas: number;
  /** How long a stream the router creates keeps a message, ms (0: no age limit). */
  streamMaxAgeMs: number;
  /** Duplicate window of a stream the router creates, ms (a ping re-published within it with the same Nats-Msg-Id is stored once). */
  duplicateWindowMs: number;
  /** Messages one fetch asks for. */
  fetchMessages: number;
  /** How long the server waits for an acknowledgement before delivering a message again, ms. */
  ackWaitMs: number;
  /** Messages older than this when taken are fed as live traffic (lane shedding applies), ms (0: never). */
  maxBacklogAgeMs: number;
  /** Key-value bucket of the partitions' device state (null: none; see src/durable/partition-state-bucket.ts). */
  stateBucket: string | null;
  /** Key-value bucket of the partition leases (partitions "auto"). */
  leaseBucket: string;
  /** Lease time of a lease bucket the router creates, ms (a bucket that exists keeps its own). */
  leaseMs: number;
  /** This router's name among the members of a group (null: `<hostname>-<pid>`). */
  memberName: string | null;
  /** Token of a server that requires one. */
  token: string | null;
}

/** Defaults of the JetStream source options other than the servers. */
export const JETSTREAM_SOURCE_DEFAULTS = {
  stream: 'GEOFENCE_TELEMETRY',
  subjectPrefix: 'telemetry',
  partitionCount: 16,
  partitions: 'all',
  consumerPrefix: 'geofence-router',
  createStream: true,
  streamReplicas: 1,
  streamMaxAgeMs: 24 * 3600 * 1000,
  duplicateWindowMs: 120_000,
  fetchMessages: 256,
  ackWaitMs: 30_000,
  maxBacklogAgeMs: 0,
  stateBucket: 'GEOFENCE_PARTITION_STATE',
  leaseBucket: 'GEOFENCE_PARTITION_LEASES',
  leaseMs: 10_000,
} as const;

/** The subject filter of a partition's consumer: `<subjectPrefix>.<partition>.>`. */
function partitionFilter(o: JetStreamSourceOptions, partition: number): string {
  return `${o.subjectPrefix}.${partition}.>`;
}

/** The durable consumer name of a partition. */
export function partitionConsumerName(consumerPrefix: string, partition: number): string {
  return `${consumerPrefix}-p${partition}`;
}

/** What the source logs (the ingest thread's log lines). */
export type SourceLog = (level: 'info' | 'warn' | 'error', line: string) => void;

/** A fed message waiting to be acknowledged: the rings' write positions once it was fed, and when it was processed. */
interface AckCandidate {
  msg: JsMsg;
  /** Per shard, the producer's write position (published and claimed) after the message was fed. */
  writeSeqs: Int32Array;
  /** When containment was first seen past every position, epoch ms (0: not yet). */
  processedAtMs: number;
}

/** A message handed to a partition's feed and not yet entirely fed. */
interface FeedingMessage {
  /** Feed bytes written up to and including this message's. */
  endBytes: number;
  msg: JsMsg;
}

/** One owned partition: its consumer, its feed, and what it has acknowledged. */
class PartitionReader {
  private readonly feed: PausableFeed;
  private readonly aged: IngestStream;
  private readonly feeding: FeedingMessage[] = [];
  private writtenBytes = 0;
  private fedBytes = 0;
  /** The last message every byte of which (and of every message before it) has been fed. */
  private lastFed: JsMsg | null = null;
  private lastNoted: JsMsg | null = null;
  private readonly candidates: AckCandidate[] = [];
  private resumeWaiter: (() => void) | null = null;
  private stopping = false;
  /** Stream sequence of the last message taken (at the start, the last one the consumer had delivered; 0: none). */
  private lastTakenSeq = 0;
  /** Stream sequence of the first message this reader took (0: none yet). */
  private firstTakenSeq = 0;
  /**
   * The consumer delivery sequence the next message should have (0: not known: the consumer's info could not be read
   * at the start). A consumer made afresh starts at 1.
   */
  private nextDelivery = 0;
  private current: { stop(): void } | null = null;
  private readonly cells: Float64Array;
  private readonly base: number;
  private readonly ackTimer: NodeJS.Timeout;
  /**
   * Resolves when the read loop has ended and everything read has been fed (what a checkpoint covers by then is
   * acknowledged; the rest is read again by the next start).
   */
  readonly done: Promise<void>;

  constructor(
    readonly partition: number,
    private consumer: Consumer,
    /** Makes the partition's consumer again, reading from stream sequence `startSeq` (see `rewind`). */
    private readonly remake: (startSeq: number) => Promise<Consumer>,
    edge: IngestEdge,
    private readonly o: JetStreamSourceOptions,
    cells: Float64Array,
    private readonly rings: readonly SpscRing[],
    private readonly log: SourceLog,
    private readonly gate: Float64Array,
  ) {
    this.cells = cells;
    this.base = partition * SRC_STRIDE_F64;
    const name = `jetstream ${o.stream} partition ${partition}`;
    // A ping of a device another partition holds is rejected (wrong_partition): another router may track it.
    const check = { partition, partitionCount: o.partitionCount };
    this.feed = edge.openFeed(
      name,
      {
        onFed: (bytes) => this.fed(bytes),
        onResume: () => {
          const w = this.resumeWaiter;
          this.resumeWaiter = null;
          w?.();
        },
      },
      null,
      check,
    );
    this.aged = edge.openStream(`${name} (past maxBacklogAgeMs)`, null, check);
    if (sourceDrill === undefined) sourceDrill = parseSourceDrill(process.env[SOURCE_DRILL_ENV]);
    cells[this.base + SRC_OWNED_F64] = 1;
    this.ackTimer = setInterval(() => this.ack(), ACK_INTERVAL_MS);
    this.ackTimer.unref();
    this.done = this.run();
  }

  /** Stops fetching; `done` resolves once what was fetched is fed. */
  stop(): void {
    this.stopping = true;
    this.current?.stop();
    const w = this.resumeWaiter;
    this.resumeWaiter = null;
    w?.();
  }

  private async run(): Promise<void> {
    try {
      // A consumer kept from an earlier run has delivered before: its next delivery follows its last one, and a
      // rewind before anything is taken here reads again from the message after the last one it delivered.
      const delivered = (await this.consumer.info(true)).delivered;
      this.nextDelivery = delivered.consumer_seq + 1;
      this.lastTakenSeq = delivered.stream_seq;
    } catch {
      // Not known: the first message taken sets it.
    }
    while (!this.stopping) {
      if (this.feed.keptBytes > 0) {
        await new Promise<void>((resolve) => {
          this.resumeWaiter = resolve;
          if (this.feed.keptBytes === 0) resolve();
        });
        this.ack();
        continue;
      }
      if (!leaseGateOpen(this.gate)) {
        // Leases not known to hold: take nothing (another router may own the partition by now).
        await new Promise((r) => setTimeout(r, GATE_POLL_MS));
        continue;
      }
      let lost = false;
      try {
        const messages = await this.consumer.fetch({ max_messages: this.o.fetchMessages, expires: FETCH_EXPIRES_MS });
        this.current = messages;
        let taken = 0;
        for await (const m of messages) {
          if (this.lostBefore(m)) {
            lost = true;
            break;
          }
          if (this.takenAlready(m)) continue;
          this.take(m);
          if (sourceDrill?.partition === this.partition && ++taken === sourceDrill.afterMessages) {
            sourceDrill = null;
            break;
          }
        }
      } catch (err) {
        if (this.stopping) break;
        this.log('warn', `jetstream source: partition ${this.partition}: fetch failed: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, FETCH_RETRY_MS));
      } finally {
        this.current?.stop();
        this.current = null;
      }
      this.ack();
      if (lost) await this.rewind();
    }
    await this.feed.end();
    // What was fed is processed before the stop's final checkpoint, which then covers it.
    const until = Date.now() + STOP_SETTLE_MS;
    this.ack();
    while (this.candidates.some((c) => c.processedAtMs === 0) && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
      this.ack();
    }
    clearInterval(this.ackTimer);
    this.cells[this.base + SRC_OWNED_F64] = 0;
  }

  /**
   * True when the consumer's deliveries do not follow the ones this reader took (`m`'s delivery sequence is not the
   * next one): above it, deliveries were lost on the way (the server sent them to a fetch that failed part way);
   * below it, the consumer was made again behind this reader's back (by a router that lost the partition's lease and
   * has not noticed yet, or by hand) from a position this reader cannot vouch for. Either way the reader goes on from
   * the message after the last one it took (rewind). Otherwise notes `m`'s delivery sequence.
   */
  private lostBefore(m: JsMsg): boolean {
    const d = m.info.deliverySequence;
    if (this.nextDelivery > 0 && d !== this.nextDelivery) return true;
    this.nextDelivery = d + 1;
    return false;
  }

  /**
   * After deliveries were lost on the way (see the module comment): waits until every message taken is acknowledged
   * (the consumer's acknowledgement floor is then the last one taken, so a start without partition state reads on from
   * there and loses nothing), then makes the consumer again from the message after the last one taken.
   */
  private async rewind(): Promise<void> {
    const from = this.lastTakenSeq + 1;
    this.log(
      'warn',
      `jetstream source: partition ${this.partition}: the consumer's deliveries do not follow the ones taken (lost on the way by a fetch that failed part way, or the consumer made again elsewhere): reading again from stream sequence ${from} once what was taken is acknowledged`,
    );
    while (!this.stopping) {
      this.ack();
      if (this.feeding.length === 0 && this.candidates.length === 0) break;
      await new Promise((r) => setTimeout(r, ACK_INTERVAL_MS));
    }
    while (!this.stopping) {
      if (!leaseGateOpen(this.gate)) {
        await new Promise((r) => setTimeout(r, GATE_POLL_MS));
        continue;
      }
      try {
        this.consumer = await this.remake(from);
        this.nextDelivery = 1;
        this.cells[this.base + SRC_REWINDS_F64]!++;
        return;
      } catch (err) {
        this.log(
          'warn',
          `jetstream source: partition ${this.partition}: making the consumer again failed: ${(err as Error).message}`,
        );
        await new Promise((r) => setTimeout(r, FETCH_RETRY_MS));
      }
    }
  }

  /**
   * True for a message delivered again that this run took already (its acknowledgement waited past `ackWaitMs` for a
   * checkpoint): counted as redelivered, not fed again. Its pings were fed, and the acknowledgement of a later message
   * covers it (AckPolicy.All). A message delivered again that this reader did not take (a previous run's, or one the
   * consumer delivered before this reader began) is fed.
   */
  private takenAlready(m: JsMsg): boolean {
    const seq = m.info.streamSequence;
    // Only what this reader took: a message the consumer delivered before it began (another router's fetch, its lease
    // lapsed) comes again to be fed here.
    if (!m.redelivered || this.firstTakenSeq === 0 || seq < this.firstTakenSeq || seq > this.lastTakenSeq) return false;
    this.cells[this.base + SRC_REDELIVERED_F64]!++;
    return true;
  }

  private take(m: JsMsg): void {
    const c = this.cells;
    const b = this.base;
    this.lastTakenSeq = m.info.streamSequence;
    if (this.firstTakenSeq === 0) this.firstTakenSeq = this.lastTakenSeq;
    c[b + SRC_MESSAGES_F64]!++;
    c[b + SRC_BYTES_F64]! += m.data.length;
    if (m.redelivered) c[b + SRC_REDELIVERED_F64]!++;
    c[b + SRC_LAG_MESSAGES_F64] = m.info.pending;
    const ageMs = Math.max(0, Date.now() - m.info.timestampNanos / 1e6);
    c[b + SRC_LAG_AGE_MS_F64] = ageMs;
    if (this.o.maxBacklogAgeMs > 0 && ageMs > this.o.maxBacklogAgeMs && this.feeding.length === 0) {
      // Everything before it is fed, so feeding it live keeps the partition's order.
      this.aged.write(m.data);
      this.aged.end();
      c[b + SRC_AGED_MESSAGES_F64]!++;
      this.lastFed = m;
      return;
    }
    this.writtenBytes += m.data.length;
    this.feeding.push({ endBytes: this.writtenBytes, msg: m });
    this.feed.write(m.data, true);
    this.advance();
  }

  private fed(bytes: number): void {
    this.fedBytes += bytes;
    this.advance();
  }

  /** Moves lastFed over every message whose bytes have all been fed. */
  private advance(): void {
    const q = this.feeding;
    let n = 0;
    while (n < q.length && q[n]!.endBytes <= this.fedBytes) n++;
    if (n === 0) return;
    this.lastFed = q[n - 1]!.msg;
    q.splice(0, n);
  }

  /** Notes the last fed message as a candidate, and acknowledges the newest candidate a checkpoint covers. */
  private ack(): void {
    const m = this.lastFed;
    if (m !== null && m !== this.lastNoted) {
      this.lastNoted = m;
      const writeSeqs = new Int32Array(this.rings.length);
      for (let s = 0; s < this.rings.length; s++) {
        const r = this.rings[s]!;
        writeSeqs[s] = (r.writeSeq() + r.pendingCount()) | 0;
      }
      this.candidates.push({ msg: m, writeSeqs, processedAtMs: 0 });
    }
    const q = this.candidates;
    const now = Date.now();
    for (const c of q) {
      if (c.processedAtMs !== 0) continue;
      let done = true;
      for (let s = 0; s < this.rings.length && done; s++)
        done = ((this.rings[s]!.readSeq() - c.writeSeqs[s]!) | 0) >= 0;
      if (!done) break;
      c.processedAtMs = now;
      this.cells[this.base + SRC_PROCESSED_STREAM_SEQ_F64] = c.msg.info.streamSequence;
    }
    // Leases not known to hold: acknowledge nothing. The consumer may be another router's by now, made again from an
    // older checkpoint, and an acknowledgement is routed by the consumer's name: it would acknowledge there messages
    // that router has not processed.
    if (!leaseGateOpen(this.gate)) return;
    const checkpointMs = this.cells[sourceCheckpointCell(this.o.partitionCount)]!;
    let n = 0;
    // Strictly before: both times are whole ms, and a message seen processed in the very ms the capture began may have
    // been processed after its state was copied.
    while (n < q.length && q[n]!.processedAtMs !== 0 && q[n]!.processedAtMs < checkpointMs) n++;
    if (n === 0) return;
    const covered = q[n - 1]!.msg;
    q.splice(0, n);
    try {
      covered.ack();
      this.cells[this.base + SRC_ACKED_STREAM_SEQ_F64] = covered.info.streamSequence;
    } catch (err) {
      this.log('warn', `jetstream source: partition ${this.partition}: ack failed: ${(err as Error).message}`);
    }
  }
}

/** A JetStream stream read through one durable pull consumer per owned partition. */
export class JetStreamSource implements TelemetrySource {
  readonly name: string;
  /** The partitions this router consumes, in increasing order. */
  readonly partitions: readonly number[];
  private nc: NatsConnection | null = null;
  private readers: PartitionReader[] = [];
  /** The owned partitions' consumers, in the order of `partitions` (set by `prepare`). */
  private consumers: Consumer[] = [];
  private prepared: Promise<void> | null = null;

  /**
   * `cells` is the source partition region (SRC_* blocks, one per partition of the stream, then the checkpoint
   * cell); `rings` the telemetry rings on their producer side (this thread's).
   */
  constructor(
    private readonly o: JetStreamSourceOptions,
    private readonly cells: Float64Array,
    private readonly rings: readonly SpscRing[],
    private readonly log: SourceLog,
    /** The router's lease gate (LEASE_GATE_F64 cells): while it is shut no partition fetches. */
    private readonly gate: Float64Array = new Float64Array(LEASE_GATE_F64),
  ) {
    this.partitions = parsePartitionList(o.partitions, o.partitionCount, 'options.jetstreamSource.partitions');
    this.name = `jetstream ${o.stream} (${this.partitions.length} of ${o.partitionCount} partitions)`;
  }

  /**
   * Connects and creates the stream and the consumers when missing (the consumers of every owned partition at once);
   * nothing is fetched until `start`. Runs beside the ingest thread's warm-up. Throws an Error naming the servers and
   * the stream (the connection closed).
   */
  prepare(): Promise<void> {
    this.prepared ??= this.connectAndCreate();
    return this.prepared;
  }

  /** Starts reading every owned partition (prepared first when `prepare` was not called). */
  async start(edge: IngestEdge): Promise<void> {
    await this.prepare();
    const o = this.o;
    for (let i = 0; i < this.partitions.length; i++) {
      const p = this.partitions[i]!;
      this.readers.push(
        new PartitionReader(
          p,
          this.consumers[i]!,
          (startSeq) => this.remakeConsumer(p, startSeq),
          edge,
          o,
          this.cells,
          this.rings,
          this.log,
          this.gate,
        ),
      );
    }
    this.log('info', `jetstream source: reading partitions ${this.partitions.join(',')} of stream ${o.stream}`);
  }

  private async connectAndCreate(): Promise<void> {
    const o = this.o;
    try {
      const nc = await connect({
        servers: [...o.servers],
        name: `geofence-router source ${o.consumerPrefix}`,
        maxReconnectAttempts: -1,
        ...(o.token === null ? {} : { token: o.token }),
      });
      this.nc = nc;
      const jsm = await jetstreamManager(nc);
      await this.ensureStream(jsm);
      const js = jetstream(nc);
      // One round trip or two per partition, all partitions at once: a takeover of several waits for the slowest.
      // Every partition settles before a failure closes the connection: none is left between a consumer's delete and
      // its re-creation by another partition's error.
      const made = await Promise.allSettled(
        this.partitions.map(async (p) => {
          const name = partitionConsumerName(o.consumerPrefix, p);
          await this.ensureConsumer(jsm, name, partitionFilter(o, p), p);
          return js.consumers.get(o.stream, name);
        }),
      );
      const failed = made.find((r) => r.status === 'rejected');
      if (failed !== undefined) throw (failed as PromiseRejectedResult).reason;
      this.consumers = made.map((r) => (r as PromiseFulfilledResult<Consumer>).value);
    } catch (err) {
      await this.stop();
      throw new Error(`jetstream source ${o.servers.join(',')} stream ${o.stream}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /** Stops fetching, feeds what was fetched, acknowledges what a checkpoint covers, and closes the connection. */
  async stop(): Promise<void> {
    for (const r of this.readers) r.stop();
    await Promise.all(this.readers.map((r) => r.done));
    this.readers = [];
    const nc = this.nc;
    this.nc = null;
    if (nc === null) return;
    await drainWithin(nc, CLOSE_WITHIN_MS);
  }

  private async ensureStream(jsm: JetStreamManager): Promise<void> {
    const o = this.o;
    try {
      const info = await jsm.streams.info(o.stream);
      const wanted = `${o.subjectPrefix}.>`;
      const subjects = info.config.subjects ?? [];
      if (!subjects.some((s) => s === wanted || s === '>' || s === `${o.subjectPrefix}.*.>`)) {
        throw new Error(
          `the stream's subjects ${JSON.stringify(subjects)} do not take ${wanted}; set options.jetstreamSource.subjectPrefix to the stream's`,
        );
      }
      return;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (!o.createStream) throw new Error(`stream ${o.stream} does not exist and createStream is false`);
    await jsm.streams.add({
      name: o.stream,
      subjects: [`${o.subjectPrefix}.>`],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      num_replicas: o.streamReplicas,
      duplicate_window: o.duplicateWindowMs * 1_000_000,
      max_age: o.streamMaxAgeMs * 1_000_000,
    });
    this.log('info', `jetstream source: created stream ${o.stream} (subjects ${o.subjectPrefix}.>)`);
  }

  /**
   * Makes the partition's durable consumer, or takes over the one a previous run left. With a start cell set by the
   * main thread (a restored checkpoint of the partition; with exact replay and none, 1: the stream's first message)
   * the consumer reads from that sequence (the stream's first message when retention removed it). Otherwise messages a previous run had taken and not acknowledged (a crash, or what no
   * checkpoint covered at a clean stop) would come back only after `ackWaitMs`; the consumer is made again from the
   * first unacknowledged message instead, so they are read at once.
   */
  private async ensureConsumer(jsm: JetStreamManager, name: string, filter: string, partition: number): Promise<void> {
    const o = this.o;
    const fromCheckpoint = this.cells[partition * SRC_STRIDE_F64 + SRC_START_STREAM_SEQ_F64]!;
    let startSeq = fromCheckpoint;
    try {
      const info = await jsm.consumers.info(o.stream, name);
      if (info.config.filter_subject !== filter) {
        throw new Error(
          `consumer ${name} exists with filter ${String(info.config.filter_subject)}, not ${filter} (another partition count or prefix?)`,
        );
      }
      if (info.num_ack_pending === 0 && (fromCheckpoint === 0 || info.ack_floor.stream_seq === fromCheckpoint - 1))
        return;
      if (fromCheckpoint === 0) startSeq = info.ack_floor.stream_seq + 1;
      await jsm.consumers.delete(o.stream, name);
      this.log(
        'info',
        fromCheckpoint === 0
          ? `jetstream source: consumer ${name} had ${info.num_ack_pending} messages taken and not acknowledged: reading again from stream sequence ${startSeq}`
          : startSeq === 1
            ? `jetstream source: consumer ${name} reads from the stream's first message: the partition has no delivered checkpoint (it had acknowledged up to ${info.ack_floor.stream_seq})`
            : `jetstream source: consumer ${name} reads from stream sequence ${startSeq}, after what the partition's restored checkpoint covers (it had acknowledged up to ${info.ack_floor.stream_seq})`,
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    await jsm.consumers.add(o.stream, this.consumerConfig(name, filter, startSeq));
  }

  /** A partition consumer's settings, reading from stream sequence `startSeq` (0: from the stream's first message). */
  private consumerConfig(name: string, filter: string, startSeq: number) {
    return {
      durable_name: name,
      filter_subject: filter,
      ack_policy: AckPolicy.All,
      ...(startSeq === 0
        ? { deliver_policy: DeliverPolicy.All }
        : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: startSeq }),
      ack_wait: this.o.ackWaitMs * 1_000_000,
      // Messages wait for a checkpoint before their acknowledgement: the router's pace is set by its fetches.
      max_ack_pending: -1,
    };
  }

  /**
   * Makes partition `partition`'s consumer again (deleted, then added) reading from stream sequence `startSeq`, and
   * returns it (PartitionReader.rewind).
   */
  private async remakeConsumer(partition: number, startSeq: number): Promise<Consumer> {
    const nc = this.nc;
    if (nc === null) throw new Error('the connection is closed');
    const o = this.o;
    const name = partitionConsumerName(o.consumerPrefix, partition);
    const jsm = await jetstreamManager(nc);
    // Another router may own the partition once its leases lapse: never touch its consumer then.
    const held = (): void => {
      if (!leaseGateOpen(this.gate)) throw new Error('the partition leases are not known to hold');
    };
    held();
    try {
      await jsm.consumers.delete(o.stream, name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    held();
    await jsm.consumers.add(o.stream, this.consumerConfig(name, partitionFilter(o, partition), startSeq));
    this.log('info', `jetstream source: consumer ${name} made again, reading from stream sequence ${startSeq}`);
    return jetstream(nc).consumers.get(o.stream, name);
  }
}

/** True for JetStream's "stream not found" and "consumer not found" answers. */
export function isNotFound(err: unknown): boolean {
  const e = err as { code?: unknown; api_error?: { code?: number }; message?: string };
  if (e.api_error?.code === 404) return true;
  return typeof e.message === 'string' && /not found/i.test(e.message);
}
