/**
 * JetStream publisher (its own process): publishes a seeded fleet's pings, one a message, to
 * `telemetry.<partition>.<deviceId>` at a set rate for a set time, each ping's time the wall clock at publish, and
 * prints one JSON summary line on stdout (the rate achieved, this process's CPU).
 *
 *   node dist/bench/loadgen/jetstream-publisher.js --url nats://127.0.0.1:4222 --rate 20000 --seconds 10
 */
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { partitionSubject } from '../../src/ingest/sources/partitions.js';
import { encodePingInto, MAX_PING_BYTES } from '../../src/ingest/ping-encoder.js';
import { Fleet, type FleetPing } from '../../src/fences/synthetic-fleet.js';

const { values } = parseArgs({
  options: {
    url: { type: 'string', default: 'nats://127.0.0.1:4222' },
    rate: { type: 'string', default: '20000' },
    seconds: { type: 'string', default: '10' },
    devices: { type: 'string', default: '10000' },
    partitions: { type: 'string', default: '16' },
    seed: { type: 'string', default: '4' },
  },
});
const rate = Number(values.rate);
const total = rate * Number(values.seconds);
const partitions = Number(values.partitions);
const nc = await connect({ servers: values.url });
const js = jetstream(nc);
const fleet = new Fleet({ devices: Number(values.devices), seed: Number(values.seed) });
const ping: FleetPing = { id: '', lat: 0, lon: 0, ts: 0, speed: 0, heading: 0, accuracy: 5 };
const buf = Buffer.alloc(MAX_PING_BYTES);
const cpu0 = process.cpuUsage();
const start = performance.now();
let sent = 0;
const acks: Promise<unknown>[] = [];
while (sent < total) {
  const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate) + 1);
  while (sent < due) {
    fleet.next(ping, Date.now());
    const end = encodePingInto(buf, 0, ping, 'maps');
    acks.push(js.publish(partitionSubject('telemetry', ping.id, partitions), Buffer.from(buf.subarray(0, end))));
    sent++;
  }
  if (acks.length >= 1000) await Promise.all(acks.splice(0));
  await new Promise((r) => setTimeout(r, 1));
}
await Promise.all(acks);
const wallMs = performance.now() - start;
const cpu = process.cpuUsage(cpu0);
await nc.close();
console.log(
  JSON.stringify({
    sent,
    achievedPerSec: Math.round((sent / wallMs) * 1000),
    cpuCores: Math.round(((cpu.user + cpu.system) / 1000 / wallMs) * 100) / 100,
  }),
);
