/**
 * The state directory: where one router keeps everything that must outlive it (device-state checkpoints, the
 * progress mark, and one directory per downstream with its backlog log, dead-letter file and pending file).
 *
 *   <stateDir>/LOCK                 owner of the directory while it runs (pid and process start time)
 *   <stateDir>/checkpoint.bin       the last device-state checkpoint (checkpoint.prev: the one before)
 *   <stateDir>/progress             the progress mark (see file-layout.ts)
 *   <stateDir>/downstreams/<name>/  backlog-*.log, backlog.cursor, setaside-*.log, dead-letters-*.dlq, pending.bin
 *
 * One process at a time: `open` takes LOCK with an exclusive create and refuses, naming the directory and the owner,
 * while the process that wrote it is alive. A LOCK whose owner is gone means the previous run stopped without a
 * clean shutdown (killed, crashed, power lost): the lock is taken over and `previousStop` says "unclean". A clean
 * close removes LOCK last. Main thread.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncDir } from './fs-util.js';

/** How the previous run that used the directory ended. */
export type PreviousStop = 'none' | 'clean' | 'unclean';

/** Thrown when another live process holds the state directory. */
export class StateDirectoryInUseError extends Error {
  /** The directory. */
  readonly dir: string;
  /** The owner's process id. */
  readonly ownerPid: number;

  constructor(dir: string, ownerPid: number) {
    super(
      `state directory ${dir} is in use by process ${ownerPid}: give each router its own state directory (--state-dir)`,
    );
    this.name = 'StateDirectoryInUseError';
    this.dir = dir;
    this.ownerPid = ownerPid;
  }
}

/** What LOCK holds. */
interface LockOwner {
  pid: number;
  /** The process's start time as /proc reports it (clock ticks since boot), or null where unknown. */
  startTicks: string | null;
}

/** Start time of process `pid` in clock ticks since boot (Linux /proc), or null. */
function processStartTicks(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22, counted after the command name's closing parenthesis (the name may hold spaces).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

/** True when the process that wrote `owner` is still running (same pid and, where known, same start time). */
function ownerAlive(owner: LockOwner): boolean {
  // This very process (a second router on the same directory), unless the pid was reused across a restart (a container
  // often gives its one process the same pid every time): then the start time differs.
  if (owner.pid === process.pid)
    return owner.startTicks === null || owner.startTicks === processStartTicks(process.pid);
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  // The pid is in use; a different start time means it was reused by another process.
  const now = processStartTicks(owner.pid);
  return owner.startTicks === null || now === null || now === owner.startTicks;
}

/** An open, locked state directory (see the module comment). */
export class StateDirectory {
  /** Absolute path. */
  readonly dir: string;
  /** How the previous run ended. */
  readonly previousStop: PreviousStop;
  /** Pid of the previous run when it stopped uncleanly. */
  readonly previousPid: number | null;
  private readonly lockPath: string;
  private released = false;

  private constructor(dir: string, previousStop: PreviousStop, previousPid: number | null) {
    this.dir = dir;
    this.previousStop = previousStop;
    this.previousPid = previousPid;
    this.lockPath = path.join(dir, 'LOCK');
  }

  /**
   * Creates `dir` if needed and locks it. Throws StateDirectoryInUseError while another live process holds it, and
   * an Error naming the directory when it cannot be created or written.
   */
  static open(dir: string): StateDirectory {
    const abs = path.resolve(dir);
    try {
      fs.mkdirSync(path.join(abs, 'downstreams'), { recursive: true });
    } catch (err) {
      throw new Error(`state directory ${abs}: ${(err as Error).message}`, { cause: err });
    }
    const lockPath = path.join(abs, 'LOCK');
    let previous: PreviousStop = fs.existsSync(path.join(abs, 'checkpoint.bin')) ? 'clean' : 'none';
    let previousPid: number | null = null;
    for (let attempt = 0; ; attempt++) {
      try {
        const fd = fs.openSync(lockPath, 'wx');
        const owner: LockOwner = { pid: process.pid, startTicks: processStartTicks(process.pid) };
        fs.writeSync(fd, JSON.stringify(owner));
        fs.fsyncSync(fd);
        fs.closeSync(fd);
        syncDir(abs);
        return new StateDirectory(abs, previous, previousPid);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 2)
          throw new Error(`state directory ${abs}: cannot take LOCK: ${(err as Error).message}`, { cause: err });
      }
      let owner: LockOwner | null = null;
      try {
        owner = JSON.parse(fs.readFileSync(lockPath, 'utf8')) as LockOwner;
      } catch {
        // A LOCK cut short by a crash while it was written: its owner is gone.
      }
      if (owner !== null && typeof owner.pid === 'number' && ownerAlive(owner))
        throw new StateDirectoryInUseError(abs, owner.pid);
      previous = 'unclean';
      previousPid = owner?.pid ?? null;
      try {
        fs.unlinkSync(lockPath);
      } catch {
        // Someone else took it over first; the exclusive create decides.
      }
    }
  }

  /** Directory of the downstreams' durable files. */
  get downstreamsDir(): string {
    return path.join(this.dir, 'downstreams');
  }

  /** Path of a file in the directory. */
  file(name: string): string {
    return path.join(this.dir, name);
  }

  /**
   * Gives the directory up without a clean end: LOCK is emptied (an owner that is gone), so the next open, in this
   * process or another, treats the run as stopped uncleanly.
   */
  abandon(): void {
    if (this.released) return;
    this.released = true;
    try {
      fs.writeFileSync(this.lockPath, '');
      syncDir(this.dir);
    } catch {
      // Already gone.
    }
  }

  /** Removes LOCK: the run ended cleanly (call last). */
  release(): void {
    if (this.released) return;
    this.released = true;
    try {
      fs.unlinkSync(this.lockPath);
      syncDir(this.dir);
    } catch {
      // Already gone.
    }
  }
}
