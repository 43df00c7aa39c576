/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), for tests: every line must be a HELP,
 * a TYPE or a sample of a declared family; returns the samples. Values are Go float syntax as Prometheus parses
 * them (NaN and Inf in any case).
 */
import assert from 'node:assert/strict';

/** One sample. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"';
const SAMPLE = new RegExp(
  `^(${NAME})(?:\\{((?:${LABEL})(?:,${LABEL})*)?,?\\})? ([-+]?(?:[0-9]*\\.?[0-9]+(?:[eE][-+]?[0-9]+)?|[Nn][Aa][Nn]|[Ii][Nn][Ff]))(?: -?[0-9]+)?$`,
);
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/** Parses and checks an exposition; throws an assertion error at the first bad line. */
export function parseExposition(text: string): Sample[] {
  assert.ok(text.endsWith('\n'), 'exposition ends with a newline');
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '') continue;
    if (line.startsWith('# HELP ')) {
      assert.match(line, new RegExp(`^# HELP ${NAME} .*$`), line);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const m = new RegExp(`^# TYPE (${NAME}) (\\w+)$`).exec(line);
      assert.ok(m !== null, `bad TYPE line: ${line}`);
      assert.ok(TYPES.has(m[2]!), `unknown type: ${line}`);
      assert.ok(!types.has(m[1]!), `family typed twice: ${m[1]}`);
      types.set(m[1]!, m[2]!);
      continue;
    }
    assert.ok(!line.startsWith('#'), `unknown comment: ${line}`);
    const m = SAMPLE.exec(line);
    assert.ok(m !== null, `bad sample line: ${line}`);
    const name = m[1]!;
    const family = [...types.keys()].find(
      (f) =>
        name === f ||
        ((types.get(f) === 'histogram' || types.get(f) === 'summary') &&
          /^(.*)_(bucket|sum|count)$/.exec(name)?.[1] === f),
    );
    assert.ok(family !== undefined, `sample of an undeclared family: ${line}`);
    const labels: Record<string, string> = {};
    for (const lm of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]!] = lm[2]!;
    const v = m[3]!;
    samples.push({
      name,
      labels,
      value: /nan/i.test(v) ? Number.NaN : /inf/i.test(v) ? (v.startsWith('-') ? -Infinity : Infinity) : Number(v),
    });
  }
  return samples;
}

/** The value of the sample `name` with exactly `labels`, or undefined. */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const want = JSON.stringify(Object.entries(labels).sort());
  return samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
}
