/**
 * One scrape of the router's `/metrics` as the soak reads it: the Prometheus text parsed into series, and the checks
 * the soak makes on every scrape (the accounting identities).
 */

/** Series of one scrape: `name{labels}` (labels sorted as exposed) -> value. */
export type Series = Map<string, number>;

/** Parses the Prometheus text exposition (comment lines skipped). */
export function parseMetrics(text: string): Series {
  const out: Series = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    out.set(line.slice(0, cut), Number(line.slice(cut + 1)));
  }
  return out;
}

/** Sum of every series of `name` whose labels include all of `match` (`key="value"` pairs). */
export function sumOf(s: Series, name: string, match: Record<string, string> = {}): number {
  let total = 0;
  const wanted = Object.entries(match).map(([k, v]) => `${k}="${v}"`);
  for (const [key, v] of s) {
    const brace = key.indexOf('{');
    const n = brace < 0 ? key : key.slice(0, brace);
    if (n !== name) continue;
    if (wanted.every((w) => key.includes(w))) total += v;
  }
  return total;
}

/** `name` summed over the shard telemetry rings (`ring="telemetry"`, the COMPLIANCE ring apart). */
export function shardRings(s: Series, name: string): number {
  return sumOf(s, name, { ring: 'telemetry' }) - sumOf(s, name, { ring: 'telemetry', shard: 'compliance' });
}

/** Bucket counts (not cumulative) of histogram `name` for the series matching `match`, in `le` order. */
export function histogramOf(
  s: Series,
  name: string,
  match: Record<string, string>,
): { bounds: number[]; counts: number[] } {
  const wanted = Object.entries(match).map(([k, v]) => `${k}="${v}"`);
  const rows: [number, number][] = [];
  for (const [key, v] of s) {
    if (!key.startsWith(`${name}_bucket{`) || !wanted.every((w) => key.includes(w))) continue;
    const le = /le="([^"]+)"/.exec(key)![1]!;
    rows.push([le === '+Inf' ? Infinity : Number(le), v]);
  }
  rows.sort((a, b) => a[0] - b[0]);
  return { bounds: rows.map((r) => r[0]), counts: rows.map((r, i) => r[1] - (i > 0 ? rows[i - 1]![1] : 0)) };
}

/**
 * Quantile `q` of the samples between two histogram reads (same bounds): the upper bound of the bucket holding it,
 * seconds (Infinity in the overflow bucket; NaN without samples).
 */
export function quantileBetween(
  before: { counts: number[] },
  after: { bounds: number[]; counts: number[] },
  q: number,
): number {
  const d = after.counts.map((c, i) => c - (before.counts[i] ?? 0));
  const total = d.reduce((a, b) => a + b, 0);
  if (!(total > 0)) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < d.length; i++) {
    seen += d[i]!;
    if (seen >= rank) return after.bounds[i]!;
  }
  return Infinity;
}

/** Lanes as labelled. */
export const LANES = ['idle', 'transition', 'compliance'] as const;

/**
 * The accounting identities on one scrape; returns the violations found (empty when all hold):
 * - per lane, pings offered = admitted + shed (every reason);
 * - per downstream, triggers offered + recovered = delivered + replayed + final + pending.
 */
export function identityViolations(s: Series, downstreams: readonly string[]): string[] {
  const out: string[] = [];
  for (const lane of LANES) {
    const offered = sumOf(s, 'geofence_pings_offered_total', { lane });
    const admitted = sumOf(s, 'geofence_pings_admitted_total', { lane });
    const shed = sumOf(s, 'geofence_pings_shed_total', { lane });
    if (offered !== admitted + shed)
      out.push(`lane ${lane}: offered ${offered} != admitted ${admitted} + shed ${shed}`);
  }
  for (const d of downstreams) {
    const m = { downstream: d };
    const left = sumOf(s, 'geofence_dispatch_offered_total', m) + sumOf(s, 'geofence_dispatch_recovered_total', m);
    const delivered = sumOf(s, 'geofence_dispatch_delivered_total', m);
    const replayed = sumOf(s, 'geofence_dispatch_replayed_total', m);
    const final = sumOf(s, 'geofence_dispatch_final_total', m);
    const pending = sumOf(s, 'geofence_dispatch_pending_triggers', m);
    if (left !== delivered + replayed + final + pending) {
      out.push(
        `downstream ${d}: offered+recovered ${left} != delivered ${delivered} + replayed ${replayed} + final ${final} + pending ${pending}`,
      );
    }
  }
  return out;
}
