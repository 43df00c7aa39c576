/**
 * JSON config file loading (main thread). The file holds a RouterOptionsInput (the same names as the library
 * options, described by the JSON Schema `--print-config-schema` prints; a `$schema` key is allowed for editors);
 * every value is checked on load, and a bad or unknown one is refused naming the file and the key. Relative paths
 * inside it (fencesFile, ndjson paths, inputs, stateDir, TLS files) are resolved against the file's directory.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { checkInput, fileNamer } from '../option-schema/option-check.js';
import type { RouterOptionsInput } from './options.js';
import { ROUTER_SPEC } from './router-option-spec.js';

/** Reads and parses a config file; throws an Error naming the file and what is wrong. */
export function loadConfigFile(path: string): RouterOptionsInput {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`config file ${path}: cannot read: ${(err as Error).message}`, { cause: err });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`config file ${path}: not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error(`config file ${path}: must hold a JSON object`);
  }
  const { $schema, ...rest } = value as Record<string, unknown>;
  if ($schema !== undefined && typeof $schema !== 'string')
    throw new Error(`config file ${path}: $schema must be a string, got ${JSON.stringify($schema)}`);
  checkInput(ROUTER_SPEC, rest, [], fileNamer(path));
  const input = rest as RouterOptionsInput;
  const base = dirname(resolve(path));
  const rel = (p: string): string => (p === '-' || isAbsolute(p) ? p : resolve(base, p));
  if (typeof input.fencesFile === 'string') input.fencesFile = rel(input.fencesFile);
  if (typeof input.stateDir === 'string') input.stateDir = rel(input.stateDir);
  const tls = input.ingest?.tls as Record<string, unknown> | null | undefined;
  if (tls !== null && typeof tls === 'object') {
    for (const k of ['certFile', 'keyFile', 'caFile']) if (typeof tls[k] === 'string') tls[k] = rel(tls[k]);
  }
  if (Array.isArray(input.inputs)) input.inputs = input.inputs.map((p) => (typeof p === 'string' ? rel(p) : p));
  if (Array.isArray(input.downstreams)) {
    input.downstreams.forEach((d, i) => {
      if (d !== null && typeof d === 'object' && d.kind === 'stream')
        throw new Error(
          `config file ${path}: downstreams[${i}] is a trigger stream, which only an embedding process can read (router.triggers()); use a webhook or an NDJSON file`,
        );
    });
    for (const d of input.downstreams) {
      if (d !== null && typeof d === 'object' && d.kind === 'ndjson' && typeof d.path === 'string')
        d.path = rel(d.path);
      if (d !== null && typeof d === 'object' && d.kind === 'webhook' && typeof d.caFile === 'string')
        d.caFile = rel(d.caFile);
    }
  }
  return input;
}
