/**
 * MQTT sink (MQTT 5 or 3.1.1): each trigger is one QoS 1 message (the trigger's JSON object, as a webhook receives it
 * in its array), retain off, on the topic its template names. A batch is delivered when the broker has acknowledged
 * every message (PUBACK); a batch not acknowledged within `ackTimeoutMs` fails and is re-sent by the router. QoS 1 is
 * at-least-once: a subscriber can see a trigger twice after such a failure and keeps the first (deviceId, seq), as
 * with any re-delivery.
 *
 * The router is the only one that re-sends: when the connection is lost, or a batch's PUBACKs do not all come within
 * `ackTimeoutMs`, every batch waiting for acknowledgements fails at once and the client is ended with what it held
 * (its store of unacknowledged messages, its queue of messages not yet written); the next delivery connects afresh
 * (waiting up to `ackTimeoutMs`). A client left to reconnect by itself would re-send those messages behind the
 * router's back: triggers it has since dead-lettered, or, after a pause past the partition leases, triggers whose
 * partition another router delivers now (out of order beside that router's).
 *
 * A PUBACK that refuses one message for good (MQTT 5: the broker's access rules deny its topic, say) dead-letters that
 * trigger as rejected and the rest of the batch counts as delivered (REFUSING_REASON_CODES); other refusals fail the
 * batch.
 *
 * Per-device order: one downstream never has two batches with triggers of one device in flight, and one connection
 * publishes a batch in order.
 *
 * Throughput: a broker that leaves Nagle's algorithm on (Mosquitto's default, `set_tcp_nodelay false`) holds its
 * PUBACKs back until the router's side acknowledges the first of them at the TCP level, which a receiver with nothing
 * to send delays by up to 40 ms: one stall per batch (about 5,500 messages/s in batches of 256 on a local Mosquitto).
 * So while acknowledgements are outstanding, every chunk read from the broker is answered at once with a PINGREQ (two
 * bytes, which carry the TCP acknowledgement): about 55,000 messages/s there.
 */
import mqtt, { type MqttClient } from 'mqtt';
import { closeWithin, type Sink, type SinkResult } from './sink.js';
import { SubjectTemplate } from './subject-template.js';
import { triggerJson } from './format.js';
import type { TriggerBatch } from './trigger-batch.js';
import { checkNumber } from '../validate.js';

/** Options of MqttSink. */
export interface MqttSinkOptions {
  /** Broker URL: `mqtt://host:1883` or `mqtts://host:8883`. */
  url: string;
  /** Topic template (see subject-template.ts), e.g. `geofence/{type}/{fenceId}`. */
  topic: string;
  /** MQTT protocol version: 5, or 4 for 3.1.1. */
  protocolVersion: 4 | 5;
  /** Client id of the persistent session. */
  clientId: string;
  /** How long the broker keeps the session while the router is away, s (MQTT 5). */
  sessionExpirySeconds: number;
  /** How long a batch waits for every PUBACK, ms. */
  ackTimeoutMs: number;
  /** User name and password for a broker that requires them; null: none. */
  username: string | null;
  /** Password (with username). */
  password: string | null;
}

/** Defaults of MqttSink (url and clientId have none). */
export const MQTT_SINK_DEFAULTS: Readonly<Omit<MqttSinkOptions, 'url' | 'clientId'>> = {
  topic: 'geofence/{type}/{fenceId}',
  protocolVersion: 5,
  sessionExpirySeconds: 3600,
  ackTimeoutMs: 10_000,
  username: null,
  password: null,
};

/**
 * PUBACK reason codes (MQTT 5) that refuse one message for good, whatever the moment: not authorized (135: the
 * broker's access rules deny the topic), topic name invalid (144), packet too large (149), payload format invalid
 * (153). The message is dead-lettered as rejected and the rest of its batch counts as delivered. Any other refusal
 * (server busy, quota exceeded, rate too high, unspecified) fails the batch, which is sent again.
 */
const REFUSING_REASON_CODES: ReadonlySet<number> = new Set([135, 144, 149, 153]);

/** An MQTT PINGREQ packet. */
const PINGREQ = Buffer.from([0xc0, 0x00]);

/** Publishes triggers to an MQTT broker (see the module comment). */
export class MqttSink implements Sink {
  private readonly options: MqttSinkOptions;
  private readonly template: SubjectTemplate;
  private client: MqttClient | null = null;
  /** PUBACKs the sink waits for. */
  private outstanding = 0;
  /** How each batch waiting for its PUBACKs is finished (with a failure, when the connection is lost). */
  private readonly waiting = new Set<(r: SinkResult) => void>();

  /** Validates the options (errors name them); connects at once (and again at the next delivery after a loss). */
  constructor(options: Partial<MqttSinkOptions> & { url: string; clientId: string }) {
    const o: MqttSinkOptions = { ...MQTT_SINK_DEFAULTS, ...options };
    if (!/^mqtts?:\/\/[^\s/]+\/?$/.test(o.url))
      throw new RangeError(`options.url must be an mqtt:// or mqtts:// URL, got ${JSON.stringify(o.url)}`);
    this.template = new SubjectTemplate('options.topic', o.topic);
    if (o.protocolVersion !== 4 && o.protocolVersion !== 5)
      throw new RangeError(`options.protocolVersion must be 4 (3.1.1) or 5, got ${String(o.protocolVersion)}`);
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(o.clientId))
      throw new RangeError(`options.clientId must be 1-64 letters, digits, - or _, got ${JSON.stringify(o.clientId)}`);
    checkNumber('options.sessionExpirySeconds', o.sessionExpirySeconds, 0, 4_294_967_295, true);
    checkNumber('options.ackTimeoutMs', o.ackTimeoutMs, 1, 3_600_000);
    this.options = o;
    this.connected();
  }

  /** Publishes every trigger of the batch at QoS 1 and waits for every PUBACK; never rejects. */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    const client = this.connected();
    if (!client.connected && !(await connectedWithin(client, this.options.ackTimeoutMs)))
      return { status: 0, error: 'refused' };
    // Lost while it came up, or ended meanwhile: a fresh client next time.
    if (this.client !== client || !client.connected) return { status: 0, error: 'refused' };
    let pending = batch.count;
    let failed = false;
    /** Indexes of messages the broker refused for good (REFUSING_REASON_CODES), in the order their PUBACKs came. */
    const refused: number[] = [];
    this.outstanding += batch.count;
    return new Promise<SinkResult>((resolve) => {
      let settled = false;
      const finish = (r: SinkResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.waiting.delete(finish);
        this.outstanding -= pending;
        // Refusals heard before a failure stand: those triggers are settled, the rest are sent again.
        resolve(refused.length === 0 ? r : { ...r, refused: refused.sort((a, b) => a - b) });
      };
      this.waiting.add(finish);
      // Past the timeout the connection is given up too: a link that heals later must not deliver what the router
      // now counts as failed (and may dead-letter, or leave to another router) from the client's store or socket.
      const timer = setTimeout(() => {
        finish({ status: 0, error: 'timeout' });
        this.discard(client);
      }, this.options.ackTimeoutMs);
      const acked = (index: number, err?: Error): void => {
        if (settled) return;
        if (err !== undefined && err !== null) {
          if (REFUSING_REASON_CODES.has((err as Error & { code?: number }).code ?? -1)) refused.push(index);
          else failed = true;
        }
        this.outstanding--;
        if (--pending > 0) return;
        finish(failed ? { status: 0, error: 'network' } : { status: 200 });
      };
      for (let i = 0; i < batch.count; i++)
        client.publish(this.template.render(batch, i), triggerJson(batch, i), { qos: 1, retain: false }, (err) =>
          acked(i, err),
        );
    });
  }

  /**
   * The connection of `client` is lost (or never came up): every batch still waiting fails now, and the client is
   * ended with its unacknowledged and unwritten messages, so it re-sends none of them (see the module comment).
   */
  private discard(client: MqttClient): void {
    if (this.client !== client) return;
    this.client = null;
    client.end(true);
    for (const finish of [...this.waiting]) finish({ status: 0, error: 'network' });
  }

  /** Ends the session's connection (the broker keeps the session for `sessionExpirySeconds`). */
  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c !== null)
      await closeWithin(
        () => c.endAsync(false),
        () => c.endAsync(true),
      );
  }

  private connected(): MqttClient {
    if (this.client !== null) return this.client;
    const o = this.options;
    this.client = mqtt.connect(o.url, {
      clientId: o.clientId,
      protocolVersion: o.protocolVersion,
      clean: false,
      // No reconnect by the client: the next delivery connects afresh (see discard).
      reconnectPeriod: 0,
      connectTimeout: 5_000,
      ...(o.protocolVersion === 5 ? { properties: { sessionExpiryInterval: o.sessionExpirySeconds } } : {}),
      ...(o.username === null ? {} : { username: o.username }),
      ...(o.password === null ? {} : { password: o.password }),
    });
    // Why a no-op listener: a connection error must not become an uncaught 'error' event; 'close' follows.
    this.client.on('error', () => undefined);
    const client = this.client;
    client.on('close', () => this.discard(client));
    const nudged = new WeakSet<object>();
    // Each connection gets a new stream: answer its reads while PUBACKs are outstanding (see the module comment).
    client.on('connect', () => {
      const stream = client.stream;
      if (nudged.has(stream)) return;
      nudged.add(stream);
      stream.on('data', () => {
        if (this.outstanding > 0 && stream.writable) stream.write(PINGREQ);
      });
    });
    return client;
  }
}

/** Resolves true once `client` is connected, false when its connection attempt ends first or `ms` pass. */
function connectedWithin(client: MqttClient, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (up: boolean): void => {
      clearTimeout(timer);
      client.off('connect', onConnect);
      client.off('close', onClose);
      resolve(up);
    };
    const onConnect = (): void => done(true);
    const onClose = (): void => done(false);
    const timer = setTimeout(() => done(false), ms);
    client.on('connect', onConnect);
    client.on('close', onClose);
  });
}
