/**
 * What `simulateBurst` returns: the figures of each ingest policy, the minimum shed, and the series of the plots.
 */
import type { ResolvedBurstOptions } from './burst-options.js';

/** The policies, in table order. */
export const BURST_POLICIES = ['unbounded queue', 'naive tail shedding', 'lane admission'] as const;
/** A policy's name. */
export type BurstPolicy = (typeof BURST_POLICIES)[number];

/** Figures per lane: idle, transition, compliance. */
export interface LaneFigures<T> {
  idle: T;
  transition: T;
  compliance: T;
}

/** One policy's figures. */
export interface BurstRowResult {
  policy: BurstPolicy;
  /** The policy in words. */
  description: string;
  heldP50Ms: LaneFigures<number | null>;
  heldP99Ms: LaneFigures<number | null>;
  heldMaxMs: LaneFigures<number | null>;
  offered: LaneFigures<number>;
  shed: LaneFigures<number>;
  /** Shed as a share of the lane's pings, 0..1. */
  shedShare: LaneFigures<number>;
  shedTotal: number;
  /** Shed of every lane over all pings, 0..1. */
  shedShareTotal: number;
  /** shedTotal over the minimum any policy must shed (null when that minimum is 0). */
  shedOverMinimum: number | null;
  complianceLost: number;
  /** Pings still queued when the run ended. */
  queuedAtEnd: number;
  peakDepth: number;
  peakMemoryMiB: number;
  /** Depth growth over the burst's plateau times bytesPerEntry, MiB per second. */
  memoryGrowthMiBPerSec: number;
  /** Lane admission only: shed per lane and reason, from the production counters. */
  shedByReason: Record<string, LaneFigures<number>> | null;
  series: {
    /** Pings held at each window's end. */
    depth: number[];
    /** Pings shed per second in each window, per lane. */
    shedPerSec: LaneFigures<number[]>;
  };
}

/** What `simulateBurst` returns. */
export interface BurstResult {
  scenario: 'burst';
  seed: number;
  minutes: number;
  /** The options in force. */
  options: ResolvedBurstOptions;
  definitions: Record<string, string>;
  /** Pings offered per lane (the same for every policy). */
  offered: LaneFigures<number>;
  /** Every ring slot (the buffer the minimum is computed with). */
  bufferSlots: number;
  /** The minimum any policy with that buffer and that drain must shed. */
  minimumShed: number;
  /** The same over all pings, 0..1. */
  minimumShedShare: number;
  windowMs: number;
  /** End of each window, s. */
  timesS: number[];
  /** Offered rate in each window, pings per second. */
  offeredPerSec: number[];
  /** Drain capacity, records per second. */
  drainPerSec: number;
  rows: BurstRowResult[];
}
