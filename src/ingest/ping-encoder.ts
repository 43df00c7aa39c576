/**
 * A direct MessagePack encoder for the fleet's fixed ping shape (demo and load generator), writing into a caller's
 * buffer (no object per ping), so one generator process can sustain far more than the router's target rate. It
 * writes exactly the bytes the wire contract describes (src/ingest/wire-format.ts): a fixmap, a msgpackr inline
 * record, or a shared-structure record (index 2: id, lat, lon, ts, speed, heading, accuracy).
 */
import type { FleetPing } from '../fences/synthetic-fleet.js';

/** Wire encodings the generator can send. */
export type LoadEncoding = 'maps' | 'records' | 'shared';

const KEYS = ['id', 'lat', 'lon', 'ts', 'speed', 'heading', 'accuracy'] as const;
const KEY_BYTES = KEYS.map((k) => Buffer.from([0xa0 | k.length, ...Buffer.from(k)]));
/** Inline record definition: fixext1 0x72, id 0x40, fixarray of the 7 keys. */
const RECORD_PREFIX = Buffer.concat([Buffer.from([0xd4, 0x72, 0x40, 0x90 | KEYS.length]), ...KEY_BYTES]);
/** Shared structure index 2 holds exactly these 7 keys. */
const SHARED_REF = 0x40 + 2;

/** Most bytes one ping can take with ids up to 64 ASCII bytes. */
export const MAX_PING_BYTES = 256;

/** Encodes `p` at `buf[pos]` in `encoding`; returns the position after it. The id must be ASCII, < 32 bytes. */
export function encodePingInto(buf: Buffer, pos: number, p: FleetPing, encoding: LoadEncoding): number {
  if (encoding === 'maps') {
    buf[pos++] = 0x80 | KEYS.length;
  } else if (encoding === 'records') {
    RECORD_PREFIX.copy(buf, pos);
    pos += RECORD_PREFIX.length;
  } else {
    buf[pos++] = SHARED_REF;
  }
  const withKeys = encoding === 'maps';
  if (withKeys) pos += KEY_BYTES[0]!.copy(buf, pos);
  buf[pos++] = 0xa0 | p.id.length;
  pos += buf.write(p.id, pos, 'latin1');
  const values = [p.lat, p.lon, p.ts, p.speed, p.heading, p.accuracy];
  for (let k = 0; k < values.length; k++) {
    if (withKeys) pos += KEY_BYTES[k + 1]!.copy(buf, pos);
    buf[pos++] = 0xcb;
    buf.writeDoubleBE(values[k]!, pos);
    pos += 8;
  }
  return pos;
}
