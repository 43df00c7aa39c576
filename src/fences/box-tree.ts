/**
 * Allocation-free traversal of a flatbush index opened zero-copy on a SharedArrayBuffer.
 *
 * flatbush's own `search()` allocates a queue and a result array per call; this walks the same packed tree
 * (boxes, indices and level bounds, as flatbush lays them out) with one preallocated Int32Array stack per view.
 * Each thread builds its own BoxTree (the stack is per thread); the tree data itself is shared.
 */
import Flatbush from 'flatbush';

/** anyInBox's output: it only counts. */
const NO_OUTPUT = new Int32Array(0);

/** A per-thread view of one shared flatbush index. */
export class BoxTree {
  /** The flatbush object opened with `Flatbush.from` over the shared buffer. */
  readonly index: Flatbush;
  private readonly boxes: Float64Array;
  private readonly indices: Uint16Array | Uint32Array;
  private readonly levelBounds: Int32Array;
  private readonly nodeSize4: number;
  private readonly numItems4: number;
  private readonly rootPos: number;
  private readonly rootLevel: number;
  /** DFS stack of (node position, level) pairs: at most nodeSize children pushed per level. */
  private readonly stack: Int32Array;
  /** Query box scratch for the double-argument entry points. */
  private readonly box = new Float64Array(4);

  /** Opens the index in `buffer` zero-copy (checks flatbush's header) and preallocates the traversal stack. */
  constructor(buffer: SharedArrayBuffer) {
    const index = Flatbush.from(buffer);
    if (!(index._boxes instanceof Float64Array)) throw new TypeError('fence index must store Float64 boxes');
    this.index = index;
    this.boxes = index._boxes;
    this.indices = index._indices;
    this.levelBounds = Int32Array.from(index._levelBounds);
    this.nodeSize4 = index.nodeSize * 4;
    this.numItems4 = index.numItems * 4;
    this.rootPos = this.boxes.length - 4;
    this.rootLevel = this.levelBounds.length - 1;
    this.stack = new Int32Array((this.levelBounds.length + 1) * index.nodeSize * 2 + 2);
  }

  /** Number of indexed boxes. */
  get size(): number {
    return this.numItems4 >> 2;
  }

  /** The indexed boxes themselves (minX, minY, maxX, maxY each, in the index's order): a view of the shared data. */
  itemBoxes(): Float64Array {
    return this.boxes.subarray(0, this.numItems4);
  }

  /**
   * Writes the ids of boxes intersecting or touching [minX, maxX] x [minY, maxY] into `out` (at most out.length)
   * and returns how many matched (which may exceed out.length). Allocates nothing.
   */
  searchInto(minX: number, minY: number, maxX: number, maxY: number, out: Int32Array): number {
    const box = this.box;
    box[0] = minX;
    box[1] = minY;
    box[2] = maxX;
    box[3] = maxY;
    return this.searchBoxInto(box, 0, out);
  }

  /** searchInto with the query box in box[at .. at + 3] (minX, minY, maxX, maxY): no double crosses a call. */
  searchBoxInto(box: Float64Array, at: number, out: Int32Array): number {
    return this.walk(box, at, out, 0, 0, 0);
  }

  /**
   * searchBoxInto writing from out[from] on, each id plus `idBase` (a second index appended after a first one's
   * results); returns how many matched. Allocates nothing.
   */
  searchBoxIntoFrom(box: Float64Array, at: number, out: Int32Array, from: number, idBase: number): number {
    return this.walk(box, at, out, from, idBase, 0);
  }

  /** True when any box intersects or touches the query box; stops at the first. Allocates nothing. */
  any(minX: number, minY: number, maxX: number, maxY: number): boolean {
    const box = this.box;
    box[0] = minX;
    box[1] = minY;
    box[2] = maxX;
    box[3] = maxY;
    return this.anyInBox(box, 0);
  }

  /** any() with the query box in box[at .. at + 3]. */
  anyInBox(box: Float64Array, at: number): boolean {
    return this.walk(box, at, NO_OUTPUT, 0, 0, 1) > 0;
  }

  /**
   * The depth-first walk behind searchBoxInto and anyInBox: writes matching ids (plus idBase) into `out` from
   * out[from] on (while there is room) and returns how many matched, stopping as soon as that count reaches
   * `stopAtCount` (0: never stop early).
   */
  private walk(
    box: Float64Array,
    at: number,
    out: Int32Array,
    from: number,
    idBase: number,
    stopAtCount: number,
  ): number {
    const minX = box[at]!;
    const minY = box[at + 1]!;
    const maxX = box[at + 2]!;
    const maxY = box[at + 3]!;
    const boxes = this.boxes;
    const indices = this.indices;
    const stack = this.stack;
    const levelBounds = this.levelBounds;
    const nodeSize4 = this.nodeSize4;
    const numItems4 = this.numItems4;
    const capacity = out.length;
    let sp = 0;
    let count = 0;
    let nodePos = this.rootPos;
    let level = this.rootLevel;
    for (;;) {
      const levelEnd = levelBounds[level]!;
      const end = nodePos + nodeSize4 < levelEnd ? nodePos + nodeSize4 : levelEnd;
      const isLeafLevel = nodePos < numItems4;
      for (let pos = nodePos; pos < end; pos += 4) {
        // One coordinate at a time: most children fail the first comparison.
        if (maxX < boxes[pos]!) continue;
        if (maxY < boxes[pos + 1]!) continue;
        if (minX > boxes[pos + 2]!) continue;
        if (minY > boxes[pos + 3]!) continue;
        const id = indices[pos >> 2]!;
        if (isLeafLevel) {
          if (from + count < capacity) out[from + count] = id + idBase;
          // anyInBox needs only the first match.
          if (++count === stopAtCount) return count;
        } else {
          stack[sp++] = id;
          stack[sp++] = level - 1;
        }
      }
      if (sp === 0) return count;
      level = stack[--sp]!;
      nodePos = stack[--sp]!;
    }
  }
}
