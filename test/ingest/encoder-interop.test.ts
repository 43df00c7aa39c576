/**
 * Pings written by MessagePack encoders nobody here wrote, in their default settings, are accepted and produce exactly
 * the triggers the same pings produce when msgpackr writes them: the reference JavaScript encoder (@msgpack/msgpack)
 * and Python's msgpack (Debian's python3-msgpack). Both write an epoch-ms `ts` and an IMEI-like id as uint64 where
 * msgpackr writes a float64, and small integers (speed, heading) as fixints.
 *
 * Python's msgpack must be importable: the test fails, naming the package to install, when it is not.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { encode } from '@msgpack/msgpack';
import { pack } from 'msgpackr';
import { createRouter } from '../../src/index.js';
import type { Trigger } from '../../src/dispatch/trigger.js';
import { RejectReason } from '../../src/shm/layout.js';
import { at, square, T0, TriggerServer } from '../pipeline/support.js';
import { checkDeliveryContract } from '../support/delivery-contract.js';
import { makeEdge, type SeenPing } from './support.js';

/** A ping as plain JSON data: integers stay integers on the way into Python (json.loads gives int, not float). */
interface Ping {
  id: string | number;
  lat: number;
  lon: number;
  ts: number;
  speed?: number;
  heading?: number;
  accuracy?: number;
}

/** Reads pings as JSON from stdin and writes each with msgpack.packb in its default settings, concatenated. */
const PYTHON_ENCODER = [
  'import json, sys, msgpack',
  'pings = json.load(sys.stdin)',
  "sys.stdout.buffer.write(b''.join(msgpack.packb(p) for p in pings))",
].join('\n');

/** Interpreters tried, in order: Debian's python3-msgpack installs for /usr/bin/python3. */
const PYTHON_CANDIDATES = ['/usr/bin/python3', 'python3', 'python'];

let pythonFound: string | null | undefined;

/** A Python that imports msgpack; fails the calling test with what to install when there is none. */
function pythonWithMsgpack(): string {
  if (pythonFound === undefined) {
    pythonFound =
      PYTHON_CANDIDATES.find((exe) => spawnSync(exe, ['-c', 'import msgpack'], { stdio: 'ignore' }).status === 0) ??
      null;
  }
  if (pythonFound === null) {
    assert.fail(
      `Python's msgpack is not importable by any of ${PYTHON_CANDIDATES.join(', ')}: install it with ` +
        '`apt-get install -y python3-msgpack` (Debian package, for /usr/bin/python3); this interop test does not skip',
    );
  }
  return pythonFound;
}

/** Runs `script` with Python's msgpack, `input` on stdin; returns its stdout bytes. */
function runPython(script: string, input: string): Buffer {
  const python = pythonWithMsgpack();
  const r = spawnSync(python, ['-c', script], { input, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${python} failed (status ${String(r.status)}): ${r.stderr.toString()}`);
  return r.stdout;
}

/** The frames Python's msgpack writes for `pings`. */
function pythonFrames(pings: readonly Ping[]): Buffer {
  return runPython(PYTHON_ENCODER, JSON.stringify(pings));
}

/** The frames @msgpack/msgpack writes for `pings` (default options). */
function referenceJsFrames(pings: readonly Ping[]): Buffer {
  return Buffer.concat(pings.map((p) => encode(p)));
}

/** The frames msgpackr writes for `pings` (default options: integers past 32 bits as float64). */
function msgpackrFrames(pings: readonly Ping[]): Buffer {
  return Buffer.concat(pings.map((p) => pack(p)));
}

/** Encoders compared, reference first. */
const ENCODERS: { name: string; frames: (pings: readonly Ping[]) => Buffer }[] = [
  { name: 'msgpackr', frames: msgpackrFrames },
  { name: '@msgpack/msgpack', frames: referenceJsFrames },
  { name: 'python msgpack', frames: pythonFrames },
];

/** Whether `frames` hold the key `ts` followed by a value of MessagePack type byte `type`. */
function tsWrittenAs(frames: Buffer, type: number): boolean {
  return frames.includes(Buffer.from([0xa2, 0x74, 0x73, type]));
}

const IMEI = 358_240_051_111_110;
const MAX_ID = Number.MAX_SAFE_INTEGER;
const UINT32_PAST = 2 ** 32;

test('pings from @msgpack/msgpack and Python msgpack decode at the edge exactly as msgpackr pings do', () => {
  const pings: Ping[] = [];
  const ids: (string | number)[] = [IMEI, MAX_ID, UINT32_PAST, 2 ** 32 - 1, 200, 7, 'truck-7', '358240051111110'];
  for (let i = 0; i < 40; i++) {
    const id = ids[i % ids.length]!;
    pings.push({
      id,
      lat: 52.5 + i * 1e-4,
      lon: -13.4 - i * 1e-4,
      ts: T0 + i * 1000,
      speed: i % 5,
      heading: (i * 37) % 361,
      accuracy: 0.5 + i,
    });
  }
  // Integral coordinates: written as positive and negative fixints.
  pings.push({ id: IMEI, lat: 52, lon: -13, ts: T0 + 50_000 });
  const seen = new Map<string, SeenPing[]>();
  for (const { name, frames } of ENCODERS) {
    const bytes = frames(pings);
    const fx = makeEdge({}, { maxDevices: 100 });
    fx.edge.ingest(bytes);
    assert.deepEqual(fx.logLines, [], `${name}: nothing rejected`);
    assert.equal(fx.sink.pings.length, pings.length, `${name}: every ping accepted`);
    seen.set(name, fx.sink.pings);
  }
  const reference = seen.get('msgpackr')!;
  assert.deepEqual(
    reference.map((p) => p.id),
    pings.map((p) => p.id),
    'ids as sent, 53 bits intact',
  );
  assert.deepEqual(
    reference.map((p) => p.tsMs),
    pings.map((p) => p.ts),
  );
  for (const [name, got] of seen) assert.deepEqual(got, reference, `${name} decodes like msgpackr`);
  // The comparison means something: the foreign encoders really wrote uint64 times, msgpackr float64 ones.
  assert.ok(tsWrittenAs(msgpackrFrames(pings), 0xcb), 'msgpackr writes ts as float64');
  assert.ok(tsWrittenAs(referenceJsFrames(pings), 0xcf), '@msgpack/msgpack writes ts as uint64');
  assert.ok(tsWrittenAs(pythonFrames(pings), 0xcf), 'python msgpack writes ts as uint64');
  assert.ok(
    referenceJsFrames([{ id: IMEI, lat: 1, lon: 2, ts: T0 }]).includes(Buffer.from([0xa2, 0x69, 0x64, 0xcf])),
    'an IMEI id as uint64',
  );
});

test('ids above 2^53 - 1 from Python msgpack are rejected as invalid_id with the exact value', () => {
  const script = [
    'import sys, msgpack',
    `base = {'lat': 52.5, 'lon': 13.4, 'ts': ${T0}}`,
    "sys.stdout.buffer.write(b''.join(msgpack.packb(dict(base, id=i)) for i in (2**53 - 1, 2**53, 2**53 + 1, 2**64 - 1, -2**63, 358240051111110)))",
  ].join('\n');
  const fx = makeEdge({}, { maxDevices: 100 });
  fx.edge.ingest(runPython(script, ''));
  assert.deepEqual(
    fx.sink.pings.map((p) => p.id),
    [MAX_ID, IMEI],
  );
  assert.equal(fx.rejected(RejectReason.INVALID_ID), 4);
  assert.deepEqual(
    fx.logLines.map((l) => /: (id .*) \(first bytes/.exec(l)?.[1]),
    [
      'id 9007199254740992 is above 2^53-1',
      'id 9007199254740993 is above 2^53-1',
      'id 18446744073709551615 is above 2^53-1',
      'id -9223372036854775808 is negative',
    ],
  );
});

/** A device's scripted path: positions in metres from the fence's centre and times in ms from T0. */
const PATHS: { id: string | number; steps: [eastM: number, northM: number, dtMs: number][] }[] = [
  // Through A and out: ENTER, EXIT.
  {
    id: IMEI,
    steps: [
      [-200, 0, 0],
      [0, 0, 1000],
      [200, 0, 2000],
    ],
  },
  // Stays in A past dwellMs: ENTER, DWELL, EXIT.
  {
    id: MAX_ID,
    steps: [
      [0, -200, 0],
      [0, 0, 1000],
      [5, 0, 2000],
      [0, 5, 3000],
      [0, 300, 4000],
    ],
  },
  // Jumps across A in one ping (600 m in 3 s: a plausible speed): CROSS.
  {
    id: UINT32_PAST,
    steps: [
      [-300, 10, 0],
      [300, 10, 3000],
    ],
  },
  // A string id with the IMEI's digits is another device: ENTER only.
  {
    id: String(IMEI),
    steps: [
      [0, -300, 0],
      [0, 20, 1000],
    ],
  },
  {
    id: 7,
    steps: [
      [-100, 0, 0],
      [10, 0, 1500],
      [100, 0, 3000],
    ],
  },
];

/** The scripted pings, interleaved by time, with integer speeds and headings and a float accuracy. */
function scriptedPings(): Ping[] {
  const out: (Ping & { order: number })[] = [];
  PATHS.forEach(({ id, steps }, d) => {
    steps.forEach(([eastM, northM, dtMs], k) => {
      const [lat, lon] = at(eastM, northM);
      out.push({
        id,
        lat,
        lon,
        ts: T0 + dtMs,
        speed: 3 + k,
        heading: (90 * k) % 360,
        accuracy: 4.5,
        order: dtMs * 10 + d,
      });
    });
  });
  return out.sort((a, b) => a.order - b.order).map(({ order: _order, ...p }) => p);
}

/** Triggers in a canonical order (by device as JSON, then seq), every field compared. */
function canonical(triggers: readonly Trigger[]): Trigger[] {
  const key = (t: Trigger): string => `${JSON.stringify(t.deviceId)}#${String(t.seq).padStart(12, '0')}`;
  return [...triggers].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** Runs `bytes` through a real router; returns the callback's triggers, the webhook's raw ids and the NDJSON text. */
async function routeThrough(
  bytes: Buffer,
): Promise<{ triggers: Trigger[]; webhook: Trigger[]; webhookRawIds: string[]; ndjson: string; rejected: number }> {
  const http = new TriggerServer();
  await http.start();
  const dir = mkdtempSync(join(tmpdir(), 'gr-interop-'));
  const ndjsonPath = join(dir, 'triggers.ndjson');
  const called: Trigger[] = [];
  const router = await createRouter({
    fences: { type: 'FeatureCollection', features: [square('A', 0, 0, 50, { dwellMs: 1500, tags: ['depot'] })] },
    listenHost: null,
    adminHost: null,
    shards: 2,
    poolSize: 1,
    ringCapacitySlots: 256,
    maxDevices: 100,
    stateDir: join(dir, 'state'),
    downstreams: [
      { name: 'cb', kind: 'callback', callback: (ts) => void called.push(...ts) },
      { name: 'hook', kind: 'webhook', url: http.url, limit: 1 },
      { name: 'file', kind: 'ndjson', path: ndjsonPath },
    ],
    log: () => undefined,
  });
  try {
    router.ingest(bytes);
    const summary = await router.close();
    return {
      triggers: called,
      webhook: http.received.slice(),
      webhookRawIds: http.rawDeviceIds,
      ndjson: readFileSync(ndjsonPath, 'utf8'),
      rejected: summary.rejectedTotal,
    };
  } finally {
    await router.close();
    await http.stop();
  }
}

test("through a real router, each encoder's frames produce exactly the triggers msgpackr frames produce, ids exact in every sink", async () => {
  const pings = scriptedPings();
  const runs = new Map<string, Awaited<ReturnType<typeof routeThrough>>>();
  for (const { name, frames } of ENCODERS) runs.set(name, await routeThrough(frames(pings)));
  const reference = canonical(runs.get('msgpackr')!.triggers);
  // What the script means, so agreeing on nothing cannot pass.
  assert.deepEqual(
    reference.map((t) => `${JSON.stringify(t.deviceId)} ${t.type} ${t.fenceId}`),
    [
      '"358240051111110" ENTER A',
      '358240051111110 ENTER A',
      '358240051111110 EXIT A',
      '4294967296 CROSS A',
      '7 ENTER A',
      '7 EXIT A',
      '9007199254740991 ENTER A',
      '9007199254740991 DWELL A',
      '9007199254740991 EXIT A',
    ],
  );
  for (const [name, run] of runs) {
    assert.equal(run.rejected, 0, `${name}: nothing rejected`);
    assert.deepEqual(canonical(run.triggers), reference, `${name}: the same triggers as msgpackr`);
    // Each sink, in the order it received them: every device's whole run, in seq order, with valid stays.
    const fromFile = run.ndjson
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Trigger);
    for (const [sink, got] of [
      ['callback', run.triggers],
      ['webhook', run.webhook],
      ['ndjson', fromFile],
    ] as const)
      assert.deepEqual(
        checkDeliveryContract(got, { complete: true, stays: true }).problems,
        [],
        `${name}: delivery contract at the ${sink} sink`,
      );
    // Webhook JSON and NDJSON carry the numeric ids as JSON numbers, every digit kept.
    const webhookIds = run.webhookRawIds.slice().sort();
    const ndjsonIds = [...run.ndjson.matchAll(/"deviceId":("(?:[^"\\]|\\.)*"|[0-9]+)/g)].map((m) => m[1]!).sort();
    const expectedIds = reference.map((t) => JSON.stringify(t.deviceId)).sort();
    assert.deepEqual(webhookIds, expectedIds, `${name}: webhook deviceIds`);
    assert.deepEqual(ndjsonIds, expectedIds, `${name}: NDJSON deviceIds`);
    assert.ok(
      ndjsonIds.includes('358240051111110') && ndjsonIds.includes('9007199254740991'),
      `${name}: ${ndjsonIds.join(' ')}`,
    );
  }
});
