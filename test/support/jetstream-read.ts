/** Reading a JetStream stream back in tests: every message, in stream order. */
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { Trigger } from '../../src/index.js';

/**
 * Every message of `stream`, in stream order, with its subject (read as the user `credentials` name, if any). Fails,
 * naming how far it got, when the messages the stream counts do not all come within `timeoutMs`.
 */
export async function readStream(
  url: string,
  stream: string,
  credentials: { user?: string; pass?: string } = {},
  timeoutMs = 30_000,
): Promise<{ subject: string; trigger: Trigger }[]> {
  const nc = await connect({ servers: url, ...credentials });
  try {
    const jsm = await jetstreamManager(nc);
    const total = (await jsm.streams.info(stream)).state.messages;
    const consumer = await jetstream(nc).consumers.get(stream);
    const out: { subject: string; trigger: Trigger }[] = [];
    const end = Date.now() + timeoutMs;
    while (out.length < total) {
      if (Date.now() > end) throw new Error(`stream ${stream}: read ${out.length} of its ${total} messages`);
      const batch = await consumer.fetch({ max_messages: 1000, expires: 2000 });
      for await (const m of batch) out.push({ subject: m.subject, trigger: m.json<Trigger>() });
    }
    return out;
  } finally {
    await nc.close();
  }
}
