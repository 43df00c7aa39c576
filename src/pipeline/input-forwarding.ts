/**
 * Connection bytes forwarded from ingest thread 0 to another ingest thread: thread 0 accepts every TCP connection
 * (a worker thread cannot hand a socket to another one) and spreads them over the ingest threads; the bytes of a
 * connection spread to thread k go through k's INPUT ring (INP_* records in src/shm/layout.ts), in order, and k
 * decodes, registers, classifies and admits them into its own telemetry rings. Thread 0's cost per forwarded byte is
 * one copy; everything per ping is k's. When k falls behind and its ring is full, thread 0 does not wait: the bytes
 * wait in order (a copy), the connections spread to k are paused until they are in, and new connections go to the
 * other threads.
 */
import {
  INP_CONN_BUFFERED_F64,
  INP_CONN_HELD_F64,
  INP_CONN_I32,
  INP_CONN_STRIDE_F64,
  INP_KIND_I32,
  INP_LENGTH_I32,
  INP_PAYLOAD_BYTE,
  INP_PAYLOAD_MAX_BYTES,
  InputRecordKind,
  ICTL_PEER_DEAD_I32,
  RING_HEADER_BYTES,
  RingKind,
} from '../shm/layout.js';
import { SpscRing } from '../shm/ring.js';
import type { IngestStream } from '../ingest/ingest-edge.js';

/** Longest one wait for room in a full INPUT ring, ms (the wait repeats until there is room). */
const ROOM_WAIT_MS = 50;
/** Records one write puts into the ring at most (a longer payload is cut): a piece always fits a ring that has room. */
const PIECE_RECORDS = 64;

/** A record that found the ring full, kept until there is room (its payload a copy). */
interface WaitingRecord {
  kind: number;
  conn: number;
  payload: Uint8Array | null;
}

/** Ingest thread 0's end of one INPUT ring (the producer). */
export class InputForwarder {
  private readonly ring: SpscRing;
  private readonly bytes: Uint8Array;
  /** The INP_CONN_* cells of the forwarded connections (the receiving thread writes them). */
  private readonly cells: Float64Array;
  /** Connection numbers not in use (a stack): a number indexes the connection's cells. */
  private readonly freeConns: Int32Array;
  private freeTop: number;
  /** False once the receiving thread has died: nothing is written (or waited for) any more. */
  private alive = true;
  /** Records that found the ring full, in order; while any waits, every later record waits behind it. */
  private readonly waiting: WaitingRecord[] = [];
  /** Bytes of the payloads waiting. */
  private waitingBytes = 0;
  /** Called once the records waiting have all gone into the ring. */
  private handedOn: (() => void)[] = [];
  /** True while an asynchronous wait for room is under way. */
  private draining = false;

  /** Ingest control cells (ICTL_*) and this ring's thread's dead flag among them. */
  private readonly control: Int32Array;
  private readonly deadCell: number;

  /**
   * Wraps ingest thread k's INPUT ring and connection cells (memory.inputRings / inputConnections [k - 1]) with the
   * ingest control cells (memory.ingestControl), where thread k says it died.
   */
  constructor(buffer: SharedArrayBuffer, connections: SharedArrayBuffer, ingestControl: SharedArrayBuffer, k: number) {
    this.control = new Int32Array(ingestControl);
    this.deadCell = ICTL_PEER_DEAD_I32 + k - 1;
    this.ring = SpscRing.wrap(buffer, RingKind.INPUT);
    this.bytes = new Uint8Array(buffer, RING_HEADER_BYTES);
    this.cells = new Float64Array(connections);
    const n = this.cells.length / INP_CONN_STRIDE_F64;
    this.freeConns = Int32Array.from({ length: n }, (_, i) => n - 1 - i);
    this.freeTop = n;
  }

  /**
   * The receiving thread died (its worker exited): nothing more is forwarded, and a write waiting for room returns.
   * Ingest thread 0 fails the router then, as it would for its own death.
   */
  dead(): void {
    this.alive = false;
    this.waiting.length = 0;
    this.waitingBytes = 0;
    this.callHandedOn();
  }

  /** Records waiting for room in the ring (see `write`). */
  get waitingRecords(): number {
    return this.waiting.length;
  }

  /** Payload bytes waiting for room in the ring. */
  get bytesWaiting(): number {
    return this.waitingBytes;
  }

  /** Calls `resume` once every record written so far is in the ring (at once when none waits). */
  whenHandedOn(resume: () => void): void {
    if (this.waiting.length === 0) resume();
    else this.handedOn.push(resume);
  }

  /** Resolves once every record written so far is in the ring (the drain waits for it before stopping thread k). */
  handedOnAll(): Promise<void> {
    return new Promise((resolve) => this.whenHandedOn(resolve));
  }

  /** Opens a forwarded connection named `name` from `address`; its bytes go through the returned stream. */
  open(name: string, address = ''): IngestStream {
    // The listener allows no more connections than there are cells, so a number is always free.
    if (this.freeTop === 0) throw new RangeError('more forwarded connections than the listener allows');
    const conn = this.freeConns[--this.freeTop]!;
    this.cells[conn * INP_CONN_STRIDE_F64 + INP_CONN_BUFFERED_F64] = 0;
    this.cells[conn * INP_CONN_STRIDE_F64 + INP_CONN_HELD_F64] = 0;
    // The payload: the address, a newline, the name.
    const payload = Buffer.from(`${address}\n${name}`, 'utf8').subarray(0, INP_PAYLOAD_MAX_BYTES);
    this.write(InputRecordKind.OPEN, conn, payload);
    return new ForwardedStream(this, conn, name);
  }

  /** What the receiving thread last said `conn` holds back: [0] bufferedBytes, [1] heldBytes. */
  held(conn: number, cell: 0 | 1): number {
    return this.cells[conn * INP_CONN_STRIDE_F64 + cell]!;
  }

  /** `conn` ended: its END record is in the ring, so its number may be given to the next connection. */
  private release(conn: number): void {
    this.freeConns[this.freeTop++] = conn;
  }

  /**
   * Writes one record (a payload longer than a record takes several, cut in pieces of PIECE_RECORDS records) and
   * publishes. Returns false when the ring had no room for it: the record is kept (a copy) and goes in, in order, as
   * the other thread makes room; records written meanwhile wait behind it. This thread never waits: its own
   * connections and the ones spread to other threads go on; the source stops reading the connection whose bytes wait
   * (see ForwardedStream.holdsBack) until `whenHandedOn` calls back, so what waits is bounded by a chunk per connection.
   */
  write(kind: number, conn: number, payload: Uint8Array | null): boolean {
    if (!this.alive) return true;
    const length = payload === null ? 0 : payload.length;
    const pieceBytes = PIECE_RECORDS * INP_PAYLOAD_MAX_BYTES;
    if (length > pieceBytes) {
      let all = true;
      for (let at = 0; at < length; at += pieceBytes) {
        all = this.write(kind, conn, payload!.subarray(at, Math.min(length, at + pieceBytes))) && all;
      }
      return all;
    }
    const needed = recordsFor(length);
    if (this.waiting.length === 0 && this.ring.freeSlots(needed) >= needed) {
      this.put(kind, conn, payload);
      return true;
    }
    this.waiting.push({ kind, conn, payload: payload === null ? null : new Uint8Array(payload) });
    this.waitingBytes += length;
    this.drainWhenRoom();
    return false;
  }

  /**
   * Writes the records of one payload (the ring has room for them) and publishes. An END record gives its connection
   * number back only now: a new connection given it cannot have its cells written by the old one's bytes still waiting.
   */
  private put(kind: number, conn: number, payload: Uint8Array | null): void {
    const ring = this.ring;
    const length = payload === null ? 0 : payload.length;
    let at = 0;
    do {
      const slot = ring.claim();
      const n = Math.min(INP_PAYLOAD_MAX_BYTES, length - at);
      const i = slot * ring.strideI32;
      ring.i32[i + INP_KIND_I32] = kind;
      ring.i32[i + INP_CONN_I32] = conn;
      ring.i32[i + INP_LENGTH_I32] = n;
      if (n > 0) this.bytes.set(payload!.subarray(at, at + n), slot * ring.strideBytes + INP_PAYLOAD_BYTE);
      at += n;
    } while (at < length);
    ring.publish();
    if (kind === InputRecordKind.END || kind === InputRecordKind.END_AT_STOP) this.release(conn);
  }

  /** Moves the waiting records into the ring as room appears, without blocking this thread. */
  private drainWhenRoom(): void {
    if (this.draining) return;
    this.draining = true;
    const pass = async (): Promise<void> => {
      while (this.alive && this.waiting.length > 0) {
        const head = this.waiting[0]!;
        const length = head.payload === null ? 0 : head.payload.length;
        const needed = recordsFor(length);
        if (this.ring.freeSlots(needed) >= needed) {
          this.waiting.shift();
          this.waitingBytes -= length;
          this.put(head.kind, head.conn, head.payload);
          continue;
        }
        await this.ring.waitForSpaceAsync(needed, ROOM_WAIT_MS);
        // The other thread says itself when it dies: its exit event may come later than this.
        if (Atomics.load(this.control, this.deadCell) !== 0) this.dead();
      }
    };
    void pass().finally(() => {
      this.draining = false;
      if (this.waiting.length === 0) this.callHandedOn();
      else this.drainWhenRoom();
    });
  }

  private callHandedOn(): void {
    const waiters = this.handedOn;
    this.handedOn = [];
    let failure: unknown = null;
    for (const resume of waiters) {
      try {
        resume();
      } catch (err) {
        // Every other waiter is still called (a socket left paused would never be read again).
        failure ??= err;
      }
    }
    if (failure !== null) throw failure;
  }

  /**
   * True while bytes written here have not all been read by the receiving thread (waiting for room, or unread in its
   * ring): what that thread last reported about its connections is behind.
   */
  get behind(): boolean {
    return this.waiting.length > 0 || this.ring.freeSlots(this.ring.capacitySlots) < this.ring.capacitySlots;
  }
}

/** INPUT records a payload of `length` bytes takes (one at least: OPEN and END records may be empty). */
function recordsFor(length: number): number {
  return Math.max(1, Math.ceil(length / INP_PAYLOAD_MAX_BYTES));
}

/** A connection whose bytes another ingest thread decodes (see InputForwarder). */
class ForwardedStream implements IngestStream {
  readonly name: string;
  private readonly forwarder: InputForwarder;
  private readonly conn: number;
  private ended = false;

  constructor(forwarder: InputForwarder, conn: number, name: string) {
    this.forwarder = forwarder;
    this.conn = conn;
    this.name = name;
  }

  /** As the other thread last said (after each chunk it decoded): a moment behind this thread's writes. */
  get bufferedBytes(): number {
    return this.ended ? 0 : this.forwarder.held(this.conn, INP_CONN_BUFFERED_F64);
  }

  get heldBytes(): number {
    return this.ended ? 0 : this.forwarder.held(this.conn, INP_CONN_HELD_F64);
  }

  write(chunk: Uint8Array): void {
    if (this.ended || chunk.length === 0) return;
    this.forwarder.write(InputRecordKind.DATA, this.conn, chunk);
  }

  /** True while bytes of the thread's connections wait for room in its ring (this one's, or written before them). */
  holdsBack(): boolean {
    return this.forwarder.waitingRecords > 0;
  }

  whenHandedOn(resume: () => void): void {
    this.forwarder.whenHandedOn(resume);
  }

  inTransit(): boolean {
    return !this.ended && this.forwarder.behind;
  }

  end(cutByStop = false): void {
    if (this.ended) return;
    this.ended = true;
    // The number goes back to the forwarder once the END record is in the ring (InputForwarder.put).
    this.forwarder.write(cutByStop ? InputRecordKind.END_AT_STOP : InputRecordKind.END, this.conn, null);
  }
}

/** What a forwarded-input reader hands its records to (the receiving ingest thread). */
export interface InputHandlers {
  /** A connection opened from `address` (empty when unknown). */
  open(conn: number, name: string, address: string): void;
  /** A connection's next bytes (a Buffer of its own: the reader copied them out of the ring). */
  data(conn: number, bytes: Buffer): void;
  /** A connection closed; `cutByStop`: the router closed it as it stopped. */
  end(conn: number, cutByStop: boolean): void;
}

/** The receiving ingest thread's end of its INPUT ring (the consumer). */
export class InputReader {
  /** The ring (waitForDataAsync parks the thread's event loop on it). */
  readonly ring: SpscRing;
  private readonly bytes: Uint8Array;

  /** Wraps this thread's INPUT ring. */
  constructor(buffer: SharedArrayBuffer) {
    this.ring = SpscRing.wrap(buffer, RingKind.INPUT);
    this.bytes = new Uint8Array(buffer, RING_HEADER_BYTES);
  }

  /**
   * Hands every available record to `h`, in order; a connection's consecutive DATA records are copied out as one
   * chunk (up to `maxChunkBytes`). Returns the records read.
   */
  drain(h: InputHandlers, maxChunkBytes: number): number {
    const ring = this.ring;
    const available = ring.available();
    let k = 0;
    while (k < available) {
      const i = ring.readSlot(k) * ring.strideI32;
      const kind = ring.i32[i + INP_KIND_I32]!;
      const conn = ring.i32[i + INP_CONN_I32]!;
      if (kind === InputRecordKind.DATA) {
        // The run of this connection's DATA records that follows, as one chunk.
        let total = 0;
        let n = 0;
        while (k + n < available && total < maxChunkBytes) {
          const j = ring.readSlot(k + n) * ring.strideI32;
          if (ring.i32[j + INP_KIND_I32] !== InputRecordKind.DATA || ring.i32[j + INP_CONN_I32] !== conn) break;
          total += ring.i32[j + INP_LENGTH_I32]!;
          n++;
        }
        const chunk = Buffer.allocUnsafe(total);
        let at = 0;
        for (let r = 0; r < n; r++) {
          const slot = ring.readSlot(k + r);
          const len = ring.i32[slot * ring.strideI32 + INP_LENGTH_I32]!;
          const from = slot * ring.strideBytes + INP_PAYLOAD_BYTE;
          chunk.set(this.bytes.subarray(from, from + len), at);
          at += len;
        }
        k += n;
        h.data(conn, chunk);
      } else {
        const len = ring.i32[i + INP_LENGTH_I32]!;
        const from = ring.readSlot(k) * ring.strideBytes + INP_PAYLOAD_BYTE;
        k++;
        if (kind === InputRecordKind.OPEN) {
          const text = Buffer.from(this.bytes.subarray(from, from + len)).toString('utf8');
          const nl = text.indexOf('\n');
          h.open(conn, text.slice(nl + 1), nl < 0 ? '' : text.slice(0, nl));
        } else h.end(conn, kind === InputRecordKind.END_AT_STOP);
      }
    }
    ring.release(available);
    return available;
  }
}
