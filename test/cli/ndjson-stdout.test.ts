/**
 * `--ndjson -` through the binary as a real child process: stdout carries the triggers alone (every line a trigger,
 * each once, in per-device order; the drain summary goes to stderr), and a reader that goes away mid-run (EPIPE) does
 * not crash the router: the batches it could not take are kept for the next start and counted in the summary.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
import { CliProcess, valueOf } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'gr-cli-stdout-'));
let fixture: ReplayFixture;
let reference: string[];
let config: string;

before(() => {
  fixture = writeReplayFixture(dir, { seed: 5, devices: 300, pingsPerDevice: 20, fences: 500 });
  reference = referenceTriggers(fixture.traffic);
  config = join(dir, 'config.json');
  writeFileSync(config, JSON.stringify({ drainDeadlineMs: 2000 }));
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Arguments of a replay of the fixture into `--ndjson -`, its state in `run`. */
function replayArgs(run: string): string[] {
  return [
    '--config',
    config,
    '--fences',
    fixture.fencesPath,
    '--input',
    fixture.pingsPath,
    '--no-listen',
    '--no-admin',
    '--state-dir',
    join(run, 'state'),
    '--ndjson',
    '-',
  ];
}

/** The downstream's summary line (`ndjson-1 offered=...`). */
function downstreamLine(stderr: string): string {
  const line = stderr.split('\n').find((l) => l.trimStart().startsWith('ndjson-1 '));
  assert.ok(line !== undefined, `a downstream line in the summary:\n${stderr}`);
  return line;
}

test('--ndjson -: stdout holds every trigger once as NDJSON and nothing else; the summary is on stderr', async () => {
  const run = mkdtempSync(join(dir, 'whole-'));
  const p = new CliProcess(replayArgs(run), 60_000, run);
  const { code } = await p.exited;
  assert.equal(code, 0, p.stderr);
  const lines = p.stdout.split('\n');
  assert.equal(lines.pop(), '', 'stdout ends with a whole line');
  const got = lines.map((l, i) => {
    try {
      return JSON.parse(l) as Trigger;
    } catch {
      throw new Error(`stdout line ${i + 1} is not JSON: ${l}`);
    }
  });
  assert.ok(got.every((t) => typeof t.type === 'string' && typeof t.seq === 'number'));
  const cmp = compareWithReference(got, reference);
  assert.deepEqual({ missing: cmp.missingCount, extra: cmp.extraCount }, { missing: 0, extra: 0 });
  assert.deepEqual(checkDeliveryContract(got, { complete: true, stays: true }).problems, []);
  assert.match(p.stderr, /\nsummary: up /);
  assert.match(p.stderr, /\ndrained cleanly/);
  assert.equal(valueOf(downstreamLine(p.stderr), 'delivered'), reference.length);
});

/** The triggers of the whole JSON lines of `stdout` (a line torn by a failed write is left out). */
function triggersRead(stdout: string): Trigger[] {
  const read: Trigger[] = [];
  for (const l of stdout.split('\n').slice(0, -1)) {
    try {
      read.push(JSON.parse(l) as Trigger);
    } catch {
      // A torn line: not a trigger the reader got.
    }
  }
  return read;
}

test('--ndjson -: a reader gone mid-run (EPIPE) leaves the rest kept and counted, and the router drains', async () => {
  const run = mkdtempSync(join(dir, 'gone-'));
  const p = new CliProcess(replayArgs(run), 60_000, run);
  // The reader takes the first bytes, then goes away.
  await p.waitFor('the first triggers', (q) => q.stdout.includes('\n'));
  p.child.stdout!.destroy();
  const { code, signal } = await p.exited;
  assert.equal(signal, null, p.stderr);
  assert.doesNotMatch(p.stderr, /Unhandled|EPIPE\n\s+at /);
  // Drained with something not delivered by design: kept for the next start.
  assert.equal(code, 3, p.stderr);
  const line = downstreamLine(p.stderr);
  const delivered = valueOf(line, 'delivered');
  const kept = valueOf(line, 'kept');
  assert.equal(valueOf(line, 'offered'), reference.length);
  assert.ok(kept > 0, line);
  assert.equal(delivered + kept, reference.length, line);
  assert.match(p.stderr, /kept in the state directory for the next start/);
  // What the reader took before it went (part of the batch that failed, kept, may be in it): in per-device order, each
  // once.
  const read = triggersRead(p.stdout);
  assert.ok(read.length > 0);
  assert.deepEqual(checkDeliveryContract(read, {}).problems, []);
});

test('--ndjson -: a reader that stops reading (its pipe full) fails the batch after 10 s; the router drains and exits', async () => {
  const run = mkdtempSync(join(dir, 'stopped-'));
  const p = new CliProcess(replayArgs(run), 90_000, run);
  await p.waitFor('the first triggers', (q) => q.stdout.includes('\n'));
  // The reader stops reading and keeps the pipe open: the pipe fills, and stdout takes nothing more.
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    p.child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  p.child.stdout!.pause();
  const startedMs = Date.now();
  const { code, signal } = await exit;
  const exitedAfterMs = Date.now() - startedMs;
  // Read the rest, so the process's streams close and its stderr is all here.
  p.child.stdout!.resume();
  await p.exited;
  assert.equal(signal, null, p.stderr);
  assert.equal(code, 3, p.stderr);
  const line = downstreamLine(p.stderr);
  assert.ok(valueOf(line, 'kept') > 0, line);
  assert.equal(valueOf(line, 'delivered') + valueOf(line, 'kept'), reference.length, line);
  // What reached the reader (the failed batch may have left a torn line): in per-device order, each once.
  const read = triggersRead(p.stdout);
  assert.ok(read.length > 0);
  assert.deepEqual(checkDeliveryContract(read, {}).problems, []);
  console.log(`a stopped reader: the router exited ${exitedAfterMs} ms after the reader stopped; ${line.trim()}`);
});
