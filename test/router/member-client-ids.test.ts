/**
 * In a partition group every member usually runs the same configuration: an MQTT downstream without a client id of
 * its own gets one per member, so two members never connect under one id (the broker would close the older
 * connection each time the other connects).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { withMemberClientIds } from '../../src/router/partition-group.js';

test('partition group: each member gives its MQTT downstreams a client id of its own, within 64 characters; set ones and other kinds are kept', () => {
  const downstreams = [
    { name: 'fleet', kind: 'mqtt' as const, url: 'mqtt://127.0.0.1:1883' },
    { name: 'audit', kind: 'mqtt' as const, url: 'mqtt://127.0.0.1:1883', clientId: 'fixed' },
    { name: 'hook', kind: 'webhook' as const, url: 'http://127.0.0.1:9/' },
  ];
  const a = withMemberClientIds(downstreams, 'host-a-101');
  const b = withMemberClientIds(downstreams, 'host-b-202');
  assert.equal((a[0] as { clientId: string }).clientId, 'geofence-router-fleet-host-a-101');
  assert.equal((b[0] as { clientId: string }).clientId, 'geofence-router-fleet-host-b-202');
  assert.equal((a[1] as { clientId: string }).clientId, 'fixed', 'a client id set by the operator is kept');
  assert.deepEqual(a[2], downstreams[2], 'other kinds are untouched');
  const long = 'x'.repeat(60);
  const la = (withMemberClientIds(downstreams, `${long}-1`)[0] as { clientId: string }).clientId;
  const lb = (withMemberClientIds(downstreams, `${long}-2`)[0] as { clientId: string }).clientId;
  assert.ok(la.length <= 64 && /^[A-Za-z0-9_-]+$/.test(la), la);
  assert.notEqual(la, lb, 'long member names still give two ids');
});
