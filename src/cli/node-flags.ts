/**
 * The node flags the `geofence-router` binary is meant to run with: `npm start` passes them, the README's commands
 * show them (`node <flags> dist/src/cli/main.js`), and a start without them says so once in the log. Its first line
 * stays `#!/usr/bin/env node`: `env -S` would carry flags there, but BusyBox's env (Alpine images) has no `-S` and
 * the installed binary would not start at all. The library leaves its host's flags alone.
 *
 * `--no-memory-reducer`: V8's memory reducer shrinks the heap of a thread that has gone quiet (the main thread between
 * scrapes and checkpoints), and the heap grows back at its next burst of work, so under a steady load the process's
 * resident memory swung by 10 % and more with nothing live growing (bench/RESULTS.md, "Resident memory that holds
 * still"). Without it each heap keeps the size its work needs; quiet threads collect less often and every heap stays
 * within its limits. It has to be a command-line flag: set once the process runs, it no longer reaches the main thread's heap.
 */

/** The node flags the binary runs with. */
export const CLI_NODE_FLAGS: readonly string[] = ['--no-memory-reducer'];

/** The flags of CLI_NODE_FLAGS that `execArgv` (the process's node flags) lacks. */
export function missingNodeFlags(execArgv: readonly string[]): string[] {
  return CLI_NODE_FLAGS.filter((f) => !execArgv.includes(f));
}
