/**
 * The router's public face: what `createRouter` takes beyond the options, and the `Router` it returns (in-process
 * input, fence reloads, stats, metrics, drain and close), with the results of a reload and of `close()`.
 */
import type { Trigger } from '../dispatch/trigger.js';
import type { DeviceNow, FenceOccupant } from './state-queries.js';
import type { FenceStoreDescriptor } from '../fences/store.js';
import type { RouterOptions } from '../config/options.js';
import type { TelemetryPoint } from '../ingest/ping-fields.js';
import type { LoggerLike, LogLineCallback } from '../log/router-log.js';
import type { RecoveryReport } from '../pipeline/state-keeper.js';
import type { RouterStats } from '../pipeline/stats.js';

/** Extra inputs of createRouter beyond the serialisable options. */
export interface RouterExtras {
  /** Fences as a GeoJSON FeatureCollection object (instead of `fencesFile`). */
  fences?: unknown;
  /**
   * A logger object for the router's lines: pino, bunyan, or anything with `error`, `warn`, `info` (and optionally
   * `debug`) methods taking `(fields, message)`. Every line's fields name the thread it came from (`thread`: main,
   * ingest, dispatcher, fence-loader). Level 'error' marks loss that must not go unnoticed (COMPLIANCE pings shed,
   * dead letters dropped, durable writes failing). Repeats of one line are rate-limited (see RouterLog). Without
   * `logger` or `log`, warnings and errors go to the console.
   */
  logger?: LoggerLike;
  /** A line callback instead of `logger` (not both): the message, its level and its fields. */
  log?: LogLineCallback;
  /**
   * The lease gate a partition group (createPartitionGroup) shares with the router it runs (LEASE_GATE_F64 cells):
   * set by the group, not by callers.
   */
  leaseGate?: SharedArrayBuffer;
  /**
   * The fences a partition group's previous router had in force when it closed (its store, edits and reloads
   * included), taken over as they are instead of reading the fences file and applying the edit journal again: set by
   * the group, not by callers.
   */
  startFences?: FenceStoreDescriptor;
}

/** The outcome of a fence reload. */
export interface ReloadResult {
  /** The generation now in force. */
  generation: number;
  /** Fences in it. */
  fenceCount: number;
}

/** The outcome of a live fence edit (`upsertFence`, `removeFence`). */
export interface FenceEditResult {
  /** The fence's id. */
  fenceId: string;
  /** What happened: added, replaced (same id), removed, or nothing (a removal of an id not in force). */
  action: 'created' | 'replaced' | 'removed' | 'absent';
  /** The generation now in force (unchanged for 'absent'). */
  generation: number;
  /** Fences in force now. */
  fenceCount: number;
  /** EXIT triggers written for devices inside the fence removed (or replaced away). */
  exits: number;
  /**
   * True when the edit did not fit the store's headroom and a full build was made (off this thread) instead of an
   * edit generation over the same store.
   */
  fullBuild: boolean;
  /**
   * True when the edit is kept in the state directory (fsynced before this result): a restart applies it again over
   * the fences the router starts with. False without a `stateDir` of the caller's, for 'absent', or when the journal
   * could not be written (logged as an error).
   */
  persisted: boolean;
  /** From the call to the new generation in force, ms. */
  elapsedMs: number;
}

/** What close() returns: the final stats and how long the router ran. */
export interface RouterSummary extends RouterStats {
  /** Milliseconds from start to the end of close(). */
  uptimeMs: number;
  /** The state directory (null when it was a temporary one, now removed). */
  stateDir: string | null;
  /** The checkpoint period in force, ms. */
  checkpointIntervalMs: number;
  /** The last checkpoint's wall time, epoch ms (the clean one written by close). */
  lastCheckpointMs: number;
  /**
   * The final checkpoint could not be written (logged at error level): the next start treats this stop as unclean
   * (seqs continue above a raised floor; an ENTER or DWELL of the time since the last checkpoint may come again). The
   * drain's outcome is then a failure.
   */
  finalCheckpointFailed: boolean;
}

/** A running router. */
export interface Router {
  /** Bound port of the telemetry TCP listener (null when there is none). */
  readonly ingestPort: number | null;
  /** Bound port of the admin HTTP server (null when there is none). */
  readonly adminPort: number | null;
  /** The options in force (defaults filled in). */
  readonly options: Readonly<RouterOptions>;
  /** The state directory in use (absolute). */
  readonly stateDir: string;
  /** What the start found in the state directory and did about it (restored devices, what an unclean stop lost). */
  readonly recovery: RecoveryReport;
  /**
   * Resolves with an Error naming the thread when the ingest or the dispatcher thread exits without being asked to:
   * the router can no longer take or deliver telemetry (`/healthz` says so too), and `close()` then stops it as after
   * a crash, rejecting with that reason (the next start over the state directory recovers). Never resolves otherwise.
   * The CLI exits with its failure code when it does, for a supervisor to restart it.
   */
  readonly failure: Promise<Error>;
  /**
   * Ingests raw concatenated MessagePack frames (copied; a partial frame at the end counts as truncated). In-process
   * input is back-pressured, never shed: the ingest thread feeds it only as fast as the telemetry rings take it and
   * keeps the rest in call order. Returns false, as `Writable.write()` does, when the bytes posted and not yet fed
   * reach `options.ingest.inputHighWaterBytes`: the call was taken, but the caller should stop and
   * `await inputDrained()` before the next one. Ignoring it only grows the memory the backlog holds. Throws, naming
   * why, once `drain()` or `close()` was called or the ingest thread has exited (nothing would read the bytes).
   *
   * @example
   *   for (const chunk of chunks) if (!router.ingest(chunk)) await router.inputDrained();
   */
  ingest(bytes: Uint8Array): boolean;
  /**
   * Ingests one decoded point (validated like a frame), back-pressured like `ingest()`. Returns false when the points
   * posted and not yet offered to admission reach `options.ingest.inputHighWaterPoints`: await `inputDrained()`.
   * Throws as `ingest()` does once the router drains or its ingest thread has exited.
   */
  push(point: TelemetryPoint): boolean;
  /**
   * Resolves when the in-process input in flight (`ingest()` bytes and `push()` points posted and not yet fed) is at
   * or below half its high-water marks: at once when it already is, and when the router closes. What a caller awaits
   * after `ingest()` or `push()` returned false.
   */
  inputDrained(): Promise<void>;
  /**
   * Replaces the fences. Rejects with FenceValidationError (feature index and reason) for bad GeoJSON and the old
   * store keeps serving. Device state carries over by fence id; devices inside a removed fence get an EXIT, and so do
   * devices inside a fence whose tags changed (the stay under the old tags ends; the next ping inside begins one under
   * the new tags). Refused on a router started with `fencesFile` (a restart reads that file again, undoing fences given
   * here): write the file and call `reloadFencesFile()`.
   */
  reloadFences(geojson: unknown): Promise<ReloadResult>;
  /** Reloads `options.fencesFile` (what the admin endpoint and SIGHUP do). */
  reloadFencesFile(): Promise<ReloadResult>;
  /**
   * Adds a fence, or replaces the one with the same `properties.id`: one GeoJSON Feature, validated as a fence file's
   * features are (rejects with FenceValidationError, and nothing changes). Applied as a new generation over the same
   * store without rebuilding its index; device state carries over as for a reload (a replaced fence keeps its
   * occupants' stays, and their next ping decides against the new shape). Edits and reloads run one at a time. With a
   * `stateDir`, the edit is kept there before the promise resolves and a restart applies it again over the fences the
   * router starts with; a reload makes the reloaded fences the new base (the edits before it are dropped).
   * `properties.expiresAt` (epoch ms or ISO 8601) removes the fence at that time; one already passed makes the upsert
   * a removal of the fence with that id (action 'removed', or 'absent' when there is none).
   */
  upsertFence(feature: unknown): Promise<FenceEditResult>;
  /** Removes the fence with `fenceId` (devices inside it get an EXIT); action 'absent' when no fence has that id. */
  removeFence(fenceId: string): Promise<FenceEditResult>;
  /**
   * The trigger stream downstream `name` (a `{ kind: 'stream' }` downstream; `name` may be left out when there is
   * one): an async iterable of batches, each in per-device order, read by one loop. A batch counts as delivered when
   * the loop asks for the next one (or leaves the loop); a loop slower than the triggers gets the treatment of any
   * slow downstream (its limit, its per-device queues and backlog log, then dead letters), never unbounded memory.
   * Throws when there is no such stream.
   *
   * @example
   *   for await (const batch of router.triggers()) for (const t of batch) handle(t);
   */
  triggers(name?: string): AsyncIterableIterator<readonly Trigger[]>;
  /**
   * What the router knows about a device now: its last accepted position and event time, and the fences it is inside
   * (ENTER sent, no EXIT yet) with when each stay began; null when it does not know the device (42 and "42" are two).
   * Read from shared state while the pipeline runs (a slot scan: for now-and-then questions, not a hot path).
   */
  device(deviceId: string | number): DeviceNow | null;
  /** The devices inside fence `fenceId` now, with when each stay began; null when no fence has that id. */
  fenceOccupants(fenceId: string): FenceOccupant[] | null;
  /** A snapshot of every counter, read from shared memory. */
  stats(): RouterStats;
  /** The Prometheus text exposition `/metrics` serves. */
  metricsText(): Promise<string>;
  /** Resolves when every `options.inputs` file (and stdin) has been read to its end. */
  inputsFinished(): Promise<void>;
  /**
   * Stops ingest (listener closed, further network input shed as draining; `ingest()` and `push()` throw), empties the
   * rings, finishes deliveries (until `drainDeadlineMs`; then a trigger stream lets go of what its loop has not taken).
   */
  drain(): Promise<void>;
  /** Drains, then stops the threads and the admin server; returns the final stats. Idempotent. */
  close(): Promise<RouterSummary>;
  /**
   * Stops every thread at once, delivering, acknowledging and storing nothing more: what a router does when its work
   * is no longer its own (a lost partition lease). The state directory is left as after a crash, so the next start on
   * it restores the last checkpoint. Not for a normal stop (use close).
   */
  abandon(): Promise<void>;
}
