/**
 * The command line's logger: pino, writing to stderr (stdout carries the drain summary and the demo's table, or the
 * triggers of an NDJSON downstream on stdout alone).
 *
 * - `json` (the default): one JSON object a line, `{"level":"warn","time":"2026-...Z","pid":..,"hostname":..,
 *   "name":"geofence-router","thread":"dispatcher","msg":"..."}` plus the line's own fields, written synchronously
 *   so nothing is lost when the process exits;
 * - `pretty`: pino-pretty, for a person at a terminal (colours when stderr is one), run as a pino transport on a
 *   thread of its own, so formatting never costs the main thread.
 */
import { hostname } from 'node:os';
import { pino, stdTimeFunctions, type Logger } from 'pino';
import type { LogLevel } from './router-log.js';

/** The formats of the command line's log. */
export const LOG_FORMATS = ['json', 'pretty'] as const;

/** A format of the command line's log. */
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The command line's logger and how to close it. */
export interface CliLogger {
  /** The logger (pino's level methods take `(fields, message)`). */
  readonly logger: Logger;
  /** Writes out what is buffered (the pretty transport's thread) before the process exits. */
  close(): Promise<void>;
}

/** A pino logger writing `format` to stderr at `level` and above. */
export function createCliLogger(format: LogFormat, level: LogLevel): CliLogger {
  const base = { name: 'geofence-router' };
  if (format === 'json') {
    const destination = pino.destination({ dest: 2, sync: true });
    const logger = pino(
      {
        level,
        base: { ...base, pid: process.pid, hostname: hostname() },
        timestamp: stdTimeFunctions.isoTime,
        formatters: { level: (label) => ({ level: label }) },
      },
      destination,
    );
    return { logger, close: async () => destination.flushSync() };
  }
  const transport = pino.transport({
    target: 'pino-pretty',
    options: {
      destination: 2,
      colorize: process.stderr.isTTY === true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,name,thread',
      messageFormat: '[{thread}] {msg}',
      hideObject: false,
    },
  });
  const logger = pino({ level, base, timestamp: stdTimeFunctions.isoTime }, transport);
  return {
    logger,
    close: () =>
      new Promise<void>((resolve) => {
        // A transport thread that does not close in time must not hold the exit for long.
        const timer = setTimeout(resolve, 2000);
        transport.once('close', () => {
          clearTimeout(timer);
          resolve();
        });
        logger.flush(() => transport.end());
      }),
  };
}
