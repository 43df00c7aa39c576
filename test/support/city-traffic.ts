/**
 * Seeded, CROSS-heavy traffic over a synthetic city for delivery tests: devices driving straight lines through
 * dense fences with pings far enough apart that many pass through a fence between two pings; encoded once as
 * MessagePack frames; sent over TCP at a paced rate.
 */
import { connect } from 'node:net';
import { encodePingInto, MAX_PING_BYTES } from '../../src/ingest/ping-encoder.js';
import type { FleetPing } from '../../src/fences/synthetic-fleet.js';
import {
  generateSyntheticCity,
  mulberry32,
  syntheticCityBounds,
  type FeatureCollectionJson,
} from '../../src/fences/synthetic-city.js';

/** Options of cityTraffic. */
export interface CityTrafficOptions {
  /** PRNG seed (the same seed gives the same fences and pings). */
  seed: number;
  /** Fences of the synthetic city. */
  fences: number;
  /** Devices. */
  devices: number;
  /** Pings per device. */
  pingsPerDevice: number;
  /** Event time between two pings of a device, ms. */
  pingIntervalMs: number;
  /** Driving speed, m/s. */
  speedMps: number;
  /** DWELL threshold of every fence, ms. */
  dwellMs: number;
  /** First event time, epoch ms. */
  startMs: number;
  /** Device ids: `<prefix><index>`. */
  idPrefix?: string;
}

/** The traffic: fences, and every ping encoded in send order (device-major per round, event time increasing). */
export interface CityTraffic {
  /** The city's fences. */
  fences: FeatureCollectionJson;
  /** The frames, concatenated. */
  frames: Buffer;
  /** End offset of ping k in `frames`. */
  ends: Uint32Array;
  /** Pings. */
  pings: number;
}

const M_PER_DEG = 111_195;

/** Builds the traffic (see the module comment). */
export function cityTraffic(o: CityTrafficOptions): CityTraffic {
  const city = { seed: o.seed, fenceCount: o.fences, dwellMs: o.dwellMs };
  const fences = generateSyntheticCity(city);
  const b = syntheticCityBounds(city);
  const rnd = mulberry32(o.seed ^ 0x5eed);
  const n = o.devices;
  const lat = new Float64Array(n);
  const lon = new Float64Array(n);
  const dLat = new Float64Array(n);
  const dLon = new Float64Array(n);
  const mPerDegLon = M_PER_DEG * Math.cos((((b.minLat + b.maxLat) / 2) * Math.PI) / 180);
  for (let i = 0; i < n; i++) {
    lat[i] = b.minLat + rnd() * (b.maxLat - b.minLat);
    lon[i] = b.minLon + rnd() * (b.maxLon - b.minLon);
    const h = rnd() * 2 * Math.PI;
    const stepM = (o.speedMps * o.pingIntervalMs) / 1000;
    dLat[i] = (stepM * Math.cos(h)) / M_PER_DEG;
    dLon[i] = (stepM * Math.sin(h)) / mPerDegLon;
  }
  const pings = n * o.pingsPerDevice;
  const frames = Buffer.allocUnsafe(pings * MAX_PING_BYTES);
  const ends = new Uint32Array(pings);
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: o.speedMps, heading: 0, accuracy: 5 };
  let pos = 0;
  let k = 0;
  const prefix = o.idPrefix ?? 'v';
  for (let round = 0; round < o.pingsPerDevice; round++) {
    for (let i = 0; i < n; i++) {
      // Bounce off the city's edges so every device stays among the fences.
      if (lat[i]! + dLat[i]! < b.minLat || lat[i]! + dLat[i]! > b.maxLat) dLat[i] = -dLat[i]!;
      if (lon[i]! + dLon[i]! < b.minLon || lon[i]! + dLon[i]! > b.maxLon) dLon[i] = -dLon[i]!;
      if (round > 0) {
        lat[i] = lat[i]! + dLat[i]!;
        lon[i] = lon[i]! + dLon[i]!;
      }
      ping.id = `${prefix}${i}`;
      ping.lat = lat[i]!;
      ping.lon = lon[i]!;
      ping.ts = o.startMs + round * o.pingIntervalMs + (i % 1000);
      ping.heading = ((Math.atan2(dLon[i]!, dLat[i]!) * 180) / Math.PI + 360) % 360;
      pos = encodePingInto(frames, pos, ping, 'maps');
      ends[k++] = pos;
    }
  }
  return { fences, frames: frames.subarray(0, pos), ends, pings };
}

/**
 * Sends pings [from, to) of `traffic` over one TCP connection at `ratePerSec`, in 10 ms slices (one write each),
 * keeping to the rate over the whole run; resolves when all are written and the connection ended. Returns the
 * achieved rate. `progress.sent`, when given, is kept at the number of pings written so far.
 */
export async function sendPaced(
  port: number,
  traffic: CityTraffic,
  ratePerSec: number,
  from = 0,
  to = traffic.pings,
  progress?: { sent: number },
): Promise<number> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const t0 = performance.now();
  const perSlice = Math.max(1, Math.round(ratePerSec / 100));
  let k = from;
  while (k < to) {
    const next = Math.min(to, k + perSlice);
    const start = k === 0 ? 0 : traffic.ends[k - 1]!;
    const ok = socket.write(traffic.frames.subarray(start, traffic.ends[next - 1]!));
    k = next;
    if (progress !== undefined) progress.sent = k;
    if (!ok) await new Promise<void>((resolve) => socket.once('drain', resolve));
    // Where the schedule says we should be; sleep off any lead.
    const dueMs = ((k - from) / ratePerSec) * 1000;
    const lead = dueMs - (performance.now() - t0);
    if (lead > 1) await new Promise((r) => setTimeout(r, lead));
  }
  await new Promise<void>((resolve) => socket.end(resolve));
  return ((to - from) * 1000) / (performance.now() - t0);
}
