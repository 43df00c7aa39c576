/**
 * The JetStream source's options: `--source jetstream://...`, `--partitions` and `--partition-count` build
 * options.jetstreamSource with its defaults; bad values are refused naming the flag or the option.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { resolveRouterOptions } from '../../src/config/options.js';
import { createPartitionGroup, createRouter, JETSTREAM_SOURCE_DEFAULTS, parsePartitionList } from '../../src/index.js';
import { freePort } from '../support/nats-server.js';

test('--source, --partitions and --partition-count build the jetstreamSource option with its defaults', () => {
  const o = optionsFromCli(
    parseCliArgs([
      '--source',
      'jetstream://10.0.0.1:4222,10.0.0.2:4222/TEL',
      '--partitions',
      '0-3,9',
      '--partition-count',
      '12',
    ]),
  );
  assert.deepEqual(o.jetstreamSource, {
    ...JETSTREAM_SOURCE_DEFAULTS,
    servers: ['nats://10.0.0.1:4222', 'nats://10.0.0.2:4222'],
    stream: 'TEL',
    partitions: '0-3,9',
    partitionCount: 12,
    token: null,
    memberName: null,
  });
  assert.equal(optionsFromCli(parseCliArgs([])).jetstreamSource, null, 'no source unless asked');
  const plain = optionsFromCli(parseCliArgs(['--source', 'jetstream://127.0.0.1:4222']));
  assert.equal(plain.jetstreamSource?.stream, JETSTREAM_SOURCE_DEFAULTS.stream);
  assert.equal(plain.jetstreamSource?.partitions, 'all');
});

test('bad JetStream source values are refused naming the flag or the option', () => {
  assert.throws(
    () => parseCliArgs(['--source', 'nats://127.0.0.1:4222']),
    /^OptionError: --source must be jetstream:\/\//,
  );
  assert.throws(
    () =>
      optionsFromCli(
        parseCliArgs(['--source', 'jetstream://127.0.0.1:4222', '--partitions', '3-20', '--partition-count', '16']),
      ),
    /^OptionError: options\.jetstreamSource\.partitions: partition 20 is not below the partition count 16$/,
  );
  assert.throws(
    () => parseCliArgs(['--partitions', '0-3']),
    /^OptionError: --partitions, --partition-count, --partition-state-bucket, --lease-ms and --member-name need --source$/,
  );
  assert.throws(
    () => resolveRouterOptions({ jetstreamSource: { servers: ['nats://127.0.0.1:4222'], stateBucket: 'a.b' } }),
    /^OptionError: options\.jetstreamSource\.stateBucket must be a key-value bucket name \(letters, digits, - and _\), got "a\.b"$/,
  );
  assert.equal(
    optionsFromCli(parseCliArgs(['--source', 'jetstream://127.0.0.1:4222', '--partition-state-bucket', 'none']))
      .jetstreamSource?.stateBucket,
    null,
  );
  assert.throws(
    () => resolveRouterOptions({ jetstreamSource: { servers: ['nats://127.0.0.1:4222'], partitions: '5-2' } }),
    /^OptionError: options\.jetstreamSource\.partitions: the range 5-2 runs backwards$/,
  );
  assert.throws(
    () => resolveRouterOptions({ jetstreamSource: { servers: ['nats://127.0.0.1:4222'], subjectPrefix: 'a.*' } }),
    /^OptionError: options\.jetstreamSource\.subjectPrefix must be literal subject tokens/,
  );
  assert.throws(
    () => resolveRouterOptions({ jetstreamSource: { servers: ['http://127.0.0.1:4222'] } }),
    /options\.jetstreamSource\.servers\[0\]/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        checkpointIntervalMs: 20_000,
        jetstreamSource: { servers: ['nats://127.0.0.1:4222'] },
      }),
    /^OptionError: options\.jetstreamSource\.ackWaitMs \(30000\) must be at least 2 x options\.checkpointIntervalMs \+ 1000 \(41000\)/,
  );
  assert.deepEqual(parsePartitionList('all', 4), [0, 1, 2, 3]);
  assert.deepEqual(parsePartitionList('3, 0-1,1', 4), [0, 1, 3]);
  assert.throws(() => parsePartitionList('x', 4), /must be "all" or numbers and ranges/);
});

test('--partitions auto takes leases: --lease-ms and --member-name set them; "auto" needs the state bucket, and is started by createPartitionGroup', async () => {
  const o = optionsFromCli(
    parseCliArgs([
      '--source',
      'jetstream://127.0.0.1:4222/TEL',
      '--partitions',
      'auto',
      '--lease-ms',
      '4000',
      '--member-name',
      'router-a',
    ]),
  );
  assert.equal(o.jetstreamSource?.partitions, 'auto');
  assert.equal(o.jetstreamSource?.leaseMs, 4000);
  assert.equal(o.jetstreamSource?.memberName, 'router-a');
  assert.equal(o.jetstreamSource?.leaseBucket, 'GEOFENCE_PARTITION_LEASES');
  assert.throws(
    () =>
      optionsFromCli(
        parseCliArgs(['--source', 'jetstream://127.0.0.1:4222', '--partitions', 'auto', '--lease-ms', '10']),
      ),
    /^OptionError: --lease-ms must be an integer in \[1000, 3600000\], got "10"$/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        jetstreamSource: { servers: ['nats://127.0.0.1:4222'], partitions: 'auto', stateBucket: null },
      }),
    /^OptionError: options\.jetstreamSource\.partitions "auto" needs options\.jetstreamSource\.stateBucket: a partition that moves between routers takes its device state with it$/,
  );
  assert.throws(
    () =>
      resolveRouterOptions({
        jetstreamSource: { servers: ['nats://127.0.0.1:4222'], partitions: 'auto', leaseBucket: 'a b' },
      }),
    /^OptionError: options\.jetstreamSource\.leaseBucket must be a key-value bucket name/,
  );
  await assert.rejects(
    createRouter({ stateDir: null, jetstreamSource: { servers: ['nats://127.0.0.1:4222'], partitions: 'auto' } }),
    /^RangeError: options\.jetstreamSource\.partitions "auto" takes partitions through leases: start it with createPartitionGroup/,
  );
  await assert.rejects(
    createPartitionGroup({
      stateDir: null,
      jetstreamSource: { servers: ['nats://127.0.0.1:4222'], partitions: '0-3' },
    }),
    /^RangeError: options\.jetstreamSource\.partitions must be "auto" for a partition group$/,
  );
});

test('a router whose JetStream servers cannot be reached fails its start naming the option, and leaves nothing open', async () => {
  const port = await freePort();
  await assert.rejects(
    createRouter({
      stateDir: null,
      jetstreamSource: { servers: [`nats://127.0.0.1:${port}`] },
      log: () => undefined,
    }),
    (err: Error) => err.message.startsWith(`options.jetstreamSource.servers nats://127.0.0.1:${port}: `),
  );
});
