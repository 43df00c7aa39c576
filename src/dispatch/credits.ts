/**
 * Credit window for one downstream: the consumer advertises how many triggers it can absorb, the dispatcher spends
 * one credit per trigger sent and never sends past zero. A disabled window is unlimited.
 */

/** Credit window (see the module comment). Allocation-free. */
export class CreditWindow {
  /** False: unlimited (no credit flow control for this downstream). */
  readonly enabled: boolean;
  private remainingCredits: number;

  /** `initialCredits` undefined disables the window; otherwise a non-negative integer. */
  constructor(initialCredits: number | undefined) {
    if (initialCredits !== undefined && (!Number.isInteger(initialCredits) || initialCredits < 0)) {
      throw new RangeError(`credits must be a non-negative integer, got ${String(initialCredits)}`);
    }
    this.enabled = initialCredits !== undefined;
    this.remainingCredits = initialCredits ?? Infinity;
  }

  /** Credits left (Infinity when disabled). */
  get remaining(): number {
    return this.remainingCredits;
  }

  /** Spends up to `wanted` credits and returns how many were granted. */
  take(wanted: number): number {
    if (!this.enabled) return wanted;
    const n = wanted < this.remainingCredits ? wanted : this.remainingCredits;
    this.remainingCredits -= n;
    return n;
  }

  /** Returns unspent credits (a batch shrank before sending). */
  giveBack(n: number): void {
    if (this.enabled) this.remainingCredits += n;
  }

  /** The consumer acknowledged `n` triggers: that many credits come back. */
  grant(n: number): void {
    if (this.enabled && n > 0) this.remainingCredits += n;
  }

  /** The consumer advertised a new window: credits left become `n` (a non-negative number). */
  advertise(n: number): void {
    if (this.enabled && n >= 0) this.remainingCredits = Math.floor(n);
  }
}
