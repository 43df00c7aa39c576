/**
 * The router is native-free: it never loads a compiled add-on, whatever its consumer's npm settings install. msgpackr
 * is imported through its pure JavaScript entry (`msgpackr/unpack`, which never looks for msgpackr-extract) and piscina
 * runs without its nice-ness feature (the only use of @napi-rs/nice). This module checks it from the process report.
 */

/** Packages whose compiled add-ons the router's dependencies would load if asked to. */
const DEPENDENCY_ADDONS = ['msgpackr-extract', '@napi-rs/nice', 'napi-rs+nice'];

/** The compiled add-ons (`.node` files) loaded in this process, by path (every thread's: they share the process). */
function loadedNativeAddons(): string[] {
  const report = process.report.getReport() as { sharedObjects?: string[] };
  return (report.sharedObjects ?? []).filter((p) => p.endsWith('.node'));
}

/** The loaded add-ons that belong to the router's own dependencies (empty when the router is native-free). */
export function dependencyAddonsLoaded(): string[] {
  return loadedNativeAddons().filter((p) => DEPENDENCY_ADDONS.some((name) => p.includes(name)));
}
