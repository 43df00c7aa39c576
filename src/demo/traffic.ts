/**
 * The demo's traffic (main thread): a simulated fleet pinging the router's real TCP listener as MessagePack. Moving
 * devices ping every `movingIntervalMs`, parked ones every `parkedIntervalMs`; at each shift change a share of the
 * parked vehicles start moving and ping every `burstIntervalMs` for `shiftBurstMs` while as many moving ones park, so
 * the rate jumps for a few seconds and the fleet's make-up stays steady. Each device always uses the same
 * connection, so its pings arrive in order.
 */
import { connect, type Socket } from 'node:net';
import { encodePingInto, MAX_PING_BYTES } from '../ingest/ping-encoder.js';
import { Fleet, mulberry32, type FleetPing } from '../fences/synthetic-fleet.js';

/** Options of DemoTraffic. */
export interface DemoTrafficOptions {
  /** Devices in the fleet, [1, 1e6]. */
  devices: number;
  /** PRNG seed. */
  seed: number;
  /** City centre latitude, degrees. */
  centreLat: number;
  /** City centre longitude, degrees. */
  centreLon: number;
  /** Devices start within, and turn back at, this distance from the centre, m. */
  radiusM: number;
  /** Share of devices parked at start, [0, 1]. */
  parkedFraction: number;
  /** Ping interval of a moving device, ms. */
  movingIntervalMs: number;
  /** Ping interval of a parked device, ms. */
  parkedIntervalMs: number;
  /** Ping interval of a device that just started at a shift change, ms. */
  burstIntervalMs: number;
  /** Time between shift changes, ms. */
  shiftPeriodMs: number;
  /** Time of the first shift change after start, ms. */
  firstShiftAtMs: number;
  /** How long the vehicles that start at a shift change ping fast, ms. */
  shiftBurstMs: number;
  /** Share of the parked vehicles that start moving at a shift change, [0, 1]. */
  shiftFraction: number;
  /** First pings are spread over at least this long, so the fleet's opening ENTER wave comes in gradually, ms. */
  rampUpMs: number;
  /** TCP connections, [1, 64]. */
  connections: number;
  /** Time between sending rounds, ms. */
  tickMs: number;
}

/** Defaults: 20,000 devices around Berlin, a third parked, a shift change every 25 s (the first after 8 s). */
const DEMO_TRAFFIC_DEFAULTS: Readonly<DemoTrafficOptions> = Object.freeze({
  devices: 20_000,
  seed: 7,
  centreLat: 52.52,
  centreLon: 13.405,
  radiusM: 3_500,
  parkedFraction: 1 / 3,
  movingIntervalMs: 1_000,
  parkedIntervalMs: 10_000,
  burstIntervalMs: 250,
  shiftPeriodMs: 25_000,
  firstShiftAtMs: 8_000,
  shiftBurstMs: 4_000,
  shiftFraction: 0.6,
  rampUpMs: 5_000,
  connections: 2,
  tickMs: 20,
});

/** How long `stop` waits for the router to close a connection after its end, ms. */
const STOP_WAIT_MS = 10_000;

/** Pings one connection buffers per round at most (more wait for the next round). */
const MAX_PINGS_PER_ROUND = 8192;

/** The running traffic. */
export class DemoTraffic {
  readonly options: Readonly<DemoTrafficOptions>;
  /** Pings written to the sockets. */
  sent = 0;
  /** Shift changes so far. */
  shiftChanges = 0;
  private readonly fleet: Fleet;
  private readonly rnd: () => number;
  private readonly nextPingMs: Float64Array;
  private readonly burstUntilMs: Float64Array;
  private readonly ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 0 };
  private readonly buffers: Buffer[];
  private readonly lengths: Int32Array;
  private readonly counts: Int32Array;
  private readonly blocked: Uint8Array;
  private sockets: Socket[] = [];
  private timer: NodeJS.Timeout | null = null;
  private startMs = 0;
  private nextShiftMs = 0;
  private lastBurstEndMs = -Infinity;

  constructor(options: Partial<DemoTrafficOptions> = {}) {
    const o = { ...DEMO_TRAFFIC_DEFAULTS, ...options };
    if (!Number.isInteger(o.devices) || o.devices < 1 || o.devices > 1_000_000) {
      throw new RangeError(`options.devices must be an integer in [1, 1000000], got ${String(o.devices)}`);
    }
    if (!Number.isInteger(o.connections) || o.connections < 1 || o.connections > 64) {
      throw new RangeError(`options.connections must be an integer in [1, 64], got ${String(o.connections)}`);
    }
    this.options = o;
    this.fleet = new Fleet({
      devices: o.devices,
      seed: o.seed,
      centreLat: o.centreLat,
      centreLon: o.centreLon,
      radiusM: o.radiusM,
      boundRadiusM: o.radiusM,
      parkedFraction: o.parkedFraction,
    });
    this.rnd = mulberry32(o.seed ^ 0x5eed);
    this.nextPingMs = new Float64Array(o.devices);
    this.burstUntilMs = new Float64Array(o.devices);
    this.buffers = Array.from({ length: o.connections }, () =>
      Buffer.allocUnsafe(MAX_PINGS_PER_ROUND * MAX_PING_BYTES),
    );
    this.lengths = new Int32Array(o.connections);
    this.counts = new Int32Array(o.connections);
    this.blocked = new Uint8Array(o.connections);
  }

  /** True while the vehicles of the latest shift change ping fast. */
  get inShiftChange(): boolean {
    return performance.now() < this.lastBurstEndMs;
  }

  /** Devices moving now. */
  movingDevices(): number {
    let n = 0;
    for (let i = 0; i < this.fleet.size; i++) if (this.fleet.speedOf(i) > 0) n++;
    return n;
  }

  /** Connects to the router's listener and starts sending. */
  async start(host: string, port: number): Promise<void> {
    this.sockets = await Promise.all(
      Array.from(
        { length: this.options.connections },
        () =>
          new Promise<Socket>((resolve, reject) => {
            const s = connect({ host, port }, () => resolve(s));
            s.once('error', reject);
          }),
      ),
    );
    this.sockets.forEach((s, c) => {
      s.on('drain', () => (this.blocked[c] = 0));
      // The router closes the listener's connections when it drains; nothing to do here.
      s.on('error', () => undefined);
    });
    this.startMs = performance.now();
    this.nextShiftMs = this.startMs + this.options.firstShiftAtMs;
    // Spread the first pings over the ramp (or one interval) so the start is not one big burst of ENTERs.
    for (let i = 0; i < this.fleet.size; i++) {
      this.nextPingMs[i] =
        this.startMs + this.rnd() * Math.max(this.options.rampUpMs, this.intervalMs(i, this.startMs));
    }
    this.timer = setInterval(() => this.round(), this.options.tickMs);
  }

  /**
   * Stops sending and closes the connections: resolves once the router has closed each one in turn (it answers a
   * connection's end once it has read everything sent before it, so a stop that follows cuts no frame), or after
   * STOP_WAIT_MS.
   */
  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await Promise.all(
      this.sockets.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (s.destroyed) return resolve();
            const timer = setTimeout(() => {
              s.destroy();
              resolve();
            }, STOP_WAIT_MS);
            s.once('close', () => {
              clearTimeout(timer);
              resolve();
            });
            s.end();
          }),
      ),
    );
    this.sockets = [];
  }

  private intervalMs(i: number, nowMs: number): number {
    const o = this.options;
    if (this.fleet.speedOf(i) === 0) return o.parkedIntervalMs;
    return this.burstUntilMs[i]! > nowMs ? o.burstIntervalMs : o.movingIntervalMs;
  }

  /** A shift change: a share of the parked vehicles start (pinging fast for a while), as many moving ones park. */
  private shiftChange(nowMs: number): void {
    const f = this.fleet;
    const o = this.options;
    let parked = 0;
    for (let i = 0; i < f.size; i++) if (f.speedOf(i) === 0) parked++;
    const moving = f.size - parked;
    const parkShare = moving === 0 ? 0 : Math.min(1, (parked * o.shiftFraction) / moving);
    for (let i = 0; i < f.size; i++) {
      // Decide on the state before the change, so a vehicle that starts is not parked again in the same pass.
      if (f.speedOf(i) === 0) {
        if (this.rnd() >= o.shiftFraction) continue;
        f.setSpeed(i, f.randomSpeedMps());
        this.burstUntilMs[i] = nowMs + o.shiftBurstMs;
        this.nextPingMs[i] = nowMs + this.rnd() * o.burstIntervalMs;
      } else if (this.burstUntilMs[i]! <= nowMs && this.rnd() < parkShare) {
        f.setSpeed(i, 0);
      }
    }
    this.shiftChanges++;
    this.lastBurstEndMs = nowMs + o.shiftBurstMs;
  }

  /** One sending round: every device whose ping is due pings, one write per connection. */
  private round(): void {
    const nowMs = performance.now();
    const o = this.options;
    if (nowMs >= this.nextShiftMs) {
      this.shiftChange(nowMs);
      this.nextShiftMs += o.shiftPeriodMs;
    }
    const epochMs = Date.now();
    const conns = o.connections;
    this.lengths.fill(0);
    this.counts.fill(0);
    for (let i = 0; i < this.fleet.size; i++) {
      if (this.nextPingMs[i]! > nowMs) continue;
      const c = i % conns;
      // A blocked or full connection leaves its devices due for the next round.
      if (this.blocked[c] === 1 || this.counts[c]! >= MAX_PINGS_PER_ROUND) continue;
      this.fleet.advance(i, this.ping, epochMs);
      this.lengths[c] = encodePingInto(this.buffers[c]!, this.lengths[c]!, this.ping, 'maps');
      this.counts[c]!++;
      this.nextPingMs[i] = nowMs + this.intervalMs(i, nowMs) * (0.9 + 0.2 * this.rnd());
    }
    for (let c = 0; c < conns; c++) {
      const s = this.sockets[c];
      if (this.lengths[c] === 0 || s === undefined || s.destroyed) continue;
      // Copy out: the socket keeps what it is given until it is flushed, and the buffer is reused next round.
      if (!s.write(Buffer.from(this.buffers[c]!.subarray(0, this.lengths[c]!)))) this.blocked[c] = 1;
      this.sent += this.counts[c]!;
    }
  }
}
