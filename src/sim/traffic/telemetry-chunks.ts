/**
 * Live telemetry as the ingest thread reads it: every `chunkNs` a chunk of pings, their number Poisson with the
 * rate profile's expected count over the chunk, each ping's lane drawn from the lane mix (COMPLIANCE, IDLE, the rest
 * TRANSITION) and its shard uniformly (a device hash). Lanes and shards come from separate streams, so a policy
 * that ignores shards sees the same pings as one that uses them.
 */
import type { Simulation, SimTarget } from '../engine/simulation.js';
import type { SimRandom } from '../random/random.js';
import { Lane, LANE_COUNT } from '../../shm/layout.js';

const LANE_COMPLIANCE = Lane.COMPLIANCE;
const LANE_IDLE = Lane.IDLE;
const LANE_TRANSITION = Lane.TRANSITION;
import type { RateProfile } from './rate-profile.js';

/** Whoever reads the chunks. */
export interface ChunkSink {
  /** A chunk read at `nowNs`: `count` pings, ping i of lane `lanes[i]` hashed to shard `shards[i]`. */
  offerChunk(nowNs: number, lanes: Uint8Array, shards: Uint16Array, count: number): void;
}

/** Shares of the lanes in the traffic. */
export interface LaneMix {
  /** Share of COMPLIANCE pings, [0, 1]. */
  compliance: number;
  /** Share of IDLE pings, [0, 1 - compliance]; the rest is TRANSITION. */
  idle: number;
}

const EV_CHUNK = 0;

/** Telemetry chunks feeding one sink. */
export class TelemetryChunks implements SimTarget {
  private readonly sim: Simulation;
  private readonly id: number;
  private readonly chunkNs: number;
  private readonly profile: RateProfile;
  private readonly counts: SimRandom;
  private readonly lanes: SimRandom;
  private readonly shards: SimRandom;
  private readonly shardCount: number;
  private readonly mix: LaneMix;
  private readonly sink: ChunkSink;
  private readonly endNs: number;
  /** Pings offered per lane. */
  readonly offered = new Float64Array(LANE_COUNT);
  /** Pings in the last chunk. */
  lastChunk = 0;
  // The chunk's pings, reused (grown when a chunk is larger).
  private chunkLanes = new Uint8Array(4096);
  private chunkShards = new Uint16Array(4096);
  /** Called after each chunk with its size (for bounds computed alongside), or null. */
  onChunk: ((nowNs: number, pings: number) => void) | null = null;

  /**
   * Chunks every `chunkNs` from `chunkNs` to `endNs`; `counts`, `lanes` and `shards` are three independent streams.
   */
  constructor(
    sim: Simulation,
    chunkNs: number,
    endNs: number,
    profile: RateProfile,
    mix: LaneMix,
    shardCount: number,
    random: { counts: SimRandom; lanes: SimRandom; shards: SimRandom },
    sink: ChunkSink,
  ) {
    this.sim = sim;
    this.id = sim.register(this);
    this.chunkNs = chunkNs;
    this.endNs = endNs;
    this.profile = profile;
    this.mix = mix;
    this.shardCount = shardCount;
    this.counts = random.counts;
    this.lanes = random.lanes;
    this.shards = random.shards;
    this.sink = sink;
    sim.at(sim.nowNs + chunkNs, this.id, EV_CHUNK);
  }

  /** Reads one chunk: the pings that arrived since the last one, all admitted at `nowNs`. */
  onEvent(_kind: number, _arg: number, nowNs: number): void {
    const n = this.counts.poisson(this.profile.expectedBetween(nowNs - this.chunkNs, nowNs));
    if (n > this.chunkLanes.length) {
      this.chunkLanes = new Uint8Array(n * 2);
      this.chunkShards = new Uint16Array(n * 2);
    }
    const laneOut = this.chunkLanes;
    const shardOut = this.chunkShards;
    const compliance = this.mix.compliance;
    const idleBelow = compliance + this.mix.idle;
    const shardCount = this.shardCount;
    const offered = this.offered;
    const lanes = this.lanes;
    const shards = this.shards;
    for (let i = 0; i < n; i++) {
      const u = lanes.uniform();
      const lane = u < compliance ? LANE_COMPLIANCE : u < idleBelow ? LANE_IDLE : LANE_TRANSITION;
      offered[lane]!++;
      laneOut[i] = lane;
      shardOut[i] = Math.floor(shards.uniform() * shardCount);
    }
    this.sink.offerChunk(nowNs, laneOut, shardOut, n);
    this.lastChunk = n;
    if (this.onChunk !== null) this.onChunk(nowNs, n);
    if (nowNs + this.chunkNs <= this.endNs) this.sim.at(nowNs + this.chunkNs, this.id, EV_CHUNK);
  }
}
