/**
 * The sink contract: where a downstream's batches go (in-process callback, NDJSON file or stdout, HTTP webhook).
 */
import type { TriggerBatch } from './trigger-batch.js';

/** Why a sink call failed below HTTP (status 0). */
export type SinkError = 'refused' | 'timeout' | 'connect-timeout' | 'network' | 'tls';

/** Outcome of one `deliver` call, in HTTP terms. */
export interface SinkResult {
  /** HTTP-like status: 2xx delivered; 429/503 overload; other 5xx failure; other 4xx permanent rejection; 0 no answer. */
  status: number;
  /** Retry-After, ms: loss plus a pause of this long. */
  retryAfterMs?: number;
  /** Credit window the consumer advertises after this batch (how many more triggers it can absorb). */
  credits?: number;
  /** With status 0: what went wrong. */
  error?: SinkError;
  /**
   * How long the downstream itself took, ns, when the transport measures it where the downstream runs (an in-process
   * callback reached through a message port). The limiter then samples this instead of the round trip, so the
   * router's own transport (and a busy thread on either side of it) is not read as queueing at the downstream.
   */
  serviceNs?: number;
  /**
   * From a sink that hears back per trigger (a broker's acknowledgement per message): the indexes, in the batch, of
   * triggers the downstream refused for good one by one (each dead-lettered as rejected, and its device goes on).
   * With a 2xx status every other trigger of the batch was delivered; with a failure the others (but those named in
   * `delivered`) are sent again.
   */
  refused?: readonly number[];
  /**
   * With a failure: the indexes, in the batch (increasing), of triggers the downstream took before the failure (a
   * webhook batch sent in parts). They are settled as delivered, using up no further attempt, except one behind a
   * trigger of its device that is sent again: it stays with that one and shares its fate (sent again, or dead-lettered
   * with it once its attempts are used up), so the device's order holds. A webhook's parts go in order and stop at the
   * first failure, so none of its delivered triggers is ever behind one sent again.
   */
  delivered?: readonly number[];
  /**
   * With a failure: the indexes, in the batch, of triggers never handed to the downstream (a sink that sends a
   * device's next trigger only once the one before is taken: those behind one refused for the moment, or still
   * waiting for their turn when the batch failed). They are sent again without having used up an attempt.
   */
  unsent?: readonly number[];
  /**
   * With a failure, from a sink that hears back per trigger: the indexes, in the batch (increasing), of triggers the
   * downstream itself refused for the moment one by one (an MQTT 5 PUBACK such as 151 quota exceeded, a JetStream
   * "again later" answer). When every other trigger of the batch was taken, refused for good or never handed over (no
   * answer missing), at least one was taken or refused, and the failure asks for no Retry-After pause, the downstream
   * answered the batch in part: the failure is those devices' alone (Downstream: they are held back and, for their
   * first holds, use up no attempt; the others go on).
   */
  again?: readonly number[];
  /**
   * The batch took several requests one after another (a webhook batch sent again in parts): its time is not one
   * request's, and the limiter takes no sample from it.
   */
  unsampled?: boolean;
  /**
   * The downstream is gone for this run (a trigger stream whose loop left): nothing more is sent to it, and the
   * batch, failed, uses up no attempt (see Downstream.markGone).
   */
  gone?: boolean;
}

/** A downstream's transport. */
export interface Sink {
  /** Delivers a batch; the batch's contents stay valid until the returned promise settles. Must not reject. */
  deliver(batch: TriggerBatch): Promise<SinkResult>;
  /** Releases the transport's resources. */
  close(): Promise<void>;
}

/** What a result means to the control loop. */
export const Outcome = {
  /** Delivered. */
  OK: 0,
  /** Overload or failure: loss for the limiter, failure for the breaker (retry, then dead-letter). */
  LOSS: 1,
  /** The connection was refused: no RTT sample, a refusal for the breaker. */
  REFUSED: 2,
  /** Permanent rejection (4xx other than 408, 425 and 429): dead-letter, the breaker sees a live target. */
  REJECTED: 3,
} as const;
/** An Outcome value. */
export type Outcome = (typeof Outcome)[keyof typeof Outcome];

/** Classifies a sink result. */
export function classifyResult(r: SinkResult): Outcome {
  const s = r.status;
  if (s >= 200 && s < 300) return Outcome.OK;
  if (s === 0) return r.error === 'refused' ? Outcome.REFUSED : Outcome.LOSS;
  // 408 (the server, or a proxy, gave up waiting for the request) and 425 (too early) say "again later", not "never".
  if (s === 429 || s === 408 || s === 425 || s >= 500) return Outcome.LOSS;
  return Outcome.REJECTED;
}

/** How long a sink's orderly close may wait on its server before the connection is dropped, ms. */
const SINK_CLOSE_GRACE_MS = 2000;

/**
 * Runs `orderly` (a drain or a graceful disconnect that waits for the server); if it has not settled within
 * `SINK_CLOSE_GRACE_MS`, or fails, runs `force`. A server that stopped answering must not hold the router's close.
 */
export async function closeWithin(orderly: () => Promise<unknown>, force: () => unknown): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), SINK_CLOSE_GRACE_MS)));
  try {
    const r = await Promise.race([orderly().then(() => 'done' as const), late]);
    if (r === 'late') await force();
  } catch {
    await force();
  } finally {
    clearTimeout(timer);
  }
}

/** A delivered result (shared, frozen: sinks return it without allocating). */
export const RESULT_OK: SinkResult = Object.freeze({ status: 200 });
