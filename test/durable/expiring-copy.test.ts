/**
 * A device whose expiry was decided (RETIRING) but whose expiry record containment had not processed when the state
 * was copied: the copy keeps it, flagged expiring, and a restore from that copy gives it exactly what the expiry would
 * have given it (the same EXITs marked expired, under the same seqs, at its last position and time, then a cleared
 * state whose next ping starts new stays under the next seq), so a process killed before those EXITs were delivered
 * loses none of them. A device whose expiry was processed before the copy is left out (its EXITs were published before
 * the copy), as is a freed one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  CNT_BLOCK_F64,
  CNT_EXPIRY_EXITS_F64,
  DEV_ENTRY_COUNT_I32,
  DEV_HAS_LAST_I32,
  DEV_STRIDE_F64,
  DEV_STRIDE_I32,
  DEV_TRIGGER_SEQ_F64,
  DEVICE_LIFE_EPOCH_SHIFT,
  DeviceLife,
  RingKind,
  TRG_LANE_EXPIRED,
} from '../../src/shm/layout.js';
import { SpscRing } from '../../src/shm/ring.js';
import { DeviceState } from '../../src/fences/device-state.js';
import { ContainmentEngine } from '../../src/fences/engine.js';
import { buildFenceStore, FenceStore, parseFences } from '../../src/fences/index.js';
import { DeviceIdReader, preregisterDevices } from '../../src/ingest/device-registry.js';
import { allocatePipelineMemory, type PipelineMemory } from '../../src/pipeline/memory.js';
import { StateKeeper } from '../../src/pipeline/state-keeper.js';
import { resolveRouterOptions } from '../../src/config/options.js';
import { StateDirectory } from '../../src/durable/state-dir.js';
import {
  SEQ_EPOCH,
  decodeCheckpoint,
  DeviceStateCopy,
  encodeCheckpoint,
  writeCheckpointFile,
} from '../../src/durable/checkpoint.js';
import { at, collection, drain, expiryRecordRing, square, triggerRing, type ReadTrigger } from '../fences/helpers.js';

const FENCES = collection(
  square('a', 0, 0, 300),
  square('b', 0, 0, 100),
  square('c', 0, 0, 60, { compliance: true }),
  square('p', 0, 0, 30, { minInsideMs: 60_000 }),
  square('far', 5000, 0, 50),
);
const IDS = ['d0', 'd1', 'd2', 'd3'];
const EPOCH = 1;

function store(): FenceStore {
  return FenceStore.open(buildFenceStore(parseFences(FENCES), 1));
}

function memory(): PipelineMemory {
  return allocatePipelineMemory({
    shards: 1,
    ringCapacitySlots: 64,
    reservedFraction: 0.05,
    maxDevices: 16,
    idBytesPerSlot: 32,
    maxFencesPerDevice: 8,
    downstreams: 1,
  });
}

/** A trigger as a receiver would compare it: fence by id, lane with its expired bit, everything else as written. */
interface Seen {
  type: string;
  slot: number;
  fence: string;
  lane: number;
  seq: number;
  lat: number;
  lon: number;
  eventTimeMs: number;
  insideMs: number;
}

function seen(ts: ReadTrigger[], fenceId: (t: ReadTrigger) => string): Seen[] {
  return ts.map((t) => ({
    type: t.type,
    slot: t.slot,
    fence: fenceId(t),
    lane: t.lane,
    seq: t.seq,
    lat: t.lat,
    lon: t.lon,
    eventTimeMs: t.eventTimeMs,
    insideMs: t.insideMs,
  }));
}

/** Processes an expiry record for `slot` (life epoch `epoch`) as containment does; returns what it wrote. */
function expire(engine: ContainmentEngine, triggers: SpscRing, slot: number, epoch: number): ReadTrigger[] {
  const tel = expiryRecordRing(slot, epoch);
  engine.processBatch(tel, tel.readSeq(), 1, triggers);
  return drain(triggers);
}

/**
 * The running router's side: d0 inside a, b and c with p pending (ACTIVE); d1 the same (RETIRING, record not
 * processed); d2 inside a (RETIRING, record processed: state cleared); d3 outside every fence (RETIRING, not processed).
 */
function running() {
  const s = store();
  const mem = memory();
  preregisterDevices(mem.idTable, IDS);
  const ids = new DeviceIdReader(mem.idTable);
  const state = DeviceState.open(mem.deviceState);
  const counters = new Float64Array(2 * CNT_BLOCK_F64);
  const engine = new ContainmentEngine(s, state, counters, 0);
  engine.watchLifeWords(ids.lifeWords);
  const triggers = triggerRing();
  const ping = (slot: number, eastM: number, tMs: number): ReadTrigger[] => {
    const [lat, lon] = at(eastM, 0);
    engine.processPing(slot, lat, lon, tMs, tMs * 1e6, 1, triggers);
    return drain(triggers);
  };
  for (const slot of [0, 1, 2]) {
    ping(slot, -500, 1000);
    ping(slot, slot === 2 ? 200 : 0, 2000 + slot);
  }
  ping(1, 5, 3000);
  ping(3, 2000, 1500);
  const retiring = (EPOCH << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.RETIRING;
  for (const slot of [1, 2, 3]) Atomics.store(ids.lifeWords, slot, retiring);
  const d2Out = expire(engine, triggers, 2, EPOCH);
  assert.equal(d2Out.length, 2, 'd2: its expiry processed before the copy (an EXIT, then the retire marker)');
  assert.equal(d2Out[0]!.type, 'EXIT');
  return { s, mem, ids, state, engine, triggers, ping };
}

function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

test('a copy keeps a device whose expiry was decided but not processed, flagged expiring, and leaves out one whose expiry was', () => {
  const r = running();
  for (const live of [true, false]) {
    const copy = new DeviceStateCopy(16);
    if (live) assert.equal(copy.captureLive(r.state, IDS.length, r.s.generation, r.ids, Number.MAX_SAFE_INTEGER), true);
    else copy.capture(r.state, IDS.length, r.s.generation, r.ids);
    assert.deepEqual([...copy.live.subarray(0, 4)], [1, 1, 0, 1], `live (${live ? 'captureLive' : 'capture'})`);
    assert.deepEqual([...copy.expiring.subarray(0, 4)], [0, 1, 0, 1], `expiring (${live ? 'captureLive' : 'capture'})`);
    const cp = decodeCheckpoint(
      encodeCheckpoint(copy, r.ids, r.s, {
        seqFloor: 0,
        number: 1,
        pingsProcessed: 0,
        triggersProduced: 0,
        clean: true,
      }),
      'x',
    );
    assert.deepEqual(
      cp.devices.map((d) => [d.id, d.expiring, d.entries.length]),
      [
        ['d0', false, 4],
        ['d1', true, 4],
        ['d3', true, 0],
      ],
    );
    assert.ok(
      cp.seqFloor >= r.state.devF64[2 * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64]!,
      'the floor stays above the left-out device',
    );
  }
  // Without a reader of the life words (a copy of state alone) every device counts as live, none as expiring.
  const copy = new DeviceStateCopy(16);
  copy.capture(r.state, IDS.length, r.s.generation, null);
  assert.deepEqual([...copy.live.subarray(0, 4)], [1, 1, 1, 1]);
  assert.deepEqual([...copy.expiring.subarray(0, 4)], [0, 0, 0, 0]);
});

test('a restore from that copy gives the expiring device the EXITs and next stays its expiry would have given it, 2^32 above its seq when the floor is not raised', async () => {
  for (const expiry of ['exit', 'silent'] as const) {
    const r = running();
    const copy = new DeviceStateCopy(16);
    assert.equal(copy.captureLive(r.state, IDS.length, r.s.generation, r.ids, Number.MAX_SAFE_INTEGER), true);
    const bytes = encodeCheckpoint(copy, r.ids, r.s, {
      seqFloor: 0,
      number: 4,
      pingsProcessed: 0,
      triggersProduced: 0,
      clean: true,
    });
    // The running router goes on: d1's expiry record is processed, then d1 comes back inside a and b.
    const silentEngine = new ContainmentEngine(r.s, r.state, new Float64Array(CNT_BLOCK_F64), 0, {
      exitOnExpiry: false,
    });
    silentEngine.watchLifeWords(r.ids.lifeWords);
    const expired = expire(expiry === 'exit' ? r.engine : silentEngine, r.triggers, 1, EPOCH);
    const before = seen(
      expired.filter((t) => t.type === 'EXIT'),
      (t) => r.s.fenceId(t.fence),
    );
    assert.equal(before.length, expiry === 'exit' ? 3 : 0, 'a, b and c end; p was pending');
    Atomics.store(r.ids.lifeWords, 1, (EPOCH << DEVICE_LIFE_EPOCH_SHIFT) | DeviceLife.ACTIVE);
    const backBefore = seen(r.ping(1, 0, 90_000), (t) => r.s.fenceId(t.fence));

    // The process is gone before those EXITs were delivered; a new one restores the copy without raising the floor
    // (as a partition's fallback to its newest state does): the device's seqs move up by SEQ_EPOCH first.
    const dir = path.join(tmp('expiring-copy-'), 'state');
    fs.mkdirSync(dir, { recursive: true });
    await writeCheckpointFile(dir, bytes);
    const sd = StateDirectory.open(dir);
    const s = store();
    const fresh = memory();
    const keeper = StateKeeper.restore(sd, fresh, s, resolveRouterOptions({ stateDir: null, deviceExpiry: expiry }));
    assert.equal(keeper.report.restoredDevices, 3);
    assert.equal(keeper.report.expiringDevices, 2, 'd1 and d3');
    assert.equal(keeper.report.expiryExits, before.length);
    assert.equal(keeper.report.removedFenceExits, 0);
    const control = SpscRing.wrap(fresh.triggerRings[1]!, RingKind.TRIGGER);
    const counters = new Float64Array(fresh.containmentCounters);
    const base = fresh.shards * CNT_BLOCK_F64;
    assert.equal(keeper.writeRestoreExits(control, counters, base, new Int32Array(8)), before.length);
    const after = seen(drain(control), (t) => keeper.namesOnly!.ids[t.fence]!);
    const raised = (list: Seen[]): Seen[] => list.map((t) => ({ ...t, seq: t.seq + SEQ_EPOCH }));
    assert.deepEqual(after, raised(before), `${expiry}: the same EXITs, 2^32 above`);
    for (const t of after) assert.equal(t.lane & TRG_LANE_EXPIRED, TRG_LANE_EXPIRED, 'marked expired');
    assert.equal(counters[base + CNT_EXPIRY_EXITS_F64], before.length);

    const state = DeviceState.open(fresh.deviceState);
    const reader = new DeviceIdReader(fresh.idTable);
    assert.deepEqual(
      [0, 1, 2].map((d) => reader.deviceIdOf(d)),
      ['d0', 'd1', 'd3'],
    );
    assert.equal(state.devI32[1 * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32], 0, 'd1 cleared');
    assert.equal(state.devI32[1 * DEV_STRIDE_I32 + DEV_HAS_LAST_I32], 0);
    assert.equal(state.devI32[0 * DEV_STRIDE_I32 + DEV_ENTRY_COUNT_I32], 4, 'd0 keeps its stays');
    // d1 comes back: the restored router gives it what the running one did, its seqs 2^32 above.
    const engine = new ContainmentEngine(s, state, new Float64Array(CNT_BLOCK_F64), 0, {
      exitOnExpiry: expiry === 'exit',
    });
    const triggers = triggerRing();
    const [lat, lon] = at(0, 0);
    engine.processPing(1, lat, lon, 90_000, 90_000 * 1e6, 1, triggers);
    const backAfter = seen(drain(triggers), (t) => s.fenceId(t.fence));
    assert.ok(backBefore.length >= 3, 'ENTER a, b and c again');
    assert.deepEqual(backAfter, raised(backBefore), `${expiry}: the device's next stays, 2^32 above`);
    assert.equal(
      state.devF64[0 * DEV_STRIDE_F64 + DEV_TRIGGER_SEQ_F64],
      r.state.devF64[DEV_TRIGGER_SEQ_F64],
      'd0 not raised',
    );
    sd.release();
  }
});
