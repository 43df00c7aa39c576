/**
 * The router's durable device state (main thread): restoring it at start, checkpointing it while running and at a
 * clean stop, and the progress mark that tells a restart how much an unclean stop lost.
 *
 * Start (`StateKeeper.restore`, before any thread runs): read the newest readable checkpoint; register its devices in
 * the id table (slots 0, 1, ...) followed by every device the downstreams' durable files still name; write their
 * state into shared memory by fence id against the fences now in force (an entry on a fence that is gone is dropped,
 * and a device that was inside it gets an EXIT, written once the dispatcher runs: `writeRestoreExits`); set every
 * device's seq from the seq floor (see src/durable/checkpoint.ts); then write a checkpoint at once, so the new floor is
 * durable before the first trigger.
 *
 * Running: every `checkpointIntervalMs` containment is paused (the batches in flight finish), the device state is
 * copied (a few milliseconds at 100,000 devices), containment resumes, and the copy is encoded (in slices of a few
 * milliseconds, the event loop running between them: this thread also hands triggers to in-process callbacks) and
 * written off the event loop (temporary file, fsync, rename). A crash therefore loses at most the device state of the
 * last interval: after it, devices may repeat an ENTER or DWELL of that interval (with new seqs), never reuse a seq.
 */
import * as fs from 'node:fs';
import type { RouterOptions } from '../config/options.js';
import { scanBacklog } from '../durable/backlog-log.js';
import {
  DeviceStateCopy,
  encodeCheckpointSliced,
  readLatestCheckpoint,
  SEQ_EPOCH,
  writeCheckpointFile,
  type Checkpoint,
} from '../durable/checkpoint.js';
import { scanDeadLetters } from '../durable/dead-letter-file.js';
import {
  checksumWords,
  PROG_CHECKPOINT_NUMBER_F64,
  PROG_CHECKSUM_W,
  PROG_MAGIC_W,
  PROG_PINGS_PROCESSED_F64,
  PROG_RUN_START_MS_F64,
  PROG_TRIGGERS_F64,
  PROG_TRIGGERS_IN_MEMORY_F64,
  PROG_WALL_MS_F64,
  PROGRESS_BYTES,
  PROGRESS_MAGIC,
  TREC_RUN_ID_W,
} from '../durable/file-layout.js';
import { readFully, safeFileName, writeFully } from '../durable/fs-util.js';
import { scanPendingFile } from '../durable/pending-file.js';
import { scanSetAsideFiles } from '../durable/set-aside-files.js';
import { findUnconfiguredDownstreams, type UnconfiguredDownstream } from '../durable/unconfigured-downstreams.js';
import type { StoredPartitionCheckpoint } from '../durable/partition-state-bucket.js';
import { partitionOf, partitionOfTokenBytes } from '../ingest/sources/partitions.js';
import type { StateDirectory } from '../durable/state-dir.js';
import { readTriggerIdentity, RecordBuffer } from '../durable/trigger-codec.js';
import { DeviceState, publishComplianceCount } from '../fences/device-state.js';
import { sameTags } from '../fences/reload.js';
import type { FenceStore } from '../fences/store.js';
import {
  REC_ADMIT_TIME_NS,
  REC_CELLS,
  REC_EVENT_TIME_MS,
  REC_INSIDE_MS,
  REC_LAT,
  REC_LON,
  REC_SEQ,
  writeTrigger,
} from '../fences/trigger-writer.js';
import {
  DeviceIdReader,
  freedSeqHighOf,
  partitionsOfSlots,
  preregisterDevices,
  seqFloorsOf,
} from '../ingest/device-registry.js';
import { nowNs } from '../shm/clock.js';
import {
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_HAS_LAST_I32,
  DEV_UNTRACKED_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_LAST_LAT_F64,
  DEV_LAST_LON_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  DEVID_MAX_ID_BYTES,
  ENTRY_FENCE_I32,
  ENTRY_PENDING_MS_F64,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  FENCE_FLAG_COMPLIANCE,
  FENCE_FLAGS_I32,
  FENCE_STRIDE_I32,
  Lane,
  PST_CHECKPOINT_BYTES_F64,
  PST_CHECKPOINT_DEVICES_F64,
  PST_CHECKPOINT_FAILURES_F64,
  PST_CHECKPOINTS_DEFERRED_F64,
  PST_CHECKPOINT_LAST_NS_F64,
  PST_CHECKPOINT_PAUSE_NS_F64,
  PST_CHECKPOINTS_F64,
  PST_CHECKPOINTS_PAUSED_F64,
  TriggerType,
  TRG_LANE_EXPIRED,
  CNT_EXPIRY_EXITS_F64,
  CNT_FENCE_OVERFLOW_F64,
} from '../shm/layout.js';
import type { SpscRing } from '../shm/ring.js';
import type { NamesOnlyGeneration } from './dispatch-wiring.js';
import type { PipelineMemory } from './memory.js';

/** Generation number of the fences a checkpoint names that the fences file no longer has. */
const RESTORED_NAMES_GENERATION = 0;
/** How often the progress mark is rewritten, ms. */
export const PROGRESS_INTERVAL_MS = 200;
/** File name of the progress mark. */
const PROGRESS_FILE = 'progress';
/**
 * How long a checkpoint may spend copying the device state while containment runs before it pauses containment, ms
 * (the copy of a device normally settles in microseconds; see DeviceStateCopy.captureLive).
 */
const LIVE_CAPTURE_BUDGET_MS = 200;

/** The partition checkpoints a start with a partitioned source read from JetStream. */
export interface PartitionStateAtStart {
  /** Partitions of the source. */
  partitionCount: number;
  /** The partitions this router consumes. */
  owned: readonly number[];
  /** The stored checkpoints of the partitions this router consumes (those that have one; with exact replay each
   * partition's newest delivered one). */
  stored: readonly StoredPartitionCheckpoint[];
  /**
   * Every ping comes from the partitioned source: after an unclean stop the seq floor stays, since each partition is
   * read again from what its state covers and reproduces its triggers with their seqs; and the state directory's own
   * checkpoint gives no device (the stored partition checkpoints are the whole state).
   */
  exactReplay: boolean;
  /**
   * Every ping comes from the partitioned source (exact replay was wanted; `exactReplay` is false only for a gap, see
   * `raiseSeqFloor`): the local checkpoint's devices of partitions this router does not read are not kept (their
   * readers issue their seqs), and copies of their triggers in this router's files are passed over.
   */
  streamOnly: boolean;
  /**
   * With exact replay: the owned partitions restored from their newest checkpoint instead, and why (their delivered
   * checkpoint is unknown, the head coming from an earlier version, or older than the stream's first message, so
   * reading again from it would skip what retention removed). Their devices continue from that state and copies of
   * their triggers in this router's files up to each device's restored seq are delivered from the files (see
   * StateKeeper.replayFloors).
   */
  fallback: readonly { partition: number; reason: string }[];
  /**
   * The stream no longer holds messages after a partition's newest stored state that a router had read: no one reads
   * those pings again, so this start is not an exact replay (`exactReplay` false) and every device's seq
   * continues above a floor raised by 2^32, as after an unclean stop: no (deviceId, seq) issued before is reused.
   */
  raiseSeqFloor: boolean;
  /** The owned partitions whose stored state the stream no longer follows, and why (see `raiseSeqFloor`). */
  gapped: readonly { partition: number; reason: string }[];
}

/** What a start found in the state directory and did about it. */
export interface RecoveryReport {
  /** The state directory. */
  stateDir: string;
  /** How the previous run ended: 'none' (a new directory), 'clean', or 'unclean' (killed, crashed, power lost). */
  previousStop: 'none' | 'clean' | 'unclean';
  /** Pid of the previous run when it stopped uncleanly (null when unknown). */
  previousPid: number | null;
  /** The checkpoint restored (null: none). */
  checkpoint: {
    number: number;
    capturedMs: number;
    devices: number;
    /** Devices of the state directory's own checkpoint (with exact replay none of them is restored). */
    localDevices: number;
    byteLength: number;
  } | null;
  /** Devices restored from it. */
  restoredDevices: number;
  /** Further devices registered because the downstreams' durable files name them. */
  devicesFromDurableTriggers: number;
  /**
   * EXIT triggers for fences that are gone from the fences file while a device was inside, or whose tags changed (its
   * stay under the old tags ends; the next ping inside begins one under the new tags).
   */
  removedFenceExits: number;
  /**
   * EXIT triggers for stays this router cannot hold (a device inside more fences than its maxFencesPerDevice, or than
   * the overflow pool had room for): each ends its stay, and the fence is untracked for the device from then on.
   */
  untrackedExits: number;
  /**
   * Restored devices whose expiry was decided but not processed when their state was copied (CheckpointDevice.expiring):
   * their stays ended at the restore, as that expiry would have ended them.
   */
  expiringDevices: number;
  /** EXITs (marked expired) those devices get, written with the removed-fence ones by writeRestoreExits. */
  expiryExits: number;
  /** Floor of the seqs this run issues. */
  seqFloor: number;
  /** After an unclean stop, what it lost (from the last progress mark; null when there is none). */
  lost: {
    /** Time between the checkpoint's capture and the last progress mark, ms (at most about the checkpoint interval). */
    stateWindowMs: number;
    /** Pings the previous run processed after the checkpoint (their device state is lost). */
    pingsAfterCheckpoint: number;
    /** Triggers it produced after the checkpoint. */
    triggersAfterCheckpoint: number;
    /** Triggers its dispatcher held in memory at the mark that no durable file held. */
    triggersInMemory: number;
  } | null;
  /** With a partitioned source keeping its state in JetStream: what its stored checkpoints gave (null: none kept). */
  partitions: {
    /** Partitions restored from a stored checkpoint. */
    restored: number;
    /** Devices they held. */
    devices: number;
    /** See PartitionStateAtStart.exactReplay. */
    exactReplay: boolean;
    /** Partitions that fell back to their newest checkpoint (PartitionStateAtStart.fallback). */
    fallback: number;
  } | null;
  /** Files passed over and why. */
  problems: string[];
  /**
   * Directories of downstreams the options no longer name that still hold undelivered triggers (nothing delivers
   * them while so; see src/durable/unconfigured-downstreams.ts).
   */
  unconfiguredDownstreams: UnconfiguredDownstream[];
}

/** Counts the progress mark reads from the running router. */
export interface ProgressCounts {
  /** Pings processed by containment. */
  pingsProcessed: number;
  /** Triggers produced. */
  triggers: number;
  /** Triggers the dispatcher holds in memory that no durable file holds. */
  triggersInMemory: number;
}

/** One EXIT to write once the dispatcher runs: for a removed fence, or ending a stay of a device copied expiring. */
interface RestoreExit {
  slot: number;
  /** Index into the checkpoint's fences (named by NamesOnlyGeneration). */
  fence: number;
  compliance: boolean;
  /** Marked expired (`"reason":"expired"`), as the expiry it stands for would have marked it. */
  expired: boolean;
  /** For a stay this router cannot hold (untrackedExits): the fence's index in the store in force; else -1. */
  untrackedFence: number;
  seq: number;
  eventTimeMs: number;
  lat: number;
  lon: number;
  insideMs: number;
}

/** The router's durable device state (see the module comment). */
export class StateKeeper {
  /** What the start found. */
  readonly report: RecoveryReport;
  /** Fences named only by the restored checkpoint (their removed-fence EXITs name them), or null. */
  readonly namesOnly: NamesOnlyGeneration | null;
  private readonly dir: StateDirectory;
  private readonly memory: PipelineMemory;
  private readonly state: DeviceState;
  private readonly ids: DeviceIdReader;
  private readonly stats: Float64Array;
  private readonly copy: DeviceStateCopy;
  private readonly exits: RestoreExit[];
  private seqFloor: number;
  private number: number;
  private readonly runStartMs = Date.now();
  private progressFd = -1;
  private readonly progressBuf = new RecordBuffer(PROGRESS_BYTES);
  /** Wall time of the last checkpoint written, epoch ms. */
  lastCheckpointMs = 0;

  /**
   * Per partition encoded by the last `encodePartitions`: the devices its copy holds flagged expiring
   * (DeviceStateCopy.expiring). Their expiry was on its way and a ping may still revive them first, so that partition's
   * copy is not one a start with exact replay may read again from (PartitionCheckpoints.store).
   */
  readonly expiringByPartition = new Map<number, number>();
  /**
   * With exact replay: per device slot registered at start, -Infinity for a device of any partition read again from
   * its delivered checkpoint (every earlier run's trigger of it in this router's files is passed over by the
   * dispatcher, see DispatcherOptions.replayFloors), the restored seq for one of a partition that fell back to its
   * newest (PartitionStateAtStart.fallback: copies above it are passed over), NaN for an id no subject can carry.
   * A partition's reader restores its newest delivered checkpoint, so it derives again every trigger a router held
   * undelivered when it stopped, in its device's order; a copy in these files is either one of those or was
   * delivered since by that partition's reader. Null without exact replay.
   */
  replayFloors: Float64Array | null = null;

  private constructor(
    dir: StateDirectory,
    memory: PipelineMemory,
    report: RecoveryReport,
    namesOnly: NamesOnlyGeneration | null,
    exits: RestoreExit[],
    numberFloor: number,
  ) {
    this.dir = dir;
    this.memory = memory;
    this.state = DeviceState.open(memory.deviceState);
    this.ids = new DeviceIdReader(memory.idTable);
    this.stats = new Float64Array(memory.stats);
    this.copy = new DeviceStateCopy(memory.deviceState.maxDevices);
    this.report = report;
    this.namesOnly = namesOnly;
    this.exits = exits;
    this.seqFloor = report.seqFloor;
    // The highest checkpoint number or record run id found: the next checkpoint (and run id) is numbered above it.
    this.number = numberFloor;
  }

  /**
   * Restores what `dir` holds into freshly allocated `memory` (no thread may run yet) against the fences of `store`;
   * see the module comment. Throws a RangeError when the directory names more devices than `options.maxDevices`.
   */
  static restore(
    dir: StateDirectory,
    memory: PipelineMemory,
    store: FenceStore,
    options: RouterOptions,
    partitionState: PartitionStateAtStart | null = null,
  ): StateKeeper {
    const problems: string[] = [];
    const local = readLatestCheckpoint(dir.dir, problems);
    if (local === null && problems.length > 0 && partitionState === null) {
      // Without the state, seqs cannot be shown to continue: refuse rather than risk reusing (deviceId, seq).
      throw new Error(
        `state directory ${dir.dir}: no readable checkpoint (${problems.join('; ')}); restore one from a backup, or move the directory aside to start afresh`,
      );
    }
    const previousStop = dir.previousStop === 'clean' && local !== null && !local.clean ? 'unclean' : dir.previousStop;
    const cp = partitionState === null ? local : withPartitionCheckpoints(local, partitionState);
    let floor = cp?.seqFloor ?? 0;
    // Re-read from the position its state covers, a partition reproduces the triggers issued since with their seqs.
    const raise =
      (previousStop === 'unclean' && partitionState?.exactReplay !== true) || partitionState?.raiseSeqFloor === true;
    if (raise) {
      let highest = floor;
      for (const d of cp?.devices ?? []) if (d.seq > highest) highest = d.seq;
      floor = highest + SEQ_EPOCH;
    }
    // Devices: the checkpoint's first, then those only the downstreams' durable files name.
    const ids: (string | number)[] = (cp?.devices ?? []).map((d) => d.id);
    const known = new Set<string | number>(ids);
    // The highest run id in the durable records: this run's (its first checkpoint's number) must be above it, or a
    // record of an earlier run would be read through that run's slots and fence handles as if it were this run's
    // (after a damaged newest checkpoint, the start falls back to an older one and its numbers would repeat).
    let highestRunId = cp?.number ?? 0;
    const noteRunId = (buf: RecordBuffer, at: number): void => {
      const runId = buf.i32[(at >> 2) + TREC_RUN_ID_W]!;
      if (runId > highestRunId) highestRunId = runId;
    };
    for (const d of options.downstreams) {
      const ddir = `${dir.downstreamsDir}/${safeFileName(d.name)}`;
      if (!fs.existsSync(ddir)) continue;
      const note = (buf: RecordBuffer, at: number): void => {
        noteRunId(buf, at);
        const id = readTriggerIdentity(buf, at).deviceId;
        if (known.has(id)) return;
        known.add(id);
        ids.push(id);
      };
      try {
        scanPendingFile(ddir, d.name, note);
        scanDeadLetters(ddir, d.name, note);
        scanBacklog(ddir, d.name, note);
        scanSetAsideFiles(ddir, d.name, note);
      } catch (err) {
        throw new Error(`state directory ${dir.dir}, downstream ${d.name}: ${(err as Error).message}`, { cause: err });
      }
    }
    preregisterDevices(memory.idTable, ids);
    const state = DeviceState.open(memory.deviceState);
    const floors = seqFloorsOf(memory.idTable);
    floors.fill(floor);
    if (partitionState?.exactReplay === true && !raise && floors.length === partitionState.partitionCount) {
      // Exact replay: a device first seen after its partition's delivered checkpoint starts at that checkpoint's
      // floor, as it did for the router that read the partition before, whatever devices of other partitions this
      // router or that one freed meanwhile; so its triggers come again under the same seqs. A partition with no
      // stored state (read from the stream's first message) keeps this directory's own floor (0 when new); one that
      // fell back to its newest state (no exact replay for it) the whole floor, as the files' copies expect
      // (replayFloorsOf).
      const fellBack = new Set(partitionState.fallback.map((f) => f.partition));
      for (const p of partitionState.owned) floors[p] = local?.seqFloor ?? 0;
      for (const s of partitionState.stored)
        floors[s.partition] = fellBack.has(s.partition) ? floor : s.checkpoint.seqFloor;
    }
    // Every slot starts at its partition's floor; restored devices below overwrite theirs after a clean stop.
    for (let slot = 0; slot < state.maxDevices; slot++)
      state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = floor;
    const slotPartitions = partitionsOfSlots(memory.idTable, ids.length);
    for (let slot = 0; slot < ids.length; slot++)
      state.devF64[slot * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = floors[slotPartitions[slot]!]!;
    const { exits, namesOnly, expiringDevices, expiryExits, untrackedExits } =
      cp === null
        ? { exits: [], namesOnly: null, expiringDevices: 0, expiryExits: 0, untrackedExits: 0 }
        : // Exact replay: each device continues from its own seq (the stream is read again from what its state covers).
          restoreDevices(cp, state, store, raise ? floor : -Infinity, options.deviceExpiry === 'exit');
    const report: RecoveryReport = {
      stateDir: dir.dir,
      previousStop,
      previousPid: dir.previousPid,
      checkpoint:
        cp === null
          ? null
          : {
              number: cp.number,
              capturedMs: cp.capturedMs,
              devices: cp.devices.length,
              localDevices: local?.devices.length ?? 0,
              byteLength: cp.byteLength,
            },
      restoredDevices: cp?.devices.length ?? 0,
      devicesFromDurableTriggers: ids.length - (cp?.devices.length ?? 0),
      removedFenceExits: exits.length - expiryExits - untrackedExits,
      untrackedExits,
      expiringDevices,
      expiryExits,
      seqFloor: floor,
      lost: previousStop === 'unclean' && local !== null ? lostSince(dir, local) : null,
      partitions:
        partitionState === null
          ? null
          : {
              restored: partitionState.stored.length,
              devices: partitionState.stored.reduce((n, p) => n + p.checkpoint.devices.length, 0),
              exactReplay: partitionState.exactReplay,
              fallback: partitionState.fallback.length,
            },
      problems,
      unconfiguredDownstreams: findUnconfiguredDownstreams(
        dir.downstreamsDir,
        options.downstreams.map((d) => d.name),
        noteRunId,
      ),
    };
    const keeper = new StateKeeper(dir, memory, report, namesOnly, exits, highestRunId);
    if (partitionState?.streamOnly === true)
      keeper.replayFloors = replayFloorsOf(ids, partitionState, cp?.devices ?? [], floor);
    return keeper;
  }

  /** Lines describing the recovery, for the log (none after a clean stop of a quiet directory). */
  describe(checkpointIntervalMs: number): string[] {
    const r = this.report;
    const lines: string[] = [];
    for (const p of r.problems) lines.push(`state directory ${r.stateDir}: passed over ${p}`);
    if (r.previousStop === 'unclean') {
      const cp = r.checkpoint;
      lines.push(
        `state directory ${r.stateDir}: the previous run${r.previousPid === null ? '' : ` (pid ${r.previousPid})`} stopped without a clean shutdown; ` +
          (cp === null
            ? 'no checkpoint to restore'
            : r.partitions?.exactReplay === true
              ? `its checkpoint #${cp.number} captured ${new Date(cp.capturedMs).toISOString()} (${cp.localDevices} devices) is set aside: the partitions' stored checkpoints are the state`
              : `restored checkpoint #${cp.number} captured ${new Date(cp.capturedMs).toISOString()} (${cp.devices} devices)`),
      );
      if (r.lost !== null && r.partitions?.exactReplay !== true) {
        lines.push(
          `  lost: the device state of the last ${Math.round(r.lost.stateWindowMs)} ms before the stop (checkpoint interval ${checkpointIntervalMs} ms): ` +
            `${r.lost.pingsAfterCheckpoint} pings processed and ${r.lost.triggersAfterCheckpoint} triggers produced after the checkpoint ` +
            `(devices may repeat an ENTER or DWELL of that time, under new seqs); ${r.lost.triggersInMemory} triggers held only in memory at the last mark`,
        );
      }
      if (r.partitions?.exactReplay === true) {
        lines.push(
          `  the partitions' state comes from their newest delivered checkpoints${r.partitions.fallback > 0 ? ` (${r.partitions.fallback} that fell back: their newest, see the warning)` : ''} and their streams are read again from there (a partition with none from the stream's first message, its devices afresh): triggers derived again carry the seqs they had`,
        );
      } else {
        lines.push(`  seq continues above ${r.seqFloor} (the floor rose by 2^32), so no (deviceId, seq) is reused`);
      }
    } else if (r.restoredDevices > 0) {
      lines.push(
        `state directory ${r.stateDir}: restored ${r.restoredDevices} devices from checkpoint #${r.checkpoint!.number} (clean stop)`,
      );
    }
    if (r.partitions !== null && r.partitions.restored > 0)
      lines.push(
        `  ${r.partitions.devices} devices restored from the stored checkpoints of ${r.partitions.restored} partitions`,
      );
    if (r.devicesFromDurableTriggers > 0)
      lines.push(
        `  ${r.devicesFromDurableTriggers} more devices are named by triggers waiting in the downstreams' files`,
      );
    if (r.removedFenceExits > 0)
      lines.push(
        `  ${r.removedFenceExits} devices were inside fences the fences file no longer has (or whose tags changed): EXIT triggers follow`,
      );
    if (r.untrackedExits > 0)
      lines.push(
        `  ${r.untrackedExits} stays could not be restored: their devices were inside more fences than maxFencesPerDevice (or the overflow pool) lets this router track; an EXIT ends each, and the fence is untracked for the device while it stays inside`,
      );
    if (r.expiringDevices > 0)
      lines.push(
        `  ${r.expiringDevices} devices were expiring when their state was copied: their expiry ends their stays now (${r.expiryExits} EXIT triggers marked expired follow)`,
      );
    return lines;
  }

  /**
   * Writes the restore's EXITs (removed and retagged fences; the stays of devices copied expiring, counted as expiry
   * EXITs; stays this router cannot hold, counted as fence overflows, per fence in `untracked`, the store's per-fence
   * cells) into the control trigger ring (main thread is its producer; blocks while it is full) and returns how many.
   * Call once the dispatcher runs and before any ping is processed.
   */
  writeRestoreExits(control: SpscRing, counters: Float64Array, counterBase: number, untracked: Int32Array): number {
    const rec = new Float64Array(REC_CELLS);
    for (const x of this.exits) {
      rec[REC_LAT] = x.lat;
      rec[REC_LON] = x.lon;
      rec[REC_EVENT_TIME_MS] = x.eventTimeMs;
      rec[REC_ADMIT_TIME_NS] = nowNs();
      rec[REC_SEQ] = x.seq;
      rec[REC_INSIDE_MS] = x.insideMs;
      writeTrigger(
        control,
        counters,
        counterBase,
        TriggerType.EXIT,
        RESTORED_NAMES_GENERATION,
        x.slot,
        x.fence,
        (x.compliance ? Lane.COMPLIANCE : Lane.TRANSITION) | (x.expired ? TRG_LANE_EXPIRED : 0),
        rec,
      );
    }
    control.publish();
    counters[counterBase + CNT_EXPIRY_EXITS_F64]! += this.report.expiryExits;
    counters[counterBase + CNT_FENCE_OVERFLOW_F64]! += this.report.untrackedExits;
    for (const x of this.exits) if (x.untrackedFence >= 0) Atomics.add(untracked, x.untrackedFence, 1);
    return this.exits.length;
  }

  /**
   * Writes a checkpoint: the state is copied while containment runs (DeviceStateCopy.captureLive); when that does not
   * settle within LIVE_CAPTURE_BUDGET_MS, `pause` stops containment (resolves when no batch is in flight), the state
   * is copied and `resume` restarts it. Then the copy is encoded and written durably. With `pause` null (no thread
   * runs) the copy is taken directly. `clean` marks the last one of a clean stop. `handOff`, when given, runs after the
   * copy and before the write: when it rejects (triggers of the pings the copy holds are not handed on yet), nothing
   * is written, the deferral is counted, and the result is false.
   */
  async checkpoint(
    store: FenceStore,
    counts: ProgressCounts,
    pause: (() => Promise<void>) | null,
    resume: (() => Promise<void>) | null,
    clean = false,
    handOff: (() => Promise<void>) | null = null,
  ): Promise<boolean> {
    const t0 = nowNs();
    try {
      const count = this.ids.deviceCount();
      let pausedNs = 0;
      if (
        pause === null ||
        !this.copy.captureLive(this.state, count, store.generation, this.ids, nowNs() + LIVE_CAPTURE_BUDGET_MS * 1e6)
      ) {
        // The pause: from asking containment to stop (its batches in flight finish) to its resumption.
        const p0 = nowNs();
        if (pause !== null) {
          this.stats[PST_CHECKPOINTS_PAUSED_F64]!++;
          await pause();
        }
        try {
          this.copy.capture(this.state, this.ids.deviceCount(), store.generation, this.ids);
        } finally {
          if (resume !== null) await resume();
        }
        pausedNs = pause === null ? 0 : nowNs() - p0;
      }
      if (handOff !== null) {
        // The copy is written only once the triggers of the pings it holds are handed on (see `handOff`); otherwise
        // the previous checkpoint stays in force.
        try {
          await handOff();
        } catch {
          this.stats[PST_CHECKPOINTS_DEFERRED_F64]!++;
          return false;
        }
      }
      // Devices that expired and come back later start above every seq a freed slot's device had: so does the floor.
      // Read from the id table, not from the gauge the sweep publishes afterwards: a device freed before the copy
      // above is not in it, and its seqs must be below the floor.
      const freedSeqHigh = freedSeqHighOf(this.memory.idTable);
      if (freedSeqHigh > this.seqFloor) this.seqFloor = freedSeqHigh;
      // Encoded in slices and written off the event loop: this thread also hands triggers to in-process callbacks.
      const bytes = await encodeCheckpointSliced(this.copy, this.ids, store, {
        seqFloor: this.seqFloor,
        number: this.number + 1,
        pingsProcessed: counts.pingsProcessed,
        triggersProduced: counts.triggers,
        clean,
      });
      await writeCheckpointFile(this.dir.dir, bytes);
      this.number++;
      this.lastCheckpointMs = this.copy.capturedMs;
      const s = this.stats;
      s[PST_CHECKPOINTS_F64]!++;
      s[PST_CHECKPOINT_LAST_NS_F64] = nowNs() - t0;
      s[PST_CHECKPOINT_PAUSE_NS_F64] = pausedNs;
      s[PST_CHECKPOINT_BYTES_F64] = bytes.length;
      s[PST_CHECKPOINT_DEVICES_F64] = this.copy.count;
    } catch (err) {
      this.stats[PST_CHECKPOINT_FAILURES_F64]!++;
      throw err;
    }
    return true;
  }

  /**
   * Encodes, from the copy the last checkpoint took (call right after it, with the same `store`), the devices of each
   * of `partitions` (partitionOf their id over `partitionCount`) as a checkpoint of their own.
   */
  async encodePartitions(
    store: FenceStore,
    partitionCount: number,
    partitions: readonly number[],
  ): Promise<Map<number, Uint8Array>> {
    const copy = this.copy;
    const ids = this.ids;
    const partitionOfSlot = new Int32Array(copy.count);
    const scratch = new Uint8Array(DEVID_MAX_ID_BYTES);
    const digits = new TextEncoder();
    for (let d = 0; d < copy.count; d++) {
      // The event loop runs now and then (this thread hands triggers to in-process callbacks).
      if ((d & 4095) === 4095) await new Promise<void>((resolve) => setImmediate(resolve));
      if (ids.isNumeric(d)) {
        const t = digits.encode(String(ids.numericId(d)));
        partitionOfSlot[d] = partitionOfTokenBytes(t, 0, t.length, partitionCount);
      } else {
        partitionOfSlot[d] = partitionOfTokenBytes(scratch, 0, ids.copyIdBytes(d, scratch, 0), partitionCount);
      }
    }
    const out = new Map<number, Uint8Array>();
    const keep = new Uint8Array(copy.count);
    // Each partition's floor, read after the copy: it covers every device of the partition the copy left out as freed.
    const floors = seqFloorsOf(this.memory.idTable);
    this.expiringByPartition.clear();
    for (const p of partitions) {
      let expiring = 0;
      for (let d = 0; d < copy.count; d++) {
        keep[d] = partitionOfSlot[d] === p ? 1 : 0;
        expiring += keep[d]! & copy.expiring[d]!;
      }
      this.expiringByPartition.set(p, expiring);
      out.set(
        p,
        await encodeCheckpointSliced(
          copy,
          ids,
          store,
          {
            seqFloor: floors.length === partitionCount ? floors[p]! : this.seqFloor,
            number: this.number,
            pingsProcessed: 0,
            triggersProduced: 0,
            clean: false,
          },
          { keep },
        ),
      );
    }
    return out;
  }

  /** Rewrites the progress mark (no fsync: it has to survive a process crash only). */
  markProgress(counts: ProgressCounts): void {
    if (this.progressFd < 0) this.progressFd = fs.openSync(this.dir.file(PROGRESS_FILE), 'w');
    const b = this.progressBuf;
    b.i32[PROG_MAGIC_W] = PROGRESS_MAGIC;
    b.f64[PROG_WALL_MS_F64 >> 3] = Date.now();
    b.f64[PROG_PINGS_PROCESSED_F64 >> 3] = counts.pingsProcessed;
    b.f64[PROG_TRIGGERS_F64 >> 3] = counts.triggers;
    b.f64[PROG_TRIGGERS_IN_MEMORY_F64 >> 3] = counts.triggersInMemory;
    b.f64[PROG_CHECKPOINT_NUMBER_F64 >> 3] = this.number;
    b.f64[PROG_RUN_START_MS_F64 >> 3] = this.runStartMs;
    b.i32[PROG_CHECKSUM_W] = checksumWords(b.i32, 4, PROGRESS_BYTES >> 2);
    writeFully(this.progressFd, b.bytes, 0, PROGRESS_BYTES, 0);
  }

  /** Closes the progress mark. */
  close(): void {
    if (this.progressFd >= 0) fs.closeSync(this.progressFd);
    this.progressFd = -1;
  }

  /** Number of the last checkpoint written (rises with every checkpoint of the directory, hence with every start). */
  get checkpointNumber(): number {
    return this.number;
  }

  /** Memory regions the keeper reads (for tests). */
  get regions(): PipelineMemory {
    return this.memory;
  }
}

/**
 * StateKeeper.replayFloors of the devices `ids` (slot k = ids[k]; the first `restored.length` are the restored
 * checkpoint's devices, in its order, with their seqs before any removed-fence EXIT): -Infinity for a device of a
 * partition read again from its delivered checkpoint (or from the stream's first message), and of one this router
 * does not read (its reader derives them again); for one of a partition that fell back to its newest checkpoint
 * (PartitionStateAtStart.fallback), the seq that state gives it (`floor` for a device it lacks): the stream read again
 * derives its triggers above it, and those at or below it are delivered from the files. Without exact replay (a gap)
 * NaN for a device of an owned partition: every copy is delivered.
 */
function replayFloorsOf(
  ids: readonly (string | number)[],
  at: PartitionStateAtStart,
  restored: readonly { seq: number }[],
  floor: number,
): Float64Array {
  const fellBack = new Set(at.fallback.map((f) => f.partition));
  const owned = new Set(at.owned);
  const floors = new Float64Array(ids.length).fill(NaN);
  ids.forEach((id, slot) => {
    let p: number;
    try {
      p = partitionOf(id, at.partitionCount);
    } catch {
      return; // an id no subject can carry is not of a partition
    }
    if (!owned.has(p)) floors[slot] = -Infinity;
    else if (at.exactReplay)
      floors[slot] = !fellBack.has(p) ? -Infinity : slot < restored.length ? restored[slot]!.seq : floor;
  });
  return floors;
}

/**
 * The local checkpoint with the devices of every partition that has a stored checkpoint replaced by that one's: the
 * stored checkpoint is the partition's state wherever it was written, and the stream is read again from the
 * position it covers. The seq floor is the highest of them all (with exact replay, a partition's own devices start at
 * its own checkpoint's floor: see restore). With exact replay no local device is kept.
 */
function withPartitionCheckpoints(local: Checkpoint | null, at: PartitionStateAtStart): Checkpoint {
  const replaced = new Set(at.stored.map((p) => p.partition));
  const ofReplaced = (id: string | number): boolean => {
    try {
      return replaced.has(partitionOf(id, at.partitionCount));
    } catch {
      return false; // an id no subject can carry is not of a partition
    }
  };
  const fences = [...(local?.fences ?? [])];
  // Exact replay: the local devices are none of this start's. Those of a partition without a delivered checkpoint may
  // have moved past triggers never delivered, which its stream, read again from its first message, derives again;
  // those of a partition another router owns now would be stale here (and could expire with an EXIT under a seq its
  // owner uses).
  // Without exact replay (a gap) but every ping from the stream: the local devices of partitions read by others are
  // theirs, not this router's (an expiry EXIT here would take a seq their reader uses).
  const owned = new Set(at.owned);
  const ofOwned = (id: string | number): boolean => {
    try {
      return owned.has(partitionOf(id, at.partitionCount));
    } catch {
      return true; // an id no subject can carry is not of a partition
    }
  };
  const devices = at.exactReplay
    ? []
    : (local?.devices ?? []).filter((d) => !ofReplaced(d.id) && (!at.streamOnly || ofOwned(d.id)));
  let seqFloor = local?.seqFloor ?? 0;
  for (const p of at.stored) {
    const offset = fences.length;
    fences.push(...p.checkpoint.fences);
    for (const d of p.checkpoint.devices)
      devices.push({ ...d, entries: d.entries.map((e) => ({ ...e, fence: e.fence + offset })) });
    if (p.checkpoint.seqFloor > seqFloor) seqFloor = p.checkpoint.seqFloor;
  }
  return {
    seqFloor,
    number: local?.number ?? 0,
    pingsProcessed: local?.pingsProcessed ?? 0,
    triggersProduced: local?.triggersProduced ?? 0,
    clean: local?.clean ?? true,
    capturedMs: local?.capturedMs ?? 0,
    fences,
    devices,
    byteLength: (local?.byteLength ?? 0) + at.stored.reduce((n, p) => n + p.checkpoint.byteLength, 0),
  };
}

/**
 * Writes the checkpoint's devices into `state` (slot k = device k, as preregistered) against `store`; an entry on a
 * fence `store` lacks is dropped (an EXIT for a device that was inside it). `floorSeq` > -Infinity: every device's seq
 * becomes that floor (an unclean stop); otherwise each continues from its own. A device copied expiring gets what its
 * expiry record would have given it in containment (ContainmentEngine.expire): with `exitOnExpiry`, an EXIT marked
 * expired per stay, in entry order, at its last position and time, each under the next seq; then its state is cleared
 * (seq kept). It stays registered, and expires again, with nothing to end, once idle. A ping that revived it after
 * the copy, before containment reached its expiry record, ended nothing in the run that stopped, and that run's next
 * triggers took the seqs after the copy's: such a copy is never a partition's delivered checkpoint, and where it is
 * restored without a raised floor (a partition's fallback to its newest state) the device's seq is raised by
 * SEQ_EPOCH first, so its EXITs never take a seq the stopped run may have given another trigger.
 */
function restoreDevices(
  cp: Checkpoint,
  state: DeviceState,
  store: FenceStore,
  floorSeq: number,
  exitOnExpiry: boolean,
): {
  exits: RestoreExit[];
  namesOnly: NamesOnlyGeneration | null;
  expiringDevices: number;
  expiryExits: number;
  untrackedExits: number;
} {
  const toStore = cp.fences.map((f) => store.indexOfId(f.id));
  // A fence whose tags changed since the copy ends its stays and may begin new ones (see reloadDeviceState).
  const retagged = cp.fences.map((f, k) => toStore[k]! >= 0 && !sameTags(f.tags, store.tags(toStore[k]!)));
  const exits: RestoreExit[] = [];
  let expiringDevices = 0;
  let expiryExits = 0;
  let untrackedExits = 0;
  cp.devices.forEach((dev, slot) => {
    const df = slot * DEV_STRIDE_F64;
    const di = slot * DEV_STRIDE_I32;
    let seq = floorSeq > -Infinity ? floorSeq : dev.seq;
    const exitAt = (fence: number, sinceMs: number, expired: boolean, untrackedFence = -1): void => {
      exits.push({
        slot,
        fence,
        compliance: cp.fences[fence]?.compliance ?? false,
        expired,
        untrackedFence,
        seq: ++seq,
        eventTimeMs: dev.lastEventMs,
        lat: dev.lastLat,
        lon: dev.lastLon,
        insideMs: dev.lastEventMs - sinceMs,
      });
    };
    state.devI32[di + DEV_GENERATION_I32] = store.generation;
    if (dev.expiring) {
      expiringDevices++;
      if (floorSeq === -Infinity) seq += SEQ_EPOCH;
      if (exitOnExpiry) {
        for (const e of dev.entries) {
          // A pending ENTER never became a stay: no EXIT for it.
          if ((e.state & EntryState.INSIDE) === 0) continue;
          exitAt(e.fence, e.sinceMs, true);
          expiryExits++;
        }
      }
      state.devF64[df + DEV_LAST_EVENT_MS_F64] = -Infinity;
      state.devI32[di + DEV_HAS_LAST_I32] = 0;
      state.devI32[di + DEV_ENTRY_COUNT_I32] = 0;
      state.devF64[df + DEV_TRIGGER_SEQ_F64] = seq;
      return;
    }
    state.devF64[df + DEV_LAST_EVENT_MS_F64] = dev.hasLast ? dev.lastEventMs : -Infinity;
    state.devF64[df + DEV_LAST_LAT_F64] = dev.lastLat;
    state.devF64[df + DEV_LAST_LON_F64] = dev.lastLon;
    state.devI32[di + DEV_HAS_LAST_I32] = dev.hasLast ? 1 : 0;
    state.devI32[di + DEV_UNTRACKED_I32] = dev.untracked ? 1 : 0;
    let n = 0;
    for (const e of dev.entries) {
      const f = toStore[e.fence] ?? -1;
      if (f < 0) {
        if ((e.state & EntryState.INSIDE) !== 0) exitAt(e.fence, e.sinceMs, false);
        continue;
      }
      let entryState = e.state;
      let sinceMs = e.sinceMs;
      let pendingMs = e.pendingMs;
      if (retagged[e.fence] === true && (e.state & EntryState.INSIDE) !== 0) {
        exitAt(e.fence, e.sinceMs, false);
        entryState = EntryState.PENDING_ENTER;
        sinceMs = pendingMs = dev.lastEventMs;
      }
      if (!state.ensureEntryCapacity(slot, n + 1)) {
        // More entries than this router can hold (a lower maxFencesPerDevice, or a fuller pool): the stay ends here
        // with an EXIT, so its ENTER is closed, and the fence is untracked from now on, as at run time: no late ENTER
        // while the device stays inside, no CROSS when it leaves. A pending entry never started a stay: dropped.
        if ((entryState & EntryState.INSIDE) !== 0) {
          exitAt(e.fence, e.sinceMs, false, f);
          untrackedExits++;
        }
        state.devI32[di + DEV_UNTRACKED_I32] = 1;
        continue;
      }
      const base = state.entryIndex(slot, n);
      state.entryI32[base * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = f;
      state.entryI32[base * ENTRY_STRIDE_I32 + ENTRY_STATE_I32] = entryState;
      state.entryF64[base * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64] = sinceMs;
      state.entryF64[base * ENTRY_STRIDE_F64 + ENTRY_PENDING_MS_F64] = pendingMs;
      n++;
    }
    state.devI32[di + DEV_ENTRY_COUNT_I32] = n;
    state.devF64[df + DEV_TRIGGER_SEQ_F64] = seq;
    publishComplianceCount(state, slot, store.fenceI32, FENCE_STRIDE_I32, FENCE_FLAGS_I32, FENCE_FLAG_COMPLIANCE);
  });
  const namesOnly =
    exits.length === 0
      ? null
      : { generation: RESTORED_NAMES_GENERATION, ids: cp.fences.map((f) => f.id), tags: cp.fences.map((f) => f.tags) };
  return { exits, namesOnly, expiringDevices, expiryExits, untrackedExits };
}

/** What the progress mark says happened after checkpoint `cp` (null when there is no readable mark). */
function lostSince(dir: StateDirectory, cp: Checkpoint): RecoveryReport['lost'] {
  const b = new RecordBuffer(PROGRESS_BYTES);
  let fd = -1;
  try {
    fd = fs.openSync(dir.file(PROGRESS_FILE), 'r');
    if (readFully(fd, b.bytes, 0, PROGRESS_BYTES, 0) < PROGRESS_BYTES) return null;
  } catch {
    return null;
  } finally {
    if (fd >= 0) fs.closeSync(fd);
  }
  if (b.i32[PROG_MAGIC_W] !== PROGRESS_MAGIC || checksumWords(b.i32, 4, PROGRESS_BYTES >> 2) !== b.i32[PROG_CHECKSUM_W])
    return null;
  // A mark written before this checkpoint (or by another run) says nothing about what came after it.
  if (b.f64[PROG_CHECKPOINT_NUMBER_F64 >> 3] !== cp.number) return null;
  const wallMs = b.f64[PROG_WALL_MS_F64 >> 3]!;
  return {
    stateWindowMs: Math.max(0, wallMs - cp.capturedMs),
    pingsAfterCheckpoint: Math.max(0, b.f64[PROG_PINGS_PROCESSED_F64 >> 3]! - cp.pingsProcessed),
    triggersAfterCheckpoint: Math.max(0, b.f64[PROG_TRIGGERS_F64 >> 3]! - cp.triggersProduced),
    triggersInMemory: b.f64[PROG_TRIGGERS_IN_MEMORY_F64 >> 3]!,
  };
}
