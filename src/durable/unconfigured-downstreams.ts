/**
 * Triggers a downstream left in the state directory that the router's options no longer name (renamed or removed
 * between runs). Nothing reads those files while it is not configured, so the start counts what they still hold and
 * says so at error level: configuring the downstream again under its earlier name delivers them, in order and under
 * their ids; moving its directory aside gives them up knowingly. Counted read-only, whichever downstream wrote them.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { scanBacklog } from './backlog-log.js';
import { scanDeadLetters } from './dead-letter-file.js';
import { errorText, safeFileName } from './fs-util.js';
import { scanPendingFile } from './pending-file.js';
import { scanSetAsideFiles } from './set-aside-files.js';
import type { RecordVisitor } from './record-scan.js';

/** What one directory of a downstream no longer configured holds. */
export interface UnconfiguredDownstream {
  /** Its directory under `<stateDir>/downstreams/`. */
  directory: string;
  /** Triggers its last run kept in memory at its stop (the pending file). */
  pending: number;
  /** Triggers of its backlog log not yet delivered (after the cursor, and in its set-aside files). */
  backlog: number;
  /** Dead letters waiting for the replay lane. */
  deadLetters: number;
  /** Why it could not be read through (null when it was). */
  problem: string | null;
}

/** Undelivered triggers of one entry (pending + backlog + dead letters waiting). */
export function undeliveredOf(u: UnconfiguredDownstream): number {
  return u.pending + u.backlog + u.deadLetters;
}

/**
 * The directories under `downstreamsDir` that none of `configuredNames` maps to and that still hold an undelivered
 * trigger or could not be read, in name order; `visit` sees each undelivered record.
 */
export function findUnconfiguredDownstreams(
  downstreamsDir: string,
  configuredNames: readonly string[],
  visit: RecordVisitor = () => undefined,
): UnconfiguredDownstream[] {
  const configured = new Set(configuredNames.map(safeFileName));
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(downstreamsDir, { withFileTypes: true });
  } catch {
    return [];
  }
  const found: UnconfiguredDownstream[] = [];
  for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (!e.isDirectory() || configured.has(e.name)) continue;
    const dir = path.join(downstreamsDir, e.name);
    const u: UnconfiguredDownstream = { directory: e.name, pending: 0, backlog: 0, deadLetters: 0, problem: null };
    try {
      u.pending = scanPendingFile(dir, null, visit).records;
      u.deadLetters = scanDeadLetters(dir, null, visit);
      u.backlog = scanBacklog(dir, null, visit) + scanSetAsideFiles(dir, null, visit).records;
    } catch (err) {
      u.problem = errorText(err);
    }
    if (undeliveredOf(u) > 0 || u.problem !== null) found.push(u);
  }
  return found;
}

/** The error line naming what `found` holds (null when empty). */
export function describeUnconfigured(stateDir: string, found: readonly UnconfiguredDownstream[]): string | null {
  if (found.length === 0) return null;
  const total = found.reduce((n, u) => n + undeliveredOf(u), 0);
  const each = found.map(
    (u) =>
      `downstreams/${u.directory}: ${u.pending} pending, ${u.backlog} in its backlog log, ${u.deadLetters} dead letters waiting` +
      (u.problem === null ? '' : ` (read no further: ${u.problem})`),
  );
  return (
    `state directory ${stateDir}: ${total} undelivered triggers belong to downstreams the options no longer name, and nothing delivers them: ` +
    `${each.join('; ')}; configure each again under its earlier name to deliver them, or move its directory aside to give them up`
  );
}
