/**
 * How a containment worker sizes its batches (containment-thread.ts): by time, from its own measured cost per ping,
 * as well as by count. A pass over a group's shards takes one batch from each; when pings are expensive (a dense
 * city puts dozens of fences over a point) a fixed count makes the pass long, and a record published just after its
 * shard's turn waits for the whole pass, a COMPLIANCE ping as much as any other.
 */

/** Weight of the latest batch in the moving average (a batch stretched by a preemption moves it only so far). */
const COST_WEIGHT = 0.25;
/** A batch holds at least this many records whatever the measured cost (the per-batch work stays small beside it). */
export const MIN_BATCH_RECORDS = 4;

/** A worker's cost per ping and the batch size that follows from it. Allocation-free. */
export class BatchSizer {
  /** Cost of one ping in a batch, ns: a moving average over batches (0 until the first one). */
  private readonly cost = new Float64Array(1);

  /** The measured cost of one ping, ns (0 before any batch). */
  get costPerPingNs(): number {
    return this.cost[0]!;
  }

  /** Records to take: what is `available`, at most `maxRecords`, and no more than fit in `budgetNs` at the measured cost. */
  count(available: number, maxRecords: number, budgetNs: number): number {
    const n = available < maxRecords ? available : maxRecords;
    const cost = this.cost[0]!;
    if (!(cost > 0)) return n;
    const fit = Math.floor(budgetNs / cost);
    const cap = fit > MIN_BATCH_RECORDS ? fit : MIN_BATCH_RECORDS;
    return n < cap ? n : cap;
  }

  /** Folds one batch of `count` records that took `elapsedNs` into the cost per ping. */
  note(elapsedNs: number, count: number): void {
    if (!(count > 0) || !(elapsedNs >= 0)) return;
    const perPing = elapsedNs / count;
    const cost = this.cost[0]!;
    this.cost[0] = cost > 0 ? cost + COST_WEIGHT * (perPing - cost) : perPing;
  }
}
