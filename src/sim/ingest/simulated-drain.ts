/**
 * The consumer of the telemetry rings (the containment pool), simulated as a capacity: every `tickNs` it may take
 * `drainPerSec * tick` records (fractions carried over), oldest first. It takes less only when less is held.
 */
import type { Simulation, SimTarget } from '../engine/simulation.js';
import type { RateProfile } from '../traffic/rate-profile.js';

/** What the drain takes from. */
export interface Drainable {
  /** Takes up to `budget` records at `nowNs`; returns how many. */
  drain(budget: number, nowNs: number): number;
}

const EV_DRAIN = 0;

/** A drain of a given capacity over time. */
export class SimulatedDrain implements SimTarget {
  private readonly sim: Simulation;
  private readonly id: number;
  private readonly tickNs: number;
  private readonly endNs: number;
  private readonly capacity: RateProfile;
  private readonly source: Drainable;
  private carry = 0;
  /** Records taken. */
  drained = 0;
  /** Called after each tick with its budget (for bounds computed alongside), or null. */
  onTick: ((nowNs: number, budget: number) => void) | null = null;

  /** Ticks at `firstNs`, then every `tickNs` until `endNs`. */
  constructor(
    sim: Simulation,
    firstNs: number,
    tickNs: number,
    endNs: number,
    capacity: RateProfile,
    source: Drainable,
  ) {
    this.sim = sim;
    this.id = sim.register(this);
    this.tickNs = tickNs;
    this.endNs = endNs;
    this.capacity = capacity;
    this.source = source;
    sim.at(firstNs, this.id, EV_DRAIN);
  }

  /** One tick: the budget of the elapsed tick, taken from the source. */
  onEvent(_kind: number, _arg: number, nowNs: number): void {
    const exact = this.carry + this.capacity.expectedBetween(nowNs - this.tickNs, nowNs);
    const budget = Math.floor(exact);
    this.carry = exact - budget;
    this.drained += this.source.drain(budget, nowNs);
    if (this.onTick !== null) this.onTick(nowNs, budget);
    if (nowNs + this.tickNs <= this.endNs) this.sim.at(nowNs + this.tickNs, this.id, EV_DRAIN);
  }
}
