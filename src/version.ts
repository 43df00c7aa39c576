/** The package's version, read once from its package.json (two levels above the compiled module). */
import { readFileSync } from 'node:fs';

/** The version in package.json. */
export const PACKAGE_VERSION: string = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
