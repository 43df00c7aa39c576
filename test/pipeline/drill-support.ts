/** Test support for the containment drills (GEOFENCE_FAULT_INJECT): routers that fail on purpose, devices per shard. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRouter, type Router, type RouterOptions } from '../../src/index.js';
import { shardOfId } from '../../src/ingest/device-registry.js';
import type { Trigger } from '../../src/dispatch/trigger.js';

/** Numeric device ids from `from` on that hash to `shard` of `shards`, `n` of them, none equal to `except`. */
export function devicesOnShard(shard: number, shards: number, n: number, except: number, from = 1000): number[] {
  const out: number[] = [];
  for (let id = from; out.length < n; id++) if (id !== except && shardOfId(id, shards) === shard) out.push(id);
  return out;
}

/**
 * A router whose pool workers run the drill `fault` (GEOFENCE_FAULT_INJECT), over `fences` on `shards` shards (a pool
 * worker each), a 500 ms stall limit, a state directory of its own, and one callback downstream collecting into
 * `called`; `options` on top.
 */
export async function createDrilledRouter(
  fault: string,
  fences: object,
  shards: number,
  called: Trigger[],
  options: Partial<RouterOptions> = {},
): Promise<Router> {
  // Pool workers inherit the environment of the thread that starts them (the ingest thread, which copies ours now).
  process.env['GEOFENCE_FAULT_INJECT'] = fault;
  try {
    return await createRouter({
      fences,
      listenHost: null,
      shards,
      poolSize: shards,
      ringCapacitySlots: 1024,
      maxDevices: 1000,
      containmentStallMs: 500,
      stateDir: mkdtempSync(join(tmpdir(), 'gr-drill-')),
      downstreams: [{ name: 'cb', kind: 'callback', callback: (ts) => void called.push(...ts) }],
      log: () => undefined,
      ...options,
    });
  } finally {
    delete process.env['GEOFENCE_FAULT_INJECT'];
  }
}
