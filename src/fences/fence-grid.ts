/**
 * A per-thread uniform grid over fence bounding boxes: the fast path of the candidate query for city-like layouts.
 *
 * The shared flatbush index stays the store's index (and the fallback); on a city of small fences a point query
 * walks about eight of its nodes (64 box tests at nodeSize 8), while a grid cell holds a handful of boxes. Each
 * thread builds its grid when it opens a store (plain ArrayBuffers, derived from the shared fence records; nothing
 * in shared memory changes). The grid declines (`build` returns null) when the layout does not suit it: a cell an
 * entry shares with, on average, more than MAX_MEAN_OCCUPANCY entries (fences clustered in a few places of a large
 * extent), or more than MAX_OVERSIZE fences spanning over MAX_CELLS_PER_FENCE cells.
 *
 * Cells: cell size per axis = the median fence box size on that axis (so a typical box spans 1-2 cells per axis),
 * enlarged so there are at most CELLS_PER_FENCE * fenceCount cells. Each cell lists the fences whose box meets it,
 * in fence index order, with the box inline (one contiguous run per cell). Oversize fences sit in a short list that
 * every query scans. A box query spanning several cells reports a fence only from the cell holding the corner
 * (max(query minX, fence minX), max(query minY, fence minY)), which lies in both boxes: no duplicates, no scratch.
 *
 * All queries are allocation-free and return exactly the fences whose box intersects or touches the query box (the
 * same set as the flatbush walk; the order differs: cell by cell, fence index order within a cell).
 */
import { FENCE_MAX_X_F64, FENCE_MAX_Y_F64, FENCE_MIN_X_F64, FENCE_MIN_Y_F64, FENCE_STRIDE_F64 } from '../shm/layout.js';

/** Grid cells per fence, at most. */
const CELLS_PER_FENCE = 4;
/** A fence spanning more cells than this goes to the oversize list. */
const MAX_CELLS_PER_FENCE = 64;
/** The grid declines when more fences than this are oversize. */
const MAX_OVERSIZE = 32;
/** The grid declines when an entry's cell holds more than this many entries on average. */
const MAX_MEAN_OCCUPANCY = 16;

function median(values: Float64Array): number {
  const sorted = Float64Array.from(values).sort();
  return sorted.length === 0 ? 0 : sorted[sorted.length >> 1]!;
}

/** A uniform grid over the boxes of one store's fences (one per thread; see the file comment). */
export class FenceGrid {
  private readonly originX: number;
  private readonly originY: number;
  private readonly endX: number;
  private readonly endY: number;
  private readonly invCellX: number;
  private readonly invCellY: number;
  private readonly nx: number;
  private readonly ny: number;
  /** cellStart[c] .. cellStart[c + 1]: cell c's entries. */
  private readonly cellStart: Int32Array;
  /** Fence index of each entry. */
  private readonly entryFence: Int32Array;
  /** Box of each entry (minX, minY, maxX, maxY). */
  private readonly entryBox: Float64Array;
  /** Fences too large for the grid, scanned by every query. */
  private readonly oversize: Int32Array;
  private readonly fenceF64: Float64Array;
  /** Grid entries (fence-cell pairs). */
  readonly entryCount: number;
  /** Mean number of entries in the cell of an entry (the expected candidates tested per point query near fences). */
  readonly meanOccupancy: number;

  private constructor(fenceF64: Float64Array, fenceCount: number, cellX: number, cellY: number, extent: Float64Array) {
    this.fenceF64 = fenceF64;
    this.originX = extent[0]!;
    this.originY = extent[1]!;
    this.endX = extent[2]!;
    this.endY = extent[3]!;
    this.invCellX = 1 / cellX;
    this.invCellY = 1 / cellY;
    this.nx = Math.max(1, Math.min(0x7fff, Math.ceil((this.endX - this.originX) * this.invCellX)));
    this.ny = Math.max(1, Math.min(0x7fff, Math.ceil((this.endY - this.originY) * this.invCellY)));
    const cells = this.nx * this.ny;
    const counts = new Int32Array(cells + 1);
    const oversize: number[] = [];
    for (let f = 0; f < fenceCount; f++) {
      const b = f * FENCE_STRIDE_F64;
      const x0 = this.cellX(fenceF64[b + FENCE_MIN_X_F64]!);
      const x1 = this.cellX(fenceF64[b + FENCE_MAX_X_F64]!);
      const y0 = this.cellY(fenceF64[b + FENCE_MIN_Y_F64]!);
      const y1 = this.cellY(fenceF64[b + FENCE_MAX_Y_F64]!);
      if ((x1 - x0 + 1) * (y1 - y0 + 1) > MAX_CELLS_PER_FENCE) {
        oversize.push(f);
        continue;
      }
      for (let y = y0; y <= y1; y++) for (let x = x0; x <= x1; x++) counts[y * this.nx + x]!++;
    }
    this.oversize = Int32Array.from(oversize);
    const cellStart = new Int32Array(cells + 1);
    let total = 0;
    let squares = 0;
    for (let c = 0; c < cells; c++) {
      cellStart[c] = total;
      total += counts[c]!;
      squares += counts[c]! * counts[c]!;
    }
    cellStart[cells] = total;
    this.cellStart = cellStart;
    this.entryCount = total;
    this.meanOccupancy = total > 0 ? squares / total : 0;
    this.entryFence = new Int32Array(total);
    this.entryBox = new Float64Array(total * 4);
    // Second pass: fill each cell in fence index order (counts reused as fill cursors).
    counts.set(cellStart);
    for (let f = 0; f < fenceCount; f++) {
      const b = f * FENCE_STRIDE_F64;
      const x0 = this.cellX(fenceF64[b + FENCE_MIN_X_F64]!);
      const x1 = this.cellX(fenceF64[b + FENCE_MAX_X_F64]!);
      const y0 = this.cellY(fenceF64[b + FENCE_MIN_Y_F64]!);
      const y1 = this.cellY(fenceF64[b + FENCE_MAX_Y_F64]!);
      if ((x1 - x0 + 1) * (y1 - y0 + 1) > MAX_CELLS_PER_FENCE) continue;
      for (let y = y0; y <= y1; y++) {
        for (let x = x0; x <= x1; x++) {
          const e = counts[y * this.nx + x]!++;
          this.entryFence[e] = f;
          for (let k = 0; k < 4; k++) this.entryBox[e * 4 + k] = fenceF64[b + FENCE_MIN_X_F64 + k]!;
        }
      }
    }
  }

  /**
   * Builds the grid over the first `fenceCount` fence records (FENCE_MIN_X_F64 .. FENCE_MAX_Y_F64 must be adjacent),
   * or returns null when the layout does not suit a grid (see the file comment). Allocates.
   */
  static build(fenceF64: Float64Array, fenceCount: number): FenceGrid | null {
    if (fenceCount === 0) return null;
    const widths = new Float64Array(fenceCount);
    const heights = new Float64Array(fenceCount);
    const extent = Float64Array.of(Infinity, Infinity, -Infinity, -Infinity);
    for (let f = 0; f < fenceCount; f++) {
      const b = f * FENCE_STRIDE_F64;
      const minX = fenceF64[b + FENCE_MIN_X_F64]!;
      const minY = fenceF64[b + FENCE_MIN_Y_F64]!;
      const maxX = fenceF64[b + FENCE_MAX_X_F64]!;
      const maxY = fenceF64[b + FENCE_MAX_Y_F64]!;
      widths[f] = maxX - minX;
      heights[f] = maxY - minY;
      if (minX < extent[0]!) extent[0] = minX;
      if (minY < extent[1]!) extent[1] = minY;
      if (maxX > extent[2]!) extent[2] = maxX;
      if (maxY > extent[3]!) extent[3] = maxY;
    }
    const spanX = extent[2]! - extent[0]!;
    const spanY = extent[3]! - extent[1]!;
    if (!(spanX > 0 && spanY > 0)) return null;
    let cellX = median(widths);
    let cellY = median(heights);
    if (!(cellX > 0)) cellX = spanX;
    if (!(cellY > 0)) cellY = spanY;
    // Cap the cell count: enlarge both cell sides by the same factor.
    const cells = Math.ceil(spanX / cellX) * Math.ceil(spanY / cellY);
    const maxCells = CELLS_PER_FENCE * fenceCount;
    if (cells > maxCells) {
      const scale = Math.sqrt(cells / maxCells);
      cellX *= scale;
      cellY *= scale;
    }
    const grid = new FenceGrid(fenceF64, fenceCount, cellX, cellY, extent);
    if (grid.oversize.length > MAX_OVERSIZE || grid.meanOccupancy > MAX_MEAN_OCCUPANCY) return null;
    return grid;
  }

  /**
   * Column of longitude x, clamped to the grid (monotone in x, so box spans and corners agree). Build time only;
   * searchBoxInto has the same expression written out.
   */
  private cellX(x: number): number {
    const v = (x - this.originX) * this.invCellX;
    // For v >= 0, truncation is floor; v >= nx exactly when floor(v) >= nx.
    return v < 0 ? 0 : v >= this.nx ? this.nx - 1 : v | 0;
  }

  /** Row of latitude y, clamped to the grid. */
  private cellY(y: number): number {
    const v = (y - this.originY) * this.invCellY;
    return v < 0 ? 0 : v >= this.ny ? this.ny - 1 : v | 0;
  }

  /**
   * Writes the indices of fences whose box intersects or touches box[at .. at + 3] (minX, minY, maxX, maxY) into
   * `out` (at most out.length) and returns how many there are (may exceed out.length). Allocation-free.
   */
  searchBoxInto(box: Float64Array, at: number, out: Int32Array): number {
    const minX = box[at]!;
    const minY = box[at + 1]!;
    const maxX = box[at + 2]!;
    const maxY = box[at + 3]!;
    const capacity = out.length;
    let count = 0;
    // Written so that NaN fails: a box off the grid meets no grid entry (oversize fences are still scanned).
    if (minX <= this.endX && maxX >= this.originX && minY <= this.endY && maxY >= this.originY) {
      const entryBox = this.entryBox;
      const entryFence = this.entryFence;
      const cellStart = this.cellStart;
      const nx = this.nx;
      const ny = this.ny;
      const originX = this.originX;
      const originY = this.originY;
      const invX = this.invCellX;
      const invY = this.invCellY;
      // cellX / cellY written out: a double passed to a call V8 does not inline is boxed.
      let v = (minX - originX) * invX;
      const x0 = v < 0 ? 0 : v >= nx ? nx - 1 : v | 0;
      v = (maxX - originX) * invX;
      const x1 = v < 0 ? 0 : v >= nx ? nx - 1 : v | 0;
      v = (minY - originY) * invY;
      const y0 = v < 0 ? 0 : v >= ny ? ny - 1 : v | 0;
      v = (maxY - originY) * invY;
      const y1 = v < 0 ? 0 : v >= ny ? ny - 1 : v | 0;
      const single = x0 === x1 && y0 === y1;
      for (let y = y0; y <= y1; y++) {
        for (let x = x0; x <= x1; x++) {
          const c = y * nx + x;
          const end = cellStart[c + 1]!;
          for (let e = cellStart[c]!; e < end; e++) {
            const p = e << 2;
            // One coordinate at a time: most entries fail the first comparison.
            if (maxX < entryBox[p]!) continue;
            if (maxY < entryBox[p + 1]!) continue;
            if (minX > entryBox[p + 2]!) continue;
            if (minY > entryBox[p + 3]!) continue;
            if (!single) {
              // Report once: from the cell holding the corner both boxes share.
              v = ((minX > entryBox[p]! ? minX : entryBox[p]!) - originX) * invX;
              if ((v < 0 ? 0 : v >= nx ? nx - 1 : v | 0) !== x) continue;
              v = ((minY > entryBox[p + 1]! ? minY : entryBox[p + 1]!) - originY) * invY;
              if ((v < 0 ? 0 : v >= ny ? ny - 1 : v | 0) !== y) continue;
            }
            if (count < capacity) out[count] = entryFence[e]!;
            count++;
          }
        }
      }
    }
    const oversize = this.oversize;
    const f64 = this.fenceF64;
    for (let k = 0; k < oversize.length; k++) {
      const f = oversize[k]!;
      const b = f * FENCE_STRIDE_F64;
      if (
        maxX < f64[b + FENCE_MIN_X_F64]! ||
        maxY < f64[b + FENCE_MIN_Y_F64]! ||
        minX > f64[b + FENCE_MAX_X_F64]! ||
        minY > f64[b + FENCE_MAX_Y_F64]!
      )
        continue;
      if (count < capacity) out[count] = f;
      count++;
    }
    return count;
  }
}
