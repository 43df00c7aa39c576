#!/usr/bin/env node
/**
 * The `geofence-router` binary (main thread): options from the defaults, a JSON config file (--config) and flags;
 * --help; --demo runs the embedded demo. SIGHUP reloads the fences file (a bad file leaves the old fences serving);
 * SIGINT / SIGTERM drain the router, print a summary that lists everything not delivered, and exit.
 *
 * Exit codes (EXIT_* of status.ts, listed in --help): 0 clean drain: nothing shed or rejected, every fence entry
 * tracked, every trigger delivered (or --help); 3 drained with loss by design: pings shed or rejected, fence entries
 * not tracked, stream partitions read after a gap, triggers dead-lettered or kept in the state directory for the next
 * start; 1 failure: the start failed
 * (bad GeoJSON, busy port, a state directory in use) or the drain could not account for every admitted ping; 2 bad
 * flags, config file or options.
 */
import {
  CLI_NETWORK_DEFAULTS,
  parseCliArgs,
  HELP_TEXT,
  mergeOptionInputs,
  type CliRequest,
} from '../config/cli-args.js';
import { loadConfigFile } from '../config/config-file.js';
import { resolveRouterOptions, routerConfigSchema, type RouterOptionsInput } from '../config/options.js';
import { startDemo } from '../demo/run-demo.js';
import { FenceValidationError } from '../fences/parse.js';
import type { Router } from '../router/api.js';
import { createRouter } from '../router/create-router.js';
import { createPartitionGroup, type PartitionGroup } from '../router/partition-group.js';
import type { RouterSummary } from '../router/api.js';
import type { Logger } from 'pino';
import { createCliLogger } from '../log/cli-logger.js';
import type { LogLevel } from '../log/router-log.js';
import { PACKAGE_VERSION } from '../version.js';
import { CLI_NODE_FLAGS, missingNodeFlags } from './node-flags.js';
import {
  drainOutcome,
  EXIT_FAILURE,
  EXIT_USAGE,
  exitCodeOf,
  formatSummary,
  worseOutcome,
  type DrainOutcome,
} from '../router/status.js';

/** A second stop signal this long after the first exits without waiting for the drain, ms. */
const FORCE_AFTER_MS = 2_000;

/**
 * Where the drain summary, the demo's table and --help go: stdout, unless a downstream writes its triggers there
 * (`--ndjson -`), which then has stdout to itself (its reader sees NDJSON lines only) and these go to stderr.
 */
const report = { toStderr: false };
const out = (line: string): void => void (report.toStderr ? process.stderr : process.stdout).write(`${line}\n`);

/**
 * The process's log: plain `geofence-router: ...` lines on stderr until the flags are read (a usage error is reported
 * that way), then the logger the flags ask for (--log-format, --log-level).
 */
const cli: { logger: Logger | null; close: () => Promise<void> } = { logger: null, close: async () => undefined };

/** Logs `message` at `level` from the main thread. */
function say(message: string, level: LogLevel = 'info'): void {
  const logger = cli.logger;
  if (logger === null) process.stderr.write(`geofence-router: ${level === 'info' ? '' : `${level}: `}${message}\n`);
  else if (level === 'debug') logger.debug({ thread: 'main' }, message);
  else logger[level]({ thread: 'main' }, message);
}

/** What the serve loop does around the router's close. */
interface ServeHooks {
  /** Resolves when the run should end by itself (demo time up, every input read); null: only on a signal. */
  autoStop: Promise<string> | null;
  /** Runs before close() (stop the demo's fleet). */
  beforeClose(): Promise<void>;
  /** Extra summary lines. */
  summaryLines(): string[];
  /** Outcomes beside the summary's that the exit code must cover (a partition group's earlier routers). */
  otherOutcomes(): DrainOutcome[];
}

/**
 * Stop signals received so far. The handlers are installed before the router starts, so a signal that arrives while
 * it starts (or between its start and `serve`) drains it instead of killing the process.
 */
const early: { signal: NodeJS.Signals | null; onSignal: ((signal: NodeJS.Signals) => void) | null } = {
  signal: null,
  onSignal: null,
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (early.onSignal !== null) early.onSignal(signal);
    else early.signal ??= signal;
  });
}

/** What `serve` runs: a router, or a partition group's member (whose close may find no router ran). */
interface Served {
  reloadFencesFile: Router['reloadFencesFile'];
  close(): Promise<RouterSummary | null>;
  readonly failure: Promise<Error>;
}

/** Serves until a stop signal (or hooks.autoStop), then drains, prints the summary and returns the exit code. */
function serve(router: Served, hooks: ServeHooks): Promise<number> {
  return new Promise((resolve) => {
    let stoppingSinceMs = -1;
    const onHup = (): void => {
      router.reloadFencesFile().then(
        (r) => say(`fences reloaded: generation ${r.generation}, ${r.fenceCount} fences`),
        (e: unknown) => say(`fences reload failed, the previous fences keep serving: ${(e as Error).message}`, 'error'),
      );
    };
    const stop = async (reason: string): Promise<void> => {
      stoppingSinceMs = performance.now();
      say(`${reason}: draining`);
      try {
        await hooks.beforeClose();
        const summary = await router.close();
        if (summary !== null) for (const line of formatSummary(summary, performance.now() - stoppingSinceMs)) out(line);
        for (const line of hooks.summaryLines()) out(line);
        const outcome = hooks
          .otherOutcomes()
          .reduce(worseOutcome, summary === null ? 'delivered' : drainOutcome(summary));
        resolve(exitCodeOf(outcome));
      } catch (e) {
        say(`close failed: ${(e as Error).stack ?? String(e)}`, 'error');
        resolve(EXIT_FAILURE);
      }
    };
    const onStopSignal = (signal: NodeJS.Signals): void => {
      if (stoppingSinceMs < 0) {
        void stop(signal);
        return;
      }
      // A signal sent to the whole process group arrives twice at once; only a later one means "now".
      if (performance.now() - stoppingSinceMs < FORCE_AFTER_MS) return;
      say(`${signal} again: exiting without waiting for the drain`, 'warn');
      void cli.close().then(() => process.exit(EXIT_FAILURE));
    };
    process.on('SIGHUP', onHup);
    early.onSignal = onStopSignal;
    if (early.signal !== null) onStopSignal(early.signal);
    hooks.autoStop?.then((reason) => {
      if (stoppingSinceMs < 0) void stop(reason);
    });
    // A pipeline thread gone: nothing more can be processed; stop (close() reports it) and exit with the failure code.
    void router.failure.then((err) => {
      if (stoppingSinceMs < 0) void stop(err.message);
    });
  });
}

/** Names the file a fence error came from. */
function describeStartError(e: unknown, input: RouterOptionsInput): string {
  if (e instanceof FenceValidationError)
    return `fences file ${input.fencesFile ?? '(given)'}: invalid GeoJSON fences: ${e.message}`;
  return (e as Error).message;
}

/** A member of a partition group (--partitions auto): routers on the partitions its leases hold. */
async function runGroup(input: RouterOptionsInput): Promise<number> {
  let group: PartitionGroup;
  try {
    group = await createPartitionGroup({ ...input, logger: cli.logger! });
  } catch (e) {
    say(describeStartError(e, input), 'error');
    return e instanceof RangeError ? EXIT_USAGE : EXIT_FAILURE;
  }
  const j = resolveRouterOptions(input).jetstreamSource!;
  say(
    `telemetry jetstream ${j.servers.join(',')} stream ${j.stream}, partitions auto of ${j.partitionCount}: member ${group.member}, leases in bucket ${j.leaseBucket} (${group.leaseMs} ms), device state in bucket ${j.stateBucket}`,
  );
  return serve(group, {
    autoStop: null,
    beforeClose: async () => undefined,
    summaryLines: () => {
      const s = group.stats();
      return [
        `  partition group: member ${group.member}, routers started=${s.routersStarted} partitions taken=${s.partitionsTaken} released=${s.partitionsReleased} leases lost=${s.leasesLost}`,
        ...group
          .earlierOutcomes()
          .map(
            (e) =>
              `  earlier router ${e.router} (${e.ended === 'closed' ? 'closed for a rebalance' : 'abandoned: a lease was lost'}): ${e.line}`,
          ),
      ];
    },
    otherOutcomes: () => group.earlierOutcomes().map((e) => e.outcome),
  });
}

async function runPlain(input: RouterOptionsInput): Promise<number> {
  if (resolveRouterOptions(input).jetstreamSource?.partitions === 'auto') return runGroup(input);
  let router: Router;
  try {
    router = await createRouter({ ...input, logger: cli.logger! });
  } catch (e) {
    say(describeStartError(e, input), 'error');
    return e instanceof RangeError ? EXIT_USAGE : EXIT_FAILURE;
  }
  const o = router.options;
  if (router.ingestPort !== null) say(`telemetry tcp://${o.listenHost}:${router.ingestPort} (MessagePack)`);
  if (o.jetstreamSource !== null) {
    const j = o.jetstreamSource;
    say(
      `telemetry jetstream ${j.servers.join(',')} stream ${j.stream}, partitions ${j.partitions} of ${j.partitionCount}, ` +
        (j.stateBucket === null
          ? 'device state in the state directory only'
          : `each partition's device state in bucket ${j.stateBucket}`),
    );
  }
  if (router.adminPort !== null) say(`admin http://${o.adminHost}:${router.adminPort}/metrics /healthz /readyz`);
  say(
    `downstreams: ${o.downstreams.length === 0 ? 'none (triggers are counted as unrouted)' : o.downstreams.map((d) => `${d.name} (${d.kind})`).join(', ')}`,
  );
  // With no listener, a replay of input files ends the run when every file is read.
  const autoStop =
    o.listenHost === null && o.jetstreamSource === null && o.inputs.length > 0
      ? router.inputsFinished().then(() => 'inputs read')
      : null;
  return serve(router, {
    autoStop,
    beforeClose: async () => undefined,
    summaryLines: () => [],
    otherOutcomes: () => [],
  });
}

async function runDemo(input: RouterOptionsInput, request: CliRequest): Promise<number> {
  let demo;
  try {
    demo = await startDemo(input, request.demoFlags, out, cli.logger!);
  } catch (e) {
    say(`demo: ${describeStartError(e, input)}`, 'error');
    return e instanceof RangeError ? EXIT_USAGE : EXIT_FAILURE;
  }
  try {
    return await serve(demo.router, {
      autoStop: demo.timeUp.then(() => `demo time up (${request.demoFlags.seconds} s)`),
      beforeClose: () => demo.stop(),
      summaryLines: () => demo.summaryLines(),
      otherOutcomes: () => [],
    });
  } finally {
    demo.cleanup();
  }
}

/** Runs the command line `argv` (without node and the script); resolves to the exit code. */
async function main(argv: readonly string[]): Promise<number> {
  let request: CliRequest;
  let input: RouterOptionsInput;
  try {
    request = parseCliArgs(argv);
    if (request.help) {
      out(HELP_TEXT);
      return 0;
    }
    if (request.version) {
      out(`geofence-router ${PACKAGE_VERSION}`);
      return 0;
    }
    if (request.printConfigSchema) {
      out(JSON.stringify(routerConfigSchema(), null, 2));
      return 0;
    }
    const file = request.configPath !== null ? loadConfigFile(request.configPath) : {};
    input = mergeOptionInputs(file, request.overrides);
    // The demo picks its own ports (see run-demo.ts); a plain run listens where the CLI documents it.
    if (!request.demo) input = mergeOptionInputs(CLI_NETWORK_DEFAULTS, input);
    // Validate here so a bad option is reported before anything starts (the demo adds its own on top).
    const resolved = resolveRouterOptions(input);
    if (resolved.downstreams.some((d) => d.kind === 'ndjson' && d.path === '-')) report.toStderr = true;
  } catch (e) {
    say((e as Error).message, 'error');
    return EXIT_USAGE;
  }
  const logging = createCliLogger(request.logFormat, request.logLevel);
  cli.logger = logging.logger;
  cli.close = logging.close;
  const missing = missingNodeFlags(process.execArgv);
  if (missing.length > 0)
    say(
      `node runs without ${missing.join(' ')} (npm start passes it; or run node ${CLI_NODE_FLAGS.join(' ')} dist/src/cli/main.js): resident memory may swing by 10 % and more under a steady load as quiet threads' heaps shrink and grow back`,
    );
  return request.demo ? runDemo(input, request) : runPlain(input);
}

main(process.argv.slice(2)).then(
  async (code) => {
    process.exitCode = code;
    await cli.close();
    process.exit(code);
  },
  async (e: unknown) => {
    say(`unexpected failure: ${(e as Error).stack ?? String(e)}`, 'error');
    process.exitCode = EXIT_FAILURE;
    await cli.close();
    process.exit(EXIT_FAILURE);
  },
);
