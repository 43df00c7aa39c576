/**
 * Consistent copies of cells another thread publishes under a sequence lock (see DISP_PUBLISH_VERSION_F64 in
 * layout.ts): the writer makes a version word odd, rewrites the cells and makes it even again; a reader copies the
 * cells between two equal even reads of the version. Used by the main thread at scrape and `stats()` time, so the
 * counters of one copy were all written by the same publish.
 */

/** Tries before a copy that keeps meeting a publish is taken as it is (a publish takes microseconds). */
const MAX_TRIES = 10_000;

/**
 * Copies `src` into `out` (same length) while the version word `versionI32` of `srcI32` (an Int32 view of the same
 * buffer) is even and unchanged across the copy. Returns true for a consistent copy; false when every try met a
 * publish (the last copy is left in `out`).
 */
export function copyPublished(src: Float64Array, srcI32: Int32Array, versionI32: number, out: Float64Array): boolean {
  for (let tries = 0; tries < MAX_TRIES; tries++) {
    const before = Atomics.load(srcI32, versionI32);
    if ((before & 1) !== 0) continue;
    out.set(src);
    if (Atomics.load(srcI32, versionI32) === before) return true;
  }
  out.set(src);
  return false;
}
