/**
 * Partition leases in a JetStream key-value bucket (main thread): which router process consumes which partition of a
 * partitioned source, with no coordinator of its own.
 *
 * Keys, under `<scope>` = `<stream>.<consumerPrefix>` (routers of another prefix keep leases of their own):
 * - `<scope>.member.<name>`: a member's heartbeat (JSON: name, the partitions it holds, when written, and whether it
 *   reads pings from the stream alone: `streamOnly`).
 * - `<scope>.lease.p<N>`: the lease of partition N (JSON: owner, since when).
 *
 * The bucket's TTL is the lease time (`leaseMs`, set when the router creates the bucket; a bucket that exists keeps
 * its own and every member uses it): the server removes a key not written again within it. A member writes its
 * member key and renews each lease it holds every `leaseMs / 4`; a renewal is a compare-and-set over the revision the
 * member last wrote, so it fails once the key expired (a process paused or cut off for longer than the lease) or
 * another member created it since: the lease is lost, and the member must stop acting on the partition. Taking a
 * free partition is a create, which succeeds for one member only.
 *
 * Validity: the member counts a lease as holding until `leaseMs * VALID_FRACTION` after it *sent* the last renewal
 * that succeeded (measured on its monotonic clock). The server removes the key no sooner than `leaseMs` after it
 * stored that renewal, which came after the sending; so a member never counts on a lease another member may already
 * hold, unless the two clocks' rates differ by more than 1 - VALID_FRACTION over one lease.
 *
 * Balance: members sorted by name; with N members and P partitions, the first P mod N take ceil(P / N) partitions and
 * the others floor(P / N) (fairShare). A member above its share releases its highest partitions (after storing their
 * state); one below takes free partitions, lowest first.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';

/** Fraction of the lease time after a renewal's sending during which a member counts on its leases. */
export const VALID_FRACTION = 0.75;

/** Settings of the leases of one stream and consumer prefix. */
export interface PartitionLeasesOptions {
  /** Bucket name. */
  bucket: string;
  /** Key prefix of this stream and consumer prefix: `<stream>.<consumerPrefix>`. */
  scope: string;
  /** Partitions of the source. */
  partitionCount: number;
  /** This member's name (letters, digits, - and _). */
  member: string;
  /** Lease time of a bucket the router creates, ms. */
  leaseMs: number;
  /** Replicas of a bucket the router creates. */
  replicas: number;
  /** This member reads pings from the stream alone (no listener, no inputs), so its starts can replay exactly. */
  streamOnly: boolean;
}

/** What one renewal found. */
export interface Renewal {
  /** Leases that could not be renewed (expired, or another member's now), in increasing order. */
  lost: number[];
  /** Until when the leases still held count, ms on `monotonicMs`'s clock (0 when none is held). */
  validUntilMs: number;
}

/** Milliseconds on a clock that never steps back, comparable across the threads of a process. */
export function monotonicMs(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * The share of `partitionCount` partitions that member `me` should hold among `members` (names, any order; `me`
 * among them): members sorted by name, the first `partitionCount mod N` hold one more.
 */
export function fairShare(members: readonly string[], me: string, partitionCount: number): number {
  const sorted = [...new Set(members)].sort();
  const i = sorted.indexOf(me);
  if (i < 0) throw new RangeError(`member ${me} is not among ${sorted.join(', ')}`);
  const n = sorted.length;
  return Math.floor(partitionCount / n) + (i < partitionCount % n ? 1 : 0);
}

/** Makes `name` a key token: characters other than letters, digits, - and _ become _. */
export function memberToken(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** One member's view of the leases (see the module comment). */
export class PartitionLeases {
  /** Per held partition: the revision of its lease this member last wrote. */
  private readonly held = new Map<number, number>();
  /** Per held partition: until when it counts (monotonicMs), from the sending of its last write that succeeded. */
  private readonly valid = new Map<number, number>();

  private constructor(
    private readonly kv: KV,
    private readonly jsm: JetStreamManager,
    private readonly o: PartitionLeasesOptions,
    /** The lease time in force (the bucket's TTL), ms. */
    readonly leaseMs: number,
  ) {}

  /** Opens the bucket over `nc`, creating it (file storage, one value per key, TTL `leaseMs`) when missing. */
  static async open(nc: NatsConnection, o: PartitionLeasesOptions): Promise<PartitionLeases> {
    const kv = await new Kvm(nc).create(o.bucket, {
      history: 1,
      replicas: o.replicas,
      storage: StorageType.File,
      ttl: o.leaseMs,
      description: 'geofence router: partition leases (the TTL is the lease time)',
    });
    const status = await kv.status();
    const leaseMs = status.ttl > 0 ? status.ttl : o.leaseMs;
    return new PartitionLeases(kv, await jetstreamManager(nc), o, leaseMs);
  }

  /** This member's name as written in its keys. */
  get member(): string {
    return this.o.member;
  }

  /** The partitions this member holds, in increasing order. */
  owned(): number[] {
    return [...this.held.keys()].sort((a, b) => a - b);
  }

  /**
   * Writes the member key and renews every held lease. A lease that cannot be renewed, or whose renewal was answered
   * only after the validity it would give had passed, is lost: dropped from `owned()` and returned. A member key that cannot be written throws (the server is away: nothing is renewed, and
   * the leases stop counting when their validity passes).
   */
  async renew(): Promise<Renewal> {
    const sentMs = monotonicMs();
    const owned = this.owned();
    await this.kv.put(
      `${this.o.scope}.member.${this.o.member}`,
      JSON.stringify({ member: this.o.member, partitions: owned, atMs: Date.now(), streamOnly: this.o.streamOnly }),
    );
    const lost: number[] = [];
    for (const p of owned) {
      const revision = this.held.get(p);
      // Released meanwhile.
      if (revision === undefined) continue;
      try {
        const next = await this.kv.update(this.leaseKey(p), this.leaseValue(), revision);
        if (!this.held.has(p)) continue;
        if (sentMs + this.leaseMs * VALID_FRACTION <= monotonicMs()) {
          // The answer came back too late to count on (the process was paused while it was under way): another
          // member may hold the partition by now. Let the key expire.
          this.forget(p);
          lost.push(p);
          continue;
        }
        this.held.set(p, next);
        this.valid.set(p, sentMs + this.leaseMs * VALID_FRACTION);
      } catch (err) {
        if (!isConflict(err)) throw err;
        this.forget(p);
        lost.push(p);
      }
    }
    return { lost, validUntilMs: this.validUntilMs() };
  }

  /** Until when every held lease counts (monotonicMs; 0 when none is held). */
  validUntilMs(): number {
    let until = 0;
    for (const v of this.valid.values()) if (until === 0 || v < until) until = v;
    return until;
  }

  /** The members whose heartbeats have not expired, this one included, sorted. */
  async members(): Promise<string[]> {
    const prefix = `${this.o.scope}.member.`;
    const names = new Set<string>([this.o.member]);
    for (const k of await this.liveKeys(`${prefix}*`)) names.add(k.slice(prefix.length));
    return [...names].sort();
  }

  /**
   * The other live members whose heartbeat does not say they read pings from the stream alone (one written by an
   * earlier version says nothing of it, and counts), sorted: a start of theirs may be no exact replay.
   */
  async membersNotStreamOnly(): Promise<string[]> {
    const prefix = `${this.o.scope}.member.`;
    const out: string[] = [];
    for (const { key, entry } of await this.liveEntries(`${prefix}*`)) {
      const name = key.slice(prefix.length);
      if (name === this.o.member) continue;
      let streamOnly = false;
      try {
        streamOnly = entry.json<{ streamOnly?: unknown }>().streamOnly === true;
      } catch {
        // Not JSON: says nothing.
      }
      if (!streamOnly) out.push(name);
    }
    return out.sort();
  }

  /** Partitions no member holds a lease on, in increasing order. */
  async free(): Promise<number[]> {
    const prefix = `${this.o.scope}.lease.p`;
    const taken = new Set<number>();
    for (const k of await this.liveKeys(`${this.o.scope}.lease.*`)) taken.add(Number(k.slice(prefix.length)));
    const out: number[] = [];
    for (let p = 0; p < this.o.partitionCount; p++) if (!taken.has(p)) out.push(p);
    return out;
  }

  /**
   * The keys matching `filter` that hold a value: the subjects of the bucket's stream that hold a message (one
   * request, no consumer), each read to drop delete markers.
   */
  private async liveKeys(filter: string): Promise<string[]> {
    return (await this.liveEntries(filter)).map((e) => e.key);
  }

  /** As liveKeys, each with the value read. */
  private async liveEntries(filter: string): Promise<{ key: string; entry: KvEntry }[]> {
    const subjectPrefix = `$KV.${this.o.bucket}.`;
    const info = await this.jsm.streams.info(`KV_${this.o.bucket}`, {
      subjects_filter: `${subjectPrefix}${filter}`,
    });
    const out: { key: string; entry: KvEntry }[] = [];
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const key = subject.slice(subjectPrefix.length);
      const entry = await this.kv.get(key);
      if (entry !== null && entry.operation === 'PUT') out.push({ key, entry });
    }
    return out;
  }

  /** Tries to take partition `p`'s lease; false when another member holds it. */
  async take(p: number): Promise<boolean> {
    const sentMs = monotonicMs();
    try {
      const revision = await this.kv.create(this.leaseKey(p), this.leaseValue());
      // Created, but answered too late to count on (see renew): let it expire.
      if (sentMs + this.leaseMs * VALID_FRACTION <= monotonicMs()) return false;
      this.held.set(p, revision);
      this.valid.set(p, sentMs + this.leaseMs * VALID_FRACTION);
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /** Gives up partition `p`'s lease (after its state is stored); a lease lost meanwhile is simply forgotten. */
  async release(p: number): Promise<void> {
    const revision = this.held.get(p);
    if (revision === undefined) return;
    this.forget(p);
    await this.kv.delete(this.leaseKey(p), { previousSeq: revision }).catch((err: unknown) => {
      if (!isConflict(err)) throw err;
    });
  }

  /** Releases every lease and removes the member key (a clean stop, after the state is stored). */
  async leave(): Promise<void> {
    for (const p of this.owned()) await this.release(p);
    await this.kv.delete(`${this.o.scope}.member.${this.o.member}`).catch(() => undefined);
  }

  private forget(p: number): void {
    this.held.delete(p);
    this.valid.delete(p);
  }

  private leaseKey(p: number): string {
    return `${this.o.scope}.lease.p${p}`;
  }

  private leaseValue(): string {
    return JSON.stringify({ owner: this.o.member, atMs: Date.now() });
  }
}

/** True for a compare-and-set that failed (the key changed, expired, or exists). */
function isConflict(err: unknown): boolean {
  const m = (err as Error).message ?? '';
  return /wrong last sequence|key exists/i.test(m);
}
