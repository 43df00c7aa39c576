/**
 * Flood limits of the live sources (ingest thread): pings per second and new devices per second, per TCP connection
 * and per source address (every connection from one address shares the address's budget). What exceeds a budget is
 * rejected at the edge and counted by reason (`connection_rate`, `new_device_rate`); devices already known and other
 * connections keep flowing. Token buckets of one second's worth (the burst equals the rate). Allocation-free per ping.
 */
import { TokenBucket } from './token-bucket.js';

/** The flood limits of a listener; 0 turns one off. */
export interface FloodLimits {
  /** Pings per second one connection may send, [0, 1e9] (0: no limit). */
  maxPingsPerSecPerConnection: number;
  /** New devices per second one connection may register, [0, 1e9] (0: no limit). */
  maxNewDevicesPerSecPerConnection: number;
  /** Pings per second all connections from one address may send together, [0, 1e9] (0: no limit). */
  maxPingsPerSecPerAddress: number;
  /** New devices per second all connections from one address may register together, [0, 1e9] (0: no limit). */
  maxNewDevicesPerSecPerAddress: number;
}

/** No flood limit. */
export const NO_FLOOD_LIMITS: Readonly<FloodLimits> = Object.freeze({
  maxPingsPerSecPerConnection: 0,
  maxNewDevicesPerSecPerConnection: 0,
  maxPingsPerSecPerAddress: 0,
  maxNewDevicesPerSecPerAddress: 0,
});

/** Validates flood limits; throws a RangeError naming the option. */
export function validateFloodLimits(o: FloodLimits, prefix = 'options.ingest'): void {
  for (const k of Object.keys(NO_FLOOD_LIMITS) as (keyof FloodLimits)[]) {
    const v = o[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > 1e9)
      throw new RangeError(`${prefix}.${k} must be a number in [0, 1e9] (0: no limit), got ${String(v)}`);
  }
}

/** True when any limit is set. */
export function hasFloodLimits(o: FloodLimits): boolean {
  return (
    o.maxPingsPerSecPerConnection > 0 ||
    o.maxNewDevicesPerSecPerConnection > 0 ||
    o.maxPingsPerSecPerAddress > 0 ||
    o.maxNewDevicesPerSecPerAddress > 0
  );
}

function bucket(ratePerSec: number, nowNs: number): TokenBucket | null {
  return ratePerSec > 0 ? new TokenBucket(ratePerSec, ratePerSec, nowNs) : null;
}

/** The budgets one source address shares among its connections. */
class AddressBudget {
  readonly pings: TokenBucket | null;
  readonly devices: TokenBucket | null;
  connections = 0;

  constructor(o: FloodLimits, nowNs: number) {
    this.pings = bucket(o.maxPingsPerSecPerAddress, nowNs);
    this.devices = bucket(o.maxNewDevicesPerSecPerAddress, nowNs);
  }
}

/**
 * The budgets of one stream (a connection): its own and its address's. `clock[0]` is the time the budgets are
 * taken at, ns (the edge sets it per read chunk).
 */
export class StreamLimits {
  private readonly pings: TokenBucket | null;
  private readonly devices: TokenBucket | null;
  private readonly address: AddressBudget;
  private readonly clock: Float64Array;

  constructor(address: AddressBudget, o: FloodLimits, clock: Float64Array) {
    this.address = address;
    this.clock = clock;
    this.pings = bucket(o.maxPingsPerSecPerConnection, clock[0]!);
    this.devices = bucket(o.maxNewDevicesPerSecPerConnection, clock[0]!);
  }

  /**
   * Takes one ping from the connection's and the address's budgets; false when either is empty (and then neither is
   * spent: a ping the address refuses leaves the connection's budget as it was).
   */
  takePing(): boolean {
    return takeFromBoth(this.pings, this.address.pings, this.clock);
  }

  /** Takes one new device from the connection's and the address's budgets, as takePing does. */
  takeNewDevice(): boolean {
    return takeFromBoth(this.devices, this.address.devices, this.clock);
  }
}

/** Takes one token from `own` and from `shared` (null: no limit), at `clock[0]`; neither when either is empty. */
function takeFromBoth(own: TokenBucket | null, shared: TokenBucket | null, clock: Float64Array): boolean {
  if (own !== null && !own.tryTakeOneAt(clock, 0)) return false;
  if (shared === null || shared.tryTakeOneAt(clock, 0)) return true;
  own?.giveBackOne();
  return false;
}

/** The flood limits of one listener: hands out StreamLimits per connection, sharing budgets per address. */
export class FloodGuard {
  readonly limits: Readonly<FloodLimits>;
  private readonly addresses = new Map<string, AddressBudget>();
  private readonly clock: Float64Array;
  private opens = 0;

  /** Limits `limits` on the clock cell `clock` (ns). */
  constructor(limits: FloodLimits, clock: Float64Array) {
    validateFloodLimits(limits);
    this.limits = { ...limits };
    this.clock = clock;
  }

  /** Source addresses with a budget (an open connection, or one closed since the last prune). */
  get addressCount(): number {
    return this.addresses.size;
  }

  /** The limits of a new connection from `address`; call `release(address)` when it closes. */
  open(address: string): StreamLimits {
    // An address keeps its budget a while after its last connection closed (reconnecting does not refill it); the
    // budgets of addresses with no connection are dropped every 1024 connections.
    if (++this.opens % 1024 === 0) {
      for (const [k, b] of this.addresses) if (b.connections === 0) this.addresses.delete(k);
    }
    let a = this.addresses.get(address);
    if (a === undefined) {
      a = new AddressBudget(this.limits, this.clock[0]!);
      this.addresses.set(address, a);
    }
    a.connections++;
    return new StreamLimits(a, this.limits, this.clock);
  }

  /** A connection from `address` closed. */
  release(address: string): void {
    const a = this.addresses.get(address);
    if (a !== undefined && a.connections > 0) a.connections--;
  }
}
