/**
 * What is written about options, read from their definition (see `option-spec.ts`): the walk over every declared
 * option with its path, the `--help` lines of flags, the README's options table, and a JSON Schema (draft 2020-12) for
 * config files.
 */
import { expectation, type OptionPath } from './option-check.js';
import type { Declared, ThreadName } from './option-spec.js';

/** One declared option and where it sits. */
export interface DeclaredOption {
  /** Path from the top (a downstream's fields are under `downstreams[].<kind>`). */
  path: OptionPath;
  /** How the README names it: `admission.watermarkFraction`, `downstreams[] webhook: timeoutMs`. */
  label: string;
  /** Its declaration. */
  field: Declared;
  /** Help section (its own, or its group's). */
  section: string | undefined;
  /** For a downstream's field: the kinds that have it. */
  kinds: string[];
  /** Threads that read it (its own, or its group's). */
  threads: readonly ThreadName[];
}

/** Every option under `root`, groups listed before their fields, a downstream's shared fields once for all kinds. */
export function declaredOptions(root: Declared): DeclaredOption[] {
  const out: DeclaredOption[] = [];
  const walk = (
    f: Declared,
    path: OptionPath,
    label: string,
    section: string | undefined,
    kinds: string[],
    inherited: readonly ThreadName[],
  ): void => {
    const sec = f.section ?? section;
    const threads = f.threads ?? inherited;
    if (path.length > 0) out.push({ path, label, field: f, section: sec, kinds, threads });
    if (f.kind === 'group') {
      for (const [k, x] of Object.entries(f.fields))
        walk(x, [...path, k], label === '' ? k : `${label}.${k}`, sec, kinds, threads);
    } else if (f.kind === 'list' && f.item.kind === 'variants') {
      const v = f.item;
      const seen = new Map<string, DeclaredOption>();
      for (const [kind, variant] of Object.entries(v.variants)) {
        if (variant.kind !== 'group') continue;
        for (const [k, x] of Object.entries(variant.fields)) {
          const known = seen.get(k);
          if (known !== undefined && known.field.doc === x.doc) {
            known.kinds.push(kind);
            continue;
          }
          const start = out.length;
          walk(x, [...path, k], `${label}[].${k}`, variant.section ?? sec, [kind], threads);
          const first = out[start];
          if (first !== undefined) seen.set(k, first);
        }
      }
    }
  };
  walk(root, [], '', undefined, [], []);
  return out;
}

function literal(v: unknown): string {
  if (typeof v === 'string') return `"${v}"`;
  if (Array.isArray(v)) return v.length === 0 ? '[]' : JSON.stringify(v);
  return String(v);
}

/** The default as docs show it ('' when there is none). */
function defaultText(f: Declared): string {
  if (f.defaultText !== undefined) return f.defaultText;
  if (f.kind === 'group' || f.kind === 'variants' || f.default === undefined) return '';
  return literal(f.default);
}

/** The placeholder of a flag's value in --help. */
function placeholder(f: Declared): string {
  switch (f.kind) {
    case 'int':
      return ' N';
    case 'num':
      return ' X';
    case 'choice':
      return ` ${f.values.join('|')}`;
    case 'text':
      return f.text === 'path' ? ' PATH' : f.text === 'url' ? ' URL' : ' TEXT';
    case 'map':
      return ' "NAME: VALUE"';
    default:
      return '';
  }
}

function wrap(text: string, width: number, indent: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width - indent) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines;
}

/** Column where a help line's text starts. */
const HELP_TEXT_COLUMN = 32;
/** Width help lines are wrapped to. */
const HELP_WIDTH = 110;

/** A --help entry: the flag with its placeholder in one column, the text wrapped beside it. */
export function helpLine(flag: string, text: string): string {
  const head = `      ${flag}`;
  const body = wrap(text, HELP_WIDTH, HELP_TEXT_COLUMN);
  const first =
    head.length < HELP_TEXT_COLUMN
      ? head.padEnd(HELP_TEXT_COLUMN) + (body[0] ?? '')
      : `${head}\n${' '.repeat(HELP_TEXT_COLUMN)}${body[0] ?? ''}`;
  return [first, ...body.slice(1).map((l) => ' '.repeat(HELP_TEXT_COLUMN) + l)].join('\n');
}

/** The --help entries of every option with a flag, by section. */
export function flagHelp(root: Declared): Map<string, string[]> {
  const bySection = new Map<string, string[]>();
  for (const o of declaredOptions(root)) {
    const f = o.field;
    if (f.flag === undefined) continue;
    const d = defaultText(f);
    const unit = f.unit === undefined || f.unit === 'fraction' ? '' : `, ${f.unit}`;
    const rule =
      f.kind === 'int' || f.kind === 'num'
        ? `; ${expectation(f).replace(/^an? |^0 or /, (m) => (m === '0 or ' ? '0 or ' : ''))}${unit}`
        : '';
    const shown = d !== '' && d !== 'null' && f.kind !== 'bool';
    const text = `${f.doc}${rule}${shown ? ` (default ${d})` : ''}`;
    const section = o.section ?? 'Options';
    const list = bySection.get(section) ?? [];
    list.push(helpLine(`--${f.flag}${placeholder(f)}`, text));
    bySection.set(section, list);
  }
  return bySection;
}

function typeText(f: Declared): string {
  switch (f.kind) {
    case 'group':
      return f.nullable ? 'object or null' : 'object';
    case 'variants':
      return 'object';
    case 'list':
      return f.item.kind === 'variants'
        ? 'array of objects'
        : `array of ${f.item.kind === 'choice' ? f.item.values.join(' / ') : 'strings'}`;
    case 'function':
      return 'function (library only)';
    case 'delegate':
      return f.doc.startsWith('concurrency limit') ? 'string or integer' : 'object';
    default:
      return expectation(f);
  }
}

function cell(s: string): string {
  return s.replace(/\|/g, '\\|');
}

/** The README's options table (Markdown), one row per option. */
export function optionsMarkdown(root: Declared): string {
  const rows = [
    '| option | flag | type and range | default | unit | threads | meaning |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const o of declaredOptions(root)) {
    const f = o.field;
    const flag =
      f.flag !== undefined
        ? `\`--${f.flag}\``
        : f.cliText !== undefined
          ? f.cliText
              .split(', ')
              .map((x) => `\`${x}\``)
              .join(', ')
          : '';
    const kinds = o.kinds.length > 0 && o.kinds.length < 3 ? ` (${o.kinds.join(', ')})` : '';
    const d = defaultText(f);
    rows.push(
      `| \`${o.label}\`${kinds} | ${cell(flag)} | ${cell(typeText(f))} | ${cell(d === '' ? (f.presence === 'optional' ? 'none' : '') : `\`${d}\``)} | ${f.unit ?? ''} | ${o.threads.join(', ')} | ${cell(f.doc)} |`,
    );
  }
  return rows.join('\n');
}

/** A pattern matching `word` in any letter case. */
function anyCase(word: string): string {
  return word.replace(/[a-z]/g, (c) => `[${c}${c.toUpperCase()}]`);
}

/** The JSON Schema of one field (functions, which a config file cannot hold, are left out by the caller). */
function schemaOf(f: Declared): Record<string, unknown> {
  let s: Record<string, unknown>;
  switch (f.kind) {
    case 'int':
    case 'num': {
      s = { type: f.kind === 'int' ? 'integer' : 'number' };
      if (f.powerOfTwo === true) {
        const powers: number[] = [];
        for (let p = 1; p <= f.max; p *= 2) if (p >= f.min) powers.push(p);
        s = { enum: powers };
      } else {
        s[f.exclusiveMin === true ? 'exclusiveMinimum' : 'minimum'] = f.min;
        s[f.exclusiveMax === true ? 'exclusiveMaximum' : 'maximum'] = f.max;
      }
      if (f.zeroOff === true) s = { anyOf: [{ const: 0 }, s] };
      break;
    }
    case 'bool':
      s = { type: 'boolean' };
      break;
    case 'choice':
      s = { enum: [...f.values] };
      break;
    case 'text':
      s = { type: 'string', minLength: f.text === 'token' ? 16 : 1 };
      if (f.text === 'token') s['pattern'] = '^\\S+$';
      if (f.text === 'url') s['pattern'] = `^(?:${(f.protocols ?? ['http:']).map(anyCase).join('|')})//\\S+$`;
      break;
    case 'list':
      s = { type: 'array', items: schemaOf(f.item) };
      break;
    case 'map':
      s = {
        type: 'object',
        propertyNames: {
          pattern: f.keyPattern.source,
          // Reserved names are compared without case; a schema pattern has no flags, so each letter is a class.
          not: { pattern: `^(?:${f.reservedKeys.map(anyCase).join('|')})$` },
        },
        additionalProperties: { type: 'string', pattern: '^[\\t\\x20-\\x7e\\x80-\\xff]*$' },
      };
      break;
    case 'group': {
      const properties: Record<string, unknown> = {};
      const required: string[] = [];
      for (const [k, x] of Object.entries(f.fields)) {
        if (x.kind === 'function') continue;
        properties[k] = schemaOf(x);
        if (x.presence === 'required') required.push(k);
      }
      s = { type: 'object', properties, additionalProperties: false };
      if (required.length > 0) s['required'] = required;
      break;
    }
    case 'variants': {
      const oneOf: unknown[] = [];
      for (const [tag, v] of Object.entries(f.variants)) {
        if (v.kind === 'group' && Object.values(v.fields).some((x) => x.kind === 'function')) continue;
        const g = schemaOf(v) as { properties: Record<string, unknown>; required?: string[] };
        g.properties = { [f.tag]: { const: tag }, ...g.properties };
        g.required = [f.tag, ...(g.required ?? [])];
        oneOf.push(g);
      }
      s = { type: 'object', oneOf };
      break;
    }
    case 'delegate':
      s = { ...f.schema };
      break;
    case 'function':
      s = {};
      break;
  }
  if (f.nullable) s = { anyOf: [s, { type: 'null' }] };
  s['description'] = f.unit === undefined ? f.doc : `${f.doc} (${f.unit})`;
  if (f.default !== undefined) s['default'] = f.default;
  return s;
}

/** The JSON Schema of a config file for the options `root`. */
export function configJsonSchema(root: Declared, title: string): Record<string, unknown> {
  const s = schemaOf(root);
  const properties = s['properties'] as Record<string, unknown>;
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title,
    ...s,
    properties: { $schema: { type: 'string', description: 'where this schema is (editors read it)' }, ...properties },
  };
}
