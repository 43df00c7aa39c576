/**
 * An MQTT 5 server of a test's own over real TCP (packets read and written with mqtt-packet), for what Mosquitto
 * cannot be made to do on demand: refuse a message for the moment (PUBACK 151 quota exceeded, 128 unspecified error) and hold
 * a client to the Receive Maximum it advertises, as brokers that enforce it do (DISCONNECT 0x93 on the first message
 * past it). It takes QoS 1 PUBLISHes only, holds each PUBACK `ackDelayMs` (so that unacknowledged messages pile up as
 * at a busy broker), and keeps what it accepted in arrival order: what a subscriber of every topic would receive.
 */
import { createServer, type Server, type Socket } from 'node:net';
import mqttPacket, { type Packet } from 'mqtt-packet';

/** Options of MqttTestServer. */
export interface MqttTestServerOptions {
  /** The Receive Maximum the CONNACK names, and that the server enforces. */
  receiveMaximum: number;
  /** How long each PUBACK is held, ms. */
  ackDelayMs: number;
  /**
   * The PUBACK reason code for a message (0: accepted; 0x80 or more: refused), given its payload and how many times
   * the same payload came before.
   */
  reasonCode: (payload: string, seenBefore: number) => number;
}

/** One accepted message. */
export interface AcceptedMessage {
  readonly topic: string;
  readonly payload: string;
}

/** A listening MQTT 5 test server (see the module comment). */
export class MqttTestServer {
  /** Messages accepted, in arrival order. */
  readonly accepted: AcceptedMessage[] = [];
  /** Messages refused, by reason code. */
  readonly refusedByCode = new Map<number, number>();
  /** The most messages one connection had unacknowledged at once. */
  maxUnacked = 0;
  /** Connections dropped for sending past the Receive Maximum. */
  receiveMaximumExceeded = 0;
  /** Connections opened. */
  connections = 0;
  private readonly seen = new Map<string, number>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    private readonly options: MqttTestServerOptions,
  ) {}

  /** Starts one on a free loopback port. */
  static async start(options: MqttTestServerOptions): Promise<MqttTestServer> {
    const server = createServer();
    const s = new MqttTestServer(server, options);
    server.on('connection', (socket) => s.serve(socket));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return s;
  }

  /** mqtt://127.0.0.1:<port>. */
  get url(): string {
    const address = this.server.address();
    if (address === null || typeof address === 'string') throw new Error('the test server is not listening');
    return `mqtt://127.0.0.1:${address.port}`;
  }

  /** Closes the listener and every connection. */
  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private serve(socket: Socket): void {
    this.connections++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const send = (packet: Record<string, unknown>): void => {
      if (!socket.destroyed) socket.write(mqttPacket.generate(packet as unknown as Packet, { protocolVersion: 5 }));
    };
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    let unacked = 0;
    let dropped = false;
    parser.on('error', () => socket.destroy());
    parser.on('packet', (packet: Packet) => {
      if (dropped) return;
      if (packet.cmd === 'connect') {
        send({
          cmd: 'connack',
          sessionPresent: false,
          reasonCode: 0,
          properties: { receiveMaximum: this.options.receiveMaximum },
        });
      } else if (packet.cmd === 'pingreq') {
        send({ cmd: 'pingresp' });
      } else if (packet.cmd === 'disconnect') {
        socket.end();
      } else if (packet.cmd === 'publish') {
        if (packet.qos !== 1) throw new Error(`the test server takes QoS 1 only, got ${packet.qos}`);
        if (++unacked > this.options.receiveMaximum) {
          this.receiveMaximumExceeded++;
          dropped = true;
          send({ cmd: 'disconnect', reasonCode: 0x93 });
          socket.end();
          return;
        }
        this.maxUnacked = Math.max(this.maxUnacked, unacked);
        const payload = Buffer.from(packet.payload).toString('utf8');
        const seenBefore = this.seen.get(payload) ?? 0;
        this.seen.set(payload, seenBefore + 1);
        const code = this.options.reasonCode(payload, seenBefore);
        if (code < 0x80) this.accepted.push({ topic: packet.topic, payload });
        else this.refusedByCode.set(code, (this.refusedByCode.get(code) ?? 0) + 1);
        const messageId = packet.messageId;
        setTimeout(() => {
          unacked--;
          send({ cmd: 'puback', messageId, reasonCode: code });
        }, this.options.ackDelayMs);
      }
    });
    socket.on('data', (chunk) => parser.parse(chunk));
  }
}
