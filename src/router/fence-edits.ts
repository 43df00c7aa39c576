/**
 * Live fence edits and fence expiry (main thread): `upsertFence` / `removeFence` build a new generation over the
 * store in force (store-edit.ts) and hand it to the router's swap, in the same one-at-a-time chain as reloads; an edit
 * that does not fit the store's headroom becomes a full build on the loader thread. Fences with an `expiresAt` are
 * removed at that time by the same path (one timer, set for the earliest).
 */
import type { LogLevel } from '../log/router-log.js';
import { performance } from 'node:perf_hooks';
import { loadFenceStoreOffThread, type FenceFileLimits } from '../fences/fence-file.js';
import { parseFence, type ParsedFence } from '../fences/parse.js';
import { editFenceStore, type FenceEdit } from '../fences/store-edit.js';
import type { StoredFenceEdit } from '../fences/stored-edits.js';
import { FenceStore } from '../fences/store.js';
import { LOOKUP_ONLY_STORE } from '../pipeline/store-views.js';
import type { FenceEditResult } from './api.js';

/** Longest a timer is set for (setTimeout's limit is 2^31 - 1 ms); a later expiry re-arms on firing. */
const MAX_TIMER_MS = 86_400_000;

/** A removal for the log: `removed, <n> EXIT(s), generation <g>`. */
function removedText(r: FenceEditResult): string {
  return `removed, ${r.exits} EXIT${r.exits === 1 ? '' : 's'}, generation ${r.generation}`;
}

/** What the editor works with: the router's store, its chain and its swap. */
export interface FenceEditHost {
  /** The generation in force. */
  current(): FenceStore;
  /** Runs `job` after every reload and edit queued before it (one at a time). */
  queue<T>(job: () => Promise<T>): Promise<T>;
  /** Swaps `next` in (throws when the router is draining); resolves with the EXITs written. */
  swap(next: FenceStore, oldToNew?: Int32Array): Promise<number>;
  /** Fence limits (the fences file's). */
  limits(): FenceFileLimits;
  /** Log line. */
  log(line: string, level?: LogLevel): void;
  /** Counts an edit that failed (validation or swap). */
  failed(): void;
  /** Counts an edit applied, and how long it took. */
  applied(elapsedMs: number): void;
  /** Keeps an applied edit for the next start; false when it is not kept (no journal, or a write error). */
  record(edit: StoredFenceEdit): boolean;
}

/** Live edits and expiry of one router's fences. */
export class FenceEditor {
  private expiryTimer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Ids whose expiry removal is queued. */
  private readonly expiring = new Set<string>();

  constructor(private readonly host: FenceEditHost) {}

  /** See Router.upsertFence. */
  upsert(feature: unknown): Promise<FenceEditResult> {
    const started = performance.now();
    let edit: { upsert: ParsedFence };
    try {
      edit = { upsert: parseFence(feature, this.host.limits()) };
    } catch (err) {
      this.host.failed();
      return Promise.reject(err);
    }
    const { id, expiresAtMs } = edit.upsert;
    // Decided when its turn comes: a reload or a full build queued before it may take long enough for it to pass.
    return this.host.queue(() =>
      expiresAtMs <= Date.now()
        ? this.removeExpired(id, expiresAtMs, started)
        : this.apply(edit, { upsert: feature }, started),
    );
  }

  /**
   * An upsert whose `expiresAt` has already passed: the fence would be in force for no time at all, so it is a
   * removal of the fence with that id (its stays end, as at its expiry), or nothing when there is none.
   */
  private async removeExpired(id: string, expiresAtMs: number, startedMs: number): Promise<FenceEditResult> {
    const r = await this.apply({ remove: id }, { remove: id }, startedMs);
    const what = r.action === 'removed' ? removedText(r) : 'not added';
    this.host.log(
      `fence ${JSON.stringify(id)} upserted with expiresAt ${new Date(expiresAtMs).toISOString()}, already passed: ${what}`,
    );
    return r;
  }

  /** See Router.removeFence. */
  remove(fenceId: string): Promise<FenceEditResult> {
    const started = performance.now();
    if (typeof fenceId !== 'string' || fenceId.length === 0) {
      return Promise.reject(new TypeError(`fenceId must be a non-empty string, got ${String(fenceId)}`));
    }
    return this.host.queue(() => this.apply({ remove: fenceId }, { remove: fenceId }, started));
  }

  /** Arms the expiry timer for the earliest expiring fence of the generation in force (after a load or an edit). */
  scheduleExpiry(): void {
    if (this.expiryTimer !== null) clearTimeout(this.expiryTimer);
    this.expiryTimer = null;
    if (this.closed) return;
    const store = this.host.current();
    let next = Infinity;
    for (const f of store.expiringFences()) {
      if (this.expiring.has(store.fenceId(f))) continue;
      const t = store.expiresAtMs(f);
      if (t < next) next = t;
    }
    if (next === Infinity) return;
    const delayMs = Math.min(MAX_TIMER_MS, Math.max(0, next - Date.now()));
    this.expiryTimer = setTimeout(() => this.expireDue(), delayMs);
    this.expiryTimer.unref();
  }

  /** Stops the expiry timer for good. */
  close(): void {
    this.closed = true;
    if (this.expiryTimer !== null) clearTimeout(this.expiryTimer);
    this.expiryTimer = null;
  }

  /** Queues the removal of every fence whose time has come. */
  private expireDue(): void {
    this.expiryTimer = null;
    if (this.closed) return;
    const store = this.host.current();
    const now = Date.now();
    for (const f of store.expiringFences()) {
      const id = store.fenceId(f);
      if (store.expiresAtMs(f) > now || this.expiring.has(id)) continue;
      this.expiring.add(id);
      // Decided again when its turn comes: an upsert or reload queued before it may have renewed the fence (a later
      // expiresAt, or none), and then it stays.
      this.host
        .queue(async () => {
          const current = this.host.current();
          const i = current.indexOfId(id);
          const atMs = i < 0 ? Infinity : current.expiresAtMs(i);
          if (!(atMs <= Date.now())) return null;
          return { r: await this.apply({ remove: id }, { remove: id }, performance.now()), atMs };
        })
        .then(
          (done) => {
            this.expiring.delete(id);
            if (done === null) {
              this.scheduleExpiry();
              return;
            }
            const { r, atMs } = done;
            if (r.action === 'removed') {
              this.host.log(
                `fence ${JSON.stringify(id)} expired (expiresAt ${new Date(atMs).toISOString()}): ${removedText(r)}`,
              );
            }
          },
          (err: unknown) => {
            this.expiring.delete(id);
            if (!this.closed)
              this.host.log(`fence ${JSON.stringify(id)} expired but was not removed: ${String(err)}`, 'error');
          },
        );
    }
    this.scheduleExpiry();
  }

  /** Applies `edit` (`stored`: the same edit as the journal keeps it) as a new generation. */
  private async apply(edit: FenceEdit, stored: StoredFenceEdit, startedMs: number): Promise<FenceEditResult> {
    const current = this.host.current();
    const fenceId = 'upsert' in edit ? edit.upsert.id : edit.remove;
    const generation = current.generation + 1;
    let made: ReturnType<typeof editFenceStore>;
    try {
      made = editFenceStore(current, edit, generation);
    } catch (err) {
      this.host.failed();
      throw err;
    }
    if (made === null) {
      return {
        fenceId,
        action: 'absent',
        generation: current.generation,
        fenceCount: current.liveFenceCount,
        exits: 0,
        fullBuild: false,
        persisted: false,
        elapsedMs: performance.now() - startedMs,
      };
    }
    let next: FenceStore;
    let oldToNew: Int32Array | undefined;
    let action: FenceEditResult['action'];
    const fullBuild = made === 'no-room';
    try {
      if (made === 'no-room') {
        action = 'upsert' in edit ? (current.indexOfId(fenceId) >= 0 ? 'replaced' : 'created') : 'removed';
        const { descriptor } = await loadFenceStoreOffThread({
          compact: { from: current.descriptor, edit },
          limits: this.host.limits(),
          generation,
        });
        next = FenceStore.open(descriptor, LOOKUP_ONLY_STORE);
      } else {
        next = FenceStore.open(made.descriptor, LOOKUP_ONLY_STORE);
        oldToNew = made.oldToNew;
        action = made.action;
      }
    } catch (err) {
      this.host.failed();
      throw err;
    }
    let exits: number;
    try {
      exits = await this.host.swap(next, oldToNew);
    } catch (err) {
      this.host.failed();
      throw err;
    }
    const persisted = this.host.record(stored);
    const elapsedMs = performance.now() - startedMs;
    this.host.applied(elapsedMs);
    this.scheduleExpiry();
    return {
      fenceId,
      action,
      generation: next.generation,
      fenceCount: next.liveFenceCount,
      exits,
      fullBuild,
      persisted,
      elapsedMs,
    };
  }
}
