/**
 * Live fence edits under load through real threads: 10,000 fences, 400,000 seeded pings over TCP at 100,000 pings/s;
 * one upsert (a new 1.2 km square) and, a second later, its delete. Every device's triggers for the new fence are
 * exactly what its pings imply once the edit is in force (ENTER, EXIT and CROSS at the right pings, an EXIT at the
 * delete for a device still inside, nothing after it), with at most the pings sent while an edit was being applied
 * on either side; nothing is shed, and the delivery contract holds over everything the NDJSON file received. (Serial:
 * the figure needs the host's two cores.)
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { unpackMultiple } from 'msgpackr';
import { createRouter, type FenceEditResult, type Trigger } from '../../src/index.js';
import { syntheticCityBounds } from '../../src/fences/synthetic-city.js';
import { cityTraffic, sendPaced } from '../support/city-traffic.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { waitFor } from './support.js';

const RATE = 100_000;
const FENCES = 10_000;
const DEVICES = 10_000;
// Two seconds of pings after the second edit's point (200,000 sent): on a busy 2-core host the pipeline may need more
// than one to catch up with what was sent before an edit runs.
const PINGS_PER_DEVICE = 40;
const HALF_SIDE_M = 600;

interface Ping {
  id: string;
  lat: number;
  lon: number;
  ts: number;
}

/** Whether the segment a-b meets the box (Liang-Barsky on the parameter range [0, 1]). */
function segmentMeetsBox(a: Ping, b: Ping, box: [number, number, number, number]): boolean {
  let t0 = 0;
  let t1 = 1;
  const dx = b.lon - a.lon;
  const dy = b.lat - a.lat;
  const clip = (p: number, q: number): boolean => {
    if (p === 0) return q >= 0;
    const r = q / p;
    if (p < 0) {
      if (r > t1) return false;
      if (r > t0) t0 = r;
    } else {
      if (r < t0) return false;
      if (r < t1) t1 = r;
    }
    return true;
  };
  return clip(-dx, a.lon - box[0]) && clip(dx, box[2] - a.lon) && clip(-dy, a.lat - box[1]) && clip(dy, box[3] - a.lat);
}

/**
 * The new fence's triggers for one device's pings when pings [u, s) ran with the fence in force: ENTER / EXIT at
 * containment changes, CROSS for a segment through it with both ends outside, and the delete's EXIT at ping s - 1.
 */
function expected(pings: readonly Ping[], u: number, s: number, box: [number, number, number, number]): string[] {
  const inBox = (p: Ping): boolean => p.lon >= box[0] && p.lon <= box[2] && p.lat >= box[1] && p.lat <= box[3];
  const out: string[] = [];
  let inside = false;
  for (let j = u; j < s; j++) {
    const p = pings[j]!;
    const now = inBox(p);
    if (now && !inside) out.push(`ENTER@${p.ts}`);
    else if (!now && inside) out.push(`EXIT@${p.ts}`);
    else if (!now && !inside && j > 0 && segmentMeetsBox(pings[j - 1]!, p, box)) out.push(`CROSS@${p.ts}`);
    inside = now;
  }
  if (inside) out.push(`EXIT@${pings[s - 1]!.ts}`);
  return out;
}

test('one upsert and one delete at 100,000 pings/s over 10,000 fences: the right triggers around them, nothing shed', async () => {
  const traffic = cityTraffic({
    seed: 23,
    fences: FENCES,
    devices: DEVICES,
    pingsPerDevice: PINGS_PER_DEVICE,
    pingIntervalMs: 4000,
    speedMps: 25,
    dwellMs: 30_000,
    startMs: Date.UTC(2026, 0, 1),
  });
  const all = unpackMultiple(traffic.frames) as Ping[];
  assert.equal(all.length, traffic.pings);
  const b = syntheticCityBounds({ seed: 23, fenceCount: FENCES });
  const cLat = (b.minLat + b.maxLat) / 2;
  const cLon = (b.minLon + b.maxLon) / 2;
  const dLat = HALF_SIDE_M / 111_195;
  const dLon = HALF_SIDE_M / (111_195 * Math.cos((cLat * Math.PI) / 180));
  const box: [number, number, number, number] = [cLon - dLon, cLat - dLat, cLon + dLon, cLat + dLat];
  const ring = [
    [box[0], box[1]],
    [box[2], box[1]],
    [box[2], box[3]],
    [box[0], box[3]],
    [box[0], box[1]],
  ];
  // Triggers go to an NDJSON file (written by the dispatcher thread): the test's own thread only sends.
  const ndjson = join(mkdtempSync(join(tmpdir(), 'gr-edits-')), 'triggers.ndjson');
  const router = await createRouter({
    fences: traffic.fences,
    listenHost: '127.0.0.1',
    listenPort: 0,
    adminHost: null,
    ringCapacitySlots: 65536,
    stateDir: null,
    // Edits queue behind a checkpoint under way (one at a time): none falls in these few seconds, so each edit runs
    // at its quiet point, with pings still coming.
    checkpointIntervalMs: 60_000,
    downstreams: [{ name: 'file', kind: 'ndjson', path: ndjson }],
    log: () => undefined,
  });
  try {
    const progress = { sent: 0 };
    const shedAt: number[] = [];
    const sending = sendPaced(router.ingestPort!, traffic, RATE, 0, traffic.pings, progress);
    /** Pings read and settled: processed, shed or rejected (a shed one fails the test below, not this wait). */
    const settled = (): number => {
      const st = router.stats();
      return st.processed + st.shedTotal + st.rejectedTotal;
    };
    /** Waits until every ping written so far is settled, then runs `edit` at once; returns the send counts around it. */
    const atQuietPoint = async (
      minSent: number,
      edit: () => Promise<FenceEditResult>,
    ): Promise<{ call: number; done: number; result: FenceEditResult }> => {
      await waitFor(() => progress.sent >= minSent, 30_000, `${minSent} pings sent`);
      await waitFor(() => settled() === progress.sent, 30_000, 'every ping sent settled');
      const call = progress.sent;
      const shedBefore = router.stats().shedTotal;
      const result = await edit();
      // Shed from the call until the pings sent meanwhile are settled: what the edit could have caused.
      const done = progress.sent;
      await waitFor(() => settled() >= done, 30_000, 'the pings sent during the edit settled');
      shedAt.push(router.stats().shedTotal - shedBefore);
      return { call, done, result };
    };
    const up = await atQuietPoint(100_000, () =>
      router.upsertFence({
        type: 'Feature',
        properties: { id: 'live', tags: ['pop-up'] },
        geometry: { type: 'Polygon', coordinates: [ring] },
      }),
    );
    const del = await atQuietPoint(200_000, () => router.removeFence('live'));
    const achieved = await sending;
    assert.equal(up.result.action, 'created');
    assert.equal(up.result.fullBuild, false);
    assert.equal(del.result.action, 'removed');
    assert.ok(up.call < traffic.pings && del.done < traffic.pings, 'both edits ran while pings were still coming');
    await waitFor(() => settled() === traffic.pings, 60_000, 'every ping settled');
    await waitFor(() => router.stats().delivered === router.stats().triggersTotal, 60_000, 'every trigger delivered');
    const summary = await router.close();
    const got = readFileSync(ndjson, 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Trigger);
    assert.equal(got.length, summary.triggersTotal);
    assert.ok(achieved > RATE * 0.8, `sent at ${Math.round(achieved)} pings/s`);
    assert.equal(
      summary.shedTotal,
      0,
      `nothing shed: ${JSON.stringify(summary.shed)}, shed at the edits ${shedAt.join(' / ')}`,
    );
    assert.equal(summary.processed, traffic.pings);
    assert.equal(summary.fenceEdits, 2);

    // Per device: its pings (send order, with their send index) and its triggers for the new fence.
    const pingsOf = new Map<string, { p: Ping[]; k: number[] }>();
    all.forEach((p, k) => {
      let e = pingsOf.get(p.id);
      if (e === undefined) pingsOf.set(p.id, (e = { p: [], k: [] }));
      e.p.push(p);
      e.k.push(k);
    });
    const liveOf = new Map<string, string[]>();
    for (const t of got) {
      if (t.fenceId !== 'live') continue;
      assert.deepEqual(t.tags, ['pop-up']);
      let l = liveOf.get(String(t.deviceId));
      if (l === undefined) liveOf.set(String(t.deviceId), (l = []));
      l.push(`${t.type}@${t.eventTimeMs}`);
    }
    const firstAtOrAfter = (ks: number[], k: number): number => {
      const i = ks.findIndex((x) => x >= k);
      return i < 0 ? ks.length : i;
    };
    let devicesWithLive = 0;
    let deleteExits = 0;
    let ambiguous = 0;
    for (const [id, { p, k }] of pingsOf) {
      const actual = liveOf.get(id) ?? [];
      if (actual.length > 0) devicesWithLive++;
      // Pings sent before a call ran on the generation before it; pings sent after its answer on the one after.
      const uLo = firstAtOrAfter(k, up.call);
      const uHi = firstAtOrAfter(k, up.done);
      const sLo = firstAtOrAfter(k, del.call);
      const sHi = firstAtOrAfter(k, del.done);
      let matched = false;
      for (let u = uLo; u <= uHi && !matched; u++) {
        for (let s = Math.max(u, sLo); s <= sHi && !matched; s++) {
          const want = expected(p, u, s, box);
          if (want.join() === actual.join()) {
            matched = true;
            if (uHi > uLo || sHi > sLo) ambiguous++;
            if (want.length > 0 && s > 0 && want.at(-1) === `EXIT@${p[s - 1]!.ts}` && s <= sHi) {
              const inBox = (q: Ping): boolean =>
                q.lon >= box[0] && q.lon <= box[2] && q.lat >= box[1] && q.lat <= box[3];
              if (inBox(p[s - 1]!)) deleteExits++;
            }
          }
        }
      }
      assert.ok(
        matched,
        `device ${id}: live triggers ${JSON.stringify(actual)}, expected ${JSON.stringify(expected(p, uLo, sLo, box))} (window u ${uLo}-${uHi}, s ${sLo}-${sHi})`,
      );
    }
    assert.ok(devicesWithLive > 100, `devices with triggers for the new fence: ${devicesWithLive}`);
    assert.ok(deleteExits > 10, `devices inside at the delete: ${deleteExits}`);
    const report = checkDeliveryContract(got, { complete: true, stays: true });
    assert.deepEqual(report.problems, []);
    console.log(
      `${traffic.pings} pings at ${Math.round(achieved)}/s over ${FENCES} fences: upsert applied in ${up.result.elapsedMs.toFixed(1)} ms ` +
        `(${up.done - up.call} pings sent meanwhile), delete in ${del.result.elapsedMs.toFixed(1)} ms with ${del.result.exits} EXITs ` +
        `(${del.done - del.call} pings sent meanwhile); ${devicesWithLive} devices with triggers for it (${ambiguous} with a ping ` +
        `in flight across an edit), shed ${summary.shedTotal}, held P99 ${summary.heldTimeP99Ms.toFixed(1)} ms`,
    );
  } finally {
    await router.close();
  }
});
