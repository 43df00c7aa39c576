/**
 * Seeded randomness for the simulator: independent streams derived from one seed, and the distributions the
 * simulated traffic and downstreams draw from. The generator is the limits' own PRNG (`seededRandom`, mulberry32),
 * stepped here in a typed-array cell rather than a closure: the simulator draws hundreds of millions of numbers, and
 * a double returned by a call V8 does not inline is a heap allocation each. The same seed gives the same numbers as
 * `seededRandom(seed)`, on every run and every machine.
 */

/** Shapes of a service-time distribution (each parameterised by its mean, so capacity = workers / mean). */
export type ServiceDistribution = 'exponential' | 'lognormal' | 'uniform';

/** The service-time distributions, by name (for validation messages). */
export const SERVICE_DISTRIBUTIONS: readonly ServiceDistribution[] = ['exponential', 'lognormal', 'uniform'];

/**
 * The seed of stream `stream` of a run seeded with `seed`: a 32-bit mix (splitmix32's finaliser), so streams of
 * neighbouring seeds or neighbouring stream numbers share nothing visible.
 */
export function streamSeed(seed: number, stream: number): number {
  let z = (Math.imul(seed >>> 0, 0x9e3779b1) + Math.imul(stream + 1, 0x85ebca6b)) >>> 0;
  z = Math.imul(z ^ (z >>> 16), 0x21f0aaad) >>> 0;
  z = Math.imul(z ^ (z >>> 15), 0x735a2d97) >>> 0;
  return (z ^ (z >>> 15)) >>> 0;
}

/** One stream of seeded random numbers and the distributions drawn from it. */
export class SimRandom {
  /** mulberry32's state (as seededRandom keeps it, in an Int32 cell). */
  private readonly state = new Int32Array(1);
  private spareNormal = NaN;

  /** A stream seeded with `seed` (any 32-bit integer). */
  constructor(seed: number) {
    this.state[0] = seed >>> 0;
  }

  /** Uniform in [0, 1): the next value `seededRandom(seed)` would give. */
  uniform(): number {
    const s = (this.state[0]! + 0x6d2b79f5) | 0;
    this.state[0] = s;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Exponential with mean `mean`. */
  exponential(mean: number): number {
    // 1 - u is in (0, 1]: the log is finite.
    return -mean * Math.log(1 - this.uniform());
  }

  /** Standard normal (Box-Muller; the second value of each pair is kept for the next call). */
  normal(): number {
    if (!Number.isNaN(this.spareNormal)) {
      const z = this.spareNormal;
      this.spareNormal = NaN;
      return z;
    }
    const u = 1 - this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** Lognormal with mean `mean` and log-scale standard deviation `sigma` (median `mean * exp(-sigma^2 / 2)`). */
  lognormal(mean: number, sigma: number): number {
    return mean * Math.exp(sigma * this.normal() - (sigma * sigma) / 2);
  }

  /** Uniform jitter around `mean`: `mean * (1 - jitter + 2 jitter u)`, jitter in [0, 1). */
  jitter(mean: number, jitter: number): number {
    return mean * (1 - jitter + 2 * jitter * this.uniform());
  }

  /** A service time with mean `mean` from `shape`; `spread` is sigma (lognormal) or the jitter fraction (uniform). */
  service(shape: ServiceDistribution, mean: number, spread: number): number {
    if (shape === 'exponential') return this.exponential(mean);
    if (shape === 'lognormal') return this.lognormal(mean, spread);
    return this.jitter(mean, spread);
  }

  /** Poisson with mean `mean` (inversion; a large mean is split into halves so exp(-mean) never underflows). */
  poisson(mean: number): number {
    if (mean > 500) {
      const half = mean / 2;
      return this.poisson(half) + this.poisson(mean - half);
    }
    if (!(mean > 0)) return 0;
    let p = Math.exp(-mean);
    let cdf = p;
    const u = this.uniform();
    let k = 0;
    // Walk up the cumulative distribution until it passes u; the tail cut-off bounds the loop.
    while (u > cdf && k < 10_000) {
      k++;
      p *= mean / k;
      cdf += p;
      if (p === 0) break;
    }
    return k;
  }
}
