/**
 * The burst scenario (the second seed's table): live telemetry at a baseline, ramped to a burst of `burstFactor`
 * times it, held, and ramped back, with a lane mix (2 % COMPLIANCE, 55 % IDLE by default), into a drain that cannot
 * take the burst. The policies run side by side on the same seeded pings and the same drain: an unbounded queue, naive tail shedding on
 * the production rings (drop when full, no lanes), and the production `LaneAdmission` with its defaults on the
 * production rings (reserved COMPLIANCE slice, IDLE token bucket, queue-delay controller).
 *
 * Figures per policy:
 * - held P99 by lane: admission to the drain taking the record;
 * - shed by lane, as a share of the lane's pings;
 * - the minimum any policy must shed: a fluid queue with the same arrivals per chunk, the same drain budget per
 *   tick and a buffer of every ring slot (shards x ring capacity) sheds only what overflows the buffer; the ratio of
 *   each policy's shed to it;
 * - COMPLIANCE pings lost;
 * - peak memory: the largest queue depth times `bytesPerEntry` (the rings themselves are preallocated:
 *   shards x capacity x 64 bytes whatever their depth), and for the unbounded queue its growth over the plateau.
 */
import { LANE_COUNT, LANE_NAMES, Lane, ShedReason } from '../../../shm/layout.js';
import { Simulation } from '../../engine/simulation.js';
import { SimulatedDrain, type Drainable } from '../../ingest/simulated-drain.js';
import {
  LaneAdmissionRings,
  TailDropRings,
  UnboundedQueue,
  type TelemetryPolicy,
} from '../../ingest/telemetry-policies.js';
import { SimRandom, streamSeed } from '../../random/random.js';
import { RateProfile } from '../../traffic/rate-profile.js';
import { TelemetryChunks, type ChunkSink } from '../../traffic/telemetry-chunks.js';
import { resolveBurstOptions, type BurstScenarioOptions, type ResolvedBurstOptions } from './burst-options.js';
import {
  BURST_POLICIES,
  type BurstPolicy,
  type BurstResult,
  type BurstRowResult,
  type LaneFigures,
} from './burst-result.js';

const STREAM_COUNTS = 11;
const STREAM_LANES = 12;
const STREAM_SHARDS = 13;
const MIB = 1024 * 1024;

/** The offered rate over the run: baseline, ramp up, plateau, ramp down, baseline. */
function burstProfile(o: ResolvedBurstOptions): RateProfile {
  const m = 60e9;
  const a = o.burstStartMinute * m;
  const b = a + o.rampMinutes * m;
  const c = b + o.burstMinutes * m;
  const d = c + o.rampMinutes * m;
  const base = o.baselinePerSec;
  const peak = base * o.burstFactor;
  return new RateProfile([
    [a, base],
    [b, peak],
    [c, peak],
    [d, base],
  ]);
}

function lanes<T>(f: (lane: Lane) => T): LaneFigures<T> {
  return { idle: f(Lane.IDLE), transition: f(Lane.TRANSITION), compliance: f(Lane.COMPLIANCE) };
}

function ms(ns: number): number | null {
  return Number.isNaN(ns) ? null : Math.round(ns / 1e3) / 1e3;
}

function makePolicy(policy: BurstPolicy, o: ResolvedBurstOptions): TelemetryPolicy {
  if (policy === 'unbounded queue') return new UnboundedQueue();
  if (policy === 'naive tail shedding') return new TailDropRings(o.shards, o.ringCapacitySlots);
  return new LaneAdmissionRings(o.shards, o.ringCapacitySlots, o.admission, 0);
}

function describe(policy: BurstPolicy, o: ResolvedBurstOptions): string {
  if (policy === 'unbounded queue') return 'one FIFO, never sheds';
  if (policy === 'naive tail shedding')
    return `${o.shards} production rings of ${o.ringCapacitySlots} slots, a ping dropped when its ring is full`;
  return `${o.shards} production rings of ${o.ringCapacitySlots} slots behind LaneAdmission ${JSON.stringify(o.admission)}`;
}

/** Every policy fed the same chunks (a chunk offered to each in turn): the policies share nothing else. */
class FanOut implements ChunkSink, Drainable {
  constructor(private readonly policies: readonly TelemetryPolicy[]) {}
  offerChunk(nowNs: number, lanes: Uint8Array, shards: Uint16Array, count: number): void {
    for (const p of this.policies) p.offerChunk(nowNs, lanes, shards, count);
  }
  /** Each policy's drain gets the whole budget (the same drain, simulated once per policy). */
  drain(budget: number, nowNs: number): number {
    for (const p of this.policies) p.drain(budget, nowNs);
    return budget;
  }
}

/** A policy's series, filled window by window. */
interface Track {
  depth: number[];
  shedPerSec: LaneFigures<number[]>;
  shedBefore: Float64Array;
  depthAtPlateauStart: number;
  depthAtPlateauEnd: number;
}

/**
 * Runs every policy in one simulation, in lockstep: one stream of chunks offered to each, one drain budget per tick
 * taken by each, so every policy meets the same pings and the same drain (and the pings are drawn once, not once
 * per policy). Also computes the fluid minimum over the same arrivals and budgets.
 */
function runPolicies(o: ResolvedBurstOptions): { rows: BurstRowResult[]; minimumShed: number } {
  const sim = new Simulation();
  const endNs = Math.round(o.minutes * 60e9);
  const chunkNs = Math.round(o.chunkMs * 1e6);
  const windowNs = Math.round(o.windowMs * 1e6);
  const policies = BURST_POLICIES.map((policy) => makePolicy(policy, o));
  const fan = new FanOut(policies);
  const chunks = new TelemetryChunks(
    sim,
    chunkNs,
    endNs,
    burstProfile(o),
    { compliance: o.complianceShare, idle: o.idleShare },
    o.shards,
    {
      counts: new SimRandom(streamSeed(o.seed, STREAM_COUNTS)),
      lanes: new SimRandom(streamSeed(o.seed, STREAM_LANES)),
      shards: new SimRandom(streamSeed(o.seed, STREAM_SHARDS)),
    },
    fan,
  );
  // The drain ticks half a chunk after each read, so reading and draining alternate.
  const drain = new SimulatedDrain(
    sim,
    chunkNs + (chunkNs >> 1),
    chunkNs,
    endNs,
    RateProfile.constant(o.drainPerSec),
    fan,
  );
  const buffer = o.shards * o.ringCapacitySlots;
  let fluid = 0;
  let minimumShed = 0;
  chunks.onChunk = (_t, n) => {
    fluid += n;
    if (fluid > buffer) {
      minimumShed += fluid - buffer;
      fluid = buffer;
    }
  };
  drain.onTick = (_t, budget) => {
    fluid = fluid > budget ? fluid - budget : 0;
  };
  const plateauStartNs = (o.burstStartMinute + o.rampMinutes) * 60e9;
  const plateauEndNs = plateauStartNs + o.burstMinutes * 60e9;
  const tracks: Track[] = policies.map(() => ({
    depth: [],
    shedPerSec: lanes<number[]>(() => []),
    shedBefore: new Float64Array(LANE_COUNT),
    depthAtPlateauStart: NaN,
    depthAtPlateauEnd: NaN,
  }));
  let prevT = 0;
  for (let k = 1; prevT < endNs; k++) {
    const t = Math.min(Math.round(k * windowNs), endNs);
    sim.run(t);
    const dtS = (t - prevT) / 1e9;
    policies.forEach((p, i) => {
      const tr = tracks[i]!;
      const d = p.depth();
      if (Number.isNaN(tr.depthAtPlateauStart) && t >= plateauStartNs) tr.depthAtPlateauStart = d;
      if (Number.isNaN(tr.depthAtPlateauEnd) && t >= plateauEndNs) tr.depthAtPlateauEnd = d;
      tr.depth.push(d);
      for (let l = 0; l < LANE_COUNT; l++) {
        tr.shedPerSec[LANE_NAMES[l]!].push(Math.round((p.shed[l]! - tr.shedBefore[l]!) / dtS));
        tr.shedBefore[l] = p.shed[l]!;
      }
    });
    prevT = t;
  }
  const rows = policies.map((p, i) => rowOf(BURST_POLICIES[i]!, p, tracks[i]!, o, minimumShed));
  return { rows, minimumShed };
}

/** One policy's figures at the end of the run. */
function rowOf(
  policy: BurstPolicy,
  p: TelemetryPolicy,
  tr: Track,
  o: ResolvedBurstOptions,
  minimumShed: number,
): BurstRowResult {
  const offered = lanes((l) => p.offered[l]!);
  const shed = lanes((l) => p.shed[l]!);
  const shedTotal = shed.idle + shed.transition + shed.compliance;
  const offeredTotal = offered.idle + offered.transition + offered.compliance;
  const plateauS = o.burstMinutes * 60;
  let shedByReason: Record<string, LaneFigures<number>> | null = null;
  if (p instanceof LaneAdmissionRings) {
    shedByReason = {};
    for (const [reasonName, reason] of Object.entries(ShedReason)) {
      // A run never drains the admission: that reason stays 0.
      if (reason === ShedReason.DRAINING) continue;
      shedByReason[reasonName.toLowerCase()] = lanes((l) =>
        p.admissions.reduce((sum, a) => sum + a.shedCount(l, reason), 0),
      );
    }
  }
  return {
    policy,
    description: describe(policy, o),
    heldP50Ms: lanes((l) => ms(p.held[l]!.quantileNs(0.5))),
    heldP99Ms: lanes((l) => ms(p.held[l]!.quantileNs(0.99))),
    heldMaxMs: lanes((l) => (p.held[l]!.total === 0 ? null : ms(p.held[l]!.maxNs))),
    offered,
    shed,
    shedShare: lanes((l) => (p.offered[l]! === 0 ? 0 : p.shed[l]! / p.offered[l]!)),
    shedTotal,
    shedShareTotal: offeredTotal === 0 ? 0 : shedTotal / offeredTotal,
    shedOverMinimum: minimumShed === 0 ? null : shedTotal / minimumShed,
    complianceLost: shed.compliance,
    queuedAtEnd: p.depth(),
    peakDepth: p.peakDepth,
    peakMemoryMiB: (p.peakDepth * o.bytesPerEntry) / MIB,
    memoryGrowthMiBPerSec:
      plateauS > 0 && !Number.isNaN(tr.depthAtPlateauEnd)
        ? ((tr.depthAtPlateauEnd - tr.depthAtPlateauStart) * o.bytesPerEntry) / MIB / plateauS
        : 0,
    shedByReason,
    series: { depth: tr.depth, shedPerSec: tr.shedPerSec },
  };
}

/**
 * Runs the burst scenario: every policy on the same seeded pings and the same drain; the lane
 * admission row drives the production LaneAdmission on production rings. Deterministic: the same options give the
 * same result to the digit. Throws a RangeError naming the first wrong option.
 */
export function simulateBurst(options: Partial<BurstScenarioOptions> = {}): BurstResult {
  const o = resolveBurstOptions(options);
  const { rows, minimumShed } = runPolicies(o);
  const profile = burstProfile(o);
  const endNs = Math.round(o.minutes * 60e9);
  const windowNs = Math.round(o.windowMs * 1e6);
  const timesS: number[] = [];
  const offeredPerSec: number[] = [];
  for (let k = 1, t = 0, prev = 0; t < endNs; k++, prev = t) {
    t = Math.min(Math.round(k * windowNs), endNs);
    timesS.push(t / 1e9);
    offeredPerSec.push(Math.round(profile.expectedBetween(prev, t) / ((t - prev) / 1e9)));
  }
  const offered = rows[0]!.offered;
  const total = offered.idle + offered.transition + offered.compliance;
  return {
    scenario: 'burst',
    seed: o.seed,
    minutes: o.minutes,
    options: o,
    definitions: {
      held: 'admission to the drain taking the record (read chunks every chunkMs; all pings of a chunk share its time)',
      shed: "a lane's pings shed, as a share of that lane's pings over the run",
      minimumShed:
        `what a fluid queue with the same arrivals per chunk, the same drain budget per tick and a buffer of ` +
        `${o.shards * o.ringCapacitySlots} slots (every ring slot) must shed: any policy sheds at least this`,
      peakMemory: `largest queue depth x ${o.bytesPerEntry} bytes per entry`,
      memoryGrowth: 'change of the queue depth over the burst plateau x bytes per entry, per second',
    },
    offered,
    bufferSlots: o.shards * o.ringCapacitySlots,
    minimumShed,
    minimumShedShare: total === 0 ? 0 : minimumShed / total,
    windowMs: o.windowMs,
    timesS,
    offeredPerSec,
    drainPerSec: o.drainPerSec,
    rows,
  };
}
