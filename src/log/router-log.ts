/**
 * The router's log (main thread): every line, from any thread, passes here with its level, the thread it came from
 * and its fields, is rate-limited, and goes to the configured target: a logger object with the usual level methods
 * (pino, bunyan, or anything with `error` / `warn` / `info` / `debug` taking `(fields, message)`), a line callback,
 * or, by default, the console.
 *
 * Repeats: a line that comes back again and again (a downstream refusing every batch, a client sending bad frames)
 * would drown the rest. Lines are grouped by level, thread and text with its numbers blanked out; within one
 * `repeatWindowMs` window the first `repeatBurst` of a group pass, the rest are counted, and once the window is over
 * one line says how many were left out (`repeated: n` in its fields). Groups are bounded (MAX_GROUPS): when every
 * slot holds a live group, a new group's lines pass unlimited rather than being dropped.
 */

/** Severity of a log line. 'error' marks loss that must not go unnoticed (a shed COMPLIANCE ping). */
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/** The levels, most severe first. */
export const LOG_LEVELS: readonly LogLevel[] = ['error', 'warn', 'info', 'debug'];

/** Structured fields of a log line; `thread` names the thread it came from (`main`, `ingest`, `dispatcher`, ...). */
export interface LogFields {
  thread?: string;
  [key: string]: unknown;
}

/** A logger object as the library accepts it: pino's and bunyan's signature, `(fields, message)`. */
export interface LoggerLike {
  error(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  info(fields: object, message: string): void;
  /** Optional: without it, debug lines are dropped. */
  debug?(fields: object, message: string): void;
}

/** A line callback as the library accepts it: the message, its level and its fields (with `thread`). */
export type LogLineCallback = (line: string, level: LogLevel, fields: LogFields) => void;

/** How the router writes a line internally: message, level (default 'info'), fields. */
export type LogFn = (message: string, level?: LogLevel, fields?: LogFields) => void;

/** Options of RouterLog. */
export interface RouterLogOptions {
  /** Length of a repeat window, ms. Default 10,000. */
  repeatWindowMs?: number;
  /** Lines of one group that pass in one window, >= 1. Default 5. */
  repeatBurst?: number;
  /** Least severe level written (default 'info': debug lines are dropped). */
  level?: LogLevel;
  /** Clock, ms (default performance.now). */
  nowMs?: () => number;
}

/** Most groups of repeated lines tracked at once. */
const MAX_GROUPS = 1024;
/** Default repeat window, ms. */
const DEFAULT_REPEAT_WINDOW_MS = 10_000;
/** Default lines of one group per window. */
const DEFAULT_REPEAT_BURST = 5;

/** One group of alike lines within its window. */
interface RepeatGroup {
  level: LogLevel;
  windowStartMs: number;
  passed: number;
  suppressed: number;
  /** The last line left out, and its fields. */
  lastMessage: string;
  lastFields: LogFields;
}

/** The key a line is grouped by: its level, its thread and its text with digit runs blanked out. */
function groupKey(level: LogLevel, thread: string, message: string): string {
  return `${level}\u0000${thread}\u0000${message.replace(/\d+/g, '#')}`;
}

/** Writes lines to the console: `geofence-router [thread] level: message {fields}`. */
function consoleTarget(line: string, level: LogLevel, fields: LogFields): void {
  const { thread = 'main', ...rest } = fields;
  const extra = Object.keys(rest).length > 0 ? ` ${JSON.stringify(rest)}` : '';
  const text = `geofence-router [${thread}] ${level}: ${line}${extra}`;
  if (level === 'error') console.error(text);
  else if (level === 'warn') console.warn(text);
  else if (level === 'info') console.info(text);
  else console.debug(text);
}

/** True when `x` looks like a logger object (has the level methods as functions). */
export function isLoggerLike(x: unknown): x is LoggerLike {
  if (typeof x !== 'object' || x === null) return false;
  const o = x as Record<string, unknown>;
  return typeof o['error'] === 'function' && typeof o['warn'] === 'function' && typeof o['info'] === 'function';
}

/** The router's log: levels, threads, fields, rate-limited repeats, one target. */
export class RouterLog {
  private readonly target: LogLineCallback;
  private readonly windowMs: number;
  private readonly burst: number;
  private readonly minRank: number;
  private readonly nowMs: () => number;
  private readonly groups = new Map<string, RepeatGroup>();
  private readonly timer: NodeJS.Timeout;
  /** Lines left out as repeats, by level. */
  readonly suppressed: Record<LogLevel, number> = { error: 0, warn: 0, info: 0, debug: 0 };

  /**
   * `target`: a logger object, a line callback, or undefined for the console. Starts an unref'd timer that reports the
   * lines left out once their window is over (stop it with close()).
   */
  constructor(target: LoggerLike | LogLineCallback | undefined, options: RouterLogOptions = {}) {
    if (target === undefined) this.target = consoleTarget;
    else if (typeof target === 'function') this.target = target;
    else {
      const logger = target;
      this.target = (line, level, fields) => {
        if (level === 'debug') logger.debug?.(fields, line);
        else logger[level](fields, line);
      };
    }
    this.windowMs = options.repeatWindowMs ?? DEFAULT_REPEAT_WINDOW_MS;
    this.burst = options.repeatBurst ?? DEFAULT_REPEAT_BURST;
    if (!(this.windowMs > 0)) throw new RangeError(`repeatWindowMs must be > 0 (got ${this.windowMs})`);
    if (!(Number.isInteger(this.burst) && this.burst >= 1)) {
      throw new RangeError(`repeatBurst must be an integer >= 1 (got ${this.burst})`);
    }
    this.minRank = LOG_LEVELS.indexOf(options.level ?? 'info');
    if (this.minRank < 0) throw new RangeError(`level must be one of ${LOG_LEVELS.join(', ')} (got ${options.level})`);
    this.nowMs = options.nowMs ?? (() => performance.now());
    this.timer = setInterval(() => this.sweep(), Math.min(1000, this.windowMs));
    this.timer.unref();
  }

  /** The log as a function (thread 'main' unless the fields name another). */
  readonly fn: LogFn = (message, level = 'info', fields) => this.write(message, level, fields);

  /** Writes one line unless it is a repeat over its group's burst (then it is counted and reported later). */
  write(message: string, level: LogLevel = 'info', fields: LogFields = {}): void {
    if (LOG_LEVELS.indexOf(level) > this.minRank) return;
    const thread = fields.thread ?? 'main';
    const all: LogFields = fields.thread === undefined ? { thread, ...fields } : fields;
    const key = groupKey(level, thread, message);
    const nowMs = this.nowMs();
    let g = this.groups.get(key);
    if (g !== undefined && nowMs - g.windowStartMs >= this.windowMs) {
      this.report(g);
      this.groups.delete(key);
      g = undefined;
    }
    if (g === undefined) {
      if (this.groups.size >= MAX_GROUPS) this.sweep();
      if (this.groups.size < MAX_GROUPS) {
        this.groups.set(key, {
          level,
          windowStartMs: nowMs,
          passed: 1,
          suppressed: 0,
          lastMessage: message,
          lastFields: all,
        });
      }
      this.target(message, level, all);
      return;
    }
    if (g.passed < this.burst) {
      g.passed++;
      this.target(message, level, all);
      return;
    }
    g.suppressed++;
    this.suppressed[level]++;
    g.lastMessage = message;
    g.lastFields = all;
  }

  /** Reports every group whose window is over and forgets it. */
  private sweep(): void {
    const nowMs = this.nowMs();
    for (const [key, g] of this.groups) {
      if (nowMs - g.windowStartMs < this.windowMs) continue;
      this.report(g);
      this.groups.delete(key);
    }
  }

  /** Writes the line that says how many of a group were left out, if any. */
  private report(g: RepeatGroup): void {
    if (g.suppressed === 0) return;
    const seconds = Math.round(this.windowMs / 1000);
    this.target(`${g.lastMessage} (and ${g.suppressed} more like it in ${seconds} s, not written)`, g.level, {
      ...g.lastFields,
      repeated: g.suppressed,
    });
  }

  /** Reports what was left out so far and stops the timer. */
  close(): void {
    clearInterval(this.timer);
    for (const g of this.groups.values()) this.report(g);
    this.groups.clear();
  }
}
