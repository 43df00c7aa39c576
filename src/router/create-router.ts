/**
 * `createRouter(options)`: validates the options, loads and indexes the fences, then builds a PipelineRouter over
 * freshly allocated shared memory and starts it, reporting each start phase (StartProgress); a failed start stops
 * whatever it had started and settles the state directory.
 */
import { endianness } from 'node:os';
import { resolveRouterOptions, type RouterOptionsInput } from '../config/options.js';
import { readFenceFile } from '../fences/fence-file.js';
import { FenceValidationError, parseFences, type ParsedFences } from '../fences/parse.js';
import { buildFenceStore, FenceStore } from '../fences/store.js';
import { StartProgress } from '../pipeline/start-progress.js';
import { LOOKUP_ONLY_STORE } from '../pipeline/store-views.js';
import type { Router, RouterExtras } from './api.js';
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
 * Starts a router: validates the options (RangeError naming the option), loads the fences (`fences` or
 * `options.fencesFile`; FenceValidationError naming the feature and the reason), allocates the shared memory, starts
 * the dispatcher thread, the ingest thread with its containment pool, and the admin server.
 */
export async function createRouter(options: RouterOptionsInput & RouterExtras = {}): Promise<Router> {
  if (options === null || typeof options !== 'object') throw new RangeError('options must be an object');
  const { fences, log, ...rest } = options;
  const resolved = resolveRouterOptions(withoutUnaskedListeners(rest));
  if (endianness() !== 'LE')
    throw new Error('the router needs a little-endian host (its durable files are little-endian)');
  const progress = new StartProgress(log ?? ((line) => console.warn(line)));
  let router: PipelineRouter | null = null;
  try {
    const limits = fenceFileLimits(resolved);
    let parsed: ParsedFences;
    if (fences !== undefined || resolved.fencesFile === null) {
      progress.phase('checking the fences');
      parsed = parseFences(fences ?? { type: 'FeatureCollection', features: [] }, limits);
    } else {
      progress.phase('reading and checking the fences file');
      try {
        parsed = readFenceFile(resolved.fencesFile, limits);
      } catch (err) {
        // A validation error names the feature already; anything else (unreadable, too large, not JSON) the option.
        if (err instanceof FenceValidationError) throw err;
        throw new Error(`options.fencesFile ${resolved.fencesFile}: ${(err as Error).message}`, { cause: err });
      }
    }
    progress.phase(`indexing ${parsed.fences.length} fences`);
    const store = FenceStore.open(buildFenceStore(parsed, 1), LOOKUP_ONLY_STORE);
    const extras: RouterExtras = {};
    if (log !== undefined) extras.log = log;
    progress.phase('allocating memory and restoring device state');
    router = new PipelineRouter(resolved, store, extras);
    await router.start(progress);
  } catch (err) {
    const where = progress.fail();
    // Once threads are involved, where it failed is worth a line of its own (the error says why).
    if (router !== null) {
      log?.(where);
      await router.abandon();
    }
    throw err;
  }
  const line = progress.finish();
  if (log !== undefined) log(line);
  return router;
}
