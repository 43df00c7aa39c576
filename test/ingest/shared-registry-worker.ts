/**
 * Worker of shared-registry.test.ts: one ingest thread's registry over a shared id table, registering a list of ids
 * as fast as it can, and answering with the slot it got for each.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { DeviceRegistry } from '../../src/ingest/device-registry.js';
import { PF_NUMERIC_ID_F64, type PingFields } from '../../src/ingest/ping-fields.js';

interface Job {
  table: SharedArrayBuffer;
  member: number;
  ids: (string | number)[];
  /** Passes over the ids (the later ones find them cached). */
  passes: number;
  /** Int32 cell both workers spin on, so they start together. */
  start: SharedArrayBuffer;
}

const job = workerData as Job;
const registry = new DeviceRegistry(job.table, 8, job.member, 3);
const values = new Float64Array(16);
const fields = { idIsNumber: false, idInBytes: false, idKey: '', values } as unknown as PingFields;
const go = new Int32Array(job.start);
Atomics.add(go, 0, 1);
while (Atomics.load(go, 0) < 2) {
  // Both workers spin here until the other is ready too.
}
const slots = new Int32Array(job.ids.length);
for (let pass = 0; pass < job.passes; pass++) {
  for (let i = 0; i < job.ids.length; i++) {
    const id = job.ids[i]!;
    fields.idIsNumber = typeof id === 'number';
    if (typeof id === 'number') values[PF_NUMERIC_ID_F64] = id;
    else fields.idKey = id;
    const slot = registry.slotOf(fields);
    if (pass > 0 && slot !== slots[i]) throw new Error(`id ${String(id)}: slot ${slot}, earlier ${slots[i]}`);
    slots[i] = slot;
  }
}
parentPort!.postMessage({ slots });
