/**
 * Replays through the binary as a real child process, with default options: a seeded 200,000-ping trajectory file
 * read from a file (`--input PATH`) and piped into stdin (`--input -`) is back-pressured, never shed: every trigger
 * the same pings produce through one engine arrives once in the NDJSON file, the summary says "drained cleanly" and
 * the exit code is 0. A run that sheds (a TCP flood into small rings, stopped once every frame was read) or rejects
 * (a corrupt frame) exits 3 with the losses listed by lane and reason in its summary; so does a stop while stdin is
 * open inside a frame (`cut_at_stop`, not `truncated_frame`).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import {
  compareWithReference,
  referenceTriggers,
  writeReplayFixture,
  type ReplayFixture,
} from '../support/replay-fixture.js';
import { parseExposition, sampleValue } from '../metrics/exposition.js';
import { sendOverTcp } from '../pipeline/support.js';
import { CliProcess, hasLogLine, logLines, valueOf } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'gr-cli-replay-'));
let fixture: ReplayFixture;
let reference: string[];

before(() => {
  // 10,000 fences (many of them compliance fences): dense enough that a replay read flat out outruns containment.
  fixture = writeReplayFixture(dir, { seed: 11, devices: 10_000, pingsPerDevice: 20, fences: 10_000 });
  reference = referenceTriggers(fixture.traffic);
});
after(() => rmSync(dir, { recursive: true, force: true }));

function summaryOf(stdout: string): string {
  const i = stdout.indexOf('summary:');
  assert.ok(i >= 0, `a summary is printed:\n${stdout}`);
  return stdout.slice(i);
}

/** Waits until a run started with `--admin 127.0.0.1:0` has delimited and examined `frames` frames (its metric). */
async function waitForFramesRead(p: CliProcess, frames: number): Promise<void> {
  await p.waitFor('the admin URL', (x) => /admin (http:\/\/\S+\/metrics)/.test(x.stderr));
  const url = /admin (http:\/\/\S+\/metrics)/.exec(p.stderr)![1]!;
  const until = Date.now() + 60_000;
  for (;;) {
    const read = sampleValue(parseExposition(await (await fetch(url)).text()), 'geofence_ingest_frames_total');
    if (read === frames) return;
    assert.ok(Date.now() < until, `frames read: ${String(read)} of ${frames}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `p` exits 3, its summary naming one rejection, for `reason`, `accepted` pings accepted, nothing shed. */
async function assertOneRejected(p: CliProcess, reason: string, accepted: number): Promise<void> {
  const { code } = await p.exited;
  assert.equal(code, 3, p.stderr);
  const summary = summaryOf(p.stdout);
  assert.match(summary, new RegExp(`\\n {2}rejected {3}total=1 by_reason\\(${reason}=1\\)`));
  assert.equal(valueOf(summary, 'accepted'), accepted);
  assert.match(summary, /\ndrained with loss: shed=0 \(compliance=0\) rejected=1 /);
}

function triggersIn(path: string): Trigger[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Trigger);
}

for (const source of ['file', 'stdin'] as const) {
  test(`a 200,000-ping replay from ${source === 'file' ? 'a file' : 'stdin'} with default options: nothing shed, every trigger once, "drained cleanly", exit 0`, async () => {
    const run = mkdtempSync(join(dir, `${source}-`));
    const out = join(run, 'triggers.ndjson');
    const args = [
      '--fences',
      fixture.fencesPath,
      '--input',
      source === 'file' ? fixture.pingsPath : '-',
      '--no-listen',
      '--no-admin',
      '--ndjson',
      out,
    ];
    const t0 = performance.now();
    const p = new CliProcess(args, 180_000, run, source === 'stdin' ? fixture.pingsPath : null);
    const { code } = await p.exited;
    const wallMs = performance.now() - t0;
    assert.equal(code, 0, p.stderr);
    const summary = summaryOf(p.stdout);
    assert.equal(valueOf(summary, 'accepted'), fixture.traffic.pings);
    assert.match(summary, /shed\(idle=0 transition=0 compliance=0\) total=0 by_reason\(none\)/);
    assert.equal(valueOf(summary, 'processed'), fixture.traffic.pings);
    assert.match(summary, /\n {2}rejected {3}total=0 by_reason\(none\)/);
    assert.match(summary, /\ndrained cleanly/);
    assert.deepEqual(
      logLines(p.stderr).filter((l) => l.level === 'error' || l.level === 'warn'),
      [],
    );
    const got = triggersIn(out);
    const cmp = compareWithReference(got, reference);
    assert.deepEqual(
      { missing: cmp.missingCount, extra: cmp.extraCount },
      { missing: 0, extra: 0 },
      `missing ${cmp.missing.join(', ')}; extra ${cmp.extra.join(', ')}`,
    );
    assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
    console.log(
      `${source}: ${fixture.traffic.pings} pings, ${got.length} triggers (reference ${reference.length}) in ${(wallMs / 1000).toFixed(1)} s, shed 0, exit ${code}`,
    );
  });
}

test('a run that sheds exits 3 and its summary lists the shed pings by lane and reason', async () => {
  const run = mkdtempSync(join(dir, 'shed-'));
  const args = [
    '--fences',
    fixture.fencesPath,
    '--listen',
    '127.0.0.1:0',
    '--admin',
    '127.0.0.1:0',
    '--shards',
    '1',
    '--ring-capacity',
    '64',
    '--pool-size',
    '1',
    '--ndjson',
    join(run, 't.ndjson'),
  ];
  const p = new CliProcess(args, 120_000, run);
  await p.waitFor('the listener', (x) => /telemetry tcp:\/\/127\.0\.0\.1:\d+/.test(x.stderr));
  const port = Number(/telemetry tcp:\/\/127\.0\.0\.1:(\d+)/.exec(p.stderr)![1]);
  // A flood a 64-slot ring cannot take as fast as it comes: the live source is shed by lane.
  await sendOverTcp(port, fixture.traffic.frames.subarray(0, fixture.traffic.ends[49_999]!), 1 << 20);
  // The stop comes once every frame sent has been read (a stop before would cut one: cut_at_stop, not this test's).
  await waitForFramesRead(p, 50_000);
  p.child.kill('SIGINT');
  const { code } = await p.exited;
  assert.equal(code, 3, p.stderr);
  const summary = summaryOf(p.stdout);
  const shed = /shed\(idle=(\d+) transition=(\d+) compliance=(\d+)\) total=(\d+) by_reason\(([^)]*)\)/.exec(summary);
  assert.ok(shed !== null, summary);
  const [idle, transition, compliance, total] = shed.slice(1, 5).map(Number) as [number, number, number, number];
  assert.ok(total > 0, `shed: ${shed[0]}`);
  assert.equal(idle + transition + compliance, total);
  assert.match(shed[5]!, /(idle|transition|compliance)\.(ring_full|rate_limited|draining)=\d+/);
  assert.match(summary, /\ndrained with loss: shed=\d+ \(compliance=\d+\) rejected=0 fence_overflows=\d+/);
  assert.doesNotMatch(summary, /drained cleanly/);
  if (compliance > 0) assert.ok(hasLogLine(p.stderr, 'error', /^ingest: shed \d+ COMPLIANCE pings/), p.stderr);
  // A ping shed at the edge gets no seq: the drain wrote every trigger made, each device's run whole and in order.
  const made = triggersIn(join(run, 't.ndjson'));
  assert.ok(made.length > 0, 'triggers were written');
  assert.deepEqual(checkDeliveryContract(made, { complete: true, stays: true }).problems, []);
});

test('a replay with a corrupt frame exits 3 and its summary lists the rejection by reason', async () => {
  const run = mkdtempSync(join(dir, 'reject-'));
  const input = join(run, 'bad.msgpack');
  // 0xc1 is never valid MessagePack: one corrupt frame between good ones.
  writeFileSync(
    input,
    Buffer.concat([
      fixture.traffic.frames.subarray(0, fixture.traffic.ends[99]!),
      Buffer.from([0xc1]),
      fixture.traffic.frames.subarray(fixture.traffic.ends[99]!, fixture.traffic.ends[199]!),
    ]),
  );
  const p = new CliProcess(
    ['--fences', fixture.fencesPath, '--input', input, '--no-listen', '--no-admin'],
    60_000,
    run,
  );
  await assertOneRejected(p, 'corrupt_frame', 200);
});

test('stdin still open at a stop: the frame it was inside counts as cut_at_stop, not truncated_frame', async () => {
  const run = mkdtempSync(join(dir, 'cut-'));
  const p = new CliProcess(
    ['--fences', fixture.fencesPath, '--input', '-', '--no-listen', '--admin', '127.0.0.1:0'],
    60_000,
    run,
    'pipe',
  );
  p.child.stdin!.on('error', () => undefined);
  const frames = fixture.traffic.frames;
  const ends = fixture.traffic.ends;
  // 100 whole frames, then the first 10 bytes of the 101st; stdin stays open.
  p.child.stdin!.write(frames.subarray(0, ends[99]! + 10));
  await waitForFramesRead(p, 100);
  p.child.kill('SIGINT');
  await assertOneRejected(p, 'cut_at_stop', 100);
});

test('--help documents the exit codes and the overload policy', async () => {
  const p = new CliProcess(['--help']);
  const { code } = await p.exited;
  assert.equal(code, 0);
  assert.match(p.stdout, /Exit codes/);
  assert.match(p.stdout, /0 {2}drained cleanly/);
  assert.match(p.stdout, /3 {2}drained, but something was not delivered by design/);
  assert.match(p.stdout, /1 {2}failure/);
  assert.match(p.stdout, /--overload shed\|backpressure/);
});
