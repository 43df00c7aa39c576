/**
 * Arrivals one at a time as a Poisson process whose rate follows a `RateProfile` (thinning: candidates at the peak
 * rate, each kept with probability rate(t) / peak). One pending event at a time: each arrival schedules the next.
 */
import type { Simulation, SimTarget } from '../engine/simulation.js';
import type { SimRandom } from '../random/random.js';
import type { RateProfile } from './rate-profile.js';

/** Whoever receives the arrivals. */
export interface ArrivalSink {
  /** One arrival at `nowNs`. */
  onArrival(nowNs: number): void;
}

const EV_ARRIVAL = 0;

/** A Poisson arrival process feeding one sink. */
export class PoissonArrivals implements SimTarget {
  private readonly sim: Simulation;
  private readonly id: number;
  private readonly profile: RateProfile;
  private readonly random: SimRandom;
  private readonly sink: ArrivalSink;
  private readonly meanGapNs: number;
  /** Arrivals delivered. */
  arrivals = 0;

  /** Starts the process at the simulation's current time (nothing arrives when the profile's peak is 0). */
  constructor(sim: Simulation, profile: RateProfile, random: SimRandom, sink: ArrivalSink) {
    this.sim = sim;
    this.id = sim.register(this);
    this.profile = profile;
    this.random = random;
    this.sink = sink;
    this.meanGapNs = profile.peakPerSec > 0 ? 1e9 / profile.peakPerSec : Infinity;
    this.scheduleNext();
  }

  /** Delivers the arrival (when the thinning keeps it) and schedules the next candidate. */
  onEvent(_kind: number, _arg: number, nowNs: number): void {
    const peak = this.profile.peakPerSec;
    const rate = this.profile.rateAt(nowNs);
    if (rate >= peak || this.random.uniform() * peak < rate) {
      this.arrivals++;
      this.sink.onArrival(nowNs);
    }
    this.scheduleNext();
  }

  private scheduleNext(): void {
    if (this.meanGapNs === Infinity) return;
    this.sim.after(this.random.exponential(this.meanGapNs), this.id, EV_ARRIVAL);
  }
}
