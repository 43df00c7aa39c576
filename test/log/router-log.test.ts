/**
 * The router's log: levels filter, every line names its thread, a logger object gets `(fields, message)`, repeats are
 * rate-limited per group (level, thread, text with numbers blanked) and reported once their window is over; and a
 * router started with a logger object sends it lines from its own threads.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter } from '../../src/index.js';
import { RouterLog, type LogFields, type LogLevel } from '../../src/log/router-log.js';

/** A logger object recording its calls, with pino's signature. */
class RecordingLogger {
  readonly calls: { level: LogLevel; fields: LogFields; message: string }[] = [];
  error(fields: object, message: string): void {
    this.calls.push({ level: 'error', fields: fields as LogFields, message });
  }
  warn(fields: object, message: string): void {
    this.calls.push({ level: 'warn', fields: fields as LogFields, message });
  }
  info(fields: object, message: string): void {
    this.calls.push({ level: 'info', fields: fields as LogFields, message });
  }
  debug(fields: object, message: string): void {
    this.calls.push({ level: 'debug', fields: fields as LogFields, message });
  }
}

test('a logger object gets (fields, message) with the thread; levels below the threshold are dropped', () => {
  const logger = new RecordingLogger();
  const log = new RouterLog(logger, { level: 'info' });
  log.write('started', 'info');
  log.write('a refused batch', 'warn', { thread: 'dispatcher', downstream: 'hook' });
  log.write('detail', 'debug');
  log.close();
  assert.deepEqual(logger.calls, [
    { level: 'info', fields: { thread: 'main' }, message: 'started' },
    { level: 'warn', fields: { thread: 'dispatcher', downstream: 'hook' }, message: 'a refused batch' },
  ]);
});

test('repeats: the burst of a group passes, the rest is counted and reported once the window is over', () => {
  let nowMs = 0;
  const logger = new RecordingLogger();
  const log = new RouterLog(logger, { repeatWindowMs: 10_000, repeatBurst: 3, nowMs: () => nowMs });
  for (let i = 0; i < 100; i++) {
    log.write(`downstream hook: batch of ${i + 1} triggers refused (HTTP 503)`, 'warn', { thread: 'dispatcher' });
    nowMs += 10; // 100 lines in 1 s
  }
  // Another group (other text, other thread, other level) is not held back by the first.
  log.write('downstream hook: breaker opened', 'error', { thread: 'dispatcher' });
  log.write('downstream hook: batch of 7 triggers refused (HTTP 503)', 'warn', { thread: 'main' });
  assert.equal(logger.calls.length, 5);
  assert.equal(log.suppressed.warn, 97);
  // The window ends: the next line of the group first reports what was left out, then passes.
  nowMs = 10_000;
  log.write('downstream hook: batch of 5 triggers refused (HTTP 503)', 'warn', { thread: 'dispatcher' });
  assert.deepEqual(logger.calls.slice(5), [
    {
      level: 'warn',
      fields: { thread: 'dispatcher', repeated: 97 },
      message: 'downstream hook: batch of 100 triggers refused (HTTP 503) (and 97 more like it in 10 s, not written)',
    },
    {
      level: 'warn',
      fields: { thread: 'dispatcher' },
      message: 'downstream hook: batch of 5 triggers refused (HTTP 503)',
    },
  ]);
  // close() reports a group still inside its window.
  for (let i = 0; i < 5; i++) log.write('x 1', 'info');
  log.close();
  assert.deepEqual(logger.calls.at(-1), {
    level: 'info',
    fields: { thread: 'main', repeated: 2 },
    message: 'x 1 (and 2 more like it in 10 s, not written)',
  });
});

test('a line callback gets message, level and fields; bad settings are refused naming them', () => {
  const got: string[] = [];
  const log = new RouterLog((line, level, fields) => got.push(`${level} ${fields.thread} ${line}`));
  log.fn('hello', 'warn', { thread: 'ingest' });
  log.fn('plain');
  log.close();
  assert.deepEqual(got, ['warn ingest hello', 'info main plain']);
  assert.throws(() => new RouterLog(undefined, { repeatBurst: 0 }), /repeatBurst must be an integer >= 1 \(got 0\)/);
  assert.throws(() => new RouterLog(undefined, { repeatWindowMs: -1 }), /repeatWindowMs must be > 0/);
});

test('createRouter takes a logger object (lines from the threads name them) and refuses a bad one', async () => {
  await assert.rejects(
    createRouter({ stateDir: null, logger: { info: () => undefined } as never }),
    /options\.logger must be an object with error, warn and info methods/,
  );
  await assert.rejects(
    createRouter({ stateDir: null, logger: new RecordingLogger(), log: () => undefined }),
    /options\.log and options\.logger cannot both be given/,
  );
  const logger = new RecordingLogger();
  const router = await createRouter({
    stateDir: null,
    fences: { type: 'FeatureCollection', features: [] },
    downstreams: [{ name: 'app', kind: 'callback', callback: () => undefined }],
    logger,
  });
  // A corrupt frame: the ingest thread logs the rejection (a warning).
  router.ingest(Buffer.from([0xc1]));
  await router.close();
  const started = logger.calls.find((c) => c.message.startsWith('started in '));
  assert.ok(started !== undefined && started.level === 'info' && started.fields.thread === 'main');
  // The ingest thread's own start line (debug), then the rejection (a warning): both name the thread.
  const ready = logger.calls.find((c) => c.message.startsWith('ingest thread ready in '));
  assert.ok(ready !== undefined && ready.level === 'debug' && ready.fields.thread === 'ingest');
  const reject = logger.calls.find((c) => c.fields.thread === 'ingest' && c !== ready);
  assert.ok(reject !== undefined, JSON.stringify(logger.calls));
  assert.equal(reject.level, 'warn');
});
