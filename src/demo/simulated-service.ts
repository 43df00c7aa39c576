/**
 * A simulated downstream service for the demo (main thread, behind the router's in-process callback): a fixed number
 * of servers, a FIFO queue in front of them, and a service time per batch that drifts slowly between a low and a
 * high value (plus jitter), so the downstream's adaptive limit has something to follow. Time and randomness are
 * injected; the only timer is the one that ends each service.
 */

/** Options of SimulatedService. */
export interface SimulatedServiceOptions {
  /** Batches served at once (more wait in the queue), [1, 4096]. */
  capacity: number;
  /** Service time at the low point of the drift, ms, (0, maxServiceMs]. */
  minServiceMs: number;
  /** Service time at the high point of the drift, ms, [minServiceMs, 60000]. */
  maxServiceMs: number;
  /** Period of the drift from low to high and back, ms, >= 1. */
  driftPeriodMs: number;
  /** Relative jitter of each service time, [0, 1): the time is scaled by a factor in [1 - j, 1 + j]. */
  jitterFraction: number;
}

/**
 * Defaults: 16 servers, service time drifting between 5 and 10 ms over 60 s, +-20 % jitter. The drift stays within a
 * factor of two: a latency-based limiter reads a slower baseline as queueing until its RTT-min window re-probes, so a
 * wider drift would show the re-probe rather than the limiter following the service's capacity.
 */
const SIMULATED_SERVICE_DEFAULTS: Readonly<SimulatedServiceOptions> = Object.freeze({
  capacity: 16,
  minServiceMs: 5,
  maxServiceMs: 10,
  driftPeriodMs: 60_000,
  jitterFraction: 0.2,
});

/** Validates resolved options; throws a RangeError naming the option and its range. */
function validateSimulatedServiceOptions(o: SimulatedServiceOptions): void {
  if (!Number.isInteger(o.capacity) || o.capacity < 1 || o.capacity > 4096) {
    throw new RangeError(`options.capacity must be an integer in [1, 4096], got ${String(o.capacity)}`);
  }
  if (!(o.minServiceMs > 0 && o.minServiceMs <= o.maxServiceMs)) {
    throw new RangeError(
      `options.minServiceMs must be a number in (0, options.maxServiceMs], got ${String(o.minServiceMs)}`,
    );
  }
  if (!(o.maxServiceMs <= 60_000))
    throw new RangeError(
      `options.maxServiceMs must be a number in [minServiceMs, 60000], got ${String(o.maxServiceMs)}`,
    );
  if (!(o.driftPeriodMs >= 1))
    throw new RangeError(`options.driftPeriodMs must be a number >= 1, got ${String(o.driftPeriodMs)}`);
  if (!(o.jitterFraction >= 0 && o.jitterFraction < 1)) {
    throw new RangeError(`options.jitterFraction must be a number in [0, 1), got ${String(o.jitterFraction)}`);
  }
}

/** The simulated service. */
export class SimulatedService {
  readonly options: Readonly<SimulatedServiceOptions>;
  /** Batches served to completion. */
  servedBatches = 0;
  /** Triggers in those batches. */
  servedTriggers = 0;
  /** Most batches seen waiting in the queue at once. */
  maxQueued = 0;
  private busy = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly nowMs: () => number;
  private readonly random: () => number;
  private readonly startMs: number;

  /** `nowMs` is the clock the drift follows, `random` a PRNG in [0, 1) for the jitter. */
  constructor(options: Partial<SimulatedServiceOptions>, nowMs: () => number, random: () => number) {
    const o = { ...SIMULATED_SERVICE_DEFAULTS, ...options };
    validateSimulatedServiceOptions(o);
    this.options = o;
    this.nowMs = nowMs;
    this.random = random;
    this.startMs = nowMs();
  }

  /** The drifting service time at `atMs` without jitter: low at start, high half a period later, ms. */
  baseServiceMs(atMs: number): number {
    const o = this.options;
    const phase = (2 * Math.PI * (atMs - this.startMs)) / o.driftPeriodMs;
    return o.minServiceMs + (o.maxServiceMs - o.minServiceMs) * (0.5 - 0.5 * Math.cos(phase));
  }

  /** Batches being served now. */
  get inService(): number {
    return this.busy;
  }

  /** Batches waiting for a server. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Serves one batch of `triggerCount` triggers: waits for a free server, then for the service time. */
  async handle(triggerCount: number): Promise<void> {
    if (this.busy >= this.options.capacity) {
      // The server is handed over by the batch that finishes (busy stays counted), so none is taken twice.
      await new Promise<void>((resolve) => {
        this.waiting.push(resolve);
        if (this.waiting.length > this.maxQueued) this.maxQueued = this.waiting.length;
      });
    } else {
      this.busy++;
    }
    try {
      const j = this.options.jitterFraction;
      const serviceMs = this.baseServiceMs(this.nowMs()) * (1 - j + 2 * j * this.random());
      await new Promise((resolve) => setTimeout(resolve, serviceMs));
      this.servedBatches++;
      this.servedTriggers += triggerCount;
    } finally {
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.busy--;
    }
  }
}
