/**
 * Connections to the servers of options.jetstreamSource (main thread: the partition state and the leases; ingest
 * thread: the source itself), opened and closed alike.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';

/** What a connection to the source's servers needs from options.jetstreamSource. */
export interface SourceServers {
  servers: readonly string[];
  token: string | null;
  consumerPrefix: string;
}

/**
 * Connects to `o.servers` (reconnecting for ever once connected) under the client name `geofence-router <purpose>
 * <consumerPrefix>`. Throws an Error naming options.jetstreamSource.servers when none can be reached.
 */
export async function connectSourceServers(o: SourceServers, purpose: string): Promise<NatsConnection> {
  try {
    return await connect({
      servers: [...o.servers],
      name: `geofence-router ${purpose} ${o.consumerPrefix}`,
      maxReconnectAttempts: -1,
      ...(o.token === null ? {} : { token: o.token }),
    });
  } catch (err) {
    throw new Error(`options.jetstreamSource.servers ${o.servers.join(',')}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** Drains `nc` (what it has sent reaches the server), closing it outright after `withinMs`. */
export async function drainWithin(nc: NatsConnection, withinMs: number): Promise<void> {
  const drained = nc.drain().catch(() => undefined);
  await Promise.race([drained, new Promise<void>((r) => setTimeout(r, withinMs).unref())]);
  if (!nc.isClosed()) await nc.close().catch(() => undefined);
}
