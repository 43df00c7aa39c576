/**
 * Queries from shared state agree with the trigger history of a seeded run: for every device, the fences the router
 * says it is inside are exactly those with an ENTER and no EXIT after it (each stay beginning no later than its
 * ENTER's event time), the occupants of every fence are the devices whose history leaves them inside it, and the last
 * position is the device's last ping. Asked through the library and through the admin routes while the router runs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unpackMultiple } from 'msgpackr';
import { createRouter, type Trigger } from '../../src/index.js';
import { sendPaced } from '../support/city-traffic.js';
import { sinkTraffic } from '../support/sink-run.js';
import { waitFor } from '../pipeline/support.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';

test('device and fence queries agree with the trigger history, through the library and the admin routes', async () => {
  const traffic = sinkTraffic(17, 400);
  const history: Trigger[] = [];
  const router = await createRouter({
    fences: traffic.fences,
    listenPort: 0,
    adminPort: 0,
    stateDir: null,
    downstreams: [{ kind: 'callback', name: 'app', callback: (ts) => void history.push(...ts) }],
    log: () => undefined,
  });
  try {
    await sendPaced(router.ingestPort!, traffic, 10_000);
    await waitFor(() => router.stats().processed === traffic.pings, 60_000, 'every ping processed');
    await waitFor(() => router.stats().delivered === router.stats().triggersTotal, 60_000, 'every trigger delivered');
    // The history is read in arrival order below: it must be every device's whole run, in order, with valid stays.
    assert.deepEqual(checkDeliveryContract(history, { complete: true, stays: true }).problems, []);
    // What the history says: per device, fence -> the event time of the ENTER that opened the stay still open.
    const open = new Map<string | number, Map<string, number>>();
    for (const t of history) {
      let m = open.get(t.deviceId);
      if (m === undefined) open.set(t.deviceId, (m = new Map()));
      if (t.type === 'ENTER') m.set(t.fenceId, t.eventTimeMs);
      else if (t.type === 'EXIT') m.delete(t.fenceId);
    }
    const last = new Map<string | number, { lat: number; lon: number; ts: number }>();
    for (const p of unpackMultiple(traffic.frames) as { id: string | number; lat: number; lon: number; ts: number }[])
      last.set(p.id, { lat: p.lat, lon: p.lon, ts: p.ts });
    let insideNow = 0;
    for (const [id, ping] of last) {
      const now = router.device(id);
      assert.ok(now !== null, `device ${JSON.stringify(id)} is known`);
      assert.equal(now.lastEventMs, ping.ts);
      assert.equal(now.lat, ping.lat);
      assert.equal(now.lon, ping.lon);
      const expected = open.get(id) ?? new Map<string, number>();
      assert.deepEqual(now.inside.map((s) => s.fenceId).sort(), [...expected.keys()].sort(), `device ${String(id)}`);
      for (const s of now.inside) assert.ok(s.sinceMs <= expected.get(s.fenceId)!, 'the stay began by its ENTER');
      insideNow += now.inside.length;
    }
    assert.ok(insideNow > 50, `stays open at the end: ${insideNow}`);
    assert.equal(router.device('nobody'), null);
    const features = (traffic.fences as unknown as { features: { properties: { id: string } }[] }).features;
    let occupied = 0;
    for (const f of features) {
      const fenceId = f.properties.id;
      const got = router
        .fenceOccupants(fenceId)!
        .map((o) => String(o.deviceId))
        .sort();
      const want = [...open]
        .filter(([, m]) => m.has(fenceId))
        .map(([d]) => String(d))
        .sort();
      assert.deepEqual(got, want, `fence ${fenceId}`);
      if (got.length > 0) occupied++;
    }
    assert.ok(occupied > 10, `fences with devices inside: ${occupied}`);
    assert.equal(router.fenceOccupants('no-such-fence'), null);
    // The same answers over HTTP.
    const base = `http://127.0.0.1:${router.adminPort!}`;
    const [someId] = [...open].find(([, m]) => m.size > 0)!;
    const res = await fetch(
      `${base}/devices/${encodeURIComponent(String(someId))}${typeof someId === 'string' ? '?type=string' : ''}`,
    );
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), JSON.parse(JSON.stringify(router.device(someId))));
    const fenceId = router.device(someId)!.inside[0]!.fenceId;
    const occ = await fetch(`${base}/fences/${encodeURIComponent(fenceId)}/devices`);
    assert.deepEqual(
      await occ.json(),
      JSON.parse(JSON.stringify({ fenceId, devices: router.fenceOccupants(fenceId) })),
    );
    assert.equal((await fetch(`${base}/devices/nobody`)).status, 404);
    assert.equal((await fetch(`${base}/fences/%E0%A4%A/devices`)).status, 400);
    assert.equal((await fetch(`${base}/devices/x`, { method: 'POST' })).status, 405);
  } finally {
    await router.close();
  }
});
