/**
 * The delivery contract as a receiver checks it, for every test that delivers triggers: per device, triggers arrive
 * in strictly increasing seq; no (deviceId, seq) names two different triggers; and, where the receiver subscribes to
 * everything, nothing is missing (seq runs 1, 2, 3, ... per device in one run) and the stays are valid (ENTER before
 * EXIT, no EXIT without ENTER, at most one DWELL per stay).
 */
import type { Trigger } from '../../src/dispatch/trigger.js';

/** What a contract check found. */
export interface ContractReport {
  /** Triggers examined. */
  triggers: number;
  /** Devices seen (42 and "42" apart). */
  devices: number;
  /** Problems, each naming the device and the trigger (empty: the contract holds). */
  problems: string[];
}

/** The identity of a trigger's content, to tell a re-delivery (same content) from a reused (deviceId, seq). */
export function contentOf(t: Trigger): string {
  return `${t.type} ${t.fenceId} ${t.eventTimeMs} ${t.lat} ${t.lon} ${t.insideMs}`;
}

/** Options of checkDeliveryContract. */
export interface ContractOptions {
  /** The receiver gets every trigger of every device, from its first: seq must run 1, 2, 3, ... with no gap. */
  complete?: boolean;
  /** Re-deliveries of a trigger already received (same deviceId, seq and content) are allowed and skipped. */
  allowRedelivery?: boolean;
  /** Check that the stays are valid (needs every trigger of a device). */
  stays?: boolean;
  /** At most this many problems are listed. */
  maxProblems?: number;
}

/** Checks `received` (in arrival order) against the delivery contract; see the module comment. */
export function checkDeliveryContract(received: readonly Trigger[], options: ContractOptions = {}): ContractReport {
  const max = options.maxProblems ?? 20;
  const problems: string[] = [];
  const note = (p: string): void => {
    if (problems.length < max) problems.push(p);
  };
  const byDevice = new Map<string | number, Trigger[]>();
  const seen = new Map<string, string>();
  for (const t of received) {
    const key = `${JSON.stringify(t.deviceId)}/${t.seq}`;
    const content = contentOf(t);
    const before = seen.get(key);
    if (before !== undefined) {
      if (before !== content)
        note(`device ${JSON.stringify(t.deviceId)} seq ${t.seq} names two triggers: ${before} / ${content}`);
      else if (options.allowRedelivery !== true)
        note(`device ${JSON.stringify(t.deviceId)} seq ${t.seq} arrived twice`);
      continue;
    }
    seen.set(key, content);
    let list = byDevice.get(t.deviceId);
    if (list === undefined) byDevice.set(t.deviceId, (list = []));
    list.push(t);
  }
  for (const [device, list] of byDevice) {
    const name = JSON.stringify(device);
    let last = -Infinity;
    for (const t of list) {
      if (!(t.seq > last)) note(`device ${name}: seq ${t.seq} arrived after seq ${last}`);
      last = Math.max(last, t.seq);
    }
    if (options.complete === true) {
      const seqs = list.map((t) => t.seq).sort((a, b) => a - b);
      for (let i = 0; i < seqs.length; i++) {
        if (seqs[i] !== i + 1) {
          note(`device ${name}: seq ${i + 1} missing (has ${seqs.slice(Math.max(0, i - 2), i + 3).join(',')})`);
          break;
        }
      }
    }
    if (options.stays === true) {
      const inside = new Map<string, boolean>();
      for (const t of [...list].sort((a, b) => a.seq - b.seq)) {
        const dwelled = inside.get(t.fenceId);
        if (t.type === 'ENTER') {
          if (dwelled !== undefined) note(`device ${name}: ENTER ${t.fenceId} (seq ${t.seq}) while inside`);
          inside.set(t.fenceId, false);
        } else if (t.type === 'EXIT') {
          if (dwelled === undefined) note(`device ${name}: EXIT ${t.fenceId} (seq ${t.seq}) without ENTER`);
          inside.delete(t.fenceId);
        } else if (t.type === 'DWELL') {
          if (dwelled === undefined) note(`device ${name}: DWELL ${t.fenceId} (seq ${t.seq}) outside`);
          else if (dwelled) note(`device ${name}: second DWELL ${t.fenceId} (seq ${t.seq}) in one stay`);
          inside.set(t.fenceId, true);
        }
      }
    }
  }
  return { triggers: received.length, devices: byDevice.size, problems };
}
