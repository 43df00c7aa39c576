/**
 * Naming and JSON formatting of triggers: the `TriggerNamer` the dispatcher is given (device ids by slot, fences by
 * store generation and index), a numbering namer for tests and benchmarks, and the JSON object every sink writes.
 */
import { LANE_NAMES, TRIGGER_TYPE_NAMES } from '../../shm/layout.js';
import type { FenceNames } from '../fence-catalog.js';
import type { TriggerBatch } from './trigger-batch.js';

/**
 * Turns the dense numbers of a trigger record into the names receivers know. The device part is read by slot (and,
 * for durable records, byte by byte without allocating); the fence part by store generation and index.
 */
export interface TriggerNamer extends FenceNames {
  /** The device's id as it sent it: a string, or an unsigned integer. */
  deviceId(slot: number): string | number;
  /** True when the device's id is an unsigned integer. */
  isNumeric(slot: number): boolean;
  /** Writes the numeric id (meaningful when `isNumeric`) into `dst[index]`. Allocation-free. */
  copyNumericId(slot: number, dst: Float64Array, index: number): void;
  /** Copies the UTF-8 bytes of a string id to `dst` at `at`; returns the count. Allocation-free. */
  copyIdBytes(slot: number, dst: Uint8Array, at: number): number;
}

const DEVICE_PREFIX = [0x64, 0x65, 0x76, 0x69, 0x63, 0x65, 0x2d]; // "device-"

/**
 * A namer that names by number: device slot s is the string `device-<s>`, fence i of generation g is `fence-<g>-<i>`
 * with no tags. Tests and benchmarks.
 */
export class IndexNamer implements TriggerNamer {
  /** `device-<slot>`. */
  deviceId(slot: number): string {
    return `device-${slot}`;
  }
  /** Always false. */
  isNumeric(_slot: number): boolean {
    return false;
  }
  /** Writes -1 (no numeric ids). */
  copyNumericId(_slot: number, dst: Float64Array, index: number): void {
    dst[index] = -1;
  }
  /** The bytes of `device-<slot>`, written without allocating. */
  copyIdBytes(slot: number, dst: Uint8Array, at: number): number {
    for (let k = 0; k < DEVICE_PREFIX.length; k++) dst[at + k] = DEVICE_PREFIX[k]!;
    let digits = 1;
    for (let v = slot; v >= 10; v = Math.floor(v / 10)) digits++;
    let v = slot;
    for (let k = digits - 1; k >= 0; k--) {
      dst[at + DEVICE_PREFIX.length + k] = 0x30 + (v % 10);
      v = Math.floor(v / 10);
    }
    return DEVICE_PREFIX.length + digits;
  }
  /** `fence-<generation>-<index>`. */
  fenceId(generation: number, index: number): string {
    return `fence-${generation}-${index}`;
  }
  /** No tags. */
  fenceTags(_generation: number, _index: number): readonly string[] {
    return [];
  }
}

/**
 * JSON object of record `i`: `{"type","deviceId","fenceId","tags","lane","lat","lon","eventTimeMs","seq","insideMs",
 * "replay"}`, plus `"reason":"expired"` on an EXIT written because the device expired; `deviceId` is a JSON number
 * for a numeric id and a string otherwise.
 */
export function triggerJson(batch: TriggerBatch, i: number): string {
  const id = batch.deviceId(i);
  return (
    `{"type":"${TRIGGER_TYPE_NAMES[batch.type(i)] ?? String(batch.type(i))}"` +
    `,"deviceId":${typeof id === 'number' ? String(id) : JSON.stringify(id)}` +
    `,${batch.names.fenceJson(batch.fenceHandle(i))}` +
    `,"lane":"${LANE_NAMES[batch.lane(i)] ?? String(batch.lane(i))}"` +
    `,"lat":${batch.lat(i)},"lon":${batch.lon(i)},"eventTimeMs":${batch.eventTimeMs(i)}` +
    `,"seq":${batch.seq(i)},"insideMs":${batch.insideMs(i)},"replay":${batch.replay(i) ? 'true' : 'false'}` +
    (batch.expired(i) ? ',"reason":"expired"}' : '}')
  );
}

/** JSON array of the batch's records `from` (inclusive) to `to` (exclusive); by default every record. */
export function batchJson(batch: TriggerBatch, from = 0, to = batch.count): string {
  let s = '[';
  for (let i = from; i < to; i++) s += (i === from ? '' : ',') + triggerJson(batch, i);
  return s + ']';
}
