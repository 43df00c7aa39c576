/**
 * Validation, defaults and merging read from an option definition (see `option-spec.ts`). Every message names the
 * option the way its source does: `options.admission.watermarkFraction` for the library, `config file <path>:
 * admission.watermarkFraction` for a config file, `--watermark-fraction` for a flag (a `Namer` turns a path into that
 * name), then what is allowed and what was given.
 */
import type { Declared, TextKind } from './option-spec.js';

/** A path into the options: keys and list indices. */
export type OptionPath = readonly (string | number)[];

/** Names the option at a path the way its source spells it. */
export type Namer = (path: OptionPath) => string;

/** The dotted form of a path: `downstreams[0].url`. */
export function pathText(path: OptionPath): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? p : `.${p}`;
  return out;
}

/** Library options: `options.<path>`. */
export const libraryNamer: Namer = (path) => (path.length === 0 ? 'options' : `options.${pathText(path)}`);

/** A config file's keys: `config file <file>: <path>`. */
export function fileNamer(file: string): Namer {
  return (path) => `config file ${file}: ${path.length === 0 ? 'the top level' : pathText(path)}`;
}

/** What is wrong with an option value. */
export class OptionError extends RangeError {
  override name = 'OptionError';
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'function') return 'a function';
  if (Array.isArray(v)) return 'an array';
  if (v !== null && typeof v === 'object') return 'an object';
  return String(v);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function bracket(f: { min: number; max: number; exclusiveMin?: boolean; exclusiveMax?: boolean }): string {
  return `${f.exclusiveMin === true ? '(' : '['}${f.min}, ${f.max}${f.exclusiveMax === true ? ')' : ']'}`;
}

/** The rule a value of the field must meet, as a message's "must be ..." part. */
export function expectation(f: Declared): string {
  let e: string;
  switch (f.kind) {
    case 'int':
      e = f.powerOfTwo === true ? `a power of two in ${bracket(f)}` : `an integer in ${bracket(f)}`;
      if (f.zeroOff === true) e = `0 or ${e}`;
      break;
    case 'num':
      e = `a number in ${bracket(f)}`;
      if (f.zeroOff === true) e = `0 or ${e}`;
      break;
    case 'bool':
      e = 'a boolean';
      break;
    case 'choice':
      e = `one of ${f.values.map((v) => JSON.stringify(v)).join(', ')}`;
      break;
    case 'text':
      e = TEXT_RULES[f.text](f.protocols);
      break;
    case 'list':
      e = `an array, each item ${expectation(f.item)}`;
      break;
    case 'map':
      e = `an object of string values under ${f.keyRule}`;
      break;
    case 'group':
    case 'delegate':
    case 'variants':
      e = 'an object';
      break;
    case 'function':
      e = 'a function';
      break;
  }
  return f.nullable ? `${e}, or null` : e;
}

const TEXT_RULES: Record<TextKind, (protocols?: readonly string[]) => string> = {
  host: () => 'a host name or address',
  path: () => 'a file path',
  name: () => 'a non-empty string',
  token: () => 'a string of at least 16 characters without spaces',
  url: (p) => `an ${(p ?? ['http:']).map((x) => `${x}//`).join(' or ')} URL`,
};

function fail(name: Namer, path: OptionPath, f: Declared, v: unknown): never {
  const got = f.kind === 'text' && f.text === 'token' && typeof v === 'string' ? `${v.length} characters` : show(v);
  throw new OptionError(`${name(path)} must be ${expectation(f)}, got ${got}`);
}

function numberOk(f: Declared & { kind: 'int' | 'num' }, v: number): boolean {
  if (!Number.isFinite(v)) return false;
  if (f.zeroOff === true && v === 0) return true;
  if (f.kind === 'int' && !Number.isInteger(v)) return false;
  if (f.exclusiveMin === true ? !(v > f.min) : !(v >= f.min)) return false;
  if (f.exclusiveMax === true ? !(v < f.max) : !(v <= f.max)) return false;
  return f.powerOfTwo !== true || (v & (v - 1)) === 0;
}

function textOk(f: Declared & { kind: 'text' }, v: string): boolean {
  if (v.length === 0) return false;
  // Characters, not UTF-16 units (as a JSON Schema minLength counts them).
  if (f.text === 'token') return [...v].length >= 16 && !/\s/.test(v);
  if (f.text === 'url') {
    // The text itself must start with the scheme and hold no space (the URL parser would forgive both).
    if (!/^[a-z][a-z0-9+.-]*:\/\/\S+$/i.test(v)) return false;
    try {
      return (f.protocols ?? ['http:']).includes(new URL(v).protocol);
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Checks input for a field (a partial: fields with defaults may be absent, and are not filled in). Throws an
 * OptionError naming the first bad option through `name`.
 */
export function checkInput(f: Declared, v: unknown, path: OptionPath, name: Namer): void {
  if (v === null) {
    if (f.nullable) return;
    fail(name, path, f, v);
  }
  switch (f.kind) {
    case 'int':
    case 'num':
      if (typeof v !== 'number' || !numberOk(f, v)) fail(name, path, f, v);
      return;
    case 'bool':
      if (typeof v !== 'boolean') fail(name, path, f, v);
      return;
    case 'choice':
      if (typeof v !== 'string' || !f.values.includes(v)) fail(name, path, f, v);
      return;
    case 'text':
      if (typeof v !== 'string' || !textOk(f, v)) fail(name, path, f, v);
      return;
    case 'list':
      if (!Array.isArray(v)) fail(name, path, f, v);
      v.forEach((item, i) => checkInput(f.item, item, [...path, i], name));
      return;
    case 'map':
      if (!isObject(v)) fail(name, path, f, v);
      for (const [k, x] of Object.entries(v)) {
        if (!f.keyPattern.test(k))
          throw new OptionError(`${name([...path, k])}: ${JSON.stringify(k)} is not ${f.keyRule}`);
        if (f.reservedKeys.includes(k.toLowerCase()))
          throw new OptionError(`${name([...path, k])} is set by the router and cannot be given`);
        if (typeof x !== 'string' || /[^\t\x20-\x7e\x80-\xff]/.test(x))
          throw new OptionError(
            `${name([...path, k])} must be a string of tabs and printable Latin-1 characters (what HTTP allows), got ${show(x)}`,
          );
      }
      return;
    case 'group':
      if (!isObject(v)) fail(name, path, f, v);
      checkGroupInput(f, v, path, name);
      return;
    case 'variants': {
      if (!isObject(v)) fail(name, path, f, v);
      const tag = v[f.tag];
      const variant = typeof tag === 'string' ? f.variants[tag] : undefined;
      if (variant === undefined || !Object.prototype.hasOwnProperty.call(f.variants, tag as string)) {
        throw new OptionError(
          `${name([...path, f.tag])} must be one of ${Object.keys(f.variants)
            .map((k) => JSON.stringify(k))
            .join(', ')}, got ${show(tag)}`,
        );
      }
      const { [f.tag]: _tag, ...rest } = v;
      if (variant.kind !== 'group') throw new Error(`variant ${String(tag)} is not a group`);
      checkGroupInput(variant, rest, path, name, `a ${String(tag)} ${f.tag === 'kind' ? 'entry' : f.tag}`);
      return;
    }
    case 'function':
      if (typeof v !== 'function') fail(name, path, f, v);
      return;
    case 'delegate':
      try {
        f.check(v);
      } catch (err) {
        const why = (err as Error).message;
        throw new OptionError(`${name(path)}${why.startsWith('must ') ? ' ' : ': '}${why}`, { cause: err });
      }
      return;
  }
}

function checkGroupInput(
  f: Declared & { kind: 'group' },
  v: Record<string, unknown>,
  path: OptionPath,
  name: Namer,
  of?: string,
): void {
  for (const k of Object.keys(v)) {
    const retired = f.retired !== undefined && Object.hasOwn(f.retired, k) ? f.retired[k] : undefined;
    if (retired !== undefined) throw new OptionError(`${name([...path, k])} is not an option: ${retired}`);
    if (!Object.prototype.hasOwnProperty.call(f.fields, k))
      throw new OptionError(`${name([...path, k])} is not an option${of === undefined ? '' : ` of ${of}`}`);
  }
  for (const [k, field] of Object.entries(f.fields)) {
    const x = v[k];
    if (x === undefined) {
      if (field.presence === 'required') throw new OptionError(`${name([...path, k])} is required (${field.doc})`);
      continue;
    }
    checkInput(field, x, [...path, k], name);
  }
}

/** The value of a field with every default filled in (objects and arrays copied; input assumed checked). */
export function withDefaults(f: Declared, v: unknown): unknown {
  if (v === undefined) v = f.default;
  if (v === undefined || v === null) return v;
  switch (f.kind) {
    case 'group': {
      const out: Record<string, unknown> = {};
      const o = v as Record<string, unknown>;
      for (const [k, field] of Object.entries(f.fields)) {
        // A group with defaults of its own (not a nullable one, whose default is null) is filled in when absent.
        const absent =
          field.kind === 'group' && field.default === undefined && field.presence === 'defaulted' ? {} : undefined;
        const x = withDefaults(field, o[k] === undefined ? absent : o[k]);
        if (x !== undefined) out[k] = x;
      }
      return out;
    }
    case 'variants': {
      const o = v as Record<string, unknown>;
      const variant = f.variants[o[f.tag] as string];
      if (variant === undefined) return v;
      return { [f.tag]: o[f.tag], ...(withDefaults(variant, o) as object) };
    }
    case 'list':
      return (v as unknown[]).map((x) => withDefaults(f.item, x));
    case 'map':
      return { ...(v as object) };
    case 'delegate':
      return isObject(v) ? { ...v } : v;
    default:
      return v;
  }
}

/** Runs the cross-field rules of every group in a resolved value; throws an OptionError with the first broken one. */
export function checkRules(f: Declared, v: unknown, path: OptionPath, name: Namer): void {
  if (v === null || v === undefined) return;
  if (f.kind === 'group') {
    const o = v as Record<string, unknown>;
    for (const [k, field] of Object.entries(f.fields)) checkRules(field, o[k], [...path, k], name);
    const broken = f.check?.(o, (...below) => name([...path, ...below]));
    if (broken !== undefined) throw new OptionError(broken);
  } else if (f.kind === 'list') {
    (v as unknown[]).forEach((x, i) => checkRules(f.item, x, [...path, i], name));
  } else if (f.kind === 'variants') {
    const variant = f.variants[(v as Record<string, unknown>)[f.tag] as string];
    if (variant !== undefined) checkRules(variant, v, path, name);
  }
}

/** Merges two inputs of a field: groups key by key (recursively), anything else replaced by `over` when given. */
export function mergeInputs(f: Declared, base: unknown, over: unknown): unknown {
  if (over === undefined) return base;
  if (f.kind === 'group' && isObject(base) && isObject(over)) {
    const out: Record<string, unknown> = {};
    // Own properties only, defined rather than assigned: a "__proto__" key stays a key (and is refused), it does not
    // become the prototype through which options could be read without being checked.
    const put = (k: string, x: unknown): void => {
      Object.defineProperty(out, k, { value: x, enumerable: true, writable: true, configurable: true });
    };
    for (const [k, x] of Object.entries(base)) put(k, x);
    for (const [k, x] of Object.entries(over)) {
      const field = Object.hasOwn(f.fields, k) ? f.fields[k] : undefined;
      put(k, field === undefined ? x : mergeInputs(field, Object.hasOwn(base, k) ? base[k] : undefined, x));
    }
    return out;
  }
  return over;
}
