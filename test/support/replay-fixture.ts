/**
 * A seeded trajectory replay for backpressure tests and the replay benchmark: the city traffic of city-traffic.ts
 * written to a fences file and a file of concatenated MessagePack frames, and the triggers those pings must produce,
 * computed by one containment engine on the calling thread (no rings that fill, no threads, no admission): what any
 * replay that loses nothing delivers.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Unpackr } from 'msgpackr';
import {
  allocateDeviceState,
  buildFenceStore,
  ContainmentEngine,
  DeviceState,
  FenceStore,
  parseFences,
} from '../../src/fences/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { allocateCounterRegion } from '../../src/shm/regions.js';
import { CNT_BLOCK_F64 } from '../../src/shm/layout.js';
import { drain, triggerRing } from '../fences/helpers.js';
import { cityTraffic, type CityTraffic } from './city-traffic.js';

/** Options of writeReplayFixture. */
export interface ReplayFixtureOptions {
  /** PRNG seed. */
  seed: number;
  /** Devices (each sends `pingsPerDevice` pings). */
  devices: number;
  /** Pings per device. */
  pingsPerDevice: number;
  /** Fences of the synthetic city. */
  fences: number;
}

/** A replay on disk. */
export interface ReplayFixture {
  /** The traffic (frames, fences). */
  traffic: CityTraffic;
  /** Path of the GeoJSON fences file. */
  fencesPath: string;
  /** Path of the frames file. */
  pingsPath: string;
}

/** Builds the seeded traffic and writes `fences.geojson` and `pings.msgpack` into `dir`. */
export function writeReplayFixture(dir: string, o: ReplayFixtureOptions): ReplayFixture {
  const traffic = cityTraffic({
    seed: o.seed,
    fences: o.fences,
    devices: o.devices,
    pingsPerDevice: o.pingsPerDevice,
    pingIntervalMs: 8000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  const fencesPath = join(dir, 'fences.geojson');
  const pingsPath = join(dir, 'pings.msgpack');
  writeFileSync(fencesPath, JSON.stringify(traffic.fences));
  writeFileSync(pingsPath, traffic.frames);
  return { traffic, fencesPath, pingsPath };
}

/** A trigger's identity for comparing deliveries with the reference: device, type, fence and event time. */
export function triggerKey(t: Pick<Trigger, 'deviceId' | 'type' | 'fenceId' | 'eventTimeMs'>): string {
  return `${JSON.stringify(t.deviceId)} ${t.type} ${t.fenceId} ${t.eventTimeMs}`;
}

/**
 * The triggers `traffic`'s pings produce, as triggerKey strings in ping order: every ping through one engine, with
 * `maxFencesPerDevice` entries per device as the router is configured.
 */
export function referenceTriggers(traffic: CityTraffic, maxFencesPerDevice = 16): string[] {
  const store = FenceStore.open(buildFenceStore(parseFences(traffic.fences), 1));
  const pings = new Unpackr({ useRecords: false, mapsAsObjects: true }).unpackMultiple(traffic.frames) as Array<{
    id: string;
    lat: number;
    lon: number;
    ts: number;
  }>;
  const slots = new Map<string, number>();
  for (const p of pings) if (!slots.has(p.id)) slots.set(p.id, slots.size);
  const ids = [...slots.keys()];
  const state = DeviceState.open(allocateDeviceState(slots.size, maxFencesPerDevice));
  const engine = new ContainmentEngine(
    store,
    state,
    new Float64Array(allocateCounterRegion(2, CNT_BLOCK_F64)),
    CNT_BLOCK_F64,
  );
  const ring = triggerRing(4096);
  const out: string[] = [];
  for (const p of pings) {
    engine.processPing(slots.get(p.id)!, p.lat, p.lon, p.ts, 0, 1, ring);
    for (const t of drain(ring))
      out.push(
        triggerKey({
          deviceId: ids[t.slot]!,
          type: t.type as Trigger['type'],
          fenceId: store.fenceId(t.fence),
          eventTimeMs: t.eventTimeMs,
        }),
      );
  }
  return out;
}

/**
 * Compares delivered triggers with the reference: returns what is missing and what is extra or repeated (at most
 * `max` of each), empty when each reference trigger was delivered exactly once.
 */
export function compareWithReference(
  delivered: readonly Trigger[],
  reference: readonly string[],
  max = 10,
): { missing: string[]; extra: string[]; missingCount: number; extraCount: number } {
  const want = new Map<string, number>();
  for (const k of reference) want.set(k, (want.get(k) ?? 0) + 1);
  const extra: string[] = [];
  let extraCount = 0;
  for (const t of delivered) {
    const k = triggerKey(t);
    const n = want.get(k) ?? 0;
    if (n === 0) {
      extraCount++;
      if (extra.length < max) extra.push(k);
    } else if (n === 1) want.delete(k);
    else want.set(k, n - 1);
  }
  const missing: string[] = [];
  let missingCount = 0;
  for (const [k, n] of want) {
    missingCount += n;
    if (missing.length < max) missing.push(k);
  }
  return { missing, extra, missingCount, extraCount };
}
