/**
 * A batch's messages lined up by device, for sinks whose server answers each message and may refuse one for the
 * moment while it takes the next (an MQTT 5 broker, a JetStream stream): such a sink publishes a device's next message
 * only once the one before is answered for good, so one that is sent again never arrives behind its device's later
 * triggers. Messages of different devices go out together.
 */
import type { TriggerBatch } from './trigger-batch.js';

/** The messages of a batch by device (see the module comment). */
export interface DeviceChains {
  /** For message i, the index of its device's next message in the batch; -1: none. */
  readonly next: Int32Array;
  /** The first message of each device, in batch order: those that may go at once. */
  readonly firsts: number[];
}

/** Lines up the messages of `batch` by device. Allocates (the sinks that use it allocate per message anyway). */
export function deviceChains(batch: TriggerBatch): DeviceChains {
  const next = new Int32Array(batch.count).fill(-1);
  const firsts: number[] = [];
  const lastOfDevice = new Map<number, number>();
  for (let i = 0; i < batch.count; i++) {
    const device = batch.deviceSlot(i);
    const last = lastOfDevice.get(device);
    if (last === undefined) firsts.push(i);
    else next[last] = i;
    lastOfDevice.set(device, i);
  }
  return { next, firsts };
}

/**
 * The indexes of a batch of `count` messages not among the first `sentCount` of `sent` (the messages published, in
 * publishing order), increasing: what a failed batch reports as SinkResult.unsent.
 */
export function unsentOf(count: number, sent: readonly number[], sentCount: number): number[] {
  const was = new Uint8Array(count);
  for (let j = 0; j < sentCount; j++) was[sent[j]!] = 1;
  const out: number[] = [];
  for (let i = 0; i < count; i++) if (was[i] === 0) out.push(i);
  return out;
}
