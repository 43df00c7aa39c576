/**
 * Subscriptions and routing: which downstreams a trigger record goes to.
 *
 * A downstream subscribes by fence ids and/or fence tags (none: every fence), trigger types (none: all) and lanes
 * (none: all). `route` answers with a bit mask of downstreams (bit d = downstream d; at most 31). The fence part of
 * the answer is cached per fence-catalog handle, computed the first time a fence is seen (allocates then); every
 * later `route` is a few array reads and allocates nothing.
 */
import { LANE_COUNT, TRIGGER_TYPE_COUNT, type Lane, type TriggerType } from '../shm/layout.js';
import type { FenceCatalog } from './fence-catalog.js';

/** Most downstreams one dispatcher routes to (bits of a positive Int32 mask). */
const MAX_DOWNSTREAMS = 31;

/** What a downstream wants. Empty or absent lists mean "all". */
export interface Subscription {
  /** Fence ids (as the namer names them). */
  fenceIds?: readonly string[];
  /** Fence tags: a fence carrying any of them matches. */
  tags?: readonly string[];
  /** Trigger types. */
  types?: readonly TriggerType[];
  /** Lanes. */
  lanes?: readonly Lane[];
}

/** Cached value meaning "not computed yet". */
const UNKNOWN = -1;

/** Routes trigger records to downstream masks (see the module comment). Dispatcher thread only. */
export class TriggerRouter {
  private readonly fenceIdSets: (ReadonlySet<string> | null)[];
  private readonly tagSets: (ReadonlySet<string> | null)[];
  /** Downstreams with no fence/tag filter. */
  private readonly anyFenceMask: number;
  private readonly typeMasks = new Int32Array(TRIGGER_TYPE_COUNT);
  private readonly laneMasks = new Int32Array(LANE_COUNT);
  /** Fence part of the answer by fence handle. */
  private fenceMasks = new Int32Array(64).fill(UNKNOWN);
  private readonly catalog: FenceCatalog;

  /** One subscription per downstream (undefined: everything); fences are named through `catalog`. */
  constructor(subscriptions: readonly (Subscription | undefined)[], catalog: FenceCatalog) {
    if (subscriptions.length > MAX_DOWNSTREAMS) {
      throw new RangeError(`downstreams must number at most ${MAX_DOWNSTREAMS}, got ${subscriptions.length}`);
    }
    this.catalog = catalog;
    this.fenceIdSets = [];
    this.tagSets = [];
    let anyFence = 0;
    subscriptions.forEach((s, d) => {
      const bit = 1 << d;
      const ids = s?.fenceIds !== undefined && s.fenceIds.length > 0 ? new Set(s.fenceIds) : null;
      const tags = s?.tags !== undefined && s.tags.length > 0 ? new Set(s.tags) : null;
      this.fenceIdSets.push(ids);
      this.tagSets.push(tags);
      if (ids === null && tags === null) anyFence |= bit;
      for (let t = 0; t < TRIGGER_TYPE_COUNT; t++) {
        if (s?.types === undefined || s.types.length === 0 || s.types.includes(t as TriggerType))
          this.typeMasks[t]! |= bit;
      }
      for (let l = 0; l < LANE_COUNT; l++) {
        if (s?.lanes === undefined || s.lanes.length === 0 || s.lanes.includes(l as Lane)) this.laneMasks[l]! |= bit;
      }
    });
    this.anyFenceMask = anyFence;
  }

  /** Mask of downstreams subscribed to a trigger of `type` in `lane` on the fence with catalog handle `handle`. */
  route(type: number, lane: number, handle: number): number {
    const byKind = this.typeMasks[type]! & this.laneMasks[lane]!;
    if (byKind === 0) return 0;
    const filtered = byKind & ~this.anyFenceMask;
    if (filtered === 0) return byKind;
    return (byKind & this.anyFenceMask) | (filtered & this.fenceMask(handle));
  }

  private fenceMask(handle: number): number {
    if (handle >= this.fenceMasks.length) {
      const grown = new Int32Array(Math.max(handle + 1, this.fenceMasks.length * 2)).fill(UNKNOWN);
      grown.set(this.fenceMasks);
      this.fenceMasks = grown;
    }
    let m = this.fenceMasks[handle]!;
    if (m === UNKNOWN) {
      m = this.compute(handle);
      this.fenceMasks[handle] = m;
    }
    return m;
  }

  private compute(handle: number): number {
    const id = this.catalog.id(handle);
    const tags = this.catalog.tags(handle);
    let m = 0;
    for (let d = 0; d < this.fenceIdSets.length; d++) {
      const ids = this.fenceIdSets[d]!;
      const want = this.tagSets[d]!;
      let hit = ids !== null && ids.has(id);
      if (!hit && want !== null) for (const t of tags) if (want.has(t)) hit = true;
      if (hit) m |= 1 << d;
    }
    return m;
  }
}
