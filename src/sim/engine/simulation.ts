/**
 * The virtual clock and the run loop of the discrete-event simulator.
 *
 * Time is a number of nanoseconds held as an integer-valued double (exact up to 2^53 ns, about 104 days). It moves
 * only when the next event is taken: `run(untilNs)` takes events in (time, insertion) order and hands each to the
 * target that scheduled it. Nothing reads a wall clock, so the same inputs give the same run to the event.
 */
import { EventQueue } from './event-queue.js';

/** Something that receives events: a simulated downstream, a traffic source, a client, a sampler. */
export interface SimTarget {
  /** Handles one event of this target's own `kind` with its `arg`, at the simulation's `nowNs`. */
  onEvent(kind: number, arg: number, nowNs: number): void;
}

/** A virtual clock and its pending events. */
export class Simulation {
  /** Current virtual time, ns (an integer). */
  nowNs = 0;
  /** Events handled so far. */
  eventsRun = 0;
  private readonly queue = new EventQueue();
  private readonly targets: SimTarget[] = [];

  /** Registers a target; returns the id its events are scheduled with. */
  register(target: SimTarget): number {
    this.targets.push(target);
    return this.targets.length - 1;
  }

  /** Schedules an event at `atNs` (an integer, not before now) for `target`. */
  at(atNs: number, target: number, kind: number, arg = 0): void {
    if (!(atNs >= this.nowNs) || !Number.isInteger(atNs)) {
      throw new RangeError(`event time must be an integer >= now (${this.nowNs} ns), got ${String(atNs)}`);
    }
    this.queue.push(atNs, target, kind, arg);
  }

  /** Schedules an event `delayNs` from now (rounded to a whole ns, at least 0) for `target`. */
  after(delayNs: number, target: number, kind: number, arg = 0): void {
    const d = Math.round(delayNs);
    this.queue.push(this.nowNs + (d > 0 ? d : 0), target, kind, arg);
  }

  /** Events pending. */
  get pending(): number {
    return this.queue.size;
  }

  /**
   * Runs every event due at or before `untilNs`, in order, then leaves the clock at `untilNs`. Events scheduled while
   * running are taken too when they fall in the window. Returns the number of events run.
   */
  run(untilNs: number): number {
    const q = this.queue;
    const targets = this.targets;
    const popped = q.popped;
    let n = 0;
    while (q.peekTimeNs() <= untilNs) {
      q.pop();
      this.nowNs = popped[0]!;
      targets[q.poppedTarget]!.onEvent(q.poppedKind, popped[1]!, this.nowNs);
      n++;
    }
    if (untilNs > this.nowNs) this.nowNs = untilNs;
    this.eventsRun += n;
    return n;
  }
}
