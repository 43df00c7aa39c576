/**
 * Subscriptions and routing: which downstreams a trigger record goes to.
 *
 * A downstream subscribes by fence ids and/or fence tags (none: every fence), trigger types (none: all) and lanes
 * (none: all). `route` answers with a bit mask of downstreams (bit d = downstream d; at most 31). Per fence-store
 * generation, the fence part of the answer is cached in an Int32Array indexed by fence index, filled the first time a
 * fence is seen (that first sight asks the namer for the fence's id and tags, and allocates); every later `route` is
 * a few array reads and allocates nothing.
 */
import { LANE_COUNT, TRIGGER_TYPE_COUNT, type Lane, type TriggerType } from '../shm/layout.js';
import type { TriggerNamer } from './sinks/format.js';

/** Most downstreams one dispatcher routes to (bits of a positive Int32 mask). */
export const MAX_DOWNSTREAMS = 31;

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

/** Generations whose fence tables are kept (older ones are dropped when a new one appears). */
const KEPT_GENERATIONS = 4;
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
  private readonly tables = new Map<number, Int32Array>();
  private lastGeneration = NaN;
  private lastTable: Int32Array = new Int32Array(0);
  private readonly namer: TriggerNamer;

  /** One subscription per downstream (undefined: everything). */
  constructor(subscriptions: readonly (Subscription | undefined)[], namer: TriggerNamer) {
    if (subscriptions.length > MAX_DOWNSTREAMS) {
      throw new RangeError(`downstreams must number at most ${MAX_DOWNSTREAMS}, got ${subscriptions.length}`);
    }
    this.namer = namer;
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
        if (s?.types === undefined || s.types.length === 0 || s.types.includes(t as TriggerType)) this.typeMasks[t] |= bit;
      }
      for (let l = 0; l < LANE_COUNT; l++) {
        if (s?.lanes === undefined || s.lanes.length === 0 || s.lanes.includes(l as Lane)) this.laneMasks[l] |= bit;
      }
    });
    this.anyFenceMask = anyFence;
  }

  /** Mask of downstreams subscribed to a trigger of `type` in `lane` on fence (`generation`, `fenceIndex`). */
  route(type: number, lane: number, generation: number, fenceIndex: number): number {
    const byKind = this.typeMasks[type]! & this.laneMasks[lane]!;
    if (byKind === 0) return 0;
    const filtered = byKind & ~this.anyFenceMask;
    if (filtered === 0) return byKind;
    return (byKind & this.anyFenceMask) | (filtered & this.fenceMask(generation, fenceIndex));
  }

  private fenceMask(generation: number, fenceIndex: number): number {
    let table = this.lastTable;
    if (generation !== this.lastGeneration) {
      table = this.tables.get(generation) ?? this.newTable(generation, fenceIndex + 1);
      this.lastGeneration = generation;
      this.lastTable = table;
    }
    if (fenceIndex >= table.length) {
      const grown = new Int32Array(Math.max(fenceIndex + 1, table.length * 2)).fill(UNKNOWN);
      grown.set(table);
      this.tables.set(generation, grown);
      this.lastTable = table = grown;
    }
    let m = table[fenceIndex]!;
    if (m === UNKNOWN) {
      m = this.compute(generation, fenceIndex);
      table[fenceIndex] = m;
    }
    return m;
  }

  private newTable(generation: number, size: number): Int32Array {
    if (this.tables.size >= KEPT_GENERATIONS) {
      let oldest = Infinity;
      for (const g of this.tables.keys()) if (g < oldest) oldest = g;
      this.tables.delete(oldest);
    }
    const t = new Int32Array(Math.max(64, size)).fill(UNKNOWN);
    this.tables.set(generation, t);
    return t;
  }

  private compute(generation: number, fenceIndex: number): number {
    const id = this.namer.fenceId(generation, fenceIndex);
    const tags = this.namer.fenceTags(generation, fenceIndex);
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
