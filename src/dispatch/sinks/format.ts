/**
 * JSON formatting of triggers for the NDJSON and webhook sinks, with names supplied by a `TriggerNamer` (implemented
 * by the wiring from the device registry and the fence store).
 */
import { LANE_NAMES, TRIGGER_TYPE_NAMES } from '../../shm/layout.js';
import type { TriggerBatch } from './trigger-batch.js';

/** Turns the dense numbers of a trigger record into the names receivers know. */
export interface TriggerNamer {
  /** The device's external id for a dense device slot. */
  deviceId(slot: number): string;
  /** The fence's id for a fence index within a fence-store generation. */
  fenceId(generation: number, index: number): string;
  /** The fence's tags (e.g. "compliance"). */
  fenceTags(generation: number, index: number): readonly string[];
}

/** A namer that names by number (`device-<slot>`, `fence-<generation>-<index>`, no tags): tests and fallbacks. */
export class IndexNamer implements TriggerNamer {
  /** `device-<slot>`. */
  deviceId(slot: number): string {
    return `device-${slot}`;
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
 * JSON object of record `i`:
 * `{"type","deviceId","fenceId","tags","lane","lat","lon","eventTimeMs","seq","insideMs","replay"}`.
 */
export function triggerJson(batch: TriggerBatch, i: number, namer: TriggerNamer): string {
  const gen = batch.generation(i);
  const fence = batch.fenceIndex(i);
  return JSON.stringify({
    type: TRIGGER_TYPE_NAMES[batch.type(i)] ?? String(batch.type(i)),
    deviceId: namer.deviceId(batch.deviceSlot(i)),
    fenceId: namer.fenceId(gen, fence),
    tags: namer.fenceTags(gen, fence),
    lane: LANE_NAMES[batch.lane(i)] ?? String(batch.lane(i)),
    lat: batch.lat(i),
    lon: batch.lon(i),
    eventTimeMs: batch.eventTimeMs(i),
    seq: batch.seq(i),
    insideMs: batch.insideMs(i),
    replay: batch.replay,
  });
}

/** JSON array of every record in the batch. */
export function batchJson(batch: TriggerBatch, namer: TriggerNamer): string {
  let s = '[';
  for (let i = 0; i < batch.count; i++) s += (i === 0 ? '' : ',') + triggerJson(batch, i, namer);
  return s + ']';
}
