/**
 * Test support for the ingest edge: a real edge over real shared regions with a sink that copies each ping.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { Packr } from 'msgpackr';
import { Lane, type RejectReason, ING_REJECTED_F64, RingKind, TELEMETRY_STRIDE_BYTES } from '../../src/shm/layout.js';
import { allocateRingRegion } from '../../src/shm/regions.js';
import { SpscRing } from '../../src/shm/ring.js';
import { PF_ADMIT_TIME_NS_F64 } from '../../src/ingest/ping-fields.js';
import { writeTelemetryRecord } from '../../src/ingest/telemetry-record.js';
import { allocateDeviceIdTable, DeviceRegistry } from '../../src/ingest/device-registry.js';
import { IngestEdge, type IngestEdgeOptions, type PingSink } from '../../src/ingest/ingest-edge.js';
import { NO_COMPLIANCE, type LanePredicates } from '../../src/ingest/lane-classifier.js';
import type { PingFields } from '../../src/ingest/ping-fields.js';
import { allocatePipelineRegion, PipelineRegion } from '../../src/shm/pipeline-region.js';
import { RejectLog } from '../../src/ingest/reject-log.js';

/** A copied ping. */
export interface SeenPing {
  id: string | number;
  lat: number;
  lon: number;
  tsMs: number;
  speedMps: number;
  slot: number;
  shard: number;
  lane: Lane;
}

/** Sink that copies every ping it is offered. */
export class CollectingSink implements PingSink {
  readonly pings: SeenPing[] = [];
  offer(f: PingFields): void {
    this.pings.push({
      id: f.id(),
      lat: f.lat,
      lon: f.lon,
      tsMs: f.tsMs,
      speedMps: f.speedMps,
      slot: f.slot,
      shard: f.shard,
      lane: f.lane,
    });
  }
}

/** A real edge with its regions. */
export interface EdgeFixture {
  edge: IngestEdge;
  pipeline: PipelineRegion;
  registry: DeviceRegistry;
  idTable: SharedArrayBuffer;
  sink: CollectingSink;
  logLines: string[];
  rejected(reason: RejectReason): number;
}

/** Builds an edge with `shards` shards and `maxDevices` slots of `idBytes` bytes. */
export function makeEdge(
  options: Partial<IngestEdgeOptions> = {},
  sizes: {
    shards?: number;
    maxDevices?: number;
    idBytes?: number;
    predicates?: LanePredicates;
    /** The edge is ingest thread `ingestThread[0]` of `ingestThread[1]` (default: the only one). */
    ingestThread?: [number, number];
  } = {},
): EdgeFixture {
  const pipeline = PipelineRegion.wrap(allocatePipelineRegion(sizes.shards ?? 4));
  const idTable = allocateDeviceIdTable(sizes.maxDevices ?? 1000, sizes.idBytes ?? 32);
  const [member, threads] = sizes.ingestThread ?? [0, 1];
  const registry = new DeviceRegistry(idTable, sizes.shards ?? 4, member, threads);
  const sink = new CollectingSink();
  const logLines: string[] = [];
  const log = new RejectLog({ intervalMs: 0, nowMs: () => 0, write: (l) => logLines.push(l) });
  const edge = new IngestEdge(options, {
    pipeline,
    registry,
    predicates: sizes.predicates ?? NO_COMPLIANCE,
    sink,
    log,
  });
  return { edge, pipeline, registry, idTable, sink, logLines, rejected: (r) => pipeline.f64[ING_REJECTED_F64 + r]! };
}

/** Plain-map encoder (as a non-msgpackr sender would write maps). */
export const mapPackr = new Packr({ useRecords: false });
/** Records encoder with inline definitions per frame. */
export const recordPackr = new Packr({ useRecords: true });

/** A valid ping object for device `id` at step `i`. */
export function ping(id: string | number, i: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id,
    lat: 52.5 + i * 1e-4,
    lon: 13.4 + i * 1e-4,
    ts: 1_735_689_600_000 + i * 1000,
    speed: 5 + (i % 3),
    ...extra,
  };
}

/** Concatenates buffers. */
export function concat(parts: Uint8Array[]): Buffer {
  return Buffer.concat(parts);
}

/**
 * An edge (2,048 device slots) whose sink writes every ping into a 1,024-slot telemetry ring and consumes it at once
 * (standing in for admission and the pool), with a double admission time handed over in its cell as admission does.
 */
export function ringSinkEdge(ingestThread: [number, number] = [0, 1]): {
  ring: SpscRing;
  fx: ReturnType<typeof makeEdge>;
} {
  const ring = SpscRing.wrap(
    allocateRingRegion({ capacitySlots: 1024, strideBytes: TELEMETRY_STRIDE_BYTES, kind: RingKind.TELEMETRY }),
  );
  const sink: PingSink = {
    offer(f) {
      const s = ring.claim();
      f.values[PF_ADMIT_TIME_NS_F64] = 1e15 + s;
      writeTelemetryRecord(ring, s, f);
      ring.publish();
      ring.release(1);
    },
  };
  const fx = makeEdge({}, { maxDevices: 2048, ingestThread });
  (fx.edge as unknown as { sink: PingSink }).sink = sink;
  return { ring, fx };
}

/** A TCP connection to 127.0.0.1:`port`, once connected. */
export function openTcp(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1', noDelay: true }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Waits (polling every millisecond, up to about 5 s) until `cond` holds; fails naming `what`. */
export async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 5000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  assert.fail(`timed out waiting for ${what}`);
}
