/**
 * The flags both TCP load generators take (loadgen.ts encodes as it sends, replay-loadgen.ts replays what it encoded
 * first), their checks, and the connections they open.
 */
import { connect, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import type { LoadEncoding } from '../../src/ingest/ping-encoder.js';
import { Fleet } from '../../src/fences/synthetic-fleet.js';

/** Parsed flags of a TCP load generator. */
export interface TcpLoadArgs {
  host: string;
  port: number;
  /** The flag's text: a number of pings/s (the replay generator also takes "max"). */
  rateText: string;
  seconds: number;
  devices: number;
  connections: number;
  seed: number;
  encoding: LoadEncoding;
  tickMs: number;
  eventStepMs: number;
  radiusM: number;
  boundM: number;
  /** Flags only one generator takes, as given. */
  extra: Record<string, string | undefined>;
}

/** `--name` as a positive finite number, or a RangeError naming the flag. */
export function positiveFlag(name: string, text: string | undefined): number {
  const v = Number(text);
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`--${name} must be a positive number, got ${String(text)}`);
  return v;
}

/** Parses the process's flags: the common ones and `extra` (name -> default). */
export function parseTcpLoadArgs(extra: Record<string, string> = {}): TcpLoadArgs {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '7070' },
      rate: { type: 'string', default: '100000' },
      seconds: { type: 'string', default: '10' },
      devices: { type: 'string', default: '10000' },
      connections: { type: 'string', default: '4' },
      seed: { type: 'string', default: '42' },
      encoding: { type: 'string', default: 'maps' },
      'tick-ms': { type: 'string', default: '2' },
      'event-step-ms': { type: 'string', default: '0' },
      'radius-m': { type: 'string', default: '15000' },
      'bound-m': { type: 'string', default: '0' },
      ...Object.fromEntries(Object.entries(extra).map(([k, d]) => [k, { type: 'string' as const, default: d }])),
    },
  });
  const encoding = values.encoding!;
  if (!['maps', 'records', 'shared'].includes(encoding))
    throw new RangeError(`--encoding must be maps, records or shared, got ${encoding}`);
  const eventStepMs = Number(values['event-step-ms']);
  if (!(eventStepMs >= 0)) throw new RangeError(`--event-step-ms must be 0 or more, got ${values['event-step-ms']}`);
  const v = values as Record<string, string | undefined>;
  return {
    host: values.host!,
    port: positiveFlag('port', values.port),
    rateText: values.rate!,
    seconds: positiveFlag('seconds', values.seconds),
    devices: Math.floor(positiveFlag('devices', values.devices)),
    connections: Math.floor(positiveFlag('connections', values.connections)),
    seed: Math.floor(Number(values.seed)),
    encoding: encoding as LoadEncoding,
    tickMs: positiveFlag('tick-ms', values['tick-ms']),
    eventStepMs,
    radiusM: positiveFlag('radius-m', values['radius-m']),
    boundM: Number(values['bound-m']),
    extra: Object.fromEntries(Object.keys(extra).map((k) => [k, v[k]])),
  };
}

/**
 * Opens `a.connections` sockets to the router and follows them: `waiting[c]` while socket c waits for 'drain',
 * `isOpen[c]` until the router closes it, `closed()` how many it closed.
 */
export async function openLoadConnections(a: TcpLoadArgs): Promise<{
  sockets: Socket[];
  waiting: boolean[];
  isOpen: boolean[];
  closed: () => number;
  end: () => Promise<void>;
}> {
  const sockets = await Promise.all(
    Array.from(
      { length: a.connections },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect({ host: a.host, port: a.port, noDelay: false }, () => resolve(s));
          s.once('error', reject);
        }),
    ),
  );
  const waiting = new Array<boolean>(a.connections).fill(false);
  const isOpen = new Array<boolean>(a.connections).fill(true);
  let closed = 0;
  sockets.forEach((s, c) => {
    s.on('drain', () => (waiting[c] = false));
    s.on('close', () => {
      if (isOpen[c]) closed++;
      isOpen[c] = false;
      waiting[c] = false;
    });
  });
  const end = async (): Promise<void> => {
    await Promise.all(
      sockets.map((s, c) => (isOpen[c] ? new Promise<void>((r) => s.end(() => r())) : Promise.resolve())),
    );
  };
  return { sockets, waiting, isOpen, closed: () => closed, end };
}

/** The seeded fleet of `a`: moving devices only with event-time steps, a third parked when time is the wall clock. */
export function fleetOf(a: TcpLoadArgs): Fleet {
  return new Fleet({
    devices: a.devices,
    seed: a.seed,
    radiusM: a.radiusM,
    boundRadiusM: a.boundM > 0 ? a.boundM : Infinity,
    parkedFraction: a.eventStepMs > 0 ? 0 : 1 / 3,
  });
}
