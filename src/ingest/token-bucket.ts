/**
 * Token bucket with lazy refill: two floats (the token level and the time it was last brought up to date), no timer.
 *
 * Tokens accrue at `refillPerSecond` up to `capacityTokens`; a take succeeds only when enough tokens are there.
 * Over any interval of length T the bucket hands out at most `capacityTokens + refillPerSecond * T` tokens.
 * Time is a parameter (ns on the router's monotonic clock, see `src/shm/clock.ts`): the bucket reads no clock, so a
 * simulator can drive it under virtual time. A clock that steps backwards is treated as standing still.
 *
 * Allocation-free; runs on whichever thread owns it (the ingest thread for admission).
 */

/** Nanoseconds per second. */
const NS_PER_SECOND = 1e9;
/** Index of the token level in the state array. */
const LEVEL = 0;
/** Index of the time (ns) the level was last brought up to date. */
const LEVEL_AT_NS = 1;
/** Index of the time (ns) of the call in progress, handed on to refillAt() in a cell rather than as an argument. */
const CALL_AT_NS = 2;

/** A lazily refilled token bucket; starts full. */
export class TokenBucket {
  /** Largest number of tokens the bucket holds (the burst it absorbs). */
  readonly capacityTokens: number;
  /** Tokens added per second of elapsed time. */
  readonly refillPerSecond: number;
  private readonly refillPerNs: number;
  /**
   * The two floats: [LEVEL] tokens available at time [LEVEL_AT_NS]. A Float64Array rather than two fields, so that
   * a level that starts as a small integer never makes V8 box later fractional levels (one allocation per refill).
   * [CALL_AT_NS] holds the time of the call in progress.
   */
  private readonly state = new Float64Array(3);

  /**
   * @param capacityTokens burst size, a finite number > 0
   * @param refillPerSecond refill rate, a finite number >= 0
   * @param nowNs the current time; the bucket starts full at this instant
   */
  constructor(capacityTokens: number, refillPerSecond: number, nowNs: number) {
    if (typeof capacityTokens !== 'number' || !Number.isFinite(capacityTokens) || capacityTokens <= 0) {
      throw new RangeError(`capacityTokens must be a finite number > 0, got ${String(capacityTokens)}`);
    }
    if (typeof refillPerSecond !== 'number' || !Number.isFinite(refillPerSecond) || refillPerSecond < 0) {
      throw new RangeError(`refillPerSecond must be a finite number >= 0, got ${String(refillPerSecond)}`);
    }
    if (typeof nowNs !== 'number' || !Number.isFinite(nowNs)) {
      throw new RangeError(`nowNs must be a finite number, got ${String(nowNs)}`);
    }
    this.capacityTokens = capacityTokens;
    this.refillPerSecond = refillPerSecond;
    this.refillPerNs = refillPerSecond / NS_PER_SECOND;
    this.state[LEVEL] = capacityTokens;
    this.state[LEVEL_AT_NS] = nowNs;
  }

  /** Takes `tokens` (default 1) if that many are available at `nowNs`; returns whether it did. */
  tryTake(nowNs: number, tokens = 1): boolean {
    this.state[CALL_AT_NS] = nowNs;
    const state = this.refillAt(this.state, CALL_AT_NS);
    const level = state[LEVEL]!;
    if (level >= tokens) {
      state[LEVEL] = level - tokens;
      return true;
    }
    return false;
  }

  /**
   * Same as `tryTake(timeCells[cellIndex], 1)`, for callers on an allocation-free path: V8 boxes a fractional double
   * passed to a call it does not inline (a 16-byte allocation per call), a typed-array cell it does not.
   */
  tryTakeOneAt(timeCells: Float64Array, cellIndex: number): boolean {
    const state = this.refillAt(timeCells, cellIndex);
    const level = state[LEVEL]!;
    if (level >= 1) {
      state[LEVEL] = level - 1;
      return true;
    }
    return false;
  }

  /** Puts back one token taken by the last tryTakeOneAt (the take was not used), up to the capacity. */
  giveBackOne(): void {
    this.state[LEVEL] = Math.min(this.capacityTokens, this.state[LEVEL]! + 1);
  }

  /** Tokens available at `nowNs` (brings the bucket up to date; takes nothing). */
  tokens(nowNs: number): number {
    this.state[CALL_AT_NS] = nowNs;
    return this.refillAt(this.state, CALL_AT_NS)[LEVEL]!;
  }

  /**
   * Brings the level up to the time in `timeCells[cellIndex]` and returns the state array. The time comes in a cell:
   * no double crosses this call, so it allocates nothing whether or not V8 inlines it.
   */
  private refillAt(timeCells: Float64Array, cellIndex: number): Float64Array {
    // Every field is read on every call, so optimised code never meets a property it has no feedback for.
    const nowNs = timeCells[cellIndex]!;
    const state = this.state;
    const capacityTokens = this.capacityTokens;
    const refillPerNs = this.refillPerNs;
    const elapsedNs = nowNs - state[LEVEL_AT_NS]!;
    // A clock that did not advance (or stepped back) adds nothing and does not move the reference point back.
    if (elapsedNs > 0) {
      const level = state[LEVEL]! + elapsedNs * refillPerNs;
      state[LEVEL] = Math.min(level, capacityTokens);
      state[LEVEL_AT_NS] = nowNs;
    }
    return state;
  }
}
