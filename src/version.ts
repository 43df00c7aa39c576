/** The package's version, read once from its package.json. */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The nearest package.json above this module that is the router's own (the compiled tree sits two levels down). */
function ownPackageJson(): { version: string } {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (pkg.name === 'geofence-trigger-router') return pkg;
    } catch {
      // No package.json here: look further up.
    }
    const up = dirname(dir);
    if (up === dir) return { version: 'unknown' };
    dir = up;
  }
}

/** The version in package.json. */
export const PACKAGE_VERSION: string = ownPackageJson().version;
