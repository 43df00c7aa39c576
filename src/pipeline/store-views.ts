/**
 * How each thread opens a fence-store generation. The containment workers open it with the per-thread accelerators
 * (fence grid and edge bands: megabytes per thread and tens to hundreds of ms to build); the threads that only name
 * fences or ask whether a ping is near a compliance fence open it without them.
 */
import type { FenceStoreOpenOptions } from '../fences/store.js';

/** Open options for the ingest thread, the dispatcher thread and the main thread: lookups only, no accelerators. */
export const LOOKUP_ONLY_STORE: FenceStoreOpenOptions = Object.freeze({ grid: false, edgeBands: false });
