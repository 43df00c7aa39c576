/**
 * What a starting router is doing (main thread): each start phase is named as it begins, a timer says which phase a
 * slow start is in every START_REPORT_INTERVAL_MS, and the finished start is summarised phase by phase. A phase that
 * runs on the main thread (parsing a large fences file) holds the timer back until it ends; the phases that wait for
 * other threads (their start and warm-up) are the ones a stuck start would sit in, and those the timer reports.
 */

/** How often a start still running says where it is, ms. */
const START_REPORT_INTERVAL_MS = 10_000;

/** Phases of one start, with their durations. */
export class StartProgress {
  private readonly log: (line: string) => void;
  private readonly startedAtMs = performance.now();
  private phaseName = 'starting';
  private phaseAtMs = this.startedAtMs;
  private readonly done: string[] = [];
  private readonly timer: NodeJS.Timeout;

  /** Starts the clock and the periodic report (unref'd: it never keeps a process alive). */
  constructor(log: (line: string) => void, intervalMs = START_REPORT_INTERVAL_MS) {
    this.log = log;
    this.timer = setInterval(() => this.report(), intervalMs);
    this.timer.unref();
  }

  /** The phase running now. */
  get current(): string {
    return this.phaseName;
  }

  /** Ends the current phase and begins `name` (a lower-case description: "starting the dispatcher thread"). */
  phase(name: string): void {
    const nowMs = performance.now();
    this.done.push(`${this.phaseName} ${Math.round(nowMs - this.phaseAtMs)} ms`);
    this.phaseName = name;
    this.phaseAtMs = nowMs;
  }

  /** Stops the report; returns the one-line summary of the start ("started in ... ms: phase ms, ..."). */
  finish(): string {
    this.phase('');
    clearInterval(this.timer);
    return `started in ${Math.round(performance.now() - this.startedAtMs)} ms: ${this.done.slice(1).join(', ')}`;
  }

  /** Stops the report after a failed start; says in which phase it failed. */
  fail(): string {
    clearInterval(this.timer);
    return `start failed while ${this.phaseName}, after ${Math.round(performance.now() - this.startedAtMs)} ms`;
  }

  private report(): void {
    const nowMs = performance.now();
    this.log(
      `start: still ${this.phaseName} after ${((nowMs - this.phaseAtMs) / 1000).toFixed(0)} s ` +
        `(${((nowMs - this.startedAtMs) / 1000).toFixed(0)} s since the start began)`,
    );
  }
}
