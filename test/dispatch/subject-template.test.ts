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
  assert.equal(new SubjectTemplate('o', 'geofence.{type}.{fenceId}', 'nats').prefix, 'geofence.');
  assert.equal(new SubjectTemplate('o', '{lane}.x', 'nats').prefix, '');
  assert.throws(
    () => new SubjectTemplate('options.subject', 'a.{colour}', 'nats'),
    /options\.subject: unknown placeholder \{colour\}/,
  );
  assert.throws(() => new SubjectTemplate('options.subject', 'a.{type', 'nats'), /options\.subject: unbalanced brace/);
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

test('literal text a broker cannot publish to is refused at start, naming the option and why', () => {
  const nats = (subject: string): unknown =>
    resolveRouterOptions({
      downstreams: [{ kind: 'jetstream', name: 'j', servers: ['nats://127.0.0.1:4222'], subject, createStream: false }],
    });
  const mqtt = (topic: string): unknown =>
    resolveRouterOptions({ downstreams: [{ kind: 'mqtt', name: 'm', url: 'mqtt://127.0.0.1:1883', topic }] });
  assert.throws(
    () => nats('geo fence.{type}'),
    /options\.downstreams\[0\]\.subject "geo fence\.\{type\}": a NATS subject cannot hold white space/,
  );
  assert.throws(() => nats('geofence..{type}'), /no empty token/);
  assert.throws(() => nats('geofence.{type}.'), /no empty token/);
  assert.throws(() => nats('geofence.*.{type}'), /wildcard token/);
  assert.throws(() => nats('geofence.{type}.>'), /wildcard token/);
  assert.throws(() => mqtt('alerts/#/{type}'), /options\.downstreams\[0\]\.topic "alerts\/#\/\{type\}": .*wildcard/);
  assert.throws(() => mqtt('alerts/+/{type}'), /wildcard/);
  assert.throws(() => mqtt('$SYS/{type}'), /starting with "\$"/);
  // What the brokers take: a placeholder standing for a whole token or level, or part of one; MQTT's empty levels.
  for (const subject of ['geofence.{type}.{fenceId}', 'g.dev-{deviceId}.x', '{lane}.{type}'])
    assert.doesNotThrow(() => nats(subject), subject);
  for (const topic of ['geofence/{type}/{fenceId}', 'a//{type}', '/x/{lane}', 'fleet-{deviceId}'])
    assert.doesNotThrow(() => mqtt(topic), topic);
  // The sinks themselves refuse it too.
  assert.throws(() => new SubjectTemplate('options.topic', 'a/#', 'mqtt'), /options\.topic "a\/#"/);
});
