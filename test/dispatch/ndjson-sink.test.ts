/**
 * The NDJSON sink keeps a file of whole lines: a trigger's line torn by a crash is cut back when the file is opened
 * again (its batch was never counted delivered, so it is written again whole), and a last line that is not a
 * trigger's (the file is not only ours) is ended, not cut. With `fsync`, each batch is fsynced before it counts. A
 * write failing part way is cut back to where its batch began in the file as it is now (emptied by copytruncate,
 * appended to by another writer), and a file renamed away is followed by opening the path afresh.
 */
import assert from 'node:assert/strict';
import fs, { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { NdjsonSink } from '../../src/dispatch/sinks/ndjson-sink.js';
import { oneTriggerBatch } from './fixtures.js';

/** fs.write's callback. */
type WriteCallback = (err: NodeJS.ErrnoException | null, written: number, buffer: Buffer) => void;

/**
 * Makes the next fs.write fail as a full disk does, after `meanwhile` ran and ten of its bytes reached the file; later
 * writes go through (restored after the test).
 */
function failNextWrite(t: TestContext, meanwhile: () => void = () => undefined): void {
  const original = fs.write;
  let failed = false;
  fs.write = ((fd: number, buffer: Buffer, offset: number, length: number, position: null, cb: WriteCallback) => {
    if (failed) return original(fd, buffer, offset, length, position, cb);
    failed = true;
    meanwhile();
    fs.writeSync(fd, buffer, offset, Math.min(10, length));
    cb(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' }), 0, buffer);
  }) as unknown as typeof fs.write;
  syncBuiltinESMExports();
  t.after(() => {
    fs.write = original;
    syncBuiltinESMExports();
  });
}

/** The file's lines, each parsed (throws on a line that is not JSON). */
function lines(path: string): unknown[] {
  const text = readFileSync(path, 'utf8');
  assert.ok(text.endsWith('\n'), 'the file ends with a whole line');
  return text
    .slice(0, -1)
    .split('\n')
    .map((l) => JSON.parse(l) as unknown);
}

test('NDJSON sink: a trigger line torn by a crash is cut back at open; the next batch starts on a line of its own', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'gr-ndjson-')), 'out.ndjson');
  const first = new NdjsonSink({ path });
  assert.equal((await first.deliver(oneTriggerBatch(1))).status, 200);
  assert.equal((await first.deliver(oneTriggerBatch(2))).status, 200);
  await first.close();
  const whole = readFileSync(path, 'utf8');
  // The crash: part of the next batch's line reached the file.
  const torn = '{"type":"ENTER","deviceId":7,"fenceId":"A","ta';
  writeFileSync(path, whole + torn);
  const second = new NdjsonSink({ path });
  assert.equal(second.tornBytesCut, torn.length, 'the torn bytes are cut');
  assert.equal((await second.deliver(oneTriggerBatch(3))).status, 200);
  await second.close();
  const got = lines(path) as { seq: number; deviceId: number }[];
  assert.deepEqual(
    got.map((t) => t.seq),
    [1, 2, 3],
  );
  assert.ok(got.every((t) => t.deviceId === 7));
});

test('NDJSON sink: a trigger line torn after its first bytes is cut back too', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'gr-ndjson-')), 'out.ndjson');
  const first = new NdjsonSink({ path });
  assert.equal((await first.deliver(oneTriggerBatch(1))).status, 200);
  await first.close();
  writeFileSync(path, readFileSync(path, 'utf8') + '{"ty');
  const second = new NdjsonSink({ path });
  assert.equal(second.tornBytesCut, 4);
  assert.equal((await second.deliver(oneTriggerBatch(2))).status, 200);
  await second.close();
  assert.deepEqual(
    (lines(path) as { seq: number }[]).map((t) => t.seq),
    [1, 2],
  );
});

test('NDJSON sink: a last line that is not a trigger is ended, not cut', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'gr-ndjson-')), 'out.ndjson');
  writeFileSync(path, '{"note":"kept"}');
  const sink = new NdjsonSink({ path });
  assert.equal(sink.tornBytesCut, 0);
  assert.equal((await sink.deliver(oneTriggerBatch(9))).status, 200);
  await sink.close();
  const got = lines(path) as { note?: string; seq?: number }[];
  assert.equal(got.length, 2);
  assert.equal(got[0]!.note, 'kept');
  assert.equal(got[1]!.seq, 9);
});

test('NDJSON sink with fsync: each batch is fsynced (on the file) before it counts as delivered; without it, none is', async (t) => {
  const calls: number[] = [];
  const original = fs.fsync;
  fs.fsync = ((fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
    calls.push(fd);
    original(fd, cb);
  }) as typeof fs.fsync;
  syncBuiltinESMExports();
  t.after(() => {
    fs.fsync = original;
    syncBuiltinESMExports();
  });
  const dir = mkdtempSync(join(tmpdir(), 'gr-ndjson-'));
  const synced = new NdjsonSink({ path: join(dir, 'synced.ndjson'), fsync: true });
  for (let seq = 1; seq <= 3; seq++) assert.equal((await synced.deliver(oneTriggerBatch(seq))).status, 200);
  await synced.close();
  assert.equal(calls.length, 3, 'one fsync per batch');
  assert.equal(new Set(calls).size, 1, 'all on the file');
  const plain = new NdjsonSink({ path: join(dir, 'plain.ndjson') });
  assert.equal((await plain.deliver(oneTriggerBatch(1))).status, 200);
  await plain.close();
  assert.equal(calls.length, 3, 'no fsync without the option');
  assert.deepEqual(
    (lines(join(dir, 'synced.ndjson')) as { seq: number }[]).map((x) => x.seq),
    [1, 2, 3],
  );
});

test('NDJSON sink: a file emptied by copytruncate, then a write failing part way (a full disk): cut back to where the batch began in the emptied file, never lengthened, and the retry writes whole lines', async (t) => {
  const path = join(mkdtempSync(join(tmpdir(), 'gr-ndjson-')), 'out.ndjson');
  const sink = new NdjsonSink({ path });
  t.after(() => sink.close());
  for (let seq = 1; seq <= 2; seq++) assert.equal((await sink.deliver(oneTriggerBatch(seq))).status, 200);
  // logrotate's copytruncate: the lines are copied elsewhere and the file emptied under the open descriptor.
  fs.truncateSync(path, 0);
  failNextWrite(t);
  assert.equal((await sink.deliver(oneTriggerBatch(3))).status, 0, 'the failed write is a failed delivery');
  assert.equal(fs.statSync(path).size, 0, 'cut back to where the batch began: the emptied file, not its old length');
  assert.equal((await sink.deliver(oneTriggerBatch(3))).status, 200, 'the retry');
  assert.ok(!readFileSync(path).includes(0), 'no NUL bytes');
  assert.deepEqual(
    (lines(path) as { seq: number }[]).map((x) => x.seq),
    [3],
  );
});

test('NDJSON sink: a write that fails while another writer appends is not cut (their bytes stay); the next batch starts on a line of its own', async (t) => {
  const path = join(mkdtempSync(join(tmpdir(), 'gr-ndjson-')), 'out.ndjson');
  const sink = new NdjsonSink({ path });
  t.after(() => sink.close());
  assert.equal((await sink.deliver(oneTriggerBatch(1))).status, 200);
  // Another process appends a whole line of its own meanwhile (longer than this batch), before the torn bytes.
  failNextWrite(t, () => fs.appendFileSync(path, `${'{"note":"other writer"}'.padEnd(4096, ' ')}\n`));
  assert.equal((await sink.deliver(oneTriggerBatch(2))).status, 0);
  assert.equal((await sink.deliver(oneTriggerBatch(2))).status, 200);
  const text = readFileSync(path, 'utf8');
  assert.ok(text.endsWith('\n'));
  const got = text.slice(0, -1).split('\n');
  assert.equal(got.length, 4, 'ours, theirs, the torn ten bytes on a line of their own, ours again');
  assert.equal((JSON.parse(got[0]!) as { seq: number }).seq, 1);
  assert.equal((JSON.parse(got[1]!) as { note: string }).note, 'other writer', "the other writer's line stays");
  assert.equal(got[2]!.length, 10);
  assert.equal((JSON.parse(got[3]!) as { seq: number }).seq, 2, 'the retry starts on a line of its own');
});

test('NDJSON sink: a file renamed away (logrotate create) is noticed before the next batch: the path is opened afresh and the batch goes there', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gr-ndjson-'));
  const path = join(dir, 'out.ndjson');
  const sink = new NdjsonSink({ path, fsync: true });
  t.after(() => sink.close());
  assert.equal((await sink.deliver(oneTriggerBatch(1))).status, 200);
  fs.renameSync(path, `${path}.1`);
  assert.equal((await sink.deliver(oneTriggerBatch(2))).status, 200);
  assert.equal(sink.reopened, 1);
  fs.unlinkSync(`${path}.1`);
  assert.equal((await sink.deliver(oneTriggerBatch(3))).status, 200);
  assert.equal(sink.reopened, 1, 'the path still names the open file');
  assert.deepEqual(
    (lines(path) as { seq: number }[]).map((x) => x.seq),
    [2, 3],
  );
});
