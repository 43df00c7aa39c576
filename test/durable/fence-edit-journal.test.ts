/**
 * The fence edit journal on its own: what is appended is read back compacted (the last edit of each id, in order), a
 * line cut short by a crash and a damaged line are skipped and reported without losing the others, a reset empties
 * it, it compacts itself as it grows, and stored edits apply over a base (replace in place, append, remove; one that
 * no longer validates is skipped with why).
 */
import assert from 'node:assert/strict';
import fsModule, { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { FenceEditJournal, readFenceEditJournal } from '../../src/durable/fence-edit-journal.js';
import { DEFAULT_FENCE_LIMITS, parseFences } from '../../src/fences/parse.js';
import { applyStoredEdits, type StoredFenceEdit } from '../../src/fences/stored-edits.js';
import { square } from '../fences/helpers.js';

const journalFile = (): string => join(mkdtempSync(join(tmpdir(), 'gr-journal-')), 'fence-edits.ndjson');
const ids = (edits: readonly StoredFenceEdit[]): string[] =>
  edits.map((e) => ('remove' in e ? `-${e.remove}` : `+${(e.upsert as { properties: { id: string } }).properties.id}`));

test('journal: appends read back compacted, in order; a reset empties it; no file is no edits', () => {
  const file = journalFile();
  assert.deepEqual(readFenceEditJournal(file).edits, []);
  const j = FenceEditJournal.open(file, readFenceEditJournal(file));
  j.append({ upsert: square('A', 0, 0, 10) });
  j.append({ upsert: square('B', 0, 0, 20) });
  j.append({ remove: 'A' });
  j.append({ upsert: square('B', 5, 0, 20) });
  j.append({ remove: 'Z' });
  j.append({ upsert: square('A', 9, 0, 10) });
  j.close();
  const read = readFenceEditJournal(file);
  assert.equal(read.lines, 6);
  // B keeps its place with its last shape; A's removal moved it after B, and its upsert again kept that place.
  assert.deepEqual(ids(read.edits), ['+B', '+A', '-Z']);
  const b = read.edits[0] as { upsert: { geometry: { coordinates: number[][][] } } };
  assert.deepEqual(b.upsert.geometry, (square('B', 5, 0, 20) as typeof b.upsert).geometry);
  assert.equal(read.damagedLines, 0);
  assert.equal(read.tornTail, false);

  // Reopened: rewritten compacted, then appended to; a reset leaves the header only.
  const again = FenceEditJournal.open(file, read);
  assert.equal(readFileSync(file, 'utf8').trim().split('\n').length, 4);
  again.reset();
  again.append({ remove: 'B' });
  again.close();
  assert.deepEqual(ids(readFenceEditJournal(file).edits), ['-B']);
});

test('journal: a line cut short is ignored, damaged lines are skipped and reported, the rest kept', () => {
  const file = journalFile();
  const j = FenceEditJournal.open(file, readFenceEditJournal(file));
  j.append({ upsert: square('A', 0, 0, 10) });
  j.append({ remove: 'B' });
  j.close();
  appendFileSync(file, '{"upsert": 7}\nnot json\n{"remove":"C","extra":1}\n{"remove":"D"}\n{"upsert":{"type":"Fea');
  const read = readFenceEditJournal(file);
  assert.deepEqual(ids(read.edits), ['+A', '-B', '-D']);
  assert.equal(read.damagedLines, 3);
  assert.deepEqual(read.damaged, [
    'line 4: not a stored fence edit',
    'line 5: not a stored fence edit',
    'line 6: not a stored fence edit',
  ]);
  assert.equal(read.tornTail, true);
  // Opening rewrites it without the damage.
  FenceEditJournal.open(file, read).close();
  const clean = readFenceEditJournal(file);
  assert.deepEqual(ids(clean.edits), ['+A', '-B', '-D']);
  assert.equal(clean.damagedLines + Number(clean.tornTail), 0);
});

test('journal: a file that is not a journal, or of an unknown version, is refused naming the file', () => {
  const file = journalFile();
  writeFileSync(file, '{"remove":"A"}\n');
  assert.throws(() => readFenceEditJournal(file), /fence edit journal .*fence-edits\.ndjson: line 1 is not its header/);
  writeFileSync(file, '{"journal":"geofence-router fence edits","version":9}\n');
  assert.throws(() => readFenceEditJournal(file), /format version 9 is not known here/);
});

test('journal: many edits of few fences keep it small (compacted as it grows)', () => {
  const file = journalFile();
  const j = FenceEditJournal.open(file, readFenceEditJournal(file));
  for (let i = 0; i < 5000; i++) j.append({ upsert: square(`F${i % 10}`, i, 0, 10) });
  j.close();
  const read = readFenceEditJournal(file);
  assert.ok(read.lines <= 2 * 10 + 1024 + 1, `lines kept: ${read.lines}`);
  assert.deepEqual(
    ids(read.edits),
    Array.from({ length: 10 }, (_, i) => `+F${i}`),
  );
  const last = read.edits[9] as { upsert: unknown };
  assert.deepEqual(last.upsert, square('F9', 4999, 0, 10));
});

test('stored edits over a base: replace in place, append, remove; one that no longer validates is skipped', () => {
  const base = parseFences({ type: 'FeatureCollection', features: [square('A', 0, 0, 10), square('B', 0, 0, 20)] });
  const edits: StoredFenceEdit[] = [
    { upsert: square('C', 0, 0, 30) },
    { upsert: square('A', 100, 0, 10) },
    { remove: 'B' },
    { remove: 'nothing-here' },
    { upsert: { type: 'Feature', properties: { id: 'bad' }, geometry: { type: 'Point', coordinates: [0, 0] } } },
  ];
  const out = applyStoredEdits(base.fences, edits, DEFAULT_FENCE_LIMITS);
  assert.deepEqual(
    out.fences.map((f) => f.id),
    ['A', 'C'],
  );
  assert.ok(out.fences[0]!.bbox[0] > base.fences[0]!.bbox[2], 'A has its new shape');
  assert.equal(out.skipped.length, 1);
  assert.match(out.skipped[0]!, /^stored edit 5 \(upsert of "bad"\): /);
});

test('journal: a fence id given as a number is kept as the fence parser reads it ("42")', () => {
  const file = journalFile();
  const j = FenceEditJournal.open(file, readFenceEditJournal(file));
  const numbered = square('x', 0, 0, 10) as { properties: { id: unknown } };
  numbered.properties.id = 42;
  j.append({ upsert: numbered });
  j.append({ upsert: square('B', 0, 0, 20) });
  j.close();
  const read = readFenceEditJournal(file);
  assert.equal(read.damagedLines, 0, read.damaged.join('; '));
  assert.equal(read.edits.length, 2);
  const parsed = applyStoredEdits([], read.edits, DEFAULT_FENCE_LIMITS);
  assert.deepEqual(
    parsed.fences.map((f) => f.id),
    ['42', 'B'],
  );
});

test('journal: an append that fails part way leaves no part line for the next edit to continue', () => {
  const file = journalFile();
  const j = FenceEditJournal.open(file, readFenceEditJournal(file));
  j.append({ upsert: square('A', 0, 0, 10) });
  // The disk takes 20 bytes of the next line, then fails (EIO) once.
  const writeSync = fsModule.writeSync;
  let failed = false;
  fsModule.writeSync = ((fd: number, buffer: Uint8Array, offset: number) => {
    if (failed) return (writeSync as (...a: unknown[]) => number)(fd, buffer, offset, buffer.length - offset);
    failed = true;
    writeSync(fd, buffer, offset, 20);
    throw Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
  }) as typeof fsModule.writeSync;
  syncBuiltinESMExports();
  try {
    assert.throws(() => j.append({ upsert: square('B', 0, 0, 20) }), /fence edit journal .*EIO/);
  } finally {
    fsModule.writeSync = writeSync;
    syncBuiltinESMExports();
  }
  j.append({ upsert: square('C', 0, 0, 30) });
  j.close();
  const read = readFenceEditJournal(file);
  assert.equal(read.damagedLines, 0, read.damaged.join('; '));
  assert.equal(read.tornTail, false);
  assert.deepEqual(ids(read.edits), ['+A', '+C']);
});
