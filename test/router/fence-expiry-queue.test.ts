/**
 * Fence expiry against the one-at-a-time chain of edits and reloads (FenceEditor over real fence stores, with a chain
 * this test holds shut): an expiry that comes due while an edit renewing the fence waits in the chain is decided again
 * when its turn comes, so the renewed fence stays; one that is still due when its turn comes is removed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_FENCE_LIMITS, parseFences } from '../../src/fences/parse.js';
import { buildFenceStore, FenceStore } from '../../src/fences/store.js';
import { FenceEditor, type FenceEditHost } from '../../src/router/fence-edits.js';
import { square } from '../fences/helpers.js';

const fc = (...features: unknown[]): unknown => ({ type: 'FeatureCollection', features });

/** An editor over a store of `features`, whose chain stays shut until `open()`. */
function heldEditor(...features: unknown[]): {
  editor: FenceEditor;
  current: () => FenceStore;
  logs: string[];
  open: () => void;
} {
  let current = FenceStore.open(buildFenceStore(parseFences(fc(...features)), 1));
  let open: () => void = () => undefined;
  let chain: Promise<unknown> = new Promise<void>((resolve) => (open = resolve));
  const logs: string[] = [];
  const host: FenceEditHost = {
    current: () => current,
    queue: <T>(job: () => Promise<T>): Promise<T> => {
      const run = chain.then(job, job);
      chain = run.catch(() => undefined);
      return run;
    },
    swap: (next) => {
      current = next;
      return Promise.resolve(0);
    },
    limits: () => ({ ...DEFAULT_FENCE_LIMITS, maxFileBytes: 1 << 30 }),
    log: (line) => void logs.push(line),
    failed: () => undefined,
    applied: () => undefined,
    record: () => false,
  };
  return { editor: new FenceEditor(host), current: () => current, logs, open: () => open() };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test('a fence renewed by an edit queued before its expiry came due stays', async () => {
  const { editor, current, logs, open } = heldEditor(
    square('T', 0, 0, 20, { expiresAt: Date.now() + 100 }),
    square('K', 500, 0, 20),
  );
  editor.scheduleExpiry();
  // The renewal (no expiresAt) waits in the chain while T comes due.
  const renewal = editor.upsert(square('T', 0, 0, 20));
  await sleep(250);
  open();
  assert.equal((await renewal).action, 'replaced');
  // Behind everything queued so far, the expiry's turn included.
  assert.equal((await editor.remove('no-such-fence')).action, 'absent');
  assert.ok(current().indexOfId('T') >= 0, 'T is in force');
  assert.deepEqual(logs, []);
  editor.close();
});

test('a fence still due when its turn comes is removed, and its expiry logged', async () => {
  const { editor, current, logs, open } = heldEditor(
    square('T', 0, 0, 20, { expiresAt: Date.now() + 100 }),
    square('K', 500, 0, 20),
  );
  editor.scheduleExpiry();
  // An edit of another fence waits in the chain while T comes due.
  const other = editor.upsert(square('K', 600, 0, 20));
  await sleep(250);
  open();
  await other;
  assert.equal((await editor.remove('no-such-fence')).action, 'absent');
  assert.equal(current().indexOfId('T'), -1, 'T is gone');
  assert.ok(current().indexOfId('K') >= 0);
  assert.equal(logs.length, 1);
  assert.match(logs[0]!, /^fence "T" expired \(expiresAt .*\): removed, 0 EXITs, generation 3$/);
  editor.close();
});
