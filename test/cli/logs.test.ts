/**
 * The binary's log on stderr: one JSON object a line by default (level, ISO time, pid, hostname, name, thread, msg),
 * lines from the pipeline threads named by thread, --log-level filtering, --log-format pretty for a terminal, and a
 * usage error for a bad format or level.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { frameOf, square } from '../pipeline/support.js';
import { logLines, runCli } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'gr-logs-'));
const fences = join(dir, 'fences.geojson');
writeFileSync(fences, JSON.stringify({ type: 'FeatureCollection', features: [square('A', 0, 0, 100)] }));
const input = join(dir, 'pings.msgpack');
// A ping inside A, a corrupt frame (0xc1 is never MessagePack), a ping outside: the ingest thread warns about one.
writeFileSync(
  input,
  Buffer.concat([
    frameOf({ id: 'd1', eastM: 0, northM: 0, dtMs: 0 }),
    Buffer.from([0xc1]),
    frameOf({ id: 'd1', eastM: 500, northM: 0, dtMs: 1000 }),
  ]),
);
const args = ['--fences', fences, '--input', input, '--no-listen', '--no-admin', '--state-dir', join(dir, 'state')];

test('the default log is one JSON object a line, each with level, time, thread and message', async () => {
  const r = await runCli([...args]);
  assert.equal(r.code, 3, r.stderr); // the corrupt frame: drained with loss by design
  const textLines = r.stderr.split('\n').filter((l) => l.length > 0);
  const lines = logLines(r.stderr);
  assert.equal(lines.length, textLines.length, `every stderr line is a JSON object:\n${r.stderr}`);
  for (const l of lines) {
    assert.ok(['error', 'warn', 'info', 'debug'].includes(l.level), JSON.stringify(l));
    assert.match(l.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(l['name'], 'geofence-router');
    assert.equal(typeof l['pid'], 'number');
    assert.equal(typeof l['hostname'], 'string');
    assert.equal(typeof l.thread, 'string');
    assert.equal(typeof l.msg, 'string');
  }
  assert.ok(lines.some((l) => l.level === 'info' && l.thread === 'main' && l.msg.startsWith('started in ')));
  const reject = lines.find((l) => l.thread === 'ingest');
  assert.ok(reject !== undefined, r.stderr);
  assert.equal(reject.level, 'warn');
  assert.match(reject.msg, /corrupt_frame/);
});

test('--log-level warn leaves out the info lines; --log-format pretty writes for a person', async () => {
  const quiet = await runCli([...args, '--state-dir', join(dir, 'state-quiet'), '--log-level', 'warn']);
  assert.equal(quiet.code, 3, quiet.stderr);
  const lines = logLines(quiet.stderr);
  assert.ok(lines.length >= 1, quiet.stderr);
  assert.deepEqual(
    lines.filter((l) => l.level !== 'warn' && l.level !== 'error'),
    [],
  );
  const pretty = await runCli([...args, '--state-dir', join(dir, 'state-pretty'), '--log-format', 'pretty']);
  assert.equal(pretty.code, 3, pretty.stderr);
  assert.deepEqual(logLines(pretty.stderr), [], 'no JSON in pretty mode');
  assert.match(pretty.stderr, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \[main\] started in /m);
  assert.match(pretty.stderr, /^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: \[ingest\] .*corrupt_frame/m);
});

test('a bad --log-format or --log-level is a usage error naming the flag', async () => {
  const f = await runCli(['--log-format', 'xml', '--no-listen']);
  assert.equal(f.code, 2);
  assert.match(f.stderr, /--log-format must be one of json, pretty \(got "xml"\)/);
  const l = await runCli(['--log-level', 'loud', '--no-listen']);
  assert.equal(l.code, 2);
  assert.match(l.stderr, /--log-level must be one of error, warn, info, debug \(got "loud"\)/);
});
