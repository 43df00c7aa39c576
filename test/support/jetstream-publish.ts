/** Publishing a seeded trajectory set to a JetStream telemetry stream, and reading what routers wrote. */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { partitionSubject, type Trigger } from '../../src/index.js';
import { PartitionStateBucket } from '../../src/durable/partition-state-bucket.js';
import type { CityTraffic } from './city-traffic.js';

/**
 * Waits until the partition state bucket at `url` holds, over its 16 partitions of stream TEL (consumer prefix
 * geofence-router), a delivered checkpoint with at least one device and a stream sequence above 0: a router has
 * stored state a successor reading every ping from the stream (exact replay) restores; with `partitions`, every one of
 * those has. Throws after `timeoutMs`.
 */
export async function waitForStoredPartitionState(
  url: string,
  timeoutMs: number,
  partitions: readonly number[] | null = null,
): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const bucket = await PartitionStateBucket.open(nc, {
      bucket: 'GEOFENCE_PARTITION_STATE',
      scope: 'TEL.geofence-router',
      replicas: 1,
      partitionCount: 16,
      writer: 'test reader',
    });
    const end = Date.now() + timeoutMs;
    for (;;) {
      let storedCount = 0;
      for (const p of partitions ?? Array.from({ length: 16 }, (_, k) => k)) {
        // A head read just before its writer replaced it names chunks purged since: read again next round.
        const stored = await bucket.read(p, 'delivered').catch(() => null);
        if (stored !== null && stored.streamSeq > 0 && stored.checkpoint.devices.length > 0) storedCount++;
      }
      if (storedCount > 0 && (partitions === null || storedCount === partitions.length)) return;
      if (Date.now() > end) throw new Error(`no partition state stored within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await nc.close();
  }
}

/**
 * Publishes pings [from, to) of `traffic` (those of them `take` accepts) at about `perSec`, one a message, to
 * `telemetry.<partition>.<deviceId>` over 16 partitions; the device of ping k is `v<k % devices>` (as sinkTraffic
 * names them).
 */
export async function publishPaced(
  url: string,
  traffic: CityTraffic,
  devices: number,
  from: number,
  to: number,
  perSec: number,
  take: (k: number) => boolean = () => true,
): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const js = jetstream(nc);
    const t0 = performance.now();
    for (let k = from; k < to;) {
      const end = Math.min(to, k + Math.max(1, Math.round(perSec / 50)));
      const acks: Promise<unknown>[] = [];
      for (; k < end; k++) {
        if (!take(k)) continue;
        const start = k === 0 ? 0 : traffic.ends[k - 1]!;
        acks.push(
          js.publish(
            partitionSubject('telemetry', `v${k % devices}`, 16),
            traffic.frames.subarray(start, traffic.ends[k]!),
          ),
        );
      }
      await Promise.all(acks);
      const lead = ((k - from) / perSec) * 1000 - (performance.now() - t0);
      if (lead > 1) await new Promise((r) => setTimeout(r, lead));
    }
  } finally {
    await nc.close();
  }
}

/** The triggers of an NDJSON file, whole lines only (none when it does not exist). */
export function readNdjson(path: string): Trigger[] {
  if (!existsSync(path)) return [];
  const lines = readFileSync(path, 'utf8').split('\n');
  // The last piece is a line still being written (or empty): only whole lines count.
  lines.pop();
  return lines.filter((l) => l.length > 0).map((l) => JSON.parse(l) as Trigger);
}

/** A trigger's identity and content. */
export const whole = (t: Trigger): string => `${String(t.deviceId)} ${t.seq} ${t.type} ${t.fenceId} ${t.eventTimeMs}`;
const identity = (t: Trigger): string => `${String(t.deviceId)} ${t.seq}`;

/** What a JetStream sink de-duplicating by (deviceId, seq) would hold; throws when one identity names two triggers. */
export function oncePerIdentity(triggers: readonly Trigger[]): Trigger[] {
  const seen = new Map<string, string>();
  const out: Trigger[] = [];
  for (const t of triggers) {
    const had = seen.get(identity(t));
    if (had === undefined) {
      seen.set(identity(t), whole(t));
      out.push(t);
    } else {
      assert.equal(whole(t), had, `(deviceId, seq) ${identity(t)} names two different triggers`);
    }
  }
  return out;
}
