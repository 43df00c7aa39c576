/**
 * The burst bench's city and fleet, shaped so that the lane mix the router's classifier
 * (src/ingest/lane-classifier.ts) decides is about the second seed's: ~2 % COMPLIANCE, ~55 % IDLE, the rest
 * TRANSITION.
 *
 * How a ping's lane is decided, first match wins: COMPLIANCE when it lies inside or within `complianceMarginM`
 * (default 100 m) of a compliance fence's bounding box, or its device is inside a compliance fence; IDLE when its
 * reported speed is below 0.5 m/s; TRANSITION otherwise. The fleet (src/fences/synthetic-fleet.ts, pinging
 * round-robin, so every device sends the same share) has `parkedFraction` of its devices parked (speed under
 * 0.3 m/s: IDLE) and the rest moving at 3-23 m/s (TRANSITION). The compliance fences are small (depots, restricted
 * yards; 15-40 m), 160 in each of two square sites inside the fleet's disc, the sites sized so that the two, widened
 * by the margin, cover `complianceShare` of the disc: the moving devices wander across them (and cross many small fences
 * there, so COMPLIANCE triggers are frequent enough for a held-time P99), the parked devices in them stay COMPLIANCE.
 * The expected shares are computed from the parked devices' positions and from points spread over the disc (the
 * moving devices' share); IDLE is then about parkedFraction x (1 - complianceShare).
 */
import { coordinateBox } from '../support/coordinate-box.js';
import { generateSyntheticCity, mulberry32 } from '../../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../../src/fences/synthetic-fleet.js';

/** The fleet as the generator builds it (pass the same values to bench/loadgen/burst-loadgen.ts). */
export interface FleetShape {
  devices: number;
  seed: number;
  /** Devices start within this radius of the centre, metres. */
  radiusM: number;
  /** A moving device past this radius turns back, metres. */
  boundM: number;
  parkedFraction: number;
}

/** The city's fences. */
export interface CityShape {
  seed: number;
  fenceCount: number;
  fencesPerKm2: number;
  minRadiusM: number;
  maxRadiusM: number;
  minVertices: number;
  maxVertices: number;
}

/** The product's default `complianceMarginM`, m (the bench leaves it at its default). */
const DEFAULT_COMPLIANCE_MARGIN_M = 100;
const M_PER_DEG = 111_195;
const CENTRE_LAT = 52.52;
const CENTRE_LON = 13.405;

/** The bounding box of a fence (a circle's from its radius), degrees: [minLon, minLat, maxLon, maxLat]. */
function boxOf(feature: Record<string, unknown>): [number, number, number, number] {
  const geometry = feature.geometry as { type: string; coordinates: unknown };
  const props = feature.properties as Record<string, unknown>;
  if (geometry.type === 'Point') {
    const [lon, lat] = geometry.coordinates as [number, number];
    const r = props.radius as number;
    const dLat = r / M_PER_DEG;
    const dLon = r / (M_PER_DEG * Math.cos((lat * Math.PI) / 180));
    return [lon - dLon, lat - dLat, lon + dLon, lat + dLat];
  }
  return coordinateBox(geometry.coordinates);
}

/** The box widened by the compliance margin on every side (what the classifier's nearCompliance tests). */
function widened(b: [number, number, number, number]): [number, number, number, number] {
  const dLat = DEFAULT_COMPLIANCE_MARGIN_M / M_PER_DEG;
  const dLon = DEFAULT_COMPLIANCE_MARGIN_M / (M_PER_DEG * Math.cos((CENTRE_LAT * Math.PI) / 180));
  return [b[0] - dLon, b[1] - dLat, b[2] + dLon, b[3] + dLat];
}

const inBox = (b: readonly number[], lat: number, lon: number): boolean =>
  lon >= b[0]! && lon <= b[2]! && lat >= b[1]! && lat <= b[3]!;

/** Compliance sites and the fences in each. */
const COMPLIANCE_SITES = 2;
const FENCES_PER_SITE = 160;
const SITE_FENCE_RADIUS_M = { min: 15, max: 40 } as const;

/** The city and its expected lane shares. */
export interface ShapedCity {
  geojson: { type: 'FeatureCollection'; features: Record<string, unknown>[] };
  complianceFences: number;
  /** Compliance sites. */
  sites: number;
  /** Side of each compliance site, m. */
  siteSideM: number;
  /** Expected shares of pings per lane. */
  expected: { compliance: number; idle: number; transition: number };
}

/** Builds the city with its compliance sites and computes the lane shares the fleet is expected to produce. */
export function shapeCity(city: CityShape, fleetShape: FleetShape, complianceShare: number): ShapedCity {
  const discAreaM2 = Math.PI * fleetShape.boundM * fleetShape.boundM;
  // A site widened by the margin (and by its edge fences reaching out) is about (side + 2 x (margin + max radius))^2.
  let siteSideM =
    Math.sqrt((complianceShare * discAreaM2) / COMPLIANCE_SITES) -
    2 * (DEFAULT_COMPLIANCE_MARGIN_M + SITE_FENCE_RADIUS_M.max);
  // The estimate above undershoots (fences at a site's edge do not reach its corners): grow the sites by 5 % until the
  // expected share is within 5 % of the target.
  for (;;) {
    const shaped = buildSites(city, fleetShape, siteSideM);
    if (shaped.expected.compliance >= complianceShare * 0.95 || siteSideM > 4 * fleetShape.boundM) return shaped;
    siteSideM *= 1.05;
  }
}

/** The city with two compliance sites of side `siteSideM`, and the lane shares the fleet is expected to produce. */
function buildSites(city: CityShape, fleetShape: FleetShape, siteSideM: number): ShapedCity {
  const geojson = generateSyntheticCity({ ...city, complianceFraction: 0 }) as ShapedCity['geojson'];
  const rng = mulberry32(fleetShape.seed + 101);
  const mPerDegLon = M_PER_DEG * Math.cos((CENTRE_LAT * Math.PI) / 180);
  let complianceFences = 0;
  for (let site = 0; site < COMPLIANCE_SITES; site++) {
    // Site centres in the inner 60 % of the disc's radius, so the moving devices pass through them.
    const r = Math.sqrt(rng()) * fleetShape.boundM * 0.6;
    const a = rng() * 2 * Math.PI;
    const fences = generateSyntheticCity({
      seed: city.seed + 1000 + site,
      fenceCount: FENCES_PER_SITE,
      fencesPerKm2: FENCES_PER_SITE / (siteSideM / 1000) ** 2,
      centerLat: CENTRE_LAT + (r * Math.cos(a)) / M_PER_DEG,
      centerLon: CENTRE_LON + (r * Math.sin(a)) / mPerDegLon,
      minRadiusM: SITE_FENCE_RADIUS_M.min,
      maxRadiusM: SITE_FENCE_RADIUS_M.max,
      minVertices: city.minVertices,
      maxVertices: city.maxVertices,
      complianceFraction: 1,
      circleFraction: 0,
      holeFraction: 0,
      multiPolygonFraction: 0,
    });
    for (const f of fences.features) {
      const props = f.properties as Record<string, unknown>;
      props.id = `site${site}-${String(props.id)}`;
      geojson.features.push(f);
      complianceFences++;
    }
  }
  const boxes = geojson.features
    .filter((f) => (f.properties as Record<string, unknown>).compliance === true)
    .map((f) => widened(boxOf(f)));
  const near = (lat: number, lon: number): boolean => boxes.some((b) => inBox(b, lat, lon));
  // The fleet's parked devices where they stand (a first advance does not move a device).
  const fleet = new Fleet({
    devices: fleetShape.devices,
    seed: fleetShape.seed,
    radiusM: fleetShape.radiusM,
    boundRadiusM: fleetShape.boundM,
    parkedFraction: fleetShape.parkedFraction,
  });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  let parked = 0;
  let parkedNear = 0;
  for (let i = 0; i < fleet.size; i++) {
    if (fleet.speedOf(i) > 0) continue;
    fleet.advance(i, ping, 1);
    parked++;
    if (near(ping.lat, ping.lon)) parkedNear++;
  }
  // The moving devices: the share of points spread uniformly over the disc they wander in.
  const points = 20_000;
  let discNear = 0;
  for (let k = 0; k < points; k++) {
    const r = Math.sqrt(rng()) * fleetShape.boundM;
    const a = rng() * 2 * Math.PI;
    if (near(CENTRE_LAT + (r * Math.cos(a)) / M_PER_DEG, CENTRE_LON + (r * Math.sin(a)) / mPerDegLon)) discNear++;
  }
  const compliance = (parkedNear + ((fleet.size - parked) * discNear) / points) / fleet.size;
  const idle = (parked - parkedNear) / fleet.size;
  return {
    geojson,
    complianceFences,
    sites: COMPLIANCE_SITES,
    siteSideM,
    expected: { compliance, idle, transition: 1 - compliance - idle },
  };
}
