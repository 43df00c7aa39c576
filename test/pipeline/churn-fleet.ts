/** The churn tests' city and waves of device ids (device-churn.test.ts, multi-ingest.test.ts). */
import { square } from './support.js';

/** Fences of the churn city: 25 squares of 100 m on a 400 m grid. */
export const CHURN_FENCES = 25;

/** The churn city. */
export const CHURN_CITY = {
  type: 'FeatureCollection',
  features: Array.from({ length: CHURN_FENCES }, (_, k) => square(`f${k}`, (k % 5) * 400, Math.floor(k / 5) * 400, 50)),
};

/** Devices of wave w (w >= 2) that are devices of wave w - 2 coming back, after their slots were freed. */
export const RETURNING = 10;

/**
 * Ids of wave `w` (`perWave` of them): numeric and string ids alternate; from wave 2 on, RETURNING of them are wave
 * w - 2's.
 */
export function churnIds(w: number, perWave: number): (string | number)[] {
  const ids: (string | number)[] = [];
  const back = w >= 2 ? churnIds(w - 2, perWave).slice(RETURNING, 2 * RETURNING) : [];
  for (let i = 0; i < perWave; i++) {
    if (i < back.length) ids.push(back[i]!);
    else ids.push(i % 2 === 0 ? 1_000_000_000_000 + w * 10_000 + i : `w${w}-dev-${i}`);
  }
  return ids;
}
