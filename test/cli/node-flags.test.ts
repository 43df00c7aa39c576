/**
 * The node flags the binary is meant to run with (src/cli/node-flags.ts): `npm start` passes them, node accepts them,
 * and a start without them says so once.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { CLI_NODE_FLAGS, missingNodeFlags } from '../../src/cli/node-flags.js';
import { CliProcess, MAIN_PATH } from './support.js';

const ROOT = new URL('../../../', import.meta.url);
const NOTICE = /node runs without --no-memory-reducer/;

test('npm start passes every flag of CLI_NODE_FLAGS; the first line needs no env -S', () => {
  // BusyBox's env has no -S: the installed binary's first line must work without it.
  assert.equal(readFileSync(MAIN_PATH, 'utf8').split('\n')[0], '#!/usr/bin/env node');
  const start = (JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as { scripts: { start: string } })
    .scripts.start;
  assert.ok(CLI_NODE_FLAGS.length > 0);
  for (const flag of CLI_NODE_FLAGS) assert.ok(start.split(' ').includes(flag), `npm start (${start}) lacks ${flag}`);
  assert.deepEqual(missingNodeFlags([]), [...CLI_NODE_FLAGS]);
  assert.deepEqual(missingNodeFlags(['--inspect', ...CLI_NODE_FLAGS]), []);
});

/** Starts the binary with `nodeFlags` on an empty fence set and no network, stops it; resolves with its stderr. */
async function startAndStop(nodeFlags: readonly string[]): Promise<{ code: number | null; stderr: string }> {
  const p = new CliProcess(['--no-listen', '--no-admin', '--ndjson', '-'], 30_000, undefined, null, nodeFlags);
  await p.waitFor('the start line', (x) => /started in \d+ ms/.test(x.stderr));
  p.child.kill('SIGTERM');
  const { code } = await p.exited;
  return { code, stderr: p.stderr };
}

test('node takes the flags, and only a start without them logs that they are missing', async () => {
  const withFlags = await startAndStop(CLI_NODE_FLAGS);
  assert.equal(withFlags.code, 0, withFlags.stderr);
  assert.doesNotMatch(withFlags.stderr, NOTICE);
  const without = await startAndStop([]);
  assert.equal(without.code, 0, without.stderr);
  assert.equal(without.stderr.match(new RegExp(NOTICE.source, 'g'))?.length, 1, without.stderr);
});
