/**
 * A seeded simulated fleet for load generation: devices moving around a city centre at vehicle speeds, a share of
 * them parked (stationary, GPS jitter only). The same seed gives the same pings.
 */

/** mulberry32: a small seeded PRNG returning [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One ping as sent on the wire. */
export interface FleetPing {
  id: string;
  lat: number;
  lon: number;
  ts: number;
  speed: number;
  heading: number;
  accuracy: number;
}

/** Options of the fleet. */
export interface FleetOptions {
  /** Devices. */
  devices: number;
  /** PRNG seed. */
  seed: number;
  /** City centre latitude. */
  centreLat: number;
  /** City centre longitude. */
  centreLon: number;
  /** Radius devices roam in, metres. */
  radiusM: number;
  /** Share of devices parked, [0, 1]. */
  parkedFraction: number;
}

/** Defaults: 10,000 devices around Berlin, a third parked. */
export const FLEET_DEFAULTS: FleetOptions = { devices: 10_000, seed: 42, centreLat: 52.52, centreLon: 13.405, radiusM: 15_000, parkedFraction: 1 / 3 };

const M_PER_DEG_LAT = 111_195;

/** The fleet: `next(out, tsMs)` advances one device (round-robin) and fills `out`. */
export class Fleet {
  readonly size: number;
  private readonly rnd: () => number;
  private readonly lat: Float64Array;
  private readonly lon: Float64Array;
  private readonly speed: Float64Array;
  private readonly heading: Float64Array;
  private readonly lastTs: Float64Array;
  private readonly ids: string[];
  private cursor = 0;

  constructor(options: Partial<FleetOptions> = {}) {
    const o = { ...FLEET_DEFAULTS, ...options };
    this.size = o.devices;
    this.rnd = mulberry32(o.seed);
    this.lat = new Float64Array(o.devices);
    this.lon = new Float64Array(o.devices);
    this.speed = new Float64Array(o.devices);
    this.heading = new Float64Array(o.devices);
    this.lastTs = new Float64Array(o.devices);
    this.ids = [];
    const mPerDegLon = M_PER_DEG_LAT * Math.cos((o.centreLat * Math.PI) / 180);
    for (let i = 0; i < o.devices; i++) {
      const r = Math.sqrt(this.rnd()) * o.radiusM;
      const a = this.rnd() * 2 * Math.PI;
      this.lat[i] = o.centreLat + (r * Math.cos(a)) / M_PER_DEG_LAT;
      this.lon[i] = o.centreLon + (r * Math.sin(a)) / mPerDegLon;
      this.speed[i] = this.rnd() < o.parkedFraction ? 0 : 3 + this.rnd() * 20;
      this.heading[i] = this.rnd() * 360;
      this.ids.push(`veh-${o.seed}-${i}`);
    }
  }

  /** Index of the device the next call to `next` advances. */
  get nextDevice(): number {
    return this.cursor;
  }

  /** Advances the next device to time `tsMs` and writes its ping into `out`. */
  next(out: FleetPing, tsMs: number): void {
    const i = this.cursor;
    this.cursor = i + 1 === this.size ? 0 : i + 1;
    const dt = this.lastTs[i] === 0 ? 0 : (tsMs - this.lastTs[i]!) / 1000;
    this.lastTs[i] = tsMs;
    const v = this.speed[i]!;
    if (v > 0) {
      // Wander: a small random turn, then move along the heading.
      this.heading[i] = (this.heading[i]! + (this.rnd() - 0.5) * 20 + 360) % 360;
      const h = (this.heading[i]! * Math.PI) / 180;
      const d = v * dt;
      this.lat[i]! += (d * Math.cos(h)) / M_PER_DEG_LAT;
      this.lon[i]! += (d * Math.sin(h)) / (M_PER_DEG_LAT * Math.cos((this.lat[i]! * Math.PI) / 180));
    }
    const jitter = 2 / M_PER_DEG_LAT;
    out.id = this.ids[i]!;
    out.lat = this.lat[i]! + (this.rnd() - 0.5) * jitter;
    out.lon = this.lon[i]! + (this.rnd() - 0.5) * jitter;
    out.ts = tsMs;
    out.speed = v === 0 ? this.rnd() * 0.3 : v;
    out.heading = this.heading[i]!;
    out.accuracy = 3 + this.rnd() * 7;
  }
}
