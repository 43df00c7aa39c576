/**
 * Per-thread runtime reports: each router thread (main, ingest, dispatcher, every containment worker) writes its own
 * V8 heap figures, event-loop utilisation and delay, and collection counts into its block of the THREAD RUNTIME region
 * (RT_* in src/shm/layout.ts) once per interval; the main thread's /metrics reads every block. A memory figure of the
 * process (RSS) says that something grows; these say which thread's heap, and whether its live heap (what survives a
 * full collection) grows or only its young generation breathes.
 *
 * Reports run on the thread's own event loop (an unref'd interval), never on a hot path.
 */
import {
  constants,
  monitorEventLoopDelay,
  performance,
  PerformanceObserver,
  type EventLoopUtilization,
} from 'node:perf_hooks';
import { readFileSync, readlinkSync } from 'node:fs';
import { getHeapStatistics } from 'node:v8';
import { threadId } from 'node:worker_threads';
import {
  RT_EXTERNAL_BYTES_F64,
  RT_GC_NS_F64,
  RT_GCS_F64,
  RT_HEAP_LIVE_BYTES_F64,
  RT_HEAP_TOTAL_BYTES_F64,
  RT_HEAP_USED_BYTES_F64,
  RT_LOOP_DELAY_P99_NS_F64,
  RT_LOOP_UTILIZATION_F64,
  RT_MAJOR_GCS_F64,
  RT_OS_THREAD_ID_F64,
  RT_OWNER_I32,
  RT_REPORTED_AT_MS_F64,
  RT_STRIDE_F64,
  RT_THREAD_DISPATCHER,
  RT_THREAD_INGEST,
  RT_THREAD_MAIN,
  RT_POOL_SLOTS_F64,
  RT_THREAD_POOL_FIRST,
  rtIngestPeerBlock,
  threadRuntimePoolSlots,
  threadRuntimeRegionF64,
} from '../shm/layout.js';

/** Default report interval, ms. */
export const THREAD_RUNTIME_INTERVAL_MS = 1000;

/** A block whose owner has not reported for this many intervals is free for another pool worker. */
const STALE_INTERVALS = 5;

/**
 * Allocates the thread runtime region for a pool of `poolSize` workers and `ingestThreads` ingest threads (every
 * block free).
 */
export function allocateThreadRuntimeRegion(poolSize: number, ingestThreads = 1): SharedArrayBuffer {
  const region = new SharedArrayBuffer(threadRuntimeRegionF64(poolSize, ingestThreads) * 8);
  new Float64Array(region)[RT_THREAD_MAIN * RT_STRIDE_F64 + RT_POOL_SLOTS_F64] = threadRuntimePoolSlots(poolSize);
  return region;
}

/** Pool blocks of the region (the pool workers it was sized for, with room for their replacements). */
function poolSlotsOf(region: SharedArrayBuffer): number {
  return new Float64Array(region)[RT_THREAD_MAIN * RT_STRIDE_F64 + RT_POOL_SLOTS_F64]!;
}

/** The block ingest thread `k` (k >= 1) reports in. */
export function ingestPeerBlock(region: SharedArrayBuffer, k: number): number {
  return rtIngestPeerBlock(poolSlotsOf(region), k);
}

/**
 * Claims a pool block for the calling worker: the first free one, else the first whose owner stopped reporting
 * (a terminated worker), else -1 (reports are then skipped: more live workers than blocks cannot happen with
 * threadRuntimePoolSlots, which leaves room for one replacement per worker).
 */
export function claimPoolBlock(
  region: SharedArrayBuffer,
  nowMs: number,
  intervalMs: number = THREAD_RUNTIME_INTERVAL_MS,
): number {
  const i32 = new Int32Array(region);
  const f64 = new Float64Array(region);
  const me = threadId + 1;
  const slots = poolSlotsOf(region);
  for (let s = 0; s < slots; s++) {
    const block = RT_THREAD_POOL_FIRST + s;
    if (Atomics.compareExchange(i32, block * RT_STRIDE_F64 * 2 + RT_OWNER_I32, 0, me) === 0) return block;
  }
  for (let s = 0; s < slots; s++) {
    const block = RT_THREAD_POOL_FIRST + s;
    const cell = block * RT_STRIDE_F64 * 2 + RT_OWNER_I32;
    const owner = Atomics.load(i32, cell);
    if (nowMs - f64[block * RT_STRIDE_F64 + RT_REPORTED_AT_MS_F64]! > STALE_INTERVALS * intervalMs) {
      if (Atomics.compareExchange(i32, cell, owner, me) === owner) {
        f64.fill(0, block * RT_STRIDE_F64 + 1, (block + 1) * RT_STRIDE_F64);
        return block;
      }
    }
  }
  return -1;
}

/** The calling thread's operating-system thread id (Linux, from /proc/thread-self), or 0 where there is none. */
function osThreadId(): number {
  try {
    const tid = Number(/(\d+)$/.exec(readlinkSync('/proc/thread-self'))?.[1]);
    return Number.isInteger(tid) && tid > 0 ? tid : 0;
  } catch {
    return 0;
  }
}

/**
 * CPU time of thread `tid` of this process, and its time runnable but waiting for a core, seconds (Linux's
 * /proc/self/task/<tid>/schedstat, in ns); null where it cannot be read (another system, or the thread has ended).
 */
function threadCpuSeconds(tid: number): { onCpu: number; waiting: number } | null {
  if (tid === 0) return null;
  try {
    const [onCpu, waiting] = readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ');
    const on = Number(onCpu) / 1e9;
    const wait = Number(waiting) / 1e9;
    return Number.isFinite(on) && Number.isFinite(wait) ? { onCpu: on, waiting: wait } : null;
  } catch {
    return null;
  }
}

/** A running reporter. */
export interface ThreadRuntimeReporter {
  /** Writes a report now (also done every interval). */
  report(): void;
  /** Stops reporting and frees the block. */
  stop(): void;
}

/**
 * Starts reporting the calling thread's runtime figures into `block` of `region` every `intervalMs` (and once now).
 * The interval is unref'd: it never keeps a thread alive.
 */
export function startThreadRuntimeReporter(
  region: SharedArrayBuffer,
  block: number,
  intervalMs: number = THREAD_RUNTIME_INTERVAL_MS,
): ThreadRuntimeReporter {
  const f64 = new Float64Array(region);
  const i32 = new Int32Array(region);
  const base = block * RT_STRIDE_F64;
  Atomics.store(i32, base * 2 + RT_OWNER_I32, threadId + 1);
  f64[base + RT_OS_THREAD_ID_F64] = osThreadId();
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let lastLoop: EventLoopUtilization = performance.eventLoopUtilization();
  const gcs = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      f64[base + RT_GCS_F64]!++;
      f64[base + RT_GC_NS_F64]! += entry.duration * 1e6;
      const kind = (entry as unknown as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        f64[base + RT_MAJOR_GCS_F64]!++;
        f64[base + RT_HEAP_LIVE_BYTES_F64] = getHeapStatistics().used_heap_size;
      }
    }
  });
  gcs.observe({ entryTypes: ['gc'] });
  const report = (): void => {
    const heap = getHeapStatistics();
    f64[base + RT_HEAP_USED_BYTES_F64] = heap.used_heap_size;
    f64[base + RT_HEAP_TOTAL_BYTES_F64] = heap.total_heap_size;
    f64[base + RT_EXTERNAL_BYTES_F64] = heap.external_memory;
    // Before the first full collection, the heap in use is the best estimate of the live heap there is.
    if (f64[base + RT_MAJOR_GCS_F64] === 0) f64[base + RT_HEAP_LIVE_BYTES_F64] = heap.used_heap_size;
    const loop = performance.eventLoopUtilization();
    f64[base + RT_LOOP_UTILIZATION_F64] = performance.eventLoopUtilization(loop, lastLoop).utilization;
    lastLoop = loop;
    const p99 = delay.count > 0 ? delay.percentile(99) : 0;
    f64[base + RT_LOOP_DELAY_P99_NS_F64] = p99;
    delay.reset();
    f64[base + RT_REPORTED_AT_MS_F64] = Date.now();
  };
  report();
  const timer = setInterval(report, intervalMs);
  timer.unref();
  let stopped = false;
  return {
    report,
    stop(): void {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      gcs.disconnect();
      delay.disable();
      Atomics.compareExchange(i32, base * 2 + RT_OWNER_I32, threadId + 1, 0);
    },
  };
}

/** One thread's latest report, as /metrics reads it. */
export interface ThreadRuntimeReading {
  /** `main`, `ingest`, `dispatcher` or `containment-<n>`. */
  thread: string;
  /** Wall-clock time of the report, ms since the epoch. */
  reportedAtMs: number;
  /** RT_HEAP_USED_BYTES_F64. */
  heapUsedBytes: number;
  /** RT_HEAP_TOTAL_BYTES_F64. */
  heapTotalBytes: number;
  /** RT_HEAP_LIVE_BYTES_F64. */
  heapLiveBytes: number;
  /** RT_EXTERNAL_BYTES_F64. */
  externalBytes: number;
  /** RT_LOOP_UTILIZATION_F64. */
  loopUtilization: number;
  /** RT_LOOP_DELAY_P99_NS_F64. */
  loopDelayP99Ns: number;
  /** RT_MAJOR_GCS_F64. */
  majorGcs: number;
  /** RT_GCS_F64. */
  gcs: number;
  /** RT_GC_NS_F64. */
  gcNs: number;
  /** CPU time the thread has used, seconds, read at this reading (null where the system does not say). */
  cpuSeconds: number | null;
  /** Time the thread was runnable but waiting for a core, seconds, read at this reading (null likewise). */
  cpuWaitSeconds: number | null;
}

/** Name of the thread reporting in `block` of a region with `poolSlots` pool blocks. */
function threadNameOf(block: number, poolSlots: number): string {
  if (block === RT_THREAD_MAIN) return 'main';
  if (block === RT_THREAD_INGEST) return 'ingest';
  if (block === RT_THREAD_DISPATCHER) return 'dispatcher';
  if (block < RT_THREAD_POOL_FIRST + poolSlots) return `containment-${block - RT_THREAD_POOL_FIRST}`;
  return `ingest-${block - RT_THREAD_POOL_FIRST - poolSlots + 1}`;
}

/**
 * The latest report of every thread that owns a block and has reported within STALE_INTERVALS intervals of `nowMs`
 * (a terminated pool worker's block drops out of the readings until a replacement takes it).
 */
export function readThreadRuntime(
  region: SharedArrayBuffer,
  nowMs: number,
  intervalMs: number = THREAD_RUNTIME_INTERVAL_MS,
): ThreadRuntimeReading[] {
  const f64 = new Float64Array(region);
  const i32 = new Int32Array(region);
  const out: ThreadRuntimeReading[] = [];
  const poolSlots = poolSlotsOf(region);
  const blocks = region.byteLength / 8 / RT_STRIDE_F64;
  for (let block = 0; block < blocks; block++) {
    const base = block * RT_STRIDE_F64;
    const at = f64[base + RT_REPORTED_AT_MS_F64]!;
    if (Atomics.load(i32, base * 2 + RT_OWNER_I32) === 0 || at === 0 || nowMs - at > STALE_INTERVALS * intervalMs)
      continue;
    const cpu = threadCpuSeconds(f64[base + RT_OS_THREAD_ID_F64]!);
    out.push({
      thread: threadNameOf(block, poolSlots),
      reportedAtMs: at,
      heapUsedBytes: f64[base + RT_HEAP_USED_BYTES_F64]!,
      heapTotalBytes: f64[base + RT_HEAP_TOTAL_BYTES_F64]!,
      heapLiveBytes: f64[base + RT_HEAP_LIVE_BYTES_F64]!,
      externalBytes: f64[base + RT_EXTERNAL_BYTES_F64]!,
      loopUtilization: f64[base + RT_LOOP_UTILIZATION_F64]!,
      loopDelayP99Ns: f64[base + RT_LOOP_DELAY_P99_NS_F64]!,
      majorGcs: f64[base + RT_MAJOR_GCS_F64]!,
      gcs: f64[base + RT_GCS_F64]!,
      gcNs: f64[base + RT_GC_NS_F64]!,
      cpuSeconds: cpu === null ? null : cpu.onCpu,
      cpuWaitSeconds: cpu === null ? null : cpu.waiting,
    });
  }
  return out;
}

/** Environment variable of the event-loop block drill (see `armThreadDrills`). */
const BLOCK_DRILL_ENV = 'GEOFENCE_DRILL_BLOCK';
/** Environment variable of the thread exit drill (see `armThreadDrills`). */
const EXIT_DRILL_ENV = 'GEOFENCE_DRILL_EXIT';
/** Exit code of a thread ended by the exit drill. */
const EXIT_DRILL_CODE = 70;

/**
 * DRILL HOOKS, off by default, read when the thread starts (thread `ingest`, `ingest-<k>` for ingest thread k >= 1,
 * or `dispatcher`):
 * `GEOFENCE_DRILL_BLOCK=<thread>:<afterMs>:<forMs>` blocks that thread's event loop for `forMs` starting `afterMs`
 * after its start (a stalled thread); `GEOFENCE_DRILL_EXIT=<thread>:<afterMs>` ends that thread (exit code 70)
 * `afterMs` after its start (a dead thread). For the health drills. Unset, nothing happens; a malformed value fails
 * the thread's start, so a mistyped drill does not pass silently.
 */
export function armThreadDrills(thread: string): void {
  const block = process.env[BLOCK_DRILL_ENV];
  if (block !== undefined && block !== '') {
    const m = /^(ingest(?:-[1-9]\d*)?|dispatcher):(\d+):(\d+)$/.exec(block);
    if (m === null) {
      throw new Error(
        `${BLOCK_DRILL_ENV} must be <ingest|ingest-<k>|dispatcher>:<afterMs>:<forMs>, got ${JSON.stringify(block)}`,
      );
    }
    if (m[1] === thread) {
      const cell = new Int32Array(new SharedArrayBuffer(4));
      setTimeout(() => Atomics.wait(cell, 0, 0, Number(m[3])), Number(m[2])).unref();
    }
  }
  const exit = process.env[EXIT_DRILL_ENV];
  if (exit !== undefined && exit !== '') {
    const m = /^(ingest(?:-[1-9]\d*)?|dispatcher):(\d+)$/.exec(exit);
    if (m === null)
      throw new Error(
        `${EXIT_DRILL_ENV} must be <ingest|ingest-<k>|dispatcher>:<afterMs>, got ${JSON.stringify(exit)}`,
      );
    if (m[1] === thread) setTimeout(() => process.exit(EXIT_DRILL_CODE), Number(m[2])).unref();
  }
}
