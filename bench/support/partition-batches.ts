/** Pings encoded into one JetStream message per partition, `perMessage` at a time (for the source benchmarks). */
import type { JetStreamClient } from '@nats-io/jetstream';
import { partitionOf } from '../../src/index.js';
import type { FleetPing } from '../../src/fences/synthetic-fleet.js';
import { encodePingInto, MAX_PING_BYTES } from '../../src/ingest/ping-encoder.js';

/** Per partition, a message being filled; a full one is published to `telemetry.<partition>.x`. */
export class PartitionBatches {
  /** Acknowledgements of the messages published and not yet awaited. */
  readonly acks: Promise<unknown>[] = [];
  private readonly open: { buf: Buffer; pos: number; n: number }[];

  constructor(
    private readonly js: JetStreamClient,
    private readonly partitions: number,
    private readonly perMessage: number,
  ) {
    this.open = Array.from({ length: partitions }, () => ({
      buf: Buffer.alloc(perMessage * MAX_PING_BYTES),
      pos: 0,
      n: 0,
    }));
  }

  /** Encodes `ping` (plain map) into its partition's message, publishing it once it holds `perMessage`. */
  add(ping: FleetPing): void {
    const p = partitionOf(ping.id, this.partitions);
    const m = this.open[p]!;
    m.pos = encodePingInto(m.buf, m.pos, ping, 'maps');
    if (++m.n === this.perMessage) this.send(p);
  }

  /** Publishes every message that holds a ping. */
  flush(): void {
    this.open.forEach((m, p) => m.n > 0 && this.send(p));
  }

  private send(p: number): void {
    const m = this.open[p]!;
    this.acks.push(this.js.publish(`telemetry.${p}.x`, Buffer.from(m.buf.subarray(0, m.pos))));
    m.pos = 0;
    m.n = 0;
  }
}
