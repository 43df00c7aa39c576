/**
 * promtool, Prometheus's own linter, passes a scrape taken under load: a TCP flood shed by lane, triggers, dead letters
 * (refused and undeliverable) and replays (see loaded-router.ts). `promtool check metrics` reads the exposition on
 * stdin and prints one line per problem. prom-client's default `process_` / `nodejs_` families are left out of the run
 * that must exit 0 with no line: promtool objects to three of them (`nodejs_active_handles_total` and its siblings are
 * gauges named `_total`), which are prom-client's names, not the router's. On the whole scrape, every line it prints
 * must be about one of those. Skipped, saying why, where promtool is not installed (Debian's `prometheus` package).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { DEAD_LETTER_REASON_NAMES } from '../../src/shm/layout.js';
import { scrapeUntil, startLoadedRouter, sumOf } from './loaded-router.js';

/** promtool's path ($PROMTOOL when set, else /usr/bin/promtool or the PATH's), or why there is none. */
function findPromtool(): { path: string } | { reason: string } {
  const given = process.env['PROMTOOL'];
  const candidates = given !== undefined ? [given] : ['/usr/bin/promtool', 'promtool'];
  for (const path of candidates) {
    const r = spawnSync(path, ['--version'], { encoding: 'utf8' });
    if (r.error === undefined && r.status === 0) return { path };
  }
  return {
    reason: `${candidates.join(' and ')} did not run (Debian: apt-get install prometheus; or set PROMTOOL to its path)`,
  };
}

/** prom-client's default families (process and Node.js runtime metrics): not the router's to name. */
const DEFAULT_FAMILY = /^(process|nodejs)_/;

/** The exposition without the HELP, TYPE and sample lines of prom-client's default families. */
function withoutDefaultFamilies(text: string): string {
  return text
    .split('\n')
    .filter((l) => !DEFAULT_FAMILY.test(l.replace(/^# (HELP|TYPE) /, '')))
    .join('\n');
}

/** Runs `promtool check metrics` on `text`: its exit status, its output lines, and the families it was given. */
function runPromtool(path: string, text: string): { status: number | null; lines: string[]; checked: number } {
  const r = spawnSync(path, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.error, undefined, `promtool ran: ${String(r.error)}`);
  return {
    status: r.status,
    lines: `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.trim().length > 0),
    checked: text.split('\n').filter((l) => l.startsWith('# TYPE ')).length,
  };
}

test('promtool check metrics passes a scrape taken under load, with shed pings, dead letters and replays', async (t) => {
  const promtool = findPromtool();
  if ('reason' in promtool) {
    t.skip(`promtool not installed: ${promtool.reason}`);
    return;
  }
  const loaded = await startLoadedRouter();
  try {
    const { text, samples } = await scrapeUntil(loaded, (s) => {
      const lacking: string[] = [];
      if (sumOf(s, 'geofence_pings_shed_total') === 0) lacking.push('shed pings');
      if (sumOf(s, 'geofence_triggers_total') === 0) lacking.push('triggers');
      for (const reason of ['rejected', 'undeliverable'])
        if (sumOf(s, 'geofence_dispatch_dead_lettered_total', { reason }) === 0) lacking.push(`${reason} dead letters`);
      if (sumOf(s, 'geofence_dispatch_replayed_total') === 0) lacking.push('replays');
      return lacking.length === 0 ? null : lacking.join(', ');
    });
    // The whole scrape: prom-client's default families draw lines (`nodejs_active_handles_total non-counter metrics
    // should not have "_total" suffix`: its gauges, its names); not one line may be about a family of ours.
    const whole = runPromtool(promtool.path, text);
    const notDefault = whole.lines.filter((l) => !DEFAULT_FAMILY.test(l));
    assert.deepEqual(notDefault, [], 'promtool says nothing about our families');
    // Without prom-client's default families: exit 0, not one line.
    const ours = runPromtool(promtool.path, withoutDefaultFamilies(text));
    assert.deepEqual(ours.lines, [], 'promtool is silent on the router families');
    assert.equal(ours.status, 0, 'promtool exit status');
    assert.ok(ours.checked > 100, `families checked: ${ours.checked}`);

    // The reason labels of the replays sum to the accounting identity's `replayed` term, in this very scrape.
    for (const downstream of ['hook', 'app']) {
      const m = { downstream };
      const left =
        sumOf(samples, 'geofence_dispatch_offered_total', m) + sumOf(samples, 'geofence_dispatch_recovered_total', m);
      const right =
        sumOf(samples, 'geofence_dispatch_delivered_total', m) +
        sumOf(samples, 'geofence_dispatch_replayed_total', m) +
        sumOf(samples, 'geofence_dispatch_final_total', m) +
        sumOf(samples, 'geofence_dispatch_pending_triggers', m);
      assert.equal(left, right, `${downstream}: offered + recovered = delivered + replayed + final + pending`);
      for (const name of ['geofence_dispatch_replayed_total', 'geofence_dispatch_replay_rejected_total']) {
        const reasons = samples.filter((s) => s.name === name && s.labels['downstream'] === downstream);
        assert.deepEqual(reasons.map((s) => s.labels['reason']).sort(), [...DEAD_LETTER_REASON_NAMES].sort(), name);
      }
    }
    const families = new Set(samples.map((s) => s.name)).size;
    console.log(
      `promtool ${promtool.path}: ${ours.checked} router families clean (on prom-client's defaults: ${whole.lines.length} lines); scrape of ${samples.length} samples (${families} names) after ${loaded.rounds()} flood rounds; ` +
        `shed ${sumOf(samples, 'geofence_pings_shed_total')}, triggers ${sumOf(samples, 'geofence_triggers_total')}, ` +
        `dead-lettered ${sumOf(samples, 'geofence_dispatch_dead_lettered_total')}, replayed ${sumOf(samples, 'geofence_dispatch_replayed_total')}`,
    );
  } finally {
    await loaded.stop();
  }
});
