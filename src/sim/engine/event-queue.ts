/**
 * The simulator's pending events: a binary min-heap ordered by time, then by insertion order, so two events due at
 * the same instant always run in the order they were scheduled and a run is reproducible to the event.
 *
 * An event is four numbers in parallel typed arrays (time ns, insertion sequence, target, kind) plus one numeric
 * argument: no object per event. The arrays double when full; nothing else allocates.
 */

/** Initial heap capacity (events); it doubles as needed. */
const INITIAL_CAPACITY = 1024;

/** A min-heap of events keyed by (timeNs, insertion sequence). */
export class EventQueue {
  private timeNs = new Float64Array(INITIAL_CAPACITY);
  private seq = new Float64Array(INITIAL_CAPACITY);
  private target = new Int32Array(INITIAL_CAPACITY);
  private kind = new Int32Array(INITIAL_CAPACITY);
  private arg = new Float64Array(INITIAL_CAPACITY);
  private count = 0;
  private nextSeq = 0;
  /** The event taken by the last `pop()`: [timeNs, arg]. */
  readonly popped = new Float64Array(2);
  /** Target of the event taken by the last `pop()`. */
  poppedTarget = 0;
  /** Kind of the event taken by the last `pop()`. */
  poppedKind = 0;

  /** Events pending. */
  get size(): number {
    return this.count;
  }

  /** Time of the earliest pending event, ns (Infinity when none). */
  peekTimeNs(): number {
    return this.count === 0 ? Infinity : this.timeNs[0]!;
  }

  /** Adds an event for `target` of `kind` with `arg`, due at `timeNs`. */
  push(timeNs: number, target: number, kind: number, arg: number): void {
    if (this.count === this.timeNs.length) this.grow();
    let i = this.count++;
    const s = this.nextSeq++;
    // Sift up: move parents down until the new event's place is found, then write it once.
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pt = this.timeNs[p]!;
      if (pt < timeNs || (pt === timeNs && this.seq[p]! < s)) break;
      this.move(p, i);
      i = p;
    }
    this.timeNs[i] = timeNs;
    this.seq[i] = s;
    this.target[i] = target;
    this.kind[i] = kind;
    this.arg[i] = arg;
  }

  /** Removes the earliest event into `popped`, `poppedTarget`, `poppedKind`; false when the queue is empty. */
  pop(): boolean {
    if (this.count === 0) return false;
    this.popped[0] = this.timeNs[0]!;
    this.popped[1] = this.arg[0]!;
    this.poppedTarget = this.target[0]!;
    this.poppedKind = this.kind[0]!;
    const last = --this.count;
    if (last === 0) return true;
    const t = this.timeNs[last]!;
    const s = this.seq[last]!;
    const tg = this.target[last]!;
    const k = this.kind[last]!;
    const a = this.arg[last]!;
    let i = 0;
    // Sift down the last event from the root: the smaller child moves up until the event fits.
    for (;;) {
      let c = 2 * i + 1;
      if (c >= last) break;
      const r = c + 1;
      if (r < last && this.before(r, c)) c = r;
      const ct = this.timeNs[c]!;
      if (t < ct || (t === ct && s < this.seq[c]!)) break;
      this.move(c, i);
      i = c;
    }
    this.timeNs[i] = t;
    this.seq[i] = s;
    this.target[i] = tg;
    this.kind[i] = k;
    this.arg[i] = a;
    return true;
  }

  private before(a: number, b: number): boolean {
    const ta = this.timeNs[a]!;
    const tb = this.timeNs[b]!;
    return ta < tb || (ta === tb && this.seq[a]! < this.seq[b]!);
  }

  private move(from: number, to: number): void {
    this.timeNs[to] = this.timeNs[from]!;
    this.seq[to] = this.seq[from]!;
    this.target[to] = this.target[from]!;
    this.kind[to] = this.kind[from]!;
    this.arg[to] = this.arg[from]!;
  }

  private grow(): void {
    const n = this.timeNs.length * 2;
    const t = new Float64Array(n);
    t.set(this.timeNs);
    this.timeNs = t;
    const s = new Float64Array(n);
    s.set(this.seq);
    this.seq = s;
    const tg = new Int32Array(n);
    tg.set(this.target);
    this.target = tg;
    const k = new Int32Array(n);
    k.set(this.kind);
    this.kind = k;
    const a = new Float64Array(n);
    a.set(this.arg);
    this.arg = a;
  }
}
