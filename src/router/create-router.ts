/**
 * `createRouter(options)`: validates the options, loads and indexes the fences, then builds a PipelineRouter over
 * freshly allocated shared memory and starts it, reporting each start phase (StartProgress); a failed start stops
 * whatever it had started and settles the state directory.
 */
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { endianness } from 'node:os';
import { join, resolve } from 'node:path';
import { resolveRouterOptions, type RouterOptions, type RouterOptionsInput } from '../config/options.js';
import { AdminServer, type AdminHandlers } from '../admin/admin-server.js';
import { errorText } from '../durable/fs-util.js';
import { FENCE_EDIT_JOURNAL_FILE, readFenceEditJournal, type JournalContents } from '../durable/fence-edit-journal.js';
import {
  loadFenceStore,
  loadFenceStoreOffThread,
  withoutExpiredFences,
  type LoadedFences,
} from '../fences/fence-file.js';
import { FenceValidationError } from '../fences/parse.js';
import type { StoredFenceEdit } from '../fences/stored-edits.js';
import { FenceStore } from '../fences/store.js';
import { isLoggerLike, RouterLog, type LogLineCallback } from '../log/router-log.js';
import { StartProgress } from '../pipeline/start-progress.js';
import { LOOKUP_ONLY_STORE } from '../pipeline/store-views.js';
import type { Router, RouterExtras } from './api.js';
import { PartitionCheckpoints } from './partition-checkpoints.js';
import { fenceFileLimits, PipelineRouter } from './pipeline-router.js';

/**
 * An embedded router opens no network listener unless asked: with neither `listenHost` nor `listenPort` given there is
 * no telemetry listener, with neither `adminHost` nor `adminPort` no admin server (the CLI sets both; see
 * CLI_NETWORK_DEFAULTS).
 */
function withoutUnaskedListeners(o: RouterOptionsInput): RouterOptionsInput {
  const out: RouterOptionsInput = { ...o };
  if (o.listenHost === undefined && o.listenPort === undefined) out.listenHost = null;
  if (o.adminHost === undefined && o.adminPort === undefined) out.adminHost = null;
  return out;
}

/**
 * The router's log over the caller's `log` callback or `logger` object (not both: RangeError), or the console. A
 * callback or logger receives every level (its own filter applies); the console gets warnings and errors only, so an
 * embedded router says nothing unasked until something goes wrong.
 */
export function openRouterLog(log: unknown, logger: unknown): RouterLog {
  if (log !== undefined && logger !== undefined) {
    throw new RangeError('options.log and options.logger cannot both be given (use one)');
  }
  if (log !== undefined) {
    if (typeof log !== 'function') throw new RangeError(`options.log must be a function (got ${typeof log})`);
    return new RouterLog(log as LogLineCallback, { level: 'debug' });
  }
  if (logger !== undefined) {
    if (!isLoggerLike(logger)) {
      throw new RangeError('options.logger must be an object with error, warn and info methods (as pino has)');
    }
    return new RouterLog(logger, { level: 'debug' });
  }
  return new RouterLog(undefined, { level: 'warn' });
}

/**
 * Fences given as an object with fewer features than this are checked on the calling thread (a few milliseconds);
 * larger collections, and every fences file, on the loader thread, so the admin server keeps answering meanwhile.
 */
const MAIN_THREAD_MAX_FEATURES = 2000;

/** What the admin server answers while the router starts: not ready (naming the phase), healthy, nothing to change. */
function startingHandlers(progress: StartProgress): AdminHandlers {
  const starting = (): Promise<never> => Promise.reject(new Error('the router is starting'));
  return {
    registry: { contentType: 'text/plain; version=0.0.4; charset=utf-8', metrics: () => Promise.resolve('') },
    readiness: () => ({ ready: false, reason: `starting: ${progress.current}` }),
    health: () => ({ ready: true }),
    reloadFences: starting,
    fences: { upsert: starting, remove: starting },
  };
}

/**
 * Loads the start's fences (`fences`, or the fences file, or none) with the stored `edits` applied over them, leaving
 * out those whose `expiresAt` has passed.
 */
async function loadStartFences(
  fences: unknown,
  resolved: RouterOptions,
  edits: readonly StoredFenceEdit[],
  progress: StartProgress,
): Promise<LoadedFences> {
  const limits = fenceFileLimits(resolved);
  if (fences !== undefined || resolved.fencesFile === null) {
    const geojson = fences ?? { type: 'FeatureCollection', features: [] };
    const features = (geojson as { features?: unknown }).features;
    if (Array.isArray(features) && features.length + edits.length < MAIN_THREAD_MAX_FEATURES) {
      progress.phase('checking and indexing the fences');
      // The loader thread's own load, run here: the same checks, stored edits and expired fences left out.
      return loadFenceStore({ geojson, edits, limits, generation: 1 });
    }
    progress.phase('checking and indexing the fences (loader thread)');
    return loadFenceStoreOffThread({ geojson, edits, limits, generation: 1 });
  }
  progress.phase('reading, checking and indexing the fences file (loader thread)');
  try {
    return await loadFenceStoreOffThread({ path: resolved.fencesFile, edits, limits, generation: 1 });
  } catch (err) {
    // A validation error names the feature already; anything else (unreadable, too large, not JSON) the option.
    if (err instanceof FenceValidationError) throw err;
    throw new Error(`options.fencesFile ${resolved.fencesFile}: ${(err as Error).message}`, { cause: err });
  }
}

/** Logs what the fence edit journal gave the start: edits applied, and lines or edits it could not use. */
function reportJournal(journal: JournalContents, skipped: readonly string[], log: RouterLog['fn']): void {
  if (journal.edits.length > 0) {
    log(
      `fence edits since the last reload applied over the fences: ${journal.edits.length - skipped.length} (from ${journal.lines} journal lines)`,
    );
  }
  for (const line of skipped) log(`fence edit journal: ${line}: not applied`, 'error');
  if (journal.damagedLines > 0) {
    log(`fence edit journal: ${journal.damagedLines} damaged lines skipped (${journal.damaged.join('; ')})`, 'error');
  }
  if (journal.tornTail)
    log('fence edit journal: its last line was cut short (an edit not acknowledged): ignored', 'warn');
}

/**
 * Refuses an input file that cannot be read as one (missing, a directory, not permitted), naming it: read from the
 * ingest thread, it would otherwise end at its first byte, as an empty file does.
 */
function checkInputsReadable(inputs: readonly string[]): void {
  inputs.forEach((path, i) => {
    if (path === '-') return;
    try {
      accessSync(path, fsConstants.R_OK);
      if (statSync(path).isDirectory()) throw Object.assign(new Error('a directory'), { code: 'EISDIR' });
    } catch (err) {
      throw new RangeError(`input file ${path} (options.inputs[${i}], --input) cannot be read: ${errorText(err)}`, {
        cause: err,
      });
    }
  });
}

/**
 * Starts a router: validates the options (RangeError naming the option), loads the fences (`fences` or
 * `options.fencesFile`; FenceValidationError naming the feature and the reason), allocates the shared memory, starts
 * the dispatcher thread, the ingest thread with its containment pool, and the admin server.
 */
export async function createRouter(options: RouterOptionsInput & RouterExtras = {}): Promise<Router> {
  if (options === null || typeof options !== 'object') throw new RangeError('options must be an object');
  const { fences, log: logCallback, logger, leaseGate, startFences, ...rest } = options;
  const resolved = resolveRouterOptions(withoutUnaskedListeners(rest));
  if (fences !== undefined && resolved.fencesFile !== null)
    throw new RangeError(
      'options.fences and options.fencesFile cannot both be given (use one): the router would start on fences and a reload would read the file',
    );
  if (resolved.jetstreamSource?.partitions === 'auto')
    throw new RangeError(
      'options.jetstreamSource.partitions "auto" takes partitions through leases: start it with createPartitionGroup, which runs a router on the partitions it holds',
    );
  checkInputsReadable(resolved.inputs);
  if (endianness() !== 'LE')
    throw new Error('the router needs a little-endian host (its durable files are little-endian)');
  const routerLog = openRouterLog(logCallback, logger);
  const log = routerLog.fn;
  const progress = new StartProgress(log);
  let router: PipelineRouter | null = null;
  let admin: AdminServer | null = null;
  // Closed by the router once it exists.
  let partitionCheckpoints: PartitionCheckpoints | null = null;
  try {
    if (resolved.adminHost !== null) {
      // Up before anything else: /healthz answers and /readyz says which phase the start is in.
      progress.phase('starting the admin server');
      admin = new AdminServer({
        host: resolved.adminHost,
        port: resolved.adminPort,
        token: resolved.adminToken,
        ...startingHandlers(progress),
      });
      await admin.start();
    }
    // The edits made since the last reload, kept in the state directory, apply over the fences the router starts with.
    const journal =
      resolved.stateDir === null
        ? null
        : readFenceEditJournal(join(resolve(resolved.stateDir), FENCE_EDIT_JOURNAL_FILE));
    const edits = journal?.edits ?? [];
    // A group's next router takes over the store its previous one closed with (the journal's edits are in it; the
    // fences that expired since are left out).
    const descriptor =
      startFences === undefined
        ? await loadStartFences(fences, resolved, edits, progress)
        : withoutExpiredFences(startFences, Date.now());
    if (journal !== null && startFences === undefined) reportJournal(journal, descriptor.skippedEdits, log);
    // Stays in them (in a restored checkpoint) end at the restore, as for fences gone from the file.
    for (const line of descriptor.expiredFences) log(line);
    // The previous router is closed: its per-fence untracked counts are not this one's.
    if (startFences !== undefined) new Int32Array(descriptor.descriptor.untrackedBuffer).fill(0);
    const store = FenceStore.open(descriptor.descriptor, LOOKUP_ONLY_STORE);
    if (resolved.jetstreamSource?.stateBucket != null) {
      progress.phase("reading the partitions' stored checkpoints from JetStream");
      partitionCheckpoints = await PartitionCheckpoints.open(resolved, leaseGate ?? null);
    }
    progress.phase('allocating memory and restoring device state');
    router = new PipelineRouter(resolved, store, routerLog, admin, journal, partitionCheckpoints, leaseGate ?? null);
    await router.start(progress);
    admin?.use(router.adminHandlers());
  } catch (err) {
    const where = progress.fail();
    // Once threads are involved, where it failed is worth a line of its own (the error says why).
    if (router !== null) {
      log(where, 'error');
      await router.abandon();
    } else {
      await partitionCheckpoints?.close();
    }
    await admin?.close();
    routerLog.close();
    throw err;
  }
  log(progress.finish());
  return router;
}
