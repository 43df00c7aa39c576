/**
 * The ingest path from the bytes: the frame walker, the frame reader (values read in place, no object), validation,
 * registry lookup, lane classification and the ring record write allocate nothing per ping, for plain maps, inline
 * records and shared-structure records, with ids that are numbers (uint64, IMEI-like) or ASCII strings (found in the
 * registry from their bytes: no string made for a known device). Every frame was read by the reader, none left to
 * msgpackr.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TEL_DEVICE_SLOT_I32, TEL_LAT_F64 } from '../../src/shm/layout.js';
import { FrameDecoder, PING_VALID } from '../../src/ingest/frame-decoder.js';
import { encodePingInto, type LoadEncoding } from '../../src/ingest/ping-encoder.js';
import { assertAllocationFree } from '../support/alloc-free.js';
import { ringSinkEdge } from './support.js';

const IMEI = 358_240_051_111_110;
const FRAMES = 1000;

/** `FRAMES` pings of `encoding` with uint64 ids (or `dev-<i>` strings), and where each frame starts. */
function frames(encoding: LoadEncoding, stringIds: boolean): { buf: Buffer; starts: Int32Array } {
  const buf = Buffer.alloc(FRAMES * 256);
  const starts = new Int32Array(FRAMES + 1);
  let pos = 0;
  for (let i = 0; i < FRAMES; i++) {
    starts[i] = pos;
    // The encoder writes a string id; a uint64 id is patched in below.
    pos = encodePingInto(
      buf,
      pos,
      {
        id: stringIds ? `dev-${i}` : 'x',
        lat: 52 + i * 1e-4,
        lon: 13,
        ts: 1_735_689_600_000 + i,
        speed: i % 4,
        heading: 90,
        accuracy: 5,
      },
      encoding,
    );
  }
  starts[FRAMES] = pos;
  if (stringIds) return { buf: buf.subarray(0, pos), starts };
  // Re-encode with the id as uint64 (0xcf + 8 bytes) in place of the one-character string (0xa1 'x').
  const out = Buffer.alloc(pos + FRAMES * 8);
  const outStarts = new Int32Array(FRAMES + 1);
  let o = 0;
  for (let i = 0; i < FRAMES; i++) {
    outStarts[i] = o;
    const frame = buf.subarray(starts[i]!, starts[i + 1]!);
    const at = frame.indexOf(Buffer.from([0xa1, 0x78]));
    o += frame.copy(out, o, 0, at);
    out[o++] = 0xcf;
    out.writeBigUInt64BE(BigInt(IMEI + i * 4_294_967_311), o);
    o += 8;
    o += frame.copy(out, o, at + 2);
  }
  outStarts[FRAMES] = o;
  return { buf: out.subarray(0, o), starts: outStarts };
}

for (const [encoding, stringIds] of [
  ['maps', false],
  ['records', false],
  ['shared', false],
  ['maps', true],
  ['shared', true],
] as const) {
  test(`${encoding}, ${stringIds ? 'string' : 'uint64'} ids: walk + read + validate + registry + classify + ring write allocate nothing per ping`, async () => {
    const { ring, fx } = ringSinkEdge();
    const limits = { maxIdLength: 32, minTsMs: 0, maxTsMs: 4e12 };
    const decoder = new FrameDecoder({ maxFrameBytes: 512, sharedStructures: encoding === 'shared', limits });
    const { buf, starts } = frames(encoding, stringIds);
    let bad = 0;
    const body = (i: number): void => {
      const k = i % FRAMES;
      if (decoder.decode(buf, starts[k]!, starts[k + 1]!) !== PING_VALID) bad++;
      if (fx.edge.accept(decoder.fields, 'bench') !== PING_VALID) bad++;
    };
    for (let i = 0; i < FRAMES; i++) body(i);
    assert.equal(bad, 0, 'every frame a valid ping');
    assert.equal(fx.registry.size, FRAMES);
    await assertAllocationFree(body);
    assert.equal(bad, 0);
    assert.equal(decoder.unpackedFrames, 0, 'no frame left to msgpackr');
    const last = ring.slotOf(ring.writeSeq() - 1);
    assert.equal(ring.i32[last * ring.strideI32 + TEL_DEVICE_SLOT_I32], (3_000_000 - 1) % FRAMES);
    assert.equal(ring.f64[last * ring.strideF64 + TEL_LAT_F64], 52 + ((3_000_000 - 1) % FRAMES) * 1e-4);
    const k = (3_000_000 - 1) % FRAMES;
    assert.equal(decoder.fields.id(), stringIds ? `dev-${k}` : IMEI + k * 4_294_967_311);
  });
}
