/**
 * Status and summary lines of the command line (main thread), built from `router.stats()` snapshots. Numbers are
 * printed as `name=value` with plain digits, so people read them and scripts parse them.
 */
import { heldTimeWindow, type RouterStats } from '../pipeline/stats.js';
import type { RouterSummary } from '../router.js';

function shedOf(s: RouterStats, lane: keyof RouterStats['shed']): number {
  let n = 0;
  for (const v of Object.values(s.shed[lane])) n += v as number;
  return n;
}

function ms(v: number): string {
  return Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)}ms` : 'n/a';
}

function shedPart(s: RouterStats): string {
  return `shed(idle=${shedOf(s, 'idle')} transition=${shedOf(s, 'transition')} compliance=${shedOf(s, 'compliance')})`;
}

function triggersPart(s: RouterStats): string {
  const t = s.triggers;
  return `triggers(ENTER=${t.ENTER} EXIT=${t.EXIT} DWELL=${t.DWELL} CROSS=${t.CROSS})`;
}

/**
 * One status line: seconds since start, ingest rate since the previous snapshot (pings accepted per second), shed
 * per lane and triggers per type (totals), each downstream's limit and requests in flight, and the held-time P99 of
 * the triggers delivered since the previous snapshot (`held_p99`, n/a when there were none) and since the start
 * (`held_p99_all`, which keeps the cold start and every burst).
 */
export function formatStatusLine(previous: RouterStats, current: RouterStats, intervalMs: number, elapsedMs: number): string {
  const ratePerSec = intervalMs > 0 ? Math.round(((current.accepted - previous.accepted) * 1000) / intervalMs) : 0;
  const parts = [`t=${Math.round(elapsedMs / 1000)}s`, `ingest=${ratePerSec}/s`, shedPart(current), triggersPart(current)];
  for (const d of current.downstreams) {
    parts.push(`${d.name}(limit=${Math.round(d.limit)} inflight=${d.inflight} delivered=${d.delivered} backlog=${d.backlogRecords} dead_lettered=${d.deadLettered})`);
  }
  parts.push(`held_p99=${ms(heldTimeWindow(previous, current).p99Ms)}`, `held_p99_all=${ms(current.heldTimeP99Ms)}`);
  return parts.join(' ');
}

/** How a drain ended, from the final stats. */
export type DrainOutcome = 'delivered' | 'kept' | 'lost';

/**
 * `delivered`: every admitted ping processed and every trigger delivered. `kept`: nothing lost, but some triggers were
 * dead-lettered or are kept in the state directory for the next start. `lost`: an admitted ping was not processed.
 */
export function drainOutcome(s: RouterStats): DrainOutcome {
  if (s.admittedTotal !== s.processed || s.lost !== 0) return 'lost';
  if (s.deadLettered > 0 || s.final > 0 || s.inFlight > 0 || s.carriedOver > 0) return 'kept';
  return 'delivered';
}

/** True when the drain accounted for everything: admitted = processed, none lost, every trigger delivered. */
export function drainedCleanly(s: RouterStats): boolean {
  return drainOutcome(s) === 'delivered';
}

function reasonsPart(r: RouterStats['deadLetteredByReason']): string {
  return `dead_lettered(rejected=${r.rejected} expired=${r.expired} undeliverable=${r.undeliverable})`;
}

/** The summary printed after close(): one line per subject. */
export function formatSummary(s: RouterSummary, drainMs: number): string[] {
  const lines = [
    `summary: up ${(s.uptimeMs / 1000).toFixed(1)}s, drained in ${(drainMs / 1000).toFixed(2)}s`,
    `  pings      accepted=${s.accepted} admitted=${s.admittedTotal} processed=${s.processed} stale=${s.stale} lost=${s.lost} rejected=${s.rejectedTotal} devices=${s.devices}`,
    `  shed       ${shedPart(s)} total=${s.shedTotal}`,
    `  triggers   ${triggersPart(s)} total=${s.triggersTotal}`,
    `  delivery   offered=${s.deliveriesOffered} recovered=${s.recovered} delivered=${s.delivered} replayed=${s.replayed} final=${s.final} kept=${s.carriedOver} unrouted=${s.unrouted} ${reasonsPart(s.deadLetteredByReason)}`,
  ];
  for (const d of s.downstreams) {
    lines.push(
      `  ${d.name}  offered=${d.offered} recovered=${d.recovered} delivered=${d.delivered} replayed=${d.replayed} final=${d.final} kept=${d.carriedOver} ` +
        `spilled=${d.spilled} ${reasonsPart(d.deadLetteredByReason)} limit=${Math.round(d.limit)}`,
    );
  }
  lines.push(`  held time  p50=${ms(s.heldTimeP50Ms)} p99=${ms(s.heldTimeP99Ms)} max=${ms(s.heldTimeMaxMs)} replayed_p99=${ms(s.replayHeldTimeP99Ms)}`);
  lines.push(
    s.stateDir === null
      ? '  state      temporary directory (removed): nothing survives a restart'
      : `  state      ${s.stateDir}: checkpoint every ${(s.checkpointIntervalMs / 1000).toFixed(1)}s, ${s.checkpoints} written, last ${s.checkpointDevices} devices ` +
          `${s.checkpointBytes} bytes; a crash loses at most the device state since the last checkpoint and the triggers held only in memory`,
  );
  const outcome = drainOutcome(s);
  lines.push(
    outcome === 'delivered'
      ? 'drained cleanly: admitted = processed, every trigger delivered'
      : outcome === 'kept'
        ? `drained, nothing lost: ${s.final} triggers dead-lettered for good, ${s.carriedOver} kept in the state directory for the next start`
        : `drain incomplete: admitted=${s.admittedTotal} processed=${s.processed} lost=${s.lost} in_flight=${s.inFlight}`,
  );
  return lines;
}
