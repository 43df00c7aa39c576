/**
 * Signed webhooks: what the router puts on every request of a webhook with a signing secret, and the check a
 * receiver runs (exported for receivers written in Node; the README shows the same check in a few lines).
 *
 * The router sends `x-geofence-timestamp: <unix seconds>` and `x-geofence-signature: v1=<hex>`, where `<hex>` is
 * HMAC-SHA256, keyed with the shared secret, over the timestamp, a `.`, and the raw request body (bytes as sent).
 * A receiver recomputes it over the body it read, compares in constant time, and refuses a timestamp outside its
 * replay window (5 minutes by default): a captured request cannot be replayed later, and neither body nor timestamp
 * can be changed without the secret. A retried batch is signed again with the time of that attempt.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Request header carrying the signing time, unix seconds. */
export const SIGNATURE_TIMESTAMP_HEADER = 'x-geofence-timestamp';
/** Request header carrying the signature, `v1=<hex HMAC-SHA256>`. */
export const SIGNATURE_HEADER = 'x-geofence-signature';
/** How far from the receiver's clock a timestamp may be by default, seconds (either way). */
export const DEFAULT_SIGNATURE_TOLERANCE_S = 300;

/** The signature header's value for `body` sent at `timestampS` (unix seconds) with `secret`. */
export function signWebhook(secret: string, timestampS: number, body: string | Buffer): string {
  return `v1=${createHmac('sha256', secret).update(`${timestampS}.`).update(body).digest('hex')}`;
}

/** What a receiver has in hand to check one request. */
export interface WebhookSignatureInput {
  /** The shared signing secret. */
  secret: string;
  /** The raw request body, exactly as received (not re-serialised JSON). */
  body: string | Buffer;
  /** The `x-geofence-timestamp` header. */
  timestamp: string | string[] | undefined;
  /** The `x-geofence-signature` header. */
  signature: string | string[] | undefined;
  /** The receiver's clock, epoch ms (default: now). */
  nowMs?: number;
  /** Replay window, seconds either way (default 300). */
  toleranceS?: number;
}

/** Why a signature check failed, or `ok`. */
export type WebhookSignatureVerdict = 'ok' | 'missing' | 'malformed' | 'stale' | 'mismatch';

/**
 * Checks a signed request: `ok`, or why not (`missing` header, `malformed` header, `stale` timestamp outside the
 * window, `mismatch`: the body, timestamp or secret differs). The comparison takes constant time.
 */
export function verifyWebhookSignature(input: WebhookSignatureInput): WebhookSignatureVerdict {
  const ts = input.timestamp;
  const sig = input.signature;
  if (typeof ts !== 'string' || typeof sig !== 'string') return 'missing';
  if (!/^\d{1,12}$/.test(ts) || !/^v1=[0-9a-f]{64}$/.test(sig)) return 'malformed';
  const nowS = (input.nowMs ?? Date.now()) / 1000;
  const tolerance = input.toleranceS ?? DEFAULT_SIGNATURE_TOLERANCE_S;
  if (Math.abs(nowS - Number(ts)) > tolerance) return 'stale';
  const expected = Buffer.from(signWebhook(input.secret, Number(ts), input.body), 'latin1');
  const presented = Buffer.from(sig, 'latin1');
  return timingSafeEqual(expected, presented) ? 'ok' : 'mismatch';
}
