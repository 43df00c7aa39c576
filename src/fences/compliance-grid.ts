/**
 * A coarse grid that answers most "is this ping near a compliance fence?" questions without walking the compliance
 * tree (ingest thread, per ping): each cell says whether any compliance box, widened by the margin, reaches it. A ping
 * outside the widened boxes' extent, or in a cell none reaches, is not near one; a ping in a reached cell is asked of
 * the tree as before, so the answer is exactly the tree's. Built on first use for a margin (once per fence generation
 * and thread), allocation-free after that.
 */
import { M_PER_DEG, RAD_PER_DEG } from './geometry.js';

/** Cells per side. */
const CELLS = 512;
/** How much wider than the query's widening the cells are marked (see the constructor). */
const WIDER = 1 + 1e-6;

/** The grid for one margin over one set of boxes (see the module comment). */
export class ComplianceGrid {
  private readonly reached = new Uint8Array(CELLS * CELLS);
  private minX = 0;
  private minY = 0;
  private maxX = -1;
  private maxY = -1;
  private cellW = 1;
  private cellH = 1;

  /**
   * Marks the cells reached by every box of `boxSets` (minX, minY, maxX, maxY each) widened by `marginM`: by the
   * margin in latitude, and in longitude by the widest the margin gets anywhere in the extent (nearest the pole).
   */
  constructor(
    boxSets: readonly Float64Array[],
    readonly marginM: number,
  ) {
    let minX = Infinity;
    let minY = Infinity;
    let maxX = -Infinity;
    let maxY = -Infinity;
    for (const b of boxSets) {
      for (let i = 0; i < b.length; i += 4) {
        if (b[i]! < minX) minX = b[i]!;
        if (b[i + 1]! < minY) minY = b[i + 1]!;
        if (b[i + 2]! > maxX) maxX = b[i + 2]!;
        if (b[i + 3]! > maxY) maxY = b[i + 3]!;
      }
    }
    if (!(minX <= maxX)) return; // no box: nothing is near
    // A hair wider than the query's own widening, so rounding at a cell's edge can only send a ping on to the tree.
    const dLat = (marginM / M_PER_DEG) * WIDER + 1e-9;
    const poleward = Math.min(90, Math.max(Math.abs(minY - dLat), Math.abs(maxY + dLat)));
    const cosLat = Math.cos(poleward * RAD_PER_DEG);
    // As the query widens: near the poles a metre spans any longitude.
    const dLon = cosLat > 1e-6 ? (marginM / (M_PER_DEG * cosLat)) * WIDER + 1e-9 : 360;
    this.minX = minX - dLon;
    this.minY = minY - dLat;
    this.maxX = maxX + dLon;
    this.maxY = maxY + dLat;
    this.cellW = (this.maxX - this.minX) / CELLS || 1;
    this.cellH = (this.maxY - this.minY) / CELLS || 1;
    for (const b of boxSets) {
      for (let i = 0; i < b.length; i += 4) {
        const c0 = this.col(b[i]! - dLon);
        const c1 = this.col(b[i + 2]! + dLon);
        const r0 = this.row(b[i + 1]! - dLat);
        const r1 = this.row(b[i + 3]! + dLat);
        for (let r = r0; r <= r1; r++) this.reached.fill(1, r * CELLS + c0, r * CELLS + c1 + 1);
      }
    }
  }

  /** False when no widened box can reach (lon, lat): the tree need not be asked. Allocation-free. */
  mayBeNear(lon: number, lat: number): boolean {
    // A NaN position goes on to the tree, which answers it as before.
    if (lon !== lon || lat !== lat) return true;
    if (lon < this.minX || lon > this.maxX || lat < this.minY || lat > this.maxY) return false;
    return this.reached[this.row(lat) * CELLS + this.col(lon)] === 1;
  }

  private col(x: number): number {
    const c = Math.floor((x - this.minX) / this.cellW);
    return c < 0 ? 0 : c >= CELLS ? CELLS - 1 : c;
  }

  private row(y: number): number {
    const r = Math.floor((y - this.minY) / this.cellH);
    return r < 0 ? 0 : r >= CELLS ? CELLS - 1 : r;
  }
}
