/**
 * Status and summary lines of the command line (main thread), built from `router.stats()` snapshots. Numbers are
 * printed as `name=value` with plain digits, so people read them and scripts parse them.
 */
import { heldTimeWindow, type RouterStats } from '../pipeline/stats.js';
import type { RouterSummary } from './api.js';

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
export function formatStatusLine(
  previous: RouterStats,
  current: RouterStats,
  intervalMs: number,
  elapsedMs: number,
): string {
  const ratePerSec = intervalMs > 0 ? Math.round(((current.accepted - previous.accepted) * 1000) / intervalMs) : 0;
  const parts = [
    `t=${Math.round(elapsedMs / 1000)}s`,
    `ingest=${ratePerSec}/s`,
    shedPart(current),
    triggersPart(current),
  ];
  for (const d of current.downstreams) {
    parts.push(
      `${d.name}(limit=${Math.round(d.limit)} inflight=${d.inflight} delivered=${d.delivered} backlog=${d.backlogRecords} dead_lettered=${d.deadLettered})`,
    );
  }
  parts.push(`held_p99=${ms(heldTimeWindow(previous, current).p99Ms)}`, `held_p99_all=${ms(current.heldTimeP99Ms)}`);
  return parts.join(' ');
}

/** How a drain ended, from the final stats. */
export type DrainOutcome = 'delivered' | 'kept' | 'dropped' | 'lost';

/** Exit code of a clean drain: nothing shed, rejected or untracked, every trigger delivered. */
export const EXIT_CLEAN = 0;
/** Exit code of a failure: a start that failed, or a drain that could not account for every admitted ping. */
export const EXIT_FAILURE = 1;
/** Exit code of bad flags, config file or options. */
export const EXIT_USAGE = 2;
/**
 * Exit code of a drain that accounted for everything but did not deliver everything, by design: pings shed or
 * rejected, fence entries not tracked, triggers dead-lettered or kept in the state directory for the next start.
 */
export const EXIT_LOSS = 3;

/**
 * `delivered`: nothing shed or rejected, every fence entry tracked, every admitted ping processed and every trigger
 * delivered. `dropped`: every admitted ping processed, but pings were shed (by lane and reason) or rejected, fence
 * entries or candidates were not tracked (overflows), CROSS triggers went over a device's budget, dead letters were
 * dropped from storage (budget, age, disk), durable records were found damaged (their triggers skipped), an input
 * file's reading failed (its rest not read), or partitions
 * were read after a gap in their stream (pings read by no one), so triggers may be missing. `kept`: nothing of that,
 * but some triggers were dead-lettered for good or are kept in the state directory for the next start (or for a start
 * that names again a downstream the options no longer name). `lost`: an admitted ping was not processed, or the final
 * checkpoint failed (the next start treats the stop as unclean); only a summary (`finalCheckpointFailed`) tells the
 * latter.
 */
export function drainOutcome(s: RouterStats & { finalCheckpointFailed?: boolean }): DrainOutcome {
  if (s.admittedTotal !== s.processed || s.lost !== 0 || s.finalCheckpointFailed === true) return 'lost';
  if (
    s.shedTotal > 0 ||
    s.rejectedTotal > 0 ||
    s.fenceOverflows > 0 ||
    s.candidateOverflows > 0 ||
    s.crossOverBudget > 0 ||
    droppedDeadLetters(s) > 0 ||
    s.damagedLost > 0 ||
    s.inputErrors > 0 ||
    s.partitionsAfterGap > 0
  )
    return 'dropped';
  // A dead letter the replay lane delivered later is delivered: only final ones and what waits for the next start count.
  if (s.final > 0 || s.inFlight > 0 || s.carriedOver > 0 || s.unconfiguredTriggers > 0) return 'kept';
  return 'delivered';
}

/** The worse of two outcomes (delivered < kept < dropped < lost). */
export function worseOutcome(a: DrainOutcome, b: DrainOutcome): DrainOutcome {
  const rank: Record<DrainOutcome, number> = { delivered: 0, kept: 1, dropped: 2, lost: 3 };
  return rank[a] >= rank[b] ? a : b;
}

/** Dead letters dropped from storage (over its budget, too old, or not writable): their record of loss is gone. */
function droppedDeadLetters(s: RouterStats): number {
  const d = s.deadLetterDropped;
  return d.over_budget + d.too_old + d.disk_error;
}

/** The exit code of a drain's outcome (see EXIT_*). */
export function exitCodeOf(outcome: DrainOutcome): number {
  return outcome === 'delivered' ? EXIT_CLEAN : outcome === 'lost' ? EXIT_FAILURE : EXIT_LOSS;
}

/** True when the drain accounted for everything and lost nothing: nothing shed, rejected or untracked, all delivered. */
export function drainedCleanly(s: RouterStats): boolean {
  return drainOutcome(s) === 'delivered';
}

/** Shed pings by lane and reason, only the non-zero ones (`idle.rate_limited=3`), or "none". */
function shedReasonsPart(s: RouterStats): string {
  const parts: string[] = [];
  for (const [lane, reasons] of Object.entries(s.shed)) {
    for (const [reason, n] of Object.entries(reasons))
      if ((n as number) > 0) parts.push(`${lane}.${reason}=${n as number}`);
  }
  return parts.length === 0 ? 'none' : parts.join(' ');
}

/** Rejections by reason (`invalid_lat=2`), or "none". */
function rejectedReasonsPart(s: RouterStats): string {
  const parts = Object.entries(s.rejected)
    .filter(([, n]) => n > 0)
    .map(([reason, n]) => `${reason}=${n}`);
  return parts.length === 0 ? 'none' : parts.join(' ');
}

function reasonsPart(r: RouterStats['deadLetteredByReason']): string {
  return `dead_lettered(rejected=${r.rejected} expired=${r.expired} undeliverable=${r.undeliverable})`;
}

function droppedPart(r: RouterStats['deadLetterDropped']): string {
  return `dead_letter_dropped(over_budget=${r.over_budget} too_old=${r.too_old} disk_error=${r.disk_error})`;
}

/** The summary printed after close(): one line per subject. */
export function formatSummary(s: RouterSummary, drainMs: number): string[] {
  const lines = [
    `summary: up ${(s.uptimeMs / 1000).toFixed(1)}s, drained in ${(drainMs / 1000).toFixed(2)}s`,
    `  pings      accepted=${s.accepted} admitted=${s.admittedTotal} processed=${s.processed} stale=${s.stale} lost=${s.lost} rejected=${s.rejectedTotal} devices=${s.devices}` +
      (s.inputErrors > 0 ? ` input_errors=${s.inputErrors} (inputs not read to their end)` : ''),
    `  devices    in_use=${s.devices} expired=${s.deviceLifecycle.expired} revived=${s.deviceLifecycle.revived} slots_freed=${s.deviceLifecycle.freed} ` +
      `slots_reused=${s.deviceLifecycle.reused} expiry_exits=${s.deviceLifecycle.expiryExits}`,
    `  shed       ${shedPart(s)} total=${s.shedTotal} by_reason(${shedReasonsPart(s)})`,
    `  rejected   total=${s.rejectedTotal} by_reason(${rejectedReasonsPart(s)})`,
    `  tracking   fence_overflows=${s.fenceOverflows} candidate_overflows=${s.candidateOverflows} ` +
      `implausible_segments=${s.implausibleSegments} cross_over_budget=${s.crossOverBudget}` +
      (s.untrackedFences.length > 0
        ? ` untracked_fences(${s.untrackedFences.map((u) => `${u.fenceId}=${u.pings}`).join(' ')})`
        : ''),
    `  triggers   ${triggersPart(s)} total=${s.triggersTotal}`,
    ...(s.partitionsAfterGap > 0
      ? [
          `  source     partitions_after_gap=${s.partitionsAfterGap}: the stream had lost messages their stored state needed; those pings were read by no one`,
        ]
      : []),
    `  delivery   offered=${s.deliveriesOffered} recovered=${s.recovered} delivered=${s.delivered} replayed=${s.replayed} final=${s.final} kept=${s.carriedOver} unrouted=${s.unrouted} ${reasonsPart(s.deadLetteredByReason)} ` +
      `${droppedPart(s.deadLetterDropped)} write_errors=${s.durableWriteErrors} damaged=${s.downstreams.reduce((n, d) => n + d.damagedRecords, 0)}`,
    ...(s.unconfiguredTriggers > 0
      ? [
          `  unconfigured ${s.unconfiguredTriggers} undelivered triggers in the state directory belong to downstreams the options no longer name (see the start's error line): kept for a start that names them again`,
        ]
      : []),
  ];
  for (const d of s.downstreams) {
    lines.push(
      `  ${d.name}  offered=${d.offered} recovered=${d.recovered} delivered=${d.delivered} replayed=${d.replayed} final=${d.final} kept=${d.carriedOver} ` +
        `spilled=${d.spilled} ${reasonsPart(d.deadLetteredByReason)} limit=${Math.round(d.limit)} ${droppedPart(d.deadLetterDropped)} ` +
        `dead_letter_bytes=${d.deadLetterBytes} write_errors=${d.durableWriteErrors} damaged=${d.damagedRecords}`,
    );
  }
  lines.push(
    `  held time  p50=${ms(s.heldTimeP50Ms)} p99=${ms(s.heldTimeP99Ms)} max=${ms(s.heldTimeMaxMs)} replayed_p99=${ms(s.replayHeldTimeP99Ms)}`,
  );
  lines.push(
    s.stateDir === null
      ? '  state      temporary directory (removed): nothing survives a restart'
      : `  state      ${s.stateDir}: checkpoint every ${(s.checkpointIntervalMs / 1000).toFixed(1)}s, ${s.checkpoints} written, last ${s.checkpointDevices} devices ` +
          `${s.checkpointBytes} bytes; a crash loses at most the device state since the last checkpoint and the triggers held only in memory`,
  );
  const outcome = drainOutcome(s);
  const unconfigured =
    s.unconfiguredTriggers > 0 ? `, ${s.unconfiguredTriggers} kept for downstreams the options no longer name` : '';
  lines.push(
    outcome === 'delivered'
      ? 'drained cleanly: nothing shed or rejected, admitted = processed, every trigger delivered'
      : outcome === 'kept'
        ? `drained, nothing lost: ${s.final} triggers dead-lettered for good, ${s.carriedOver} kept in the state directory for the next start${unconfigured}`
        : outcome === 'dropped'
          ? `drained with loss: shed=${s.shedTotal} (compliance=${shedOf(s, 'compliance')}) rejected=${s.rejectedTotal} ` +
            `fence_overflows=${s.fenceOverflows} candidate_overflows=${s.candidateOverflows} cross_over_budget=${s.crossOverBudget} dead_lettered=${s.final} ` +
            `dead_letters_dropped=${droppedDeadLetters(s)} kept=${s.carriedOver}` +
            (s.damagedLost > 0 ? ` damaged_records=${s.damagedLost}` : '') +
            (s.inputErrors > 0 ? ` input_errors=${s.inputErrors}` : '') +
            (s.partitionsAfterGap > 0 ? ` partitions_after_gap=${s.partitionsAfterGap}` : '') +
            (s.unconfiguredTriggers > 0 ? ` unconfigured_kept=${s.unconfiguredTriggers}` : '') +
            ': ' +
            'triggers may be missing (by lane and reason above)'
          : s.admittedTotal === s.processed && s.lost === 0
            ? 'drain incomplete: the final checkpoint failed (see the error line): the next start treats this stop as unclean; seqs continue above a raised floor and an ENTER or DWELL of the time since the last checkpoint may come again'
            : `drain incomplete: admitted=${s.admittedTotal} processed=${s.processed} lost=${s.lost} in_flight=${s.inFlight}`,
  );
  return lines;
}
