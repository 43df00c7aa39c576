/**
 * One downstream's carried-ceilings file, `carried-ceilings.json`: per device (by its id), the highest seq a start
 * carried over (pending file, PENDING dead letters) while the backlog log still held copies of carried triggers past
 * its cursor (a stop that wrote its pending file but lost its cursor commit). The copies are passed over only when the
 * log loads them; until then this file keeps the ceilings for a later start, whose pending file may no longer name
 * those devices (their carried triggers delivered meanwhile). Written at open, removed once every copy is passed.
 *
 * Dispatcher thread, at open and from the backlog flush.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { removeDurably, replaceFileDurably } from './fs-util.js';

/** File name in a downstream's directory. */
const CEILINGS_FILE = 'carried-ceilings.json';

/** A device id (as the device sent it) and the highest seq carried over for it. */
export type CarriedCeiling = [deviceId: string | number, seq: number];

/** The ceilings kept in `dir` (none when the file is absent); throws naming the file when it cannot be read. */
export function readCarriedCeilings(dir: string): CarriedCeiling[] {
  const file = path.join(dir, CEILINGS_FILE);
  if (!fs.existsSync(file)) return [];
  const parsed = JSON.parse(fs.readFileSync(file, 'utf8')) as { ceilings?: unknown };
  const list = parsed.ceilings;
  if (!Array.isArray(list)) throw new Error(`${file}: no "ceilings" list`);
  return list.filter(
    (e): e is CarriedCeiling =>
      Array.isArray(e) && (typeof e[0] === 'string' || typeof e[0] === 'number') && typeof e[1] === 'number',
  );
}

/** Replaces the ceilings file of `dir` with `ceilings`, durably. */
export function writeCarriedCeilings(dir: string, ceilings: readonly CarriedCeiling[]): void {
  replaceFileDurably(path.join(dir, CEILINGS_FILE), Buffer.from(JSON.stringify({ ceilings })));
}

/** Removes the ceilings file of `dir` (absent already: nothing to do). */
export function removeCarriedCeilings(dir: string): void {
  removeDurably(path.join(dir, CEILINGS_FILE));
}
