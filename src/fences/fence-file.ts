/**
 * Loading a fence file: its size against a limit before it is read, JSON, validation (`parseFences` with its limits)
 * and the shared store. `loadFenceStoreOffThread` does all of it on a worker thread of its own, so a large or
 * hostile file never stalls the thread that asks for it (the main thread keeps answering `/healthz` during a reload).
 */
import { readFileSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { Worker } from 'node:worker_threads';
import { FenceValidationError, parseFences, type FenceLimits, type FenceProblem, type ParsedFences } from './parse.js';
import { applyEdit, liveFences, type FenceEdit } from './store-edit.js';
import { leaveOutExpired } from './expired-fences.js';
import { applyStoredEdits, type StoredFenceEdit } from './stored-edits.js';
import { buildFenceStore, FenceStore, type FenceStoreDescriptor } from './store.js';

/** How the loader opens a store it rebuilds: no per-thread accelerators. */
const LOOKUP_ONLY = Object.freeze({ grid: false, edgeBands: false });

/** Limits of a fence file: its size, and what parseFences checks. */
export interface FenceFileLimits extends FenceLimits {
  /** Largest fence file read, bytes. */
  maxFileBytes: number;
}

/** Reads, checks and parses the fence file at `path`; throws an Error naming the file (by name) and the problem. */
export function readFenceFile(path: string, limits: FenceFileLimits): ParsedFences {
  const name = basename(path);
  let size: number;
  try {
    size = statSync(path).size;
  } catch (err) {
    throw new Error(`fences file ${name}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, {
      cause: err,
    });
  }
  if (size > limits.maxFileBytes)
    throw new Error(`fences file ${name}: ${size} bytes, over the limit maxFenceFileBytes ${limits.maxFileBytes}`);
  let geojson: unknown;
  try {
    geojson = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`fences file ${name}: ${(err as Error).message}`, { cause: err });
  }
  return parseFences(geojson, limits);
}

/** What the loader thread answers. */
export type FenceLoadAnswer =
  ({ ok: true } & LoadedFences) | { ok: false; message: string; problems: FenceProblem[] | null };

/** A store loaded, and the stored edits that could not be applied over its fences. */
export interface LoadedFences {
  /** The store. */
  descriptor: FenceStoreDescriptor;
  /** One line per stored edit skipped because it no longer validates (see applyStoredEdits). */
  skippedEdits: string[];
  /** One line per fence left out because its `expiresAt` had passed (see leaveOutExpired). */
  expiredFences: string[];
}

/**
 * What the loader thread is given: a file to read, a GeoJSON value already in memory (structured-cloned), or a store
 * generation to rebuild in full with one edit applied (an edit that did not fit the store's headroom); with a file or
 * a value, the stored edits to apply over its fences (a restart's journal).
 */
export interface FenceLoadRequest {
  path?: string;
  geojson?: unknown;
  compact?: { from: FenceStoreDescriptor; edit: FenceEdit };
  edits?: readonly StoredFenceEdit[];
  limits: FenceFileLimits;
  generation: number;
}

/** Reads (or takes), validates and indexes fences into a store of `generation` (on the calling thread). */
export function loadFenceStore(request: FenceLoadRequest): LoadedFences {
  const compact = request.compact;
  if (compact !== undefined) {
    // The fences in force, one edit applied: one of them already due is removed by the expiry timer, as it would be
    // without this build.
    const fences = applyEdit(liveFences(FenceStore.open(compact.from, LOOKUP_ONLY)), compact.edit);
    return { descriptor: buildFenceStore({ fences }, request.generation), skippedEdits: [], expiredFences: [] };
  }
  const parsed =
    request.path !== undefined
      ? readFenceFile(request.path, request.limits)
      : parseFences(request.geojson, request.limits);
  const edited =
    request.edits === undefined || request.edits.length === 0
      ? { fences: parsed.fences, skipped: [] }
      : applyStoredEdits(parsed.fences, request.edits, request.limits);
  const due = leaveOutExpired(edited.fences, Date.now());
  return {
    descriptor: buildFenceStore(due, request.generation),
    skippedEdits: edited.skipped,
    expiredFences: due.expired,
  };
}

/**
 * A store carried over from a previous router (a partition group's restart on a new set of partitions), without the
 * fences whose `expiresAt` has passed since: that router's expiry timer stopped at its close. The same descriptor when
 * none has (the usual case: nothing is copied), else a build of the rest under the next generation.
 */
export function withoutExpiredFences(from: FenceStoreDescriptor, nowMs: number): LoadedFences {
  const store = FenceStore.open(from, LOOKUP_ONLY);
  if (!store.expiringFences().some((f) => store.expiresAtMs(f) <= nowMs))
    return { descriptor: from, skippedEdits: [], expiredFences: [] };
  const due = leaveOutExpired(liveFences(store), nowMs);
  return { descriptor: buildFenceStore(due, store.generation + 1), skippedEdits: [], expiredFences: due.expired };
}

/**
 * Loads a fence file (or validates a GeoJSON value: only its structured clone runs on the calling thread) into a
 * store of `generation` on a worker thread of its own; resolves with the store's descriptor (its buffers are shared,
 * not copied), the stored edits skipped and the fences left out as expired; rejects with the loader's error (a
 * FenceValidationError's message for a file that fails validation).
 */
export function loadFenceStoreOffThread(request: FenceLoadRequest): Promise<LoadedFences> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./fence-load-thread.js', import.meta.url), {
      workerData: request,
      name: 'fence loader',
    });
    let answered = false;
    worker.once('message', (answer: FenceLoadAnswer) => {
      answered = true;
      if (answer.ok)
        resolve({
          descriptor: answer.descriptor,
          skippedEdits: answer.skippedEdits,
          expiredFences: answer.expiredFences,
        });
      // A validation failure comes back as the FenceValidationError it was, every problem listed.
      else reject(answer.problems !== null ? new FenceValidationError(answer.problems) : new Error(answer.message));
    });
    worker.once('error', (err) => {
      answered = true;
      reject(err);
    });
    worker.once('exit', (code) => {
      if (!answered) reject(new Error(`fence loader thread exited with code ${code} before answering`));
    });
  });
}

/** The loader thread's answer for an error thrown while loading. */
export function failedLoad(err: unknown): FenceLoadAnswer {
  return {
    ok: false,
    message: err instanceof Error ? err.message : String(err),
    problems: err instanceof FenceValidationError ? [...err.errors] : null,
  };
}
