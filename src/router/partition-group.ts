/**
 * A router process that is one member of a group consuming a JetStream telemetry stream: it takes partitions through
 * leases (src/durable/partition-leases.ts) instead of a fixed list, and runs a router on what it holds.
 *
 * Every `leaseMs / 4` the member renews its leases, then balances: above its fair share it releases its highest
 * partitions, below it takes free ones. A release whose router's close left triggers undelivered (a downstream slow
 * or down) goes ahead only when the next owner can read those partitions again exactly from their delivered
 * checkpoints (handOverReasons): it derives those triggers again, under the same seqs and in order, and this member's
 * next router passes its own copies over. Otherwise (no exact replay, or a partition would fall back to its newest
 * state) a copy left in this member's files would reach a shared receiver after the later seqs of the next owner, so
 * the member keeps the partitions and tries again later. A change of the held set restarts the router on the new set
 * (the previous one closed cleanly first, so each partition it gives up has its state stored before its lease is
 * released, and the next owner restores it): a pause of a second or two of this member's partitions, as a consumer
 * group's rebalance is.
 *
 * A lease lost (the process was paused or cut off past the lease time, and another member may hold the partition by
 * now) shuts the lease gate the router's threads read (no fetch, no delivery, no stored checkpoint from then on) and
 * the router is abandoned without delivering anything more; the partitions still held start again on a new router.
 * Its unacknowledged messages are read again by the partition's new owner, which derives their triggers under the
 * same seqs.
 */
import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectSourceServers, drainWithin } from '../ingest/sources/nats-connection.js';
import { resolveRouterOptions, type RouterOptions, type RouterOptionsInput } from '../config/options.js';
import { fairShare, memberToken, monotonicMs, PartitionLeases } from '../durable/partition-leases.js';
import {
  LEASE_GATE_F64,
  LEASE_LOST_F64,
  LEASE_PARTITIONS_RELEASED_F64,
  LEASE_PARTITIONS_TAKEN_F64,
  LEASE_ROUTERS_STARTED_F64,
  LEASE_VALID_UNTIL_MS_F64,
} from '../shm/layout.js';
import type { Router, RouterExtras, RouterSummary } from './api.js';
import { createRouter, openRouterLog } from './create-router.js';
import { handOverReasons, streamOnly } from './partition-checkpoints.js';
import { PipelineRouter } from './pipeline-router.js';
import { drainOutcome, formatSummary, type DrainOutcome } from './status.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { LogFn, RouterLog } from '../log/router-log.js';

/** A gate value in the past: shut. */
const GATE_SHUT = 1;
/** How long closing the connection may take, ms. */
const CLOSE_WITHIN_MS = 2000;
/** After a release held back (triggers undelivered, see the module comment), the next try waits this many periods. */
const RELEASE_RETRY_PERIODS = 8;

/** What a member has done so far. */
export interface PartitionGroupStats {
  /** Routers started (the first one included). */
  routersStarted: number;
  /** Partitions taken (a partition taken again after it was given up counts again). */
  partitionsTaken: number;
  /** Partitions released to other members (the balance). */
  partitionsReleased: number;
  /** Leases lost (renewal failed: expired or taken by another member). */
  leasesLost: number;
}

/**
 * A router of this member that ended before the last one and lost something for good (or a last one abandoned):
 * what its final stats said, so the member's outcome covers every router it ran, not only the last.
 */
export interface EarlierRouterOutcome {
  /** The router's number in this member (1 for the first). */
  router: number;
  /** How it ended: closed for a rebalance, or abandoned when a lease it read was lost. */
  ended: 'closed' | 'abandoned';
  /**
   * Its drain outcome, leaving out what it kept for the next router or owner (delivered or derived again there) and,
   * for an abandoned router, the pings it had not processed (their messages are read again by the next owner).
   */
  outcome: DrainOutcome;
  /** Its summary's last line (what it lost, by kind). */
  line: string;
}

/** One member of a group of router processes (see the module comment). */
export interface PartitionGroup {
  /** This member's name in the lease bucket. */
  readonly member: string;
  /** The lease time in force, ms. */
  readonly leaseMs: number;
  /** The partitions this member holds now, in increasing order. */
  owned(): number[];
  /** The router running now (null while the member holds no partition or is between routers). */
  current(): Router | null;
  /** What the member has done so far. */
  stats(): PartitionGroupStats;
  /** The routers before the last (and a last one abandoned) that did not end cleanly, in order. */
  earlierOutcomes(): EarlierRouterOutcome[];
  /** Rejects never; resolves with the error when a router's thread failed (the member should stop). */
  readonly failure: Promise<Error>;
  /** Reloads the fences file of the running router (the next routers read it at their start). */
  reloadFencesFile(): ReturnType<Router['reloadFencesFile']>;
  /**
   * Stops balancing, closes the running router (its partitions' state stored), releases every lease and leaves the
   * group; resolves with the last router's summary (null when none ran, or it was abandoned: see earlierOutcomes).
   */
  close(): Promise<RouterSummary | null>;
}

/**
 * Joins the group of `options.jetstreamSource` (partitions "auto") and keeps a router running on the partitions this
 * member holds. Throws on bad options or an unreachable server.
 */
export async function createPartitionGroup(options: RouterOptionsInput & RouterExtras): Promise<PartitionGroup> {
  const { fences: _f, log: _l, logger: _g, leaseGate: _lg, startFences: _sf, ...rest } = options;
  const resolved = resolveRouterOptions(rest);
  const js = resolved.jetstreamSource;
  if (js === null || js.partitions !== 'auto')
    throw new RangeError('options.jetstreamSource.partitions must be "auto" for a partition group');
  const nc = await connectSourceServers(js, 'leases');
  let leases: PartitionLeases;
  try {
    leases = await PartitionLeases.open(nc, {
      bucket: js.leaseBucket,
      scope: `${js.stream}.${js.consumerPrefix}`,
      partitionCount: js.partitionCount,
      member: memberToken(js.memberName ?? `${hostname()}-${process.pid}`),
      leaseMs: js.leaseMs,
      replicas: js.streamReplicas,
      streamOnly: streamOnly(resolved),
    });
    await leases.renew();
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw new Error(`options.jetstreamSource.leaseBucket ${js.leaseBucket}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return new Member(options, nc, leases, js.partitionCount, resolved);
}

/** The member's loop. */
class Member implements PartitionGroup {
  readonly member: string;
  readonly leaseMs: number;
  readonly failure: Promise<Error>;
  private failWith!: (err: Error) => void;
  private readonly gateBuffer = new SharedArrayBuffer(LEASE_GATE_F64 * 8);
  private readonly gate = new Float64Array(this.gateBuffer);
  private router: Router | null = null;
  /** The partitions the running router consumes. */
  private running: number[] = [];
  /** The summary of the router closed by this member's close (null: none). */
  private lastSummary: RouterSummary | null = null;
  private readonly earlier: EarlierRouterOutcome[] = [];
  /** The running router's number in this member. */
  private routerNumber = 0;
  /** The fences the last router closed with (null: the next router loads the fences file). */
  private fences: FenceStoreDescriptor | null = null;
  private readonly renewTimer: NodeJS.Timeout;
  private readonly balanceTimer: NodeJS.Timeout;
  /** Balancing, one step at a time. */
  private chain: Promise<void> = Promise.resolve();
  private closing = false;
  private renewing = false;
  private balancing = false;
  /** A lease was lost and the router reading it is not abandoned yet: the gate stays shut. */
  private fenced = false;
  /** Balance steps to skip before trying a release again (one was held back: triggers not delivered). */
  private releaseBackoff = 0;
  /**
   * Triggers the last router closed left undelivered in this member's files (its summary's `carriedOver`); NaN after a
   * router that failed to close or was abandoned (unknown). Only a clean close that kept nothing makes it 0 again.
   */
  private keptInFiles = 0;
  /** The drain deadline of the last balance's close, ms (0: none yet). */
  private closeDeadlineMs = 0;
  private readonly routerLog: RouterLog;
  private readonly say: LogFn;

  constructor(
    private readonly options: RouterOptionsInput & RouterExtras,
    private readonly nc: NatsConnection,
    private readonly leases: PartitionLeases,
    private readonly partitionCount: number,
    private readonly resolved: RouterOptions,
  ) {
    this.member = leases.member;
    this.leaseMs = leases.leaseMs;
    this.failure = new Promise((resolve) => (this.failWith = resolve));
    this.gate[LEASE_VALID_UNTIL_MS_F64] = GATE_SHUT;
    this.routerLog = openRouterLog(options.log, options.logger);
    this.say = this.routerLog.fn;
    this.say(`partition group: member ${this.member}, lease ${this.leaseMs} ms, ${partitionCount} partitions`);
    const periodMs = Math.max(100, Math.floor(this.leaseMs / 4));
    this.renewTimer = setInterval(() => this.renewTick(), periodMs);
    // The first balance waits one period, so members started together see each other before taking partitions.
    this.balanceTimer = setInterval(() => this.balanceTick(), periodMs);
  }

  owned(): number[] {
    return this.leases.owned();
  }

  current(): Router | null {
    return this.router;
  }

  stats(): PartitionGroupStats {
    const g = this.gate;
    return {
      routersStarted: g[LEASE_ROUTERS_STARTED_F64]!,
      partitionsTaken: g[LEASE_PARTITIONS_TAKEN_F64]!,
      partitionsReleased: g[LEASE_PARTITIONS_RELEASED_F64]!,
      leasesLost: g[LEASE_LOST_F64]!,
    };
  }

  earlierOutcomes(): EarlierRouterOutcome[] {
    return [...this.earlier];
  }

  /** Notes how a router before the last ended, when it lost something for good (see EarlierRouterOutcome). */
  private noteEnded(ended: EarlierRouterOutcome['ended'], s: RouterSummary): void {
    // What the state directory holds for the next router (kept triggers, those of downstreams no longer named) is the
    // next router's to report, not a loss of this one.
    const adjusted: RouterSummary = { ...s, carriedOver: 0, inFlight: 0, unconfiguredTriggers: 0 };
    if (ended === 'abandoned') {
      adjusted.processed = s.admittedTotal;
      adjusted.lost = 0;
    }
    const outcome = drainOutcome(adjusted);
    if (outcome === 'delivered') return;
    this.earlier.push({ router: this.routerNumber, ended, outcome, line: formatSummary(adjusted, 0).at(-1)! });
  }

  reloadFencesFile(): ReturnType<Router['reloadFencesFile']> {
    if (this.router === null) return Promise.reject(new Error('no router is running (no partition held)'));
    return this.router.reloadFencesFile();
  }

  close(): Promise<RouterSummary | null> {
    this.closing = true;
    clearInterval(this.balanceTimer);
    const done = this.chain.then(async () => {
      // Renewals go on while the router drains and stores its partitions' state (a router on a lost lease is
      // abandoned instead: it may deliver nothing more).
      await this.stopRouter();
      clearInterval(this.renewTimer);
      while (this.renewing) await new Promise((r) => setTimeout(r, 10));
      await this.leases.leave().catch((err: unknown) => {
        this.say(
          `partition group: leaving failed (the leases expire by themselves): ${(err as Error).message}`,
          'warn',
        );
      });
      await drainWithin(this.nc, CLOSE_WITHIN_MS);
      this.routerLog.close();
      return this.lastSummary;
    });
    this.chain = done.then(() => undefined);
    return done;
  }

  /** Renews the leases (on its own timer: a router starting or closing must not hold renewals up). */
  private renewTick(): void {
    if (this.renewing) return;
    this.renewing = true;
    this.leases
      .renew()
      .then(
        (renewal) => {
          if (renewal.lost.length > 0) {
            this.gate[LEASE_LOST_F64]! += renewal.lost.length;
            // Shut until the router that still reads them is abandoned (balanceTick).
            this.fenced = true;
            this.gate[LEASE_VALID_UNTIL_MS_F64] = GATE_SHUT;
            this.say(
              `partition group: lost the leases of partitions ${renewal.lost.join(',')} (expired while this process could not renew them, or taken by another member): the router is abandoned without delivering, acknowledging or storing anything more; the new owner reads those messages again`,
              'warn',
            );
          } else if (!this.fenced) {
            this.openGate();
          }
        },
        (err: unknown) => this.say(`partition group: renewing the leases failed: ${(err as Error).message}`, 'warn'),
      )
      .finally(() => (this.renewing = false));
  }

  /** Balances, one step at a time. */
  private balanceTick(): void {
    if (this.closing || this.balancing) return;
    this.balancing = true;
    this.chain = this.chain
      .then(() => this.balance())
      .catch((err: unknown) => {
        this.say(`partition group: ${(err as Error).message}`, 'warn');
      })
      .finally(() => (this.balancing = false));
  }

  private async balance(): Promise<void> {
    if (this.closing) return;
    if (this.fenced) await this.stopRouter();
    const members = await this.leases.members();
    const share = fairShare(members, this.member, this.partitionCount);
    const owned = this.leases.owned();
    if (owned.length > share) {
      const keep = owned.slice(0, share);
      const give = owned.slice(share);
      if (this.releaseBackoff > 0) {
        this.releaseBackoff--;
        return;
      }
      // Their state is stored by the clean close before the leases go.
      await this.stopRouter(true);
      // What this close left, or with no router running now, what the last one left.
      const kept = this.keptInFiles;
      if (kept !== 0) {
        const what = Number.isNaN(kept)
          ? 'a router that did not close cleanly may have left triggers undelivered'
          : `${kept} triggers kept undelivered by a close given ${this.closeDeadlineMs} ms to drain`;
        // Triggers held in this member's files move with their partitions only as triggers the next owner derives
        // again (see the module comment).
        const reasons = await this.leases
          .membersNotStreamOnly()
          .then((others) => handOverReasons(this.nc, this.resolved, give, others))
          .catch((err: unknown) => [
            `the partitions' stored state, the stream or the members could not be read: ${(err as Error).message}`,
          ]);
        if (reasons.length > 0) {
          this.holdRelease(
            give,
            `${what}, and that their next owner derives them again cannot be shown: ${reasons.join('; ')}`,
          );
          await this.startRouter(owned);
          return;
        }
        this.say(
          `partition group: ${what}; partitions ${give.join(',')} move all the same: their next owner derives their triggers again from the delivered checkpoints, and this member's copies are passed over`,
        );
      }
      for (const p of give) await this.leases.release(p);
      this.gate[LEASE_PARTITIONS_RELEASED_F64]! += give.length;
      this.say(`partition group: ${members.length} members, share ${share}: released partitions ${give.join(',')}`);
      await this.startRouter(keep);
      return;
    }
    this.releaseBackoff = 0;
    if (owned.length < share) {
      const taken: number[] = [];
      for (const p of await this.leases.free()) {
        if (owned.length + taken.length >= share) break;
        if (await this.leases.take(p)) taken.push(p);
      }
      if (taken.length > 0) {
        this.gate[LEASE_PARTITIONS_TAKEN_F64]! += taken.length;
        this.say(`partition group: ${members.length} members, share ${share}: took partitions ${taken.join(',')}`);
      }
    }
    const now = this.leases.owned();
    if (now.join(',') !== this.running.join(',') || (this.router === null && now.length > 0)) {
      await this.stopRouter(true);
      await this.startRouter(now);
    }
  }

  /** Holds a release back for RELEASE_RETRY_PERIODS balance steps, and says so. */
  private holdRelease(give: number[], why: string): void {
    this.releaseBackoff = RELEASE_RETRY_PERIODS;
    this.say(
      `partition group: partitions ${give.join(',')} are not released yet (${why}): a partition moves once every trigger of its devices is delivered or can be derived again by its next owner; trying again in ${RELEASE_RETRY_PERIODS} balance periods`,
      'warn',
    );
  }

  /** Moves the gate to the leases' validity (shut when none is held). */
  private openGate(): void {
    const until = this.leases.validUntilMs();
    this.gate[LEASE_VALID_UNTIL_MS_F64] = until === 0 ? GATE_SHUT : until;
  }

  private async startRouter(partitions: number[]): Promise<void> {
    this.running = [];
    if (partitions.length === 0 || this.closing) return;
    // Leases not known to hold now (their renewal is overdue): no router claims them; a later balance step does.
    if (this.fenced || this.leases.validUntilMs() <= monotonicMs()) return;
    this.openGate();
    const startedMs = monotonicMs();
    // The lease settings are the group's own: a router reads a fixed list of partitions.
    const { leaseMs: _ms, memberName: _name, leaseBucket: _bucket, ...js } = this.options.jetstreamSource!;
    const router = await createRouter({
      ...this.options,
      ...(this.options.downstreams === undefined
        ? {}
        : { downstreams: withMemberClientIds(this.options.downstreams, this.member) }),
      jetstreamSource: { ...js, partitions: partitions.join(',') },
      leaseGate: this.gateBuffer,
      ...(this.fences === null ? {} : { startFences: this.fences }),
    });
    this.router = router;
    this.running = partitions;
    this.gate[LEASE_ROUTERS_STARTED_F64]!++;
    this.routerNumber = this.gate[LEASE_ROUTERS_STARTED_F64]!;
    void router.failure.then((err) => this.failWith(err));
    this.say(
      `partition group: reading partitions ${partitions.join(',')} (router started in ${Math.round(monotonicMs() - startedMs)} ms)`,
    );
  }

  /**
   * Closes the running router cleanly (for a balance, its drain given at most one lease time: a downstream that is
   * down does not pause this member's partitions for long; what it keeps is delivered or derived again by the next
   * router, and a release checks it first, see the module comment); abandons it instead when a lease it reads was lost
   * meanwhile.
   */
  private async stopRouter(forBalance = false): Promise<void> {
    if (this.fenced) {
      await this.abandonRouter();
      this.fenced = false;
      this.openGate();
      return;
    }
    const router = this.router;
    this.router = null;
    this.running = [];
    if (router === null) return;
    // Until this close succeeds the next router reads the fences afresh (a failed close keeps no store).
    this.fences = null;
    if (forBalance && router instanceof PipelineRouter) this.closeDeadlineMs = router.limitDrainDeadline(this.leaseMs);
    this.keptInFiles = NaN;
    const summary = await router.close().catch((err: unknown) => {
      // Its drain did not finish: what it had not processed or delivered is read again by the next owner, but the
      // member's outcome says it failed.
      if (!this.closing)
        this.earlier.push({
          router: this.routerNumber,
          ended: 'closed',
          outcome: 'lost',
          line: `close failed: ${(err as Error).message}`,
        });
      throw err;
    });
    this.keptInFiles = summary.carriedOver;
    if (this.closing) this.lastSummary = summary;
    else this.noteEnded('closed', summary);
    this.keepFences(router);
  }

  /**
   * Keeps the fences `router` closed with for the next router (no file read, no journal applied again: a takeover
   * waits less); a router that failed to close leaves the next one to load them afresh.
   */
  private keepFences(router: Router): void {
    this.fences = router instanceof PipelineRouter ? router.fenceDescriptor() : null;
  }

  private async abandonRouter(): Promise<void> {
    const router = this.router;
    this.router = null;
    this.running = [];
    if (router !== null) {
      this.keptInFiles = NaN;
      const stats = router.stats();
      await router.abandon();
      this.noteEnded('abandoned', {
        ...stats,
        uptimeMs: 0,
        stateDir: null,
        checkpointIntervalMs: 0,
        lastCheckpointMs: 0,
        finalCheckpointFailed: false,
      });
    }
    // The next router reads the fences afresh (an abandoned one may have stopped inside an edit).
    this.fences = null;
  }
}

/**
 * `downstreams` with each MQTT downstream that names no client id given one of this member's: every member of a group
 * usually runs the same configuration, and two connections under one client id take the session from each other in
 * turn (the broker closes the older one), so neither delivers for long.
 */
export function withMemberClientIds(
  downstreams: NonNullable<RouterOptionsInput['downstreams']>,
  member: string,
): NonNullable<RouterOptionsInput['downstreams']> {
  return downstreams.map((d) => {
    if (d.kind !== 'mqtt' || d.clientId !== undefined) return d;
    const id = `geofence-router-${d.name}-${member}`.replace(/[^A-Za-z0-9_-]/g, '_');
    // Within the 64 characters a client id may have here, still one per member.
    const clientId =
      id.length <= 64 ? id : `geofence-router-${createHash('sha256').update(id).digest('hex').slice(0, 40)}`;
    return { ...d, clientId };
  });
}
