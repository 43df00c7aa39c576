/**
 * A replayed byte stream (file, stdin, any Readable) through a real edge: a frame the stream ends inside is its
 * sender's `truncated_frame`; a frame partly read when the router stops the source is `cut_at_stop`. Whole frames read
 * before either are fed, in order.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { ReadableSource } from '../../src/ingest/sources/stream-source.js';
import { RejectReason } from '../../src/shm/layout.js';
import { concat, makeEdge, mapPackr, ping, until } from './support.js';

/** Two whole frames, then the first 7 bytes of a third. */
function twoAndAPiece(): Buffer {
  return concat([mapPackr.pack(ping('a', 0)), mapPackr.pack(ping('b', 1)), mapPackr.pack(ping('c', 2)).subarray(0, 7)]);
}

for (const how of ['ends', 'is stopped'] as const) {
  test(`a stream that ${how} inside a frame: ${how === 'ends' ? 'truncated_frame' : 'cut_at_stop'}, the whole frames fed`, async () => {
    const fx = makeEdge();
    const input = new PassThrough();
    const source = new ReadableSource('file x', () => input);
    await source.start(fx.edge);
    input.write(twoAndAPiece());
    await until(() => fx.sink.pings.length === 2, 'the two whole frames');
    if (how === 'ends') {
      input.end();
      await source.finished();
    } else await source.stop();
    assert.deepEqual(
      fx.sink.pings.map((p) => p.id),
      ['a', 'b'],
    );
    assert.equal(fx.rejected(RejectReason.TRUNCATED_FRAME), how === 'ends' ? 1 : 0);
    assert.equal(fx.rejected(RejectReason.CUT_AT_STOP), how === 'ends' ? 0 : 1);
  });
}
