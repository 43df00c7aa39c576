/**
 * A seeded simulated fleet, shared by the demo (src/demo) and the load generator (bench/loadgen): devices moving
 * around a city centre at vehicle speeds, a share of them parked (stationary, GPS jitter only). The same seed gives
 * the same pings. Runs on whichever thread drives it; it reads no clock (time is a parameter).
 */
import { mulberry32 } from './synthetic-city.js';

export { mulberry32 };

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
  /** Radius devices start in, metres. */
  radiusM: number;
  /** A moving device farther than this from the centre turns back towards it, metres (Infinity: never). */
  boundRadiusM: number;
  /** Share of devices parked, [0, 1]. */
  parkedFraction: number;
}

/** Defaults: 10,000 devices around Berlin, a third parked. */
export const FLEET_DEFAULTS: FleetOptions = {
  devices: 10_000,
  seed: 42,
  centreLat: 52.52,
  centreLon: 13.405,
  radiusM: 15_000,
  boundRadiusM: Infinity,
  parkedFraction: 1 / 3,
};

const M_PER_DEG_LAT = 111_195;

/** Lowest and highest speed of a moving device, m/s. */
export const MOVING_SPEED_MPS = { min: 3, max: 23 } as const;

/**
 * The fleet: `next(out, tsMs)` advances one device (round-robin) and fills `out`; `advance(i, out, tsMs)` advances
 * a given device; `setSpeed` parks or starts one.
 */
export class Fleet {
  readonly size: number;
  private readonly rnd: () => number;
  private readonly lat: Float64Array;
  private readonly lon: Float64Array;
  private readonly speed: Float64Array;
  private readonly heading: Float64Array;
  private readonly lastTs: Float64Array;
  private readonly ids: string[];
  private readonly centreLat: number;
  private readonly centreLon: number;
  private readonly boundRadiusM: number;
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
    this.centreLat = o.centreLat;
    this.centreLon = o.centreLon;
    this.boundRadiusM = o.boundRadiusM;
    const mPerDegLon = M_PER_DEG_LAT * Math.cos((o.centreLat * Math.PI) / 180);
    for (let i = 0; i < o.devices; i++) {
      const r = Math.sqrt(this.rnd()) * o.radiusM;
      const a = this.rnd() * 2 * Math.PI;
      this.lat[i] = o.centreLat + (r * Math.cos(a)) / M_PER_DEG_LAT;
      this.lon[i] = o.centreLon + (r * Math.sin(a)) / mPerDegLon;
      this.speed[i] = this.rnd() < o.parkedFraction ? 0 : this.randomSpeedMps();
      this.heading[i] = this.rnd() * 360;
      this.ids.push(`veh-${o.seed}-${i}`);
    }
  }

  /** Index of the device the next call to `next` advances. */
  get nextDevice(): number {
    return this.cursor;
  }

  /** A moving speed drawn from the fleet's PRNG, m/s. */
  randomSpeedMps(): number {
    return MOVING_SPEED_MPS.min + this.rnd() * (MOVING_SPEED_MPS.max - MOVING_SPEED_MPS.min);
  }

  /** Speed of device `i`, m/s (0: parked). */
  speedOf(i: number): number {
    return this.speed[i]!;
  }

  /** Sets the speed of device `i`, m/s (0 parks it). */
  setSpeed(i: number, speedMps: number): void {
    if (!(speedMps >= 0 && speedMps < 1000))
      throw new RangeError(`speedMps must be a number in [0, 1000), got ${String(speedMps)}`);
    this.speed[i] = speedMps;
  }

  /** The id device `i` sends. */
  idOf(i: number): string {
    return this.ids[i]!;
  }

  /** Advances the next device to time `tsMs` and writes its ping into `out`. */
  next(out: FleetPing, tsMs: number): void {
    const i = this.cursor;
    this.cursor = i + 1 === this.size ? 0 : i + 1;
    this.advance(i, out, tsMs);
  }

  /** Advances device `i` to time `tsMs` (not before its previous ping) and writes its ping into `out`. */
  advance(i: number, out: FleetPing, tsMs: number): void {
    const dt = this.lastTs[i] === 0 ? 0 : (tsMs - this.lastTs[i]!) / 1000;
    this.lastTs[i] = tsMs;
    const v = this.speed[i]!;
    if (v > 0) {
      // Wander: a small random turn, then move along the heading.
      this.heading[i] = (this.heading[i]! + (this.rnd() - 0.5) * 20 + 360) % 360;
      // Past the bound, head back to the centre so the fleet stays in the city.
      if (this.boundRadiusM !== Infinity) this.turnBackIfOut(i);
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

  private turnBackIfOut(i: number): void {
    const northM = (this.lat[i]! - this.centreLat) * M_PER_DEG_LAT;
    const eastM = (this.lon[i]! - this.centreLon) * M_PER_DEG_LAT * Math.cos((this.centreLat * Math.PI) / 180);
    if (northM * northM + eastM * eastM <= this.boundRadiusM * this.boundRadiusM) return;
    // Heading in degrees clockwise from north, pointing at the centre, with a little spread.
    this.heading[i] = ((Math.atan2(-eastM, -northM) * 180) / Math.PI + 360 + (this.rnd() - 0.5) * 40) % 360;
  }
}
