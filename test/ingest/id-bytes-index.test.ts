/**
 * The registry's byte-keyed index of string ids against a Map model: seeded inserts and removals (backward-shift
 * deletion, growth), every id found from its bytes in another buffer, removed ids and unknown ids not found, ids that
 * share a hash told apart by their bytes.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fnv1a32, IdBytesIndex } from '../../src/ingest/id-bytes-index.js';
import { DEVID_KIND_STRING, DEVID_LENGTH_MASK } from '../../src/shm/layout.js';
import { mulberry32 } from '../../src/fences/synthetic-city.js';

test('IdBytesIndex finds exactly the ids it holds, through 20,000 seeded inserts and removals', () => {
  const stride = 16;
  const slotsCount = 4096;
  const table = Buffer.alloc(slotsCount * stride);
  const meta = new Int32Array(slotsCount);
  const index = new IdBytesIndex(table, stride, meta);
  const model = new Map<string, number>();
  const free: number[] = Array.from({ length: slotsCount }, (_, i) => slotsCount - 1 - i);
  const rng = mulberry32(11);
  const probe = Buffer.alloc(64);
  const find = (id: string): number => {
    // The id's bytes at an offset of another buffer, as in a frame.
    const at = 7;
    const len = probe.write(id, at, 'latin1');
    return index.find(probe, at, len, fnv1a32(probe, at, at + len));
  };
  for (let step = 0; step < 20_000; step++) {
    const id = `d${Math.floor(rng() * 3000)}`;
    const slot = model.get(id);
    if (slot === undefined && free.length > 0 && rng() < 0.6) {
      const s = free.pop()!;
      const len = table.write(id, s * stride, 'latin1');
      meta[s] = DEVID_KIND_STRING | len;
      index.insert(s, fnv1a32(table, s * stride, s * stride + len));
      model.set(id, s);
    } else if (slot !== undefined && rng() < 0.4) {
      index.remove(slot, fnv1a32(table, slot * stride, slot * stride + (meta[slot]! & DEVID_LENGTH_MASK)));
      model.delete(id);
      free.push(slot);
    }
    assert.equal(find(id), model.get(id) ?? -1, `step ${step}: ${id}`);
  }
  assert.ok(model.size > 500, `ids held at the end: ${model.size}`);
  for (const [id, slot] of model) assert.equal(find(id), slot);
  assert.equal(find('not-there'), -1);
  assert.equal(find('d'), -1, 'a prefix of held ids is not found');
});
