/**
 * How long the partitions of a killed router stay unread when routers share them through leases (--partitions auto),
 * against a local nats-server started here.
 *
 * Per `--lease-ms` value: three router processes (the command line, 10,000 fences, 16 partitions, each its own state
 * directory) while this process publishes a seeded fleet at `--rate` pings/s, 50 to a message. `--kills` times: once
 * the three read every partition between them, one (in turn) is killed with SIGKILL; the time from the kill until the
 * survivors hold its leases ("took partitions") and until they read them again ("reading partitions", a router
 * restarted on the larger set) is taken from their logs; the killed member is then started again and rejoins.
 *
 *   node dist/bench/group-takeover.bench.js [--lease-ms 2000,10000] [--kills 3] [--rate 5000] [--logs DIR]
 *
 * With --logs, every member's log is written to DIR/<lease ms>-<member>.log at the end of its lease time's run.
 *
 * Prints one JSON line per lease time; writes bench/out/group-takeover.json.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { generateSyntheticCity } from '../src/fences/synthetic-city.js';
import { Fleet, type FleetPing } from '../src/fences/synthetic-fleet.js';
import { startNats } from './support/nats-server.js';
import { PartitionBatches } from './support/partition-batches.js';

const { values } = parseArgs({
  options: {
    'lease-ms': { type: 'string', default: '2000,10000' },
    kills: { type: 'string', default: '3' },
    rate: { type: 'string', default: '5000' },
    logs: { type: 'string' },
  },
});
const PARTITIONS = 16;
const PER_MESSAGE = 50;
const MAIN = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A router process and what it has logged. */
class Member {
  readonly child: ChildProcess;
  log = '';
  constructor(
    readonly name: string,
    args: string[],
  ) {
    this.child = spawn(process.execPath, [MAIN, ...args, '--member-name', name], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child.stderr!.setEncoding('utf8').on('data', (s: string) => (this.log += s));
    children.push(this.child);
    everyMember.push(this);
  }

  /** The partitions of its last "reading partitions" line. */
  reading(): number[] {
    const last = [...this.log.matchAll(/partition group: reading partitions ([\d,]+)/g)].at(-1);
    return last === undefined ? [] : last[1]!.split(',').map(Number);
  }

  /** Epoch ms of the first line matching `re` at or after `sinceMs` (null: none yet). */
  at(re: RegExp, sinceMs: number): number | null {
    for (const line of this.log.split('\n')) {
      if (!re.test(line)) continue;
      const ms = Date.parse((JSON.parse(line) as { time: string }).time);
      if (ms >= sinceMs) return ms;
    }
    return null;
  }
}

/** Publishes the fleet at `rate` pings/s until `stop.now`. */
async function publishUntil(url: string, rate: number, stop: { now: boolean }): Promise<void> {
  const fleet = new Fleet({ seed: 7, devices: 5000 });
  const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 5 };
  const nc = await connect({ servers: url });
  await (await jetstreamManager(nc)).streams.add({ name: 'TEL', subjects: ['telemetry.>'] });
  const batches = new PartitionBatches(jetstream(nc), PARTITIONS, PER_MESSAGE);
  const t0 = performance.now();
  let k = 0;
  while (!stop.now) {
    for (let i = 0; i < rate / 20; i++, k++) {
      fleet.next(ping, Date.UTC(2026, 0, 1) + k * 2);
      batches.add(ping);
    }
    await Promise.all(batches.acks.splice(0));
    const lead = (k / rate) * 1000 - (performance.now() - t0);
    if (lead > 1) await sleep(lead);
  }
  await nc.close();
}

async function waitUntil(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(20);
  }
}

const balanced = (ms: Member[]): boolean => {
  const all = ms.flatMap((m) => m.reading()).sort((a, b) => a - b);
  return all.length === PARTITIONS && all.every((p, i) => p === i) && ms.every((m) => m.reading().length >= 5);
};

const dir = mkdtempSync(join(tmpdir(), 'bench-takeover-'));
const fencesPath = join(dir, 'fences.geojson');
writeFileSync(fencesPath, JSON.stringify(generateSyntheticCity({ seed: 1, fenceCount: 10_000 })));
const results: unknown[] = [];
// Router processes of a run that fails are not left behind.
const children: ChildProcess[] = [];
/** Every member started, for --logs. */
const everyMember: Member[] = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
for (const leaseMs of values['lease-ms'].split(',').map(Number)) {
  const nats = await startNats();
  const stop = { now: false };
  const publishing = publishUntil(nats.url, Number(values.rate), stop);
  let serial = 0;
  // --logs writes this lease time's members only.
  everyMember.length = 0;
  const start = (): Member =>
    new Member(`m${serial++}`, [
      '--fences',
      fencesPath,
      '--state-dir',
      join(dir, `l${leaseMs}-m${serial}`),
      '--no-listen',
      '--no-admin',
      '--source',
      `jetstream://${nats.url.slice('nats://'.length)}/TEL`,
      '--partitions',
      'auto',
      '--lease-ms',
      String(leaseMs),
      '--ndjson',
      join(dir, `l${leaseMs}-m${serial}.ndjson`),
      // The start's sub-phases (the ingest thread's) are logged at debug level, for --logs.
      ...(values.logs === undefined ? [] : ['--log-level', 'debug']),
    ]);
  let members = [start(), start(), start()];
  const taken: number[] = [];
  const reading: number[] = [];
  try {
    for (let kill = 0; kill < Number(values.kills); kill++) {
      await waitUntil(() => balanced(members), 60_000, 'three members reading 16 partitions');
      await sleep(1000);
      const victim = members[kill % 3]!;
      const held = victim.reading();
      const survivors = members.filter((m) => m !== victim);
      const killedMs = Date.now();
      victim.child.kill('SIGKILL');
      await waitUntil(
        () => held.every((p) => survivors.some((m) => m.reading().includes(p))),
        60_000,
        "the survivors reading the victim's partitions",
      );
      const took = survivors.map((m) => m.at(/took partitions/, killedMs)).filter((x): x is number => x !== null);
      const read = survivors
        .map((m) => m.at(/partition group: reading partitions/, killedMs))
        .filter((x): x is number => x !== null);
      taken.push(Math.max(...took) - killedMs);
      reading.push(Math.max(...read) - killedMs);
      members = [...survivors, start()];
    }
  } finally {
    for (const m of members) m.child.kill('SIGKILL');
    if (values.logs !== undefined) {
      mkdirSync(values.logs, { recursive: true });
      for (const m of everyMember) writeFileSync(join(values.logs, `${leaseMs}-${m.name}.log`), m.log);
    }
    stop.now = true;
    await publishing;
    nats.stop();
  }
  const row = {
    leaseMs,
    kills: taken.length,
    leasesTakenMs: taken,
    readAgainMs: reading,
    medianLeasesTakenMs: median(taken),
    medianReadAgainMs: median(reading),
  };
  console.log(JSON.stringify(row));
  results.push(row);
}
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/group-takeover.json', `${JSON.stringify(results, null, 2)}\n`);
