/**
 * Device churn: `--waves` waves of `--slots` new devices each pass through one in-process router with `--slots`
 * device slots and a short idle timeout. Each device enters a fence and goes quiet; it expires (an EXIT marked
 * expired), its slot is freed once the callback downstream has its triggers, and the next wave reuses the slots.
 * Prints, every tenth of the run, the process's RSS and the main thread's heap, and the time a wave took from its
 * first ping to its last slot freed; checks that nothing was rejected and every trigger was delivered.
 *
 *   npx tsc -p tsconfig.json && node --expose-gc dist/bench/device-churn.bench.js [--waves 100] [--slots 1000]
 *
 * Writes bench/out/device-churn.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createRouter } from '../src/index.js';

const { values } = parseArgs({
  options: { waves: { type: 'string', default: '100' }, slots: { type: 'string', default: '1000' } },
});
const WAVES = Number(values.waves);
const SLOTS = Number(values.slots);
const IDLE_MS = 300;
const FENCES = 25;

/** Latitude and longitude `eastM` / `northM` metres from (0, 0). */
function at(eastM: number, northM: number): [number, number] {
  return [northM / 111_320, eastM / 111_320];
}

function square(id: string, eastM: number, northM: number, halfM: number): object {
  const [s, w] = at(eastM - halfM, northM - halfM);
  const [n, e] = at(eastM + halfM, northM + halfM);
  return {
    type: 'Feature',
    properties: { id },
    geometry: {
      type: 'Polygon',
      coordinates: [
        [
          [w, s],
          [e, s],
          [e, n],
          [w, n],
          [w, s],
        ],
      ],
    },
  };
}

const city = {
  type: 'FeatureCollection',
  features: Array.from({ length: FENCES }, (_, k) => square(`f${k}`, (k % 5) * 400, Math.floor(k / 5) * 400, 50)),
};
const stateDir = mkdtempSync(join(tmpdir(), 'gr-churn-bench-'));
let delivered = 0;
let expiredExits = 0;
const router = await createRouter({
  fences: city,
  listenHost: null,
  adminHost: null,
  maxDevices: SLOTS,
  deviceIdleTimeoutMs: IDLE_MS,
  stateDir,
  downstreams: [
    {
      name: 'cb',
      kind: 'callback',
      callback: (ts) => {
        delivered += ts.length;
        for (const t of ts) if (t.reason === 'expired') expiredExits++;
      },
    },
  ],
  log: () => undefined,
});

interface Sample {
  wave: number;
  devices: number;
  rssMiB: number;
  heapUsedMiB: number;
  waveMs: number;
}
const samples: Sample[] = [];
const waveMs: number[] = [];
for (let w = 0; w < WAVES; w++) {
  const t0 = performance.now();
  for (let i = 0; i < SLOTS; i++) {
    const id = i % 2 === 0 ? 1e12 + w * 1e6 + i : `w${w}-d${i}`;
    const k = (i + w) % FENCES;
    const [lat, lon] = at((k % 5) * 400, Math.floor(k / 5) * 400);
    while (!router.push({ id, lat, lon, ts: Date.UTC(2025, 0, 1) + w * 60_000 + i })) await router.inputDrained();
  }
  while (router.stats().deviceLifecycle.freed < (w + 1) * SLOTS) await new Promise((r) => setTimeout(r, 10));
  waveMs.push(performance.now() - t0);
  if ((w + 1) % Math.max(1, Math.floor(WAVES / 10)) === 0 || w === WAVES - 1) {
    global.gc?.();
    const m = process.memoryUsage();
    const sorted = [...waveMs].sort((a, b) => a - b);
    const s: Sample = {
      wave: w + 1,
      devices: (w + 1) * SLOTS,
      rssMiB: m.rss / 2 ** 20,
      heapUsedMiB: m.heapUsed / 2 ** 20,
      waveMs: sorted[Math.floor(sorted.length / 2)]!,
    };
    samples.push(s);
    console.log(
      `after ${String(s.devices).padStart(7)} devices: rss ${s.rssMiB.toFixed(1)} MiB, main heap ${s.heapUsedMiB.toFixed(1)} MiB, median wave ${s.waveMs.toFixed(0)} ms`,
    );
    waveMs.length = 0;
  }
}
const stats = router.stats();
await router.close();
rmSync(stateDir, { recursive: true, force: true });
const half = samples.slice(Math.floor(samples.length / 2));
const rssGrowthSecondHalf = Math.max(...half.map((s) => s.rssMiB)) / half[0]!.rssMiB - 1;
const result = {
  waves: WAVES,
  slots: SLOTS,
  devices: WAVES * SLOTS,
  rejected: stats.rejectedTotal,
  expired: stats.deviceLifecycle.expired,
  reused: stats.deviceLifecycle.reused,
  delivered,
  expiredExits,
  rssGrowthSecondHalfPct: rssGrowthSecondHalf * 100,
  samples,
};
console.log(
  `${result.devices} devices through ${SLOTS} slots: rejected ${result.rejected}, expired ${result.expired}, slots reused ${result.reused}, ` +
    `triggers delivered ${delivered} (${expiredExits} expiry EXITs); rss over the second half ${(rssGrowthSecondHalf * 100).toFixed(1)}%`,
);
const outDir = fileURLToPath(new URL('../../bench/out/', import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'device-churn.json'), JSON.stringify(result, null, 2));
if (result.rejected !== 0 || delivered !== 2 * WAVES * SLOTS) process.exitCode = 1;
