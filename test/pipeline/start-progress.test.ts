import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { StartProgress } from '../../src/pipeline/start-progress.js';

test('a slow start says which phase it is in, and the finished start is summarised phase by phase', async () => {
  const lines: string[] = [];
  const progress = new StartProgress((l) => lines.push(l), 20);
  progress.phase('checking the fences');
  progress.phase('warming 2 containment workers');
  // Two lines at a 20 ms interval (however late the timers run on a loaded host).
  for (let i = 0; i < 500 && lines.length < 2; i++) await sleep(10);
  const summary = progress.finish();
  assert.ok(lines.length >= 2, lines.join('\n'));
  assert.ok(
    lines.every((l) =>
      /^start: still warming 2 containment workers after \d+ s \(\d+ s since the start began\)$/.test(l),
    ),
    lines.join('\n'),
  );
  assert.match(summary, /^started in \d+ ms: checking the fences \d+ ms, warming 2 containment workers \d+ ms$/);
  // After finish, nothing more is said.
  const n = lines.length;
  await sleep(60);
  assert.equal(lines.length, n);
});

test('a failed start names the phase it failed in', () => {
  const progress = new StartProgress(() => undefined, 1000);
  progress.phase('starting the dispatcher thread');
  assert.match(progress.fail(), /^start failed while starting the dispatcher thread, after \d+ ms$/);
});
