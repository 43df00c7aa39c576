/**
 * The pipeline region (control cells and ingest counters, see the "Pipeline control and counters" section of
 * src/shm/layout.ts): allocation (main thread) and wrapping (any thread).
 */
import {
  CTL_DISPATCH_DOORBELL_I32,
  CTL_DISPATCH_SLEEPING_I32,
  CTL_DRAINING_I32,
  CTL_FENCE_GENERATION_I32,
  CTL_INGEST_PORT_I32,
  CTL_INGEST_STATE_I32,
  LAYOUT_VERSION,
  PIPE_MAGIC,
  PIPE_MAGIC_I32,
  PIPE_REGION_BYTES,
  PIPE_SHARDS_I32,
  PIPE_VERSION_I32,
  type IngestState,
} from './layout.js';

/** Allocates the pipeline region for a router with `shards` shards. */
export function allocatePipelineRegion(shards: number): SharedArrayBuffer {
  if (!Number.isInteger(shards) || shards < 1 || shards > 0xffff) {
    throw new RangeError(`shards must be an integer in [1, 65535], got ${String(shards)}`);
  }
  const sab = new SharedArrayBuffer(PIPE_REGION_BYTES);
  const i32 = new Int32Array(sab);
  i32[PIPE_MAGIC_I32] = PIPE_MAGIC;
  i32[PIPE_VERSION_I32] = LAYOUT_VERSION;
  i32[PIPE_SHARDS_I32] = shards;
  return sab;
}

/**
 * Views of the pipeline region. Counter cells (`f64`, indices ING_* from layout.ts) are written by the ingest
 * thread only and read by anyone; control cells go through the methods (atomic).
 */
export class PipelineRegion {
  /** The shared region. */
  readonly buffer: SharedArrayBuffer;
  /** Int32 view over the whole region (control cells). */
  readonly i32: Int32Array;
  /** Float64 view over the whole region (counter cells, ING_* indices). */
  readonly f64: Float64Array;
  /** Shards the region was allocated for. */
  readonly shards: number;

  private constructor(buffer: SharedArrayBuffer) {
    if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength !== PIPE_REGION_BYTES) {
      throw new RangeError(`pipeline region must be a SharedArrayBuffer of ${PIPE_REGION_BYTES} bytes`);
    }
    this.buffer = buffer;
    this.i32 = new Int32Array(buffer);
    this.f64 = new Float64Array(buffer);
    if (this.i32[PIPE_MAGIC_I32] !== PIPE_MAGIC) throw new RangeError('not a pipeline region (bad magic)');
    if (this.i32[PIPE_VERSION_I32] !== LAYOUT_VERSION) throw new RangeError('pipeline region layout version mismatch');
    this.shards = this.i32[PIPE_SHARDS_I32]!;
  }

  /** Wraps an allocated pipeline region (any thread). */
  static wrap(buffer: SharedArrayBuffer): PipelineRegion {
    return new PipelineRegion(buffer);
  }

  /** Current fence generation. */
  fenceGeneration(): number {
    return Atomics.load(this.i32, CTL_FENCE_GENERATION_I32);
  }

  /** Publishes a new fence generation (main thread, after the new store is fully built). */
  setFenceGeneration(generation: number): void {
    Atomics.store(this.i32, CTL_FENCE_GENERATION_I32, generation);
  }

  /** Whether the router is draining. */
  isDraining(): boolean {
    return Atomics.load(this.i32, CTL_DRAINING_I32) !== 0;
  }

  /** Marks the router as draining (main thread). */
  setDraining(draining: boolean): void {
    Atomics.store(this.i32, CTL_DRAINING_I32, draining ? 1 : 0);
  }

  /** Ingest thread state. */
  ingestState(): IngestState {
    return Atomics.load(this.i32, CTL_INGEST_STATE_I32) as IngestState;
  }

  /** Publishes the ingest thread state (ingest thread). */
  setIngestState(state: IngestState): void {
    Atomics.store(this.i32, CTL_INGEST_STATE_I32, state);
  }

  /** Bound ingest TCP port (0 until bound). */
  ingestPort(): number {
    return Atomics.load(this.i32, CTL_INGEST_PORT_I32);
  }

  /** Publishes the bound ingest TCP port (ingest thread). */
  setIngestPort(port: number): void {
    Atomics.store(this.i32, CTL_INGEST_PORT_I32, port);
  }

  /**
   * Rings the dispatcher's doorbell (trigger producers, after publishing). The add is the store the dispatcher's
   * wait compares against; the notify happens only when the dispatcher said it sleeps.
   */
  ringDispatcher(): void {
    Atomics.add(this.i32, CTL_DISPATCH_DOORBELL_I32, 1);
    if (Atomics.load(this.i32, CTL_DISPATCH_SLEEPING_I32) !== 0) Atomics.notify(this.i32, CTL_DISPATCH_DOORBELL_I32);
  }

  /**
   * Dispatcher side: parks until the doorbell rings after `observed` (a value read with `doorbell()` before the
   * dispatcher last found nothing to do) or `timeoutMs` passes.
   */
  waitForDoorbell(observed: number, timeoutMs: number): void {
    Atomics.store(this.i32, CTL_DISPATCH_SLEEPING_I32, 1);
    Atomics.wait(this.i32, CTL_DISPATCH_DOORBELL_I32, observed, timeoutMs);
    Atomics.store(this.i32, CTL_DISPATCH_SLEEPING_I32, 0);
  }

  /** Current doorbell value. */
  doorbell(): number {
    return Atomics.load(this.i32, CTL_DISPATCH_DOORBELL_I32);
  }
}
