/**
 * The state directory's lock, the device-state checkpoint format, and the restore: by device id and fence id, the
 * seq floor after clean and unclean stops, EXITs for fences that are gone.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DEV_ENTRY_COUNT_I32,
  DEV_GENERATION_I32,
  DEV_HAS_LAST_I32,
  DEV_LAST_EVENT_MS_F64,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  ENTRY_FENCE_I32,
  ENTRY_SINCE_MS_F64,
  ENTRY_STATE_I32,
  ENTRY_STRIDE_F64,
  ENTRY_STRIDE_I32,
  EntryState,
  Lane,
  RingKind,
  TriggerType,
} from '../../src/shm/layout.js';
import { DeviceState } from '../../src/fences/device-state.js';
import { buildFenceStore, FenceStore, parseFences } from '../../src/fences/index.js';
import { DeviceIdReader, preregisterDevices } from '../../src/ingest/device-registry.js';
import { allocatePipelineMemory } from '../../src/pipeline/memory.js';
import { StateKeeper } from '../../src/pipeline/state-keeper.js';
import { resolveRouterOptions, type RouterOptionsInput } from '../../src/config/options.js';
import { FenceCatalog } from '../../src/dispatch/fence-catalog.js';
import { IndexNamer } from '../../src/dispatch/sinks/format.js';
import { FILE_HEADER_BYTES, TREC_MAX_BYTES } from '../../src/durable/file-layout.js';
import { SetAsideFiles } from '../../src/durable/set-aside-files.js';
import { RecordBuffer, TriggerCodec } from '../../src/durable/trigger-codec.js';
import { dispatchRecord, namerIdentity, TriggerRecord } from '../dispatch/fixtures.js';
import {
  CHECKPOINT_FILE,
  decodeCheckpoint,
  DeviceStateCopy,
  encodeCheckpoint,
  encodeCheckpointSliced,
  readLatestCheckpoint,
  SEQ_EPOCH,
  writeCheckpointFile,
} from '../../src/durable/checkpoint.js';
import { StateDirectory, StateDirectoryInUseError } from '../../src/durable/state-dir.js';
import { SpscRing } from '../../src/shm/ring.js';
import { collection, readTrigger, square } from '../fences/helpers.js';

function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

test('state directory: one process at a time; a lock left by a dead process means an unclean stop', () => {
  const dir = path.join(tmp('state-lock-'), 'state');
  const a = StateDirectory.open(dir);
  assert.equal(a.previousStop, 'none');
  assert.throws(
    () => StateDirectory.open(dir),
    (err: unknown) =>
      err instanceof StateDirectoryInUseError && err.message.includes(dir) && err.message.includes(String(process.pid)),
  );
  a.release();
  fs.writeFileSync(path.join(dir, CHECKPOINT_FILE), 'x');
  const b = StateDirectory.open(dir);
  assert.equal(b.previousStop, 'clean', 'no lock left and a checkpoint there');
  b.release();
  // A lock whose owner has exited: taken over, and reported.
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  fs.writeFileSync(path.join(dir, 'LOCK'), JSON.stringify({ pid: Number(dead.stdout), startTicks: null }));
  const c = StateDirectory.open(dir);
  assert.equal(c.previousStop, 'unclean');
  assert.equal(c.previousPid, Number(dead.stdout));
  c.release();
  // Our own pid with another start time: a restart that got the same pid (a container's), not a live owner.
  fs.writeFileSync(path.join(dir, 'LOCK'), JSON.stringify({ pid: process.pid, startTicks: 'earlier' }));
  const e = StateDirectory.open(dir);
  assert.equal(e.previousStop, 'unclean');
  e.release();
  const file = path.join(tmp('state-file-'), 'a-file');
  fs.writeFileSync(file, 'not a directory');
  assert.throws(
    () => StateDirectory.open(path.join(file, 'state')),
    (err: unknown) => (err as Error).message.startsWith(`state directory ${path.join(file, 'state')}: `),
  );
});

/** A store of `ids` (squares along a row), generation `generation`. */
function store(ids: string[], generation = 1): FenceStore {
  return FenceStore.open(
    buildFenceStore(
      parseFences(
        collection(
          ...ids.map((id, i) => square(id, i * 500, 0, 100, id === 'C' ? { compliance: true, tags: ['port'] } : {})),
        ),
      ),
      generation,
    ),
  );
}

/** Memory with devices `ids`, each inside fence index `f` (INSIDE, DWELL fired for the first), last seq `seq`. */
function memoryWith(
  ids: (string | number)[],
  s: FenceStore,
  fenceOf: (i: number) => number,
  seq: (i: number) => number,
  maxDevices = 16,
) {
  const memory = allocatePipelineMemory({
    shards: 1,
    ringCapacitySlots: 64,
    reservedFraction: 0.05,
    maxDevices,
    idBytesPerSlot: 32,
    maxFencesPerDevice: 4,
    downstreams: 1,
  });
  preregisterDevices(memory.idTable, ids);
  const state = DeviceState.open(memory.deviceState);
  ids.forEach((_, d) => {
    state.devF64[d * DEV_STRIDE_F64 + DEV_LAST_EVENT_MS_F64] = 5000 + d;
    state.devF64[d * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64] = seq(d);
    state.devI32[d * DEV_STRIDE_I32 + DEV_HAS_LAST_I32] = 1;
    state.devI32[d * DEV_STRIDE_I32 + DEV_GENERATION_I32] = s.generation;
    state.devI32[d * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32] = 1;
    const e = state.entryIndex(d, 0);
    state.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_FENCE_I32] = fenceOf(d);
    state.entryI32[e * ENTRY_STRIDE_I32 + ENTRY_STATE_I32] = EntryState.INSIDE | (d === 0 ? EntryState.DWELL_FIRED : 0);
    state.entryF64[e * ENTRY_STRIDE_F64 + ENTRY_SINCE_MS_F64] = 1000;
  });
  return { memory, state };
}

/** Pipeline memory for 4 devices with ids of up to `idBytesPerSlot` bytes, 2 fences each, one shard, one downstream. */
function smallMemory(idBytesPerSlot: number): ReturnType<typeof allocatePipelineMemory> {
  return allocatePipelineMemory({
    shards: 1,
    ringCapacitySlots: 64,
    reservedFraction: 0.05,
    maxDevices: 4,
    idBytesPerSlot,
    maxFencesPerDevice: 2,
    downstreams: 1,
  });
}

test('a state directory whose checkpoints are all unreadable is refused, naming it (seqs could not be shown to continue)', () => {
  const dir = path.join(tmp('state-bad-'), 'state');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, CHECKPOINT_FILE), Buffer.alloc(64, 1));
  const sd = StateDirectory.open(dir);
  const memory = smallMemory(8);
  assert.throws(
    () => StateKeeper.restore(sd, memory, store(['A']), resolveRouterOptions({ stateDir: null })),
    new RegExp(`state directory ${dir}: no readable checkpoint`),
  );
  sd.release();
});

test('checkpoint: devices by id (42 and "42" apart), entries by fence id; a damaged file falls back to the previous one', async () => {
  const s = store(['A', 'B', 'C']);
  const ids = ['truck-1', 42, '42'];
  const { memory, state } = memoryWith(
    ids,
    s,
    (d) => d,
    (d) => 10 + d,
  );
  const copy = new DeviceStateCopy(16);
  copy.capture(state, 3, s.generation);
  const bytes = encodeCheckpoint(copy, new DeviceIdReader(memory.idTable), s, {
    seqFloor: 0,
    number: 7,
    pingsProcessed: 123,
    triggersProduced: 45,
    clean: true,
  });
  const cp = decodeCheckpoint(bytes, 'x');
  assert.deepEqual(
    cp.devices.map((d) => d.id),
    ['truck-1', 42, '42'],
  );
  assert.deepEqual(
    cp.devices.map((d) => d.seq),
    [10, 11, 12],
  );
  assert.deepEqual(
    cp.devices.map((d) => cp.fences[d.entries[0]!.fence]!.id),
    ['A', 'B', 'C'],
  );
  assert.equal(cp.devices[0]!.entries[0]!.state, EntryState.INSIDE | EntryState.DWELL_FIRED);
  assert.deepEqual(
    cp.fences.find((f) => f.id === 'C'),
    { id: 'C', tags: ['port'], compliance: true },
  );
  assert.equal(cp.clean, true);
  assert.equal(cp.number, 7);
  const dir = tmp('ckpt-');
  await writeCheckpointFile(dir, bytes);
  await writeCheckpointFile(dir, bytes.slice(0, bytes.length - 8));
  assert.throws(
    () => decodeCheckpoint(fs.readFileSync(path.join(dir, CHECKPOINT_FILE)), 'cur'),
    /cur: checkpoint is damaged/,
  );
  const problems: string[] = [];
  const back = readLatestCheckpoint(dir, problems);
  assert.equal(back?.number, 7, 'the previous checkpoint serves');
  assert.match(problems[0]!, /checkpoint\.bin: checkpoint is damaged/);
});

test('restore: after a clean stop seq continues; after an unclean one every device starts above a floor raised by 2^32; a device inside a fence that is gone gets an EXIT', async () => {
  const before = store(['A', 'B', 'C']);
  const ids = ['d0', 'd1', 'd2'];
  const { memory, state } = memoryWith(
    ids,
    before,
    (d) => d,
    (d) => 100 * (d + 1),
  );
  const copy = new DeviceStateCopy(16);
  copy.capture(state, 3, before.generation);
  const options = resolveRouterOptions({ stateDir: null });
  for (const [stop, expectSeq] of [
    ['clean', [100, 200, 300]],
    ['unclean', [300 + SEQ_EPOCH, 300 + SEQ_EPOCH, 300 + SEQ_EPOCH]],
  ] as const) {
    const dir = path.join(tmp('restore-'), 'state');
    fs.mkdirSync(dir, { recursive: true });
    await writeCheckpointFile(
      dir,
      encodeCheckpoint(copy, new DeviceIdReader(memory.idTable), before, {
        seqFloor: 0,
        number: 3,
        pingsProcessed: 0,
        triggersProduced: 0,
        clean: true,
      }),
    );
    if (stop === 'unclean')
      fs.writeFileSync(path.join(dir, 'LOCK'), JSON.stringify({ pid: 2 ** 22 + 12345, startTicks: null }));
    const sd = StateDirectory.open(dir);
    // The new fences file: B is gone, the others reordered.
    const after = store(['C', 'A'], 1);
    const fresh = allocatePipelineMemory({
      shards: 1,
      ringCapacitySlots: 64,
      reservedFraction: 0.05,
      maxDevices: 16,
      idBytesPerSlot: 32,
      maxFencesPerDevice: 4,
      downstreams: 1,
    });
    const keeper = StateKeeper.restore(sd, fresh, after, options);
    assert.equal(keeper.report.previousStop, stop);
    assert.equal(keeper.report.restoredDevices, 3);
    const restored = DeviceState.open(fresh.deviceState);
    const reader = new DeviceIdReader(fresh.idTable);
    assert.deepEqual(
      [0, 1, 2].map((d) => reader.deviceIdOf(d)),
      ids,
    );
    // d1 was inside B, which is gone: its EXIT takes the next seq, the others keep their stays under the new indices.
    const seqs = [0, 1, 2].map((d) => restored.devF64[d * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!);
    assert.deepEqual(seqs, [expectSeq[0], expectSeq[1] + 1, expectSeq[2]]);
    assert.equal(restored.isInside(0, after.indexOfId('A')), true);
    assert.equal(
      restored.entryStateOf(0, after.indexOfId('A')) & EntryState.DWELL_FIRED,
      EntryState.DWELL_FIRED,
      'DWELL stays fired for the stay',
    );
    assert.equal(restored.entryCount(1), 0);
    assert.equal(restored.isInside(2, after.indexOfId('C')), true);
    assert.equal(restored.insideCompliance(2), true);
    assert.equal(
      restored.devF64[5 * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64],
      keeper.report.seqFloor,
      'a device not yet seen starts at the floor',
    );
    assert.equal(keeper.report.removedFenceExits, 1);
    assert.deepEqual(keeper.namesOnly?.ids, ['A', 'B', 'C']);
    const ring = SpscRing.wrap(fresh.triggerRings[1]!, RingKind.TRIGGER);
    assert.equal(keeper.writeRestoreExits(ring, new Float64Array(fresh.containmentCounters), 0, after.untracked), 1);
    const exit = readTrigger(ring, 0);
    assert.equal(exit.type, 'EXIT');
    assert.equal(exit.slot, 1);
    assert.equal(keeper.namesOnly!.ids[exit.fence], 'B', 'named by the checkpoint, whose fences file lost it');
    assert.equal(exit.seq, seqs[1]);
    sd.release();
  }
});

test('the sliced checkpoint encoding writes the same bytes as the one-piece one, the event loop running between slices', async () => {
  const s = store(['A', 'B', 'C']);
  const DEVICES = 20_000;
  const ids = Array.from({ length: DEVICES }, (_, i) => (i % 4 === 0 ? 100_000_000_000_000 + i : `dev-${i}`));
  const { memory, state } = memoryWith(
    ids,
    s,
    (d) => d % 3,
    (d) => d + 1,
    DEVICES,
  );
  const copy = new DeviceStateCopy(DEVICES);
  copy.capture(state, DEVICES, s.generation);
  const reader = new DeviceIdReader(memory.idTable);
  const meta = { seqFloor: 0, number: 3, pingsProcessed: 1, triggersProduced: 2, clean: false };
  const whole = encodeCheckpoint(copy, reader, s, meta);
  // Count event-loop turns while the sliced encoding runs: setImmediate callbacks run only between its slices.
  let turns = 0;
  let running = true;
  const turn = (): void => {
    if (!running) return;
    turns++;
    setImmediate(turn);
  };
  setImmediate(turn);
  const slices = { count: 0 };
  const sliced = await encodeCheckpointSliced(copy, reader, s, meta, { slices, sliceMs: 0 });
  running = false;
  assert.ok(Buffer.from(sliced).equals(Buffer.from(whole)), 'the same bytes');
  // Two passes over the devices, a slice after every 1,024 of each.
  assert.ok(slices.count >= 2 * Math.floor(DEVICES / 1024), `${slices.count} slices`);
  assert.ok(turns >= slices.count - 2, `${turns} event-loop turns between ${slices.count} slices`);
  assert.equal(decodeCheckpoint(sliced, 'x').devices.length, DEVICES);
});

test("restore: a device and a run id named only by a downstream's set-aside file (held backlog records a crash left) are registered, so the dispatcher can carry its triggers over", () => {
  const dir = path.join(tmp('restore-set-aside-'), 'state');
  const hookDir = path.join(dir, 'downstreams', 'hook');
  fs.mkdirSync(hookDir, { recursive: true });
  // One record of device slot 7 ("device-7") written by run 41, in a set-aside file of downstream "hook".
  const namer = new IndexNamer();
  const catalog = new FenceCatalog(namer);
  const codec = new TriggerCodec(
    41,
    { ...namerIdentity(namer), fenceIdBytes: (h) => catalog.idBytes(h), fenceTagsBytes: (h) => catalog.tagsBytes(h) },
    0,
  );
  const rec = dispatchRecord(
    new TriggerRecord().set(5, TriggerType.ENTER, Lane.TRANSITION, 1, 7),
    catalog.handleOf(1, 1),
  );
  const buf = new RecordBuffer(FILE_HEADER_BYTES + TREC_MAX_BYTES);
  const length = codec.encode(rec.f64, rec.i32, 0, 0, buf, FILE_HEADER_BYTES, buf.byteLength, 0);
  assert.equal(new SetAsideFiles(hookDir, 'hook').write(buf, FILE_HEADER_BYTES + length, 1), 1);
  const sd = StateDirectory.open(dir);
  const memory = smallMemory(16);
  const options = resolveRouterOptions({
    stateDir: null,
    downstreams: [{ kind: 'ndjson', name: 'hook', path: '-' }],
  } as RouterOptionsInput);
  const keeper = StateKeeper.restore(sd, memory, store(['A']), options);
  assert.equal(new DeviceIdReader(memory.idTable).deviceIdOf(0), 'device-7');
  assert.ok(keeper.checkpointNumber >= 41, `run ids go on above 41: ${keeper.checkpointNumber}`);
  sd.release();
});
