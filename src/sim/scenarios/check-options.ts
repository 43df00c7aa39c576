/**
 * Option checks shared by the scenarios: the dispatcher's own helpers (`dispatch/validate.ts`), with every message
 * naming the option by its path from the caller's `options`.
 */
import { checkNumber, refuseUnknownOptions, withDefaults } from '../../dispatch/validate.js';

export { checkNumber, withDefaults };

/** Refuses an unknown key or a non-object, naming the group: `options.limiters[2]` etc. */
export function checkKeys(defaults: object, value: unknown, path: string): void {
  if (value === undefined) return;
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new RangeError(`${path} must be an object, got ${Array.isArray(value) ? 'an array' : String(value)}`);
  for (const k of Object.keys(value)) {
    if (!Object.hasOwn(defaults, k))
      throw new RangeError(`${path}.${k} is not an option (one of ${Object.keys(defaults).join(', ')})`);
  }
}

/** Throws unless `value` is one of `allowed`, naming the option. */
export function checkOneOf<T extends string>(path: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value))
    throw new RangeError(`${path} must be one of ${allowed.map((a) => `"${a}"`).join(', ')}, got ${String(value)}`);
  return value as T;
}

/**
 * Runs `build` (a production constructor that validates its own options with `<innerPrefix><name>` messages) and
 * names any option it refuses by `path`: `options.limiters[8].gradient.smoothing must be ...`.
 */
export function built<T>(
  path: string,
  what: string,
  defaults: object,
  options: unknown,
  build: () => T,
  innerPrefix = 'options.',
): T {
  try {
    refuseUnknownOptions(defaults, options, what);
    return build();
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    const m = e.message;
    throw new RangeError(m.startsWith(innerPrefix) ? `${path}.${m.slice(innerPrefix.length)}` : `${path}: ${m}`, {
      cause: e,
    });
  }
}
