/**
 * The vocabulary options are declared in: a field builder per kind of value (integer, number, boolean, choice, text,
 * list, string map, group, variants, function, delegated check), each carrying what every consumer of the definition
 * needs: doc line, unit, default, range, flag name, help section and the threads that read it. The router's options
 * are declared once with these (`router-option-spec.ts`); types (`Value` / `Input`), defaults, validation
 * (`option-check.ts`), `--help`, the README table and the JSON Schema (`option-docs.ts`) are all read from there.
 */

/** Threads an option is read on (the README's "threads" column; `threadSlice` picks the top-level options of one). */
export type ThreadName = 'main' | 'ingest' | 'containment' | 'dispatcher';

/**
 * Whether a group's key must be present: 'required' (no default: the value must be given), 'defaulted' (may be
 * omitted from input; the resolved value always has it), 'optional' (may be absent from input and resolved value).
 */
export type Presence = 'required' | 'defaulted' | 'optional';

/** What every field declares. */
interface Meta {
  /** One line for --help, the README table and the schema's description. */
  doc: string;
  /** Unit of a number ("ms", "bytes", "m", "m/s", "per s", "fraction"). */
  unit?: string;
  /** Command-line flag, without the dashes. */
  flag?: string;
  /** --help section of the flag (inherited from the enclosing group when absent). */
  section?: string;
  /** Threads that read it. */
  threads?: readonly ThreadName[];
  /** How the default reads in docs when it is computed (e.g. "cores - 1"). */
  defaultText?: string;
  /** The flags or environment that set it when no `flag` of its own does (README only; --help lists them apart). */
  cliText?: string;
}

/** A numeric field's range and its special values. */
interface NumberRange {
  /** Smallest value accepted. */
  min: number;
  /** Largest value accepted. */
  max: number;
  /** `min` itself is refused. */
  exclusiveMin?: boolean;
  /** `max` itself is refused. */
  exclusiveMax?: boolean;
  /** 0 is also accepted (and means "off"), whatever the range says. */
  zeroOff?: boolean;
  /** Only powers of two. */
  powerOfTwo?: boolean;
}

/** Text fields by what they hold (decides the message, the flag's placeholder and the schema's pattern). */
export type TextKind = 'host' | 'path' | 'name' | 'token' | 'url';

/** The kinds of field, with their own declarations. */
export type FieldSpec =
  | (Meta & NumberRange & { kind: 'int' | 'num'; default?: number })
  | (Meta & { kind: 'bool'; default?: boolean })
  | (Meta & { kind: 'choice'; values: readonly string[]; default?: string })
  | (Meta & { kind: 'text'; text: TextKind; protocols?: readonly string[]; default?: string | null })
  | (Meta & { kind: 'list'; item: Declared; default?: readonly unknown[] })
  | (Meta & { kind: 'map'; keyPattern: RegExp; keyRule: string; reservedKeys: readonly string[]; default?: undefined })
  | (Meta & {
      kind: 'group';
      fields: Readonly<Record<string, Declared>>;
      check?: GroupCheck;
      retired?: Readonly<Record<string, string>>;
      default?: undefined;
    })
  | (Meta & { kind: 'variants'; tag: string; variants: Readonly<Record<string, Declared>>; default?: undefined })
  | (Meta & { kind: 'function'; default?: undefined })
  | (Meta & { kind: 'delegate'; check: (value: unknown) => void; schema: object; default?: undefined });

/** A field as the consumers of the definition read it. */
export type Declared = FieldSpec & Presences;

/** How a field is present in a group, and whether it may be null. */
interface Presences {
  /** See Presence. */
  presence: Presence;
  /** null is a valid value. */
  nullable: boolean;
}

/** A declared field: its spec, the value it resolves to (T), what input accepts (I), and how it is present (P). */
export type Field<T, I = T, P extends Presence = Presence> = FieldSpec &
  Presences & {
    /** Phantom: the resolved value's type. */
    readonly __value?: T;
    /** Phantom: the input's type. */
    readonly __input?: I;
    /** Phantom: how the key is present. */
    readonly __presence?: P;
  };

/**
 * A cross-field rule of a group: returns what is wrong, naming options through `name` (a path below the group), or
 * undefined.
 */
export type GroupCheck = (
  value: Record<string, unknown>,
  name: (...path: (string | number)[]) => string,
) => string | undefined;

/** Any declared field. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyField = Field<any, any, Presence>;

/** The resolved value of a field. */
export type Value<F> = F extends Field<infer T, unknown, Presence> ? T : never;
/** What input accepts for a field. */
export type Input<F> = F extends Field<unknown, infer I, Presence> ? I : never;
type PresenceOf<F> = F extends Field<unknown, unknown, infer P> ? P : never;

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type KeysWhere<F, P> = { [K in keyof F]: PresenceOf<F[K]> extends P ? K : never }[keyof F];

/** The resolved object of a group's fields: optional fields may be absent, the rest are always there. */
type GroupValue<F> = Simplify<
  { -readonly [K in KeysWhere<F, 'required' | 'defaulted'>]: Value<F[K]> } & {
    -readonly [K in KeysWhere<F, 'optional'>]?: Value<F[K]>;
  }
>;
/** What input accepts for a group: only fields without a default are needed. */
type GroupInput<F> = Simplify<
  { -readonly [K in KeysWhere<F, 'required'>]: Input<F[K]> } & {
    -readonly [K in KeysWhere<F, 'defaulted' | 'optional'>]?: Input<F[K]>;
  }
>;
/** A group is defaulted when none of its fields is required. */
type GroupPresence<F> = KeysWhere<F, 'required'> extends never ? 'defaulted' : 'required';

/** Phantom marker of the threads a field is read on (see ThreadKeys). */
type Threaded<M> = M extends { threads: readonly (infer X)[] } ? { readonly __threads: X } : unknown;
/** Keys of a group's fields read on thread `T`. */
export type ThreadKeys<G, T extends ThreadName> = G extends Field<unknown, unknown, Presence> & { fields: infer F }
  ? { [K in keyof F]: F[K] extends { readonly __threads: infer X } ? (T extends X ? K : never) : never }[keyof F]
  : never;

type Has<M, K extends string> = M extends Record<K, unknown> ? 'defaulted' : 'required';

/** An integer field; `default` makes it omittable. */
export function int<const M extends Meta & NumberRange & { default?: number }>(
  m: M,
): Field<number, number, Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'int', presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** A number field (any finite number in range). */
export function num<const M extends Meta & NumberRange & { default?: number }>(
  m: M,
): Field<number, number, Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'num', presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** A boolean field; a flag for it takes no value and sets true. */
export function bool<const M extends Meta & { default?: boolean }>(
  m: M,
): Field<boolean, boolean, Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'bool', presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** One of a fixed set of strings. */
export function choice<const V extends readonly string[], const M extends Meta & { default?: V[number] }>(
  values: V,
  m: M,
): Field<V[number], V[number], Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'choice', values, presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** A non-empty string of a given kind (a token: 16+ characters without spaces; a URL: one of `protocols`). */
export function text<const M extends Meta & { default?: string; protocols?: readonly string[] }>(
  kind: TextKind,
  m: M,
): Field<string, string, Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'text', text: kind, presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** A list of items of one field kind. */
export function list<F extends AnyField, const M extends Meta & { default?: readonly Value<F>[] }>(
  item: F,
  m: M,
): Field<Value<F>[], Input<F>[], Has<M, 'default'>> & Threaded<M> {
  return { ...m, kind: 'list', item, presence: 'default' in m ? 'defaulted' : 'required', nullable: false };
}

/** An object of string values under keys that match `keyPattern`, none of `reservedKeys` (compared lower-cased). */
export function stringMap(
  m: Meta & { keyPattern: RegExp; keyRule: string; reservedKeys: readonly string[] },
): Field<Record<string, string>, Record<string, string>, 'required'> {
  return { ...m, kind: 'map', presence: 'required', nullable: false };
}

/** A group of named fields (an object); `check` states a rule across them. */
export function group<
  const F extends Readonly<Record<string, AnyField>>,
  const M extends Meta & { check?: GroupCheck; retired?: Readonly<Record<string, string>> },
>(fields: F, m: M): Field<GroupValue<F>, GroupInput<F>, GroupPresence<F>> & Threaded<M> & { fields: F } {
  const required = Object.values(fields).some((f) => f.presence === 'required');
  return { ...m, kind: 'group', fields, presence: required ? 'required' : 'defaulted', nullable: false };
}

/** One of several groups, told apart by the string field `tag` (e.g. a downstream by its `kind`). */
export function variants<const T extends string, const V extends Readonly<Record<string, AnyField>>>(
  tag: T,
  v: V,
  m: Meta,
): Field<
  { [K in keyof V]: Simplify<{ [P in T]: K } & Value<V[K]>> }[keyof V],
  { [K in keyof V]: Simplify<{ [P in T]: K } & Input<V[K]>> }[keyof V],
  'required'
> {
  return { ...m, kind: 'variants', tag, variants: v, presence: 'required', nullable: false };
}

/** A function (library use only: no flag, no config file, no schema). */
export function fn<T>(m: Meta): Field<T, T, 'required'> {
  return { ...m, kind: 'function', presence: 'required', nullable: false };
}

/** A value whose checks live with its owner (`check` throws a RangeError naming what is wrong). */
export function delegate<T>(m: Meta & { check: (value: unknown) => void; schema: object }): Field<T, T, 'required'> {
  return { ...m, kind: 'delegate', presence: 'required', nullable: false };
}

type Marks<F> = F extends { readonly __threads: infer X } ? { readonly __threads: X } : unknown;

/** The field, absent unless given (no default). */
export function optional<F extends AnyField>(f: F): Field<Value<F>, Input<F>, 'optional'> & Marks<F> {
  return { ...f, presence: 'optional' } as Field<Value<F>, Input<F>, 'optional'> & Marks<F>;
}

/** The field, or null; its default stays if it has one, else null is the default. */
export function nullable<F extends AnyField>(f: F): Field<Value<F> | null, Input<F> | null, 'defaulted'> & Marks<F> {
  const fallback: unknown = f.default === undefined ? null : f.default;
  return { ...f, nullable: true, presence: 'defaulted', default: fallback } as unknown as Field<
    Value<F> | null,
    Input<F> | null,
    'defaulted'
  > &
    Marks<F>;
}
