/** Subject templates of the broker sinks: placeholders, the character rule, and errors that name the option. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { safeToken, SubjectTemplate } from '../../src/dispatch/sinks/subject-template.js';
import { resolveRouterOptions } from '../../src/config/options.js';

test('a substituted value cannot add a token or a wildcard', () => {
  assert.equal(safeToken('depot-3_b'), 'depot-3_b');
  assert.equal(safeToken('a.b'), 'a_b');
  assert.equal(safeToken('x*>y/z #+'), 'x__y_z___');
  assert.equal(safeToken('Zürich'), 'Z_rich');
  assert.equal(safeToken(''), '_');
});

test('the template parses placeholders, keeps its prefix, and names the option in its errors', () => {
  assert.equal(new SubjectTemplate('o', 'geofence.{type}.{fenceId}').prefix, 'geofence.');
  assert.equal(new SubjectTemplate('o', '{lane}.x').prefix, '');
  assert.throws(
    () => new SubjectTemplate('options.subject', 'a.{colour}'),
    /options\.subject: unknown placeholder \{colour\}/,
  );
  assert.throws(() => new SubjectTemplate('options.subject', 'a.{type'), /options\.subject: unbalanced brace/);
  assert.throws(
    () =>
      resolveRouterOptions({
        downstreams: [{ kind: 'jetstream', name: 'j', servers: ['nats://127.0.0.1:4222'], subject: '{type}.x' }],
      }),
    /options\.downstreams\[0\]\.subject "\{type\}\.x" must start with literal tokens ending in "\."/,
  );
  const ok = resolveRouterOptions({
    downstreams: [
      { kind: 'jetstream', name: 'j', servers: ['nats://127.0.0.1:4222'], subject: '{type}.x', createStream: false },
    ],
  });
  assert.equal(ok.downstreams[0]!.kind, 'jetstream');
  assert.throws(
    () => resolveRouterOptions({ downstreams: [{ kind: 'jetstream', name: 'j', servers: ['http://127.0.0.1:4222'] }] }),
    /options\.downstreams\[0\]\.servers\[0\]/,
  );
});
