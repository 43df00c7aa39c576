/**
 * Option validation shared by the dispatcher's modules: every message names the option and the allowed range.
 */

/** Throws a RangeError unless `value` is a finite number in [min, max] (and an integer when `integer`). */
export function checkNumber(name: string, value: unknown, min: number, max: number, integer = false): number {
  if (
    typeof value !== 'number' ||
    Number.isNaN(value) ||
    value < min ||
    value > max ||
    (integer && !Number.isInteger(value))
  ) {
    const kind = integer ? 'an integer' : 'a number';
    throw new RangeError(`${name} must be ${kind} in [${String(min)}, ${String(max)}], got ${String(value)}`);
  }
  return value;
}

/** Merges `options` over `defaults`, ignoring keys whose value is undefined. */
export function withDefaults<T extends object>(defaults: T, options: Partial<T> | undefined): T {
  const out = { ...defaults };
  if (options === undefined) return out;
  for (const key of Object.keys(options) as (keyof T)[]) {
    const v = options[key];
    if (v !== undefined) out[key] = v as T[keyof T];
  }
  return out;
}

/**
 * Throws a RangeError naming the first key of `options` that `defaults` does not have (a misspelt or foreign option
 * would otherwise be ignored without a word), or when `options` is not an object.
 */
export function refuseUnknownOptions(defaults: object, options: unknown, what: string): void {
  if (options === undefined) return;
  if (options === null || typeof options !== 'object' || Array.isArray(options))
    throw new RangeError(`${what} options must be an object, got ${String(options)}`);
  for (const k of Object.keys(options)) {
    if (!Object.hasOwn(defaults, k))
      throw new RangeError(`${k} is not a ${what} option (one of ${Object.keys(defaults).join(', ')})`);
  }
}
