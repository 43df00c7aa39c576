/**
 * Options are refused where they could have no effect, never silently ignored; flags change only what they name; a
 * secret in the environment does not stop a start that has no webhook flag; a watermark of 0 does not stop pausable
 * input for good; an input file that cannot be read is refused at start, naming it.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { resolveRouterOptions, type RouterOptionsInput } from '../../src/config/options.js';
import { ReadableSource } from '../../src/ingest/sources/stream-source.js';
import { createRouter } from '../../src/index.js';
import type { IngestEdge } from '../../src/ingest/ingest-edge.js';
import { waitFor, within } from '../pipeline/support.js';

/** The message resolveRouterOptions refuses `input` with. */
function refusal(input: RouterOptionsInput): string {
  try {
    resolveRouterOptions(input);
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
  return 'accepted';
}

test('a trigger stream refuses the options it cannot use (attempts, breaker, replay), naming each', () => {
  for (const [k, v] of [
    ['maxAttempts', 5],
    ['replay', false],
    ['replayGiveUpMs', 1000],
    ['breaker', { windowSize: 20 }],
  ] as const) {
    assert.match(
      refusal({ stateDir: null, downstreams: [{ name: 's', kind: 'stream', [k]: v }] }),
      new RegExp(`^OptionError: options\\.downstreams\\[0\\]\\.${k} has no effect on a trigger stream: `),
      k,
    );
  }
  assert.equal(
    refusal({ stateDir: null, downstreams: [{ name: 's', kind: 'stream', maxQueueAgeMs: 60_000 }] }),
    'accepted',
  );
});

test('replayGiveUpMs without the replay lane, and a fixed limit above the safety cap, are refused', () => {
  const hook = { name: 'h', kind: 'webhook' as const, url: 'http://127.0.0.1:9/x' };
  assert.match(
    refusal({ stateDir: null, downstreams: [{ ...hook, replay: false, replayGiveUpMs: 5000 }] }),
    /^OptionError: options\.downstreams\[0\]\.replayGiveUpMs applies only with the replay lane, and options\.downstreams\[0\]\.replay is false$/,
  );
  assert.equal(refusal({ stateDir: null, downstreams: [{ ...hook, replay: false }] }), 'accepted');
  assert.match(
    refusal({ stateDir: null, downstreams: [{ ...hook, limit: 1000 }] }),
    /^OptionError: options\.downstreams\[0\]\.limit 1000 is above options\.downstreams\[0\]\.safetyCap 256, which bounds every limit/,
  );
  assert.equal(refusal({ stateDir: null, downstreams: [{ ...hook, limit: 1000, safetyCap: 1000 }] }), 'accepted');
});

test('two downstreams writing stdout are refused (their lines would interleave); one is accepted', () => {
  const a = { name: 'a', kind: 'ndjson' as const, path: '-' };
  const b = { name: 'b', kind: 'ndjson' as const, path: '-', subscribe: { types: ['ENTER' as const] } };
  assert.equal(
    refusal({ downstreams: [a, b] }),
    'OptionError: options.downstreams[1].path "-": options.downstreams[0].path writes stdout already (one downstream may)',
  );
  assert.equal(refusal({ downstreams: [a, { ...b, path: 'b.ndjson' }] }), 'accepted');
});

test('lease options of a JetStream source apply only to a partition group (partitions "auto")', () => {
  const source = { servers: ['nats://127.0.0.1:4222'], stream: 'TEL' };
  for (const [k, v] of [
    ['leaseMs', 2000],
    ['memberName', 'a'],
    ['leaseBucket', 'LEASES'],
  ] as const) {
    assert.match(
      refusal({ stateDir: null, jetstreamSource: { ...source, partitions: '0-7', [k]: v } }),
      new RegExp(
        `^OptionError: options\\.jetstreamSource\\.${k} applies only to a partition group \\(options\\.jetstreamSource\\.partitions "auto"\\), got partitions "0-7"$`,
      ),
    );
  }
  assert.equal(
    refusal({ stateDir: null, jetstreamSource: { ...source, partitions: 'auto', leaseMs: 2000 } }),
    'accepted',
  );
  assert.throws(
    () =>
      optionsFromCli(
        parseCliArgs(['--source', 'jetstream://127.0.0.1:4222/TEL', '--partitions', '0-7', '--lease-ms', '2000']),
      ),
    /leaseMs applies only to a partition group/,
  );
});

test("--tls-cert and --tls-key keep the config file's CA bundle and requireClientCert; the TLS flags that need them say so", () => {
  const dir = mkdtempSync(join(tmpdir(), 'router-tls-'));
  const file = join(dir, 'router.json');
  writeFileSync(
    file,
    JSON.stringify({
      ingest: { tls: { certFile: 'old.pem', keyFile: 'old.key', caFile: 'clients-ca.pem', requireClientCert: false } },
    }),
  );
  const o = optionsFromCli(parseCliArgs(['--config', file, '--tls-cert', '/etc/new.pem', '--tls-key', '/etc/new.key']));
  assert.deepEqual(o.ingest.tls, {
    certFile: '/etc/new.pem',
    keyFile: '/etc/new.key',
    caFile: join(dir, 'clients-ca.pem'),
    requireClientCert: false,
  });
  const flagsOnly = optionsFromCli(
    parseCliArgs(['--tls-cert', '/c.pem', '--tls-key', '/c.key', '--tls-ca', '/ca.pem']),
  );
  assert.deepEqual(flagsOnly.ingest.tls, {
    certFile: '/c.pem',
    keyFile: '/c.key',
    caFile: '/ca.pem',
    requireClientCert: true,
  });
  assert.throws(
    () => parseCliArgs(['--tls-client-cert-optional']),
    /^OptionError: --tls-client-cert-optional needs --tls-cert and --tls-key$/,
  );
  assert.throws(() => parseCliArgs(['--tls-ca', '/ca.pem']), /^OptionError: --tls-ca needs --tls-cert and --tls-key$/);
});

test('a webhook secret in the environment applies to --webhook downstreams and stops no start without one', () => {
  const saved = process.env['GEOFENCE_WEBHOOK_BEARER_TOKEN'];
  process.env['GEOFENCE_WEBHOOK_BEARER_TOKEN'] = 'bearer-token-from-the-environment';
  try {
    const ndjson = optionsFromCli(parseCliArgs(['--ndjson', '-']));
    assert.deepEqual(
      ndjson.downstreams.map((d) => d.kind),
      ['ndjson'],
    );
    const hooked = optionsFromCli(parseCliArgs(['--webhook', 'http://127.0.0.1:8080/hook']));
    assert.equal((hooked.downstreams[0] as { bearerToken: string }).bearerToken, 'bearer-token-from-the-environment');
    const dir = mkdtempSync(join(tmpdir(), 'router-secret-'));
    writeFileSync(join(dir, 'token'), 'bearer-token-from-a-file\n');
    assert.throws(
      () => parseCliArgs(['--ndjson', '-', '--webhook-bearer-token-file', join(dir, 'token')]),
      /^OptionError: --webhook-bearer-token-file applies to the --webhook downstreams, and none is given$/,
    );
  } finally {
    if (saved === undefined) delete process.env['GEOFENCE_WEBHOOK_BEARER_TOKEN'];
    else process.env['GEOFENCE_WEBHOOK_BEARER_TOKEN'] = saved;
  }
});

test('admission.watermarkFraction 0: in-process input is still fed (it waits for room, not for good), and close() finishes', async () => {
  const router = await createRouter({ stateDir: null, admission: { watermarkFraction: 0 }, log: () => undefined });
  const t0 = Date.UTC(2026, 0, 1);
  try {
    for (let i = 0; i < 2000; i++) {
      if (!router.push({ id: `d${i % 50}`, lat: 52.5 + i * 1e-6, lon: 13.4, ts: t0 + i * 1000 }))
        await within(router.inputDrained(), 10_000, 'inputDrained()');
    }
    await waitFor(() => router.stats().processed === 2000, 20_000, 'every point processed');
  } finally {
    const summary = await within(router.close(), 20_000, 'close()');
    assert.equal(summary.processed, 2000);
    assert.equal(summary.shedTotal, 0);
  }
});

test('an input file that cannot be read is refused at start, naming it; a read error part-way is reported once and ends the source', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'router-inputs-'));
  await assert.rejects(
    createRouter({ stateDir: null, inputs: [join(dir, 'missing.msgpack')], log: () => undefined }),
    /^RangeError: input file .*missing\.msgpack \(options\.inputs\[0\], --input\) cannot be read: ENOENT/,
  );
  mkdirSync(join(dir, 'a-directory'));
  await assert.rejects(
    createRouter({ stateDir: null, inputs: ['-', join(dir, 'a-directory')], log: () => undefined }),
    /^RangeError: input file .*a-directory \(options\.inputs\[1\], --input\) cannot be read: EISDIR/,
  );

  // The source's own error path: bytes read before the error are fed, the error is reported once, the source ends.
  const stream = new PassThrough();
  const errors: Error[] = [];
  const fed: number[] = [];
  const edge = {
    openFeed: () => ({
      write: (bytes: Uint8Array) => {
        fed.push(bytes.length);
        return true;
      },
      end: () => Promise.resolve(),
    }),
  } as unknown as IngestEdge;
  const source = new ReadableSource(
    'file x',
    () => stream,
    (err) => errors.push(err),
  );
  await source.start(edge);
  stream.write(Buffer.alloc(100));
  await new Promise((r) => setImmediate(r));
  stream.destroy(Object.assign(new Error('i/o error'), { code: 'EIO' }));
  await within(source.finished(), 5_000, 'the source ends');
  assert.deepEqual(fed, [100]);
  assert.equal(errors.length, 1);
  assert.match(errors[0]!.message, /i\/o error/);
});
