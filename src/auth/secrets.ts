/**
 * Shared secrets and exposure: which binds only this host can reach, and a constant-time comparison of a presented
 * secret (an ingest or admin token) with the expected one.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

/** True for an address that only this host can reach (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Compares a presented secret with the expected one in constant time: both are hashed first, so neither the length
 * nor a common prefix shows in the time taken.
 */
export function secretMatches(presented: string, expected: string): boolean {
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}
