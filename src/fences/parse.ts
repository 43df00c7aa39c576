/**
 * GeoJSON fence loading and validation (main thread, at start and on reload; allocates freely).
 *
 * Accepted: a FeatureCollection whose features are Polygon or MultiPolygon (with holes), or Point with a `radius` in
 * metres (a circle). Properties: `id` (required, non-empty string or finite number, unique), `compliance` (boolean),
 * `dwellMs`, `exitBufferM`, `minInsideMs`, `minOutsideMs` (non-negative finite numbers), `tags` (at most MAX_TAGS
 * strings of at most MAX_TAG_CHARS characters: they travel with every trigger and into every durable record),
 * `expiresAt` (epoch milliseconds, or an ISO 8601 date-time string with a time zone: the router removes the fence
 * then, as a live edit would). Unknown properties are ignored.
 *
 * Not supported (rejected with a reason): rings crossing the antimeridian (a ring may not span more than 180 degrees
 * of longitude: split such a fence at 180), circles centred beyond 85 degrees of latitude or wider than
 * MAX_CIRCLE_RADIUS_M, other geometry types.
 *
 * Geometry checked (rejected with a reason naming the ring and positions): a ring (outer or hole) that crosses itself
 * or runs back along itself (a spike), or has fewer than 3 distinct positions; a hole with a vertex outside its outer
 * ring or an edge crossing it (hole-check.ts); two holes of one polygon that cross or overlap; two MultiPolygon parts
 * that cross or overlap (one inside another's area). Accepted: a ring touching itself at a point without crossing (a
 * pinched ring), holes or parts touching at points or along an edge from opposite sides, a part inside another part's
 * hole (ring-validity.ts says how each is decided, and the one kind of overlap it does not look for). Not checked: ring
 * orientation (either winding is accepted; RFC 7946 only recommends one).
 *
 * All errors are collected: the thrown FenceValidationError carries the first as `featureIndex` / `reason` and all of
 * them in `errors`.
 */
import { MAX_CIRCLE_ABS_LAT_DEG, MAX_CIRCLE_RADIUS_M, metresPerDegreeX, M_PER_DEG } from './geometry.js';
import { holeProblem } from './hole-check.js';
import { firstOverlap, ringSelfProblem } from './ring-validity.js';
import type { RegionOverlap } from './ring-validity.js';

/** Limits a fence file must keep (a file over one is refused, naming the feature and the limit). */
export interface FenceLimits {
  /** Most features in one collection. */
  maxFences: number;
  /** Most positions in one ring. */
  maxVerticesPerRing: number;
}

/** Default limits: a million fences, 100,000 positions per ring. */
export const DEFAULT_FENCE_LIMITS: Readonly<FenceLimits> = Object.freeze({
  maxFences: 1_000_000,
  maxVerticesPerRing: 100_000,
});

/** Most tags a fence may carry. */
const MAX_TAGS = 32;
/** Longest tag, characters. */
const MAX_TAG_CHARS = 128;
/** Most bytes a fence's tags may take as JSON (they travel in every durable trigger record). */
const MAX_TAGS_JSON_BYTES = 8192;

/** One validation problem: the feature's index in `features` (-1 for the collection itself) and what is wrong. */
export interface FenceProblem {
  /** Index of the feature in the collection's `features`, or -1 when the collection itself is wrong. */
  readonly featureIndex: number;
  /** What is wrong, e.g. `polygon ring 0 is not closed`. */
  readonly reason: string;
}

/** Thrown by parseFences: message `feature 3: polygon ring 0 is not closed` (plus a count of further problems). */
export class FenceValidationError extends Error {
  /** Index of the first bad feature (-1: the collection itself). */
  readonly featureIndex: number;
  /** Reason of the first problem. */
  readonly reason: string;
  /** Every problem found, in feature order. */
  readonly errors: readonly FenceProblem[];

  constructor(errors: readonly FenceProblem[]) {
    const first = errors[0]!;
    const where = first.featureIndex < 0 ? 'feature collection' : `feature ${first.featureIndex}`;
    const more = errors.length > 1 ? ` (and ${errors.length - 1} more problem${errors.length > 2 ? 's' : ''})` : '';
    super(`${where}: ${first.reason}${more}`);
    this.name = 'FenceValidationError';
    this.featureIndex = first.featureIndex;
    this.reason = first.reason;
    this.errors = errors;
  }
}

/** One validated fence. */
export interface ParsedFence {
  /** Unique id. */
  readonly id: string;
  /** Compliance fence: its pings travel in the COMPLIANCE lane. */
  readonly compliance: boolean;
  /** Free-form tags. */
  readonly tags: readonly string[];
  /** DWELL threshold, ms; Infinity when the fence has none. */
  readonly dwellMs: number;
  /** Exit buffer, metres (0: none). */
  readonly exitBufferM: number;
  /** ms seen inside before ENTER (0: at once). */
  readonly minInsideMs: number;
  /** ms seen outside before EXIT (0: at once). */
  readonly minOutsideMs: number;
  /** 'polygon' (rings) or 'circle' (centre and radius). */
  readonly kind: 'polygon' | 'circle';
  /** Polygon rings of every part, outer ring then holes, each flat [x0, y0, ..., x0, y0] (closed). Empty for circles. */
  readonly rings: readonly Float64Array[];
  /** Circle centre longitude (0 for polygons). */
  readonly centerLon: number;
  /** Circle centre latitude (0 for polygons). */
  readonly centerLat: number;
  /** Circle radius, metres (0 for polygons). */
  readonly radiusM: number;
  /** Bounding box [minLon, minLat, maxLon, maxLat]. */
  readonly bbox: readonly [number, number, number, number];
  /** When the fence is removed, epoch ms; Infinity when it does not expire. */
  readonly expiresAtMs: number;
}

/** The result of parseFences: fences in feature order. */
export interface ParsedFences {
  /** Validated fences, index = feature index. */
  readonly fences: readonly ParsedFence[];
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return `"${v.length > 40 ? `${v.slice(0, 40)}...` : v}"`;
  return typeof v === 'object' ? 'an object' : String(v);
}

/** Validates one ring; returns the flat closed ring or a reason. */
function parseRing(raw: unknown, label: string, limits: FenceLimits): Float64Array | string {
  if (!Array.isArray(raw)) return `${label} is not an array of positions`;
  if (raw.length < 4) return `${label} has ${raw.length} positions, at least 4 required`;
  if (raw.length > limits.maxVerticesPerRing)
    return `${label} has ${raw.length} positions, over the limit maxVerticesPerRing ${limits.maxVerticesPerRing}`;
  const out = new Float64Array(raw.length * 2);
  let minX = Infinity;
  let maxX = -Infinity;
  for (let i = 0; i < raw.length; i++) {
    const p: unknown = raw[i];
    if (!Array.isArray(p) || p.length < 2) return `${label} position ${i} is not a [lon, lat] position`;
    const x: unknown = p[0];
    const y: unknown = p[1];
    if (typeof x !== 'number' || typeof y !== 'number' || !Number.isFinite(x) || !Number.isFinite(y)) {
      return `${label} position ${i} has a non-finite or non-numeric coordinate`;
    }
    if (x < -180 || x > 180) return `${label} position ${i} longitude ${x} is out of range [-180, 180]`;
    if (y < -90 || y > 90) return `${label} position ${i} latitude ${y} is out of range [-90, 90]`;
    out[i * 2] = x;
    out[i * 2 + 1] = y;
    if (x < minX) minX = x;
    if (x > maxX) maxX = x;
  }
  const n = out.length;
  if (out[0] !== out[n - 2] || out[1] !== out[n - 1]) return `${label} is not closed (first and last positions differ)`;
  if (maxX - minX > 180) {
    return `${label} spans ${maxX - minX} degrees of longitude: rings crossing the antimeridian are not supported`;
  }
  return out;
}

/** Validates polygon coordinates (outer ring + holes); pushes rings into `rings` or returns a reason. */
function parsePolygon(raw: unknown, prefix: string, rings: Float64Array[], limits: FenceLimits): string | null {
  if (!Array.isArray(raw) || raw.length === 0) return `${prefix}coordinates must be a non-empty array of rings`;
  const first = rings.length;
  for (let r = 0; r < raw.length; r++) {
    const ring = parseRing(raw[r], `${prefix}polygon ring ${r}`, limits);
    if (typeof ring === 'string') return ring;
    rings.push(ring);
  }
  for (let r = first; r < rings.length; r++) {
    const problem = ringSelfProblem(rings[r]!);
    if (problem !== null) return `${prefix}polygon ring ${r - first} ${problem}`;
  }
  const outer = rings[first]!;
  for (let h = first + 1; h < rings.length; h++) {
    const problem = holeProblem(outer, rings[h]!);
    if (problem !== null) return `${prefix}polygon ring ${h - first} (a hole) ${problem}`;
  }
  if (rings.length - first > 2) {
    const overlap = firstOverlap(rings.slice(first + 1).map((hole) => [hole]));
    if (overlap !== null) return `${prefix}${holesOverlapReason(overlap)}`;
  }
  return null;
}

/** The reason for two overlapping holes (regions are holes: region k is polygon ring k + 1). */
function holesOverlapReason(o: RegionOverlap): string {
  const ring = (region: number): string => `ring ${region + 1}`;
  const head = `polygon ring ${o.second + 1} (a hole)`;
  const other = `${ring(o.first)}, another hole`;
  if (o.kind === 'cross') {
    return `${head} crosses ${other} (edges from positions ${o.position} and ${o.otherPosition})`;
  }
  if (o.kind === 'along') {
    return (
      `${head} overlaps ${other} (the edge from position ${o.position} of ${ring(o.second)} runs along the edge ` +
      `from position ${o.otherPosition} of ${ring(o.first)}, both holes on the same side)`
    );
  }
  const inside = ring(o.region === o.first ? o.second : o.first);
  const shown =
    o.kind === 'vertex'
      ? `position ${o.position} of ${ring(o.region)} lies inside ${inside}`
      : `the edge from position ${o.position} of ${ring(o.region)} runs inside ${inside}`;
  return `${head} overlaps ${other} (${shown})`;
}

/** The reason for two overlapping MultiPolygon parts (region k is part k). */
function partsOverlapReason(o: RegionOverlap): string {
  const head = `multipolygon parts ${o.first} and ${o.second} overlap`;
  if (o.kind === 'cross') {
    return (
      `${head} (the edge from position ${o.position} of part ${o.second} ring ${o.ring} crosses the edge from ` +
      `position ${o.otherPosition} of part ${o.first} ring ${o.otherRing})`
    );
  }
  if (o.kind === 'along') {
    return (
      `${head} (the edge from position ${o.position} of part ${o.second} ring ${o.ring} runs along the edge from ` +
      `position ${o.otherPosition} of part ${o.first} ring ${o.otherRing}, both parts on the same side)`
    );
  }
  const inside = `part ${o.region === o.first ? o.second : o.first}`;
  return o.kind === 'vertex'
    ? `${head} (position ${o.position} of part ${o.region} ring 0 lies inside ${inside})`
    : `${head} (the edge from position ${o.position} of part ${o.region} ring 0 runs inside ${inside})`;
}

function optionalNonNegative(props: Json, name: string, fallback: number, problems: string[]): number {
  const v = props[name];
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    problems.push(`${name} must be a non-negative finite number, got ${describe(v)}`);
    return fallback;
  }
  return v;
}

/** Parses and validates a GeoJSON FeatureCollection of fences; throws FenceValidationError listing every problem. */
export function parseFences(geojson: unknown, limits: FenceLimits = DEFAULT_FENCE_LIMITS): ParsedFences {
  if (!isObject(geojson) || geojson['type'] !== 'FeatureCollection') {
    throw new FenceValidationError([{ featureIndex: -1, reason: 'input is not a GeoJSON FeatureCollection' }]);
  }
  const features = geojson['features'];
  if (!Array.isArray(features)) {
    throw new FenceValidationError([{ featureIndex: -1, reason: 'features must be an array' }]);
  }
  if (features.length > limits.maxFences) {
    throw new FenceValidationError([
      { featureIndex: -1, reason: `${features.length} features, over the limit maxFences ${limits.maxFences}` },
    ]);
  }
  const errors: FenceProblem[] = [];
  const fences: ParsedFence[] = [];
  const firstUse = new Map<string, number>();
  for (let index = 0; index < features.length; index++) {
    const problems: string[] = [];
    const fence = parseFeature(features[index], problems, limits);
    if (fence !== null && problems.length === 0) {
      const prior = firstUse.get(fence.id);
      if (prior !== undefined) problems.push(`duplicate id "${fence.id}" (first used by feature ${prior})`);
      else firstUse.set(fence.id, index);
    }
    for (const reason of problems) errors.push({ featureIndex: index, reason });
    if (fence !== null && problems.length === 0) fences.push(fence);
  }
  if (errors.length > 0) throw new FenceValidationError(errors);
  return { fences };
}

/**
 * Parses and validates one GeoJSON Feature (a live edit); throws FenceValidationError (feature index 0) listing every
 * problem.
 */
export function parseFence(feature: unknown, limits: FenceLimits = DEFAULT_FENCE_LIMITS): ParsedFence {
  const problems: string[] = [];
  const fence = parseFeature(feature, problems, limits);
  if (fence === null || problems.length > 0) {
    if (problems.length === 0) problems.push('is not a valid fence');
    throw new FenceValidationError(problems.map((reason) => ({ featureIndex: 0, reason })));
  }
  return fence;
}

function parseFeature(feature: unknown, problems: string[], limits: FenceLimits): ParsedFence | null {
  if (!isObject(feature) || feature['type'] !== 'Feature') {
    problems.push('is not a GeoJSON Feature');
    return null;
  }
  const props = feature['properties'];
  if (!isObject(props)) {
    problems.push('has no properties object (id is required)');
    return null;
  }
  const rawId = props['id'];
  let id = '';
  if (typeof rawId === 'string' && rawId.length > 0 && rawId.length <= 256) id = rawId;
  else if (typeof rawId === 'number' && Number.isFinite(rawId)) id = String(rawId);
  else
    problems.push(`id must be a non-empty string (at most 256 characters) or a finite number, got ${describe(rawId)}`);

  const rawCompliance = props['compliance'];
  if (rawCompliance !== undefined && typeof rawCompliance !== 'boolean') {
    problems.push(`compliance must be a boolean, got ${describe(rawCompliance)}`);
  }
  const compliance = rawCompliance === true;
  const dwellMs = optionalNonNegative(props, 'dwellMs', Infinity, problems);
  const exitBufferM = optionalNonNegative(props, 'exitBufferM', 0, problems);
  const minInsideMs = optionalNonNegative(props, 'minInsideMs', 0, problems);
  const minOutsideMs = optionalNonNegative(props, 'minOutsideMs', 0, problems);
  if (dwellMs < minInsideMs) {
    problems.push(
      `dwellMs (${dwellMs}) is less than minInsideMs (${minInsideMs}): a device cannot dwell before it enters`,
    );
  }
  const expiresAtMs = parseExpiry(props['expiresAt'], problems);
  const rawTags = props['tags'];
  let tags: string[] = [];
  if (rawTags !== undefined) {
    if (
      Array.isArray(rawTags) &&
      rawTags.length <= MAX_TAGS &&
      rawTags.every((t) => typeof t === 'string' && t.length > 0 && t.length <= MAX_TAG_CHARS)
    ) {
      tags = rawTags as string[];
      const bytes = Buffer.byteLength(JSON.stringify(tags), 'utf8');
      if (bytes > MAX_TAGS_JSON_BYTES)
        problems.push(`tags take ${bytes} bytes as JSON; at most ${MAX_TAGS_JSON_BYTES}`);
    } else {
      problems.push(
        `tags must be an array of at most ${MAX_TAGS} non-empty strings of at most ${MAX_TAG_CHARS} characters, got ${describe(rawTags)}`,
      );
    }
  }

  const geometry = feature['geometry'];
  if (!isObject(geometry)) {
    problems.push('has no geometry');
    return null;
  }
  const type = geometry['type'];
  const coordinates = geometry['coordinates'];
  const rings: Float64Array[] = [];
  let kind: 'polygon' | 'circle' = 'polygon';
  let centerLon = 0;
  let centerLat = 0;
  let radiusM = 0;
  let bbox: [number, number, number, number] = [Infinity, Infinity, -Infinity, -Infinity];
  if (type === 'Polygon' || type === 'MultiPolygon') {
    if (props['radius'] !== undefined) problems.push(`radius is only meaningful on a Point (circle), not a ${type}`);
    if (type === 'Polygon') {
      const reason = parsePolygon(coordinates, '', rings, limits);
      if (reason !== null) problems.push(reason);
    } else if (!Array.isArray(coordinates) || coordinates.length === 0) {
      problems.push('coordinates must be a non-empty array of polygons');
    } else {
      const partFirstRing: number[] = [];
      let partsValid = true;
      for (let p = 0; p < coordinates.length; p++) {
        partFirstRing.push(rings.length);
        const reason = parsePolygon(coordinates[p], `part ${p} `, rings, limits);
        if (reason !== null) {
          problems.push(reason);
          partsValid = false;
          break;
        }
      }
      if (partsValid && partFirstRing.length > 1) {
        partFirstRing.push(rings.length);
        const parts = partFirstRing.slice(0, -1).map((r, p) => rings.slice(r, partFirstRing[p + 1]));
        const overlap = firstOverlap(parts);
        if (overlap !== null) problems.push(partsOverlapReason(overlap));
      }
    }
    for (const ring of rings) {
      for (let i = 0; i < ring.length; i += 2) {
        if (ring[i]! < bbox[0]) bbox[0] = ring[i]!;
        if (ring[i + 1]! < bbox[1]) bbox[1] = ring[i + 1]!;
        if (ring[i]! > bbox[2]) bbox[2] = ring[i]!;
        if (ring[i + 1]! > bbox[3]) bbox[3] = ring[i + 1]!;
      }
    }
    if (bbox[2] - bbox[0] > 180) {
      problems.push(
        `fence spans ${bbox[2] - bbox[0]} degrees of longitude: crossing the antimeridian is not supported`,
      );
    }
  } else if (type === 'Point') {
    kind = 'circle';
    const r = props['radius'];
    if (typeof r !== 'number' || !Number.isFinite(r) || r <= 0 || r > MAX_CIRCLE_RADIUS_M) {
      problems.push(
        `radius must be a number in (0, ${MAX_CIRCLE_RADIUS_M}] metres for a Point fence, got ${describe(r)}`,
      );
    } else radiusM = r;
    const c: unknown = coordinates;
    if (!Array.isArray(c) || c.length < 2 || typeof c[0] !== 'number' || typeof c[1] !== 'number') {
      problems.push('Point coordinates must be a [lon, lat] position');
    } else if (!Number.isFinite(c[0]) || !Number.isFinite(c[1])) {
      problems.push('Point coordinates must be finite numbers');
    } else if (c[0] < -180 || c[0] > 180) {
      problems.push(`Point longitude ${c[0]} is out of range [-180, 180]`);
    } else if (c[1] < -MAX_CIRCLE_ABS_LAT_DEG || c[1] > MAX_CIRCLE_ABS_LAT_DEG) {
      problems.push(`circle centre latitude ${c[1]} is out of the supported range [-85, 85]`);
    } else {
      centerLon = c[0];
      centerLat = c[1];
      const dLat = radiusM / M_PER_DEG;
      const dLon = radiusM / metresPerDegreeX(centerLat);
      bbox = [centerLon - dLon, centerLat - dLat, centerLon + dLon, centerLat + dLat];
      if (bbox[0] < -180 || bbox[2] > 180) problems.push('circle crosses the antimeridian, which is not supported');
    }
  } else {
    problems.push(
      `geometry type ${describe(type)} is not supported (Polygon, MultiPolygon, or Point with a radius in metres)`,
    );
  }
  if (problems.length > 0) return null;
  return {
    id,
    compliance,
    tags,
    dwellMs,
    exitBufferM,
    minInsideMs,
    minOutsideMs,
    kind,
    rings,
    centerLon,
    centerLat,
    radiusM,
    bbox,
    expiresAtMs,
  };
}

/** An ISO 8601 date-time with a time zone (Z or an offset). */
const ISO_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** The `expiresAt` property as epoch ms (Infinity when absent). */
function parseExpiry(raw: unknown, problems: string[]): number {
  if (raw === undefined || raw === null) return Infinity;
  if (typeof raw === 'number' && Number.isFinite(raw) && raw >= 0) return raw;
  if (typeof raw === 'string' && ISO_DATE_TIME.test(raw)) {
    const ms = Date.parse(raw);
    if (Number.isFinite(ms)) return ms;
  }
  problems.push(
    `expiresAt must be epoch milliseconds or an ISO 8601 date-time with a time zone (e.g. 2026-12-31T23:00:00Z), got ${describe(raw)}`,
  );
  return Infinity;
}
