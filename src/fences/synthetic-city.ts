/**
 * A seeded synthetic city of fences, for benchmarks, tests and the demo: star-shaped polygons (simple by
 * construction: vertices at increasing angles around a centre), some with a hole, some MultiPolygons of two
 * disjoint parts, some circles, scattered uniformly over a square whose area grows with the fence count (constant
 * density), so 10,000 and 100,000 fences are the same city texture at two sizes. Same seed, same city.
 */
import { M_PER_DEG, metresPerDegreeX } from './geometry.js';

/** A seeded PRNG (mulberry32): returns a function yielding floats in [0, 1). */
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

/** Options of generateSyntheticCity. */
export interface SyntheticCityOptions {
  /** PRNG seed. */
  seed?: number;
  /** Number of fences, a positive integer. */
  fenceCount?: number;
  /** City centre latitude, degrees. */
  centerLat?: number;
  /** City centre longitude, degrees. */
  centerLon?: number;
  /** Fences per square kilometre (sets the city's size). */
  fencesPerKm2?: number;
  /** Vertices per polygon fence, lower bound (at least 8). */
  minVertices?: number;
  /** Vertices per polygon fence, upper bound. */
  maxVertices?: number;
  /** Fence radius lower bound, metres. */
  minRadiusM?: number;
  /** Fence radius upper bound, metres. */
  maxRadiusM?: number;
  /** Fraction of fences marked compliance, in [0, 1]. */
  complianceFraction?: number;
  /** Fraction of fences that are circles, in [0, 1]. */
  circleFraction?: number;
  /** Fraction of polygon fences with a hole, in [0, 1]. */
  holeFraction?: number;
  /** Fraction of polygon fences that are two-part MultiPolygons, in [0, 1]. */
  multiPolygonFraction?: number;
  /** dwellMs given to every fence (omitted when undefined). */
  dwellMs?: number;
}

/** Defaults of generateSyntheticCity: 10,000 fences of 32-64 vertices around Berlin, 60 fences per km2. */
const SYNTHETIC_CITY_DEFAULTS: Required<Omit<SyntheticCityOptions, 'dwellMs'>> = {
  seed: 1,
  fenceCount: 10_000,
  centerLat: 52.52,
  centerLon: 13.405,
  fencesPerKm2: 60,
  minVertices: 32,
  maxVertices: 64,
  minRadiusM: 20,
  maxRadiusM: 100,
  complianceFraction: 0.05,
  circleFraction: 0.05,
  holeFraction: 0.1,
  multiPolygonFraction: 0.05,
};

/** The square a synthetic city covers, degrees. */
export interface CityBounds {
  /** South edge. */
  minLat: number;
  /** West edge. */
  minLon: number;
  /** North edge. */
  maxLat: number;
  /** East edge. */
  maxLon: number;
}

/** A GeoJSON FeatureCollection as produced here. */
export interface FeatureCollectionJson {
  /** Always 'FeatureCollection'. */
  type: 'FeatureCollection';
  /** The fences. */
  features: Array<Record<string, unknown>>;
}

function checkFraction(name: string, v: number): void {
  if (!(v >= 0 && v <= 1)) throw new RangeError(`options.${name} must be a number in [0, 1], got ${String(v)}`);
}

function resolve(options: SyntheticCityOptions): Required<Omit<SyntheticCityOptions, 'dwellMs'>> {
  const o = { ...SYNTHETIC_CITY_DEFAULTS, ...options };
  if (!Number.isInteger(o.fenceCount) || o.fenceCount <= 0) {
    throw new RangeError(`options.fenceCount must be a positive integer, got ${String(o.fenceCount)}`);
  }
  if (!Number.isInteger(o.minVertices) || o.minVertices < 8 || o.maxVertices < o.minVertices) {
    throw new RangeError(
      `options.minVertices must be an integer >= 8 and <= options.maxVertices, got ${String(o.minVertices)}`,
    );
  }
  if (!(o.minRadiusM > 0 && o.maxRadiusM >= o.minRadiusM)) {
    throw new RangeError(`options.minRadiusM must be a number in (0, options.maxRadiusM], got ${String(o.minRadiusM)}`);
  }
  if (!(o.fencesPerKm2 > 0))
    throw new RangeError(`options.fencesPerKm2 must be a positive number, got ${String(o.fencesPerKm2)}`);
  checkFraction('complianceFraction', o.complianceFraction);
  checkFraction('circleFraction', o.circleFraction);
  checkFraction('holeFraction', o.holeFraction);
  checkFraction('multiPolygonFraction', o.multiPolygonFraction);
  return o;
}

/** The square covered by the city these options generate. */
export function syntheticCityBounds(options: SyntheticCityOptions = {}): CityBounds {
  const o = resolve(options);
  const halfSideM = (Math.sqrt(o.fenceCount / o.fencesPerKm2) * 1000) / 2;
  const dLat = halfSideM / M_PER_DEG;
  const dLon = halfSideM / metresPerDegreeX(o.centerLat);
  return {
    minLat: o.centerLat - dLat,
    minLon: o.centerLon - dLon,
    maxLat: o.centerLat + dLat,
    maxLon: o.centerLon + dLon,
  };
}

/** A closed star-shaped ring of `n` vertices around (lon, lat), radii in [0.7, 1] * radiusM, flat-ring positions. */
function starRing(
  rng: () => number,
  lon: number,
  lat: number,
  radiusM: number,
  n: number,
  clockwise: boolean,
): number[][] {
  const kx = metresPerDegreeX(lat);
  const ring: number[][] = [];
  const step = (2 * Math.PI) / n;
  for (let i = 0; i < n; i++) {
    // Jitter stays inside half a step so angles keep increasing: the ring stays simple.
    const a = (clockwise ? -1 : 1) * (i * step + (rng() - 0.5) * 0.8 * step);
    const r = radiusM * (0.7 + 0.3 * rng());
    ring.push([lon + (Math.cos(a) * r) / kx, lat + (Math.sin(a) * r) / M_PER_DEG]);
  }
  ring.push([ring[0]![0]!, ring[0]![1]!]);
  return ring;
}

/** Generates the city's fences as a GeoJSON FeatureCollection (ids `f0`, `f1`, ...). */
export function generateSyntheticCity(options: SyntheticCityOptions = {}): FeatureCollectionJson {
  const o = resolve(options);
  const b = syntheticCityBounds(o);
  const rng = mulberry32(o.seed);
  const features: Array<Record<string, unknown>> = [];
  for (let i = 0; i < o.fenceCount; i++) {
    const lon = b.minLon + rng() * (b.maxLon - b.minLon);
    const lat = b.minLat + rng() * (b.maxLat - b.minLat);
    const radiusM = o.minRadiusM + rng() * (o.maxRadiusM - o.minRadiusM);
    const n = o.minVertices + Math.floor(rng() * (o.maxVertices - o.minVertices + 1));
    const properties: Record<string, unknown> = {
      id: `f${i}`,
      compliance: rng() < o.complianceFraction,
      tags: [`zone-${i % 7}`],
    };
    if (options.dwellMs !== undefined) properties['dwellMs'] = options.dwellMs;
    const kind = rng();
    let geometry: Record<string, unknown>;
    if (kind < o.circleFraction) {
      properties['radius'] = radiusM;
      geometry = { type: 'Point', coordinates: [lon, lat] };
    } else if (kind < o.circleFraction + o.multiPolygonFraction) {
      // Two parts of half the radius whose centres are 1.2 radii apart: they never overlap.
      const kx = metresPerDegreeX(lat);
      const dx = (0.6 * radiusM) / kx;
      geometry = {
        type: 'MultiPolygon',
        coordinates: [
          [starRing(rng, lon - dx, lat, radiusM / 2, Math.max(4, n >> 1), false)],
          [starRing(rng, lon + dx, lat, radiusM / 2, Math.max(4, n - (n >> 1)), false)],
        ],
      };
    } else {
      const rings = [starRing(rng, lon, lat, radiusM, n, false)];
      // A hole of 0.3 radii stays inside a star whose vertices are at >= 0.7 radii.
      if (rng() < o.holeFraction) rings.push(starRing(rng, lon, lat, radiusM * 0.3, 8, true));
      geometry = { type: 'Polygon', coordinates: rings };
    }
    features.push({ type: 'Feature', properties, geometry });
  }
  return { type: 'FeatureCollection', features };
}
