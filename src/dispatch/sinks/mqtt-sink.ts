/**
 * MQTT sink (MQTT 5 or 3.1.1): each trigger is one QoS 1 message (the trigger's JSON object, as a webhook receives it
 * in its array), retain off, on the topic its template names. A batch is delivered when the broker has acknowledged
 * every message (PUBACK); a batch the broker stops answering for `ackTimeoutMs` fails and is re-sent by the router.
 * QoS 1 is at-least-once: a subscriber can see a trigger twice after such a failure and keeps the first (deviceId,
 * seq), as with any re-delivery.
 *
 * The router is the only one that re-sends: when the connection is lost, or a batch gets no PUBACK for
 * `ackTimeoutMs`, every batch waiting for acknowledgements fails at once and the client is ended with what it held
 * (its store of unacknowledged messages, its queue of messages not yet written); the next delivery connects afresh
 * (waiting up to `ackTimeoutMs`). A client left to reconnect by itself would re-send those messages behind the
 * router's back: triggers it has since dead-lettered, or, after a pause past the partition leases, triggers whose
 * partition another router delivers now (out of order beside that router's).
 *
 * Per-device order at every subscriber: one downstream never has two batches with triggers of one device in flight.
 * Over MQTT 5, within a batch a device's next message is published only once the broker has acknowledged the one
 * before (messages of different devices go out together): a broker may refuse one message for the moment and take the
 * next, and the refused one, sent again, must not arrive behind its device's later triggers. MQTT 3.1.1 has no such
 * refusal: a broker takes a connection's messages in order, a lost connection loses the last of them, and the batch is
 * published at once (what is sent again arrives in order behind the first copies, which subscribers keep).
 *
 * A PUBACK that refuses one message for good (MQTT 5: the broker's access rules deny its topic, say) dead-letters that
 * trigger as rejected, and its device goes on (REFUSING_REASON_CODES). Any other refusal, a lost connection or a
 * timeout fails the batch: the messages the broker acknowledged count as delivered (SinkResult.delivered), the rest
 * are sent again.
 *
 * Flow control: never more messages unacknowledged, over all batches, than the Receive Maximum of the broker's CONNACK
 * (a broker that enforces it disconnects a client that sends more, with reason 0x93). Mosquitto names its
 * `max_inflight_messages`, 20 by default: one round trip per 20 messages; raise it on a broker that should take more.
 *
 * Throughput: a broker that leaves Nagle's algorithm on (Mosquitto's default, `set_tcp_nodelay false`) holds its
 * PUBACKs back until the router's side acknowledges the first of them at the TCP level, which a receiver with nothing
 * to send delays by up to 40 ms: one stall per batch (about 5,500 messages/s in batches of 256 on a local Mosquitto).
 * So while acknowledgements are outstanding, every chunk read from the broker is answered at once with a PINGREQ (two
 * bytes, which carry the TCP acknowledgement): about 55,000 messages/s there. The broker's PINGRESP is answered too
 * (a ping-pong while PUBACKs are outstanding): left unanswered, it waits for the delayed acknowledgement and the
 * next PUBACKs behind it (P99 184-359 ms against 31-39 ms at 23,000 triggers/s, bench/RESULTS.md).
 */
import mqtt, { type MqttClient } from 'mqtt';
import { closeWithin, RESULT_OK, type Sink, type SinkResult } from './sink.js';
import { SubjectTemplate } from './subject-template.js';
import { triggerJson } from './format.js';
import { deviceChains, unsentOf } from './device-chains.js';
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
  /** How long a batch waits for its next PUBACK, ms: with none for so long, it fails. */
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
 * (153). The message is dead-lettered as rejected and its device goes on. Any other refusal (quota exceeded,
 * unspecified, implementation specific) is for the moment: the message and its device's later ones are sent again.
 */
const REFUSING_REASON_CODES: ReadonlySet<number> = new Set([135, 144, 149, 153]);

/** An MQTT PINGREQ packet. */
const PINGREQ = Buffer.from([0xc0, 0x00]);

/** One batch being published: which of its messages may go next, and what the broker answered. */
class Publishing {
  readonly batch: TriggerBatch;
  /** For message i, the index of its device's next message in the batch; -1: none. */
  readonly next: Int32Array;
  /** Messages whose turn has come (the first of their device, or the one before acknowledged), in order from `head`. */
  readonly ready: number[];
  /** The next message of `ready` to publish. */
  head = 0;
  /** Published, PUBACK not heard yet. */
  unacked = 0;
  /** Messages neither acknowledged nor refused yet. */
  unsettled: number;
  /** Indexes of messages the broker acknowledged, in the order their PUBACKs came. */
  readonly delivered: number[] = [];
  /** Indexes of messages the broker refused for good (REFUSING_REASON_CODES), in the order their PUBACKs came. */
  readonly refused: number[] = [];
  /** Indexes of messages the broker refused for the moment (any other PUBACK reason code). */
  readonly again: number[] = [];
  /** When a message of the batch was last published or answered, ms (Date.now). */
  progressAtMs = Date.now();
  /** The batch's deadline (see MqttSink.arm). */
  timer: NodeJS.Timeout | undefined = undefined;
  /** The batch's result is given. */
  settled = false;
  /** Gives the batch's result. */
  done: (r: SinkResult) => void = () => undefined;

  /** Lines the batch's messages up: `byDevice`, by device (see deviceChains); else all at once. */
  constructor(batch: TriggerBatch, byDevice: boolean) {
    this.batch = batch;
    this.unsettled = batch.count;
    if (byDevice) {
      const chains = deviceChains(batch);
      this.next = chains.next;
      this.ready = chains.firsts;
    } else {
      this.next = new Int32Array(batch.count).fill(-1);
      this.ready = Array.from({ length: batch.count }, (_, i) => i);
    }
  }
}

/** Numeric order, for index lists. */
const ascending = (a: number, b: number): number => a - b;

/**
 * Unacknowledged messages at most where the broker names no Receive Maximum (MQTT 5 without the property, and 3.1.1,
 * which has no flow control): the packet identifiers a session can hold.
 */
const PACKET_IDS = 65_535;

/** Publishes triggers to an MQTT broker (see the module comment). */
export class MqttSink implements Sink {
  private readonly options: MqttSinkOptions;
  private readonly template: SubjectTemplate;
  private client: MqttClient | null = null;
  /** Messages published on the present connection whose PUBACK the sink waits for. */
  private inflight = 0;
  /** How many may be (the Receive Maximum of the broker's CONNACK; PACKET_IDS where it names none). */
  private window = PACKET_IDS;
  /** Batches waiting for PUBACKs or for room to publish, oldest first. */
  private readonly publishing: Publishing[] = [];
  /** `pump` is running (a PUBACK answered within it is picked up before it returns). */
  private pumping = false;
  /** A message became ready while `pump` ran. */
  private readyAgain = false;
  /** When the broker last answered a message on the present connection, ms (Date.now). */
  private answeredAtMs = 0;

  /** Validates the options (errors name them); connects at once (and again at the next delivery after a loss). */
  constructor(options: Partial<MqttSinkOptions> & { url: string; clientId: string }) {
    const o: MqttSinkOptions = { ...MQTT_SINK_DEFAULTS, ...options };
    if (!/^mqtts?:\/\/[^\s/]+\/?$/.test(o.url))
      throw new RangeError(`options.url must be an mqtt:// or mqtts:// URL, got ${JSON.stringify(o.url)}`);
    this.template = new SubjectTemplate('options.topic', o.topic, 'mqtt');
    if (o.protocolVersion !== 4 && o.protocolVersion !== 5)
      throw new RangeError(`options.protocolVersion must be 4 (3.1.1) or 5, got ${String(o.protocolVersion)}`);
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(o.clientId))
      throw new RangeError(`options.clientId must be 1-64 letters, digits, - or _, got ${JSON.stringify(o.clientId)}`);
    checkNumber('options.sessionExpirySeconds', o.sessionExpirySeconds, 0, 4_294_967_295, true);
    checkNumber('options.ackTimeoutMs', o.ackTimeoutMs, 1, 3_600_000);
    this.options = o;
    this.connected();
  }

  /**
   * Publishes every trigger of the batch at QoS 1, a device's next one once the one before is acknowledged, within
   * the broker's Receive Maximum, and waits for every PUBACK; never rejects.
   */
  async deliver(batch: TriggerBatch): Promise<SinkResult> {
    if (batch.count === 0) return RESULT_OK;
    const client = this.connected();
    if (!client.connected && !(await connectedWithin(client, this.options.ackTimeoutMs)))
      return { status: 0, error: 'refused' };
    // Lost while it came up, or ended meanwhile: a fresh client next time.
    if (this.client !== client || !client.connected) return { status: 0, error: 'refused' };
    const p = new Publishing(batch, this.options.protocolVersion === 5);
    return new Promise<SinkResult>((resolve) => {
      p.done = (r) => {
        clearTimeout(p.timer);
        resolve(r);
      };
      this.publishing.push(p);
      this.arm(p, client, this.options.ackTimeoutMs);
      this.pump();
    });
  }

  /**
   * The batch's deadline: it fails once nothing of it has been published or answered for `ackTimeoutMs` (a device's
   * messages go one after another, so a long batch takes many round trips), counting, while it waits for room in the
   * window, the broker's answers to other batches as its progress. Past the deadline the connection is given up too:
   * a link that heals later must not deliver what the router now counts as failed (and may dead-letter, or leave to
   * another router) from the client's store or socket.
   */
  private arm(p: Publishing, client: MqttClient, delayMs: number): void {
    p.timer = setTimeout(() => {
      if (p.settled) return;
      const waitingForRoom = p.head < p.ready.length;
      const lastMs = Math.max(p.progressAtMs, waitingForRoom ? this.answeredAtMs : 0);
      const leftMs = lastMs + this.options.ackTimeoutMs - Date.now();
      if (leftMs > 0) return this.arm(p, client, leftMs);
      this.finish(p, { status: 0, error: 'timeout' });
      this.discard(client);
    }, delayMs);
  }

  /**
   * Publishes ready messages, oldest batch first, while the broker's Receive Maximum leaves room (see `acked` for what
   * becomes ready).
   */
  private pump(): void {
    const client = this.client;
    if (this.pumping || client === null) return;
    this.pumping = true;
    this.readyAgain = false;
    try {
      let k = 0;
      while (this.inflight < this.window && this.client === client) {
        if (k >= this.publishing.length) {
          if (!this.readyAgain) break;
          this.readyAgain = false;
          k = 0;
          continue;
        }
        const p = this.publishing[k]!;
        if (p.head === p.ready.length) {
          k++;
          continue;
        }
        const i = p.ready[p.head++]!;
        p.progressAtMs = Date.now();
        p.unacked++;
        this.inflight++;
        client.publish(this.template.render(p.batch, i), triggerJson(p.batch, i), { qos: 1, retain: false }, (err) =>
          this.acked(p, i, err),
        );
      }
    } finally {
      this.pumping = false;
    }
  }

  /** The broker answered message `i` of `p` (`err`: a PUBACK reason code of refusal, or the client's failure). */
  private acked(p: Publishing, i: number, err: Error | undefined | null): void {
    if (p.settled) return;
    p.unacked--;
    this.inflight--;
    p.progressAtMs = this.answeredAtMs = Date.now();
    const ok = err === undefined || err === null;
    const code = ok ? -1 : (err as Error & { code?: unknown }).code;
    if (ok || REFUSING_REASON_CODES.has(code as number)) {
      (ok ? p.delivered : p.refused).push(i);
      p.unsettled--;
      // Settled either way: the device's next message may go.
      const n = p.next[i]!;
      if (n >= 0) {
        p.ready.push(n);
        this.readyAgain = true;
      }
    }
    // Else refused for the moment (a PUBACK reason code, 0x80 and up) or failed by the client: the device's later
    // messages are not published; they go again behind it, and the batch fails once the other devices' messages are
    // answered.
    else if (typeof code === 'number' && code >= 0x80) p.again.push(i);
    if (p.unsettled === 0) this.finish(p, RESULT_OK);
    // Every message published was answered: those refused for the moment are named (a batch that fails otherwise,
    // timed out or its connection lost, names none: the broker did not answer all of it).
    else if (p.unacked === 0 && p.head === p.ready.length)
      this.finish(
        p,
        p.again.length > 0
          ? { status: 0, error: 'network', again: p.again.sort(ascending) }
          : { status: 0, error: 'network' },
      );
    this.pump();
  }

  /**
   * Gives `p` its result: `base`, with the messages the broker took before a failure (`delivered`) and those it refused
   * for good (`refused`); its unanswered messages leave the window.
   */
  private finish(p: Publishing, base: SinkResult): void {
    if (p.settled) return;
    p.settled = true;
    this.inflight -= p.unacked;
    p.unacked = 0;
    const at = this.publishing.indexOf(p);
    if (at >= 0) this.publishing.splice(at, 1);
    let r = base;
    if (base.status !== 200 && p.delivered.length > 0) r = { ...r, delivered: p.delivered.sort(ascending) };
    if (p.refused.length > 0) r = { ...r, refused: p.refused.sort(ascending) };
    if (base.status !== 200 && p.head < p.batch.count) r = { ...r, unsent: unsentOf(p.batch.count, p.ready, p.head) };
    p.done(r);
  }

  /**
   * The connection of `client` is lost (or never came up): every batch still waiting fails now (keeping what the
   * broker took), and the client is ended with its unacknowledged and unwritten messages, so it re-sends none of them
   * (see the module comment).
   */
  private discard(client: MqttClient): void {
    if (this.client !== client) return;
    this.client = null;
    client.end(true);
    this.failWaiting();
  }

  /** Every batch still waiting fails now, keeping what the broker took; the window is empty. */
  private failWaiting(): void {
    for (const p of [...this.publishing]) this.finish(p, { status: 0, error: 'network' });
    this.inflight = 0;
  }

  /**
   * Ends the session's connection (the broker keeps the session for `sessionExpirySeconds`). Batches still waiting
   * fail now (keeping what the broker took): their devices' next messages will not be published any more.
   */
  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    this.failWaiting();
    if (c !== null)
      await closeWithin(
        () => c.endAsync(false),
        () => c.endAsync(true),
      );
  }

  private connected(): MqttClient {
    if (this.client !== null) return this.client;
    const o = this.options;
    this.inflight = 0;
    this.window = PACKET_IDS;
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
    client.on('connect', (connack) => {
      // The broker's Receive Maximum: how many QoS 1 messages it takes unacknowledged (a broker that enforces it
      // disconnects a client that sends more, with reason 0x93).
      const most = connack.properties?.receiveMaximum;
      if (this.client === client)
        this.window = most !== undefined && most >= 1 ? Math.min(most, PACKET_IDS) : PACKET_IDS;
      // Each connection gets a new stream: answer its reads while PUBACKs are outstanding (see the module comment).
      const stream = client.stream;
      if (nudged.has(stream)) return;
      nudged.add(stream);
      stream.on('data', () => {
        if (this.inflight > 0 && stream.writable) stream.write(PINGREQ);
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
