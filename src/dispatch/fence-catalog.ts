/**
 * The dispatcher's fence catalog: one small integer handle per fence identity (id and tags), stable for the
 * dispatcher's lifetime whatever reloads happen, so a queued or spilled trigger names its fence by what receivers know
 * rather than by a store generation and index that a reload retires.
 *
 * The first time a (generation, index) is seen, the catalog asks `FenceNames` for the fence's id and tags and interns
 * them (this allocates); every later lookup is two array reads. Records of an earlier run are interned by id and tags
 * (`intern`). Per handle it keeps what the sinks and the durable records need: the id, the tags, their UTF-8 bytes and
 * the JSON fragment `"fenceId":...,"tags":[...]`.
 *
 * Dispatcher thread only.
 */

/** Where the catalog learns the fences of a store generation. */
export interface FenceNames {
  /** The id of fence `index` of `generation`, or undefined when that generation or index is unknown. */
  fenceId(generation: number, index: number): string | undefined;
  /** Its tags. */
  fenceTags(generation: number, index: number): readonly string[];
}

/** Generations whose index -> handle tables are kept (the oldest goes when another appears). */
const KEPT_GENERATIONS = 8;
/** Table cell meaning "not looked up yet". */
const UNKNOWN = -1;
/** Table cell meaning "the names do not know this fence". */
const MISSING = -2;

const encoder = new TextEncoder();

/** Interned fence identities (see the module comment). */
export class FenceCatalog {
  private readonly names: FenceNames;
  private readonly byKey = new Map<string, number>();
  private readonly ids: string[] = [];
  private readonly tagLists: (readonly string[])[] = [];
  private readonly idBytesList: Uint8Array[] = [];
  private readonly tagsBytesList: Uint8Array[] = [];
  private readonly jsonList: string[] = [];
  private readonly tables = new Map<number, Int32Array>();
  private lastGeneration = Number.NaN;
  private lastTable: Int32Array = new Int32Array(0);

  /** `names` answers for the generations triggers arrive with. */
  constructor(names: FenceNames) {
    this.names = names;
  }

  /** Handles in the catalog. */
  get size(): number {
    return this.ids.length;
  }

  /**
   * Handle of fence `index` of `generation`, or -1 when the names do not know it. Allocation-free once the fence
   * has been seen.
   */
  handleOf(generation: number, index: number): number {
    let table = this.lastTable;
    if (generation !== this.lastGeneration) {
      table = this.tables.get(generation) ?? this.newTable(generation, index + 1);
      this.lastGeneration = generation;
      this.lastTable = table;
    }
    if (index >= table.length) {
      const grown = new Int32Array(Math.max(index + 1, table.length * 2)).fill(UNKNOWN);
      grown.set(table);
      this.tables.set(generation, grown);
      this.lastTable = table = grown;
    }
    let h = table[index]!;
    if (h === UNKNOWN) {
      const id = this.names.fenceId(generation, index);
      h = id === undefined ? MISSING : this.intern(id, this.names.fenceTags(generation, index));
      table[index] = h;
    }
    return h === MISSING ? -1 : h;
  }

  /** Handle of the fence with this id and these tags, created when new (allocates then). */
  intern(id: string, tags: readonly string[]): number {
    const tagsJson = JSON.stringify(tags);
    const key = `${id}\u0000${tagsJson}`;
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    const h = this.ids.length;
    this.byKey.set(key, h);
    this.ids.push(id);
    this.tagLists.push(Object.freeze([...tags]));
    this.idBytesList.push(encoder.encode(id));
    this.tagsBytesList.push(tags.length === 0 ? new Uint8Array(0) : encoder.encode(tagsJson));
    this.jsonList.push(`"fenceId":${JSON.stringify(id)},"tags":${tagsJson}`);
    return h;
  }

  /** The fence's id. */
  id(handle: number): string {
    return this.ids[handle]!;
  }

  /** The fence's tags (frozen). */
  tags(handle: number): readonly string[] {
    return this.tagLists[handle]!;
  }

  /** UTF-8 bytes of the id. */
  idBytes(handle: number): Uint8Array {
    return this.idBytesList[handle]!;
  }

  /** UTF-8 bytes of the tags as a JSON array (empty when there are none). */
  tagsBytes(handle: number): Uint8Array {
    return this.tagsBytesList[handle]!;
  }

  /** The JSON members `"fenceId":...,"tags":[...]`. */
  json(handle: number): string {
    return this.jsonList[handle]!;
  }

  /** Forgets the index -> handle table of `generation` (handles stay valid). */
  forgetGeneration(generation: number): void {
    this.tables.delete(generation);
    if (generation === this.lastGeneration) this.lastGeneration = Number.NaN;
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
}
