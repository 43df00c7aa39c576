/**
 * The in-process input backlog: what the main thread has posted to the ingest thread (`router.ingest()` bytes,
 * `router.push()` points, forwarded stdin bytes) and the ingest thread has not yet fed to the edge. It lives in shared
 * Int32 cells of the pipeline region (CTL_INPUT_* and CTL_STDIN_* of src/shm/layout.ts), so the main thread knows the
 * backlog at once, without a message, when a caller asks whether to go on.
 *
 * Protocol: the main thread `Atomics.add`s what it posts and compares the result with the high-water mark (at or
 * above it the caller is told to wait). The ingest thread `Atomics.sub`s what it feeds. A waiting main thread raises
 * the cell's waiting flag, then reads the backlog again (a feed between its first read and the flag would otherwise
 * go unseen); the ingest thread, after a feed that brings the backlog to the low-water mark (half the high-water
 * mark), takes the flag down with one compare-exchange and posts one wake-up message. So there is one message per
 * wait, not per feed, and none when nobody waits.
 *
 * One instance per thread over the same region; the main-thread methods and the ingest-thread methods are marked.
 * Nothing here allocates.
 */
import {
  CTL_INPUT_BYTES_I32,
  CTL_INPUT_POINTS_I32,
  CTL_INPUT_WAITING_I32,
  CTL_STDIN_BYTES_I32,
  CTL_STDIN_WAITING_I32,
} from '../shm/layout.js';
import type { PipelineRegion } from '../shm/pipeline-region.js';

/** High-water marks of the backlog. */
export interface InputHighWaterMarks {
  /** In-process bytes (`ingest()`), and separately forwarded stdin bytes. */
  bytes: number;
  /** In-process points (`push()`). */
  points: number;
}

/** Largest backlog a cell can count, bytes: the cells are Int32. */
export const MAX_INPUT_BACKLOG_BYTES = 0x7fff_ffff;

/** The backlog cells and their marks. */
export class InputBacklog {
  /** High-water mark of in-process and of stdin bytes. */
  readonly highWaterBytes: number;
  /** High-water mark of in-process points. */
  readonly highWaterPoints: number;
  /** Low-water mark of in-process and of stdin bytes: half the high-water mark (where waiters are woken). */
  readonly lowWaterBytes: number;
  /** Low-water mark of in-process points: half the high-water mark. */
  readonly lowWaterPoints: number;
  private readonly i32: Int32Array;

  /** Wraps the backlog cells of `pipeline` (any thread) with the marks in force; throws naming a bad mark. */
  constructor(pipeline: PipelineRegion, marks: InputHighWaterMarks) {
    if (!(Number.isInteger(marks.bytes) && marks.bytes >= 1))
      throw new RangeError(`marks.bytes must be an integer >= 1, got ${String(marks.bytes)}`);
    if (!(Number.isInteger(marks.points) && marks.points >= 1))
      throw new RangeError(`marks.points must be an integer >= 1, got ${String(marks.points)}`);
    this.i32 = pipeline.i32;
    this.highWaterBytes = marks.bytes;
    this.highWaterPoints = marks.points;
    this.lowWaterBytes = Math.floor(marks.bytes / 2);
    this.lowWaterPoints = Math.floor(marks.points / 2);
  }

  /** In-process bytes posted and not yet fed. */
  inputBytes(): number {
    return Atomics.load(this.i32, CTL_INPUT_BYTES_I32);
  }

  /** In-process points posted and not yet offered. */
  inputPoints(): number {
    return Atomics.load(this.i32, CTL_INPUT_POINTS_I32);
  }

  /** Stdin bytes forwarded and not yet fed. */
  stdinBytes(): number {
    return Atomics.load(this.i32, CTL_STDIN_BYTES_I32);
  }

  // ------------------------------------------------------------------------------------------------------------
  // Main thread
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Counts `bytes` and `points` posted in-process. Returns true while the backlog stays below both high-water marks,
   * false when the caller should wait (as `Writable.write()` does).
   */
  postInput(bytes: number, points: number): boolean {
    const b = bytes === 0 ? this.inputBytes() : Atomics.add(this.i32, CTL_INPUT_BYTES_I32, bytes) + bytes;
    const p = points === 0 ? this.inputPoints() : Atomics.add(this.i32, CTL_INPUT_POINTS_I32, points) + points;
    return b < this.highWaterBytes && p < this.highWaterPoints;
  }

  /** Counts forwarded stdin bytes; returns false when stdin should pause. */
  postStdin(bytes: number): boolean {
    return Atomics.add(this.i32, CTL_STDIN_BYTES_I32, bytes) + bytes < this.highWaterBytes;
  }

  /** True when the in-process backlog is at or below its low-water marks. */
  inputDrained(): boolean {
    return this.inputBytes() <= this.lowWaterBytes && this.inputPoints() <= this.lowWaterPoints;
  }

  /** True when the stdin backlog is at or below its low-water mark. */
  stdinDrained(): boolean {
    return this.stdinBytes() <= this.lowWaterBytes;
  }

  /**
   * Asks for a wake-up when the in-process backlog reaches its low-water marks. Returns true when it already has (no
   * wake-up comes then); false when one will come as an 'input-drained' event.
   */
  awaitInput(): boolean {
    Atomics.store(this.i32, CTL_INPUT_WAITING_I32, 1);
    // Read again after raising the flag: a feed that ran between the caller's read and the flag saw no flag.
    if (!this.inputDrained()) return false;
    Atomics.store(this.i32, CTL_INPUT_WAITING_I32, 0);
    return true;
  }

  /** awaitInput() for stdin ('stdin-drained' event). */
  awaitStdin(): boolean {
    Atomics.store(this.i32, CTL_STDIN_WAITING_I32, 1);
    if (!this.stdinDrained()) return false;
    Atomics.store(this.i32, CTL_STDIN_WAITING_I32, 0);
    return true;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Ingest thread
  // ------------------------------------------------------------------------------------------------------------

  /**
   * Takes fed in-process bytes and points off the backlog. Returns true when the main thread waits and the backlog
   * has reached its low-water marks: the caller posts one 'input-drained' event (the flag is down already).
   */
  fedInput(bytes: number, points: number): boolean {
    if (bytes !== 0) Atomics.sub(this.i32, CTL_INPUT_BYTES_I32, bytes);
    if (points !== 0) Atomics.sub(this.i32, CTL_INPUT_POINTS_I32, points);
    if (Atomics.load(this.i32, CTL_INPUT_WAITING_I32) === 0 || !this.inputDrained()) return false;
    // Exactly one feed wins the flag: one wake-up per wait.
    return Atomics.compareExchange(this.i32, CTL_INPUT_WAITING_I32, 1, 0) === 1;
  }

  /** fedInput() for stdin ('stdin-drained' event). */
  fedStdin(bytes: number): boolean {
    if (bytes !== 0) Atomics.sub(this.i32, CTL_STDIN_BYTES_I32, bytes);
    if (Atomics.load(this.i32, CTL_STDIN_WAITING_I32) === 0 || !this.stdinDrained()) return false;
    return Atomics.compareExchange(this.i32, CTL_STDIN_WAITING_I32, 1, 0) === 1;
  }
}
