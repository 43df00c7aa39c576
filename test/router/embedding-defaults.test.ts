/**
 * Embedding defaults: the library opens no network listener unless asked (a port or a host given), while the command
 * line keeps its documented addresses.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { optionsFromCli, parseCliArgs } from '../../src/config/cli-args.js';
import { createRouter } from '../../src/index.js';

const FENCES = { type: 'FeatureCollection', features: [] };

test('createRouter without addresses opens nothing; a port given opens that listener only', async () => {
  const quiet = await createRouter({ fences: FENCES, stateDir: null, log: () => undefined });
  try {
    assert.equal(quiet.ingestPort, null, 'no telemetry listener');
    assert.equal(quiet.adminPort, null, 'no admin server');
    assert.equal(quiet.options.listenHost, null);
    assert.equal(quiet.options.adminHost, null);
  } finally {
    await quiet.close();
  }
  const asked = await createRouter({ fences: FENCES, stateDir: null, listenPort: 0, log: () => undefined });
  try {
    assert.equal(typeof asked.ingestPort, 'number');
    assert.equal(asked.options.listenHost, '127.0.0.1', 'on loopback unless a host is given');
    assert.equal(asked.adminPort, null, 'the admin server was not asked for');
    // The listener is real: a TCP connection is accepted.
    await new Promise<void>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: asked.ingestPort! }, () => {
        s.end();
        resolve();
      });
      s.once('error', reject);
    });
  } finally {
    await asked.close();
  }
  const admin = await createRouter({ fences: FENCES, stateDir: null, adminPort: 0, log: () => undefined });
  try {
    assert.equal(admin.ingestPort, null);
    assert.equal((await fetch(`http://127.0.0.1:${admin.adminPort!}/healthz`)).status, 200);
  } finally {
    await admin.close();
  }
});

test('the command line keeps 127.0.0.1:7070 and 127.0.0.1:9464 unless told otherwise', () => {
  const o = optionsFromCli(parseCliArgs([]));
  assert.deepEqual([o.listenHost, o.listenPort, o.adminHost, o.adminPort], ['127.0.0.1', 7070, '127.0.0.1', 9464]);
  const off = optionsFromCli(parseCliArgs(['--no-listen', '--admin', '127.0.0.1:9999']));
  assert.deepEqual([off.listenHost, off.adminHost, off.adminPort], [null, '127.0.0.1', 9999]);
});
