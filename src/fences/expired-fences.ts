/**
 * A fence whose `expiresAt` has passed is never in force. The expiry timer removes a fence that comes due while the
 * router runs; every build from a file or a value (a start, a reload) leaves out those already due, so no ping can
 * enter a fence that expired while the router was stopped. A device that was inside one gets its EXIT from the
 * restore (as for a fence gone from the file) or from the reload's swap.
 */
import type { ParsedFence } from './parse.js';

/** Fences kept, and one line per fence left out. */
export interface UnexpiredFences {
  /** The fences not yet due, in their order. */
  fences: ParsedFence[];
  /** `fence "<id>" expired at <ISO time>: not loaded`, one per fence left out, in their order. */
  expired: string[];
}

/** `fences` without those whose `expiresAt` is at or before `nowMs` (epoch ms). */
export function leaveOutExpired(fences: readonly ParsedFence[], nowMs: number): UnexpiredFences {
  const kept: ParsedFence[] = [];
  const expired: string[] = [];
  for (const f of fences) {
    if (f.expiresAtMs > nowMs) kept.push(f);
    else expired.push(`fence ${JSON.stringify(f.id)} expired at ${new Date(f.expiresAtMs).toISOString()}: not loaded`);
  }
  return { fences: kept, expired };
}
