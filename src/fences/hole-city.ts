/**
 * A fence file of large polygons with large holes (rings around a centre, each polygon a ring of `vertices`
 * positions with a hole of as many): the input that made the hole check quadratic. Used by the fence-load benchmark
 * and the reload test; seeded jitter keeps the coordinates from repeating.
 */
import { mulberry32 } from './synthetic-city.js';

/** Options of holeCity. */
export interface HoleCityOptions {
  /** Polygons (each an annulus). */
  polygons: number;
  /** Positions in each outer ring and in each hole. */
  vertices: number;
  /** PRNG seed. */
  seed?: number;
}

/** A FeatureCollection of `polygons` annuli near Berlin, outer radius 1 km, hole radius 0.5 km. */
export function holeCity(o: HoleCityOptions): { type: 'FeatureCollection'; features: object[] } {
  const rng = mulberry32(o.seed ?? 5);
  const features: object[] = [];
  for (let p = 0; p < o.polygons; p++) {
    const cx = 13.2 + (p % 10) * 0.04;
    const cy = 52.4 + Math.floor(p / 10) * 0.03;
    const ring = (radiusM: number): number[][] => {
      const out: number[][] = [];
      for (let i = 0; i < o.vertices - 1; i++) {
        const a = (i / (o.vertices - 1)) * 2 * Math.PI;
        const r = radiusM * (1 + (rng() - 0.5) * 0.02);
        out.push([
          cx + (r * Math.cos(a)) / (111_320 * Math.cos((cy * Math.PI) / 180)),
          cy + (r * Math.sin(a)) / 110_574,
        ]);
      }
      out.push(out[0]!);
      return out;
    };
    features.push({
      type: 'Feature',
      properties: { id: `annulus-${p}` },
      geometry: { type: 'Polygon', coordinates: [ring(1000), ring(500).reverse()] },
    });
  }
  return { type: 'FeatureCollection', features };
}
