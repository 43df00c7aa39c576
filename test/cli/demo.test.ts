/**
 * The demo as a real child process (a small fleet to stay fast): status lines show triggers flowing, /metrics serves
 * valid Prometheus text over real HTTP while it runs, SIGHUP reloads the fences, and it drains to a summary with
 * admitted = processed, both when its time is up and on SIGINT.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseExposition, sampleValue } from '../metrics/exposition.js';
import { CliProcess, statusLines, triggersIn, valueOf } from './support.js';

const SMALL = [
  '--demo',
  '--demo-devices',
  '2000',
  '--demo-fences',
  '600',
  '--admin',
  '127.0.0.1:0',
  '--shards',
  '2',
  '--ring-capacity',
  '4096',
];

function summaryOf(stdout: string): string {
  const i = stdout.indexOf('summary:');
  assert.ok(i >= 0, `a summary is printed:\n${stdout}`);
  return stdout.slice(i);
}

function assertCleanSummary(stdout: string): void {
  const summary = summaryOf(stdout);
  const admitted = valueOf(summary, 'admitted');
  assert.ok(admitted > 0, 'pings were admitted');
  assert.equal(valueOf(summary, 'processed'), admitted, 'admitted = processed');
  assert.equal(valueOf(summary, 'lost'), 0);
  assert.equal(valueOf(summary, 'kept'), 0, 'nothing left for a next start');
  assert.equal(valueOf(summary, 'final'), 0, 'nothing dead-lettered');
  assert.ok(valueOf(summary, 'total') >= 0);
  assert.match(summary, /drained cleanly/);
  // Every trigger produced was offered to the demo's callback downstream, which never fails.
  assert.equal(
    valueOf(summary.slice(summary.indexOf('demo-service')), 'delivered'),
    valueOf(summary.slice(summary.indexOf('triggers ')), 'total'),
  );
}

test('the demo shows triggers flowing, serves /metrics, and stops by itself after --demo-seconds with a clean drain', async () => {
  const p = new CliProcess([...SMALL, '--demo-seconds', '4'], 40_000);
  await p.waitFor('the metrics URL', (x) => /metrics (http:\/\/\S+\/metrics)/.test(x.stdout));
  const url = /metrics (http:\/\/\S+\/metrics)/.exec(p.stdout)![1]!;
  await p.waitFor('two status lines', (x) => statusLines(x.stdout).length >= 2);

  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
  const samples = parseExposition(await res.text());
  let triggers = 0;
  for (const s of samples) if (s.name === 'geofence_triggers_total') triggers += s.value;
  assert.ok(triggers > 0, 'the scrape counts triggers');
  assert.ok((sampleValue(samples, 'geofence_ingest_accepted_total') ?? 0) > 0, 'the scrape counts accepted pings');
  assert.ok(
    samples.some((s) => s.name === 'geofence_dispatch_concurrency_limit' && s.labels['downstream'] === 'demo-service'),
    'the callback downstream has a limit gauge',
  );

  const { code } = await p.exited;
  assert.equal(code, 0, p.stderr);
  const lines = statusLines(p.stdout);
  assert.ok(lines.length >= 2, `status lines:\n${p.stdout}`);
  const totals = lines.map(triggersIn);
  for (let i = 1; i < totals.length; i++)
    assert.ok(totals[i]! >= totals[i - 1]!, `trigger totals never fall: ${totals.join(' ')}`);
  assert.ok(totals[totals.length - 1]! > totals[0]!, `trigger totals grow: ${totals.join(' ')}`);
  assert.ok(
    lines.every((l) => /ingest=\d+\/s shed\(idle=\d+ transition=\d+ compliance=\d+\)/.test(l)),
    'each line shows the ingest rate and shed by lane',
  );
  assert.ok(
    lines.every((l) => /demo-service\(limit=\d+ inflight=\d+/.test(l) && /demo-audit\(limit=4 inflight=\d+/.test(l)),
    'each line shows both downstreams',
  );
  assert.ok(
    lines.some((l) => valueOf(l, 'ingest') > 0),
    'pings arrive',
  );
  assert.match(p.stderr, /demo time up/);
  assertCleanSummary(p.stdout);
});

test('the demo reloads its fences on SIGHUP and drains on SIGINT, exiting 0 with admitted = processed', async () => {
  const p = new CliProcess([...SMALL, '--demo-seconds', '120'], 40_000);
  await p.waitFor('a status line', (x) => statusLines(x.stdout).length >= 1);
  p.child.kill('SIGHUP');
  await p.waitFor('the reload', (x) => /fences reloaded: generation 2, 600 fences/.test(x.stderr));
  await p.waitFor('a status line showing triggers', (x) => statusLines(x.stdout).some((l) => triggersIn(l) > 0));
  p.child.kill('SIGINT');
  const { code } = await p.exited;
  assert.equal(code, 0, p.stderr);
  assert.match(p.stderr, /SIGINT: draining/);
  assertCleanSummary(p.stdout);
});
